//! Hand-made RPC messages for every decoder path the public corpus lacks, written into a pcap
//! and decoded by both tshark and this crate; every compared field must agree.

mod common;

use common::craft::{call, reply, write_udp_pcap, write_udp_pcap_snapped, W};
use common::tshark;

const NFS: u32 = 100003;
const MOUNT: u32 = 100005;
const NFS_PORT: u16 = 2049;
const MOUNT_PORT: u16 = 20048;

const DIR: &[u8] = &[
    0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb, 0xdc,
];
const FILE: &[u8] = &[
    0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0xf0,
];
const NEW: &[u8] = &[0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38];

fn sattr_mode(w: W) -> W {
    w.u32(1).u32(0o640).u32(0).u32(0).u32(0).u32(0).u32(0)
}

/// (call, reply) pairs of NFSv3 procedures.
fn nfs3() -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v = Vec::new();
    let mut xid = 0x3000;
    let mut add = |proc_: u32, args: W, results: W| {
        xid += 1;
        v.push((
            call(xid, NFS, 3, proc_).w(&args).0,
            reply(xid).w(&results).0,
        ));
    };
    add(0, W::default(), W::default());
    add(
        1,
        W::default().opaque(FILE),
        W::default().u32(0).fattr3(1, 77),
    );
    add(
        2,
        sattr_mode(W::default().opaque(FILE)).u32(0),
        W::default().u32(0).wcc(77),
    );
    add(
        3,
        W::default().opaque(DIR).opaque(b"file.txt"),
        W::default()
            .u32(0)
            .opaque(FILE)
            .post_op_attr(77)
            .post_op_attr(2),
    );
    add(
        3,
        W::default().opaque(DIR).opaque(b"missing"),
        W::default().u32(2).post_op_attr(2),
    );
    add(
        4,
        W::default().opaque(FILE).u32(0x1f),
        W::default().u32(0).post_op_attr(77).u32(0x1f),
    );
    add(
        5,
        W::default().opaque(FILE),
        W::default().u32(0).post_op_attr(77).opaque(b"/etc/target"),
    );
    add(
        6,
        W::default().opaque(FILE).u64(65536).u32(4096),
        W::default()
            .u32(0)
            .post_op_attr(77)
            .u32(5)
            .u32(1)
            .opaque(b"hello"),
    );
    add(
        7,
        W::default()
            .opaque(FILE)
            .u64(8192)
            .u32(5)
            .u32(2)
            .opaque(b"world"),
        W::default()
            .u32(0)
            .wcc(77)
            .u32(5)
            .u32(2)
            .u64(0x1122334455667788),
    );
    add(
        8,
        sattr_mode(W::default().opaque(DIR).opaque(b"new.txt").u32(1)),
        W::default()
            .u32(0)
            .u32(1)
            .opaque(NEW)
            .post_op_attr(78)
            .wcc(2),
    );
    add(
        9,
        sattr_mode(W::default().opaque(DIR).opaque(b"subdir")),
        W::default()
            .u32(0)
            .u32(1)
            .opaque(NEW)
            .post_op_attr(79)
            .wcc(2),
    );
    add(
        10,
        sattr_mode(W::default().opaque(DIR).opaque(b"link")).opaque(b"file.txt"),
        W::default()
            .u32(0)
            .u32(1)
            .opaque(NEW)
            .post_op_attr(80)
            .wcc(2),
    );
    add(
        11,
        sattr_mode(W::default().opaque(DIR).opaque(b"fifo").u32(7)),
        W::default().u32(0).u32(0).u32(0).wcc(2),
    );
    add(
        12,
        W::default().opaque(DIR).opaque(b"old.txt"),
        W::default().u32(0).wcc(2),
    );
    add(
        13,
        W::default().opaque(DIR).opaque(b"olddir"),
        W::default().u32(66).wcc(2),
    );
    add(
        14,
        W::default()
            .opaque(DIR)
            .opaque(b"a")
            .opaque(NEW)
            .opaque(b"b"),
        W::default().u32(0).wcc(2).wcc(3),
    );
    add(
        15,
        W::default().opaque(FILE).opaque(DIR).opaque(b"hard"),
        W::default().u32(0).post_op_attr(77).wcc(2),
    );
    add(
        16,
        W::default().opaque(DIR).u64(0).u64(0).u32(4096),
        W::default()
            .u32(0)
            .post_op_attr(2)
            .u64(0)
            .u32(1)
            .u64(77)
            .opaque(b"file.txt")
            .u64(1)
            .u32(1)
            .u64(78)
            .opaque(b"new.txt")
            .u64(2)
            .u32(0)
            .u32(1),
    );
    add(
        17,
        W::default().opaque(DIR).u64(0).u64(0).u32(4096).u32(32768),
        W::default()
            .u32(0)
            .post_op_attr(2)
            .u64(0)
            .u32(1)
            .u64(77)
            .opaque(b"file.txt")
            .u64(1)
            .post_op_attr(77)
            .u32(1)
            .opaque(FILE)
            .u32(1)
            .u64(78)
            .opaque(b"new.txt")
            .u64(2)
            .u32(0)
            .u32(0)
            .u32(0)
            .u32(1),
    );
    add(
        18,
        W::default().opaque(DIR),
        W::default()
            .u32(0)
            .post_op_attr(2)
            .u64(1)
            .u64(2)
            .u64(3)
            .u64(4)
            .u64(5)
            .u64(6)
            .u32(0),
    );
    add(
        19,
        W::default().opaque(DIR),
        W::default()
            .u32(0)
            .post_op_attr(2)
            .u32(1)
            .u32(2)
            .u32(3)
            .u32(4)
            .u32(5)
            .u32(6)
            .u32(7)
            .u64(8)
            .u32(0)
            .u32(1)
            .u32(0x1b),
    );
    add(
        20,
        W::default().opaque(DIR),
        W::default()
            .u32(0)
            .post_op_attr(2)
            .u32(32000)
            .u32(255)
            .u32(1)
            .u32(0)
            .u32(1)
            .u32(1),
    );
    add(
        21,
        W::default().opaque(FILE).u64(0).u32(0),
        W::default().u32(0).wcc(77).u64(0x1122334455667788),
    );
    v
}

