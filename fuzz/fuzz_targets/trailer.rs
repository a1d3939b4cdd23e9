//! Structure-aware: the input is a recipe (see `tapdeck_pcap::fuzzing`) for a valid chunk
//! index and seek table, written by the container's own encoder and then damaged field by
//! field (edge values, off-by-one, another field's length), truncated or shifted. Reading the
//! trailer must never panic, and must either name an offset inside the file or return
//! exactly the index the bytes encode. `cargo test -p tapdeck-pcap` runs the same generator
//! over seeded inputs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tapdeck_pcap::fuzzing::check_trailer(data);
});
