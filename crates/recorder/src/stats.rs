//! Counters of every stage and drop cause, and the JSON record they are reported as.
//!
//! The capture loop and the writers each own their counters and publish snapshots under a
//! mutex a few times a second at most, so nothing on the per-packet path is shared.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Serialize;
use tapdeck_pcap::container::Codec;

use crate::controller::{ControllerView, Reason};
use tapdeck_store::meta::InterfaceCounts;

/// What the capture loop of one stream knows, per interface.
#[derive(Debug, Clone, Copy, Default)]
pub struct CaptureCounts {
    pub seen: u64,
    pub dropped_kernel: u64,
    pub received: u64,
    pub dropped_staging_full: u64,
    /// Record bytes copied into staging (the capture data before compression).
    pub staged_bytes: u64,
    /// Bytes of the packets as the source captured them (caplen, after any snap length),
    /// as kept (caplen after header-only capture cut them; equal without it), and as they
    /// were on the wire.
    pub captured_bytes: u64,
    pub kept_bytes: u64,
    pub wire_bytes: u64,
}

/// What the writer of one stream knows, per interface.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriterCounts {
    pub stored: u64,
    pub dropped_write_error: u64,
    /// Of `stored`, the packets whose file data has been synced to the device (a finished
    /// file, or a periodic sync of the open one: `WriterConfig::sync_interval`).
    pub durable: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CodecBytes {
    pub chunks: u64,
    /// Capture data that went through this rung.
    pub bytes_in: u64,
    /// What it became on disk.
    pub bytes_out: u64,
}

#[derive(Default)]
pub struct StreamStats {
    pub capture: Mutex<Vec<CaptureCounts>>,
    pub writer: Mutex<Vec<WriterCounts>>,
    /// The interfaces' names, as the capture loop learnt them (for metric labels).
    pub interface_names: Mutex<Vec<String>>,
    /// When the capture loop last went round (ns since the epoch): it goes round on a quiet
    /// link too, so a stale value means a stuck capture thread, not an idle link.
    pub progress_ns: AtomicU64,
}

impl StreamStats {
    /// Counters per interface as the files record them.
    pub fn interface_counts(&self) -> Vec<InterfaceCounts> {
        // The writer's side first: what it counts was captured earlier, so a snapshot never
        // shows more stored than seen (in flight is never negative).
        let writer = self.writer.lock().unwrap().clone();
        let capture = self.capture.lock().unwrap().clone();
        combine(&capture, &writer)
    }
}

/// Per-interface counts from both sides of the pipeline, as the files record them.
pub fn combine(capture: &[CaptureCounts], writer: &[WriterCounts]) -> Vec<InterfaceCounts> {
    let n = capture.len().max(writer.len());
    (0..n)
        .map(|i| {
            let c = capture.get(i).copied().unwrap_or_default();
            let w = writer.get(i).copied().unwrap_or_default();
            InterfaceCounts {
                seen: c.seen,
                dropped_kernel: c.dropped_kernel,
                received: c.received,
                dropped_staging_full: c.dropped_staging_full,
                dropped_write_error: w.dropped_write_error,
                stored: w.stored,
            }
        })
        .collect()
}

/// Everything the recorder counts, shared by all its threads.
#[derive(Default)]
pub struct StatsHub {
    pub streams: Vec<StreamStats>,
    pub codecs: Mutex<BTreeMap<String, CodecBytes>>,
    /// Capture bytes per codec and per reason the ladder controller gave.
    pub ladder: Mutex<LadderBytes>,
    /// The ladder bytes and elapsed time of the last snapshot, for per-second rates.
    last_ladder: Mutex<(f64, LadderBytes)>,
    pub bytes_written: AtomicU64,
    pub files_written: AtomicU64,
    pub files_deleted: AtomicU64,
    pub bytes_deleted: AtomicU64,
    pub write_errors: AtomicU64,
    /// Times retention began refusing writes (only protected files were left to delete).
    pub retention_holds: AtomicU64,
    /// Chunks refused by retention (their packets are counted as write-error drops).
    pub retention_refused: AtomicU64,
    /// When the last file was completed (ns since the epoch; 0: none yet in this run).
    pub last_file_completed_ns: AtomicU64,
    /// CPU seconds (user + system) per thread role, added as threads finish.
    pub cpu: Mutex<BTreeMap<String, f64>>,
}

