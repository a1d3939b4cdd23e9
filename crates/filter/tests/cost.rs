//! What the index costs and what it buys, on traffic shaped like a busy link: 50 000 clients
//! and 2 000 servers (popularity falling off like Zipf's law), flows of a few to a few
//! hundred packets interleaved 2 000 at a time, mostly TCP 443/80 and UDP 53/443, 15 % IPv6,
//! 12 % behind a VLAN tag, cut into chunks of 4 MiB of wire bytes (~6 000 packets).
//!
//! Reports: `add` in ns per packet (best of three passes), `finish` + `encode` per chunk,
//! the encoded size against the chunk's, and for queries on a rare client, a less popular
//! server, ports and combinations, the share of chunks ruled out next to the share libpcap
//! finds no match in (the best any chunk index could do). Ignored by default, as timings
//! mean nothing in a debug build:
//!
//!     cargo test --release -p tapdeck-filter --test cost -- --ignored --nocapture

use std::hint::black_box;
use std::time::Instant;

use pcap::{Capture, Linktype};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tapdeck_filter::{ChunkFilter, ChunkFilterBuilder, Predicate};

const PACKETS: usize = 1_000_000;
const CHUNK_BYTES: usize = 4 << 20;
const CLIENTS: u32 = 50_000;
const SERVERS: u32 = 2_000;
const ACTIVE_FLOWS: usize = 2_000;

fn client_v4(i: u32) -> [u8; 4] {
    (0x0a00_0000 | i).to_be_bytes()
}

fn server_v4(i: u32) -> [u8; 4] {
    (0xc633_0000 + i).to_be_bytes()
}

fn v6(prefix: u16, i: u32) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..6].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, (prefix >> 8) as u8, prefix as u8]);
    a[12..].copy_from_slice(&i.to_be_bytes());
    a
}

struct Flow {
    client: u32,
    server: u32,
    v6: bool,
    vlan: Option<u16>,
    proto: u8,
    client_port: u16,
    server_port: u16,
    left: u32,
}

/// A server index with popularity ~ 1/rank.
fn zipf(rng: &mut SmallRng, n: u32) -> u32 {
    ((n as f64).powf(rng.gen::<f64>()) as u32)
        .saturating_sub(1)
        .min(n - 1)
}

fn new_flow(rng: &mut SmallRng) -> Flow {
    let (proto, server_port) = match rng.gen_range(0..100) {
        0..=49 => (6, 443),
        50..=64 => (6, 80),
        65..=76 => (17, 53),
        77..=84 => (17, 443),
        85..=87 => (6, 22),
        88..=89 => (17, 123),
        90..=92 => (6, 2049),
        93..=95 => (6, 8080),
        _ => (6, rng.gen_range(1024..10000)),
    };
    Flow {
        client: rng.gen_range(0..CLIENTS),
        server: zipf(rng, SERVERS),
        v6: rng.gen_bool(0.15),
        vlan: rng
            .gen_bool(0.12)
            .then(|| [10, 20, 30, 40][rng.gen_range(0..4)]),
        proto,
        client_port: rng.gen_range(32768..61000),
        server_port,
        left: 1 + (rng.gen::<f64>().powi(3) * 300.0) as u32,
    }
}

/// The first bytes of a packet of `flow` (as a 96-byte snap length keeps them) and its
/// length on the wire.
fn packet(rng: &mut SmallRng, flow: &Flow, out: &mut Vec<u8>) -> usize {
    let to_server = rng.gen_bool(0.5);
    let start = out.len();
    out.extend([
        0x00, 0x1c, 0x73, 0x00, 0x00, 0x9a, 0x00, 0x50, 0x56, 0x3e, 0x2b, 0xcc,
    ]);
    if let Some(id) = flow.vlan {
        out.extend([0x81, 0x00]);
        out.extend(id.to_be_bytes());
    }
    let payload = match rng.gen_range(0..10) {
        0..=3 => 0,
        4..=7 => 1400,
        _ => rng.gen_range(0..1400),
    };
    let l4 = if flow.proto == 6 { 20 } else { 8 };
    let (mut sp, mut dp) = (flow.client_port, flow.server_port);
    if !to_server {
        std::mem::swap(&mut sp, &mut dp);
    }
    if flow.v6 {
        let (mut s, mut d) = (v6(0xc, flow.client), v6(0x5, flow.server));
        if !to_server {
            std::mem::swap(&mut s, &mut d);
        }
        out.extend([0x86, 0xdd, 0x60, 0, 0, 0]);
        out.extend(((l4 + payload) as u16).to_be_bytes());
        out.extend([flow.proto, 64]);
        out.extend(s);
        out.extend(d);
    } else {
        let (mut s, mut d) = (client_v4(flow.client), server_v4(flow.server));
        if !to_server {
            std::mem::swap(&mut s, &mut d);
        }
        out.extend([0x08, 0x00, 0x45, 0]);
        out.extend(((20 + l4 + payload) as u16).to_be_bytes());
        out.extend([0, 0, 0x40, 0, 64, flow.proto, 0, 0]);
        out.extend(s);
        out.extend(d);
    }
    out.extend(sp.to_be_bytes());
    out.extend(dp.to_be_bytes());
    out.extend(std::iter::repeat_n(0u8, l4 - 4));
    if flow.proto == 6 {
        let n = out.len();
        out[n - l4 + 12] = 0x50; // data offset 5
    }
    let captured = out.len() - start;
    out.truncate(start + captured.min(96));
    captured + payload
}

struct Trace {
    bytes: Vec<u8>,
    /// Start of each packet in `bytes`, and one past the last.
    offsets: Vec<usize>,
    /// Packet ranges of each chunk.
    chunks: Vec<std::ops::Range<usize>>,
}

