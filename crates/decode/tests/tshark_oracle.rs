//! Dissection and RPC framing checked against tshark (and tcpdump) on the public corpus.
//!
//! tshark quirks normalised here:
//! - It dissects tunnels and quoted packets (ICMP errors), reporting fields as comma lists:
//!   we compare the first (outermost) value, and ports only when our outermost transport is
//!   TCP/UDP (for ICMP its first `tcp.srcport` is the quoted packet's).
//! - Which of IPv4/IPv6 is outermost comes from the order in `frame.protocols`.
//! - IP reassembly is turned off (`ip.defragment:FALSE`, `ipv6.defragment:FALSE`) so
//!   fragments show their own headers.
//! - The final IPv6 protocol after extension headers is not one tshark field: compared only
//!   when the fixed header's next header is not an extension header.
//! - 802.1ad S-tags are `ieee8021ad.id`, 802.1Q tags `vlan.id`; the outermost is the S-tag.
//! - Packets we flag as truncated (a header cut by the capture, or malformed) are skipped:
//!   tshark shows partial fields for them in its own way. So are packets tshark calls
//!   malformed (its dissection stops at an exception).
//! - Encapsulations below IP that we do not parse (MPLS, NSH, MACsec, Arista's timestamp
//!   header): when our network ethertype is not IPv4/IPv6 we claim no IP, tshark finds the
//!   IP inside; not compared.
//! - `vlan.id` also holds tags of inner frames (ERSPAN, sFlow samples): only tags that come
//!   before anything but link layers in `frame.protocols` are outer tags.
//! - `ipv6.fraghdr.*` also comes from packets quoted in ICMPv6 errors: only a fragment
//!   header before the second IP layer in `frame.protocols` counts.
//! - IPv6 jumbograms / BIG TCP (payload length 0): tshark 4.0 does not dissect the
//!   transport (tcpdump does, and so do we): transport not compared.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tapdeck_decode::packet::Transport;
use tapdeck_decode::rpc_framing::{FramingConfig, TcpRpcTracker, TrackerConfig};
use tapdeck_decode::{dissect, Headers};
use tapdeck_pcap::TraceReader;

/// (link type, captured bytes, wire length) of one packet.
type Frame = (u32, Vec<u8>, u32);
/// A corpus file and its packets.
type File = (PathBuf, Vec<Frame>);

/// Link types we dissect and tshark 4.0 does too. SLIP (8) and the Broadcom switch tags
/// (281, 282) it does not: tests/e2e/test_convert_packets.py checks those against tcpdump.
const SUPPORTED: &[u32] = &[
    0, 1, 9, 12, 14, 50, 100, 101, 104, 107, 108, 113, 123, 129, 178, 226, 228, 229, 239, 242, 258,
    276,
];

fn corpus() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/tcpdump-tests");
    if p.is_dir() && Path::new("/usr/bin/tshark").exists() {
        Some(p)
    } else {
        eprintln!("skipping: corpus {} or /usr/bin/tshark absent", p.display());
        None
    }
}

/// (linktype, frame, wire length) of every packet; None if unreadable or any interface has
/// an unsupported link type.
fn read(path: &Path) -> Option<Vec<Frame>> {
    let data = std::fs::read(path).ok()?;
    let mut r = TraceReader::new(&data[..]).ok()?;
    let mut out = vec![];
    while let Ok(Some(p)) = r.next_packet() {
        let (iface, d, wire) = (p.iface as usize, p.data.to_vec(), p.orig_len);
        let lt = u32::from(r.interfaces().get(iface)?.linktype);
        if !SUPPORTED.contains(&lt) {
            return None;
        }
        out.push((lt, d, wire));
    }
    Some(out)
}

const FIELDS: &[&str] = &[
    "frame.protocols",
    "vlan.id",
    "ieee8021ad.id",
    "ip.src",
    "ip.dst",
    "ip.proto",
    "ip.flags.mf",
    "ip.frag_offset",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.nxt",
    "ipv6.fraghdr.offset",
    "ipv6.fraghdr.more",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.seq",
    "tcp.flags",
    "udp.srcport",
    "udp.dstport",
    "_ws.expert.message",
];

