//! Every operation the rig's captures (`captured.rs`) do not hold, with arguments and results
//! laid out by hand from the RFCs' XDR (RFC 7530, 8881, 7862, 8276), one line each. Each case
//! is walked inside a COMPOUND followed by GETFH, so an operation that read one byte too many
//! or too few would lose the GETFH. The same bytes, sent as RPC over UDP, are decoded by tshark
//! 4.x without a malformed field, down to the GETFH (checked when the cases were written), except
//! GET_DIR_DELEGATION, SET_SSV and WANT_DELEGATION, which tshark does not dissect.

use super::{decode_call, decode_reply, Op};
use crate::{Decoded, NameRole, NfsOp};

/// One operation: its arguments and its results (after the status, on NFS4_OK), as hex.
struct Case {
    op: Op,
    args: &'static str,
    results: &'static str,
}

const fn case(op: Op, args: &'static str, results: &'static str) -> Case {
    Case { op, args, results }
}

// Building blocks, as they appear in the lines below:
//   stateid4        00000001 0102030405060708090a0b0c
//   clientid4       0123456789abcdef        verifier4  1111111111111111
//   sessionid4      5e55105e55105e55105e55105e55105e
//   change_info4    00000001 0000000000000001 0000000000000002
//   empty fattr4    00000001 00000000 00000000 (a bitmap word with no bits, no attributes)
//   lock_owner4     0123456789abcdef 00000004 6f776e72 ("ownr")
//   channel_attrs4  00000000 00100000 00100000 00001000 00000008 00000040 00000000
const CASES: &[Case] = &[
    case(Op::Access, "0000001f", "0000001f 0000000f"),
    case(
        Op::Close,
        "00000002 00000001 0102030405060708090a0b0c",
        "00000002 0102030405060708090a0b0c",
    ),
    case(Op::Commit, "0000000000001000 00002000", "1111111111111111"),
    // NF4LNK "link" -> "target", no attributes
    case(
        Op::Create,
        "00000005 00000006 746172676574 0000 00000004 6c696e6b 00000001 00000000 00000000",
        "00000001 0000000000000001 0000000000000002 00000000",
    ),
    case(Op::Delegpurge, "0123456789abcdef", ""),
    case(Op::Delegreturn, "00000001 0102030405060708090a0b0c", ""),
    case(
        Op::Getattr,
        "00000002 00100012 0030a03a",
        "00000001 00000000 00000000",
    ),
    case(
        Op::Link,
        "00000004 68617264",
        "00000001 0000000000000001 0000000000000002",
    ),
    // WRITE_LT, no reclaim, whole file, a new lock owner from open stateid seqid 3
    case(
        Op::Lock,
        "00000002 00000000 0000000000000000 ffffffffffffffff 00000001 00000003
         00000001 0102030405060708090a0b0c 00000000 0123456789abcdef 00000004 6f776e72",
        "00000001 a1a2a3a4a5a6a7a8a9aaabac",
    ),
    case(
        Op::Lockt,
        "00000001 0000000000000000 ffffffffffffffff 0123456789abcdef 00000004 6f776e72",
        "",
    ),
    case(
        Op::Locku,
        "00000002 00000004 00000001 a1a2a3a4a5a6a7a8a9aaabac 0000000000000000 ffffffffffffffff",
        "00000002 a1a2a3a4a5a6a7a8a9aaabac",
    ),
    case(Op::Lookupp, "", ""),
    // size (attribute 4) is 4096
    case(
        Op::Nverify,
        "00000001 00000010 00000008 0000000000001000",
        "",
    ),
    case(Op::Openattr, "00000000", ""),
    case(
        Op::OpenDowngrade,
        "00000001 0102030405060708090a0b0c 00000005 00000001 00000000",
        "00000002 0102030405060708090a0b0c",
    ),
    case(Op::Putpubfh, "", ""),
    case(Op::Readlink, "", "00000006 746172676574 0000"),
    case(
        Op::Remove,
        "00000004 676f6e65",
        "00000001 0000000000000001 0000000000000002",
    ),
    case(
        Op::Rename,
        "00000003 6f6c6400 00000003 6e657700",
        "00000001 0000000000000001 0000000000000002 00000001 0000000000000003 0000000000000004",
    ),
    case(Op::Renew, "0123456789abcdef", ""),
    case(Op::Savefh, "", ""),
    case(Op::Restorefh, "", ""),
    // AUTH_SYS, then RPCSEC_GSS with the Kerberos 5 OID, qop 0, integrity
    case(
        Op::Secinfo,
        "00000004 66696c65",
        "00000002 00000001 00000006 00000009 2a864886f712010202 000000 00000000 00000002",
    ),
    case(
        Op::Verify,
        "00000001 00000010 00000008 0000000000001000",
        "",
    ),
    case(
        Op::ReleaseLockowner,
        "0123456789abcdef 00000004 6f776e72",
        "",
    ),
    // AUTH_NONE, then AUTH_SYS (stamp, "host", uid 0, gid 0, one gid)
    case(
        Op::BackchannelCtl,
        "40000000 00000002 00000000 00000001 00000000 00000004 686f7374 00000000 00000000
         00000001 00000000",
        "",
    ),
    case(
        Op::BindConnToSession,
        "5e55105e55105e55105e55105e55105e 00000003 00000000",
        "5e55105e55105e55105e55105e55105e 00000003 00000000",
    ),
    // SP4_NONE; one implementation id ("kernel.org", "Linux", time 0)
    case(
        Op::ExchangeId,
        "1111111111111111 00000006 636c69656e74 0000 00000101 00000000
         00000001 0000000a 6b65726e656c2e6f7267 0000 00000005 4c696e7578 000000
         0000000000000000 00000000",
        "0123456789abcdef 00000001 00010001 00000000 0000000000000000 00000004 73727672
         00000004 73727672 00000000",
    ),
    // fore and back channel attributes, callback program, AUTH_NONE
    case(
        Op::CreateSession,
        "0123456789abcdef 00000001 00000003
         00000000 00100000 00100000 00001000 00000008 00000040 00000000
         00000000 00100000 00100000 00001000 00000008 00000040 00000000
         40000000 00000001 00000000",
        "5e55105e55105e55105e55105e55105e 00000001 00000003
         00000000 00100000 00100000 00001000 00000008 00000040 00000000
         00000000 00100000 00100000 00001000 00000008 00000040 00000000",
    ),
    case(Op::DestroySession, "5e55105e55105e55105e55105e55105e", ""),
    case(Op::FreeStateid, "00000001 0102030405060708090a0b0c", ""),
    // GDD4_OK: cookieverf, stateid, notification types, child and dir attributes
    case(
        Op::GetDirDelegation,
        "00000000 00000001 00000003 0000000000000001 00000000 0000000000000001 00000000
         00000000 00000000",
        "00000000 1111111111111111 00000001 0102030405060708090a0b0c 00000001 00000003
         00000000 00000000",
    ),
    // a files layout device: stripe index 0 on one data server, tcp 198.18.7.1 port 2049
    case(
        Op::Getdeviceinfo,
        "d0d1d2d3d4d5d6d7d8d9dadbdcdddedf 00000001 00001000 00000001 00000006",
        "00000001 0000002c 00000001 00000000 00000001 00000001 00000003 74637000
         0000000e 3139382e31382e372e312e382e31 0000 00000000",
    ),
    case(
        Op::Getdevicelist,
        "00000001 00000010 0000000000000000 1111111111111111",
        "0000000000000001 1111111111111111 00000001 d0d1d2d3d4d5d6d7d8d9dadbdcdddedf 00000001",
    ),
    // a new offset, no new time, a files layout update with an empty body
    case(
        Op::Layoutcommit,
        "0000000000000000 0000000000001000 00000000 00000001 0102030405060708090a0b0c
         00000001 0000000000000fff 00000000 00000001 00000000",
        "00000001 0000000000001000",
    ),
    // one files layout segment: device, stripe unit 64 KiB, one data server handle
    case(
        Op::Layoutget,
        "00000000 00000001 00000002 0000000000000000 ffffffffffffffff 0000000000001000
         00000001 0102030405060708090a0b0c 00001000",
        "00000001 00000002 0102030405060708090a0b0c 00000001 0000000000000000
         ffffffffffffffff 00000002 00000001 00000030 d0d1d2d3d4d5d6d7d8d9dadbdcdddedf
         00010000 00000000 0000000000000000 00000001 00000008 f1f2f3f4f5f6f7f8",
    ),
    // LAYOUTRETURN4_FILE: range, stateid, empty body
    case(
        Op::Layoutreturn,
        "00000000 00000001 00000003 00000001 0000000000000000 ffffffffffffffff
         00000002 0102030405060708090a0b0c 00000000",
        "00000001 00000003 0102030405060708090a0b0c",
    ),
    case(Op::SecinfoNoName, "00000000", "00000001 00000001"),
    case(
        Op::Sequence,
        "5e55105e55105e55105e55105e55105e 00000001 00000000 0000003f 00000000",
        "5e55105e55105e55105e55105e55105e 00000001 00000000 0000003f 0000003f 00000000",
    ),
    case(
        Op::SetSsv,
        "00000004 0a0b0c0d 00000004 01020304",
        "00000004 01020304",
    ),
    case(
        Op::TestStateid,
        "00000002 00000001 0102030405060708090a0b0c 00000001 a1a2a3a4a5a6a7a8a9aaabac",
        "00000002 00000000 00002729",
    ),
    // want a read delegation for the current file; none, because of contention
    case(
        Op::WantDelegation,
        "00000001 00000004",
        "00000003 00000001 00000000",
    ),
    case(Op::DestroyClientid, "0123456789abcdef", ""),
    case(Op::ReclaimComplete, "00000000", ""),
    case(
        Op::Allocate,
        "00000001 0102030405060708090a0b0c 0000000000002000 0000000000001000",
        "",
    ),
    case(
        Op::Deallocate,
        "00000001 0102030405060708090a0b0c 0000000000002000 0000000000001000",
        "",
    ),
    // IO_ADVISE4_SEQUENTIAL (bit 2)
    case(
        Op::IoAdvise,
        "00000001 0102030405060708090a0b0c 0000000000000000 0000000000010000 00000001 00000004",
        "00000001 00000004",
    ),
    case(Op::OffloadCancel, "00000001 0102030405060708090a0b0c", ""),
    case(
        Op::OffloadStatus,
        "00000001 0102030405060708090a0b0c",
        "0000000000001000 00000001 00000000",
    ),
    // data "abc" at 0, then a hole of 4096 bytes
    case(
        Op::ReadPlus,
        "00000001 0102030405060708090a0b0c 0000000000000000 00002000",
        "00000001 00000002 00000000 0000000000000000 00000003 616263 00
         00000001 0000000000000003 0000000000001000",
    ),
    // the next hole (NFS4_CONTENT_HOLE) from 0
    case(
        Op::Seek,
        "00000001 0102030405060708090a0b0c 0000000000000000 00000001",
        "00000000 0000000000003000",
    ),
    case(
        Op::Clone,
        "00000001 0102030405060708090a0b0c 00000001 a1a2a3a4a5a6a7a8a9aaabac
         0000000000000000 0000000000000000 0000000000001000",
        "",
    ),
    case(
        Op::Getxattr,
        "00000008 757365722e666f6f",
        "00000003 626172 00",
    ),
    // SETXATTR4_EITHER "user.foo" = "bar"
    case(
        Op::Setxattr,
        "00000000 00000008 757365722e666f6f 00000003 626172 00",
        "00000001 0000000000000001 0000000000000002",
    ),
    case(
        Op::Listxattrs,
        "0000000000000000 00001000",
        "0000000000000001 00000001 00000008 757365722e666f6f 00000001",
    ),
    case(
        Op::Removexattr,
        "00000008 757365722e666f6f",
        "00000001 0000000000000001 0000000000000002",
    ),
];

