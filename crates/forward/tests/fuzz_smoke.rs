//! A short, deterministic fuzz run on stable Rust, in `cargo test`: the collector's intake
//! (allow list, strict decoding, interface table, ledger) on mutated IPFIX messages, with the
//! invariants of the cargo-fuzz target `fuzz/fuzz_targets/collect_intake.rs`. Valid messages
//! from the exporter's own builder are the seeds, so mutations reach past the header checks
//! into the sets and records; a seeded generator makes every run the same (the seed of a
//! failure is in the message). It runs for about two seconds; the fuzz target is for long runs.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tapdeck_forward::{Intake, InterfaceTable, Ledger, Outcome};
use tapdeck_ipfix::{ExporterStats, InterfaceInfo, MessageBuilder, MessageHeader, PacketReport};

/// xorshift64*: small, seeded, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn seed_message(rng: &mut Rng, sequence: u32, templates: bool) -> Vec<u8> {
    let mut buf = vec![0u8; 1472];
    let header = MessageHeader {
        export_time: 1_795_000_000,
        sequence,
        domain: 1 + rng.below(3) as u32,
        ..MessageHeader::default()
    };
    let mut b = MessageBuilder::new(&mut buf, 1472, header).unwrap();
    if templates {
        b.add_templates().unwrap();
        let _ = b.add_interface(&InterfaceInfo {
            id: rng.below(20) as u32,
            name: "cap0",
            description: "fuzz",
            frame_type: 1,
        });
        let _ = b.add_exporter_stats(&ExporterStats {
            start_time_ms: 1_700_000_000_000,
            selector: 1,
            ..ExporterStats::default()
        });
    }
    let frame: Vec<u8> = (0..rng.below(200) + 14).map(|_| rng.next() as u8).collect();
    for i in 0..rng.below(8) {
        if b.add_packet_report(&PacketReport {
            time_ns: 1_795_000_000_000_000_000 + i as u64,
            interface: rng.below(20) as u32,
            selector: 1,
            frame_size: frame.len() as u64,
            frame_section: &frame,
        })
        .is_err()
        {
            break;
        }
    }
    let n = b.finish().len;
    buf.truncate(n);
    buf
}

/// Flips, overwrites, inserts, removes or splices bytes (a length field, often).
fn mutate(rng: &mut Rng, m: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !m.is_empty() => {
                let i = rng.below(m.len());
                m[i] ^= 1 << rng.below(8);
            }
            1 if !m.is_empty() => {
                let i = rng.below(m.len());
                m[i] = [0, 0xff, 0x7f, 0x80, 1][rng.below(5)];
            }
            2 => {
                let i = rng.below(m.len() + 1);
                m.insert(i, rng.next() as u8);
            }
            3 if !m.is_empty() => {
                let i = rng.below(m.len());
                m.truncate(i.max(rng.below(m.len() + 1)));
            }
            4 if m.len() >= 4 => {
                // A lying length: the message's, or a set's somewhere inside.
                let i = rng.below(m.len() - 1) & !1;
                let v = [0u16, 3, 4, 16, 0xffff, rng.next() as u16][rng.below(6)];
                m[i..i + 2].copy_from_slice(&v.to_be_bytes());
            }
            _ if !other.is_empty() => {
                let at = rng.below(m.len() + 1);
                let from = rng.below(other.len());
                let len = rng.below(other.len() - from + 1);
                m.splice(at..at, other[from..from + len].iter().copied());
            }
            _ => {}
        }
    }
}

#[test]
fn intake_survives_mutated_messages() {
    let seed = 0x1905_2026_u64;
    let mut rng = Rng(seed);
    let peers: [SocketAddr; 3] = [
        "198.18.0.1:4000".parse().unwrap(),
        "198.18.0.1:4001".parse().unwrap(),
        "198.18.0.9:4000".parse().unwrap(),
    ];
    let ledger = Arc::new(Mutex::new(Ledger::new()));
    let mut intake = Intake::new(vec![peers[0].ip()], Arc::clone(&ledger));
    let mut table = InterfaceTable::default();
    let mut delivered = 0u64;
    let (mut accepted, mut rejected, mut iterations) = (0u64, 0u64, 0u64);
    let mut corpus: Vec<Vec<u8>> = (0..64)
        .map(|i| seed_message(&mut rng, i * 7, i % 3 == 0))
        .collect();
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end || iterations < 2000 {
        iterations += 1;
        let a = rng.below(corpus.len());
        let mut m = corpus[a].clone();
        if rng.below(4) > 0 {
            let other = corpus[rng.below(corpus.len())].clone();
            mutate(&mut rng, &mut m, &other);
        }
        let peer = peers[rng.below(3)];
        for _ in 0..2 {
            let mut got = 0u64;
            let ifaces = table.interfaces.len() as u32;
            let outcome = intake.take(peer, &m, &mut table, |p| {
                assert!(p.iface < ifaces, "seed {seed:#x}, iteration {iterations}");
                assert!(
                    p.data.len() < m.len(),
                    "seed {seed:#x}, iteration {iterations}"
                );
                got += 1;
            });
            match outcome {
                Outcome::Accepted { packets } => {
                    assert_eq!(packets, got, "seed {seed:#x}, iteration {iterations}");
                    accepted += 1;
                }
                _ => {
                    assert_eq!(got, 0, "seed {seed:#x}, iteration {iterations}");
                    rejected += 1;
                }
            }
            delivered += got;
            if outcome != Outcome::NewInterfaces {
                break;
            }
        }
        // Keep some mutants as seeds, as a coverage-less fuzzer's corpus would grow.
        if rng.below(16) == 0 && m.len() < 4096 {
            let i = rng.below(corpus.len());
            corpus[i] = m;
        }
    }
    let snap = ledger.lock().unwrap().snapshot();
    assert_eq!(
        snap.streams.iter().map(|s| s.packets).sum::<u64>(),
        delivered
    );
    assert!(snap.streams.iter().all(|s| s.exporter != "198.18.0.9"));
    // The run reached both sides: messages stored and messages refused.
    assert!(
        accepted > 100 && rejected > 100,
        "{accepted} accepted, {rejected} rejected in {iterations}"
    );
}
