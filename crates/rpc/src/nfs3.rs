//! NFSv3 (RFC 1813) procedure arguments and results.
//!
//! Each decoder fills one [`NfsOp`] as it reads, so a body cut short keeps what came before the
//! cut. Data payloads (READ results, WRITE arguments) are skipped, not copied.

use crate::names::nfs3_proc_name;
use crate::xdr::{Xdr, UNBOUNDED};
use crate::{time_ns, AttrObject, Attrs, Decoded, Error, NameEntry, NameRole, NfsOp, ReadWrite};

pub(crate) const NFS3_FHSIZE: usize = 64;
const NFS3_OK: u32 = 0;

const GETATTR: u32 = 1;
const SETATTR: u32 = 2;
const LOOKUP: u32 = 3;
const ACCESS: u32 = 4;
const READLINK: u32 = 5;
const READ: u32 = 6;
const WRITE: u32 = 7;
const CREATE: u32 = 8;
const MKDIR: u32 = 9;
const SYMLINK: u32 = 10;
const MKNOD: u32 = 11;
const REMOVE: u32 = 12;
const RMDIR: u32 = 13;
const RENAME: u32 = 14;
const LINK: u32 = 15;
const READDIR: u32 = 16;
const READDIRPLUS: u32 = 17;
const FSSTAT: u32 = 18;
const FSINFO: u32 = 19;
const PATHCONF: u32 = 20;
const COMMIT: u32 = 21;

/// Decodes NFSv3 call arguments into one op.
pub fn decode_call(proc_: u32, body: &[u8]) -> Decoded {
    decode_with(proc_, body, call_args)
}

/// Decodes NFSv3 reply results into one op; `proc_` is the call's procedure.
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
        (COMMIT, "NFSv3 procedure number out of range"),
        nfs3_proc_name,
        f,
    )
}

fn fh(x: &mut Xdr<'_>) -> Result<Vec<u8>, Error> {
    Ok(x.opaque(NFS3_FHSIZE)?.to_vec())
}

fn filename(x: &mut Xdr<'_>) -> Result<Vec<u8>, Error> {
    Ok(x.string(UNBOUNDED)?.to_vec())
}

fn nfstime3(x: &mut Xdr<'_>) -> Result<Option<i64>, Error> {
    let sec = x.u32()?;
    let nsec = x.u32()?;
    Ok(time_ns(sec as i64, nsec))
}

/// fattr3, field by field: a cut capture keeps the fields before the cut.
fn fattr3(x: &mut Xdr<'_>, a: &mut Attrs) -> Result<(), Error> {
    a.ftype = Some(x.u32()?);
    a.mode = Some(x.u32()?);
    a.nlink = Some(x.u32()?);
    a.uid = Some(x.u32()?);
    a.gid = Some(x.u32()?);
    a.size = Some(x.u64()?);
    a.used = Some(x.u64()?);
    a.rdev = Some((x.u32()?, x.u32()?));
    a.fsid = Some((x.u64()?, 0));
    a.fileid = Some(x.u64()?);
    a.atime_ns = nfstime3(x)?;
    a.mtime_ns = nfstime3(x)?;
    a.ctime_ns = nfstime3(x)?;
    Ok(())
}

/// An fattr3 added to `out` with whatever of it is present.
fn push_fattr3(x: &mut Xdr<'_>, object: AttrObject, out: &mut Vec<Attrs>) -> Result<(), Error> {
    let mut a = Attrs {
        object,
        ..Default::default()
    };
    let r = fattr3(x, &mut a);
    if a.ftype.is_some() {
        out.push(a);
    }
    r
}

pub(crate) fn post_op_attr(
    x: &mut Xdr<'_>,
    object: AttrObject,
    out: &mut Vec<Attrs>,
) -> Result<(), Error> {
    if x.bool()? {
        push_fattr3(x, object, out)?;
    }
    Ok(())
}

fn pre_op_attr(x: &mut Xdr<'_>) -> Result<(), Error> {
    if x.bool()? {
        x.skip(24)?; // wcc_attr: size, mtime, ctime
    }
    Ok(())
}

/// wcc_data: only the after-attributes are reported.
fn wcc_data(x: &mut Xdr<'_>, object: AttrObject, out: &mut Vec<Attrs>) -> Result<(), Error> {
    pre_op_attr(x)?;
    post_op_attr(x, object, out)
}

fn post_op_fh3(x: &mut Xdr<'_>) -> Result<Option<Vec<u8>>, Error> {
    if x.bool()? {
        Ok(Some(fh(x)?))
    } else {
        Ok(None)
    }
}

