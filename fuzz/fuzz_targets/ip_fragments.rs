//! Feeds a sequence of raw IP packets (each: a 2-byte length, a 2-byte time step in ms,
//! then the packet) through the fragment reassembler with small bounds, and checks what
//! the converter relies on: no panic, bounds kept, a datagram never longer than 65535
//! bytes nor than its wire length, and its headers' payload inside its data.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapdeck_decode::{dissect, FragmentConfig, FragmentReassembler};

const LINKTYPE_RAW: u32 = 101;

fuzz_target!(|data: &[u8]| {
    let mut r = FragmentReassembler::new(FragmentConfig {
        timeout_ns: 1_000_000_000,
        max_bytes: 4096,
        max_datagrams: 8,
    });
    let (mut rest, mut t) = (data, 0u64);
    while rest.len() >= 4 {
        let n = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 4);
        t += u64::from(u16::from_be_bytes([rest[2], rest[3]])) * 1_000_000;
        let frame = &rest[4..4 + n];
        rest = &rest[4 + n..];
        let h = dissect(LINKTYPE_RAW, frame);
        if let Some(d) = r.insert(&h, frame, t) {
            assert!(d.wire_len <= 65_535 && d.data.len() <= d.wire_len as usize);
            let inner = d.headers(&h);
            assert!(inner.payload.len() as u32 <= inner.payload_wire_len);
            assert!(inner.transport_end as usize <= d.data.len());
        }
        let (n, _) = r.in_progress();
        assert!(n <= 8);
    }
});