/// The filehandle the trailing GETFH returns.
const FH: &str = "00000008 f1f2f3f4f5f6f7f8";

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// A call of PUTFH, the case's op, GETFH (minor version 2, so every op is in it).
fn call_body(c: &Case) -> Vec<u8> {
    let op = c.op as u32;
    hex(&format!(
        "00000000 00000002 00000003 00000016 {FH} {op:08x} {} 0000000a",
        c.args
    ))
}

/// Its reply, every op NFS4_OK.
fn reply_body(c: &Case) -> Vec<u8> {
    let op = c.op as u32;
    hex(&format!(
        "00000000 00000000 00000003 00000016 00000000 {op:08x} 00000000 {} 0000000a 00000000 {FH}",
        c.results
    ))
}

fn walked(d: &Decoded, op: Op) -> bool {
    let names: Vec<_> = d.ops.iter().map(|o| o.op_name).collect();
    !d.truncated
        && d.invalid.is_none()
        && d.undecoded_op.is_none()
        && d.unknown_attr_lists == 0
        && names == ["PUTFH", op.name(), "GETFH"]
}

/// The case's op as decoded from its call and from its reply.
fn decoded(op: Op) -> (NfsOp, NfsOp) {
    let c = CASES.iter().find(|c| c.op == op).expect("a case for it");
    let call = decode_call(1, &call_body(c));
    let reply = decode_reply(1, &reply_body(c));
    (call.ops[1].clone(), reply.ops[1].clone())
}

