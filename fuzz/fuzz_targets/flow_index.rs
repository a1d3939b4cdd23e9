//! The flow index from both ends. The first byte picks the mode:
//! - even: a filter (its length in the next byte, then its bytes) and an encoded index (the
//!   rest). With bit 1 set, the index bytes get a valid checksum appended first, so the
//!   fuzzer gets past it to the sets. `Predicate::parse` and `ChunkFilter::decode` must not
//!   panic; a decoded index re-encodes to the same bytes (the encoding is canonical),
//!   merges with itself, and answers the predicate.
//! - odd: frames (a link type selector byte and a length byte before each) through a
//!   `ChunkFilterBuilder`; its index must survive encode/decode unchanged and answer a few
//!   predicates.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapdeck_filter::{ChunkFilter, ChunkFilterBuilder, Predicate};

const LINKTYPES: [u32; 10] = [1, 101, 113, 276, 0, 108, 228, 229, 12, 127];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel & 1 == 0 {
        let Some((&n, rest)) = rest.split_first() else {
            return;
        };
        let n = usize::from(n).min(rest.len());
        let (filter, index) = rest.split_at(n);
        let filter = String::from_utf8_lossy(filter);
        let predicate = Predicate::parse(&filter);
        if let Some(p) = &predicate {
            assert!(!p.explain().is_empty());
        }
        let mut bytes = index.to_vec();
        if sel & 2 != 0 {
            let sum = xxhash_rust::xxh32::xxh32(&bytes, 0);
            bytes.extend(sum.to_le_bytes());
        }
        if let Ok(index) = ChunkFilter::decode(&bytes) {
            assert_eq!(index.encode(), bytes, "not canonical");
            let _ = index.to_string();
            let mut twice = index.clone();
            twice.merge(&index);
            assert_eq!(twice.packets(), index.packets().saturating_mul(2));
            assert_eq!(ChunkFilter::decode(&twice.encode()), Ok(twice.clone()));
            if let Some(p) = &predicate {
                // Merging only adds: what may match a part may match the whole.
                if p.may_match(&index) {
                    assert!(p.may_match(&twice));
                }
                if index.is_empty() {
                    assert!(!p.may_match(&index));
                }
            }
        }
    } else {
        let mut builder = ChunkFilterBuilder::new();
        let mut rest = rest;
        while let [lt, len, tail @ ..] = rest {
            let n = usize::from(*len).min(tail.len());
            builder.add(LINKTYPES[usize::from(*lt) % LINKTYPES.len()], &tail[..n]);
            rest = &tail[n..];
        }
        let index = builder.finish();
        let bytes = index.encode();
        assert_eq!(ChunkFilter::decode(&bytes), Ok(index.clone()));
        for f in ["host 10.0.0.1", "tcp port 80 or udp", "vlan 1 and net ::/0", "not icmp6"] {
            let _ = Predicate::parse(f).unwrap().may_match(&index);
        }
        assert!(builder.finish().is_empty());
    }
});
