//! Independent decoders as oracles: messages this crate builds, carried in UDP to port 4739 in
//! a pcap (nothing is sent), must decode in tshark (`cflow`) to the same frame sections, sizes,
//! nanosecond times, selectors and options records, without malformed or unknown-template
//! warnings; and an RFC 5655 file of them must read in libfixbuf's `ipfixDump`.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use rand::{Rng, SeedableRng};
use tapdeck_ipfix::ie::FRAME_TYPE_ETHERNET;
use tapdeck_ipfix::{
    messages, write_message, Decoder, ExporterStats, InterfaceInfo, MessageBuilder, MessageHeader,
    PacketReport, Record,
};

const BASE_NS: u64 = 1_795_392_000_000_000_000;

struct Frame {
    time_ns: u64,
    size: u64,
    bytes: Vec<u8>,
}

fn stats(n: u64) -> ExporterStats {
    ExporterStats {
        exporting_process: 4242,
        selector: 1,
        start_time_ms: 1_795_391_999_123,
        messages: n,
        records: 10 * n,
        ignored_packets: 17,
        not_sent_packets: 23,
        observed_packets: 100_000 + n,
        selected_packets: 99_000 + n,
    }
}

/// An Ethernet/IPv4/UDP frame of `size` octets with random payload.
fn udp_frame(rng: &mut impl Rng, size: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
    let ip_len = (size - 14).min(65535) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&[0x13, 0x88, 0x13, 0x89]);
    f.extend_from_slice(&(ip_len - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend((42..size).map(|_| rng.gen::<u8>()));
    f
}

/// Ethernet/IPv4/UDP frames of 60..=1514 octets (and one in 50 of 70 000, as loopback
/// captures hold) cut at the given snap lengths in turn (or whole frames of 60..=1400 octets
/// when there are none), with random nanoseconds,
/// packed into messages of at most 1472 octets; the first message of each batch of 10 carries
/// the templates, the interface and the exporter stats, as an exporter re-sending them on a
/// timer would.
fn build(seed: u64, count: usize, snaps: &[usize]) -> (Vec<Vec<u8>>, Vec<Frame>) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let frames: Vec<Frame> = (0..count)
        .map(|i| {
            let size = match snaps {
                [] => rng.gen_range(60..=1400),
                _ if i % 50 == 3 => 70_000,
                _ => rng.gen_range(60..=1514),
            };
            let mut bytes = udp_frame(&mut rng, size.min(2000));
            if snaps.is_empty() {
                // A whole UDP datagram tempts tshark's heuristic dissectors into the random
                // payload; protocol 253 (RFC 3692, experiments) has no dissector.
                bytes[23] = 253;
            } else {
                bytes.truncate(snaps[i % snaps.len()].min(size));
            }
            Frame {
                time_ns: BASE_NS + i as u64 * 1_000_003 + rng.gen_range(0..1_000_000_000),
                size: size as u64,
                bytes,
            }
        })
        .collect();
    let mut out = Vec::new();
    let mut sequence = 0u32;
    let mut next = frames.iter().peekable();
    while next.peek().is_some() {
        let mut buf = [0u8; 1472];
        let header = MessageHeader {
            export_time: 1_795_392_100,
            sequence,
            domain: 9,
            ..Default::default()
        };
        let mut b = MessageBuilder::new(&mut buf, 1472, header).unwrap();
        if out.len() % 10 == 0 {
            b.add_templates().unwrap();
            b.add_interface(&InterfaceInfo {
                id: 2,
                name: "veth-mon",
                description: "tapdeck test",
                frame_type: FRAME_TYPE_ETHERNET,
            })
            .unwrap();
            b.add_exporter_stats(&stats(out.len() as u64)).unwrap();
        }
        while let Some(f) = next.peek() {
            let r = PacketReport {
                time_ns: f.time_ns,
                interface: 2,
                selector: 1,
                frame_size: f.size,
                frame_section: &f.bytes,
            };
            if b.add_packet_report(&r).is_err() {
                break;
            }
            next.next();
        }
        let built = b.finish();
        sequence = sequence.wrapping_add(built.data_records);
        out.push(buf[..built.len].to_vec());
    }
    (out, frames)
}

/// A pcap of UDP datagrams 198.18.0.1:50000 -> 198.18.0.2:4739, one per message, in
/// Ethernet frames.
fn write_pcap(path: &Path, datagrams: &[Vec<u8>]) {
    write_pcap_as(path, datagrams, LINKTYPE_ETHERNET);
}

