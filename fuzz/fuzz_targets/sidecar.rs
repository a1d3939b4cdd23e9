//! The sidecar block index of a capture file (`FILE.tdx`, `tapdeck_filter::sidecar`)
//! over arbitrary bytes. The first byte is a switch: with bit 0 set, the rest gets a valid
//! checksum appended first, so the fuzzer gets past it to the header and blocks.
//! `Sidecar::decode` must not panic, must fail with one line, and what it accepts must
//! encode back to the same bytes (only the canonical encoding is read).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapdeck_filter::sidecar::Sidecar;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if sel & 1 != 0 {
        let sum = xxhash_rust::xxh32::xxh32(&bytes, 0);
        bytes.extend(sum.to_le_bytes());
    }
    match Sidecar::decode(&bytes) {
        Ok(s) => {
            assert_eq!(s.encode(), bytes, "not canonical");
            let mut next = 0;
            for b in &s.blocks {
                assert!(b.offset >= next && b.len > 0 && b.first_ts_ns <= b.last_ts_ns);
                next = b.offset + b.len;
            }
            assert!(next <= s.stream_size);
            assert!(s.compression != 0 || s.stream_size == s.identity.size);
        }
        Err(e) => assert!(!e.to_string().contains('\n')),
    }
});
