//! NFSv4.0/4.1/4.2 COMPOUND procedures (RFC 7530, 8881, 7862, 8276).
//!
//! A COMPOUND is a sequence of operations with no lengths on the wire, so each operation's
//! arguments and results must be walked exactly to reach the next one. [`Op`] lists the
//! operations in opcode order with the function that walks each one's arguments (`args`) and
//! results (`results`); attributes are in `fattr`, the types operations share in `types`.
//! Operations this module cannot walk (COPY, WRITE_SAME, ...) stop the walk and are reported
//! in [`Decoded::undecoded_op`]. Along a call, the current and saved filehandles are tracked the
//! way the server will track them, so that READ/WRITE and name operations know their handles.

mod args;
#[cfg(test)]
mod captured;
mod fattr;
#[cfg(test)]
mod layouts;
mod op;
mod results;
mod types;

pub use op::Op;

use crate::xdr::{Xdr, UNBOUNDED};
use crate::{Compound, Decoded, Error, NfsOp};

const NFS4_OK: u32 = 0;

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
        op_name: Op::name_of(op),
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

/// One operation's arguments; an opcode no minor version defines cannot be walked past.
fn call_op(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState) -> Walk {
    match Op::from_u32(op.op) {
        Some(code) => code.args()(x, op, st),
        None => Ok(false),
    }
}

/// One operation's results (its status already read). `done` holds the ops before it.
fn reply_op(x: &mut Xdr<'_>, op: &mut NfsOp, st: &mut FhState, done: &mut [NfsOp]) -> Walk {
    let code = Op::from_u32(op.op);
    let ok = op.status.unwrap_or(NFS4_OK) == NFS4_OK;
    track_reply_fh(code, ok, op, st, done.len());
    // Results beyond the status exist only on success, except where noted.
    if !ok && !code.is_some_and(Op::results_on_error) {
        return Ok(true);
    }
    match code {
        Some(code) => code.results()(x, op, st, done),
        None => Ok(false),
    }
}

/// A reply states the current filehandle only in GETFH: until one does, the ops that set or
/// used the unknown handle are remembered (by their index `at`) for it to name.
fn track_reply_fh(code: Option<Op>, ok: bool, op: &mut NfsOp, st: &mut FhState, at: usize) {
    if ok && code.is_some_and(Op::sets_unknown_fh) {
        st.cur = None;
        st.pending.clear();
        st.pending.push(at);
    } else if code != Some(Op::Getfh) {
        op.fh = st.cur.clone();
        if st.cur.is_none() && !st.pending.is_empty() {
            // Acts on the handle the pending ops produced (LOOKUP; GETATTR; GETFH): the GETFH
            // names it too.
            st.pending.push(at);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::nfs3::tests::W;

    use crate::AttrObject;

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