const LINKTYPE_ETHERNET: u32 = 1;
/// Raw IP: the datagrams without an Ethernet header, so that `--disable-protocol eth` turns
/// off only the dissection of the frames *inside* the reports (on an Ethernet capture it
/// would turn off the outer frames too, and leave nothing to check).
const LINKTYPE_RAW: u32 = 101;

fn write_pcap_as(path: &Path, datagrams: &[Vec<u8>], linktype: u32) {
    let mut out = Vec::new();
    for v in [0xa1b2c3d4u32, 0x0004_0002, 0, 0, 262_144, 1] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.truncate(24);
    let mut hdr = Vec::new();
    hdr.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    hdr.extend_from_slice(&2u16.to_le_bytes());
    hdr.extend_from_slice(&4u16.to_le_bytes());
    hdr.extend_from_slice(&[0; 8]);
    hdr.extend_from_slice(&262_144u32.to_le_bytes());
    hdr.extend_from_slice(&linktype.to_le_bytes());
    out = hdr;
    for (i, payload) in datagrams.iter().enumerate() {
        let mut f = if linktype == LINKTYPE_RAW {
            Vec::new()
        } else {
            vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0]
        };
        let udp_len = 8 + payload.len();
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2]);
        f.extend_from_slice(&50_000u16.to_be_bytes());
        f.extend_from_slice(&4739u16.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        out.extend_from_slice(&(1_795_392_100 + i as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&f);
    }
    std::fs::write(path, out).unwrap();
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

const SNAPS: [usize; 11] = [14, 34, 42, 54, 64, 96, 128, 254, 255, 300, 1400];

fn tshark(pcap: &Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .env("TZ", "UTC")
        .arg("-r")
        .arg(pcap)
        .args(["-d", "udp.port==4739,cflow"])
        .args(args)
        .output()
        .expect("tshark");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// "Nov 23, 2026 00:00:00.123456789 UTC" (TZ=UTC) to Unix nanoseconds.
fn parse_tshark_time(s: &str) -> u64 {
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let parts: Vec<&str> = s.split_whitespace().collect();
    let month = months.iter().position(|m| *m == parts[0]).unwrap() as u64 + 1;
    let day: u64 = parts[1].trim_end_matches(',').parse().unwrap();
    let year: u64 = parts[2].parse().unwrap();
    let (hms, frac) = parts[3].split_once('.').unwrap();
    let hms: Vec<u64> = hms.split(':').map(|x| x.parse().unwrap()).collect();
    let ns: u64 = format!("{frac:0<9}")[..9].parse().unwrap();
    // days from civil (Howard Hinnant)
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + hms[0] * 3600 + hms[1] * 60 + hms[2]) * 1_000_000_000 + ns
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn tshark_decodes_every_record() {
    if !have("tshark") {
        eprintln!("skipped: no tshark");
        return;
    }
    let (msgs, frames) = build(1, 600, &SNAPS);
    assert!(msgs.len() > 40);
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("export.pcap");
    write_pcap(&pcap, &msgs);
    if let Ok(keep) = std::env::var("IPFIX_ORACLE_KEEP") {
        std::fs::copy(&pcap, keep).unwrap();
    }

    // Our own decoder agrees with what was built.
    let mut d = Decoder::new();
    let peer = "198.18.0.1:50000".parse().unwrap();
    let mut ours = Vec::new();
    for m in &msgs {
        let mut out = Vec::new();
        d.decode(peer, m, &mut out).unwrap();
        ours.extend(out.into_iter().filter_map(|r| match r {
            Record::Packet(p) => Some((p.time_ns, p.frame_size, p.frame_section.to_vec())),
            _ => None,
        }));
    }
    let want: Vec<_> = frames
        .iter()
        .map(|f| (f.time_ns, f.size, f.bytes.clone()))
        .collect();
    assert_eq!(ours, want);

    // No malformed packets, no expert infos of warning or error level (unknown templates are
    // warnings in the cflow dissector). tshark dissects dataLinkFrameSection as an Ethernet
    // frame, whose cut IP header it rightly calls malformed: look at the IPFIX layer alone
    // here, and at whole frames in `tshark_dissects_whole_frames_inside_reports`.
    let raw = dir.path().join("export-rawip.pcap");
    write_pcap_as(&raw, &msgs, LINKTYPE_RAW);
    assert_clean(&raw, &["--disable-protocol", "eth"]);
    assert_eq!(
        tshark(&raw, &["--disable-protocol", "eth", "-V"])
            .matches("Data Link Frame Section")
            .count(),
        frames.len(),
        "the clean check saw every report"
    );
    let verbose = tshark(&pcap, &["-V"]);
    assert!(
        !verbose.contains("no template found"),
        "the inner frames confuse tshark's template lookup"
    );

    let fields = [
        "cflow.data_link_frame_section",
        "cflow.data_link_frame_size",
        "cflow.observation_time_nanoseconds",
        "cflow.selector_id",
        "cflow.inputint",
        "cflow.sequence",
    ];
    let mut args = vec![
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=|",
        "-E",
        "separator=\t",
    ];
    for f in fields {
        args.extend(["-e", f]);
    }
    let text = tshark(&pcap, &args);
    let mut got = Vec::new();
    let mut sequences = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        let list = |i: usize| -> Vec<&str> {
            if cols[i].is_empty() {
                Vec::new()
            } else {
                cols[i].split('|').collect()
            }
        };
        let (sections, sizes, times, selectors, ifs) =
            (list(0), list(1), list(2), list(3), list(4));
        assert_eq!(sections.len(), times.len(), "{line}");
        sequences.push(cols[5].parse::<u32>().unwrap());
        // Frames over 65535 carry layer2OctetDeltaCount, not dataLinkFrameSize.
        let mut sizes = sizes.into_iter();
        for (i, s) in sections.iter().enumerate() {
            let time = parse_tshark_time(times[i]);
            got.push((time, sizes.next(), s.replace(':', "")));
        }
        // The interface options record's scope is an ingressInterface too; the stats record's
        // selectorId scope is one more selector.
        assert!(ifs.iter().all(|x| *x == "2"), "{line}");
        assert!(selectors.iter().all(|x| *x == "1"), "{line}");
    }
    assert_eq!(got.len(), frames.len());
    for (f, (time, size, section)) in frames.iter().zip(&got) {
        assert_eq!(*time, f.time_ns, "tshark reads back the exact nanosecond");
        assert_eq!(section, &hex(&f.bytes));
        if f.size <= 65535 {
            assert_eq!(size.map(|s| s.parse::<u64>().unwrap()), Some(f.size));
        }
    }
    let mut expect_seq = Vec::new();
    let mut n = 0u32;
    for m in &msgs {
        expect_seq.push(n);
        let mut out = Vec::new();
        n += d.decode(peer, m, &mut out).unwrap().data_records;
    }
    assert_eq!(sequences, expect_seq);

    // The options records.
    let opts = [
        "cflow.sys_init_time",
        "cflow.ignore_packets",
        "cflow.notsent_packets",
        "cflow.selector_id_total_pkts_observed",
        "cflow.selector_id_total_pkts_selected",
        "cflow.if_name",
        "cflow.data_link_frame_type",
    ];
    let mut args = vec![
        "-T",
        "fields",
        "-E",
        "separator=\t",
        "-Y",
        "cflow.ignore_packets",
    ];
    for f in opts {
        args.extend(["-e", f]);
    }
    let text = tshark(&pcap, &args);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), msgs.len().div_ceil(10), "{text}");
    for (i, row) in rows.iter().enumerate() {
        let s = stats(10 * i as u64);
        assert_eq!(
            parse_tshark_time(row[0]),
            s.start_time_ms * 1_000_000,
            "{row:?}"
        );
        let want = [
            s.ignored_packets,
            s.not_sent_packets,
            s.observed_packets,
            s.selected_packets,
        ];
        let have: Vec<u64> = row[1..5].iter().map(|x| x.parse().unwrap()).collect();
        assert_eq!(have, want);
        assert_eq!((row[5], row[6]), ("veth-mon", "1"));
    }
}

