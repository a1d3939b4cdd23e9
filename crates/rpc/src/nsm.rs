//! The Network Status Monitor, program 100024 version 1 (X/Open XNFS chapter 11): a lock
//! manager asks its local statd to watch a peer (MON), and a rebooted host tells its peers
//! its new state (NOTIFY), which makes their lock managers reclaim or drop locks.

use crate::names::nsm_proc_name;
use crate::xdr::Xdr;
use crate::{Decoded, Error, NsmRecord};

/// SM_MAXSTRLEN: host names.
const MAXSTRLEN: usize = 1024;
/// The opaque the monitor hands back in its callback.
const PRIV_LEN: usize = 16;

const STAT: u32 = 1;
const MON: u32 = 2;
const UNMON: u32 = 3;
const UNMON_ALL: u32 = 4;
const NOTIFY: u32 = 6;

pub fn decode_call(proc_: u32, body: &[u8]) -> Decoded {
    decode_with(proc_, body, call_args)
}

pub fn decode_reply(proc_: u32, body: &[u8]) -> Decoded {
    decode_with(proc_, body, reply_results)
}

type Walk = fn(u32, &mut Xdr<'_>, &mut NsmRecord) -> Result<(), Error>;

fn decode_with(proc_: u32, body: &[u8], walk: Walk) -> Decoded {
    let mut d = Decoded::default();
    let mut r = NsmRecord {
        proc_,
        proc_name: nsm_proc_name(proc_),
        ..Default::default()
    };
    let mut x = Xdr::new(body);
    let res = if r.proc_name == "unknown" {
        Err(Error::Invalid("NSM procedure number out of range"))
    } else {
        walk(proc_, &mut x, &mut r)
    };
    d.nsm = Some(r);
    d.finish(res, &x);
    d
}

fn name(x: &mut Xdr<'_>) -> Result<Vec<u8>, Error> {
    Ok(x.string(MAXSTRLEN)?.to_vec())
}

/// my_id: the host and the RPC procedure the monitor calls back.
fn my_id(x: &mut Xdr<'_>, r: &mut NsmRecord) -> Result<(), Error> {
    r.my_name = Some(name(x)?);
    r.my_prog = Some(x.u32()?);
    r.my_vers = Some(x.u32()?);
    r.my_proc = Some(x.u32()?);
    Ok(())
}

fn call_args(proc_: u32, x: &mut Xdr<'_>, r: &mut NsmRecord) -> Result<(), Error> {
    match proc_ {
        STAT => r.mon_name = Some(name(x)?),
        MON => {
            r.mon_name = Some(name(x)?);
            my_id(x, r)?;
            x.skip(PRIV_LEN)?;
        }
        UNMON => {
            r.mon_name = Some(name(x)?);
            my_id(x, r)?;
        }
        UNMON_ALL => my_id(x, r)?,
        NOTIFY => {
            r.mon_name = Some(name(x)?);
            r.state = Some(x.u32()?);
        }
        _ => {} // NULL, SIMU_CRASH
    }
    Ok(())
}

fn reply_results(proc_: u32, x: &mut Xdr<'_>, r: &mut NsmRecord) -> Result<(), Error> {
    match proc_ {
        // sm_stat_res: STAT_SUCC or STAT_FAIL, and the monitor's state number.
        STAT | MON => {
            r.result = Some(x.u32()?);
            r.state = Some(x.u32()?);
        }
        UNMON | UNMON_ALL => r.state = Some(x.u32()?),
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs3::tests::W;

    #[test]
    fn mon_and_notify() {
        let mon = W::default()
            .opaque(b"server")
            .opaque(b"client")
            .u32(100021)
            .u32(4)
            .u32(16)
            .fixed(&[0; 16])
            .0;
        let d = decode_call(MON, &mon);
        assert!(!d.truncated && d.invalid.is_none());
        let r = d.nsm.unwrap();
        assert_eq!(r.proc_name, "MON");
        assert_eq!(r.mon_name.as_deref(), Some(&b"server"[..]));
        assert_eq!(r.my_name.as_deref(), Some(&b"client"[..]));
        assert_eq!(
            (r.my_prog, r.my_vers, r.my_proc),
            (Some(100021), Some(4), Some(16))
        );
        let r = decode_reply(MON, &W::default().u32(0).u32(7).0)
            .nsm
            .unwrap();
        assert_eq!((r.result, r.state), (Some(0), Some(7)));
        let r = decode_call(NOTIFY, &W::default().opaque(b"h").u32(9).0)
            .nsm
            .unwrap();
        assert_eq!((r.proc_name, r.state), ("NOTIFY", Some(9)));
        assert!(decode_call(MON, &mon[..mon.len() - 4]).truncated);
        assert!(decode_call(7, &[]).invalid.is_some());
    }
}
