//! The ONC RPC message header (RFC 5531 section 9), credentials and verifiers.

use crate::xdr::Xdr;
use crate::Error;

pub const AUTH_NONE: u32 = 0;
pub const AUTH_SYS: u32 = 1;
pub const AUTH_SHORT: u32 = 2;
pub const AUTH_DH: u32 = 3;
pub const RPCSEC_GSS: u32 = 6;

pub const RPCSEC_GSS_DATA: u32 = 0;
pub const RPC_GSS_SVC_NONE: u32 = 1;
pub const RPC_GSS_SVC_INTEGRITY: u32 = 2;
pub const RPC_GSS_SVC_PRIVACY: u32 = 3;

/// RFC 5531 caps an opaque_auth body at 400 bytes.
const MAX_AUTH_BYTES: usize = 400;

/// A call or a reply (the `msg_type` field: 0 = CALL, 1 = REPLY).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Call,
    Reply,
}

/// One parsed RPC message: the header plus the undecoded procedure arguments or results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcMessage<'a> {
    pub xid: u32,
    pub header: Header<'a>,
    /// Procedure arguments (call) or results (accepted, successful reply); empty otherwise.
    pub body: &'a [u8],
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Header<'a> {
    Call(CallHeader<'a>),
    Reply(ReplyHeader<'a>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallHeader<'a> {
    pub rpcvers: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: Auth<'a>,
    pub verf: Auth<'a>,
}

/// A reply header, flat so that it maps onto table columns directly. Which fields are set follows
/// from `reply_stat`: accepted replies have `verf` and `accept_stat` (and `mismatch` for
/// PROG_MISMATCH); denied ones have `reject_stat` and either `mismatch` (RPC_MISMATCH) or `auth_stat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyHeader<'a> {
    /// 0 = MSG_ACCEPTED, 1 = MSG_DENIED.
    pub reply_stat: u32,
    pub verf: Option<Auth<'a>>,
    /// 0 SUCCESS, 1 PROG_UNAVAIL, 2 PROG_MISMATCH, 3 PROC_UNAVAIL, 4 GARBAGE_ARGS, 5 SYSTEM_ERR.
    pub accept_stat: Option<u32>,
    /// 0 RPC_MISMATCH, 1 AUTH_ERROR.
    pub reject_stat: Option<u32>,
    pub auth_stat: Option<u32>,
    /// (low, high) supported versions, for PROG_MISMATCH and RPC_MISMATCH.
    pub mismatch: Option<(u32, u32)>,
}

/// An `opaque_auth`: the flavour, the raw body, and the decoded body for AUTH_SYS and RPCSEC_GSS
/// credentials (other flavours, and bodies that do not parse, leave both `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Auth<'a> {
    pub flavor: u32,
    pub body: &'a [u8],
    pub sys: Option<AuthSys<'a>>,
    pub gss: Option<GssCred<'a>>,
}

/// AUTH_SYS (a.k.a. AUTH_UNIX) credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthSys<'a> {
    pub stamp: u32,
    pub machine: &'a [u8],
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

/// RPCSEC_GSS credentials (RFC 2203 section 5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GssCred<'a> {
    pub version: u32,
    /// 0 DATA, 1 INIT, 2 CONTINUE_INIT, 3 DESTROY.
    pub gss_proc: u32,
    pub seq: u32,
    /// 1 none, 2 integrity, 3 privacy.
    pub service: u32,
    pub handle: &'a [u8],
}

impl<'a> RpcMessage<'a> {
    pub fn direction(&self) -> Direction {
        match self.header {
            Header::Call(_) => Direction::Call,
            Header::Reply(_) => Direction::Reply,
        }
    }

    pub fn call(&self) -> Option<&CallHeader<'a>> {
        match &self.header {
            Header::Call(c) => Some(c),
            Header::Reply(_) => None,
        }
    }

    pub fn reply(&self) -> Option<&ReplyHeader<'a>> {
        match &self.header {
            Header::Reply(r) => Some(r),
            Header::Call(_) => None,
        }
    }
}

impl CallHeader<'_> {
    /// True when the bodies of this call and its reply are not plain program arguments/results:
    /// RPCSEC_GSS with integrity or privacy wraps them, and the GSS context procedures (INIT,
    /// CONTINUE_INIT, DESTROY) carry tokens instead. An RPCSEC_GSS credential that does not parse
    /// counts as wrapped too, since nothing can be assumed about its body.
    pub fn gss_wrapped(&self) -> bool {
        if self.cred.flavor != RPCSEC_GSS {
            return false;
        }
        match &self.cred.gss {
            Some(g) => g.gss_proc != RPCSEC_GSS_DATA || g.service != RPC_GSS_SVC_NONE,
            None => true,
        }
    }
}