#[test]
fn every_operation_walks_exactly_its_arguments_and_results() {
    for c in CASES {
        let d = decode_call(1, &call_body(c));
        assert!(walked(&d, c.op), "{:?} call: {d:?}", c.op);
        let d = decode_reply(1, &reply_body(c));
        assert!(walked(&d, c.op), "{:?} reply: {d:?}", c.op);
        // One byte short anywhere in the op is a cut message, never a panic or a wrong walk.
        let body = call_body(c);
        for n in 0..body.len() {
            let d = decode_call(1, &body[..n]);
            assert!(d.truncated || d.invalid.is_some(), "{:?} cut at {n}", c.op);
        }
    }
}

#[test]
fn operations_report_their_stateids() {
    let seq1 = hex("00000001 0102030405060708090a0b0c");
    let seq2 = hex("00000002 0102030405060708090a0b0c");
    let lock2 = hex("00000002 a1a2a3a4a5a6a7a8a9aaabac");
    for (op, call, reply) in [
        (Op::Close, Some(&seq1), Some(&seq2)),
        (Op::Delegreturn, Some(&seq1), None),
        (
            Op::Lock,
            Some(&seq1),
            Some(&hex("00000001 a1a2a3a4a5a6a7a8a9aaabac")),
        ),
        (
            Op::Locku,
            Some(&hex("00000001 a1a2a3a4a5a6a7a8a9aaabac")),
            Some(&lock2),
        ),
        (Op::OpenDowngrade, Some(&seq1), Some(&seq2)),
        (Op::FreeStateid, Some(&seq1), None),
        (Op::GetDirDelegation, None, Some(&seq1)),
        (Op::Layoutcommit, Some(&seq1), None),
        (Op::Layoutget, Some(&seq1), Some(&seq2)),
        (
            Op::Layoutreturn,
            Some(&seq2),
            Some(&hex("00000003 0102030405060708090a0b0c")),
        ),
        (Op::Allocate, Some(&seq1), None),
        (Op::IoAdvise, Some(&seq1), None),
        (Op::OffloadCancel, Some(&seq1), None),
        (Op::OffloadStatus, Some(&seq1), None),
        (Op::ReadPlus, Some(&seq1), None),
        (Op::Seek, Some(&seq1), None),
        (Op::Clone, Some(&seq1), None),
    ] {
        let (c, r) = decoded(op);
        assert_eq!(c.stateid.map(|s| s.to_vec()).as_ref(), call, "{op:?} call");
        assert_eq!(
            r.stateid.map(|s| s.to_vec()).as_ref(),
            reply,
            "{op:?} reply"
        );
    }
}

