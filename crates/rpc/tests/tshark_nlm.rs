//! NLM v4, NSM and NFS_ACL v3 against tshark on real captures (tests/captures/nlm_v4.pcap and
//! nfsacl_v3.pcap, see the README there): every message, field by field — cookies, lock
//! owners, file handles, svids, 64-bit ranges, the holder a denied TEST names, statuses, the
//! status monitor's names and results, the ACL mask and counts.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::tshark;

fn capture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/captures")
        .join(name)
}

#[test]
fn nlm_and_nsm_capture_matches_tshark() {
    if !tshark::available() {
        eprintln!("skipping: tshark is not installed");
        return;
    }
    let path = capture("nlm_v4.pcap");
    // portmap, NFS, MOUNT, and the ports rpcbind gave ganesha's NLM and rpc.statd.
    let ports = &[111, 2049, 44471, 43255, 46707];
    let msgs = tshark::messages(&path, ports);
    let c = tshark::compare(&path, ports, &[]);
    eprintln!(
        "nlm_v4.pcap: {} frames, {} values compared with tshark",
        c.frames, c.values
    );
    assert_eq!(c.frames, msgs.len());
    assert!(
        c.missed.is_empty(),
        "tshark decoded frames we did not: {:?}",
        c.missed
    );
    assert!(c.mismatches.is_empty(), "{}", c.mismatches.join("\n"));
    assert_eq!(c.header_only, 16, "portmap only: 8 calls, 8 replies");

    let ours = tshark::our_fields(&msgs);
    let mut procs = BTreeSet::new();
    let mut statuses = BTreeSet::new();
    let mut holders = 0;
    for (frame, (_, d)) in &ours {
        let d = d.as_ref().expect("every reply's call is in the capture");
        assert!(!d.truncated && d.invalid.is_none(), "frame {frame}: {d:?}");
        if let Some(r) = &d.nlm {
            procs.insert(format!("NLM {}", r.proc_name));
            statuses.extend(r.status);
            holders += r.holder.is_some() as usize;
        }
        if let Some(r) = &d.nsm {
            procs.insert(format!("NSM {}", r.proc_name));
        }
    }
    let want = [
        "NLM CANCEL",
        "NLM LOCK",
        "NLM NULL",
        "NLM TEST",
        "NLM UNLOCK",
        "NSM MON",
        "NSM NOTIFY",
        "NSM NULL",
        "NSM STAT",
        "NSM UNMON",
        "NSM UNMON_ALL",
    ];
    assert_eq!(procs, want.iter().map(|s| s.to_string()).collect());
    assert_eq!(statuses, [0, 1].into(), "NLM_GRANTED and NLM_DENIED");
    assert_eq!(holders, 1, "the denied TEST names the holder");
}

#[test]
fn nfsacl_capture_matches_tshark() {
    if !tshark::available() {
        eprintln!("skipping: tshark is not installed");
        return;
    }
    let path = capture("nfsacl_v3.pcap");
    let ports = &[111, 2049, 20048];
    let msgs = tshark::messages(&path, ports);
    let c = tshark::compare(&path, ports, &[]);
    eprintln!(
        "nfsacl_v3.pcap: {} frames, {} values compared with tshark",
        c.frames, c.values
    );
    // The client sent several records in some segments; this harness frames one record per
    // segment (reassembly is the converter's job, tested end to end), so those frames are
    // left to the end-to-end test.
    let several: Vec<String> = tshark::tshark_fields(&path, &["rpc.xid"], &[])
        .into_iter()
        .filter(|(_, f)| f.get("rpc.xid").is_some_and(|x| x.len() > 1))
        .map(|(frame, _)| format!(" frame {frame} "))
        .collect();
    assert!(!several.is_empty());
    let mismatches: Vec<&String> = c
        .mismatches
        .iter()
        .filter(|m| !several.iter().any(|f| m.contains(f.as_str())))
        .collect();
    assert!(c.frames > 60);
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    let ours = tshark::our_fields(&msgs);
    let acl: Vec<_> = ours
        .values()
        .filter_map(|(_, d)| d.as_ref()?.acl.clone())
        .collect();
    let names: Vec<_> = acl.iter().map(|a| a.proc_name).collect();
    assert_eq!(names, ["NULL", "NULL", "GETACL", "GETACL"]);
    let reply = &acl[3];
    assert_eq!(
        (
            reply.status,
            reply.mask,
            reply.acl_count,
            reply.default_acl_count
        ),
        (Some(0), Some(0xc), Some(0), Some(0))
    );
    assert_eq!(reply.attrs.len(), 1, "the directory's post_op_attr");
}
