//! The AF_PACKET source on real kernel sockets: veth pairs whose far end sits in a network
//! namespace the test creates, frames sent from raw sockets, compared byte for byte.
//! Needs root; skips with a message otherwise.

mod netns;

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

use netns::{frames, now_ns, TestNet};
use tapdeck_capture::{
    AfPacketConfig, AfPacketSource, PacketSink, PacketSource, Poll, SettingError, SourceError,
};
use tapdeck_pcap::{Format, Interface, Packet, SectionInfo, TraceReader};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Got {
    ts_ns: u64,
    iface: u32,
    orig_len: u32,
    data: Vec<u8>,
}

#[derive(Default)]
struct Collect {
    got: Vec<Got>,
    /// Sleep this long per packet for the first `slow_for` packets.
    slow: Duration,
    slow_for: usize,
}

impl PacketSink for Collect {
    fn packet(&mut self, p: &Packet<'_>) {
        if self.got.len() < self.slow_for {
            std::thread::sleep(self.slow);
        }
        self.got.push(Got {
            ts_ns: p.ts_ns,
            iface: p.iface,
            orig_len: p.orig_len,
            data: p.data.to_vec(),
        });
    }
}

/// A small ring, so tests use little memory; the block timeout keeps quiet rings moving.
fn config(interfaces: &[&str]) -> AfPacketConfig {
    AfPacketConfig {
        interfaces: interfaces.iter().map(|s| s.to_string()).collect(),
        block_size: 256 << 10,
        blocks: 16,
        block_timeout_ms: 5,
        ..AfPacketConfig::default()
    }
}

/// Polls until `want` packets arrived (or 10 s passed), then a little longer, so that any
/// packet too many shows up too.
fn collect(src: &mut AfPacketSource, sink: &mut Collect, want: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.got.len() < want && Instant::now() < deadline {
        assert_ne!(src.poll(sink).unwrap(), Poll::End);
    }
    let settle = Instant::now() + Duration::from_millis(200);
    while Instant::now() < settle {
        src.poll(sink).unwrap();
    }
}

/// Frames of many sizes, a few VLAN-tagged (the kernel strips the tag; the source must put
/// it back).
fn mixed_frames(n: u32) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let len = 60 + (i as usize * 97) % (1514 - 60 + 1);
            let f = frames::ipv4(17, 1, 4000 + (i % 7) as u16, 2, 5001, len, i);
            if i % 50 == 7 {
                frames::vlan(&f[..len - 4], 100 + i as u16)
            } else {
                f
            }
        })
        .collect()
}