fn assert_clean(pcap: &Path, extra: &[&str]) {
    let mut args = extra.to_vec();
    args.push("-V");
    let verbose = tshark(pcap, &args);
    assert!(!verbose.contains("Malformed"), "malformed in tshark -V");
    assert!(
        !verbose.contains("no template found"),
        "unknown template in tshark -V"
    );
    let mut args = extra.to_vec();
    args.extend(["-q", "-z", "expert,warn"]);
    let expert = tshark(pcap, &args);
    assert!(
        !expert.contains("Warning") && !expert.contains("Error"),
        "expert infos:\n{expert}"
    );
}

/// Reports of whole frames (no header-only cut): the Ethernet, IPv4 and UDP layers tshark
/// finds inside dataLinkFrameSection are clean too.
#[test]
fn tshark_dissects_whole_frames_inside_reports() {
    if !have("tshark") {
        eprintln!("skipped: no tshark");
        return;
    }
    let (msgs, frames) = build(3, 100, &[]);
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("whole.pcap");
    write_pcap(&pcap, &msgs);
    if let Ok(keep) = std::env::var("IPFIX_ORACLE_KEEP") {
        std::fs::copy(&pcap, format!("{keep}.whole")).unwrap();
    }
    assert_clean(&pcap, &[]);
    let text = tshark(
        &pcap,
        &[
            "-T",
            "fields",
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=|",
            "-e",
            "ip.len",
        ],
    );
    let mut inner = Vec::new();
    for line in text.lines() {
        // The datagram's own IP header first, then one per frame inside.
        inner.extend(line.split('|').skip(1).map(|x| x.parse::<u64>().unwrap()));
    }
    let want: Vec<u64> = frames.iter().map(|f| f.size - 14).collect();
    assert_eq!(inner, want);
}