fn stateid(n: u8) -> [u8; 16] {
    [n; 16]
}

fn compound_call(xid: u32, tag: &[u8], minor: u32, ops: &[W]) -> Vec<u8> {
    let mut w = call(xid, NFS, 4, 1)
        .opaque(tag)
        .u32(minor)
        .u32(ops.len() as u32);
    for op in ops {
        w = w.w(op);
    }
    w.0
}

fn compound_reply(xid: u32, status: u32, tag: &[u8], ops: &[W]) -> Vec<u8> {
    let mut w = reply(xid).u32(status).opaque(tag).u32(ops.len() as u32);
    for op in ops {
        w = w.w(op);
    }
    w.0
}

fn fattr4(w: W, fileid: u64) -> W {
    // type, change, size, fsid, fileid | mode, numlinks, owner, owner_group, space_used,
    // time_access, time_metadata, time_modify
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

fn sequence_args() -> W {
    W::default()
        .u32(53)
        .fixed(&[9; 16])
        .u32(1)
        .u32(0)
        .u32(0)
        .u32(0)
}

fn sequence_res() -> W {
    W::default()
        .u32(53)
        .u32(0)
        .fixed(&[9; 16])
        .u32(1)
        .u32(0)
        .u32(0)
        .u32(0)
        .u32(0)
}

// One push per case keeps each case's comment beside it.
#[allow(clippy::vec_init_then_push)]
fn nfs4() -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v = Vec::new();
    // OPEN (create, claim null) + GETFH + READ + WRITE + CLOSE
    v.push((
        compound_call(
            0x4001,
            b"open",
            1,
            &[
                sequence_args(),
                W::default().u32(22).opaque(DIR),
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
                W::default().u32(25).fixed(&stateid(1)).u64(4096).u32(8192),
                W::default()
                    .u32(38)
                    .fixed(&stateid(1))
                    .u64(0)
                    .u32(2)
                    .opaque(b"hello"),
                W::default().u32(4).u32(0).fixed(&stateid(1)),
            ],
        ),
        compound_reply(
            0x4001,
            0,
            b"open",
            &[
                sequence_res(),
                W::default().u32(22).u32(0),
                W::default()
                    .u32(18)
                    .u32(0)
                    .fixed(&stateid(2))
                    .u32(1)
                    .u64(1)
                    .u64(2)
                    .u32(4)
                    .u32(0)
                    .u32(0),
                W::default().u32(10).u32(0).opaque(FILE),
                W::default().u32(25).u32(0).u32(1).opaque(b"0123456789"),
                W::default()
                    .u32(38)
                    .u32(0)
                    .u32(5)
                    .u32(2)
                    .u64(0x1122334455667788),
                W::default().u32(4).u32(0).fixed(&stateid(3)),
            ],
        ),
    ));
    // PUTFH + GETATTR
    v.push((
        compound_call(
            0x4002,
            b"getattr",
            0,
            &[
                W::default().u32(22).opaque(FILE),
                W::default()
                    .u32(9)
                    .u32(2)
                    .u32(1 << 1 | 1 << 4 | 1 << 20)
                    .u32(1 << 1 | 1 << 4),
            ],
        ),
        compound_reply(
            0x4002,
            0,
            b"getattr",
            &[
                W::default().u32(22).u32(0),
                fattr4(W::default().u32(9).u32(0), 4242),
            ],
        ),
    ));
    // PUTFH + LOOKUP fails with NFS4ERR_NOENT: the reply ends there
    v.push((
        compound_call(
            0x4003,
            b"lookup",
            0,
            &[
                W::default().u32(22).opaque(DIR),
                W::default().u32(15).opaque(b"nothere"),
                W::default().u32(10),
            ],
        ),
        compound_reply(
            0x4003,
            2,
            b"lookup",
            &[W::default().u32(22).u32(0), W::default().u32(15).u32(2)],
        ),
    ));
    // SAVEFH/RESTOREFH with RENAME, REMOVE, LINK, CREATE
    v.push((
        compound_call(
            0x4004,
            b"",
            0,
            &[
                W::default().u32(22).opaque(DIR),
                W::default().u32(32),
                W::default().u32(22).opaque(NEW),
                W::default().u32(29).opaque(b"old").opaque(b"new"),
                W::default().u32(28).opaque(b"gone"),
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
        ),
        compound_reply(
            0x4004,
            0,
            b"",
            &[
                W::default().u32(22).u32(0),
                W::default().u32(32).u32(0),
                W::default().u32(22).u32(0),
                W::default()
                    .u32(29)
                    .u32(0)
                    .u32(1)
                    .u64(1)
                    .u64(2)
                    .u32(1)
                    .u64(3)
                    .u64(4),
                W::default().u32(28).u32(0).u32(1).u64(1).u64(2),
                W::default().u32(31).u32(0),
                W::default().u32(11).u32(0).u32(1).u64(1).u64(2),
                W::default().u32(6).u32(0).u32(1).u64(1).u64(2).u32(0),
            ],
        ),
    ));
    // READDIR with attributes
    let entries = W::default()
        .u32(26)
        .u32(0)
        .u64(0)
        .u32(1)
        .u64(100)
        .opaque(b"a.txt");
    let entries = fattr4(entries, 501).u32(1).u64(200).opaque(b"b.txt");
    let entries = fattr4(entries, 502).u32(0).u32(1);
    v.push((
        compound_call(
            0x4005,
            b"readdir",
            0,
            &[
                W::default().u32(22).opaque(DIR),
                W::default()
                    .u32(26)
                    .u64(0)
                    .u64(0)
                    .u32(4096)
                    .u32(32768)
                    .u32(2)
                    .u32(1 << 20)
                    .u32(1 << 4),
            ],
        ),
        compound_reply(
            0x4005,
            0,
            b"readdir",
            &[W::default().u32(22).u32(0), entries],
        ),
    ));
    // EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE
    v.push((
        compound_call(
            0x4006,
            b"",
            1,
            &[W::default()
                .u32(42)
                .u64(1)
                .opaque(b"Linux NFSv4.1 client")
                .u32(0x101)
                .u32(0)
                .u32(1)
                .opaque(b"kernel.org")
                .opaque(b"Linux")
                .u64(1)
                .u32(0)],
        ),
        compound_reply(
            0x4006,
            0,
            b"",
            &[W::default()
                .u32(42)
                .u32(0)
                .u64(0x5555)
                .u32(1)
                .u32(0x10001)
                .u32(0)
                .u64(9)
                .opaque(b"server")
                .opaque(b"scope")
                .u32(0)],
        ),
    ));
    v.push((
        compound_call(
            0x4007,
            b"",
            1,
            &[
                W::default()
                    .u32(43)
                    .u64(0x5555)
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
                    .opaque(b"client")
                    .u32(0)
                    .u32(0)
                    .u32(0),
                W::default().u32(58).u32(0),
            ],
        ),
        compound_reply(
            0x4007,
            0,
            b"",
            &[
                W::default()
                    .u32(43)
                    .u32(0)
                    .fixed(&[9; 16])
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
                    .u32(0),
                W::default().u32(58).u32(0),
            ],
        ),
    ));
    v
}

fn mount() -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (
            call(0x5001, MOUNT, 3, 1).opaque(b"/export/home").0,
            reply(0x5001).u32(0).opaque(DIR).u32(2).u32(1).u32(390003).0,
        ),
        (
            call(0x5002, MOUNT, 3, 1).opaque(b"/secret").0,
            reply(0x5002).u32(13).0,
        ),
        (
            call(0x5003, MOUNT, 3, 5).0,
            reply(0x5003)
                .u32(1)
                .opaque(b"/export")
                .u32(1)
                .opaque(b"*")
                .u32(0)
                .u32(1)
                .opaque(b"/srv")
                .u32(0)
                .u32(0)
                .0,
        ),
        (
            call(0x5004, MOUNT, 3, 2).0,
            reply(0x5004)
                .u32(1)
                .opaque(b"client")
                .opaque(b"/export")
                .u32(0)
                .0,
        ),
        (
            call(0x5005, MOUNT, 3, 3).opaque(b"/export/home").0,
            reply(0x5005).0,
        ),
    ]
}

