//! Reads every packet of an arbitrary byte string as a capture file and runs the semantic
//! validator over them; reading the same bytes from memory (as a mapped file is read) must
//! give the same packets and the same error. Seed with real captures (see README.md); any
//! panic, hang or oversized allocation is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapdeck_pcap::validate::Validator;
use tapdeck_pcap::TraceReader;

fuzz_target!(|data: &[u8]| {
    let mut in_memory = TraceReader::<&[u8]>::from_bytes(Box::new(data.to_vec()));
    let Ok(mut reader) = TraceReader::new(data) else {
        assert!(in_memory.is_err(), "only the in-memory reader accepted the header");
        return;
    };
    let Ok(in_memory) = in_memory.as_mut() else {
        panic!("only the stream reader accepted the header");
    };
    let mut validator = Validator::new();
    let mut packets = 0usize;
    loop {
        let twin = in_memory
            .next_packet()
            .map(|p| p.map(|p| (p.ts_ns, p.iface, p.orig_len, p.flags, p.data.to_vec())));
        let this = reader.next_packet_with_context();
        assert_eq!(
            format!("{twin:?}"),
            format!(
                "{:?}",
                this.as_ref()
                    .map(|c| c.map(|c| (c.packet.ts_ns, c.packet.iface, c.packet.orig_len, c.packet.flags, c.packet.data.to_vec())))
            ),
            "stream and in-memory readers disagree"
        );
        match this {
            Ok(Some(c)) => {
                assert!(
                    c.packet.data.len() <= data.len(),
                    "packet larger than the input"
                );
                assert!(c.offset < data.len() as u64, "packet offset past the input");
                let _ = validator.check(c.interfaces, &c.packet, c.offset);
            }
            Ok(None) => break,
            Err(e) => {
                assert!(e.offset <= data.len() as u64, "error offset past the input");
                // A failed reader must stay failed rather than decode garbage.
                assert!(reader.next_packet().is_err());
                break;
            }
        }
        packets += 1;
        // Each packet consumes at least 12 bytes of input.
        assert!(packets <= data.len() / 12 + 1, "reader does not advance");
    }
    let _ = (reader.interfaces(), reader.stats(), reader.offset());
});