#[test]
fn ipfixdump_reads_an_rfc5655_file() {
    if Command::new("ipfixDump").arg("--version").output().is_err() {
        eprintln!("skipped: no ipfixDump (apt-get install libfixbuf-tools)");
        return;
    }
    let (msgs, frames) = build(2, 300, &SNAPS);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("export.ipfix");
    let mut file = std::fs::File::create(&path).unwrap();
    for m in &msgs {
        write_message(&mut file, m).unwrap();
    }
    file.flush().unwrap();
    drop(file);
    // Our reader gives the messages back.
    let bytes = std::fs::read(&path).unwrap();
    let back: Vec<&[u8]> = messages(&bytes).map(|m| m.unwrap()).collect();
    assert_eq!(back.len(), msgs.len());

    let out = Command::new("ipfixDump")
        .arg("-i")
        .arg(&path)
        .arg("--hexdump=2000")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.trim().is_empty(),
        "ipfixDump: {err}"
    );
    // Packet reports in order: (seconds of the time, size, section hex). ipfixDump 2.4.1
    // prints dateTimeNanoseconds without its fraction (".000000000" whatever the value), so
    // only the seconds are compared; tshark checks the nanoseconds.
    let mut got = Vec::new();
    let mut stats_records = 0;
    for record in text.split("--- data record").skip(1) {
        let field = |name: &str| {
            record
                .lines()
                .find(|l| l.contains(&format!(" {name} :")))
                .map(|l| l.split_once(" : ").unwrap().1.trim().to_string())
        };
        if let Some(section) = field("dataLinkFrameSection") {
            let time = field("observationTimeNanoseconds").unwrap();
            let size = field("dataLinkFrameSize")
                .or_else(|| field("layer2OctetDeltaCount"))
                .unwrap();
            let hex = section
                .rsplit_once(' ')
                .map(|(_, h)| h.trim_start_matches("0x").to_string())
                .unwrap_or_default();
            got.push((time[..19].to_string(), size.parse::<u64>().unwrap(), hex));
        } else if let Some(v) = field("ignoredPacketTotalCount") {
            assert_eq!(v, "17");
            assert_eq!(
                field("systemInitTimeMilliseconds").as_deref(),
                Some("2026-11-22 23:59:59.123")
            );
            assert_eq!(
                field("selectorIdTotalPktsSelected")
                    .unwrap()
                    .parse::<u64>()
                    .unwrap(),
                stats(10 * stats_records).selected_packets
            );
            stats_records += 1;
        }
    }
    assert_eq!(stats_records as usize, msgs.len().div_ceil(10));
    assert_eq!(got.len(), frames.len());
    for (f, (time, size, section)) in frames.iter().zip(&got) {
        let secs = f.time_ns / 1_000_000_000;
        let (days, rem) = (secs / 86_400, secs % 86_400);
        assert_eq!(days, 20_780, "test frames are all on 2026-11-23");
        let want = format!(
            "2026-11-23 {:02}:{:02}:{:02}",
            rem / 3600,
            rem / 60 % 60,
            rem % 60
        );
        assert_eq!((time, *size, section), (&want, f.size, &hex(&f.bytes)));
    }
    let stats = Command::new("ipfixDump")
        .arg("-i")
        .arg(&path)
        .arg("-s")
        .output()
        .unwrap();
    let stats = String::from_utf8_lossy(&stats.stdout);
    let data_records = frames.len() + 2 * msgs.len().div_ceil(10);
    assert!(
        stats.contains(&format!(
            "{} Messages, {} Data Records",
            msgs.len(),
            data_records
        )),
        "{stats}"
    );
}