#[test]
fn every_frame_arrives_byte_identical_in_order() {
    require_root!();
    let net = TestNet::new(1);
    let mut src = AfPacketSource::open(&config(&[net.outside(0)])).unwrap();
    assert_eq!(src.interfaces()[0].linktype, 1);
    assert_eq!(src.interfaces()[0].snaplen, 262_144);
    assert!(src.interfaces()[0]
        .description
        .as_deref()
        .unwrap()
        .contains("software timestamps"));
    let sent = mixed_frames(3000);
    let tx = net.sender_inside(0);
    let t0 = now_ns();
    tx.send_all(&sent);
    let t1 = now_ns();
    let mut sink = Collect::default();
    collect(&mut src, &mut sink, sent.len());
    let got: Vec<&[u8]> = sink.got.iter().map(|g| g.data.as_slice()).collect();
    assert_eq!(got.len(), sent.len(), "packets received");
    for (i, (g, s)) in sink.got.iter().zip(&sent).enumerate() {
        assert_eq!(g.data, *s, "frame {i} differs");
        assert_eq!(g.orig_len as usize, s.len(), "frame {i} length");
        assert_eq!(g.iface, 0);
    }
    assert!(sink.got.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    assert!(sink.got[0].ts_ns >= t0 && sink.got.last().unwrap().ts_ns <= t1);
    let c = src.counters()[0];
    assert_eq!((c.seen, c.dropped), (sent.len() as u64, 0));
    assert_eq!(src.kernel_stats()[0].packets, sent.len() as u64);
}

/// Writes `frames` as a pcap file and runs tcpdump's `filter` over it; returns the frames
/// tcpdump passes.
fn tcpdump_passes(frames: &[Vec<u8>], filter: &str) -> Option<Vec<Vec<u8>>> {
    let dir = std::env::temp_dir().join(format!("tapdeck-filter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("sent.pcap");
    let output = dir.join("passed.pcap");
    let iface = Interface {
        linktype: 1,
        snaplen: 262_144,
        name: None,
        description: None,
    };
    let mut bytes = Format::Pcap
        .file_header(&[iface], &SectionInfo::default())
        .unwrap();
    for (i, f) in frames.iter().enumerate() {
        let p = Packet {
            ts_ns: 1_000_000_000 + i as u64,
            iface: 0,
            orig_len: f.len() as u32,
            flags: None,
            data: f,
        };
        let at = bytes.len();
        bytes.resize(at + Format::Pcap.record_len(&p), 0);
        Format::Pcap.write_record(&p, &mut bytes[at..]);
    }
    std::fs::write(&input, bytes).unwrap();
    let status = Command::new("tcpdump")
        .arg("-r")
        .arg(&input)
        .arg("-w")
        .arg(&output)
        .arg(filter)
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    assert!(status.success(), "tcpdump failed");
    let mut reader = TraceReader::new(std::fs::File::open(&output).unwrap()).unwrap();
    let mut passed = Vec::new();
    while let Some(p) = reader.next_packet().unwrap() {
        passed.push(p.data.to_vec());
    }
    let _ = std::fs::remove_dir_all(&dir);
    Some(passed)
}

#[test]
fn a_filter_passes_exactly_what_tcpdump_passes() {
    require_root!();
    let filter = "(udp and dst port 5001) or (tcp[tcpflags] & tcp-syn != 0) or arp";
    let mut sent = Vec::new();
    for i in 0..600u32 {
        sent.push(match i % 4 {
            0 => frames::ipv4(17, 1, 4000, 2, 5001 + (i % 3) as u16, 100 + i as usize, i),
            1 => frames::ipv4(6, 1, 4001, 2, 80, 80 + i as usize, i),
            2 => frames::arp((i % 200) as u8, i as u8),
            _ => frames::ipv4(1, 3, 0, 4, 0, 98, i),
        });
    }
    let Some(expected) = tcpdump_passes(&sent, filter) else {
        eprintln!("skipping: needs tcpdump");
        return;
    };
    assert!(expected.len() > 100 && expected.len() < sent.len());
    let net = TestNet::new(1);
    let mut cfg = config(&[net.outside(0)]);
    cfg.filter = Some(filter.into());
    let mut src = AfPacketSource::open(&cfg).unwrap();
    net.sender_inside(0).send_all(&sent);
    let mut sink = Collect::default();
    collect(&mut src, &mut sink, expected.len());
    let got: Vec<Vec<u8>> = sink.got.into_iter().map(|g| g.data).collect();
    assert_eq!(got.len(), expected.len());
    assert!(
        got == expected,
        "the filter passed other frames than tcpdump"
    );
    // Filtered packets never reach the socket: the kernel did not count them either.
    assert_eq!(src.counters()[0].seen, expected.len() as u64);
}

#[test]
fn snaplen_cuts_frames_and_keeps_original_lengths() {
    require_root!();
    for filter in [None, Some("udp")] {
        let net = TestNet::new(1);
        let mut cfg = config(&[net.outside(0)]);
        cfg.snaplen = Some(96);
        cfg.filter = filter.map(str::to_string);
        let mut src = AfPacketSource::open(&cfg).unwrap();
        assert_eq!(src.interfaces()[0].snaplen, 96);
        let sent: Vec<Vec<u8>> = [60usize, 95, 96, 97, 200, 1514]
            .iter()
            .enumerate()
            .map(|(i, &len)| frames::ipv4(17, 1, 4000, 2, 5001, len, i as u32))
            .collect();
        net.sender_inside(0).send_all(&sent);
        let mut sink = Collect::default();
        collect(&mut src, &mut sink, sent.len());
        assert_eq!(sink.got.len(), sent.len(), "filter {filter:?}");
        for (g, s) in sink.got.iter().zip(&sent) {
            assert_eq!(g.orig_len as usize, s.len());
            assert_eq!(g.data, s[..s.len().min(96)], "filter {filter:?}");
        }
    }
}

#[test]
fn two_interfaces_in_one_source_keep_their_index() {
    require_root!();
    let net = TestNet::new(2);
    let mut src = AfPacketSource::open(&config(&[net.outside(0), net.outside(1)])).unwrap();
    let names: Vec<_> = src
        .interfaces()
        .iter()
        .map(|i| i.name.clone().unwrap())
        .collect();
    assert_eq!(names, [net.outside(0), net.outside(1)]);
    let a: Vec<Vec<u8>> = (0..300)
        .map(|i| frames::ipv4(17, 1, 1, 2, 2, 100, i))
        .collect();
    let b: Vec<Vec<u8>> = (0..200)
        .map(|i| frames::ipv4(17, 3, 3, 4, 4, 200, i))
        .collect();
    let (ta, tb) = (net.sender_inside(0), net.sender_inside(1));
    std::thread::scope(|s| {
        s.spawn(|| ta.send_all(&a));
        s.spawn(|| tb.send_all(&b));
    });
    let mut sink = Collect::default();
    collect(&mut src, &mut sink, a.len() + b.len());
    let on = |i: u32| -> Vec<Vec<u8>> {
        sink.got
            .iter()
            .filter(|g| g.iface == i)
            .map(|g| g.data.clone())
            .collect()
    };
    assert_eq!(on(0), a);
    assert_eq!(on(1), b);
    let c = src.counters();
    assert_eq!((c[0].seen, c[1].seen), (300, 200));
}

#[test]
fn fanout_keeps_both_directions_of_each_flow_in_one_source() {
    require_root!();
    let net = TestNet::new(1);
    let mut sources = AfPacketSource::open_fanout(&config(&[net.outside(0)]), 2).unwrap();
    // 64 flows; each request (arriving on the outside end) gets a reply sent out of it.
    let mut requests = Vec::new();
    let mut replies = Vec::new();
    for i in 0..2048u32 {
        let flow = i % 64;
        let f = frames::ipv4(
            if flow % 2 == 0 { 17 } else { 6 },
            1 + (flow % 5) as u8,
            10_000 + flow as u16,
            2 + (flow % 3) as u8,
            80,
            120,
            i,
        );
        replies.push(frames::reversed(&f));
        requests.push(f);
    }
    let (inside, outside) = (net.sender_inside(0), net.sender_outside(0));
    std::thread::scope(|s| {
        s.spawn(|| inside.send_all(&requests));
        s.spawn(|| outside.send_all(&replies));
    });
    let total = requests.len() + replies.len();
    let mut sinks = [Collect::default(), Collect::default()];
    let deadline = Instant::now() + Duration::from_secs(10);
    while sinks.iter().map(|s| s.got.len()).sum::<usize>() < total && Instant::now() < deadline {
        for (src, sink) in sources.iter_mut().zip(&mut sinks) {
            src.poll(sink).unwrap();
        }
    }
    for _ in 0..3 {
        for (src, sink) in sources.iter_mut().zip(&mut sinks) {
            src.poll(sink).unwrap();
        }
    }
    // Nothing lost, nothing twice.
    let all: Vec<&Vec<u8>> = sinks
        .iter()
        .flat_map(|s| s.got.iter().map(|g| &g.data))
        .collect();
    assert_eq!(all.len(), total);
    let distinct: HashSet<&Vec<u8>> = all.iter().copied().collect();
    assert_eq!(distinct.len(), total);
    // A flow is its unordered address and port pair.
    let flow_of = |d: &[u8]| {
        let a = (&d[26..30], &d[34..36]);
        let b = (&d[30..34], &d[36..38]);
        let (x, y) = if a <= b { (a, b) } else { (b, a) };
        [x.0, x.1, y.0, y.1].concat()
    };
    let mut home: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut directions: HashMap<Vec<u8>, HashSet<Vec<u8>>> = HashMap::new();
    for (k, sink) in sinks.iter().enumerate() {
        for g in &sink.got {
            let flow = flow_of(&g.data);
            let first = *home.entry(flow.clone()).or_insert(k);
            assert_eq!(first, k, "a flow was split across sources");
            directions
                .entry(flow)
                .or_default()
                .insert(g.data[26..30].to_vec());
        }
    }
    assert_eq!(home.len(), 64);
    assert!(
        directions.values().all(|d| d.len() == 2),
        "both directions seen"
    );
    let per_source: Vec<usize> = sinks.iter().map(|s| s.got.len()).collect();
    assert!(
        per_source.iter().all(|&n| n > 0),
        "hash spread {per_source:?}"
    );
    for src in &sources {
        let c = src.counters()[0];
        assert_eq!(c.dropped, 0);
    }
    let seen: u64 = sources.iter().map(|s| s.counters()[0].seen).sum();
    assert_eq!(seen, total as u64);
}

#[test]
fn a_tiny_ring_drops_and_the_counts_add_up() {
    require_root!();
    let net = TestNet::new(1);
    let mut cfg = config(&[net.outside(0)]);
    cfg.block_size = 64 << 10;
    cfg.blocks = 2;
    let mut src = AfPacketSource::open(&cfg).unwrap();
    let sent: Vec<Vec<u8>> = (0..4000)
        .map(|i| frames::ipv4(17, 1, 1, 2, 2, 1000, i))
        .collect();
    let tx = net.sender_inside(0);
    let mut sink = Collect {
        slow: Duration::from_millis(2),
        slow_for: 200,
        ..Collect::default()
    };
    std::thread::scope(|s| {
        s.spawn(|| tx.send_all(&sent));
        // Read slowly while the burst arrives, then drain until quiet.
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            src.poll(&mut sink).unwrap();
        }
    });
    let mut quiet = 0;
    while quiet < 5 {
        match src.poll(&mut sink).unwrap() {
            Poll::Idle => quiet += 1,
            _ => quiet = 0,
        }
    }
    let c = src.counters()[0];
    let k = src.kernel_stats()[0];
    let delivered = sink.got.len() as u64;
    eprintln!(
        "sent {} delivered {delivered} counters {c:?} kernel {k:?}",
        sent.len()
    );
    assert!(c.dropped > 0, "the ring should have overflowed");
    assert!(c.freezes > 0);
    assert_eq!(c.seen, delivered + c.dropped);
    // The kernel's own count (tp_packets, which includes drops) agrees exactly once the
    // ring is empty.
    assert_eq!(k.packets, c.seen);
    assert!(c.seen <= sent.len() as u64);
    // What arrived is a subsequence of what was sent, in order.
    let mut it = sent.iter();
    for g in &sink.got {
        assert!(
            it.any(|s| *s == g.data),
            "delivered a frame out of order or never sent"
        );
    }
}

#[test]
fn a_missing_interface_is_a_one_line_message() {
    require_root!();
    let Err(e) = AfPacketSource::open(&config(&["tdnosuchif0"])) else {
        panic!("opened a missing interface");
    };
    assert_eq!(
        e.to_string(),
        "no interface named tdnosuchif0 (see `ip link`)"
    );
}

/// The binary adds the options to lower (`--ring-blocks or --ring-block-size`: its
/// `wording::capture`) to exactly these errors.
#[test]
fn a_ring_too_large_is_a_ring_size_error() {
    require_root!();
    let mut cfg = config(&["lo"]);
    cfg.block_size = 4 << 20;
    cfg.blocks = 1 << 20;
    let Err(e) = AfPacketSource::open(&cfg) else {
        panic!("allocated a 4 TiB ring");
    };
    let msg = e.to_string();
    assert!(
        matches!(
            &e,
            SourceError::Setting(
                SettingError::RingOverHalfMemory { .. }
                    | SettingError::RingAlloc { .. }
                    | SettingError::RingRefused { .. }
            )
        ) && msg.contains("1048576 blocks of 4194304 bytes")
            && !msg.contains('\n'),
        "{msg}"
    );
}

/// Run by `without_cap_net_raw_the_message_says_how_to_grant_it` as an unprivileged child.
#[test]
#[ignore]
fn child_open_without_privileges() {
    let Err(e) = AfPacketSource::open(&config(&["lo"])) else {
        panic!("opened a packet socket without CAP_NET_RAW");
    };
    assert_eq!(
        e.to_string(),
        "capturing needs CAP_NET_RAW: run as root or \
         `setcap cap_net_raw,cap_net_admin=eip $(which tapdeck)`"
    );
}

#[test]
fn without_cap_net_raw_the_message_says_how_to_grant_it() {
    require_root!();
    // Root without CAP_NET_RAW (dropped from the bounding set), not another user: another
    // user could not reach this test binary in a checkout inside a mode-0700 directory.
    let out = Command::new("setpriv")
        .args([
            "--bounding-set=-net_raw,-net_admin",
            "--inh-caps=-all",
            "--",
        ])
        .arg(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "child_open_without_privileges"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_interface_going_down_and_up_does_not_stop_capture() {
    require_root!();
    let net = TestNet::new(1);
    let mut src = AfPacketSource::open(&config(&[net.outside(0)])).unwrap();
    let tx = net.sender_inside(0);
    let batch = |from: u32| -> Vec<Vec<u8>> {
        (from..from + 50)
            .map(|i| frames::ipv4(17, 1, 1, 2, 2, 100, i))
            .collect()
    };
    let mut sink = Collect::default();
    tx.send_all(&batch(0));
    collect(&mut src, &mut sink, 50);
    net.set_link(0, false);
    for _ in 0..5 {
        assert_ne!(src.poll(&mut sink).unwrap(), Poll::End);
    }
    net.set_link(0, true);
    std::thread::sleep(Duration::from_millis(100));
    tx.send_all(&batch(50));
    collect(&mut src, &mut sink, 100);
    assert_eq!(sink.got.len(), 100);
}

#[test]
fn a_count_delivers_exactly_that_many_then_ends() {
    require_root!();
    let net = TestNet::new(1);
    let mut cfg = config(&[net.outside(0)]);
    cfg.count = Some(100);
    let mut src = AfPacketSource::open(&cfg).unwrap();
    let sent: Vec<Vec<u8>> = (0..300)
        .map(|i| frames::ipv4(17, 1, 1, 2, 2, 100, i))
        .collect();
    net.sender_inside(0).send_all(&sent);
    let mut sink = Collect::default();
    let deadline = Instant::now() + Duration::from_secs(10);
    while src.poll(&mut sink).unwrap() != Poll::End {
        assert!(Instant::now() < deadline, "never ended");
    }
    assert_eq!(sink.got.len(), 100);
    assert!(sink.got.iter().zip(&sent).all(|(g, s)| g.data == *s));
    assert_eq!(src.poll(&mut sink).unwrap(), Poll::End);
    assert_eq!(src.counters()[0].seen, 100);
}