fn nfstime_set(x: &mut Xdr<'_>) -> Result<(), Error> {
    match x.u32()? {
        0 | 1 => Ok(()),
        2 => x.skip(8),
        _ => Err(Error::Invalid("time_how out of range")),
    }
}

fn sattr3(x: &mut Xdr<'_>) -> Result<(), Error> {
    for _ in 0..3 {
        if x.bool()? {
            x.u32()?; // mode, uid, gid
        }
    }
    if x.bool()? {
        x.u64()?; // size
    }
    nfstime_set(x)?;
    nfstime_set(x)
}

/// diropargs3 as a name entry under its directory; the directory also becomes the op's fh.
fn diropargs3(x: &mut Xdr<'_>, op: &mut NfsOp, role: NameRole) -> Result<(), Error> {
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
        0 => Ok(()),
        GETATTR | READLINK | FSSTAT | FSINFO | PATHCONF => {
            op.fh = Some(fh(x)?);
            Ok(())
        }
        SETATTR => setattr_args(x, op),
        ACCESS => {
            op.fh = Some(fh(x)?);
            x.u32().map(|_| ())
        }
        LOOKUP | REMOVE | RMDIR => diropargs3(x, op, NameRole::Target),
        READ | COMMIT => read_args(x, op),
        WRITE => write_args(x, op),
        CREATE => create_args(x, op),
        MKDIR => {
            diropargs3(x, op, NameRole::Target)?;
            sattr3(x)
        }
        SYMLINK => {
            diropargs3(x, op, NameRole::Target)?;
            sattr3(x)?;
            x.string(UNBOUNDED).map(|_| ())
        }
        MKNOD => mknod_args(x, op),
        RENAME => {
            diropargs3(x, op, NameRole::RenameFrom)?;
            diropargs3(x, op, NameRole::RenameTo)
        }
        LINK => link_args(x, op),
        READDIR => readdir_args(x, op),
        READDIRPLUS => readdirplus_args(x, op),
        _ => Err(Error::Invalid("NFSv3 procedure number out of range")),
    }
}

/// SETATTR3args: object, new_attributes, guard (sattrguard3).
fn setattr_args(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    op.fh = Some(fh(x)?);
    sattr3(x)?;
    if x.bool()? {
        x.skip(8)?; // guard ctime
    }
    Ok(())
}

/// READ3args and COMMIT3args: file, offset, count.
fn read_args(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    op.fh = Some(fh(x)?);
    let rw = op.rw.insert(ReadWrite::default());
    rw.offset = Some(x.u64()?);
    rw.count = Some(x.u32()?);
    Ok(())
}

/// WRITE3args: file, offset, count, stable, data.
fn write_args(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    op.fh = Some(fh(x)?);
    let rw = op.rw.insert(ReadWrite::default());
    rw.offset = Some(x.u64()?);
    rw.count = Some(x.u32()?);
    rw.stable = Some(x.u32()?);
    x.opaque(UNBOUNDED).map(|_| ())
}

/// CREATE3args: where, how (createhow3: attributes, or an EXCLUSIVE verifier).
fn create_args(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    diropargs3(x, op, NameRole::Target)?;
    match x.u32()? {
        0 | 1 => sattr3(x),
        2 => x.skip(8),
        _ => Err(Error::Invalid("createmode3 out of range")),
    }
}

/// MKNOD3args: where, what (mknoddata3: devices have attributes and specdata3, sockets and
/// fifos attributes only).
fn mknod_args(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    diropargs3(x, op, NameRole::Target)?;
    match x.u32()? {
        3 | 4 => {
            sattr3(x)?;
            x.skip(8) // specdata3
        }
        6 | 7 => sattr3(x),
        _ => Ok(()),
    }
}

/// LINK3args: file, link (the directory and name of the new link).
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

/// READDIR3args: dir, cookie, cookieverf, count.
fn readdir_args(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    op.fh = Some(fh(x)?);
    x.u64()?; // cookie
    x.skip(8)?; // cookieverf
    op.rw.get_or_insert_with(ReadWrite::default).count = Some(x.u32()?);
    Ok(())
}

/// READDIRPLUS3args: dir, cookie, cookieverf, dircount, maxcount.
fn readdirplus_args(x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    op.fh = Some(fh(x)?);
    x.u64()?;
    x.skip(8)?;
    x.u32()?; // dircount
    x.u32().map(|_| ()) // maxcount
}