/// RPC-level cases: AUTH_ERROR and PROG_MISMATCH replies.
fn rpc_only() -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (
            call(0x6001, NFS, 3, 1).opaque(FILE).0,
            W::default().u32(0x6001).u32(1).u32(1).u32(1).u32(5).0,
        ),
        (
            call(0x6002, NFS, 3, 1).opaque(FILE).0,
            W::default()
                .u32(0x6002)
                .u32(1)
                .u32(0)
                .u32(0)
                .u32(0)
                .u32(2)
                .u32(2)
                .u32(3)
                .0,
        ),
    ]
}

fn all_messages() -> Vec<(bool, u16, Vec<u8>)> {
    let mut msgs = Vec::new();
    for (port, pairs) in [
        (NFS_PORT, nfs3()),
        (NFS_PORT, nfs4()),
        (MOUNT_PORT, mount()),
        (NFS_PORT, rpc_only()),
    ] {
        for (c, r) in pairs {
            msgs.push((true, port, c));
            msgs.push((false, port, r));
        }
    }
    msgs
}

#[test]
fn synthetic_messages_match_tshark() {
    if !tshark::available() {
        eprintln!("skipping: tshark is not installed");
        return;
    }
    let msgs = all_messages();
    let dir = tempfile::tempdir().unwrap();
    // TAPDECK_KEEP_PCAP=path keeps the capture for a look in Wireshark.
    let path = std::env::var_os("TAPDECK_KEEP_PCAP")
        .map(Into::into)
        .unwrap_or_else(|| dir.path().join("synthetic.pcap"));
    write_udp_pcap(&path, &msgs);
    let c = tshark::compare(
        &path,
        &[NFS_PORT, MOUNT_PORT],
        &["-d", "udp.port==20048,rpc"],
    );
    eprintln!(
        "synthetic: {} messages, {} frames compared, {} values compared",
        msgs.len(),
        c.frames,
        c.values
    );
    assert!(
        c.missed.is_empty(),
        "tshark decoded frames we did not: {:?}",
        c.missed
    );
    assert_eq!(c.frames, msgs.len(), "every hand-made message is compared");
    assert_eq!(
        c.header_only, 0,
        "every hand-made message has a body decoder"
    );
    assert!(
        c.mismatches.is_empty(),
        "{} mismatches:\n{}",
        c.mismatches.len(),
        c.mismatches.join("\n")
    );
}