impl StatsHub {
    pub fn add_cpu(&self, role: &str, seconds: f64) {
        *self
            .cpu
            .lock()
            .unwrap()
            .entry(role.to_string())
            .or_default() += seconds;
    }

    pub fn new(streams: usize) -> StatsHub {
        StatsHub {
            streams: (0..streams).map(|_| StreamStats::default()).collect(),
            ..Default::default()
        }
    }

    pub fn add_codec(&self, codec: Codec, bytes_in: usize, bytes_out: usize) {
        let mut codecs = self.codecs.lock().unwrap();
        let c = codecs.entry(codec.to_string()).or_default();
        c.chunks += 1;
        c.bytes_in += bytes_in as u64;
        c.bytes_out += bytes_out as u64;
    }

    pub fn add_decision(&self, codec: Codec, reason: Reason, bytes_in: usize) {
        *self
            .ladder
            .lock()
            .unwrap()
            .entry(codec.to_string())
            .or_default()
            .entry(reason.name().to_string())
            .or_default() += bytes_in as u64;
    }

    /// Ladder bytes per second since the previous snapshot (or the start).
    fn ladder_per_s(&self, elapsed_s: f64, now: &LadderBytes) -> LadderRates {
        let mut last = self.last_ladder.lock().unwrap();
        let dt = (elapsed_s - last.0).max(1e-9);
        let rates = now
            .iter()
            .map(|(codec, reasons)| {
                let before = last.1.get(codec);
                let per_reason = reasons
                    .iter()
                    .map(|(reason, &bytes)| {
                        let was = before.and_then(|b| b.get(reason)).copied().unwrap_or(0);
                        (reason.clone(), (bytes - was) as f64 / dt)
                    })
                    .collect();
                (codec.clone(), per_reason)
            })
            .collect();
        *last = (elapsed_s, now.clone());
        rates
    }

    /// The record of this moment, with the ladder's rates since the previous snapshot (the
    /// periodic stats records); see [`StatsHub::peek`] for other observers.
    pub fn snapshot(&self, ts_ns: u64, elapsed_s: f64, staging_fill: f64) -> StatsRecord {
        let mut record = self.peek(ts_ns, elapsed_s, staging_fill);
        record.ladder_per_s = self.ladder_per_s(elapsed_s, &record.ladder);
        record
    }

    /// The record of this moment without the per-second ladder rates, which stay measured
    /// between the periodic records: a metrics scrape must not reset them.
    pub fn peek(&self, ts_ns: u64, elapsed_s: f64, staging_fill: f64) -> StatsRecord {
        let mut total = Totals::default();
        let mut streams = Vec::new();
        for (i, s) in self.streams.iter().enumerate() {
            // Before `stored` is read: a record never shows more durable than stored.
            total.durable += s
                .writer
                .lock()
                .unwrap()
                .iter()
                .map(|w| w.durable)
                .sum::<u64>();
            let capture = s.capture.lock().unwrap().clone();
            for c in &capture {
                total.staged_bytes += c.staged_bytes;
                total.captured_bytes += c.captured_bytes;
                total.kept_bytes += c.kept_bytes;
                total.wire_bytes += c.wire_bytes;
            }
            let counts = s.interface_counts();
            for c in &counts {
                total.seen += c.seen;
                total.received += c.received;
                total.stored += c.stored;
                total.dropped.kernel += c.dropped_kernel;
                total.dropped.staging_full += c.dropped_staging_full;
                total.dropped.write_error += c.dropped_write_error;
                total.in_flight += c.in_flight();
            }
            streams.push(StreamRecord {
                stream: i as u32,
                interfaces: counts,
            });
        }
        let ladder = self.ladder.lock().unwrap().clone();
        StatsRecord {
            ladder_per_s: LadderRates::new(),
            ladder,
            controller: Vec::new(),
            ts_ns,
            elapsed_s,
            staging_fill,
            totals: total,
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            files_written: self.files_written.load(Ordering::Relaxed),
            files_deleted: self.files_deleted.load(Ordering::Relaxed),
            bytes_deleted: self.bytes_deleted.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            retention_holds: self.retention_holds.load(Ordering::Relaxed),
            retention_refused: self.retention_refused.load(Ordering::Relaxed),
            codecs: self.codecs.lock().unwrap().clone(),
            cpu_seconds: self.cpu.lock().unwrap().clone(),
            cpu_pressure: crate::os::cpu_pressure(),
            streams,
        }
    }
}

