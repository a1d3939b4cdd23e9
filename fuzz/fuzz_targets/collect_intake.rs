//! The collector's intake on arbitrary datagrams from three exporters (one not allowed):
//! allow list, strict decoding, interface table and sequence accounting, as
//! `tapdeck collect` runs them. Must never panic; every delivered packet names an interface
//! of the table and lies inside its message; a refused, malformed, template-less or
//! duplicate message delivers nothing; the ledger's packet count equals what was delivered.
#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use libfuzzer_sys::fuzz_target;
use tapdeck_forward::{Intake, InterfaceTable, Ledger, Outcome};

fuzz_target!(|data: &[u8]| {
    let peers: [SocketAddr; 3] = [
        "198.18.0.1:4000".parse().unwrap(),
        "198.18.0.1:4001".parse().unwrap(),
        "198.18.0.9:4000".parse().unwrap(),
    ];
    let ledger = Arc::new(Mutex::new(Ledger::new()));
    let mut intake = Intake::new(vec![peers[0].ip()], Arc::clone(&ledger));
    let mut table = InterfaceTable::default();
    let mut delivered = 0u64;
    // A 2-byte length prefix per datagram (its low bits pick the exporter), so a message's
    // own length field is free to lie.
    let mut rest = data;
    while rest.len() >= 2 {
        let n = u16::from_be_bytes([rest[0], rest[1]]) as usize % 4096;
        let peer = peers[(rest[0] % 3) as usize];
        rest = &rest[2..];
        let msg = &rest[..n.min(rest.len())];
        rest = &rest[msg.len()..];
        for _ in 0..2 {
            let mut got = 0u64;
            let ifaces = table.interfaces.len() as u32;
            let outcome = intake.take(peer, msg, &mut table, |p| {
                assert!(p.iface < ifaces);
                assert!(p.data.len() < msg.len());
                got += 1;
            });
            match outcome {
                Outcome::Accepted { packets } => assert_eq!(packets, got),
                _ => assert_eq!(got, 0),
            }
            delivered += got;
            if outcome != Outcome::NewInterfaces {
                break;
            }
        }
    }
    let snap = ledger.lock().unwrap().snapshot();
    assert_eq!(snap.streams.iter().map(|s| s.packets).sum::<u64>(), delivered);
    assert!(snap.streams.iter().all(|s| s.exporter != "198.18.0.9"));
});