fn reply_results(proc_: u32, x: &mut Xdr<'_>, op: &mut NfsOp) -> Result<(), Error> {
    if proc_ == 0 {
        return Ok(());
    }
    let status = x.u32()?;
    op.status = Some(status);
    let ok = status == NFS3_OK;
    let attrs = &mut op.attrs;
    match proc_ {
        GETATTR => {
            if ok {
                push_fattr3(x, AttrObject::Object, attrs)?;
            }
            Ok(())
        }
        SETATTR => wcc_data(x, AttrObject::Object, attrs),
        REMOVE | RMDIR => wcc_data(x, AttrObject::Directory, attrs),
        LOOKUP => lookup_results(x, op, ok),
        ACCESS => attrs_then(x, attrs, ok, |x| x.u32().map(|_| ())),
        READLINK => attrs_then(x, attrs, ok, |x| x.string(UNBOUNDED).map(|_| ())),
        READ => read_results(x, op, ok),
        WRITE => write_results(x, op, ok),
        CREATE | MKDIR | SYMLINK | MKNOD => create_results(x, op, ok),
        RENAME => {
            wcc_data(x, AttrObject::FromDirectory, attrs)?;
            wcc_data(x, AttrObject::ToDirectory, attrs)
        }
        LINK => {
            post_op_attr(x, AttrObject::Object, attrs)?;
            wcc_data(x, AttrObject::Directory, attrs)
        }
        READDIR | READDIRPLUS => readdir_results(x, op, proc_ == READDIRPLUS, ok),
        // tbytes..afiles, invarsec
        FSSTAT => attrs_then(x, attrs, ok, |x| x.skip(6 * 8 + 4)),
        // rtmax..dtpref, maxfilesize, time_delta, properties
        FSINFO => attrs_then(x, attrs, ok, |x| x.skip(7 * 4 + 8 + 8 + 4)),
        // linkmax, name_max, four bools
        PATHCONF => attrs_then(x, attrs, ok, |x| x.skip(6 * 4)),
        COMMIT => {
            wcc_data(x, AttrObject::Object, attrs)?;
            if ok {
                x.skip(8)?;
            }
            Ok(())
        }
        _ => Err(Error::Invalid("NFSv3 procedure number out of range")),
    }
}

