//! NFS_ACL, program 100227 (Sun's side protocol for POSIX draft ACLs over NFSv2 and v3, as
//! Solaris and Linux serve it). Version 2 uses NFSv2 handles and attributes, version 3
//! NFSv3's. Only the ACLs' sizes are kept, not their entries.

use crate::names::nfsacl_proc_name;
use crate::xdr::Xdr;
use crate::{nfs2, nfs3, AclRecord, AttrObject, Decoded, Error};

const GETACL: u32 = 1;
const SETACL: u32 = 2;
/// v2 only (v3 uses NFSv3's own GETATTR and ACCESS).
const GETATTR2: u32 = 3;
const ACCESS2: u32 = 4;
const OK: u32 = 0;

/// One ACL entry: type, id, permissions.
const ACLENT_LEN: usize = 12;

pub fn decode_call(vers: u32, proc_: u32, body: &[u8]) -> Decoded {
    decode_with(vers, proc_, body, call_args)
}

pub fn decode_reply(vers: u32, proc_: u32, body: &[u8]) -> Decoded {
    decode_with(vers, proc_, body, reply_results)
}

type Walk = fn(u32, u32, &mut Xdr<'_>, &mut AclRecord) -> Result<(), Error>;

fn decode_with(vers: u32, proc_: u32, body: &[u8], walk: Walk) -> Decoded {
    let mut d = Decoded::default();
    let mut r = AclRecord {
        vers,
        proc_,
        proc_name: nfsacl_proc_name(vers, proc_),
        ..Default::default()
    };
    let mut x = Xdr::new(body);
    let res = if r.proc_name == "unknown" {
        Err(Error::Invalid("NFS_ACL procedure number out of range"))
    } else {
        walk(vers, proc_, &mut x, &mut r)
    };
    d.acl = Some(r);
    d.finish(res, &x);
    d
}

fn fh(vers: u32, x: &mut Xdr<'_>) -> Result<Vec<u8>, Error> {
    if vers == 2 {
        Ok(x.fixed(nfs2::FHSIZE)?.to_vec())
    } else {
        Ok(x.opaque(nfs3::NFS3_FHSIZE)?.to_vec())
    }
}

/// Attributes as the version carries them in a reply: v2 an fattr, v3 a post_op_attr.
fn attrs(vers: u32, x: &mut Xdr<'_>, r: &mut AclRecord) -> Result<(), Error> {
    if vers == 2 {
        nfs2::push_fattr(x, AttrObject::Object, &mut r.attrs)
    } else {
        nfs3::post_op_attr(x, AttrObject::Object, &mut r.attrs)
    }
}

/// secattr: mask, then the access ACL and the default ACL, each a count and an array.
fn secattr(x: &mut Xdr<'_>, r: &mut AclRecord) -> Result<(), Error> {
    r.mask = Some(x.u32()?);
    r.acl_count = Some(entries(x)?);
    r.default_acl_count = Some(entries(x)?);
    Ok(())
}

/// An ACL: its announced count, then the array (its own length, and the entries, skipped).
fn entries(x: &mut Xdr<'_>) -> Result<u32, Error> {
    let announced = x.u32()?;
    let n = x.count(ACLENT_LEN)?;
    x.skip(n as usize * ACLENT_LEN)?;
    Ok(announced)
}

fn call_args(vers: u32, proc_: u32, x: &mut Xdr<'_>, r: &mut AclRecord) -> Result<(), Error> {
    if proc_ == 0 {
        return Ok(());
    }
    r.fh = Some(fh(vers, x)?);
    match proc_ {
        GETACL => r.mask = Some(x.u32()?),
        SETACL => secattr(x, r)?,
        ACCESS2 if vers == 2 => r.access = Some(x.u32()?),
        _ => {} // GETATTR; GETXATTRDIR's create flag is not kept
    }
    Ok(())
}

fn reply_results(vers: u32, proc_: u32, x: &mut Xdr<'_>, r: &mut AclRecord) -> Result<(), Error> {
    if proc_ == 0 {
        return Ok(());
    }
    let status = x.u32()?;
    r.status = Some(status);
    // v3 replies carry attributes whatever the status; v2 ones only on success.
    if vers != 2 && matches!(proc_, GETACL | SETACL) {
        attrs(vers, x, r)?;
    }
    if status != OK {
        return Ok(());
    }
    match (vers, proc_) {
        (2, GETACL) => {
            attrs(vers, x, r)?;
            secattr(x, r)
        }
        (_, GETACL) => secattr(x, r),
        (2, SETACL | GETATTR2) => attrs(vers, x, r),
        (2, ACCESS2) => {
            attrs(vers, x, r)?;
            r.access = Some(x.u32()?);
            Ok(())
        }
        (_, SETACL) => Ok(()),
        // GETXATTRDIR: the attribute directory's handle and attributes.
        _ => {
            r.fh = Some(fh(vers, x)?);
            attrs(vers, x, r)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs3::tests::W;

    #[test]
    fn v3_getacl_and_setacl() {
        let d = decode_call(3, GETACL, &W::default().opaque(&[9; 20]).u32(0xf).0);
        let r = d.acl.unwrap();
        assert_eq!((r.proc_name, r.mask), ("GETACL", Some(0xf)));
        assert_eq!(r.fh.as_deref(), Some(&[9; 20][..]));
        let ace = |w: W| w.u32(1).u32(0).u32(6);
        let reply = ace(ace(W::default().u32(0).u32(0).u32(0xf).u32(2).u32(2)))
            .u32(0)
            .u32(0)
            .0;
        let d = decode_reply(3, GETACL, &reply);
        assert!(!d.truncated && d.invalid.is_none(), "{d:?}");
        let r = d.acl.unwrap();
        assert_eq!(
            (r.status, r.mask, r.acl_count, r.default_acl_count),
            (Some(0), Some(0xf), Some(2), Some(0))
        );
        let denied = decode_reply(3, SETACL, &W::default().u32(13).u32(0).0);
        assert_eq!(denied.acl.unwrap().status, Some(13));
        // An array that claims more entries than the bytes hold is a cut, not a panic.
        let lying = W::default()
            .u32(0)
            .u32(0)
            .u32(0xf)
            .u32(1)
            .u32(0x4000_0000)
            .0;
        assert!(decode_reply(3, GETACL, &lying).truncated);
    }
}
