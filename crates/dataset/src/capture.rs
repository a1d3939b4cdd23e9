//! The `capture_stats` rows of one source file: what the capture says about its own loss.
//!
//! A plain pcapng file says it in its interface statistics blocks (cumulative since its
//! capture began). A file a tapdeck recorder wrote says more in its chunk index: every drop
//! cause the recorder counts (kernel, staging pool full, write errors), per interface and
//! cumulative since the recorder's run started; the block's `isb_ifdrop` only holds the sum
//! of the last two, and a classic pcap file has no block at all, so both causes were lost
//! when only blocks were read. Such a file's row holds its *own* counts (the difference
//! from the file before it in its stream and run, as `tapdeck info` counts them), so rows
//! add up over files. The recorder's retention deletions are a store's count (its
//! `stats.jsonl`), carried once per store: on the last file of stream 0.

use std::path::Path;

use tapdeck_pcap::{Interface, InterfaceStats};
use tapdeck_store::meta::{DataName, FileMeta, InterfaceCounts, MANIFEST};
use tapdeck_store::read::StoredFile;

use crate::state::CaptureStatsState;

/// Raised when the rows change meaning: a source converted before is converted again.
pub const VERSION: u32 = 1;

/// Per interface: packets read, first and last packet time.
pub type PerInterface = [(u64, i64, i64)];

/// Where a stored file sits among its neighbours (from the conversion's chains).
pub struct Neighbours<'a> {
    /// The file before it in its stream, if it is a source of the dataset.
    pub previous: Option<&'a str>,
    /// No file follows it in its stream.
    pub last: bool,
}

/// The rows of the file at `path`, one per interface it declares.
pub fn capture_stats(
    path: &str,
    interfaces: &[Interface],
    blocks: &[InterfaceStats],
    per_iface: &PerInterface,
    neighbours: Neighbours<'_>,
) -> Vec<CaptureStatsState> {
    let stored = stored_meta(path).filter(|m| !m.counts.is_empty());
    let own = stored.as_ref().map(|m| {
        let previous = neighbours.previous.and_then(stored_meta);
        own_counts(m, previous.as_ref())
    });
    let deleted = match &stored {
        Some(m) if m.stream == 0 && neighbours.last => {
            store_of(Path::new(path)).map(|store| retention_deletions(&store.join("stats.jsonl")))
        }
        _ => None,
    };
    let mut rows = Vec::new();
    for (i, iface) in interfaces.iter().enumerate() {
        let (n, first, last) = per_iface
            .get(i)
            .copied()
            .filter(|e| e.0 > 0)
            .map_or((0, None, None), |(n, a, b)| (n, Some(a), Some(b)));
        let block = blocks
            .iter()
            .filter(|s| s.iface == i as u32)
            .max_by_key(|s| s.ts_ns);
        let mut row = CaptureStatsState {
            interface: i as i32,
            interface_name: iface.name.clone(),
            link_type: i32::from(iface.linktype),
            first_time_ns: first,
            last_time_ns: last,
            packets: n as i64,
            received: block.and_then(|s| s.received).map(|v| v as i64),
            kernel_dropped: block.and_then(|s| s.os_dropped).map(|v| v as i64),
            staging_dropped: None,
            write_dropped: None,
            if_dropped: block.and_then(|s| s.if_dropped).map(|v| v as i64),
            files_deleted: None,
            bytes_deleted: None,
            from_isb: block.is_some(),
            from_store: false,
        };
        if let Some(c) = own.as_ref().and_then(|o| o.get(i)) {
            let v = |x: u64| Some(x as i64);
            row.received = v(c.seen);
            row.kernel_dropped = v(c.dropped_kernel);
            row.staging_dropped = v(c.dropped_staging_full);
            row.write_dropped = v(c.dropped_write_error);
            // The block's isb_ifdrop is staging + write again, not an interface's drops.
            row.if_dropped = None;
            row.from_store = true;
            if i == 0 {
                if let Some((files, bytes)) = deleted.flatten() {
                    row.files_deleted = Some(files as i64);
                    row.bytes_deleted = Some(bytes as i64);
                }
            }
        }
        rows.push(row);
    }
    rows
}

fn stored_meta(path: &str) -> Option<FileMeta> {
    let name = Path::new(path).file_name()?.to_str()?;
    DataName::parse(name)?;
    StoredFile::open(Path::new(path)).ok().map(|f| f.meta)
}

/// A file's own counts: its cumulative counts less those of the file before it in the same
/// run (a file of another run, or older files without run ids whose totals went down,
/// started from zero).
pub fn own_counts(file: &FileMeta, previous: Option<&FileMeta>) -> Vec<InterfaceCounts> {
    let total = |m: &FileMeta| m.counts.iter().map(InterfaceCounts::dropped).sum::<u64>();
    let before = previous.filter(|p| {
        let other_run = p.run_started_ns.is_some()
            && file.run_started_ns.is_some()
            && p.run_started_ns != file.run_started_ns;
        p.stream == file.stream && !other_run && total(file) >= total(p)
    });
    file.counts
        .iter()
        .enumerate()
        .map(|(i, now)| match before.and_then(|p| p.counts.get(i)) {
            None => *now,
            Some(b) => InterfaceCounts {
                seen: now.seen.saturating_sub(b.seen),
                dropped_kernel: now.dropped_kernel.saturating_sub(b.dropped_kernel),
                received: now.received.saturating_sub(b.received),
                dropped_staging_full: now
                    .dropped_staging_full
                    .saturating_sub(b.dropped_staging_full),
                dropped_write_error: now
                    .dropped_write_error
                    .saturating_sub(b.dropped_write_error),
                stored: now.stored.saturating_sub(b.stored),
            },
        })
        .collect()
}

