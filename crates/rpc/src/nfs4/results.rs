//! Each operation's results, one function per operation in opcode order (RFC 7530 section 16,
//! RFC 8881 section 18, RFC 7862 section 15, RFC 8276 section 8.4).
//!
//! A function is called after the op's status has been read, and only when the status is
//! NFS4_OK or the op carries results on errors too ([`Op::results_on_error`]). It reads exactly
//! the rest of its `OPNAME4res` and returns `Ok(true)`, or `Ok(false)` when it cannot know where
//! the results end.
//!
//! [`Op::results_on_error`]: super::Op::results_on_error

use super::fattr::fattr4;
use super::types::*;
use super::{FhState, Walk, NFS4_OK};
use crate::xdr::Xdr;
use crate::{AttrObject, Error, NameEntry, NameRole, NfsOp};

const NFS4ERR_TOOSMALL: u32 = 10005;
const NFS4ERR_DENIED: u32 = 10010;
const NFS4ERR_CLID_INUSE: u32 = 10017;
const NFS4ERR_LAYOUTTRYLATER: u32 = 10058;

/// The shape every result decoder has. `done` holds the reply's ops before this one, whose
/// filehandles a GETFH may reveal.
pub(super) type Results = fn(&mut Xdr<'_>, &mut NfsOp, &mut FhState, &mut [NfsOp]) -> Walk;

fn status(op: &NfsOp) -> u32 {
    op.status.unwrap_or(NFS4_OK)
}

/// Operations whose result is their status alone.
pub(super) fn none(_: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    Ok(true)
}

/// COPY, COPY_NOTIFY, WRITE_SAME: not decoded, so the walk stops.
pub(super) fn not_walked(_: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    Ok(false)
}

/// ACCESS4resok: supported, access.
pub(super) fn access(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    skip_u32s(x, 2)?;
    Ok(true)
}

/// CLOSE4res: open_stateid.
pub(super) fn close(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    op.stateid = Some(stateid(x)?);
    Ok(true)
}

/// COMMIT4resok: writeverf.
pub(super) fn commit(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    x.skip(8)?;
    Ok(true)
}

/// CREATE4resok: cinfo, attrset.
pub(super) fn create(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    change_info(x)?;
    skip_bitmap(x)?;
    Ok(true)
}

/// GETATTR4resok: obj_attributes.
pub(super) fn getattr(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState, _: &mut [NfsOp]) -> Walk {
    fattr4(x, AttrObject::Object, st, &mut op.attrs)?;
    Ok(true)
}

/// GETFH4resok: object, the current filehandle, which also names what the ops since the last
/// known filehandle produced or used.
pub(super) fn getfh(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState, done: &mut [NfsOp]) -> Walk {
    let fh = fh4(x)?;
    for &i in &st.pending {
        if let Some(p) = done.get_mut(i) {
            p.fh = Some(fh.clone());
        }
    }
    op.fh = Some(fh.clone());
    st.cur = Some(fh);
    Ok(true)
}

/// LINK4resok: cinfo.
pub(super) fn link(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    change_info(x)?;
    Ok(true)
}

/// LOCK4res: the lock_stateid, or on NFS4ERR_DENIED the conflicting lock (LOCK4denied).
pub(super) fn lock(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    match status(op) {
        NFS4_OK => op.stateid = Some(stateid(x)?),
        NFS4ERR_DENIED => lock_denied(x)?,
        _ => {}
    }
    Ok(true)
}

/// LOCKT4res: on NFS4ERR_DENIED, the conflicting lock.
pub(super) fn lockt(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    if status(op) == NFS4ERR_DENIED {
        lock_denied(x)?;
    }
    Ok(true)
}

/// LOCKU4res: lock_stateid.
pub(super) fn locku(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    op.stateid = Some(stateid(x)?);
    Ok(true)
}

/// OPEN4resok: stateid, cinfo, rflags, attrset, delegation.
pub(super) fn open(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    op.stateid = Some(stateid(x)?);
    change_info(x)?;
    x.u32()?;
    skip_bitmap(x)?;
    open_delegation(x)?;
    Ok(true)
}

/// OPEN_CONFIRM4resok: open_stateid.
pub(super) fn open_confirm(
    x: &mut Xdr<'_>,
    op: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    op.stateid = Some(stateid(x)?);
    Ok(true)
}

/// OPEN_DOWNGRADE4resok: open_stateid.
pub(super) fn open_downgrade(
    x: &mut Xdr<'_>,
    op: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    op.stateid = Some(stateid(x)?);
    Ok(true)
}

/// READ4resok: eof, data (skipped; its length is what was returned).
pub(super) fn read(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    let eof = x.bool()?;
    let len = x.u32()?;
    let rw = rw(op);
    rw.eof = Some(eof);
    rw.returned = Some(len);
    x.skip(len as usize)?;
    Ok(true)
}

/// READDIR4resok: cookieverf, the entries with their attributes, eof.
pub(super) fn readdir(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState, _: &mut [NfsOp]) -> Walk {
    x.skip(8)?;
    readdir_entries(x, op, st)?;
    rw(op).eof = Some(x.bool()?);
    Ok(true)
}

/// dirlist4's entries: cookie, name and attributes each, named under the current filehandle.
fn readdir_entries(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Result<(), Error> {
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
    Ok(())
}

/// READLINK4resok: link.
pub(super) fn readlink(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    skip_opaque(x)?;
    Ok(true)
}

/// REMOVE4resok: cinfo.
pub(super) fn remove(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    change_info(x)?;
    Ok(true)
}

/// RENAME4resok: source_cinfo, target_cinfo.
pub(super) fn rename(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    change_info(x)?;
    change_info(x)?;
    Ok(true)
}

/// SAVEFH: no results; the current filehandle is saved.
pub(super) fn savefh(_: &mut Xdr<'_>, _: &mut NfsOp, st: &mut FhState, _: &mut [NfsOp]) -> Walk {
    st.saved = st.cur.clone();
    Ok(true)
}

/// SECINFO4resok (and SECINFO_NO_NAME4resok): the flavours.
pub(super) fn secinfo(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    secinfo4(x)?;
    Ok(true)
}

/// SETATTR4res: attrsset, on errors too.
pub(super) fn setattr(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    skip_bitmap(x)?;
    Ok(true)
}

/// SETCLIENTID4res: clientid and setclientid_confirm, or on NFS4ERR_CLID_INUSE the client
/// using the id (r_netid, r_addr).
pub(super) fn setclientid(
    x: &mut Xdr<'_>,
    op: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    match status(op) {
        NFS4_OK => x.skip(16)?,
        NFS4ERR_CLID_INUSE => {
            skip_opaque(x)?;
            skip_opaque(x)?;
        }
        _ => {}
    }
    Ok(true)
}

/// WRITE4resok: count, committed, writeverf.
pub(super) fn write(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    let rw = rw(op);
    rw.returned = Some(x.u32()?);
    rw.committed = Some(x.u32()?);
    x.skip(8)?;
    Ok(true)
}

/// BIND_CONN_TO_SESSION4resok: sessid, dir, use_conn_in_rdma_mode.
pub(super) fn bind_conn_to_session(
    x: &mut Xdr<'_>,
    _: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    x.skip(16)?;
    x.u32()?;
    x.bool()?;
    Ok(true)
}

/// EXCHANGE_ID4resok: clientid, sequenceid, flags, state_protect, server_owner (minor id,
/// major id), server_scope, server_impl_id.
pub(super) fn exchange_id(
    x: &mut Xdr<'_>,
    _: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    x.u64()?;
    skip_u32s(x, 2)?;
    match x.u32()? {
        0 => {}                     // SP4_NONE
        1 => state_protect_ops(x)?, // SP4_MACH_CRED
        2 => {
            // SP4_SSV: ops, hash and encryption algorithm, window, handles
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
    Ok(true)
}

/// CREATE_SESSION4resok: sessionid, sequence, flags, fore and back channel attributes.
pub(super) fn create_session(
    x: &mut Xdr<'_>,
    _: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    x.skip(16)?;
    skip_u32s(x, 2)?;
    channel_attrs(x)?;
    channel_attrs(x)?;
    Ok(true)
}

/// GET_DIR_DELEGATION4res_non_fatal: a delegation (cookieverf, stateid, notification types,
/// child and directory attributes), or why not (will_signal_deleg_avail).
pub(super) fn get_dir_delegation(
    x: &mut Xdr<'_>,
    op: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    if status(op) != NFS4_OK {
        return Ok(true);
    }
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
    Ok(true)
}

/// GETDEVICEINFO4res: device_addr (layout type, body) and notification, or on
/// NFS4ERR_TOOSMALL the mincount.
pub(super) fn getdeviceinfo(
    x: &mut Xdr<'_>,
    op: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    match status(op) {
        NFS4_OK => {
            x.u32()?;
            skip_opaque(x)?;
            skip_bitmap(x)?;
        }
        NFS4ERR_TOOSMALL => x.u32().map(|_| ())?,
        _ => {}
    }
    Ok(true)
}

/// GETDEVICELIST4resok: cookie, cookieverf, deviceid_list, eof.
pub(super) fn getdevicelist(
    x: &mut Xdr<'_>,
    _: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    x.skip(16)?;
    skip_array(x, 16, |x| x.skip(16))?;
    x.bool()?;
    Ok(true)
}

/// LAYOUTCOMMIT4resok: newsize (newsize4).
pub(super) fn layoutcommit(
    x: &mut Xdr<'_>,
    _: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    if x.bool()? {
        x.u64()?;
    }
    Ok(true)
}

/// LAYOUTGET4res: return_on_close, stateid, layouts (range, iomode, content); or on
/// NFS4ERR_LAYOUTTRYLATER will_signal_layout_avail.
pub(super) fn layoutget(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    match status(op) {
        NFS4_OK => {
            x.bool()?;
            op.stateid = Some(stateid(x)?);
            skip_array(x, 28, |x| {
                x.skip(20)?;
                x.u32()?;
                skip_opaque(x)
            })?;
        }
        NFS4ERR_LAYOUTTRYLATER => x.bool().map(|_| ())?,
        _ => {}
    }
    Ok(true)
}

/// LAYOUTRETURN4res: lrs_present, stateid.
pub(super) fn layoutreturn(
    x: &mut Xdr<'_>,
    op: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    if x.bool()? {
        op.stateid = Some(stateid(x)?);
    }
    Ok(true)
}

/// SEQUENCE4resok: sessionid, sequenceid, slotid, highest_slotid, target_highest_slotid,
/// status_flags.
pub(super) fn sequence(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    x.skip(16)?;
    skip_u32s(x, 5)?;
    Ok(true)
}

/// SET_SSV4resok: digest.
pub(super) fn set_ssv(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    skip_opaque(x)?;
    Ok(true)
}

/// TEST_STATEID4resok: status_codes.
pub(super) fn test_stateid(
    x: &mut Xdr<'_>,
    _: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    skip_array(x, 4, skip_u32)?;
    Ok(true)
}

/// WANT_DELEGATION4resok: an open_delegation4.
pub(super) fn want_delegation(
    x: &mut Xdr<'_>,
    _: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    open_delegation(x)?;
    Ok(true)
}

/// IO_ADVISE4resok: hints.
pub(super) fn io_advise(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    skip_bitmap(x)?;
    Ok(true)
}

/// OFFLOAD_STATUS4resok: count, complete<1>.
pub(super) fn offload_status(
    x: &mut Xdr<'_>,
    _: &mut NfsOp,
    _: &mut FhState,
    _: &mut [NfsOp],
) -> Walk {
    x.u64()?;
    skip_array(x, 4, skip_u32)?;
    Ok(true)
}

/// READ_PLUS4resok: eof, contents (data with its offset, or holes).
pub(super) fn read_plus(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    rw(op).eof = Some(x.bool()?);
    skip_array(x, 4, |x| match x.u32()? {
        0 => {
            x.u64()?;
            skip_opaque(x)
        }
        1 => x.skip(16),
        _ => Err(Error::Invalid("data_content4 out of range")),
    })?;
    Ok(true)
}

/// SEEK4resok: eof, offset.
pub(super) fn seek(x: &mut Xdr<'_>, op: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    rw(op).eof = Some(x.bool()?);
    rw(op).offset = Some(x.u64()?);
    Ok(true)
}

/// GETXATTR4resok: value.
pub(super) fn getxattr(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    skip_opaque(x)?;
    Ok(true)
}

/// SETXATTR4resok (and REMOVEXATTR4resok): cinfo.
pub(super) fn setxattr(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    change_info(x)?;
    Ok(true)
}

/// LISTXATTRS4resok: cookie, names, eof.
pub(super) fn listxattrs(x: &mut Xdr<'_>, _: &mut NfsOp, _: &mut FhState, _: &mut [NfsOp]) -> Walk {
    x.u64()?;
    skip_array(x, 4, skip_opaque)?;
    x.bool()?;
    Ok(true)
}