impl Trace {
    fn frame(&self, i: usize) -> &[u8] {
        &self.bytes[self.offsets[i]..self.offsets[i + 1]]
    }
}

fn trace(rng: &mut SmallRng) -> Trace {
    let mut flows: Vec<Flow> = (0..ACTIVE_FLOWS).map(|_| new_flow(rng)).collect();
    let mut t = Trace {
        bytes: Vec::with_capacity(PACKETS * 80),
        offsets: vec![0],
        chunks: Vec::new(),
    };
    let (mut chunk_start, mut chunk_wire) = (0, 0);
    for i in 0..PACKETS {
        let slot = rng.gen_range(0..ACTIVE_FLOWS);
        chunk_wire += packet(rng, &flows[slot], &mut t.bytes);
        t.offsets.push(t.bytes.len());
        flows[slot].left -= 1;
        if flows[slot].left == 0 {
            flows[slot] = new_flow(rng);
        }
        if chunk_wire >= CHUNK_BYTES {
            t.chunks.push(chunk_start..i + 1);
            (chunk_start, chunk_wire) = (i + 1, 0);
        }
    }
    if chunk_start < PACKETS {
        t.chunks.push(chunk_start..PACKETS);
    }
    t
}

#[test]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
fn add_cost_and_selectivity_on_busy_link_traffic() {
    let mut rng = SmallRng::seed_from_u64(42);
    let t = trace(&mut rng);
    let mut builder = ChunkFilterBuilder::new();

    let mut best_add = f64::MAX;
    let mut best_finish = f64::MAX;
    let mut indexes = Vec::new();
    for _ in 0..3 {
        let (mut add_ns, mut finish_ns) = (0u128, 0u128);
        indexes.clear();
        for c in &t.chunks {
            let start = Instant::now();
            for i in c.clone() {
                builder.add(1, black_box(t.frame(i)));
            }
            let mid = Instant::now();
            let index = builder.finish();
            let bytes = index.encode();
            let end = Instant::now();
            add_ns += (mid - start).as_nanos();
            finish_ns += (end - mid).as_nanos();
            indexes.push((index, bytes.len()));
        }
        best_add = best_add.min(add_ns as f64 / PACKETS as f64);
        best_finish = best_finish.min(finish_ns as f64 / t.chunks.len() as f64 / 1000.0);
    }
    let sizes: Vec<usize> = indexes.iter().map(|(_, n)| *n).collect();
    let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
    eprintln!(
        "{PACKETS} packets in {} chunks of {} MiB: add {best_add:.1} ns/packet; finish + \
         encode {best_finish:.0} us/chunk; index {mean:.0} bytes/chunk on average, {} at most \
         ({:.3} % of the chunk's wire bytes)",
        t.chunks.len(),
        CHUNK_BYTES >> 20,
        sizes.iter().max().unwrap(),
        100.0 * mean / CHUNK_BYTES as f64,
    );
    eprintln!("a chunk's index: {}", indexes[indexes.len() / 2].0);
    let mut file = ChunkFilter::default();
    for (i, _) in &indexes {
        file.merge(i);
    }
    eprintln!("all chunks merged: {} bytes: {file}", file.encode().len());

    // Queries: the share of chunks ruled out, and of chunks libpcap finds no match in.
    let dead = Capture::dead(Linktype::ETHERNET).unwrap();
    let client = |rng: &mut SmallRng| {
        let c = rng.gen_range(0..CLIENTS);
        std::net::Ipv4Addr::from(client_v4(c)).to_string()
    };
    let server = |rank: u32| std::net::Ipv4Addr::from(server_v4(rank)).to_string();
    let mut queries: Vec<(&str, String)> = Vec::new();
    for _ in 0..10 {
        queries.push(("host CLIENT", format!("host {}", client(&mut rng))));
        queries.push((
            "host CLIENT and port 443",
            format!("host {} and port 443", client(&mut rng)),
        ));
        queries.push((
            "vlan 30 and host CLIENT",
            format!("vlan 30 and host {}", client(&mut rng)),
        ));
    }
    for rank in [10, 100, 500, 1500] {
        queries.push(("host SERVER (by rank)", format!("host {}", server(rank))));
    }
    for q in [
        "tcp port 22",
        "udp port 123",
        "port 2049",
        "tcp port 9999",
        "port 7",
        "icmp",
    ] {
        queries.push(("ports and protocols", q.to_string()));
    }
    let mut by_kind: Vec<(&str, usize, usize, usize)> = Vec::new();
    for (kind, filter) in &queries {
        let p = Predicate::parse(filter).unwrap();
        let prog = dead.compile(filter, true).unwrap();
        let (mut pruned, mut empty) = (0, 0);
        for (c, (index, _)) in t.chunks.iter().zip(&indexes) {
            let hit = c.clone().any(|i| prog.filter(t.frame(i)));
            let may = p.may_match(index);
            assert!(!hit || may, "false negative: {filter}");
            pruned += usize::from(!may);
            empty += usize::from(!hit);
        }
        match by_kind.iter_mut().find(|k| k.0 == *kind) {
            Some(k) => {
                k.1 += pruned;
                k.2 += empty;
                k.3 += t.chunks.len();
            }
            None => by_kind.push((kind, pruned, empty, t.chunks.len())),
        }
        if *kind == "ports and protocols" || kind.starts_with("host SERVER") {
            eprintln!(
                "  {filter}: ruled out {pruned} of {} chunks, libpcap matches nothing in {empty}",
                t.chunks.len()
            );
        }
    }
    for (kind, pruned, empty, n) in by_kind {
        eprintln!(
            "{kind}: ruled out {:.1} % of chunks; libpcap matches nothing in {:.1} %",
            100.0 * pruned as f64 / n as f64,
            100.0 * empty as f64 / n as f64
        );
    }
}
