//! The Network Lock Manager, program 100021 (X/Open XNFS, chapters 10 and 14): version 1
//! (and 2, which shares its procedures) and 3 with 32-bit offsets and lengths, version 4
//! (NLM for NFSv3) with 64-bit ones. Handles and owners are netobjs in every version.
//!
//! The asynchronous forms travel as calls in both directions: a client sends LOCK_MSG, the
//! server answers later with a LOCK_RES *call* carrying the status (and the cookie that
//! ties the two together); their RPC replies are empty.

use crate::names::nlm_proc_name;
use crate::xdr::Xdr;
use crate::{Decoded, Error, NlmHolder, NlmRecord};

/// LM_MAXSTRLEN: a caller or share name.
const MAXSTRLEN: usize = 1024;
/// MAXNETOBJ_SZ: cookies, file handles and owner handles.
const MAXNETOBJ: usize = 1024;

const TEST: u32 = 1;
const LOCK: u32 = 2;
const CANCEL: u32 = 3;
const UNLOCK: u32 = 4;
const GRANTED: u32 = 5;
const TEST_MSG: u32 = 6;
const LOCK_MSG: u32 = 7;
const CANCEL_MSG: u32 = 8;
const UNLOCK_MSG: u32 = 9;
const GRANTED_MSG: u32 = 10;
const TEST_RES: u32 = 11;
const LOCK_RES: u32 = 12;
const GRANTED_RES: u32 = 15;
const SHARE: u32 = 20;
const UNSHARE: u32 = 21;
const NM_LOCK: u32 = 22;
const FREE_ALL: u32 = 23;

/// nlm_denied: the TEST result that carries the conflicting lock.
const DENIED: u32 = 1;

pub fn decode_call(vers: u32, proc_: u32, body: &[u8]) -> Decoded {
    decode_with(vers, proc_, body, call_args)
}

pub fn decode_reply(vers: u32, proc_: u32, body: &[u8]) -> Decoded {
    decode_with(vers, proc_, body, reply_results)
}