/// Parses an RPC message from its complete bytes (one UDP payload, or one TCP record without
/// its record mark). A message whose header is cut short is [`Error::Truncated`]; the body may
/// be shorter than the procedure needs, which the program decoders report themselves.
pub fn parse_message(bytes: &[u8]) -> Result<RpcMessage<'_>, Error> {
    let mut x = Xdr::new(bytes);
    let xid = x.u32()?;
    let header = match x.u32()? {
        0 => Header::Call(parse_call(&mut x)?),
        1 => Header::Reply(parse_reply(&mut x)?),
        _ => return Err(Error::Invalid("msg_type is neither CALL nor REPLY")),
    };
    let body = match &header {
        Header::Reply(r) if r.accept_stat != Some(0) => &[][..],
        _ => x.rest(),
    };
    Ok(RpcMessage { xid, header, body })
}

fn parse_call<'a>(x: &mut Xdr<'a>) -> Result<CallHeader<'a>, Error> {
    let rpcvers = x.u32()?;
    if rpcvers != 2 {
        return Err(Error::Invalid("RPC version is not 2"));
    }
    Ok(CallHeader {
        rpcvers,
        prog: x.u32()?,
        vers: x.u32()?,
        proc_: x.u32()?,
        cred: parse_auth(x, true)?,
        verf: parse_auth(x, false)?,
    })
}

fn parse_reply<'a>(x: &mut Xdr<'a>) -> Result<ReplyHeader<'a>, Error> {
    let mut r = ReplyHeader {
        reply_stat: x.u32()?,
        verf: None,
        accept_stat: None,
        reject_stat: None,
        auth_stat: None,
        mismatch: None,
    };
    match r.reply_stat {
        0 => {
            r.verf = Some(parse_auth(x, false)?);
            let stat = x.u32()?;
            r.accept_stat = Some(stat);
            if stat == 2 {
                r.mismatch = Some((x.u32()?, x.u32()?));
            }
        }
        1 => {
            let stat = x.u32()?;
            r.reject_stat = Some(stat);
            match stat {
                0 => r.mismatch = Some((x.u32()?, x.u32()?)),
                1 => r.auth_stat = Some(x.u32()?),
                _ => {
                    return Err(Error::Invalid(
                        "reject_stat is neither RPC_MISMATCH nor AUTH_ERROR",
                    ))
                }
            }
        }
        _ => {
            return Err(Error::Invalid(
                "reply_stat is neither MSG_ACCEPTED nor MSG_DENIED",
            ))
        }
    }
    Ok(r)
}

fn parse_auth<'a>(x: &mut Xdr<'a>, is_cred: bool) -> Result<Auth<'a>, Error> {
    let flavor = x.u32()?;
    let body = x.opaque(MAX_AUTH_BYTES)?;
    let mut auth = Auth {
        flavor,
        body,
        sys: None,
        gss: None,
    };
    // Verifiers of these flavours are not credentials (AUTH_SYS verifiers are AUTH_NONE in
    // practice; RPCSEC_GSS verifiers are checksums), so only credentials are decoded.
    if is_cred {
        match flavor {
            AUTH_SYS => auth.sys = parse_auth_sys(body).ok(),
            RPCSEC_GSS => auth.gss = parse_gss_cred(body).ok(),
            _ => {}
        }
    }
    Ok(auth)
}

fn parse_auth_sys(body: &[u8]) -> Result<AuthSys<'_>, Error> {
    let mut x = Xdr::new(body);
    let stamp = x.u32()?;
    let machine = x.string(255)?;
    let uid = x.u32()?;
    let gid = x.u32()?;
    // RFC 5531 says at most 16; some clients send more, and the 400-byte body bounds it anyway.
    let n = x.count(4)?;
    let gids = (0..n).map(|_| x.u32()).collect::<Result<Vec<_>, _>>()?;
    Ok(AuthSys {
        stamp,
        machine,
        uid,
        gid,
        gids,
    })
}

