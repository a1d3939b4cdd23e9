//! NFSv2 (RFC 1094) procedure arguments and results.
//!
//! The same shape as [`crate::nfs3`]: each decoder fills one [`NfsOp`] as it reads, so a body
//! cut short keeps what came before the cut, and data payloads are skipped, not copied. What
//! differs from v3: file handles are a fixed 32 bytes, sizes and offsets are 32 bits, times are
//! seconds and microseconds, READDIR cookies are 4 opaque bytes, and replies carry attributes
//! only where v3 has a post_op_attr that is always present (no wcc_data, no optional attributes).

use crate::names::nfs2_proc_name;
use crate::xdr::{Xdr, UNBOUNDED};
use crate::{AttrObject, Attrs, Decoded, Error, NameEntry, NameRole, NfsOp, ReadWrite};

/// `FHSIZE`: a v2 handle is an opaque of exactly this many bytes, with no length on the wire.
pub const FHSIZE: usize = 32;
/// `NFS_COOKIESIZE`: a READDIR cookie.
const COOKIESIZE: usize = 4;
const NFS_OK: u32 = 0;

const NULL: u32 = 0;
const GETATTR: u32 = 1;
const SETATTR: u32 = 2;
const ROOT: u32 = 3;
const LOOKUP: u32 = 4;
const READLINK: u32 = 5;
const READ: u32 = 6;
const WRITECACHE: u32 = 7;
const WRITE: u32 = 8;
const CREATE: u32 = 9;
const REMOVE: u32 = 10;
const RENAME: u32 = 11;
const LINK: u32 = 12;
const SYMLINK: u32 = 13;
const MKDIR: u32 = 14;
const RMDIR: u32 = 15;
const READDIR: u32 = 16;
const STATFS: u32 = 17;

/// Decodes NFSv2 call arguments into one op.
pub fn decode_call(proc_: u32, body: &[u8]) -> Decoded {
    decode_with(proc_, body, call_args)
}

/// Decodes NFSv2 reply results into one op; `proc_` is the call's procedure.
pub fn decode_reply(proc_: u32, body: &[u8]) -> Decoded {
    decode_with(proc_, body, reply_results)
}

