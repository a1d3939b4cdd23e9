//! The store catalog at month scale (bench/query_scale.py's `month` part): a catalog of N
//! entries (a month of a 1 Gb/s link in 1 GiB files is about 300,000), written as a
//! rewrite writes it (entries and groups), then the lookup of a rare host (present in 3
//! files) and of a one-hour window, cold (page cache dropped: needs root) and warm, and
//! the listing of a data directory of N names. Prints one JSON object.
//!
//!     cargo run --release -p tapdeck-store --example catalog_scale -- DIR N

use std::path::Path;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use tapdeck_filter::{ChunkFilterBuilder, Predicate, SummaryBuilder};
use tapdeck_pcap::container::Container;
use tapdeck_pcap::Format;
use tapdeck_store::catalog::{self, Entry, Lookup};
use tapdeck_store::meta;

// As the `tapdeck` binary allocates.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RARE: u32 = 0xc612_4d07; // 198.18.77.7
const FILE_NS: u64 = 8_600_000_000; // 1 GiB at 1 Gb/s

fn udp(src: u32, dst: u32) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend([0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend(src.to_be_bytes());
    f.extend(dst.to_be_bytes());
    f.extend([0, 53, 0, 53, 0, 8, 0, 0]);
    f
}

fn drop_caches() -> bool {
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

fn timed<T>(cold: bool, f: impl Fn() -> T) -> (f64, T) {
    if cold {
        drop_caches();
    }
    let t = Instant::now();
    let out = f();
    (t.elapsed().as_secs_f64(), out)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let root = Path::new(&args[1]);
    let n: u64 = args[2].parse().expect("N");
    let data = root.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut b = ChunkFilterBuilder::new();
    let t0 = 1_790_000_000_000_000_000u64;
    let rare_in = [n / 7, n / 2, n - 3];
    let built = catalog::path(root).exists();
    let entries: Vec<Entry> = (0..if built { 0 } else { n })
        .map(|seq| {
            // A few hundred hosts per file from a population of 100,000 (the summaries'
            // sizes do not change what a lookup reads: one block per file).
            for _ in 0..200 {
                b.add(
                    1,
                    &udp(0x0a00_0000 + rng.gen_range(0..100_000), 0xc633_0001),
                );
            }
            if rare_in.contains(&seq) {
                b.add(1, &udp(RARE, 0xc633_0001));
            }
            let (chunk, values) = b.finish_with_values();
            let mut summary = SummaryBuilder::new();
            summary.add(&chunk, &values);
            let first = t0 + seq * FILE_NS;
            let name = meta::file_name(first, 0, seq, Format::Pcapng, Container::Zstd);
            if seq % 1000 == 0 || rare_in.contains(&seq) || n <= 300_000 {
                std::fs::File::create(data.join(&name)).unwrap();
            }
            Entry {
                name,
                size: 1 << 30,
                first_ns: first,
                last_ns: first + FILE_NS - 1,
                packets: 100_000,
                summary: summary.finish().encode(),
            }
        })
        .collect();
    let t = Instant::now();
    if !catalog::path(root).exists() {
        catalog::rewrite(root, &entries).unwrap();
    }
    let write_s = t.elapsed().as_secs_f64();
    let bytes = |f: &str| std::fs::metadata(root.join(f)).map_or(0, |m| m.len());
    let host = Predicate::parse(&format!("host {}", std::net::Ipv4Addr::from(RARE))).unwrap();
    let all = |e: &Entry| e.packets == 0;
    let (hour_lo, hour_hi) = (
        t0 + (n / 3) * FILE_NS,
        t0 + (n / 3) * FILE_NS + 3_600_000_000_000,
    );
    let hour = move |e: &Entry| e.last_ns < hour_lo || e.first_ns > hour_hi;
    let mut out = serde_json::json!({
        "entries": n, "write_s": write_s,
        "catalog_bytes": bytes(catalog::CATALOG), "groups_bytes": bytes(catalog::groups::GROUPS),
    });
    for cold in [true, false, false] {
        let (s, l) = timed(cold, || Lookup::read(root, &all, Some(&host)));
        let maybe = l.iter().filter(|(_, k)| !k.no_match).count();
        let (hs, hl) = timed(cold, || Lookup::read(root, &hour, None));
        let in_hour = hl.iter().filter(|(_, k)| !hour(&k.entry)).count();
        let (ls, listed) = timed(cold, || std::fs::read_dir(&data).unwrap().count());
        let key = if cold { "cold" } else { "warm" };
        let prev = out
            .get(key)
            .and_then(|v| v["rare_host_s"].as_f64())
            .unwrap_or(f64::MAX);
        if s < prev {
            out[key] = serde_json::json!({
                "rare_host_s": s, "rare_host_candidates": maybe, "records_read": l.records,
                "slices_read": l.slices, "groups": l.groups,
                "hour_window_s": hs, "hour_files": in_hour, "hour_records_read": hl.records,
                "list_dir_s": ls, "listed": listed,
            });
        }
    }
    out["dropped_caches"] = drop_caches().into();
    println!("{out}");
}
