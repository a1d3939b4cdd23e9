//! The MOUNT protocol, versions 1 to 3 (RFC 1094 appendix A, RFC 1813 section 5).

use crate::names::mount_proc_name;
use crate::xdr::Xdr;
use crate::{Decoded, Error, Export, MountRecord};

const MNTPATHLEN: usize = 1024;
const MNTNAMLEN: usize = 255;
const FHSIZE: usize = 32;
const FHSIZE3: usize = 64;

const MNT: u32 = 1;
const DUMP: u32 = 2;
const UMNT: u32 = 3;
const EXPORT: u32 = 5;
const EXPORTALL: u32 = 6;
const PATHCONF: u32 = 7;

pub fn decode_call(vers: u32, proc_: u32, body: &[u8]) -> Decoded {
    decode_with(vers, proc_, body, call_args)
}

pub fn decode_reply(vers: u32, proc_: u32, body: &[u8]) -> Decoded {
    decode_with(vers, proc_, body, reply_results)
}

type Decoder = fn(u32, u32, &mut Xdr<'_>, &mut MountRecord) -> Result<(), Error>;

fn decode_with(vers: u32, proc_: u32, body: &[u8], f: Decoder) -> Decoded {
    let mut d = Decoded::default();
    let mut m = MountRecord {
        proc_,
        proc_name: mount_proc_name(proc_),
        ..Default::default()
    };
    let mut x = Xdr::new(body);
    let r = f(vers, proc_, &mut x, &mut m);
    d.mount = Some(m);
    d.finish(r, &x);
    d
}

fn call_args(_vers: u32, proc_: u32, x: &mut Xdr<'_>, m: &mut MountRecord) -> Result<(), Error> {
    if matches!(proc_, MNT | UMNT | PATHCONF) {
        m.dirpath = Some(x.string(MNTPATHLEN)?.to_vec());
    }
    Ok(())
}

fn reply_results(vers: u32, proc_: u32, x: &mut Xdr<'_>, m: &mut MountRecord) -> Result<(), Error> {
    match proc_ {
        MNT => {
            let status = x.u32()?;
            m.status = Some(status);
            if status == 0 {
                if vers == 3 {
                    m.fh = Some(x.opaque(FHSIZE3)?.to_vec());
                    let n = x.count(4)?;
                    for _ in 0..n {
                        m.auth_flavors.push(x.u32()?);
                    }
                } else {
                    m.fh = Some(x.fixed(FHSIZE)?.to_vec());
                }
            }
        }
        DUMP => {
            while x.bool()? {
                let host = x.string(MNTNAMLEN)?.to_vec();
                let dir = x.string(MNTPATHLEN)?.to_vec();
                m.mounts.push((host, dir));
            }
        }
        EXPORT | EXPORTALL => {
            while x.bool()? {
                let dir = x.string(MNTPATHLEN)?.to_vec();
                m.exports.push(Export {
                    dir,
                    groups: Vec::new(),
                });
                while x.bool()? {
                    let g = x.string(MNTNAMLEN)?.to_vec();
                    if let Some(e) = m.exports.last_mut() {
                        e.groups.push(g);
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs3::tests::W;

    #[test]
    fn mnt_v3_and_v1() {
        let d = decode_call(3, MNT, &W::default().opaque(b"/export/home").0);
        let m = d.mount.unwrap();
        assert_eq!(
            (m.proc_name, m.dirpath.as_deref()),
            ("MNT", Some(&b"/export/home"[..]))
        );
        let reply = W::default()
            .u32(0)
            .opaque(&[7; 28])
            .u32(2)
            .u32(1)
            .u32(390003)
            .0;
        let m = decode_reply(3, MNT, &reply).mount.unwrap();
        assert_eq!(
            (m.status, m.fh.as_deref(), m.auth_flavors.as_slice()),
            (Some(0), Some(&[7; 28][..]), &[1, 390003][..])
        );
        let v1 = W::default().u32(0).fixed(&[5; 32]).0;
        assert_eq!(
            decode_reply(1, MNT, &v1).mount.unwrap().fh.as_deref(),
            Some(&[5; 32][..])
        );
        let denied = decode_reply(3, MNT, &W::default().u32(13).0);
        assert_eq!(
            (denied.mount.as_ref().unwrap().status, denied.truncated),
            (Some(13), false)
        );
    }

    #[test]
    fn export_and_dump_lists() {
        let reply = W::default()
            .u32(1)
            .opaque(b"/a")
            .u32(1)
            .opaque(b"*")
            .u32(1)
            .opaque(b"@lab")
            .u32(0)
            .u32(1)
            .opaque(b"/b")
            .u32(0)
            .u32(0)
            .0;
        let d = decode_reply(3, EXPORT, &reply);
        let m = d.mount.unwrap();
        assert_eq!(m.exports.len(), 2);
        assert_eq!(m.exports[0].groups, vec![b"*".to_vec(), b"@lab".to_vec()]);
        assert!(m.exports[1].groups.is_empty());
        let dump = W::default().u32(1).opaque(b"client").opaque(b"/a").u32(0).0;
        assert_eq!(
            decode_reply(3, DUMP, &dump).mount.unwrap().mounts,
            vec![(b"client".to_vec(), b"/a".to_vec())]
        );
        let cut = decode_reply(3, EXPORT, &reply[..20]);
        assert!(cut.truncated);
        assert_eq!(cut.mount.unwrap().exports[0].dir, b"/a");
    }
}