/// The same messages as a header-only capture stores them (frames cut at 160 bytes): whatever
/// tshark still reads, this crate reads the same, and the cut ones say so.
#[test]
fn snapped_messages_match_tshark() {
    if !tshark::available() {
        eprintln!("skipping: tshark is not installed");
        return;
    }
    let msgs = all_messages();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapped.pcap");
    const SNAP: usize = 160;
    write_udp_pcap_snapped(&path, &msgs, SNAP);
    let c = tshark::compare(
        &path,
        &[NFS_PORT, MOUNT_PORT],
        &["-d", "udp.port==20048,rpc"],
    );
    eprintln!(
        "snapped: {} messages, {} frames compared, {} values compared, {} names cut",
        msgs.len(),
        c.frames,
        c.values,
        c.cut_names
    );
    assert!(c.cut_names <= 3, "only names at the cut may differ");
    assert!(
        c.missed.is_empty(),
        "tshark decoded frames we did not: {:?}",
        c.missed
    );
    assert!(
        c.mismatches.is_empty(),
        "{} mismatches:\n{}",
        c.mismatches.len(),
        c.mismatches.join("\n")
    );
    // Every message longer than the snap (42 bytes of Ethernet/IP/UDP before it) is reported cut.
    let found = tshark::messages(&path, &[NFS_PORT, MOUNT_PORT]);
    let ours = tshark::our_fields(&found);
    let mut cut = 0;
    for (i, (_, _, m)) in msgs.iter().enumerate() {
        let Some((_, Some(d))) = ours.get(&(i as u32 + 1)) else {
            continue;
        };
        if m.len() + 42 > SNAP {
            cut += 1;
            assert!(
                d.truncated,
                "frame {} was cut but decodes as whole: {d:?}",
                i + 1
            );
        } else {
            assert!(!d.truncated, "frame {} is whole", i + 1);
        }
    }
    assert!(
        cut > 10,
        "the snap cuts a good share of the messages ({cut})"
    );
}

