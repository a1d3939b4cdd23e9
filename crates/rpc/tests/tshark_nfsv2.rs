//! NFSv2 and MOUNT v1 against tshark on a real capture (tests/captures/nfsv2.pcap, see the
//! README there): every procedure the capture holds, field by field, including the v2
//! attributes (times in seconds and microseconds), READ/WRITE offsets and data lengths, names
//! and READDIR entries.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::tshark;

fn capture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/captures/nfsv2.pcap")
}

/// NFS on 2049, portmap on 111, and the capture's MOUNT server ports.
const PORTS: &[u16] = &[2049, 111, 671, 686];

#[test]
fn nfsv2_capture_matches_tshark() {
    if !tshark::available() {
        eprintln!("skipping: tshark is not installed");
        return;
    }
    let path = capture();
    let msgs = tshark::messages(&path, PORTS);
    assert_eq!(msgs.len(), 156, "the capture's RPC messages");
    let c = tshark::compare(&path, PORTS, &[]);
    eprintln!(
        "nfsv2.pcap: {} frames, {} values compared with tshark",
        c.frames, c.values
    );
    assert_eq!(c.frames, 156);
    assert!(
        c.missed.is_empty(),
        "tshark decoded frames we did not: {:?}",
        c.missed
    );
    assert!(c.mismatches.is_empty(), "{}", c.mismatches.join("\n"));
    // Only portmap (no body decoder) is compared by its header alone.
    assert_eq!(c.header_only, 6);

    // Every procedure the capture holds was decoded, calls and replies, without a cut or an
    // invalid byte.
    let ours = tshark::our_fields(&msgs);
    let mut procs = BTreeSet::new();
    for (frame, (_, d)) in &ours {
        let d = d.as_ref().expect("every reply's call is in the capture");
        assert!(!d.truncated && d.invalid.is_none(), "frame {frame}: {d:?}");
        for op in &d.ops {
            procs.insert(op.op_name);
        }
    }
    let want = [
        "CREATE", "GETATTR", "LINK", "LOOKUP", "MKDIR", "NULL", "READ", "READDIR", "READLINK",
        "REMOVE", "RENAME", "RMDIR", "SETATTR", "STATFS", "SYMLINK", "WRITE",
    ];
    assert_eq!(procs, want.into_iter().collect());
}