type Walk = fn(&Version, u32, &mut Xdr<'_>, &mut NlmRecord) -> Result<(), Error>;

fn decode_with(vers: u32, proc_: u32, body: &[u8], walk: Walk) -> Decoded {
    let mut d = Decoded::default();
    let mut r = NlmRecord {
        vers,
        proc_,
        proc_name: nlm_proc_name(vers, proc_),
        ..Default::default()
    };
    let mut x = Xdr::new(body);
    let res = if r.proc_name == "unknown" {
        Err(Error::Invalid("NLM procedure number out of range"))
    } else {
        walk(&Version(vers), proc_, &mut x, &mut r)
    };
    d.nlm = Some(r);
    d.finish(res, &x);
    d
}

/// What differs between versions: v4's offsets and lengths are 64 bits.
struct Version(u32);

impl Version {
    fn range(&self, x: &mut Xdr<'_>) -> Result<u64, Error> {
        if self.0 >= 4 {
            x.u64()
        } else {
            x.u32().map(u64::from)
        }
    }
}

fn netobj(x: &mut Xdr<'_>) -> Result<Vec<u8>, Error> {
    Ok(x.opaque(MAXNETOBJ)?.to_vec())
}

fn cookie(x: &mut Xdr<'_>, r: &mut NlmRecord) -> Result<(), Error> {
    r.cookie = Some(netobj(x)?);
    Ok(())
}

/// nlm_lock / nlm4_lock: caller, file, owner, svid, range.
fn lock(v: &Version, x: &mut Xdr<'_>, r: &mut NlmRecord) -> Result<(), Error> {
    r.caller_name = Some(x.string(MAXSTRLEN)?.to_vec());
    r.fh = Some(netobj(x)?);
    r.oh = Some(netobj(x)?);
    r.svid = Some(x.u32()?);
    r.offset = Some(v.range(x)?);
    r.length = Some(v.range(x)?);
    Ok(())
}

fn call_args(v: &Version, proc_: u32, x: &mut Xdr<'_>, r: &mut NlmRecord) -> Result<(), Error> {
    match proc_ {
        TEST | TEST_MSG | GRANTED | GRANTED_MSG => {
            cookie(x, r)?;
            r.exclusive = Some(x.bool()?);
            lock(v, x, r)
        }
        LOCK | LOCK_MSG | NM_LOCK => {
            cookie(x, r)?;
            r.block = Some(x.bool()?);
            r.exclusive = Some(x.bool()?);
            lock(v, x, r)?;
            r.reclaim = Some(x.bool()?);
            r.state = Some(x.u32()?);
            Ok(())
        }
        CANCEL | CANCEL_MSG => {
            cookie(x, r)?;
            r.block = Some(x.bool()?);
            r.exclusive = Some(x.bool()?);
            lock(v, x, r)
        }
        UNLOCK | UNLOCK_MSG => {
            cookie(x, r)?;
            lock(v, x, r)
        }
        TEST_RES => test_res(v, x, r),
        LOCK_RES..=GRANTED_RES => res(x, r),
        SHARE | UNSHARE => {
            cookie(x, r)?;
            r.caller_name = Some(x.string(MAXSTRLEN)?.to_vec());
            r.fh = Some(netobj(x)?);
            r.oh = Some(netobj(x)?);
            r.share_mode = Some(x.u32()?);
            r.share_access = Some(x.u32()?);
            r.reclaim = Some(x.bool()?);
            Ok(())
        }
        FREE_ALL => {
            r.caller_name = Some(x.string(MAXSTRLEN)?.to_vec());
            r.state = Some(x.u32()?);
            Ok(())
        }
        _ => Ok(()), // NULL
    }
}

fn reply_results(v: &Version, proc_: u32, x: &mut Xdr<'_>, r: &mut NlmRecord) -> Result<(), Error> {
    match proc_ {
        TEST => test_res(v, x, r),
        LOCK | CANCEL | UNLOCK | GRANTED | NM_LOCK => res(x, r),
        SHARE | UNSHARE => {
            res(x, r)?;
            r.sequence = Some(x.u32()?);
            Ok(())
        }
        // NULL, the _MSG and _RES messages and FREE_ALL have void results.
        _ => Ok(()),
    }
}

/// nlm_res: cookie and status.
fn res(x: &mut Xdr<'_>, r: &mut NlmRecord) -> Result<(), Error> {
    cookie(x, r)?;
    r.status = Some(x.u32()?);
    Ok(())
}

/// nlm_testres: cookie, status, and on nlm_denied the lock in the way.
fn test_res(v: &Version, x: &mut Xdr<'_>, r: &mut NlmRecord) -> Result<(), Error> {
    res(x, r)?;
    if r.status != Some(DENIED) {
        return Ok(());
    }
    let h = r.holder.insert(NlmHolder::default());
    h.exclusive = Some(x.bool()?);
    h.svid = Some(x.u32()?);
    h.oh = Some(netobj(x)?);
    h.offset = Some(v.range(x)?);
    h.length = Some(v.range(x)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs3::tests::W;

    fn lock4(w: W) -> W {
        w.opaque(b"client1")
            .opaque(&[0xab; 28])
            .opaque(b"owner")
            .u32(4242)
            .u64(1 << 33)
            .u64(0)
    }

    #[test]
    fn v4_lock_call_and_reply() {
        let call = lock4(W::default().opaque(&[1, 2, 3, 4]).u32(1).u32(1))
            .u32(0)
            .u32(3)
            .0;
        let d = decode_call(4, LOCK, &call);
        assert!(!d.truncated && d.invalid.is_none());
        let r = d.nlm.unwrap();
        assert_eq!(r.proc_name, "LOCK");
        assert_eq!(r.cookie.as_deref(), Some(&[1, 2, 3, 4][..]));
        assert_eq!(
            (r.block, r.exclusive, r.reclaim),
            (Some(true), Some(true), Some(false))
        );
        assert_eq!(r.caller_name.as_deref(), Some(&b"client1"[..]));
        assert_eq!(r.fh.as_deref(), Some(&[0xab; 28][..]));
        assert_eq!(r.oh.as_deref(), Some(&b"owner"[..]));
        assert_eq!(
            (r.svid, r.offset, r.length, r.state),
            (Some(4242), Some(1 << 33), Some(0), Some(3))
        );
        let reply = decode_reply(4, LOCK, &W::default().opaque(&[1, 2, 3, 4]).u32(3).0);
        assert_eq!(reply.nlm.unwrap().status, Some(3));
    }

    #[test]
    fn v1_ranges_are_32_bits_and_test_denied_names_the_holder() {
        let call = W::default()
            .opaque(b"c")
            .u32(0)
            .opaque(b"host")
            .opaque(&[7; 32])
            .opaque(b"oh")
            .u32(9)
            .u32(100)
            .u32(50)
            .0;
        let r = decode_call(1, TEST, &call).nlm.unwrap();
        assert_eq!(
            (r.exclusive, r.offset, r.length),
            (Some(false), Some(100), Some(50))
        );
        let denied = W::default()
            .opaque(b"c")
            .u32(DENIED)
            .u32(1)
            .u32(77)
            .opaque(b"other")
            .u32(0)
            .u32(10)
            .0;
        let r = decode_reply(1, TEST, &denied).nlm.unwrap();
        let h = r.holder.unwrap();
        assert_eq!(
            (h.exclusive, h.svid, h.offset, h.length),
            (Some(true), Some(77), Some(0), Some(10))
        );
        assert_eq!(h.oh.as_deref(), Some(&b"other"[..]));
    }

    #[test]
    fn async_results_travel_as_calls() {
        let d = decode_call(4, LOCK_RES, &W::default().opaque(b"ck").u32(0).0);
        let r = d.nlm.unwrap();
        assert_eq!((r.proc_name, r.status), ("LOCK_RES", Some(0)));
        let d = decode_reply(4, LOCK_MSG, &[]);
        assert!(!d.truncated && d.invalid.is_none());
    }

    #[test]
    fn share_free_all_and_hostile_bodies() {
        let share = W::default()
            .opaque(b"ck")
            .opaque(b"pc")
            .opaque(&[1; 32])
            .opaque(b"o")
            .u32(3)
            .u32(1)
            .u32(0)
            .0;
        let r = decode_call(3, SHARE, &share).nlm.unwrap();
        assert_eq!(
            (r.share_mode, r.share_access, r.reclaim),
            (Some(3), Some(1), Some(false))
        );
        let reply = W::default().opaque(b"ck").u32(0).u32(5).0;
        assert_eq!(
            decode_reply(3, SHARE, &reply).nlm.unwrap().sequence,
            Some(5)
        );
        let r = decode_call(4, FREE_ALL, &W::default().opaque(b"h").u32(2).0)
            .nlm
            .unwrap();
        assert_eq!(
            (r.caller_name.as_deref(), r.state),
            (Some(&b"h"[..]), Some(2))
        );
        // A cut call keeps what came before the cut; an absurd length is invalid.
        let cut = decode_call(4, LOCK, &share[..10]);
        assert!(cut.truncated);
        assert_eq!(cut.nlm.unwrap().cookie.as_deref(), Some(&b"ck"[..]));
        let huge = decode_call(4, UNLOCK, &W::default().u32(4000).0);
        assert!(huge.invalid.is_some());
        assert!(
            decode_call(1, SHARE, &[]).invalid.is_some(),
            "v1 has no SHARE"
        );
    }
}
