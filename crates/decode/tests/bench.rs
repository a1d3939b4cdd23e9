//! Per-packet cost of `dissect` and `headers_len` on a typical TCP frame. Ignored by
//! default; run in release:
//! `cargo test --release -p tapdeck-decode --test bench -- --ignored --nocapture`

use std::hint::black_box;
use std::time::Instant;

use tapdeck_decode::{dissect, headers_len, FlowKey, HeaderDepth};

/// Ethernet + IPv4 + TCP (timestamps option) + a 100-byte NFS-ish payload.
fn frame() -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend([0x08, 0x00]);
    f.extend([
        0x45, 0, 0, 152, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    f.extend([
        0x03, 0xff, 0x08, 0x01, 0, 0, 1, 0, 0, 0, 2, 0, 0x80, 0x18, 0x10, 0,
    ]);
    f.extend([0, 0, 0, 0, 1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
    f.extend((0x8000_0060u32).to_be_bytes());
    for w in [7u32, 0, 2, 100_003, 3, 7, 0, 0, 0, 0] {
        f.extend(w.to_be_bytes());
    }
    f.resize(14 + 152, 0xaa);
    f
}

#[test]
#[ignore]
fn per_packet_cost() {
    let f = frame();
    assert!(dissect(1, &f).transport.ports().is_some());
    let n = 20_000_000u32;
    let t = Instant::now();
    let mut acc = 0usize;
    for _ in 0..n {
        acc += dissect(1, black_box(&f)).payload.len();
    }
    let d = t.elapsed().as_nanos() as f64 / f64::from(n);
    let t = Instant::now();
    for _ in 0..n {
        acc += headers_len(1, black_box(&f), HeaderDepth::Rpc);
    }
    let hl = t.elapsed().as_nanos() as f64 / f64::from(n);
    let t = Instant::now();
    let mut ids = 0u64;
    for _ in 0..n {
        let h = dissect(1, black_box(&f));
        ids ^= FlowKey::from_headers(&h).map_or(0, |k| k.id());
    }
    let fid = t.elapsed().as_nanos() as f64 / f64::from(n);
    black_box((acc, ids));
    eprintln!(
        "dissect {d:.1} ns/packet; headers_len(Rpc) {hl:.1} ns; dissect + flow id {fid:.1} ns"
    );
    assert!(d < 100.0, "dissect costs {d:.1} ns");
}