/// The store a data file lies in (its directory or one a few levels up holds the manifest;
/// a data directory outside the store has none).
fn store_of(file: &Path) -> Option<std::path::PathBuf> {
    file.ancestors()
        .skip(1)
        .take(4)
        .find(|d| d.join(MANIFEST).is_file())
        .map(Path::to_path_buf)
}

/// Files and bytes retention deleted over every run in a `stats.jsonl`: each run's records
/// are cumulative, so a run counts by its last record (one marked final, or the last before
/// the counters start again). None without a readable file.
pub fn retention_deletions(stats: &Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(stats).ok()?;
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut run: Option<(f64, u64, u64)> = None;
    for line in text.lines() {
        let Ok(r) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(f), Some(b)) = (r["files_deleted"].as_u64(), r["bytes_deleted"].as_u64()) else {
            continue;
        };
        let elapsed = r["elapsed_s"].as_f64().unwrap_or(0.0);
        if let Some((e, pf, pb)) = run {
            if elapsed < e || f < pf {
                files += pf;
                bytes += pb;
            }
        }
        run = Some((elapsed, f, b));
        if r["final"] == true {
            files += f;
            bytes += b;
            run = None;
        }
    }
    if let Some((_, f, b)) = run {
        files += f;
        bytes += b;
    }
    Some((files, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(stream: u32, run: Option<u64>, counts: &[(u64, u64, u64, u64)]) -> FileMeta {
        FileMeta {
            store_version: 1,
            stream,
            seq: 1,
            format: "pcapng".into(),
            container: "zstd".into(),
            first_ts_ns: 0,
            last_ts_ns: 0,
            packets: 0,
            interfaces: Vec::new(),
            counts: counts
                .iter()
                .map(|&(seen, kernel, staging, write)| InterfaceCounts {
                    seen,
                    dropped_kernel: kernel,
                    received: seen - kernel,
                    dropped_staging_full: staging,
                    dropped_write_error: write,
                    stored: seen - kernel - staging - write,
                })
                .collect(),
            out_of_order: 0,
            repaired: false,
            run_started_ns: run,
        }
    }

    fn drops(c: &[InterfaceCounts]) -> Vec<(u64, u64, u64, u64)> {
        c.iter()
            .map(|c| {
                (
                    c.seen,
                    c.dropped_kernel,
                    c.dropped_staging_full,
                    c.dropped_write_error,
                )
            })
            .collect()
    }

    #[test]
    fn a_files_own_counts_are_the_difference_within_its_run() {
        let a = meta(0, Some(5), &[(100, 1, 10, 0), (50, 0, 0, 2)]);
        let b = meta(0, Some(5), &[(300, 4, 25, 1), (90, 0, 3, 2)]);
        assert_eq!(
            drops(&own_counts(&b, Some(&a))),
            [(200, 3, 15, 1), (40, 0, 3, 0)]
        );
        // The first file of a run, or one after another run, counts from zero.
        assert_eq!(drops(&own_counts(&b, None)), drops(&b.counts));
        let other = meta(0, Some(9), &[(10, 0, 0, 0), (10, 0, 0, 0)]);
        assert_eq!(drops(&own_counts(&b, Some(&other))), drops(&b.counts));
        // Without run ids, a total that went down is a restart.
        let (old_a, old_b) = (
            meta(0, None, &[(500, 0, 90, 0)]),
            meta(0, None, &[(20, 0, 5, 0)]),
        );
        assert_eq!(drops(&own_counts(&old_b, Some(&old_a))), [(20, 0, 5, 0)]);
        // Another stream is no predecessor.
        let s1 = meta(1, Some(5), &[(100, 1, 10, 0), (50, 0, 0, 2)]);
        assert_eq!(drops(&own_counts(&b, Some(&s1))), drops(&b.counts));
    }

    #[test]
    fn retention_deletions_add_up_over_runs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stats.jsonl");
        let rec = |e: f64, f: u64, b: u64, last: bool| {
            format!(
                "{{\"elapsed_s\":{e},\"files_deleted\":{f},\"bytes_deleted\":{b}{}}}\n",
                if last { ",\"final\":true" } else { "" }
            )
        };
        // A run that ended (final), one killed (no final; the next restarts its counters),
        // and one still running; a torn last line is skipped.
        let text = [
            rec(1.0, 1, 10, false),
            rec(2.0, 3, 30, true),
            rec(1.0, 2, 20, false),
            rec(2.0, 4, 40, false),
            rec(0.5, 0, 0, false),
            rec(1.5, 5, 50, false),
            "{\"elapsed_s\":2.0,\"files_del".into(),
        ]
        .concat();
        std::fs::write(&p, text).unwrap();
        assert_eq!(retention_deletions(&p), Some((3 + 4 + 5, 30 + 40 + 50)));
        assert_eq!(retention_deletions(&dir.path().join("none")), None);
    }
}
