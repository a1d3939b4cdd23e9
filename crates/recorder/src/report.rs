//! What a recording tells while it runs, besides its stats records: JSON lines of those
//! records, a warning within a second of each drop, a line a minute of what retention
//! deleted, and a warning at most a minute while other processes take the CPU.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::os::now_ns;
use crate::retention::Retention;
use crate::stats::{StatsHub, StatsRecord};

/// Writes stats records as JSON lines.
pub struct StatsWriter {
    out: Box<dyn Write + Send>,
}

impl StatsWriter {
    pub fn new(out: Box<dyn Write + Send>) -> StatsWriter {
        StatsWriter { out }
    }

    pub fn write(&mut self, record: &StatsRecord, last: bool) {
        let mut line = serde_json::to_vec(record).expect("stats serialize");
        if last {
            // Mark the final record, so a consumer knows the numbers are settled.
            line.truncate(line.len() - 1);
            line.extend_from_slice(br#","final":true}"#);
        }
        line.push(b'\n');
        let _ = self.out.write_all(&line).and_then(|_| self.out.flush());
    }
}

/// A JSON-lines file whose lines are whole: what is written since the last flush goes out
/// on `flush`, and a write that fails part way (a full disk) is cut back off, so that the
/// lines after it, once there is room again, still parse.
pub struct LineFile {
    file: std::fs::File,
    pending: Vec<u8>,
}

impl LineFile {
    /// `file` opened for writing at its end.
    pub fn new(file: std::fs::File) -> LineFile {
        LineFile {
            file,
            pending: Vec::new(),
        }
    }
}

impl Write for LineFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let whole = self.file.metadata()?.len();
        let result = self.file.write_all(&self.pending);
        self.pending.clear();
        if result.is_err() {
            // A torn line is at the end, and goes; the next one starts where it did.
            let _ = self.file.set_len(whole);
            let _ = std::io::Seek::seek(&mut self.file, std::io::SeekFrom::Start(whole));
        }
        result
    }
}

/// Alerts without a metrics system: every drop is logged (WARN) within a second of
/// happening, one line per cause per second at most, with the count since the last line
/// and the run's total.
#[derive(Default)]
pub(crate) struct DropWarnings {
    last: Option<(Instant, [u64; 3])>,
}

impl DropWarnings {
    const INTERVAL: Duration = Duration::from_secs(1);
    const CAUSES: [&'static str; 3] = ["kernel", "staging_full", "write_error"];

    pub(crate) fn check(&mut self, stats: &StatsHub) {
        if self
            .last
            .is_none_or(|(at, _)| at.elapsed() >= Self::INTERVAL)
        {
            self.check_now(stats);
        }
    }

    pub(crate) fn check_now(&mut self, stats: &StatsHub) {
        let mut now = [0u64; 3];
        for s in &stats.streams {
            for c in s.interface_counts() {
                now[0] += c.dropped_kernel;
                now[1] += c.dropped_staging_full;
                now[2] += c.dropped_write_error;
            }
        }
        let before = self.last.map_or([0; 3], |(_, b)| b);
        for (i, cause) in Self::CAUSES.iter().enumerate() {
            if now[i] > before[i] {
                tracing::warn!(
                    "dropped {} packets ({cause}) in the last {:.1} s; {} in this run",
                    now[i] - before[i],
                    self.last.map_or(0.0, |(at, _)| at.elapsed().as_secs_f64()),
                    now[i]
                );
            }
        }
        self.last = Some((Instant::now(), now));
    }
}

/// Sustained CPU pressure (`/proc/pressure/cpu`): tasks waited for a CPU at least
/// `THRESHOLD` of the last 10 s. Logged at most once a minute, with the compressors' share
/// of a CPU, since they are the first to lose it.
#[derive(Default)]
pub(crate) struct PressureWarnings {
    checked: Option<Instant>,
    warned: Option<Instant>,
}

impl PressureWarnings {
    const THRESHOLD: f64 = 0.25;
    const CHECK: Duration = Duration::from_secs(1);
    const INTERVAL: Duration = Duration::from_secs(60);

    /// `compressor_share`: the compressors' least share of a CPU over the streams, as the
    /// controllers measured it; `nice`: their priority.
    pub(crate) fn check(&mut self, compressor_share: impl FnOnce() -> Option<f64>, nice: i32) {
        if self.checked.is_some_and(|at| at.elapsed() < Self::CHECK) {
            return;
        }
        self.checked = Some(Instant::now());
        let Some(p) = crate::os::cpu_pressure() else {
            return;
        };
        if p.some_avg10 < Self::THRESHOLD
            || self.warned.is_some_and(|at| at.elapsed() < Self::INTERVAL)
        {
            return;
        }
        self.warned = Some(Instant::now());
        let share = compressor_share().map_or("not measured yet".to_string(), |s| {
            format!("{:.0} %", 100.0 * s)
        });
        let advice = if nice > 0 {
            format!("; they run at nice {nice}: --compressor-nice 0 lets them compete (the IDS beside it then gets less)")
        } else {
            String::new()
        };
        tracing::warn!(
            "CPU pressure: tasks waited for a CPU {:.0} % of the last 10 s (60 s: {:.0} %). The compressors get {share}; chunks they are late with are written raw{advice}",
            100.0 * p.some_avg10,
            100.0 * p.some_avg60,
        );
    }
}

/// What retention deleted, in one line a minute (and at the end) rather than a line per
/// file.
pub(crate) struct RetentionLog {
    since: Instant,
    files: u64,
    bytes: u64,
}

impl RetentionLog {
    const INTERVAL: Duration = Duration::from_secs(60);

    pub(crate) fn new(stats: &StatsHub) -> RetentionLog {
        RetentionLog {
            since: Instant::now(),
            files: stats.files_deleted.load(Ordering::Relaxed),
            bytes: stats.bytes_deleted.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn check(&mut self, stats: &StatsHub, retention: &Retention, last: bool) {
        if !last && self.since.elapsed() < Self::INTERVAL {
            return;
        }
        let now = RetentionLog::new(stats);
        if now.files > self.files {
            let horizon = retention
                .horizon_ns()
                .map(|h| {
                    format!(
                        "; the oldest packet stored is {:.0} s old",
                        now_ns().saturating_sub(h) as f64 / 1e9
                    )
                })
                .unwrap_or_default();
            tracing::info!(
                "retention deleted {} files ({} bytes) in the last {:.0} s{horizon}",
                now.files - self.files,
                now.bytes - self.bytes,
                self.since.elapsed().as_secs_f64()
            );
        }
        *self = now;
    }
}