const NLM: u32 = 100021;
const NFS_ACL: u32 = 100227;
const NLM_PORT: u16 = 4045;

/// nlm_lock with 32-bit ranges (v1, v3).
fn lock32(w: W, svid: u32, offset: u32, len: u32) -> W {
    w.opaque(b"pc-42")
        .opaque(&FILE[..16])
        .opaque(b"owner-x")
        .u32(svid)
        .u32(offset)
        .u32(len)
}

/// NLM v1 and v3 (32-bit ranges), the asynchronous forms, SHARE and FREE_ALL, and NFS_ACL v2:
/// what the real captures (NLM v4 and NFS_ACL v3 only) do not hold.
fn nlm_and_acl() -> Vec<(Vec<u8>, Vec<u8>)> {
    let ck = |n: u8| vec![0xc0, 0, 0, n];
    vec![
        // v1 TEST, denied: the holder with 32-bit range.
        (
            lock32(call(0x7001, NLM, 1, 1).opaque(&ck(1)).u32(1), 7, 100, 20).0,
            reply(0x7001)
                .opaque(&ck(1))
                .u32(1)
                .u32(1)
                .u32(99)
                .opaque(b"holder")
                .u32(90)
                .u32(40)
                .0,
        ),
        // v3 LOCK, blocking and reclaiming: NLM_BLOCKED.
        (
            lock32(
                call(0x7002, NLM, 3, 2).opaque(&ck(2)).u32(1).u32(0),
                8,
                0,
                0,
            )
            .u32(1)
            .u32(12)
            .0,
            reply(0x7002).opaque(&ck(2)).u32(3).0,
        ),
        // v3 LOCK_MSG (void reply), the server's LOCK_RES call (void reply).
        (
            lock32(
                call(0x7003, NLM, 3, 7).opaque(&ck(3)).u32(0).u32(1),
                8,
                4,
                4,
            )
            .u32(0)
            .u32(12)
            .0,
            reply(0x7003).0,
        ),
        (
            call(0x7004, NLM, 3, 12).opaque(&ck(3)).u32(0).0,
            reply(0x7004).0,
        ),
        // v3 UNLOCK_MSG and GRANTED.
        (
            lock32(call(0x7005, NLM, 3, 9).opaque(&ck(4)), 8, 4, 4).0,
            reply(0x7005).0,
        ),
        (
            lock32(call(0x7006, NLM, 3, 5).opaque(&ck(5)).u32(1), 8, 0, 10).0,
            reply(0x7006).opaque(&ck(5)).u32(0).0,
        ),
        // v3 SHARE (deny write, read access), its sequence; FREE_ALL.
        (
            call(0x7007, NLM, 3, 20)
                .opaque(&ck(6))
                .opaque(b"pc-42")
                .opaque(&FILE[..16])
                .opaque(b"owner-x")
                .u32(2)
                .u32(1)
                .u32(0)
                .0,
            reply(0x7007).opaque(&ck(6)).u32(0).u32(17).0,
        ),
        (
            call(0x7008, NLM, 3, 23).opaque(b"pc-42").u32(5).0,
            reply(0x7008).0,
        ),
        // NFS_ACL v2 GETACL with one entry and a default ACL, ACCESS.
        (
            call(0x7101, NFS_ACL, 2, 1).fixed(&[0xee; 32]).u32(0xf).0,
            reply(0x7101)
                .u32(0)
                .u32(1)
                .u32(0o644)
                .u32(1)
                .u32(0)
                .u32(0)
                .u32(10)
                .u32(4096)
                .u32(0)
                .u32(8)
                .u32(0x801)
                .u32(123)
                .u32(1)
                .u32(0)
                .u32(2)
                .u32(0)
                .u32(3)
                .u32(0)
                .u32(0xf)
                .u32(1)
                .u32(1)
                .u32(1)
                .u32(0)
                .u32(6)
                .u32(0)
                .u32(0)
                .0,
        ),
    ]
}

#[test]
fn synthetic_nlm_and_acl_match_tshark() {
    if !tshark::available() {
        eprintln!("skipping: tshark is not installed");
        return;
    }
    let mut msgs = Vec::new();
    for (c, r) in nlm_and_acl() {
        msgs.push((true, NLM_PORT, c));
        msgs.push((false, NLM_PORT, r));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nlm.pcap");
    write_udp_pcap(&path, &msgs);
    let c = tshark::compare(&path, &[NLM_PORT], &["-d", "udp.port==4045,rpc"]);
    eprintln!(
        "synthetic NLM/NFS_ACL: {} frames, {} values compared",
        c.frames, c.values
    );
    assert!(
        c.missed.is_empty(),
        "tshark decoded frames we did not: {:?}",
        c.missed
    );
    assert_eq!(c.frames, msgs.len());
    assert_eq!(c.header_only, 0);
    assert!(c.mismatches.is_empty(), "{}", c.mismatches.join("\n"));
}
