//! Reads every packet of an arbitrary byte string as a capture file and runs the semantic
//! validator over them. Seed with real captures (see README.md); any panic, hang or
//! oversized allocation is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapdeck_pcap::validate::Validator;
use tapdeck_pcap::TraceReader;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = TraceReader::new(data) else {
        return;
    };
    let mut validator = Validator::new();
    let mut packets = 0usize;
    loop {
        match reader.next_packet_with_context() {
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
