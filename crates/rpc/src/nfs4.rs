//! NFSv4.0/4.1/4.2 COMPOUND procedures (RFC 7530, 8881, 7862, 8276).
//!
//! A COMPOUND is a sequence of operations with no lengths on the wire, so each operation's
//! arguments and results must be walked exactly to reach the next one. Operations this module
//! cannot walk (COPY, WRITE_SAME, ...) stop the walk and are reported in
//! [`Decoded::undecoded_op`]. Along a call, the current and saved filehandles are tracked the way
//! the server will track them, so that READ/WRITE and name operations know their handles.

use crate::names::nfs4_op_name;
use crate::xdr::{Xdr, UNBOUNDED};
use crate::{
    time_ns, AttrObject, Attrs, Compound, Decoded, Error, NameEntry, NameRole, NfsOp, ReadWrite,
};

const NFS4_FHSIZE: usize = 128;
const NFS4_OK: u32 = 0;
const NFS4ERR_DENIED: u32 = 10010;
const NFS4ERR_CLID_INUSE: u32 = 10017;
const NFS4ERR_LAYOUTTRYLATER: u32 = 10058;
const NFS4ERR_TOOSMALL: u32 = 10005;

/// Decodes a call: procedure 0 (NULL) has no body, 1 is COMPOUND.
pub fn decode_call(proc_: u32, body: &[u8]) -> Decoded {
    decode_with(proc_, body, compound_call)
}

/// Decodes a reply to procedure `proc_` (0 NULL, 1 COMPOUND).
pub fn decode_reply(proc_: u32, body: &[u8]) -> Decoded {
    decode_with(proc_, body, compound_reply)
}

fn decode_with(
    proc_: u32,
    body: &[u8],
    f: fn(&mut Xdr<'_>, &mut Decoded) -> Result<(), Error>,
) -> Decoded {
    let mut d = Decoded::default();
    let mut x = Xdr::new(body);
    let r = match proc_ {
        0 => Ok(()),
        1 => f(&mut x, &mut d),
        _ => Err(Error::Invalid(
            "NFSv4 procedure is neither NULL nor COMPOUND",
        )),
    };
    d.finish(r, &x);
    d
}

/// Filehandle state along a COMPOUND. `None` means "set, but not known from this message".
#[derive(Default)]
struct FhState {
    cur: Option<Vec<u8>>,
    saved: Option<Vec<u8>>,
    /// Replies: indices of the ops that produced or used the current filehandle while it is
    /// unknown, which a GETFH names.
    pending: Vec<usize>,
    unknown_attr_lists: u32,
}

/// An op's decoder result: `Ok(false)` means "cannot walk past this op's arguments or results".
type Walk = Result<bool, Error>;

fn new_op(index: u32, op: u32) -> NfsOp {
    NfsOp {
        index: u16::try_from(index).unwrap_or(u16::MAX),
        op,
        op_name: nfs4_op_name(op),
        ..Default::default()
    }
}

fn compound_call(x: &mut Xdr<'_>, d: &mut Decoded) -> Result<(), Error> {
    let compound = d.compound.insert(Compound::default());
    compound.tag = x.string(UNBOUNDED)?.to_vec();
    compound.minorversion = Some(x.u32()?);
    // No count() check here: a cut COMPOUND still yields the ops that fit. Each op reads at least
    // its opcode, so the loop ends within the body.
    let n = x.u32()?;
    compound.num_ops = n;
    let mut st = FhState::default();
    let r = (|| {
        for i in 0..n {
            let opnum = x.u32()?;
            let mut op = new_op(i, opnum);
            op.fh = st.cur.clone();
            let r = call_op(x, &mut op, &mut st);
            d.ops.push(op);
            if !r? {
                d.undecoded_op = Some(opnum);
                break;
            }
        }
        Ok(())
    })();
    d.unknown_attr_lists += st.unknown_attr_lists;
    r
}

fn compound_reply(x: &mut Xdr<'_>, d: &mut Decoded) -> Result<(), Error> {
    let compound = d.compound.insert(Compound::default());
    compound.status = Some(x.u32()?);
    compound.tag = x.string(UNBOUNDED)?.to_vec();
    let n = x.u32()?;
    compound.num_ops = n;
    let mut st = FhState::default();
    let r = (|| {
        for i in 0..n {
            let opnum = x.u32()?;
            let mut op = new_op(i, opnum);
            let r = (|| {
                let status = x.u32()?;
                op.status = Some(status);
                reply_op(x, &mut op, &mut st, &mut d.ops)
            })();
            let failed = op.status != Some(NFS4_OK);
            d.ops.push(op);
            if !r? {
                d.undecoded_op = Some(opnum);
                break;
            }
            // The server stops at the first failing op; its reply ends there.
            if failed {
                break;
            }
        }
        Ok(())
    })();
    d.unknown_attr_lists += st.unknown_attr_lists;
    r
}

fn fh4(x: &mut Xdr<'_>) -> Result<Vec<u8>, Error> {
    Ok(x.opaque(NFS4_FHSIZE)?.to_vec())
}

fn component(x: &mut Xdr<'_>) -> Result<Vec<u8>, Error> {
    Ok(x.string(UNBOUNDED)?.to_vec())
}

fn stateid(x: &mut Xdr<'_>) -> Result<[u8; 16], Error> {
    let b = x.fixed(16)?;
    let mut s = [0; 16];
    s.copy_from_slice(b);
    Ok(s)
}

/// A bitmap4 as its raw words (big-endian u32s).
fn bitmap<'a>(x: &mut Xdr<'a>) -> Result<&'a [u8], Error> {
    let n = x.count(4)? as usize;
    x.fixed(n * 4)
}

fn skip_fattr4(x: &mut Xdr<'_>) -> Result<(), Error> {
    bitmap(x)?;
    x.opaque(UNBOUNDED).map(|_| ())
}