/// The many results that are the object's post_op_attr, then on success `resok`'s fields.
fn attrs_then(
    x: &mut Xdr<'_>,
    attrs: &mut Vec<Attrs>,
    ok: bool,
    resok: impl FnOnce(&mut Xdr<'_>) -> Result<(), Error>,
) -> Result<(), Error> {
    post_op_attr(x, AttrObject::Object, attrs)?;
    if ok {
        resok(x)?;
    }
    Ok(())
}

/// LOOKUP3res: on success the object and its attributes; the directory's attributes always.
fn lookup_results(x: &mut Xdr<'_>, op: &mut NfsOp, ok: bool) -> Result<(), Error> {
    if ok {
        op.fh = Some(fh(x)?);
        post_op_attr(x, AttrObject::Object, &mut op.attrs)?;
    }
    post_op_attr(x, AttrObject::Directory, &mut op.attrs)
}

/// READ3res: file_attributes; on success count, eof and data (skipped).
fn read_results(x: &mut Xdr<'_>, op: &mut NfsOp, ok: bool) -> Result<(), Error> {
    post_op_attr(x, AttrObject::Object, &mut op.attrs)?;
    if ok {
        let rw = op.rw.insert(ReadWrite::default());
        rw.returned = Some(x.u32()?);
        rw.eof = Some(x.bool()?);
        x.opaque(UNBOUNDED)?;
    }
    Ok(())
}

/// WRITE3res: file_wcc; on success count, committed, verf.
fn write_results(x: &mut Xdr<'_>, op: &mut NfsOp, ok: bool) -> Result<(), Error> {
    wcc_data(x, AttrObject::Object, &mut op.attrs)?;
    if ok {
        let rw = op.rw.insert(ReadWrite::default());
        rw.returned = Some(x.u32()?);
        rw.committed = Some(x.u32()?);
        x.skip(8)?; // writeverf3
    }
    Ok(())
}

/// CREATE3res, MKDIR3res, SYMLINK3res, MKNOD3res: on success the new object's handle and
/// attributes; the directory's wcc_data always.
fn create_results(x: &mut Xdr<'_>, op: &mut NfsOp, ok: bool) -> Result<(), Error> {
    if ok {
        op.fh = post_op_fh3(x)?;
        post_op_attr(x, AttrObject::Object, &mut op.attrs)?;
    }
    wcc_data(x, AttrObject::Directory, &mut op.attrs)
}

fn readdir_results(x: &mut Xdr<'_>, op: &mut NfsOp, plus: bool, ok: bool) -> Result<(), Error> {
    post_op_attr(x, AttrObject::Directory, &mut op.attrs)?;
    if !ok {
        return Ok(());
    }
    x.skip(8)?; // cookieverf
                // Each entry takes at least 4 bytes, so the list ends within the body.
    while x.bool()? {
        let fileid = x.u64()?;
        let name = filename(x)?;
        let cookie = x.u64()?;
        let index = op.names.len() as u32;
        op.names.push(NameEntry {
            role: NameRole::DirEntry,
            name,
            fileid: Some(fileid),
            cookie: Some(cookie),
            ..Default::default()
        });
        if plus {
            post_op_attr(x, AttrObject::Entry(index), &mut op.attrs)?;
            let efh = post_op_fh3(x)?;
            if let Some(e) = op.names.last_mut() {
                e.fh = efh;
            }
        }
    }
    let rw_eof = x.bool()?;
    // READDIR's eof has no column of its own; keep it where READ's goes.
    op.rw.get_or_insert_with(ReadWrite::default).eof = Some(rw_eof);
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::Outcome;

    /// A tiny XDR writer for building test bodies.
    #[derive(Default)]
    pub(crate) struct W(pub Vec<u8>);
    impl W {
        pub fn u32(mut self, v: u32) -> Self {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        pub fn u64(mut self, v: u64) -> Self {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        pub fn opaque(mut self, b: &[u8]) -> Self {
            self = self.u32(b.len() as u32);
            self.0.extend_from_slice(b);
            while self.0.len() % 4 != 0 {
                self.0.push(0);
            }
            self
        }
        pub fn fixed(mut self, b: &[u8]) -> Self {
            self.0.extend_from_slice(b);
            self
        }
        pub fn fattr3(self, fileid: u64) -> Self {
            self.u32(1)
                .u32(0o644)
                .u32(1)
                .u32(1000)
                .u32(100)
                .u64(4096)
                .u64(8192)
                .u32(0)
                .u32(0)
                .u64(7)
                .u64(fileid)
                .u32(1_700_000_000)
                .u32(1)
                .u32(1_700_000_001)
                .u32(2)
                .u32(1_700_000_002)
                .u32(3)
        }
    }

    #[test]
    fn read_call_and_reply() {
        let call = W::default().opaque(&[0xab; 8]).u64(65536).u32(4096).0;
        let d = decode_call(READ, &call);
        let op = &d.ops[0];
        assert_eq!(
            (op.op_name, op.fh.as_deref()),
            ("READ", Some(&[0xab; 8][..]))
        );
        assert_eq!(op.rw.unwrap().offset, Some(65536));
        assert_eq!(op.rw.unwrap().count, Some(4096));
        assert!(!d.truncated);

        let reply = W::default()
            .u32(0)
            .u32(1)
            .fattr3(42)
            .u32(3)
            .u32(1)
            .opaque(b"abc")
            .0;
        let d = decode_reply(READ, &reply);
        let op = &d.ops[0];
        assert_eq!(op.status, Some(0));
        assert_eq!(
            (op.rw.unwrap().returned, op.rw.unwrap().eof),
            (Some(3), Some(true))
        );
        let a = &op.attrs[0];
        assert_eq!(
            (a.fileid, a.mode, a.uid, a.size, a.fsid),
            (Some(42), Some(0o644), Some(1000), Some(4096), Some((7, 0)))
        );
        assert_eq!(a.mtime_ns, Some(1_700_000_001_000_000_002));
        // A header-only capture cuts the data: the results before it stay.
        let d = decode_reply(READ, &reply[..reply.len() - 6]);
        assert!(d.truncated);
        assert_eq!(d.ops[0].rw.unwrap().returned, Some(3));
        assert_eq!(d.ops[0].attrs.len(), 1);
    }

    #[test]
    fn write_lookup_rename_link() {
        let call = W::default()
            .opaque(&[1; 4])
            .u64(10)
            .u32(3)
            .u32(2)
            .opaque(b"xyz")
            .0;
        let rw = decode_call(WRITE, &call).ops[0].rw.unwrap();
        assert_eq!(
            (rw.offset, rw.count, rw.stable),
            (Some(10), Some(3), Some(2))
        );
        let reply = W::default()
            .u32(0)
            .u32(0)
            .u32(0)
            .u32(3)
            .u32(2)
            .fixed(&[0; 8])
            .0;
        let rw = decode_reply(WRITE, &reply).ops[0].rw.unwrap();
        assert_eq!((rw.returned, rw.committed), (Some(3), Some(2)));

        let call = W::default().opaque(&[2; 4]).opaque(b"file.txt").0;
        let d = decode_call(LOOKUP, &call);
        assert_eq!(d.ops[0].names[0].name, b"file.txt");
        assert_eq!(d.ops[0].names[0].dir_fh.as_deref(), Some(&[2; 4][..]));
        let reply = W::default()
            .u32(0)
            .opaque(&[3; 4])
            .u32(1)
            .fattr3(9)
            .u32(1)
            .fattr3(2)
            .0;
        let r = decode_reply(LOOKUP, &reply);
        assert_eq!(r.ops[0].fh.as_deref(), Some(&[3; 4][..]));
        assert_eq!(
            r.ops[0]
                .attrs
                .iter()
                .map(|a| (a.object, a.fileid))
                .collect::<Vec<_>>(),
            vec![
                (AttrObject::Object, Some(9)),
                (AttrObject::Directory, Some(2))
            ]
        );
        let names = crate::resolve_names(&d, &r);
        assert_eq!(names[0].fh.as_deref(), Some(&[3; 4][..]));
        let fail = W::default().u32(2).u32(0).0;
        assert_eq!(decode_reply(LOOKUP, &fail).ops[0].status, Some(2));

        let call = W::default()
            .opaque(&[1])
            .opaque(b"a")
            .opaque(&[2])
            .opaque(b"b")
            .0;
        let n = &decode_call(RENAME, &call).ops[0].names;
        assert_eq!(
            (
                n[0].role,
                n[0].name.as_slice(),
                n[1].role,
                n[1].name.as_slice()
            ),
            (
                NameRole::RenameFrom,
                &b"a"[..],
                NameRole::RenameTo,
                &b"b"[..]
            )
        );
        let call = W::default().opaque(&[1]).opaque(&[2]).opaque(b"hard").0;
        let n = &decode_call(LINK, &call).ops[0].names[0];
        assert_eq!(
            (n.dir_fh.as_deref(), n.fh.as_deref()),
            (Some(&[2][..]), Some(&[1][..]))
        );
    }

    #[test]
    fn readdirplus_entries_carry_attrs_and_handles() {
        let reply = W::default()
            .u32(0)
            .u32(0)
            .fixed(&[0; 8])
            .u32(1)
            .u64(11)
            .opaque(b"a")
            .u64(1)
            .u32(1)
            .fattr3(11)
            .u32(1)
            .opaque(&[0xa; 4])
            .u32(1)
            .u64(12)
            .opaque(b"bb")
            .u64(2)
            .u32(0)
            .u32(0)
            .u32(0)
            .u32(1)
            .0;
        let d = decode_reply(READDIRPLUS, &reply);
        assert!(!d.truncated && d.invalid.is_none());
        let n = &d.ops[0].names;
        assert_eq!(n.len(), 2);
        assert_eq!(
            (n[0].fileid, n[0].cookie, n[0].fh.as_deref()),
            (Some(11), Some(1), Some(&[0xa; 4][..]))
        );
        assert_eq!(
            (n[1].name.as_slice(), n[1].fh.as_deref()),
            (&b"bb"[..], None)
        );
        assert_eq!(d.ops[0].attrs[0].object, AttrObject::Entry(0));
        assert_eq!(d.ops[0].rw.unwrap().eof, Some(true));
    }

    #[test]
    fn every_cut_and_every_byte_flip_is_handled() {
        let bodies: Vec<(u32, bool, Vec<u8>)> = vec![
            (
                READ,
                true,
                W::default()
                    .u32(0)
                    .u32(1)
                    .fattr3(42)
                    .u32(3)
                    .u32(1)
                    .opaque(b"abc")
                    .0,
            ),
            (
                LOOKUP,
                true,
                W::default()
                    .u32(0)
                    .opaque(&[3; 4])
                    .u32(1)
                    .fattr3(9)
                    .u32(1)
                    .fattr3(2)
                    .0,
            ),
            (
                CREATE,
                false,
                W::default()
                    .opaque(&[1; 8])
                    .opaque(b"new")
                    .u32(0)
                    .u32(1)
                    .u32(0o600)
                    .u32(0)
                    .u32(0)
                    .u32(0)
                    .u32(0)
                    .u32(0)
                    .0,
            ),
        ];
        for (proc_, reply, body) in bodies {
            let f = if reply { decode_reply } else { decode_call };
            assert!(!f(proc_, &body).truncated);
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
        assert!(decode_call(99, &[]).invalid.is_some());
    }
}