fn parse_gss_cred(body: &[u8]) -> Result<GssCred<'_>, Error> {
    let mut x = Xdr::new(body);
    Ok(GssCred {
        version: x.u32()?,
        gss_proc: x.u32()?,
        seq: x.u32()?,
        service: x.u32()?,
        handle: x.opaque(MAX_AUTH_BYTES)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An NFSv3 GETATTR call with AUTH_SYS (machine "box", uid 1000, gid 100, gids [100, 27]).
    pub(crate) const GETATTR_CALL: &[u8] = &[
        0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0x86, 0xa3, 0, 0, 0, 3, 0, 0, 0,
        1, //
        0, 0, 0, 1, 0, 0, 0, 32, 0, 0, 0, 9, 0, 0, 0, 3, b'b', b'o', b'x', 0, 0, 0, 3, 0xe8, 0, 0,
        0, 100, 0, 0, 0, 2, 0, 0, 0, 100, 0, 0, 0, 27, // cred
        0, 0, 0, 0, 0, 0, 0, 0, // verf
        0, 0, 0, 4, 1, 2, 3, 4, // fh
    ];

    #[test]
    fn parses_a_call_with_auth_sys() {
        let m = parse_message(GETATTR_CALL).unwrap();
        assert_eq!(m.xid, 0x12345678);
        let c = m.call().unwrap();
        assert_eq!((c.prog, c.vers, c.proc_), (100003, 3, 1));
        let sys = c.cred.sys.as_ref().unwrap();
        assert_eq!(
            (sys.stamp, sys.machine, sys.uid, sys.gid),
            (9, &b"box"[..], 1000, 100)
        );
        assert_eq!(sys.gids, vec![100, 27]);
        assert_eq!(c.verf.flavor, AUTH_NONE);
        assert_eq!(m.body, &[0, 0, 0, 4, 1, 2, 3, 4]);
        assert!(!c.gss_wrapped());
    }

    #[test]
    fn every_cut_of_the_header_is_truncated() {
        let header_len = GETATTR_CALL.len() - 8;
        for n in 0..header_len {
            assert_eq!(
                parse_message(&GETATTR_CALL[..n]),
                Err(Error::Truncated),
                "cut at {n}"
            );
        }
        assert!(parse_message(&GETATTR_CALL[..header_len])
            .unwrap()
            .body
            .is_empty());
    }

    #[test]
    fn parses_replies() {
        let ok = [
            0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9,
        ];
        let m = parse_message(&ok).unwrap();
        let r = m.reply().unwrap();
        assert_eq!((r.reply_stat, r.accept_stat), (0, Some(0)));
        assert_eq!(m.body, &[9, 9]);

        let prog_mismatch = [
            0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2, 0,
            0, 0, 3,
        ];
        let m = parse_message(&prog_mismatch).unwrap();
        assert_eq!(m.reply().unwrap().mismatch, Some((2, 3)));
        assert!(m.body.is_empty());

        let auth_error = [0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 5];
        let r = parse_message(&auth_error).unwrap();
        let r = r.reply().unwrap();
        assert_eq!(
            (r.reply_stat, r.reject_stat, r.auth_stat),
            (1, Some(1), Some(5))
        );

        let rpc_mismatch = [
            0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2,
        ];
        assert_eq!(
            parse_message(&rpc_mismatch)
                .unwrap()
                .reply()
                .unwrap()
                .mismatch,
            Some((2, 2))
        );
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(
            parse_message(&[0, 0, 0, 1, 0, 0, 0, 7]),
            Err(Error::Invalid("msg_type is neither CALL nor REPLY"))
        );
        let mut bad_vers = GETATTR_CALL.to_vec();
        bad_vers[11] = 3;
        assert_eq!(
            parse_message(&bad_vers),
            Err(Error::Invalid("RPC version is not 2"))
        );
        let mut long_cred = GETATTR_CALL.to_vec();
        long_cred[28..32].copy_from_slice(&401u32.to_be_bytes());
        assert!(matches!(parse_message(&long_cred), Err(Error::Invalid(_))));
    }

    #[test]
    fn decodes_rpcsec_gss_credentials() {
        let mut m = GETATTR_CALL[..24].to_vec();
        m.extend_from_slice(&[
            0, 0, 0, 6, 0, 0, 0, 24, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 2,
        ]);
        m.extend_from_slice(&[0, 0, 0, 4, 0xaa, 0xbb, 0xcc, 0xdd]);
        m.extend_from_slice(&[0, 0, 0, 6, 0, 0, 0, 0]);
        let p = parse_message(&m).unwrap();
        let c = p.call().unwrap();
        let g = c.cred.gss.as_ref().unwrap();
        assert_eq!(
            (g.version, g.gss_proc, g.seq, g.service, g.handle),
            (1, 0, 7, 2, &[0xaa, 0xbb, 0xcc, 0xdd][..])
        );
        assert!(c.gss_wrapped(), "integrity service wraps the body");
    }
}