fn tshark_fields(path: &Path) -> Vec<Vec<String>> {
    let mut cmd = Command::new("/usr/bin/tshark");
    cmd.arg("-r").arg(path);
    for o in [
        "tcp.relative_sequence_numbers:FALSE",
        "ip.defragment:FALSE",
        "ipv6.defragment:FALSE",
    ] {
        cmd.args(["-o", o]);
    }
    cmd.args(["-T", "fields", "-E", "separator=/t", "-E", "occurrence=a"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

fn first(s: &str) -> &str {
    s.split(',').next().unwrap_or("")
}

fn num(s: &str) -> Option<u64> {
    let s = first(s);
    if let Some(h) = s.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// Differences between our dissection and one tshark row, as text.
fn compare(h: &Headers<'_>, frame: &[u8], row: &[String]) -> Vec<String> {
    let n = h.network_offset as usize;
    let jumbo = h.ip.is_some_and(|ip| ip.version == 6) && frame.get(n + 4..n + 6) == Some(&[0, 0]);
    let f = |name: &str| -> &str {
        let i = FIELDS.iter().position(|x| *x == name).unwrap();
        row.get(i).map(String::as_str).unwrap_or("")
    };
    let mut diffs = vec![];
    let mut check = |what: &str, ours: String, theirs: String| {
        if ours != theirs {
            diffs.push(format!("{what}: ours {ours} tshark {theirs}"));
        }
    };
    let protos: Vec<&str> = f("frame.protocols").split(':').collect();
    let outer = protos.iter().find(|p| **p == "ip" || **p == "ipv6");
    let their_version = match outer {
        Some(&"ip") => 4,
        Some(_) => 6,
        None => 0,
    };
    let link_layers = [
        "eth",
        "ethertype",
        "sll",
        "null",
        "raw",
        "loop",
        "vlan",
        "ieee8021ad",
    ];
    let outer_tagged = protos
        .iter()
        .take_while(|p| link_layers.contains(p))
        .any(|p| *p == "vlan" || *p == "ieee8021ad");
    let vlan = if !outer_tagged {
        None
    } else if !f("ieee8021ad.id").is_empty() {
        num(f("ieee8021ad.id"))
    } else {
        num(f("vlan.id"))
    };
    check(
        "vlan",
        format!("{:?}", h.vlan.map(u64::from)),
        format!("{vlan:?}"),
    );
    let Some(ip) = h.ip else {
        if matches!(h.ethertype, Some(0x0800 | 0x86dd)) {
            check("ip version", "0".into(), their_version.to_string());
        }
        return diffs;
    };
    check(
        "ip version",
        ip.version.to_string(),
        their_version.to_string(),
    );
    if their_version != ip.version {
        return diffs;
    }
    if ip.version == 4 {
        check("src", ip.src_addr().to_string(), first(f("ip.src")).into());
        check("dst", ip.dst_addr().to_string(), first(f("ip.dst")).into());
        check(
            "proto",
            ip.protocol.to_string(),
            first(f("ip.proto")).into(),
        );
        let frag = num(f("ip.flags.mf")) == Some(1) || num(f("ip.frag_offset")).unwrap_or(0) != 0;
        check("fragment", ip.fragment.to_string(), frag.to_string());
    } else {
        check(
            "src",
            ip.src_addr().to_string(),
            first(f("ipv6.src")).into(),
        );
        check(
            "dst",
            ip.dst_addr().to_string(),
            first(f("ipv6.dst")).into(),
        );
        if let Some(nxt) = num(f("ipv6.nxt")) {
            if ![0, 43, 44, 51, 60].contains(&nxt) {
                check("proto", ip.protocol.to_string(), nxt.to_string());
            }
        }
        let second_ip = protos
            .iter()
            .enumerate()
            .filter(|(_, p)| **p == "ip" || **p == "ipv6")
            .nth(1)
            .map_or(protos.len(), |(i, _)| i);
        let outer_frag = protos[..second_ip].contains(&"ipv6.fraghdr");
        let frag = outer_frag
            && (num(f("ipv6.fraghdr.more")) == Some(1)
                || num(f("ipv6.fraghdr.offset")).unwrap_or(0) != 0);
        check("fragment", ip.fragment.to_string(), frag.to_string());
        if jumbo {
            return diffs;
        }
    }
    match h.transport {
        Transport::Tcp(t) => {
            check(
                "sport",
                t.src_port.to_string(),
                first(f("tcp.srcport")).into(),
            );
            check(
                "dport",
                t.dst_port.to_string(),
                first(f("tcp.dstport")).into(),
            );
            check("seq", t.seq.to_string(), first(f("tcp.seq")).into());
            check(
                "flags",
                format!("{:?}", Some(u64::from(t.flags))),
                format!("{:?}", num(f("tcp.flags"))),
            );
        }
        Transport::Udp(u) => {
            check(
                "sport",
                u.src_port.to_string(),
                first(f("udp.srcport")).into(),
            );
            check(
                "dport",
                u.dst_port.to_string(),
                first(f("udp.dstport")).into(),
            );
        }
        _ => {}
    }
    diffs
}

/// Every corpus file we can read whose interfaces all have supported link types.
fn supported_files(dir: &Path) -> Vec<File> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|p| read(&p).map(|pk| (p, pk)))
        .filter(|(_, pk)| !pk.is_empty())
        .collect()
}

/// One pcapng holding all packets, one interface per link type, so tshark starts once
/// (it costs about a second per start here).
fn merged_pcapng(files: &[File], out: &Path) {
    use tapdeck_pcap::{Format, Interface, Packet, SectionInfo};
    let ifaces: Vec<Interface> = SUPPORTED
        .iter()
        .map(|&lt| Interface {
            linktype: lt as u16,
            snaplen: 0,
            ..Default::default()
        })
        .collect();
    let mut bytes = Format::Pcapng
        .file_header(&ifaces, &SectionInfo::default())
        .unwrap();
    for (_, pkts) in files {
        for (lt, frame, wire) in pkts {
            let p = Packet {
                ts_ns: 0,
                iface: SUPPORTED.iter().position(|x| x == lt).unwrap() as u32,
                orig_len: (*wire).max(frame.len() as u32),
                flags: None,
                data: frame,
            };
            let at = bytes.len();
            bytes.resize(at + Format::Pcapng.record_len(&p), 0);
            let n = Format::Pcapng.write_record(&p, &mut bytes[at..]);
            bytes.truncate(at + n);
        }
    }
    std::fs::write(out, bytes).unwrap();
}

#[test]
fn dissection_matches_tshark() {
    let Some(dir) = corpus() else { return };
    let start = Instant::now();
    let files = supported_files(&dir);
    let merged = std::env::temp_dir().join(format!("tapdeck-decode-{}.pcapng", std::process::id()));
    merged_pcapng(&files, &merged);
    let rows = tshark_fields(&merged);
    let _ = std::fs::remove_file(&merged);
    let total: usize = files.iter().map(|(_, p)| p.len()).sum();
    assert_eq!(rows.len(), total, "tshark rows vs packets written");
    let (mut ncompared, mut skipped_trunc, mut with_ip, mut tcp_udp) = (0, 0, 0, 0);
    let mut skipped_malformed = 0;
    let mut diffs = vec![];
    let mut row = rows.iter();
    for (path, pkts) in &files {
        for (i, (lt, frame, _)) in pkts.iter().enumerate() {
            let r = row.next().unwrap();
            let h = dissect(*lt, frame);
            if h.truncated {
                skipped_trunc += 1;
                continue;
            }
            if r.last().is_some_and(|e| e.contains("Malformed Packet")) {
                skipped_malformed += 1;
                continue;
            }
            ncompared += 1;
            with_ip += usize::from(h.ip.is_some());
            tcp_udp += usize::from(h.transport.ports().is_some());
            for d in compare(&h, frame, r) {
                let name = path.file_name().unwrap().to_string_lossy();
                diffs.push(format!("{name} packet {}: {d}", i + 1));
            }
        }
    }
    eprintln!(
        "{} files, {total} packets, {ncompared} compared ({with_ip} IP, {tcp_udp} TCP/UDP), \
         {skipped_trunc} truncated and {skipped_malformed} malformed (by tshark) skipped, \
         {} differences, {:?}",
        files.len(),
        diffs.len(),
        start.elapsed()
    );
    for d in diffs.iter().take(400) {
        eprintln!("{d}");
    }
    assert!(files.len() >= 100, "only {} files", files.len());
    assert!(diffs.is_empty(), "{} differences", diffs.len());
}

/// (xid, msg_type) of every RPC message our framer finds in a trace's TCP packets.
fn our_rpcs(pkts: &[(u32, Vec<u8>, u32)]) -> Vec<(u32, u32)> {
    let mut t = TcpRpcTracker::new(TrackerConfig::default());
    let mut found = vec![];
    let mut add = |_: &tapdeck_decode::FlowKey, m: tapdeck_decode::RpcMessage<'_, usize>| {
        if let (Some(x), Some(y)) = (m.body.get(0..4), m.body.get(4..8)) {
            let w = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            found.push((w(x), w(y)));
        }
    };
    for (i, (lt, frame, _)) in pkts.iter().enumerate() {
        let h = dissect(*lt, frame);
        t.packet(&h, i, i as u64, &mut add);
    }
    t.finish(pkts.len(), &mut add);
    found.sort();
    found
}

fn tshark_rpcs(path: &Path) -> Vec<(u32, u32)> {
    let out = Command::new("/usr/bin/tshark")
        .arg("-r")
        .arg(path)
        .args(["-d", "tcp.port==2049,rpc", "-Y", "rpc && tcp"])
        .args([
            "-T",
            "fields",
            "-E",
            "separator=/t",
            "-e",
            "rpc.xid",
            "-e",
            "rpc.msgtyp",
        ])
        .output()
        .expect("run tshark");
    let mut v = vec![];
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let mut it = l.split('\t');
        let (xs, ts) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
        for (x, t) in xs.split(',').zip(ts.split(',')) {
            if let (Some(x), Ok(t)) = (num(x), t.parse()) {
                v.push((x as u32, t));
            }
        }
    }
    v.sort();
    v
}

