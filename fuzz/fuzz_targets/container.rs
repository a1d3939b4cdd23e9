//! The container readers over arbitrary bytes: frame walking (used to repair files), frame
//! decoding, and the trailer (chunk index + seek table). Seed with stored tapdeck files
//! (see README.md); any panic, hang or oversized allocation is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapdeck_pcap::container::{decode_frame, frame_len, ChunkIndex, Container, MAX_FRAME_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = ChunkIndex::read_trailer(data) {
        for e in index.entries.iter().take(64) {
            let start = e.frame_offset as usize;
            let Some(frame) = start.checked_add(e.frame_len as usize).and_then(|end| data.get(start..end)) else {
                continue;
            };
            let mut out = Vec::new();
            let _ = decode_frame(Container::Zstd, frame, e.data_len as usize, &mut out);
            assert!(out.len() <= e.data_len as usize + 1, "decoder wrote past the expected length");
        }
    }
    // Walk frames from the start, as repair does.
    let mut at = 0usize;
    while at < data.len() {
        match frame_len(&data[at..]) {
            Ok(Some(n)) => {
                assert!(n > 0 && at + n <= data.len(), "frame length outside the input");
                let mut out = Vec::new();
                let _ = decode_frame(Container::Zstd, &data[at..at + n], 1 << 16, &mut out);
                at += n;
            }
            Ok(None) | Err(_) => break,
        }
    }
    let mut out = Vec::new();
    let _ = decode_frame(Container::Lz4, data, MAX_FRAME_LEN + 1, &mut out);
    assert!(out.is_empty());
});