#[test]
fn name_operations_report_their_names_and_directories() {
    let fh = hex(&FH[9..]);
    let (create, _) = decoded(Op::Create);
    assert_eq!(create.names[0].name, b"link");
    assert_eq!(create.names[0].dir_fh.as_deref(), Some(&fh[..]));
    let (remove, _) = decoded(Op::Remove);
    assert_eq!(
        (remove.names[0].name.as_slice(), remove.names[0].role),
        (&b"gone"[..], NameRole::Target)
    );
    // No SAVEFH before RENAME and LINK here: the saved handle is unknown.
    let (rename, _) = decoded(Op::Rename);
    let roles: Vec<_> = rename
        .names
        .iter()
        .map(|n| (n.name.as_slice(), n.role, n.dir_fh.is_some()))
        .collect();
    assert_eq!(
        roles,
        [
            (&b"old"[..], NameRole::RenameFrom, false),
            (&b"new"[..], NameRole::RenameTo, true)
        ]
    );
    let (link, _) = decoded(Op::Link);
    assert_eq!(link.names[0].name, b"hard");
    assert_eq!(
        (link.names[0].dir_fh.as_deref(), link.names[0].fh.as_deref()),
        (Some(&fh[..]), None)
    );
}

#[test]
fn byte_range_operations_report_offsets_counts_and_eof() {
    let (commit, _) = decoded(Op::Commit);
    let rw = commit.rw.unwrap();
    assert_eq!((rw.offset, rw.count), (Some(4096), Some(8192)));
    for op in [Op::Allocate, Op::Deallocate] {
        assert_eq!(decoded(op).0.rw.unwrap().offset, Some(8192), "{op:?}");
    }
    let (call, reply) = decoded(Op::ReadPlus);
    let rw = call.rw.unwrap();
    assert_eq!((rw.offset, rw.count), (Some(0), Some(8192)));
    assert_eq!(reply.rw.unwrap().eof, Some(true));
    let (call, reply) = decoded(Op::Seek);
    assert_eq!(call.rw.unwrap().offset, Some(0));
    let rw = reply.rw.unwrap();
    assert_eq!((rw.offset, rw.eof), (Some(0x3000), Some(false)));
}