/// xids tcpdump prints for NFS over TCP ("NFS request xid N" / "NFS reply xid N").
fn tcpdump_rpcs(path: &Path) -> Vec<(u32, u32)> {
    let out = Command::new("tcpdump")
        .arg("-r")
        .arg(path)
        .args(["-nn", "tcp"])
        .output()
        .expect("run tcpdump");
    let mut v = vec![];
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        for (pat, ty) in [("NFS request xid ", 0), ("NFS reply xid ", 1)] {
            if let Some(rest) = l.split(pat).nth(1) {
                if let Some(x) = rest.split(' ').next().and_then(|x| x.parse().ok()) {
                    v.push((x, ty));
                }
            }
        }
    }
    v.sort();
    v
}

/// The framer finds the RPC messages tshark finds (port 2049 decoded as RPC), and those
/// tcpdump names, in the corpus NFS files plus any traces listed (colon-separated) in
/// `TAPDECK_DECODE_RPC_TRACES`.
#[test]
fn rpc_framing_matches_tshark_on_nfs_files() {
    let Some(dir) = corpus() else { return };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().to_lowercase();
            n.contains("nfs") || n.contains("rpc")
        })
        .collect();
    paths.sort();
    if let Ok(extra) = std::env::var("TAPDECK_DECODE_RPC_TRACES") {
        paths.extend(
            extra
                .split(':')
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
        );
    }
    let (mut total_tshark, mut total_ours) = (0, 0);
    for p in &paths {
        let Some(pkts) = read(p) else { continue };
        let ours = our_rpcs(&pkts);
        let theirs = tshark_rpcs(p);
        let dumped = tcpdump_rpcs(p);
        eprintln!(
            "{}: ours {} tshark {} tcpdump {}",
            p.display(),
            ours.len(),
            theirs.len(),
            dumped.len()
        );
        total_ours += ours.len();
        total_tshark += theirs.len();
        if !theirs.is_empty() {
            assert_eq!(ours, theirs, "{}: framer vs tshark", p.display());
        }
        // tcpdump decodes one message per segment start without checking the record
        // mark: every message it names we find too, unless its segment's mark is over our
        // maximum record (hoobr_nfs_printfh.pcap: a 0x30303030 mark, 800 MB).
        let max = FramingConfig::default().max_record;
        let implausible: Vec<u32> = pkts
            .iter()
            .filter_map(|(lt, f, _)| {
                let p = dissect(*lt, f).payload;
                let w = |i: usize| {
                    p.get(i..i + 4)
                        .map(|b| u32::from_be_bytes(b.try_into().unwrap()))
                };
                (w(0)? & 0x7fff_ffff > max).then_some(w(4)?)
            })
            .collect();
        for x in &dumped {
            assert!(
                ours.contains(x) || implausible.contains(&x.0),
                "{}: tcpdump's {x:?} missing",
                p.display()
            );
        }
    }
    assert!(total_tshark >= 2, "the corpus should hold RPC over TCP");
    assert!(total_ours >= total_tshark);
}