/// Capture bytes by codec, then by the controller's reason (`plan`, `disk_headroom`, ...).
pub type LadderBytes = BTreeMap<String, BTreeMap<String, u64>>;
/// The same per second.
pub type LadderRates = BTreeMap<String, BTreeMap<String, f64>>;

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Drops {
    pub kernel: u64,
    pub staging_full: u64,
    pub write_error: u64,
}

impl Drops {
    pub fn total(&self) -> u64 {
        self.kernel + self.staging_full + self.write_error
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Totals {
    /// Packets the sources saw (for sockets: as the kernel counted them).
    pub seen: u64,
    pub received: u64,
    pub stored: u64,
    /// Of `stored`, the packets synced to the device: a power loss cannot take them. Only
    /// as current as the writers' syncs (`RecorderConfig::sync_interval`; without one, a
    /// file's packets become durable when it is finished).
    pub durable: u64,
    pub dropped: Drops,
    /// Packets seen but neither stored nor dropped yet (in the kernel's ring, staging, the
    /// compressors or the write buffer): every record balances, seen = stored + dropped +
    /// in_flight, and the final one has none in flight.
    pub in_flight: u64,
    pub staged_bytes: u64,
    /// Packet bytes of the staged packets: on the wire ≥ captured by the source (snap
    /// length) ≥ kept (header-only capture). See `CaptureCounts`.
    pub captured_bytes: u64,
    pub kept_bytes: u64,
    pub wire_bytes: u64,
}

impl Totals {
    /// Packets neither stored nor counted as dropped: still in flight while running, and
    /// zero once the recorder has drained — the accounting identity the tests check.
    pub fn unaccounted(&self) -> i128 {
        i128::from(self.seen) - i128::from(self.stored) - i128::from(self.dropped.total())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamRecord {
    pub stream: u32,
    pub interfaces: Vec<InterfaceCounts>,
}

/// One JSON-lines stats record.
#[derive(Debug, Clone, Serialize)]
pub struct StatsRecord {
    pub ts_ns: u64,
    pub elapsed_s: f64,
    pub staging_fill: f64,
    pub totals: Totals,
    pub bytes_written: u64,
    pub files_written: u64,
    pub files_deleted: u64,
    pub bytes_deleted: u64,
    pub write_errors: u64,
    /// See `StatsHub::retention_holds` and `retention_refused`.
    pub retention_holds: u64,
    pub retention_refused: u64,
    pub codecs: BTreeMap<String, CodecBytes>,
    /// Capture bytes each rung (or raw) took, by why the ladder controller chose it.
    pub ladder: LadderBytes,
    /// The same in bytes per second since the previous record: the controller's decisions
    /// over time.
    pub ladder_per_s: LadderRates,
    /// Per stream, what the controller believes: offered rate, disk speed and busy time,
    /// each rung's speed and ratio, the pool's trend and the planned rung.
    pub controller: Vec<ControllerView>,
    /// CPU seconds per thread role (capture, compress, writer) of threads that finished;
    /// complete in the final record.
    pub cpu_seconds: BTreeMap<String, f64>,
    /// The machine's CPU pressure (`/proc/pressure/cpu`); null where the kernel does not
    /// report it. The compressors' own share of a CPU is in `controller`.
    pub cpu_pressure: Option<crate::os::CpuPressure>,
    pub streams: Vec<StreamRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_bytes_by_reason_and_per_second_since_the_last_record() {
        let hub = StatsHub::new(1);
        hub.add_decision(Codec::Raw, Reason::DiskHeadroom, 4_000_000);
        hub.add_decision(Codec::Lz4, Reason::Plan, 1_000_000);
        let r = hub.snapshot(0, 2.0, 0.0);
        assert_eq!(r.ladder["raw"]["disk_headroom"], 4_000_000);
        assert_eq!(r.ladder_per_s["raw"]["disk_headroom"], 2e6);
        assert_eq!(r.ladder_per_s["lz4"]["plan"], 5e5);
        hub.add_decision(Codec::Raw, Reason::DiskHeadroom, 1_000_000);
        let r = hub.snapshot(0, 3.0, 0.0);
        assert_eq!(r.ladder["raw"]["disk_headroom"], 5_000_000);
        assert_eq!(r.ladder_per_s["raw"]["disk_headroom"], 1e6);
        assert_eq!(r.ladder_per_s["lz4"]["plan"], 0.0);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["ladder_per_s"]["raw"]["disk_headroom"], 1e6);
    }
}
