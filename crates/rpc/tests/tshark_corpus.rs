//! The public corpus's NFS/RPC captures, decoded by tshark and by this crate, field by field.
//! Several of them are deliberately malformed (they once crashed tcpdump); decoding them must
//! not panic, and whatever tshark still reads must agree.

mod common;

use std::path::PathBuf;

use common::tshark;

fn corpus() -> Option<PathBuf> {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/tcpdump-tests");
    dir.is_dir().then_some(dir)
}

#[test]
fn corpus_rpc_messages_match_tshark() {
    let Some(dir) = corpus() else {
        eprintln!("skipping: corpus not found (../shared/corpus)");
        return;
    };
    if !tshark::available() {
        eprintln!("skipping: tshark is not installed");
        return;
    }
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_lowercase();
            ["nfs", "rpc", "mount"].iter().any(|k| name.contains(k))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let (mut found, mut compared, mut values, mut mismatches, mut missed) =
        (0, 0, 0, Vec::new(), Vec::new());
    for f in &files {
        // One capture runs NFS from port 993, which tshark would otherwise take for TLS.
        found += tshark::messages(f, &[2049, 111, 20048]).len();
        let c = tshark::compare(f, &[2049, 111, 20048], &["-d", "tcp.port==993,rpc"]);
        compared += c.frames;
        values += c.values;
        mismatches.extend(c.mismatches);
        missed.extend(c.missed.iter().map(|n| format!("{}#{n}", f.display())));
    }
    eprintln!(
        "corpus: {} files, {found} RPC messages found, {compared} compared with tshark, {values} values",
        files.len()
    );
    assert!(
        compared >= 2,
        "the corpus has at least the NFSv2 LOOKUP call and the NFSv3 WRITE call/reply"
    );
    assert!(
        missed.is_empty(),
        "tshark decoded RPC frames we did not: {missed:?}"
    );
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// Every message found in any corpus file goes through every decoder (as call and as reply of
/// every supported program/version/procedure): nothing may panic.
#[test]
fn corpus_payloads_never_panic_any_decoder() {
    let Some(dir) = corpus() else {
        eprintln!("skipping: corpus not found (../shared/corpus)");
        return;
    };
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_lowercase();
        if !["nfs", "rpc", "mount", "sunrpc"]
            .iter()
            .any(|k| name.contains(k))
        {
            continue;
        }
        for m in tshark::messages(&e.path(), &[2049, 111, 20048, 993]) {
            n += 1;
            let _ = tapdeck_rpc::parse_message(&m.bytes);
            for body in [&m.bytes[..], m.bytes.get(24..).unwrap_or(&[])] {
                for (prog, vers) in [
                    (100003, 2),
                    (100003, 3),
                    (100003, 4),
                    (100005, 1),
                    (100005, 3),
                ] {
                    for proc_ in 0..24 {
                        for dir in [tapdeck_rpc::Direction::Call, tapdeck_rpc::Direction::Reply] {
                            let _ = tapdeck_rpc::decode(prog, vers, proc_, dir, body);
                        }
                    }
                }
            }
        }
    }
    eprintln!("{n} corpus payloads through every decoder");
    assert!(n > 0);
}