#[test]
fn results_on_errors() {
    // LOCK denied: the conflicting lock follows the status.
    let body = hex(
        "0000271a 00000000 00000002 00000016 00000000 0000000c 0000271a
         0000000000000000 ffffffffffffffff 00000002 0123456789abcdef 00000004 6f776e72",
    );
    let d = decode_reply(1, &body);
    assert!(!d.truncated && d.invalid.is_none(), "{d:?}");
    assert_eq!(d.ops[1].status, Some(10010));
    // SETCLIENTID with NFS4ERR_CLID_INUSE: the client using the id (r_netid, r_addr).
    let body = hex(
        "00002721 00000000 00000001 00000023 00002721 00000003 74637000
         0000000b 302e302e302e302e302e3000",
    );
    let d = decode_reply(1, &body);
    assert!(!d.truncated && d.invalid.is_none(), "{d:?}");
    // SETATTR failing (NFS4ERR_ATTRNOTSUPP) still says which attributes were set (none).
    let body = hex("00002730 00000000 00000001 00000022 00002730 00000000");
    let d = decode_reply(1, &body);
    assert!(!d.truncated && d.invalid.is_none(), "{d:?}");
}

#[test]
fn unwalked_operations_stop_the_walk() {
    for op in [
        Op::Copy,
        Op::CopyNotify,
        Op::Layouterror,
        Op::Layoutstats,
        Op::WriteSame,
    ] {
        let body = hex(&format!(
            "00000000 00000002 00000003 00000016 {FH} {:08x} 00000000 0000000a",
            op as u32
        ));
        let d = decode_call(1, &body);
        assert_eq!(d.undecoded_op, Some(op as u32), "{op:?}");
        assert_eq!(d.ops.len(), 2);
    }
    let d = decode_call(1, &hex("00000000 00000002 00000001 0000273c"));
    assert_eq!((d.ops[0].op_name, d.undecoded_op), ("ILLEGAL", None));
}