fn decode_with(
    proc_: u32,
    body: &[u8],
    f: fn(u32, &mut Xdr<'_>, &mut NfsOp) -> Result<(), Error>,
) -> Decoded {
    crate::decode_procedure(
        proc_,
        body,
        (STATFS, "NFSv2 procedure number out of range"),
        nfs2_proc_name,
        f,
    )
}

/// fhandle: 32 opaque bytes without a length.
fn fh(x: &mut Xdr<'_>) -> Result<Vec<u8>, Error> {
    Ok(x.fixed(FHSIZE)?.to_vec())
}

fn filename(x: &mut Xdr<'_>) -> Result<Vec<u8>, Error> {
    Ok(x.string(UNBOUNDED)?.to_vec())
}

/// timeval: seconds and microseconds, as nanoseconds since the epoch (exactly: both are
/// unsigned 32-bit, so the product cannot overflow an i64).
fn timeval(x: &mut Xdr<'_>) -> Result<i64, Error> {
    let sec = x.u32()? as i64;
    let usec = x.u32()? as i64;
    Ok(sec * 1_000_000_000 + usec * 1_000)
}

/// fattr, field by field: a cut capture keeps the fields before the cut. The 32-bit fsid
/// goes into `fsid.0` and rdev into `rdev.0` (the other halves 0), as v3's fsid does; v2 has
/// no bytes-used attribute, only `blocks` of `blocksize`, which are kept apart.
fn fattr(x: &mut Xdr<'_>, a: &mut Attrs) -> Result<(), Error> {
    a.ftype = Some(x.u32()?);
    a.mode = Some(x.u32()?);
    a.nlink = Some(x.u32()?);
    a.uid = Some(x.u32()?);
    a.gid = Some(x.u32()?);
    a.size = Some(x.u32()?.into());
    a.blocksize = Some(x.u32()?);
    a.rdev = Some((x.u32()?, 0));
    a.blocks = Some(x.u32()?);
    a.fsid = Some((x.u32()?.into(), 0));
    a.fileid = Some(x.u32()?.into());
    a.atime_ns = Some(timeval(x)?);
    a.mtime_ns = Some(timeval(x)?);
    a.ctime_ns = Some(timeval(x)?);
    Ok(())
}

/// An fattr added to `out` with whatever of it is present.
pub(crate) fn push_fattr(
    x: &mut Xdr<'_>,
    object: AttrObject,
    out: &mut Vec<Attrs>,
) -> Result<(), Error> {
    let mut a = Attrs {
        object,
        ..Default::default()
    };
    let r = fattr(x, &mut a);
    if a.ftype.is_some() {
        out.push(a);
    }
    r
}

/// sattr: mode, uid, gid, size, atime, mtime; all-ones words mean "do not set". Calls'
/// attributes have no table, so they are only walked past.
fn sattr(x: &mut Xdr<'_>) -> Result<(), Error> {
    for _ in 0..4 {
        x.u32()?;
    }
    timeval(x)?;
    timeval(x).map(|_| ())
}

/// diropargs as a name entry under its directory; the directory also becomes the op's fh.
fn diropargs(x: &mut Xdr<'_>, op: &mut NfsOp, role: NameRole) -> Result<(), Error> {
    let dir = fh(x)?;
    if op.fh.is_none() {
        op.fh = Some(dir.clone());
    }
    let name = filename(x)?;
    op.names.push(NameEntry {
        role,
        dir_fh: Some(dir),
        name,
        ..Default::default()
    });
    Ok(())
}

fn call_args(proc_: u32, x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    match proc_ {
        NULL | ROOT | WRITECACHE => Ok(()),
        GETATTR | READLINK | STATFS => {
            op.fh = Some(fh(x)?);
            Ok(())
        }
        SETATTR => {
            op.fh = Some(fh(x)?);
            sattr(x)
        }
        LOOKUP | REMOVE | RMDIR => diropargs(x, op, NameRole::Target),
        READ => read_args(x, op),
        WRITE => write_args(x, op),
        CREATE | MKDIR => {
            diropargs(x, op, NameRole::Target)?;
            sattr(x)
        }
        RENAME => {
            diropargs(x, op, NameRole::RenameFrom)?;
            diropargs(x, op, NameRole::RenameTo)
        }
        LINK => link_args(x, op),
        SYMLINK => {
            diropargs(x, op, NameRole::Target)?;
            x.string(UNBOUNDED)?; // the link's contents
            sattr(x)
        }
        READDIR => readdir_args(x, op),
        _ => Err(Error::Invalid("NFSv2 procedure number out of range")),
    }
}

/// readargs: file, offset, count, totalcount (unused).
fn read_args(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    op.fh = Some(fh(x)?);
    let rw = op.rw.insert(ReadWrite::default());
    rw.offset = Some(x.u32()?.into());
    rw.count = Some(x.u32()?);
    x.u32().map(|_| ())
}

/// writeargs: file, beginoffset and totalcount (both unused), offset, data. The count offered
/// is the data's length; v2 writes have no stability argument (every write is synchronous).
fn write_args(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    op.fh = Some(fh(x)?);
    x.u32()?; // beginoffset
    let rw = op.rw.insert(ReadWrite::default());
    rw.offset = Some(x.u32()?.into());
    x.u32()?; // totalcount
    let len = x.u32()?;
    rw.count = Some(len);
    x.skip(len as usize)
}

/// linkargs: from (the existing file), to (the directory and name of the new link).
fn link_args(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    let file = fh(x)?;
    op.fh = Some(file.clone());
    let dir = fh(x)?;
    let name = filename(x)?;
    op.names.push(NameEntry {
        role: NameRole::Target,
        dir_fh: Some(dir),
        name,
        fh: Some(file),
        ..Default::default()
    });
    Ok(())
}

/// readdirargs: dir, cookie, count.
fn readdir_args(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    op.fh = Some(fh(x)?);
    x.skip(COOKIESIZE)?;
    op.rw.get_or_insert_with(ReadWrite::default).count = Some(x.u32()?);
    Ok(())
}

fn reply_results(proc_: u32, x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    if matches!(proc_, NULL | ROOT | WRITECACHE) {
        return Ok(());
    }
    let status = x.u32()?;
    op.status = Some(status);
    if status != NFS_OK {
        // Every v2 result is a union on the status with nothing in the error arms.
        return Ok(());
    }
    match proc_ {
        // attrstat
        GETATTR | SETATTR | WRITE => push_fattr(x, AttrObject::Object, &mut op.attrs),
        // diropres: the object's handle and attributes
        LOOKUP | CREATE | MKDIR => {
            op.fh = Some(fh(x)?);
            push_fattr(x, AttrObject::Object, &mut op.attrs)
        }
        READLINK => x.string(UNBOUNDED).map(|_| ()),
        READ => read_results(x, op),
        // stat only
        REMOVE | RENAME | LINK | SYMLINK | RMDIR => Ok(()),
        READDIR => readdir_results(x, op),
        STATFS => x.skip(5 * 4), // tsize, bsize, blocks, bfree, bavail
        _ => Err(Error::Invalid("NFSv2 procedure number out of range")),
    }
}

/// readres: attributes, data (skipped; its length is the count returned). v2 has no eof flag.
fn read_results(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    push_fattr(x, AttrObject::Object, &mut op.attrs)?;
    let len = x.u32()?;
    op.rw.insert(ReadWrite::default()).returned = Some(len);
    x.skip(len as usize)
}

/// readdirres: entries (fileid, name, cookie), eof.
fn readdir_results(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    // Each entry takes at least 4 bytes, so the list ends within the body.
    while x.bool()? {
        let fileid = x.u32()?;
        let name = filename(x)?;
        let c = x.fixed(COOKIESIZE)?;
        op.names.push(NameEntry {
            role: NameRole::DirEntry,
            name,
            fileid: Some(fileid.into()),
            cookie: Some(u32::from_be_bytes([c[0], c[1], c[2], c[3]]).into()),
            ..Default::default()
        });
    }
    let eof = x.bool()?;
    op.rw.get_or_insert_with(ReadWrite::default).eof = Some(eof);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs3::tests::W;
    use crate::Outcome;

    const DIR: [u8; 32] = [0xd; 32];
    const FILE: [u8; 32] = [0xf; 32];

    /// An fattr of a regular file: 1999-12-03 07:46:10.34 access, .49 modify and change.
    fn fattr(w: W, fileid: u32) -> W {
        w.u32(1)
            .u32(0o100644)
            .u32(2)
            .u32(0)
            .u32(1)
            .u32(11)
            .u32(16384)
            .u32(0)
            .u32(2)
            .u32(0x0010_1085)
            .u32(fileid)
            .u32(944_207_170)
            .u32(340_000)
            .u32(944_207_170)
            .u32(490_000)
            .u32(944_207_170)
            .u32(490_000)
    }

    fn sattr_unset(w: W) -> W {
        (0..8).fold(w, |w, _| w.u32(u32::MAX))
    }

    #[test]
    fn handles_are_fixed_32_bytes() {
        let d = decode_call(GETATTR, &FILE);
        assert_eq!(d.ops[0].fh.as_deref(), Some(&FILE[..]));
        assert!(!d.truncated && d.invalid.is_none());
        assert!(decode_call(GETATTR, &FILE[..31]).truncated);
        assert_eq!(decode_call(GETATTR, &FILE).ops[0].op_name, "GETATTR");
    }

    #[test]
    fn attributes_convert_microseconds_exactly() {
        let reply = fattr(W::default().u32(0), 45661).0;
        let d = decode_reply(GETATTR, &reply);
        let a = &d.ops[0].attrs[0];
        assert_eq!(
            (a.ftype, a.mode, a.nlink, a.uid, a.gid, a.size),
            (Some(1), Some(0o100644), Some(2), Some(0), Some(1), Some(11))
        );
        assert_eq!(
            (a.blocksize, a.blocks, a.rdev, a.fsid, a.fileid, a.used),
            (
                Some(16384),
                Some(2),
                Some((0, 0)),
                Some((0x0010_1085, 0)),
                Some(45661),
                None
            )
        );
        assert_eq!(a.atime_ns, Some(944_207_170_340_000_000));
        assert_eq!(a.mtime_ns, Some(944_207_170_490_000_000));
        // The largest times v2 can carry still fit.
        let max = W::default().u32(u32::MAX).u32(u32::MAX).0;
        assert_eq!(
            timeval(&mut Xdr::new(&max)),
            Ok(u32::MAX as i64 * 1_000_000_000 + u32::MAX as i64 * 1_000)
        );
        // An error status has no attributes after it.
        let d = decode_reply(GETATTR, &W::default().u32(70).0);
        assert_eq!((d.ops[0].status, d.ops[0].attrs.len()), (Some(70), 0));
        assert!(!d.truncated);
    }

    #[test]
    fn read_and_write() {
        let call = W::default().fixed(&FILE).u32(8192).u32(4096).u32(4096).0;
        let op = &decode_call(READ, &call).ops[0];
        assert_eq!(op.fh.as_deref(), Some(&FILE[..]));
        let rw = op.rw.unwrap();
        assert_eq!((rw.offset, rw.count), (Some(8192), Some(4096)));
        let reply = fattr(W::default().u32(0), 7).opaque(b"the b file\n").0;
        let d = decode_reply(READ, &reply);
        let rw = d.ops[0].rw.unwrap();
        assert_eq!((rw.returned, rw.eof), (Some(11), None));
        assert_eq!(d.ops[0].attrs.len(), 1);
        // A header-only capture cuts the data: the length read before the cut stays.
        let d = decode_reply(READ, &reply[..reply.len() - 6]);
        assert!(d.truncated);
        assert_eq!(d.ops[0].rw.unwrap().returned, Some(11));

        let call = W::default()
            .fixed(&FILE)
            .u32(0)
            .u32(100)
            .u32(0)
            .opaque(b"hallo\n")
            .0;
        let rw = decode_call(WRITE, &call).ops[0].rw.unwrap();
        assert_eq!((rw.offset, rw.count, rw.stable), (Some(100), Some(6), None));
        let d = decode_reply(WRITE, &fattr(W::default().u32(0), 7).0);
        assert_eq!(d.ops[0].attrs[0].fileid, Some(7));
        assert_eq!(
            d.ops[0].rw, None,
            "a v2 WRITE reply does not say how much was written"
        );
    }

    #[test]
    fn names_and_handles_of_directory_operations() {
        let call = W::default().fixed(&DIR).opaque(b"a").0;
        let d = decode_call(LOOKUP, &call);
        let n = &d.ops[0].names[0];
        assert_eq!(
            (n.name.as_slice(), n.dir_fh.as_deref()),
            (&b"a"[..], Some(&DIR[..]))
        );
        let reply = fattr(W::default().u32(0).fixed(&FILE), 9).0;
        let r = decode_reply(LOOKUP, &reply);
        assert_eq!(r.ops[0].fh.as_deref(), Some(&FILE[..]));
        assert_eq!(r.ops[0].attrs[0].object, AttrObject::Object);
        assert_eq!(
            crate::resolve_names(&d, &r)[0].fh.as_deref(),
            Some(&FILE[..])
        );
        let noent = decode_reply(LOOKUP, &W::default().u32(2).0);
        assert_eq!(
            (noent.ops[0].status, noent.ops[0].fh.as_ref()),
            (Some(2), None)
        );

        let call = sattr_unset(W::default().fixed(&DIR).opaque(b"new")).0;
        for proc_ in [CREATE, MKDIR] {
            let d = decode_call(proc_, &call);
            assert!(!d.truncated && d.invalid.is_none());
            assert_eq!(d.ops[0].names[0].name, b"new");
        }
        let call = W::default()
            .fixed(&DIR)
            .opaque(b"a")
            .fixed(&FILE)
            .opaque(b"am")
            .0;
        let n = &decode_call(RENAME, &call).ops[0].names;
        assert_eq!(
            (n[0].role, n[1].role, n[1].dir_fh.as_deref()),
            (NameRole::RenameFrom, NameRole::RenameTo, Some(&FILE[..]))
        );
        let call = W::default().fixed(&FILE).fixed(&DIR).opaque(b"bln").0;
        let n = &decode_call(LINK, &call).ops[0].names[0];
        assert_eq!(
            (n.dir_fh.as_deref(), n.fh.as_deref()),
            (Some(&DIR[..]), Some(&FILE[..]))
        );
        let call = sattr_unset(W::default().fixed(&DIR).opaque(b"blns").opaque(b"b")).0;
        let d = decode_call(SYMLINK, &call);
        assert!(!d.truncated && d.invalid.is_none());
        assert_eq!(d.ops[0].names[0].name, b"blns");
        for proc_ in [REMOVE, RENAME, LINK, SYMLINK, RMDIR] {
            let d = decode_reply(proc_, &W::default().u32(0).0);
            assert_eq!(d.ops[0].status, Some(0));
            assert!(!d.truncated);
        }
    }

    #[test]
    fn readdir_entries_and_eof() {
        let call = W::default().fixed(&DIR).u32(0).u32(1024).0;
        let d = decode_call(READDIR, &call);
        assert_eq!(d.ops[0].rw.unwrap().count, Some(1024));
        let reply = W::default()
            .u32(0)
            .u32(1)
            .u32(45658)
            .opaque(b".")
            .u32(1)
            .u32(1)
            .u32(45661)
            .opaque(b"b")
            .u32(28)
            .u32(0)
            .u32(1)
            .0;
        let d = decode_reply(READDIR, &reply);
        assert!(!d.truncated && d.invalid.is_none());
        let n = &d.ops[0].names;
        assert_eq!(
            n.iter()
                .map(|e| (e.name.as_slice(), e.fileid, e.cookie, e.role))
                .collect::<Vec<_>>(),
            vec![
                (&b"."[..], Some(45658), Some(1), NameRole::DirEntry),
                (&b"b"[..], Some(45661), Some(28), NameRole::DirEntry)
            ]
        );
        assert_eq!(d.ops[0].rw.unwrap().eof, Some(true));
    }

    #[test]
    fn void_procedures_and_statfs() {
        for proc_ in [NULL, ROOT, WRITECACHE] {
            for f in [decode_call, decode_reply] {
                let d = f(proc_, &[]);
                assert!(!d.truncated && d.invalid.is_none());
                assert_eq!(d.ops[0].status, None);
            }
        }
        assert_eq!(decode_call(ROOT, &[]).ops[0].op_name, "ROOT");
        assert_eq!(decode_call(WRITECACHE, &[]).ops[0].op_name, "WRITECACHE");
        let d = decode_call(STATFS, &DIR);
        assert_eq!(d.ops[0].fh.as_deref(), Some(&DIR[..]));
        let reply = (0..5).fold(W::default().u32(0), |w, v| w.u32(v)).0;
        let d = decode_reply(STATFS, &reply);
        assert!(!d.truncated && d.invalid.is_none());
        assert!(decode_reply(STATFS, &reply[..12]).truncated);
    }

    #[test]
    fn every_cut_and_every_byte_flip_is_handled() {
        let bodies: Vec<(u32, bool, Vec<u8>)> = vec![
            (READ, true, fattr(W::default().u32(0), 42).opaque(b"abc").0),
            (LOOKUP, true, fattr(W::default().u32(0).fixed(&FILE), 9).0),
            (
                CREATE,
                false,
                sattr_unset(W::default().fixed(&DIR).opaque(b"new")).0,
            ),
            (
                WRITE,
                false,
                W::default()
                    .fixed(&FILE)
                    .u32(0)
                    .u32(0)
                    .u32(0)
                    .opaque(b"xy")
                    .0,
            ),
            (
                READDIR,
                true,
                W::default()
                    .u32(0)
                    .u32(1)
                    .u32(3)
                    .opaque(b"x")
                    .u32(1)
                    .u32(0)
                    .u32(1)
                    .0,
            ),
        ];
        for (proc_, reply, body) in bodies {
            let f = if reply { decode_reply } else { decode_call };
            let whole = f(proc_, &body);
            assert!(!whole.truncated && whole.invalid.is_none(), "proc {proc_}");
            for n in 0..body.len() {
                let d = f(proc_, &body[..n]);
                assert!(
                    d.truncated || d.invalid.is_some(),
                    "proc {proc_} cut at {n}"
                );
                assert_eq!(d.outcome, Outcome::Decoded);
            }
            for i in 0..body.len() {
                let mut b = body.clone();
                b[i] ^= 0xff;
                let _ = f(proc_, &b);
            }
        }
        assert!(decode_call(18, &[]).invalid.is_some());
        assert!(decode_reply(u32::MAX, &[]).invalid.is_some());
    }
}
