//! Dissects arbitrary bytes under every link type we know (and one we do not), and checks
//! what the recorder and converter rely on: offsets and payload inside the frame, the
//! header-only cut never longer than the frame, flow ids symmetric.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapdeck_decode::{dissect, headers_len, FlowKey, HeaderDepth};

const LINKTYPES: [u32; 11] = [0, 1, 12, 14, 101, 108, 113, 228, 229, 276, 147];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let lt = LINKTYPES[usize::from(sel) % LINKTYPES.len()];
    let h = dissect(lt, frame);
    let len = frame.len();
    assert!(h.network_offset as usize <= len && h.network_end as usize <= len);
    assert!(h.transport_end as usize <= len);
    if !h.payload.is_empty() {
        let start = h.payload.as_ptr() as usize - frame.as_ptr() as usize;
        assert_eq!(start, h.transport_end as usize);
        assert!(start + h.payload.len() <= len);
        assert!(h.payload.len() as u32 <= h.payload_wire_len);
    }
    for depth in [HeaderDepth::Transport, HeaderDepth::Rpc] {
        assert!(headers_len(lt, frame, depth) <= len);
    }
    assert!(headers_len(lt, frame, HeaderDepth::Transport) <= headers_len(lt, frame, HeaderDepth::Rpc));
    if let Some(k) = FlowKey::from_headers(&h) {
        assert_eq!(k.id(), k.reversed().id());
    }
});
