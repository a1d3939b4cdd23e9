//! Reads the tail of an arbitrary byte string as a capture file, as the converter reads a
//! large plain trace's end: the first packet, then `resync_from` an offset taken from the
//! input, then every packet to the end. Any panic or hang is a bug; a crafted chain of
//! fake records may mislead the resync, which must still only ever read in bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapdeck_pcap::TraceReader;

fuzz_target!(|data: &[u8]| {
    let Some((at, bytes)) = data.split_first_chunk::<4>() else {
        return;
    };
    let at = u64::from(u32::from_le_bytes(*at)) % (bytes.len() as u64 + 8);
    let Ok(mut r) = TraceReader::<&[u8]>::from_bytes(Box::new(bytes.to_vec())) else {
        return;
    };
    let _ = r.next_packet();
    if let Some(o) = r.resync_from(at) {
        assert!(o >= at && o <= bytes.len() as u64, "resync went to {o}");
    }
    // Each record consumes input: this ends.
    while let Ok(Some(p)) = r.next_packet() {
        assert!(p.data.len() <= bytes.len(), "packet larger than the input");
    }
});