fn nfstime4(x: &mut Xdr<'_>) -> Result<Option<i64>, Error> {
    let sec = x.i64()?;
    let nsec = x.u32()?;
    Ok(time_ns(sec, nsec))
}

fn skip_u32s(x: &mut Xdr<'_>, n: usize) -> Result<(), Error> {
    x.skip(4 * n)
}

fn skip_array(
    x: &mut Xdr<'_>,
    min_item: usize,
    mut item: impl FnMut(&mut Xdr<'_>) -> Result<(), Error>,
) -> Result<(), Error> {
    let n = x.count(min_item)?;
    for _ in 0..n {
        item(x)?;
    }
    Ok(())
}

fn skip_opaque(x: &mut Xdr<'_>) -> Result<(), Error> {
    x.opaque(UNBOUNDED).map(|_| ())
}

fn rw(op: &mut NfsOp) -> &mut ReadWrite {
    op.rw.get_or_insert_with(ReadWrite::default)
}

fn name_under(op: &mut NfsOp, dir: &Option<Vec<u8>>, role: NameRole, name: Vec<u8>) {
    op.names.push(NameEntry {
        role,
        dir_fh: dir.clone(),
        name,
        ..Default::default()
    });
}

/// callback_sec_parms4<>: false when a flavour has no known encoding.
fn callback_sec_parms(x: &mut Xdr<'_>) -> Walk {
    let n = x.count(4)?;
    for _ in 0..n {
        match x.u32()? {
            0 => {}
            1 => {
                x.u32()?;
                x.string(255)?;
                skip_u32s(x, 2)?;
                skip_array(x, 4, |x| x.u32().map(|_| ()))?;
            }
            6 => {
                x.u32()?;
                skip_opaque(x)?;
                skip_opaque(x)?;
            }
            _ => return Ok(false),
        }
    }
    Ok(true)
}

fn channel_attrs(x: &mut Xdr<'_>) -> Result<(), Error> {
    skip_u32s(x, 6)?;
    skip_array(x, 4, |x| x.u32().map(|_| ()))
}

fn state_protect_ops(x: &mut Xdr<'_>) -> Result<(), Error> {
    bitmap(x)?;
    bitmap(x).map(|_| ())
}

fn impl_id(x: &mut Xdr<'_>) -> Result<(), Error> {
    skip_array(x, 20, |x| {
        skip_opaque(x)?;
        skip_opaque(x)?;
        x.skip(12)
    })
}

fn call_op(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Walk {
    match op.op {
        3 | 52 => x.u32().map(|_| ())?, // ACCESS, SECINFO_NO_NAME
        4 => {
            x.u32()?;
            op.stateid = Some(stateid(x)?);
        }
        5 => {
            let rw = rw(op);
            rw.offset = Some(x.u64()?);
            rw.count = Some(x.u32()?);
        }
        6 => {
            match x.u32()? {
                5 => skip_opaque(x)?,
                3 | 4 => x.skip(8)?,
                _ => {}
            }
            let name = component(x)?;
            name_under(op, &st.cur, NameRole::Target, name);
            st.cur = None;
            skip_fattr4(x)?;
        }
        7 | 30 | 57 => x.u64().map(|_| ())?, // DELEGPURGE, RENEW, DESTROY_CLIENTID
        8 | 45 | 66 | 67 => op.stateid = Some(stateid(x)?),
        9 => bitmap(x).map(|_| ())?,
        10 | 27 | 10044 => {}
        11 => {
            let name = component(x)?;
            op.names.push(NameEntry {
                role: NameRole::Target,
                dir_fh: st.cur.clone(),
                name,
                fh: st.saved.clone(),
                ..Default::default()
            });
        }
        12 => {
            x.u32()?;
            x.bool()?;
            x.u64()?;
            x.u64()?;
            if x.bool()? {
                x.u32()?;
                op.stateid = Some(stateid(x)?);
                x.u32()?;
                x.u64()?;
                skip_opaque(x)?;
            } else {
                op.stateid = Some(stateid(x)?);
                x.u32()?;
            }
        }
        13 => {
            x.u32()?;
            x.skip(24)?;
            skip_opaque(x)?;
        }
        14 => {
            skip_u32s(x, 2)?;
            op.stateid = Some(stateid(x)?);
            x.skip(16)?;
        }
        15 => {
            let name = component(x)?;
            name_under(op, &st.cur, NameRole::Target, name);
            st.cur = None;
        }
        16 | 19 => {
            if op.op == 19 {
                x.bool()?;
            }
            st.cur = None;
        }
        17 | 37 => skip_fattr4(x)?, // NVERIFY, VERIFY
        18 => return open_args(x, op, st),
        20 => {
            op.stateid = Some(stateid(x)?);
            x.u32()?;
        }
        21 => {
            op.stateid = Some(stateid(x)?);
            skip_u32s(x, 3)?;
        }
        22 => {
            let fh = fh4(x)?;
            op.fh = Some(fh.clone());
            st.cur = Some(fh);
        }
        23 | 24 => {
            op.fh = None;
            st.cur = None;
        }
        25 | 68 => {
            op.stateid = Some(stateid(x)?);
            let rw = rw(op);
            rw.offset = Some(x.u64()?);
            rw.count = Some(x.u32()?);
        }
        26 => {
            x.u64()?;
            x.skip(8)?;
            skip_u32s(x, 2)?;
            bitmap(x)?;
        }
        28 => {
            let name = component(x)?;
            name_under(op, &st.cur, NameRole::Target, name);
        }
        29 => {
            let from = component(x)?;
            name_under(op, &st.saved, NameRole::RenameFrom, from);
            let to = component(x)?;
            name_under(op, &st.cur, NameRole::RenameTo, to);
        }
        31 => {
            st.cur = st.saved.clone();
        }
        32 => st.saved = st.cur.clone(),
        33 => {
            component(x)?;
            st.cur = None; // SECINFO consumes the current filehandle
        }
        34 => {
            op.stateid = Some(stateid(x)?);
            skip_fattr4(x)?;
        }
        35 => {
            x.skip(8)?;
            skip_opaque(x)?;
            x.u32()?;
            skip_opaque(x)?;
            skip_opaque(x)?;
            x.u32()?;
        }
        36 => x.skip(16)?,
        38 => {
            op.stateid = Some(stateid(x)?);
            let rw = rw(op);
            rw.offset = Some(x.u64()?);
            rw.stable = Some(x.u32()?);
            // The length comes before the data: keep it even when the data was not captured.
            let len = x.u32()?;
            rw.count = Some(len);
            x.skip(len as usize)?;
        }
        39 => {
            x.u64()?;
            skip_opaque(x)?;
        }
        40 => {
            x.u32()?;
            return callback_sec_parms(x);
        }
        41 => {
            x.skip(16)?;
            x.u32()?;
            x.bool()?;
        }
        42 => {
            x.skip(8)?;
            skip_opaque(x)?;
            x.u32()?;
            match x.u32()? {
                0 => {}
                1 => state_protect_ops(x)?,
                2 => {
                    state_protect_ops(x)?;
                    skip_array(x, 4, skip_opaque)?;
                    skip_array(x, 4, skip_opaque)?;
                    skip_u32s(x, 2)?;
                }
                _ => return Ok(false),
            }
            impl_id(x)?;
        }
        43 => {
            x.u64()?;
            skip_u32s(x, 2)?;
            channel_attrs(x)?;
            channel_attrs(x)?;
            x.u32()?;
            return callback_sec_parms(x);
        }
        44 => x.skip(16)?,
        46 => {
            x.bool()?;
            bitmap(x)?;
            x.skip(24)?;
            bitmap(x)?;
            bitmap(x)?;
        }
        47 => {
            x.skip(16)?;
            skip_u32s(x, 2)?;
            bitmap(x)?;
        }
        48 => {
            skip_u32s(x, 2)?;
            x.skip(16)?;
        }
        49 => {
            x.skip(16)?;
            x.bool()?;
            op.stateid = Some(stateid(x)?);
            if x.bool()? {
                x.u64()?;
            }
            if x.bool()? {
                x.skip(12)?;
            }
            x.u32()?;
            skip_opaque(x)?;
        }
        50 => {
            x.bool()?;
            skip_u32s(x, 2)?;
            x.skip(24)?;
            op.stateid = Some(stateid(x)?);
            x.u32()?;
        }
        51 => {
            x.bool()?;
            skip_u32s(x, 2)?;
            match x.u32()? {
                1 => {
                    x.skip(16)?;
                    op.stateid = Some(stateid(x)?);
                    skip_opaque(x)?;
                }
                2 | 3 => {}
                _ => return Ok(false),
            }
        }
        53 => {
            x.skip(16)?;
            skip_u32s(x, 3)?;
            x.bool()?;
        }
        54 => {
            skip_opaque(x)?;
            skip_opaque(x)?;
        }
        55 => skip_array(x, 16, |x| x.skip(16))?,
        56 => {
            x.u32()?;
            match x.u32()? {
                1 => x.u32().map(|_| ())?,
                4 | 6 => {}
                _ => return Ok(false),
            }
        }
        58 => x.bool().map(|_| ())?,
        59 | 62 => {
            op.stateid = Some(stateid(x)?);
            let rw = rw(op);
            rw.offset = Some(x.u64()?);
            x.u64()?;
        }
        63 => {
            op.stateid = Some(stateid(x)?);
            x.skip(16)?;
            bitmap(x)?;
        }
        69 => {
            op.stateid = Some(stateid(x)?);
            rw(op).offset = Some(x.u64()?);
            x.u32()?;
        }
        71 => {
            op.stateid = Some(stateid(x)?);
            x.skip(16 + 24)?;
        }
        72 | 75 => {
            component(x)?;
        }
        73 => {
            x.u32()?;
            component(x)?;
            skip_opaque(x)?;
        }
        74 => {
            x.u64()?;
            x.u32()?;
        }
        _ => return Ok(false), // COPY, COPY_NOTIFY, LAYOUTERROR, LAYOUTSTATS, WRITE_SAME, unknown
    }
    Ok(true)
}

fn open_args(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Walk {
    skip_u32s(x, 3)?; // seqid, share_access, share_deny
    x.u64()?; // open_owner4 clientid
    skip_opaque(x)?; // owner
    if x.u32()? == 1 {
        // OPEN4_CREATE: createhow4
        match x.u32()? {
            0 | 1 => skip_fattr4(x)?,
            2 => x.skip(8)?,
            3 => {
                x.skip(8)?;
                skip_fattr4(x)?;
            }
            _ => return Err(Error::Invalid("createmode4 out of range")),
        }
    }
    match x.u32()? {
        0 | 3 => {
            // CLAIM_NULL, CLAIM_DELEGATE_PREV: a name under the current (directory) handle
            let name = component(x)?;
            name_under(op, &st.cur, NameRole::Target, name);
            st.cur = None;
        }
        1 => x.u32().map(|_| ())?, // CLAIM_PREVIOUS: the current fh is the file
        2 => {
            op.stateid = Some(stateid(x)?);
            let name = component(x)?;
            name_under(op, &st.cur, NameRole::Target, name);
            st.cur = None;
        }
        4 | 6 => {}
        5 => op.stateid = Some(stateid(x)?),
        _ => return Err(Error::Invalid("open_claim_type4 out of range")),
    }
    Ok(true)
}

fn change_info(x: &mut Xdr<'_>) -> Result<(), Error> {
    x.bool()?;
    x.skip(16)
}

fn nfsace4(x: &mut Xdr<'_>) -> Result<(), Error> {
    skip_u32s(x, 3)?;
    skip_opaque(x)
}

fn open_delegation(x: &mut Xdr<'_>) -> Result<(), Error> {
    match x.u32()? {
        0 => Ok(()),
        1 => {
            x.skip(16)?;
            x.bool()?;
            nfsace4(x)
        }
        2 => {
            x.skip(16)?;
            x.bool()?;
            match x.u32()? {
                1 => x.skip(8)?,
                2 => skip_u32s(x, 2)?,
                _ => return Err(Error::Invalid("limit_by4 out of range")),
            }
            nfsace4(x)
        }
        3 => match x.u32()? {
            1 | 2 => x.bool().map(|_| ()),
            _ => Ok(()),
        },
        _ => Err(Error::Invalid("open_delegation_type4 out of range")),
    }
}

fn lock_denied(x: &mut Xdr<'_>) -> Result<(), Error> {
    x.skip(16)?;
    x.u32()?;
    x.u64()?;
    skip_opaque(x)
}

fn secinfo(x: &mut Xdr<'_>) -> Result<(), Error> {
    skip_array(x, 4, |x| {
        if x.u32()? == 6 {
            skip_opaque(x)?;
            skip_u32s(x, 2)?;
        }
        Ok(())
    })
}

/// The op changes the current filehandle to one the reply does not state (until a GETFH).
fn sets_unknown_fh(op: u32) -> bool {
    matches!(op, 6 | 15 | 16 | 18 | 19 | 22 | 23 | 24 | 31)
}

fn reply_op(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState, done: &mut [NfsOp]) -> Walk {
    let status = op.status.unwrap_or(NFS4_OK);
    let ok = status == NFS4_OK;
    if ok && sets_unknown_fh(op.op) {
        st.cur = None;
        st.pending.clear();
        st.pending.push(done.len());
    } else if op.op != 10 {
        op.fh = st.cur.clone();
        if st.cur.is_none() && !st.pending.is_empty() {
            // Acts on the handle the pending ops produced (LOOKUP; GETATTR; GETFH): the GETFH
            // names it too.
            st.pending.push(done.len());
        }
    }
    // Results beyond the status exist only on success, except where noted.
    if !ok && !matches!(op.op, 12 | 13 | 34 | 35 | 46 | 47 | 50) {
        return Ok(true);
    }
    match op.op {
        3 => skip_u32s(x, 2)?,
        4 | 14 | 20 | 21 => op.stateid = Some(stateid(x)?),
        5 => x.skip(8)?,
        6 => {
            change_info(x)?;
            bitmap(x)?;
        }
        9 => fattr4(x, AttrObject::Object, st, &mut op.attrs)?,
        10 => {
            let fh = fh4(x)?;
            for &i in &st.pending {
                if let Some(p) = done.get_mut(i) {
                    p.fh = Some(fh.clone());
                }
            }
            op.fh = Some(fh.clone());
            st.cur = Some(fh);
        }
        11 | 28 | 73 | 75 => change_info(x)?,
        12 => {
            if ok {
                op.stateid = Some(stateid(x)?);
            } else if status == NFS4ERR_DENIED {
                lock_denied(x)?;
            }
        }
        13 => {
            if status == NFS4ERR_DENIED {
                lock_denied(x)?;
            }
        }
        18 => {
            op.stateid = Some(stateid(x)?);
            change_info(x)?;
            x.u32()?;
            bitmap(x)?;
            open_delegation(x)?;
        }
        25 => {
            let eof = x.bool()?;
            let len = x.u32()?;
            let rw = rw(op);
            rw.eof = Some(eof);
            rw.returned = Some(len);
            x.skip(len as usize)?;
        }
        26 => readdir_results(x, op, st)?,
        27 => skip_opaque(x)?,
        29 => {
            change_info(x)?;
            change_info(x)?;
        }
        33 | 52 => secinfo(x)?,
        34 => bitmap(x).map(|_| ())?,
        35 => {
            if ok {
                x.skip(16)?;
            } else if status == NFS4ERR_CLID_INUSE {
                skip_opaque(x)?;
                skip_opaque(x)?;
            }
        }
        38 => {
            let rw = rw(op);
            rw.returned = Some(x.u32()?);
            rw.committed = Some(x.u32()?);
            x.skip(8)?;
        }
        41 => {
            x.skip(16)?;
            x.u32()?;
            x.bool()?;
        }
        42 => {
            x.u64()?;
            skip_u32s(x, 2)?;
            match x.u32()? {
                0 => {}
                1 => state_protect_ops(x)?,
                2 => {
                    state_protect_ops(x)?;
                    skip_u32s(x, 4)?;
                    skip_array(x, 4, skip_opaque)?;
                }
                _ => return Ok(false),
            }
            x.u64()?;
            skip_opaque(x)?;
            skip_opaque(x)?;
            impl_id(x)?;
        }
        43 => {
            x.skip(16)?;
            skip_u32s(x, 2)?;
            channel_attrs(x)?;
            channel_attrs(x)?;
        }
        46 => {
            if ok {
                match x.u32()? {
                    0 => {
                        x.skip(8)?;
                        op.stateid = Some(stateid(x)?);
                        bitmap(x)?;
                        bitmap(x)?;
                        bitmap(x)?;
                    }
                    1 => x.bool().map(|_| ())?,
                    _ => return Ok(false),
                }
            }
        }
        47 => {
            if ok {
                x.u32()?;
                skip_opaque(x)?;
                bitmap(x)?;
            } else if status == NFS4ERR_TOOSMALL {
                x.u32()?;
            }
        }
        48 => {
            x.skip(16)?;
            skip_array(x, 16, |x| x.skip(16))?;
            x.bool()?;
        }
        49 => {
            if x.bool()? {
                x.u64()?;
            }
        }
        50 => {
            if ok {
                x.bool()?;
                op.stateid = Some(stateid(x)?);
                skip_array(x, 28, |x| {
                    x.skip(20)?;
                    x.u32()?;
                    skip_opaque(x)
                })?;
            } else if status == NFS4ERR_LAYOUTTRYLATER {
                x.bool()?;
            }
        }
        51 => {
            if x.bool()? {
                op.stateid = Some(stateid(x)?);
            }
        }
        53 => {
            x.skip(16)?;
            skip_u32s(x, 5)?;
        }
        54 | 72 => skip_opaque(x)?,
        55 => skip_array(x, 4, |x| x.u32().map(|_| ()))?,
        56 => open_delegation(x)?,
        63 => bitmap(x).map(|_| ())?,
        67 => {
            x.u64()?;
            skip_array(x, 4, |x| x.u32().map(|_| ()))?;
        }
        68 => {
            rw(op).eof = Some(x.bool()?);
            skip_array(x, 4, |x| match x.u32()? {
                0 => {
                    x.u64()?;
                    skip_opaque(x)
                }
                1 => x.skip(16),
                _ => Err(Error::Invalid("data_content4 out of range")),
            })?;
        }
        69 => {
            rw(op).eof = Some(x.bool()?);
            rw(op).offset = Some(x.u64()?);
        }
        74 => {
            x.u64()?;
            skip_array(x, 4, skip_opaque)?;
            x.bool()?;
        }
        7 | 8 | 15 | 16 | 17 | 19 | 22 | 23 | 24 | 30 | 31 | 32 | 36 | 37 | 39 | 40 | 44 | 45
        | 57 | 58 | 59 | 62 | 64 | 65 | 66 | 71 | 10044 => {}
        _ => return Ok(false), // COPY, COPY_NOTIFY, WRITE_SAME, unknown
    }
    if op.op == 32 {
        st.saved = st.cur.clone();
    }
    Ok(true)
}

fn readdir_results(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Result<(), Error> {
    x.skip(8)?; // cookieverf
    while x.bool()? {
        let cookie = x.u64()?;
        let name = component(x)?;
        let index = op.names.len() as u32;
        op.names.push(NameEntry {
            role: NameRole::DirEntry,
            dir_fh: st.cur.clone(),
            name,
            cookie: Some(cookie),
            ..Default::default()
        });
        let before = op.attrs.len();
        let r = fattr4(x, AttrObject::Entry(index), st, &mut op.attrs);
        if let (Some(a), Some(e)) = (op.attrs.get(before), op.names.last_mut()) {
            e.fileid = a.fileid;
            e.fh = a.fh.clone();
        }
        r?;
    }
    rw(op).eof = Some(x.bool()?);
    Ok(())
}

/// Decodes an fattr4 into `out`: the bitmap says which attributes follow, in bit order, each
/// with its own fixed encoding. An attribute without a decoder ends the walk of that list
/// (counted), since its length cannot be known; the list itself has a length, so the message
/// walk goes on. A list cut by the end of the message yields the attributes before the cut.
fn fattr4(
    x: &mut Xdr<'_>,
    object: AttrObject,
    st: &mut FhState,
    out: &mut Vec<Attrs>,
) -> Result<(), Error> {
    let words = bitmap(x)?;
    let (list, cut) = x.opaque_prefix()?;
    let mut a = Attrs {
        object,
        ..Default::default()
    };
    let mut y = Xdr::new(list);
    let mut r = Ok(());
    'walk: for (w, word) in words.chunks_exact(4).enumerate() {
        let word = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        for bit in 0..32 {
            if word & (1 << bit) == 0 {
                continue;
            }
            let attr = (w as u32).saturating_mul(32).saturating_add(bit);
            match attribute(attr, &mut y, &mut a) {
                Ok(true) => {}
                Err(Error::Truncated) if cut => {
                    r = Err(Error::Truncated);
                    break 'walk;
                }
                Ok(false) | Err(_) => {
                    st.unknown_attr_lists += 1;
                    break 'walk;
                }
            }
        }
    }
    out.push(a);
    if cut {
        return Err(Error::Truncated);
    }
    r
}

fn number(s: &[u8]) -> Option<u32> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Reads one attribute by number into `a`; false for attributes without a decoder.
fn attribute(attr: u32, y: &mut Xdr<'_>, a: &mut Attrs) -> Walk {
    match attr {
        1 => a.ftype = Some(y.u32()?),
        3 => a.change = Some(y.u64()?),
        4 => a.size = Some(y.u64()?),
        8 => a.fsid = Some((y.u64()?, y.u64()?)),
        19 => a.fh = Some(fh4(y)?),
        20 => a.fileid = Some(y.u64()?),
        33 => a.mode = Some(y.u32()?),
        35 => a.nlink = Some(y.u32()?),
        36 => {
            let s = y.string(UNBOUNDED)?;
            a.uid = number(s);
            a.owner = Some(s.to_vec());
        }
        37 => {
            let s = y.string(UNBOUNDED)?;
            a.gid = number(s);
            a.owner_group = Some(s.to_vec());
        }
        41 => a.rdev = Some((y.u32()?, y.u32()?)),
        45 => a.used = Some(y.u64()?),
        47 => a.atime_ns = nfstime4(y)?,
        52 => a.ctime_ns = nfstime4(y)?,
        53 => a.mtime_ns = nfstime4(y)?,
        // bool and u32 attributes
        2 | 5 | 6 | 7 | 9 | 10 | 11 | 13 | 14 | 15 | 16 | 17 | 18 | 25 | 26 | 28 | 29 | 34 | 46
        | 64 | 65 | 75 | 76 | 78 | 81 => y.skip(4)?,
        // u64 attributes
        21 | 22 | 23 | 27 | 30 | 31 | 38 | 39 | 40 | 42 | 43 | 44 | 55 | 72 | 77 => y.skip(8)?,
        0 | 74 => bitmap(y).map(|_| ())?,
        12 => acl(y)?,
        24 => {
            pathname(y)?;
            skip_array(y, 8, |y| {
                skip_array(y, 4, skip_opaque)?;
                pathname(y)
            })?;
        }
        32 => skip_opaque(y)?,
        48 | 54 => {
            if y.u32()? == 1 {
                y.skip(12)?;
            }
        }
        49 | 50 | 51 | 56 | 57 => y.skip(12)?,
        58 | 59 => {
            y.u32()?;
            acl(y)?;
        }
        60 | 73 | 80 => y.skip(if attr == 60 { 16 } else { 8 })?,
        61 => {
            y.bool()?;
            y.u32()?;
            skip_opaque(y)?;
            skip_opaque(y)?;
            y.skip(4 + 12)?;
        }
        62 => skip_array(y, 4, |y| y.skip(4))?,
        63 => {
            y.u32()?;
            skip_opaque(y)?;
        }
        68 | 70 => {
            y.u64()?;
            skip_array(y, 12, |y| y.skip(12))?;
        }
        69 | 71 => {
            y.bool()?;
            skip_array(y, 8, |y| y.skip(8))?;
        }
        79 => {
            skip_u32s(y, 2)?;
            skip_opaque(y)?;
        }
        _ => return Ok(false), // fs_locations_info, mdsthreshold, and numbers past 4.2
    }
    Ok(true)
}

fn acl(y: &mut Xdr<'_>) -> Result<(), Error> {
    skip_array(y, 16, nfsace4)
}

fn pathname(y: &mut Xdr<'_>) -> Result<(), Error> {
    skip_array(y, 4, skip_opaque)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::nfs3::tests::W;

    pub(crate) const FH_DIR: &[u8] = &[0xd1; 12];
    pub(crate) const FH_FILE: &[u8] = &[0xf1; 16];

    fn compound_call_body(tag: &[u8], minor: u32, ops: &[W]) -> Vec<u8> {
        let mut w = W::default().opaque(tag).u32(minor).u32(ops.len() as u32);
        for op in ops {
            w = w.fixed(&op.0);
        }
        w.0
    }

    fn compound_reply_body(status: u32, tag: &[u8], ops: &[W]) -> Vec<u8> {
        let mut w = W::default().u32(status).opaque(tag).u32(ops.len() as u32);
        for op in ops {
            w = w.fixed(&op.0);
        }
        w.0
    }

    fn sid(n: u8) -> [u8; 16] {
        [n; 16]
    }

    /// fattr4 with type, mode, numlinks, owner, owner_group, size, space_used, fileid, times.
    pub(crate) fn fattr4_full(w: W, fileid: u64) -> W {
        // bits: 1 type, 3 change, 4 size, 8 fsid, 20 fileid | 33 mode, 35 numlinks, 36 owner,
        // 37 owner_group, 45 space_used, 47 time_access, 52 time_metadata, 53 time_modify
        let w0: u32 = 1 << 1 | 1 << 3 | 1 << 4 | 1 << 8 | 1 << 20;
        let w1: u32 = 1 << 1 | 1 << 3 | 1 << 4 | 1 << 5 | 1 << 13 | 1 << 15 | 1 << 20 | 1 << 21;
        let list = W::default()
            .u32(1)
            .u64(77)
            .u64(5000)
            .u64(1)
            .u64(2)
            .u64(fileid)
            .u32(0o755)
            .u32(3)
            .opaque(b"1000")
            .opaque(b"staff@example.org")
            .u64(8192)
            .u64(1_700_000_000)
            .u32(5)
            .u64(1_700_000_001)
            .u32(6)
            .u64(1_700_000_002)
            .u32(7);
        w.u32(2).u32(w0).u32(w1).opaque(&list.0)
    }

    /// PUTFH dir; OPEN name (create unchecked, claim null); GETFH; READ; WRITE; CLOSE.
    pub(crate) fn open_read_write_call() -> Vec<u8> {
        compound_call_body(
            b"open",
            1,
            &[
                W::default()
                    .u32(53)
                    .fixed(&[9; 16])
                    .u32(1)
                    .u32(0)
                    .u32(0)
                    .u32(1),
                W::default().u32(22).opaque(FH_DIR),
                W::default()
                    .u32(18)
                    .u32(0)
                    .u32(2)
                    .u32(0)
                    .u64(7)
                    .opaque(b"owner")
                    .u32(1)
                    .u32(0)
                    .u32(1)
                    .u32(0)
                    .u32(0)
                    .u32(0)
                    .opaque(b"data.bin"),
                W::default().u32(10),
                W::default().u32(25).fixed(&sid(1)).u64(4096).u32(8192),
                W::default()
                    .u32(38)
                    .fixed(&sid(1))
                    .u64(0)
                    .u32(2)
                    .opaque(b"hello"),
                W::default().u32(4).u32(0).fixed(&sid(1)),
            ],
        )
    }

    #[test]
    fn open_read_write_call_tracks_the_current_filehandle() {
        let d = decode_call(1, &open_read_write_call());
        assert!(
            !d.truncated && d.invalid.is_none() && d.undecoded_op.is_none(),
            "{d:?}"
        );
        let c = d.compound.as_ref().unwrap();
        assert_eq!(
            (c.tag.as_slice(), c.minorversion, c.num_ops),
            (&b"open"[..], Some(1), 7)
        );
        let names: Vec<_> = d.ops.iter().map(|o| o.op_name).collect();
        assert_eq!(
            names,
            ["SEQUENCE", "PUTFH", "OPEN", "GETFH", "READ", "WRITE", "CLOSE"]
        );
        assert_eq!(d.ops[1].fh.as_deref(), Some(FH_DIR));
        let open = &d.ops[2];
        assert_eq!(open.names[0].name, b"data.bin");
        assert_eq!(open.names[0].dir_fh.as_deref(), Some(FH_DIR));
        // After OPEN the current fh is the opened file, unknown to the call.
        assert_eq!(d.ops[4].fh, None);
        let read = d.ops[4].rw.unwrap();
        assert_eq!((read.offset, read.count), (Some(4096), Some(8192)));
        assert_eq!(d.ops[4].stateid, Some(sid(1)));
        let write = d.ops[5].rw.unwrap();
        assert_eq!(
            (write.offset, write.count, write.stable),
            (Some(0), Some(5), Some(2))
        );
    }

    pub(crate) fn open_read_write_reply() -> Vec<u8> {
        compound_reply_body(
            0,
            b"open",
            &[
                W::default()
                    .u32(53)
                    .u32(0)
                    .fixed(&[9; 16])
                    .u32(1)
                    .u32(0)
                    .u32(0)
                    .u32(0)
                    .u32(0),
                W::default().u32(22).u32(0),
                W::default()
                    .u32(18)
                    .u32(0)
                    .fixed(&sid(2))
                    .u32(1)
                    .u64(1)
                    .u64(2)
                    .u32(4)
                    .u32(0)
                    .u32(0),
                W::default().u32(10).u32(0).opaque(FH_FILE),
                W::default().u32(25).u32(0).u32(1).opaque(b"0123456789"),
                W::default().u32(38).u32(0).u32(5).u32(2).fixed(&[0; 8]),
                W::default().u32(4).u32(0).fixed(&sid(3)),
            ],
        )
    }

    #[test]
    fn open_read_write_reply_names_the_opened_file() {
        let r = decode_reply(1, &open_read_write_reply());
        assert!(
            !r.truncated && r.invalid.is_none() && r.undecoded_op.is_none(),
            "{r:?}"
        );
        assert_eq!(r.ops.len(), 7);
        assert!(r.ops.iter().all(|o| o.status == Some(0)));
        assert_eq!(r.ops[2].stateid, Some(sid(2)));
        assert_eq!(
            r.ops[2].fh.as_deref(),
            Some(FH_FILE),
            "GETFH names what OPEN produced"
        );
        assert_eq!(r.ops[4].fh.as_deref(), Some(FH_FILE));
        let read = r.ops[4].rw.unwrap();
        assert_eq!((read.returned, read.eof), (Some(10), Some(true)));
        let write = r.ops[5].rw.unwrap();
        assert_eq!((write.returned, write.committed), (Some(5), Some(2)));
        let call = decode_call(1, &open_read_write_call());
        let names = crate::resolve_names(&call, &r);
        assert_eq!(names.len(), 1);
        assert_eq!(names[0].fh.as_deref(), Some(FH_FILE));
        assert_eq!(names[0].dir_fh.as_deref(), Some(FH_DIR));
    }

    #[test]
    fn getattr_decodes_known_attributes() {
        let body = compound_reply_body(
            0,
            b"",
            &[
                W::default().u32(22).u32(0),
                fattr4_full(W::default().u32(9).u32(0), 4242),
            ],
        );
        let d = decode_reply(1, &body);
        assert_eq!(d.unknown_attr_lists, 0);
        let a = &d.ops[1].attrs[0];
        assert_eq!(
            (a.ftype, a.change, a.size, a.fsid, a.fileid),
            (Some(1), Some(77), Some(5000), Some((1, 2)), Some(4242))
        );
        assert_eq!(
            (a.mode, a.nlink, a.uid, a.gid),
            (Some(0o755), Some(3), Some(1000), None)
        );
        assert_eq!(a.owner_group.as_deref(), Some(&b"staff@example.org"[..]));
        assert_eq!(
            (a.used, a.atime_ns, a.ctime_ns, a.mtime_ns),
            (
                Some(8192),
                Some(1_700_000_000_000_000_005),
                Some(1_700_000_001_000_000_006),
                Some(1_700_000_002_000_000_007)
            )
        );
    }

    #[test]
    fn ops_between_a_lookup_and_its_getfh_get_the_revealed_handle() {
        // PUTROOTFH; LOOKUP; GETATTR; GETFH; ACCESS (libnfs's usual pattern).
        let body = compound_reply_body(
            0,
            b"",
            &[
                W::default().u32(24).u32(0),
                W::default().u32(15).u32(0),
                fattr4_full(W::default().u32(9).u32(0), 4242),
                W::default().u32(10).u32(0).opaque(FH_FILE),
                W::default().u32(3).u32(0).u32(1).u32(1),
            ],
        );
        let d = decode_reply(1, &body);
        let fhs: Vec<Option<&[u8]>> = d.ops.iter().map(|o| o.fh.as_deref()).collect();
        assert_eq!(
            fhs,
            vec![
                None,
                Some(FH_FILE),
                Some(FH_FILE),
                Some(FH_FILE),
                Some(FH_FILE)
            ]
        );
    }

    #[test]
    fn an_unknown_attribute_stops_its_list_but_not_the_compound() {
        // bit 1 type, then bit 66 (fs_locations_info, no decoder) in word 2, then nothing we read
        let list = W::default().u32(2).u32(0xdead_beef);
        let body = compound_reply_body(
            0,
            b"",
            &[
                W::default()
                    .u32(9)
                    .u32(0)
                    .u32(3)
                    .u32(1 << 1)
                    .u32(0)
                    .u32(1 << 2)
                    .opaque(&list.0),
                W::default().u32(10).u32(0).opaque(FH_FILE),
            ],
        );
        let d = decode_reply(1, &body);
        assert_eq!(d.unknown_attr_lists, 1);
        assert_eq!(d.ops[0].attrs[0].ftype, Some(2));
        assert_eq!(d.ops[1].fh.as_deref(), Some(FH_FILE));
        assert!(!d.truncated && d.invalid.is_none());
    }

    #[test]
    fn the_reply_ends_at_the_first_failing_op() {
        // NFS4ERR_NOENT (2) on LOOKUP; num_ops says 2 (the ops executed), nothing follows.
        let body = compound_reply_body(
            2,
            b"",
            &[W::default().u32(22).u32(0), W::default().u32(15).u32(2)],
        );
        let d = decode_reply(1, &body);
        assert_eq!(d.compound.as_ref().unwrap().status, Some(2));
        assert_eq!(
            d.ops.iter().map(|o| o.status).collect::<Vec<_>>(),
            [Some(0), Some(2)]
        );
        assert!(!d.truncated);
        // Even if the count said more, decoding stops at the failing op.
        let mut body = body;
        body[11] = 5;
        let d = decode_reply(1, &body);
        assert_eq!(d.ops.len(), 2);
        assert!(!d.truncated);
    }

    #[test]
    fn names_follow_saved_and_current_handles() {
        let body = compound_call_body(
            b"",
            0,
            &[
                W::default().u32(22).opaque(FH_DIR),
                W::default().u32(32),
                W::default().u32(22).opaque(FH_FILE),
                W::default().u32(29).opaque(b"old").opaque(b"new"),
                W::default().u32(28).opaque(b"gone"),
                W::default().u32(15).opaque(b"sub"),
                W::default().u32(31),
                W::default().u32(11).opaque(b"hard"),
                W::default()
                    .u32(6)
                    .u32(5)
                    .opaque(b"/target")
                    .opaque(b"sym")
                    .u32(0)
                    .u32(0),
            ],
        );
        let d = decode_call(1, &body);
        assert!(!d.truncated && d.invalid.is_none(), "{d:?}");
        let rename = &d.ops[3].names;
        assert_eq!(
            (rename[0].dir_fh.as_deref(), rename[1].dir_fh.as_deref()),
            (Some(FH_DIR), Some(FH_FILE))
        );
        assert_eq!(d.ops[4].names[0].dir_fh.as_deref(), Some(FH_FILE));
        assert_eq!(d.ops[5].names[0].dir_fh.as_deref(), Some(FH_FILE));
        // RESTOREFH brings back FH_DIR; LINK's source is the saved FH_DIR too.
        assert_eq!(d.ops[7].names[0].dir_fh.as_deref(), Some(FH_DIR));
        assert_eq!(d.ops[8].names[0].name, b"sym");
    }

    #[test]
    fn readdir_entries_with_attributes() {
        let w = W::default()
            .u32(26)
            .u32(0)
            .fixed(&[0; 8])
            .u32(1)
            .u64(100)
            .opaque(b"a.txt");
        let w = fattr4_full(w, 501).u32(1).u64(200).opaque(b"b.txt");
        let entry2 = W::default()
            .u32(2)
            .u32(1 << 19 | 1 << 20)
            .u32(0)
            .opaque(&W::default().opaque(FH_FILE).u64(502).0);
        let w = w.fixed(&entry2.0).u32(0).u32(1);
        let d = decode_reply(1, &compound_reply_body(0, b"", &[w]));
        assert!(!d.truncated && d.invalid.is_none(), "{d:?}");
        let n = &d.ops[0].names;
        assert_eq!(
            n.iter()
                .map(|e| (e.name.as_slice(), e.cookie, e.fileid))
                .collect::<Vec<_>>(),
            [
                (&b"a.txt"[..], Some(100), Some(501)),
                (&b"b.txt"[..], Some(200), Some(502))
            ]
        );
        assert_eq!(n[1].fh.as_deref(), Some(FH_FILE));
        assert_eq!(d.ops[0].attrs[1].object, AttrObject::Entry(1));
    }

    #[test]
    fn undecodable_ops_stop_the_walk() {
        let body = compound_call_body(
            b"",
            2,
            &[
                W::default().u32(22).opaque(FH_FILE),
                W::default().u32(60).u32(1),
                W::default().u32(10),
            ],
        );
        let d = decode_call(1, &body);
        assert_eq!(d.undecoded_op, Some(60));
        assert_eq!(d.ops.len(), 2);
        assert_eq!(d.ops[1].op_name, "COPY");
    }

    #[test]
    fn exchange_id_and_create_session_are_walked() {
        let call = compound_call_body(
            b"",
            1,
            &[
                W::default()
                    .u32(42)
                    .fixed(&[1; 8])
                    .opaque(b"Linux NFSv4.1 client")
                    .u32(0x101)
                    .u32(0)
                    .u32(1)
                    .opaque(b"kernel.org")
                    .opaque(b"Linux")
                    .u64(1)
                    .u32(0),
                W::default()
                    .u32(43)
                    .u64(5)
                    .u32(1)
                    .u32(3)
                    .u32(0)
                    .u32(1 << 20)
                    .u32(1 << 20)
                    .u32(4096)
                    .u32(8)
                    .u32(64)
                    .u32(0)
                    .u32(0)
                    .u32(4096)
                    .u32(4096)
                    .u32(0)
                    .u32(2)
                    .u32(1)
                    .u32(0)
                    .u32(0x40000000)
                    .u32(1)
                    .u32(1)
                    .u32(0)
                    .u32(0)
                    .u32(0)
                    .u32(0)
                    .u32(0),
                W::default().u32(58).u32(0),
            ],
        );
        let d = decode_call(1, &call);
        assert!(
            !d.truncated && d.invalid.is_none() && d.undecoded_op.is_none(),
            "{d:?}"
        );
        assert_eq!(d.ops.len(), 3);
    }

    #[test]
    fn every_cut_and_byte_flip_is_survived() {
        for (reply, body) in [
            (false, open_read_write_call()),
            (true, open_read_write_reply()),
        ] {
            let f = if reply { decode_reply } else { decode_call };
            for n in 0..body.len() {
                let d = f(1, &body[..n]);
                assert!(d.truncated || d.invalid.is_some(), "cut at {n}");
            }
            for i in 0..body.len() {
                for v in [0x00, 0xff, 0x01, 0x80] {
                    let mut b = body.clone();
                    b[i] = v;
                    let _ = f(1, &b);
                }
            }
        }
    }
}
