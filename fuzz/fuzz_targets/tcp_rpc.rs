//! Feeds a sequence of arbitrary TCP segments (one direction) through the reassembler and
//! the RPC framer. Each segment is 6 bytes of header — sequence offset (u16, relative to a
//! base, so overlaps and reordering are common), flags, captured length, extra wire
//! length — then its payload. Checks: no panic, delivered bytes never exceed fed bytes,
//! buffered memory stays under its bound, messages stay under theirs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapdeck_decode::rpc_framing::{FramingConfig, RpcFramer};
use tapdeck_decode::tcp::{ReassemblyConfig, Segment, TcpReassembler};

const MAX_BUFFER: usize = 8192;

fuzz_target!(|data: &[u8]| {
    let Some((&b0, mut rest)) = data.split_first() else {
        return;
    };
    let base = u32::from(b0) << 24 | 0x00ff_ff00; // near wraparound for some inputs
    let mut reasm = TcpReassembler::new(ReassemblyConfig { max_buffer: MAX_BUFFER });
    let cfg = FramingConfig { max_record: 4096, max_message: 10_000 };
    let mut framer = RpcFramer::new(cfg, b0 & 1 == 0);
    let mut fed = 0u64;
    let mut delivered = 0u64;
    let mut messages = 0u64;
    let mut n = 0u32;
    while rest.len() >= 6 {
        let (h, tail) = rest.split_at(6);
        let off = u32::from(u16::from_be_bytes([h[0], h[1]]));
        let flags = h[2];
        let cap = usize::from(h[3]).min(tail.len());
        let extra = u32::from(h[4]) * u32::from(h[5] & 0x0f);
        let (payload, tail) = tail.split_at(cap);
        rest = tail;
        n += 1;
        fed += payload.len() as u64;
        let seg = Segment {
            seq: base.wrapping_add(off),
            syn: flags & 1 != 0,
            fin: flags & 2 != 0,
            rst: flags & 0x0c == 0x0c,
            payload,
            wire_len: payload.len() as u32 + extra,
            meta: n,
        };
        reasm.push(seg, &mut |ev| {
            if let tapdeck_decode::StreamEvent::Data { bytes, .. } = ev {
                delivered += bytes.len() as u64;
            }
            framer.event(ev, &mut |m| {
                messages += 1;
                assert!(m.body.len() as u64 <= m.wire_len);
                assert!(m.wire_len <= cfg.max_message);
                // No order between first_meta and last_meta: they follow stream order, and
                // a message can start in a late retransmission and end in an early segment.
            });
        });
        assert!(delivered <= fed, "delivered {delivered} of {fed}");
        assert!(reasm.memory_use() <= MAX_BUFFER);
        assert!(framer.memory_use() <= 64 << 10);
    }
    reasm.flush(&mut |ev| framer.event(ev, &mut |m| assert!(m.body.len() as u64 <= m.wire_len)));
    assert!(reasm.counters().delivered_bytes <= fed);
    assert!(framer.counters().messages >= messages);
});
