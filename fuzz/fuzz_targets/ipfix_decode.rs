//! The IPFIX decoder on arbitrary bytes, as a collector sees them: several messages in a row
//! (so templates from one are used by the next), from two exporters, through the sequence
//! tracker and the RFC 5655 file reader. Must never panic; a rejected message yields nothing;
//! no record count exceeds what the bytes can hold; `decode` and `decode_each` agree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::SocketAddr;
use tapdeck_ipfix::{messages, Decoder, FileReader, Record, SequenceTracker};

fuzz_target!(|data: &[u8]| {
    let peers: [SocketAddr; 2] = [
        "198.18.0.1:4000".parse().unwrap(),
        "198.18.0.2:4000".parse().unwrap(),
    ];
    let mut decoder = Decoder::with_template_limit(64);
    let mut twin = Decoder::with_template_limit(64);
    let mut tracker = SequenceTracker::new();
    // Messages are delimited by a 2-byte length prefix (the low bit of the first picks the
    // exporter), so that a message's own length field is free to lie.
    let mut rest = data;
    while rest.len() >= 2 {
        let n = u16::from_be_bytes([rest[0], rest[1]]) as usize % 4096;
        let peer = peers[(rest[0] & 1) as usize];
        rest = &rest[2..];
        let msg = &rest[..n.min(rest.len())];
        rest = &rest[msg.len()..];
        let mut out = Vec::new();
        let res = decoder.decode(peer, msg, &mut out);
        let mut each = Vec::new();
        let twin_res = twin.decode_each(peer, msg, |r| each.push(r));
        assert_eq!(res, twin_res);
        assert_eq!(out, each);
        match res {
            Ok(info) => {
                assert!(out.len() <= info.data_records as usize);
                assert!(info.data_records as usize <= msg.len());
                let mut start = None;
                for r in &out {
                    match r {
                        Record::Packet(p) => assert!(p.frame_section.len() < msg.len()),
                        Record::ExporterStats(s) => start = Some(s.start_time_ms),
                        Record::Interface(i) => {
                            assert!(i.name.len() + i.description.len() < msg.len())
                        }
                    }
                }
                let records = (info.sets_without_template == 0).then_some(info.data_records);
                tracker.observe(
                    peer,
                    info.header.domain,
                    info.header.sequence,
                    records,
                    start,
                );
            }
            Err(_) => assert!(out.is_empty()),
        }
        assert!(decoder.templates().count(peer) <= 64);
    }
    for s in tracker.streams() {
        let c = s.2.counts;
        assert!(c.reordered + c.duplicates + c.resyncs <= c.messages);
    }
    // The same bytes as an RFC 5655 file, both readers agreeing.
    let mut reader = FileReader::new(data);
    for m in messages(data) {
        match (m, reader.next_message()) {
            (Ok(a), Ok(Some(b))) => assert_eq!(a, b),
            (Err(_), Err(_)) => break,
            (a, b) => panic!("readers disagree: {a:?} vs {b:?}"),
        }
    }
});
