//! The store's timeline: what the recorder saw, stored and dropped (by cause) per minute,
//! for `/api/v1/stats` and the web page's chart.
//!
//! A running service folds its cumulative counters into minutes as it samples them and
//! appends each finished minute to `STORE/timeline.jsonl` (one line a minute, about 200
//! bytes, so a month is ~9 MB; older minutes are dropped when the file is compacted). A
//! restart adds on: a minute written twice (the end of one run and the start of the next)
//! is summed when read. A `kill -9` loses the minute in progress, nothing else.
//!
//! A store that has no timeline (one written by `tapdeck record`) gets one from its
//! `stats.jsonl` records: the same counters, cumulative per run.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const TIMELINE: &str = "timeline.jsonl";
pub const MINUTE_NS: u64 = 60_000_000_000;
/// Minutes kept, in memory and in the file: 31 days.
pub const KEEP_MINUTES: u64 = 31 * 24 * 60;
/// At most this many points in one answer (a week of minutes): a longer window needs a
/// larger step.
pub const MAX_POINTS: u64 = 10_080;

/// Counts in one minute (or one step of an answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub seen: u64,
    pub stored: u64,
    /// On-the-wire bytes of the packets the recorder took in.
    pub wire_bytes: u64,
    /// Bytes written to the data directories (after compression).
    pub bytes_written: u64,
    pub dropped_kernel: u64,
    pub dropped_staging_full: u64,
    pub dropped_write_error: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.seen += o.seen;
        self.stored += o.stored;
        self.wire_bytes += o.wire_bytes;
        self.bytes_written += o.bytes_written;
        self.dropped_kernel += o.dropped_kernel;
        self.dropped_staging_full += o.dropped_staging_full;
        self.dropped_write_error += o.dropped_write_error;
    }

    /// `self - before`, each counter on its own (a counter that went backwards gives 0).
    fn since(&self, before: &Counts) -> Counts {
        Counts {
            seen: self.seen.saturating_sub(before.seen),
            stored: self.stored.saturating_sub(before.stored),
            wire_bytes: self.wire_bytes.saturating_sub(before.wire_bytes),
            bytes_written: self.bytes_written.saturating_sub(before.bytes_written),
            dropped_kernel: self.dropped_kernel.saturating_sub(before.dropped_kernel),
            dropped_staging_full: self
                .dropped_staging_full
                .saturating_sub(before.dropped_staging_full),
            dropped_write_error: self
                .dropped_write_error
                .saturating_sub(before.dropped_write_error),
        }
    }

    fn is_zero(&self) -> bool {
        *self == Counts::default()
    }
}

/// The counters of a stats record, cumulative since its run began.
pub fn cumulative(r: &tapdeck_recorder::stats::StatsRecord) -> Counts {
    Counts {
        seen: r.totals.seen,
        stored: r.totals.stored,
        wire_bytes: r.totals.wire_bytes,
        bytes_written: r.bytes_written,
        dropped_kernel: r.totals.dropped.kernel,
        dropped_staging_full: r.totals.dropped.staging_full,
        dropped_write_error: r.totals.dropped.write_error,
    }
}

/// One line of `timeline.jsonl`.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    /// Minutes since the epoch.
    minute: u64,
    #[serde(flatten)]
    counts: Counts,
}

/// Minutes of counts, and the running service's state for adding to them.
#[derive(Debug, Default)]
pub struct Timeline {
    minutes: BTreeMap<u64, Counts>,
    /// The last cumulative sample of this run.
    last: Option<Counts>,
    /// This run's counts not yet in the file (they are in `minutes` too).
    pending: BTreeMap<u64, Counts>,
    /// Where finished minutes go (a running service's store).
    file: Option<PathBuf>,
    lines_in_file: u64,
}

impl Timeline {
    /// The timeline of `store` (its `timeline.jsonl`, else its `stats.jsonl`); an absent
    /// or unreadable file gives an empty one (a damaged line is skipped).
    pub fn read(store: &Path) -> Timeline {
        let mut t = Timeline::default();
        let path = store.join(TIMELINE);
        if path.exists() {
            t.lines_in_file = t.load_timeline(&path);
        } else {
            t.load_stats(&store.join("stats.jsonl"));
        }
        t
    }

    /// The timeline a running service keeps for `store`: what is on file, with new
    /// minutes appended to it. The file is compacted first when it holds minutes older
    /// than [`KEEP_MINUTES`].
    pub fn open(store: &Path, now_ns: u64) -> Timeline {
        let path = store.join(TIMELINE);
        let mut t = Timeline::default();
        t.lines_in_file = t.load_timeline(&path);
        t.forget_before(now_ns / MINUTE_NS);
        if t.lines_in_file > t.minutes.len() as u64 {
            if let Err(e) = t.rewrite(&path) {
                tracing::warn!("cannot compact {}: {e}", path.display());
            }
        }
        t.file = Some(path);
        t
    }

    fn load_timeline(&mut self, path: &Path) -> u64 {
        let Ok(file) = std::fs::File::open(path) else {
            return 0;
        };
        let mut lines = 0;
        for line in std::io::BufReader::new(file).lines() {
            let Ok(line) = line else { break };
            lines += 1;
            if let Ok(l) = serde_json::from_str::<Line>(&line) {
                self.minutes.entry(l.minute).or_default().add(&l.counts);
            }
        }
        lines
    }

    /// Minutes from stats records: each record's counters minus the previous record's of
    /// the same run, put in the minute of the record's time.
    fn load_stats(&mut self, path: &Path) {
        #[derive(Deserialize)]
        struct Totals {
            seen: u64,
            stored: u64,
            #[serde(default)]
            wire_bytes: u64,
            dropped: Drops,
        }
        #[derive(Deserialize)]
        struct Drops {
            kernel: u64,
            staging_full: u64,
            write_error: u64,
        }
        #[derive(Deserialize)]
        struct Record {
            ts_ns: u64,
            totals: Totals,
            #[serde(default)]
            bytes_written: u64,
        }
        let Ok(file) = std::fs::File::open(path) else {
            return;
        };
        for line in std::io::BufReader::new(file).lines() {
            let Ok(line) = line else { break };
            let Ok(r) = serde_json::from_str::<Record>(&line) else {
                continue;
            };
            let c = Counts {
                seen: r.totals.seen,
                stored: r.totals.stored,
                wire_bytes: r.totals.wire_bytes,
                bytes_written: r.bytes_written,
                dropped_kernel: r.totals.dropped.kernel,
                dropped_staging_full: r.totals.dropped.staging_full,
                dropped_write_error: r.totals.dropped.write_error,
            };
            // A record of a new run (appended to the same file): its counters began at zero.
            if self
                .last
                .is_some_and(|l| c.seen < l.seen || c.stored < l.stored)
            {
                self.last = None;
            }
            self.sample(r.ts_ns, c);
        }
        self.last = None;
    }

    /// Adds what changed since the previous sample (of this run) to the minute of `ts_ns`.
    /// The first sample of a run counts whole: its counters began at zero.
    pub fn sample(&mut self, ts_ns: u64, now: Counts) {
        let delta = match &self.last {
            Some(before) => now.since(before),
            None => now,
        };
        self.last = Some(now);
        if !delta.is_zero() {
            let minute = ts_ns / MINUTE_NS;
            self.minutes.entry(minute).or_default().add(&delta);
            if self.file.is_some() {
                self.pending.entry(minute).or_default().add(&delta);
            }
        }
    }

    /// Appends the minutes that ended before `now_ns` (all of them when `last` is set, at
    /// a stop) to the file, and drops minutes older than [`KEEP_MINUTES`].
    pub fn flush(&mut self, now_ns: u64, last: bool) {
        let Some(path) = self.file.clone() else {
            return;
        };
        let current = now_ns / MINUTE_NS;
        let up_to = if last { u64::MAX } else { current };
        let rest = self.pending.split_off(&up_to);
        let done = std::mem::replace(&mut self.pending, rest);
        let mut text = String::new();
        for (minute, counts) in done {
            text.push_str(&serde_json::to_string(&Line { minute, counts }).unwrap_or_default());
            text.push('\n');
            self.lines_in_file += 1;
        }
        if !text.is_empty() {
            let appended = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut f| f.write_all(text.as_bytes()));
            if let Err(e) = appended {
                tracing::warn!("cannot append to {}: {e}", path.display());
            }
        }
        self.forget_before(current);
        // Compact once the file holds twice what is kept.
        if self.lines_in_file > 2 * KEEP_MINUTES {
            if let Err(e) = self.rewrite(&path) {
                tracing::warn!("cannot compact {}: {e}", path.display());
            }
        }
    }

    fn forget_before(&mut self, current_minute: u64) {
        let oldest = current_minute.saturating_sub(KEEP_MINUTES);
        self.minutes = self.minutes.split_off(&oldest);
        self.pending = self.pending.split_off(&oldest);
    }

    /// Writes what the file holds (every minute less this run's pending counts) anew (through a temporary file and a
    /// rename, so a crash leaves the old file or the new one).
    fn rewrite(&mut self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("jsonl.tmp");
        let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        let mut lines = 0;
        for (&minute, all) in &self.minutes {
            let counts = match self.pending.get(&minute) {
                Some(p) => all.since(p),
                None => *all,
            };
            if counts.is_zero() {
                continue;
            }
            serde_json::to_writer(&mut out, &Line { minute, counts })?;
            out.write_all(b"\n")?;
            lines += 1;
        }
        out.into_inner()?.sync_all()?;
        std::fs::rename(&tmp, path)?;
        self.lines_in_file = lines;
        Ok(())
    }

    /// Adds `other`'s minutes to these (several stores served together).
    pub fn merge(&mut self, other: &Timeline) {
        for (m, c) in &other.minutes {
            self.minutes.entry(*m).or_default().add(c);
        }
    }

    /// The counts in `[start_ns, end_ns)` per `step_minutes`, steps aligned to the epoch:
    /// `(step start in ns, counts)` for each step that has any.
    pub fn range(&self, start_ns: u64, end_ns: u64, step_minutes: u64) -> Vec<(u64, Counts)> {
        let step = step_minutes.max(1);
        let (first, end) = (start_ns / MINUTE_NS, end_ns.div_ceil(MINUTE_NS));
        let mut out: Vec<(u64, Counts)> = Vec::new();
        for (&minute, counts) in self.minutes.range(first..end) {
            let at = minute / step * step * MINUTE_NS;
            match out.last_mut() {
                Some((t, c)) if *t == at => c.add(counts),
                _ => out.push((at, *counts)),
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.minutes.is_empty()
    }
}

/// `/api/v1/stats`'s parameters, each optional: the last 24 h in at most 1,440 steps.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Request {
    pub start: Option<String>,
    pub end: Option<String>,
    /// Seconds (`300`) or with a unit (`5m`, `1h`, `1d`); a whole number of minutes.
    pub step: Option<String>,
}

/// Why a `/api/v1/stats` request cannot be answered (a 400 with this message).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("{name}: {reason}")]
    Time { name: &'static str, reason: String },
    #[error("start must be before end: the range [start, end) is empty")]
    EmptyWindow,
    #[error("{steps} steps of {step} min is more than {MAX_POINTS}: ask for a larger step or a shorter window")]
    TooManyPoints { steps: u64, step: u64 },
    #[error("step {0:?} is not a duration: use seconds (300) or 5m, 1h, 1d (whole minutes)")]
    NotADuration(String),
    #[error("step {0:?}: the timeline is kept per minute, so a step is a whole number of minutes (60, 5m, 1h)")]
    NotWholeMinutes(String),
}

/// Steps chosen when none is asked for: the smallest that gives at most 1,440 points.
const STEPS_MINUTES: [u64; 12] = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440];

/// The answer to `req` from `timeline` at time `now_ns`: a JSON document, or why the
/// request is wrong (a 400).
pub fn answer(
    timeline: &Timeline,
    req: &Request,
    now_ns: u64,
    source: &str,
) -> Result<serde_json::Value, RequestError> {
    let time = |name: &'static str, v: &Option<String>| -> Result<Option<u64>, RequestError> {
        v.as_deref()
            .filter(|s| !s.is_empty())
            .map(tapdeck_store::extract::parse_time)
            .transpose()
            .map_err(|e| RequestError::Time {
                name,
                reason: e.to_string(),
            })
    };
    const DAY_NS: u64 = 24 * 60 * MINUTE_NS;
    let (start, end) = match (time("start", &req.start)?, time("end", &req.end)?) {
        (Some(s), Some(e)) => (s, e),
        (Some(s), None) => (s, now_ns.max(s.saturating_add(MINUTE_NS))),
        (None, Some(e)) => (e.saturating_sub(DAY_NS), e),
        (None, None) => {
            let end = now_ns.div_ceil(MINUTE_NS).saturating_mul(MINUTE_NS);
            (end.saturating_sub(DAY_NS), end)
        }
    };
    if start >= end {
        return Err(RequestError::EmptyWindow);
    }
    let minutes = (end - start).div_ceil(MINUTE_NS);
    let step = match req.step.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => parse_step(s)?,
        None => STEPS_MINUTES
            .into_iter()
            .find(|st| minutes.div_ceil(*st) <= 1440)
            .unwrap_or_else(|| minutes.div_ceil(1440)),
    };
    if minutes.div_ceil(step) > MAX_POINTS {
        return Err(RequestError::TooManyPoints {
            steps: minutes.div_ceil(step),
            step,
        });
    }
    let points: Vec<serde_json::Value> = timeline
        .range(start, end, step)
        .into_iter()
        .map(|(at, c)| {
            serde_json::json!({
                "t": at / 1_000_000_000, "ts_ns": at,
                "seen": c.seen, "stored": c.stored,
                "wire_bytes": c.wire_bytes, "bytes_written": c.bytes_written,
                "dropped": {
                    "kernel": c.dropped_kernel, "staging_full": c.dropped_staging_full,
                    "write_error": c.dropped_write_error,
                },
            })
        })
        .collect();
    Ok(serde_json::json!({
        "start_ns": start, "end_ns": end, "step_s": step * 60, "source": source,
        "points": points,
    }))
}

/// `300`, `300s`, `5m`, `1h`, `1d` as whole minutes.
fn parse_step(s: &str) -> Result<u64, RequestError> {
    let bad = || RequestError::NotADuration(s.to_string());
    let (digits, unit) = s.trim().split_at(
        s.trim()
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(s.trim().len()),
    );
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "" | "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86_400),
        _ => return Err(bad()),
    };
    if seconds == 0 || seconds % 60 != 0 {
        return Err(RequestError::NotWholeMinutes(s.to_string()));
    }
    Ok(seconds / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(seen: u64, stored: u64, staging: u64) -> Counts {
        Counts {
            seen,
            stored,
            wire_bytes: stored * 100,
            bytes_written: stored * 50,
            dropped_staging_full: staging,
            ..Counts::default()
        }
    }

    const M: u64 = MINUTE_NS;

    #[test]
    fn a_window_at_the_edges_of_time_is_answered_not_a_panic() {
        let t = Timeline::default();
        for (start, end) in [
            (Some("18446744073709551615"), None),
            (Some("18446744073709551614"), None),
            (None, Some("1")),
            (None, None),
        ] {
            let req = Request {
                start: start.map(String::from),
                end: end.map(String::from),
                step: None,
            };
            for now in [0, 1, u64::MAX] {
                let _ = answer(&t, &req, now, "files");
            }
        }
    }

    #[test]
    fn samples_become_per_minute_differences_and_a_new_run_counts_from_zero() {
        let mut t = Timeline::default();
        t.sample(10 * M + 1, counts(100, 100, 0));
        t.sample(10 * M + 30_000_000_000, counts(150, 140, 10));
        t.sample(11 * M + 5, counts(400, 380, 20));
        // A restart: the counters begin again.
        t.last = None;
        t.sample(11 * M + 9, counts(7, 7, 0));
        let r = t.range(10 * M, 12 * M, 1);
        assert_eq!(
            r,
            vec![
                (10 * M, counts(150, 140, 10)),
                (11 * M, counts(257, 247, 10))
            ]
        );
        // Two minutes per step, aligned to the epoch.
        let r = t.range(10 * M, 12 * M, 2);
        assert_eq!(r, vec![(10 * M, counts(407, 387, 20))]);
        // The end is exclusive, the start's minute included.
        assert_eq!(t.range(10 * M + 7, 11 * M, 1).len(), 1);
    }

    #[test]
    fn finished_minutes_are_appended_and_a_restart_in_the_same_minute_adds_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Timeline::open(dir.path(), 20 * M);
        t.sample(20 * M + 1, counts(10, 10, 0));
        t.sample(21 * M + 1, counts(30, 25, 5));
        t.flush(21 * M + 2, false);
        let text = std::fs::read_to_string(dir.path().join(TIMELINE)).unwrap();
        assert_eq!(text.lines().count(), 1, "only minute 20 has ended: {text}");
        t.flush(21 * M + 3, true);
        // The next run, same minute.
        let mut t = Timeline::open(dir.path(), 21 * M + 10);
        t.sample(21 * M + 11, counts(4, 4, 0));
        t.flush(22 * M, true);
        let back = Timeline::read(dir.path());
        assert_eq!(
            back.range(0, 30 * M, 1),
            vec![(20 * M, counts(10, 10, 0)), (21 * M, counts(24, 19, 5))]
        );
    }

    #[test]
    fn old_minutes_are_compacted_away_and_damaged_lines_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TIMELINE);
        let now = (KEEP_MINUTES + 100) * M;
        std::fs::write(
            &path,
            "{\"minute\":5,\"seen\":1,\"stored\":1,\"wire_bytes\":1,\"bytes_written\":1,\"dropped_kernel\":0,\"dropped_staging_full\":0,\"dropped_write_error\":0}\n\
             not json\n\
             {\"minute\":150,\"seen\":2,\"stored\":2,\"wire_bytes\":1,\"bytes_written\":1,\"dropped_kernel\":0,\"dropped_staging_full\":0,\"dropped_write_error\":0}\n",
        )
        .unwrap();
        let t = Timeline::open(dir.path(), now);
        assert_eq!(t.range(0, now, 1).len(), 1, "minute 5 is older than kept");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1, "the file was compacted: {text}");
        assert!(text.contains("\"minute\":150"));
    }

    #[test]
    fn answers_default_to_the_last_day_and_refuse_bad_steps_and_windows() {
        let mut t = Timeline::default();
        let now = 100_000 * M + 7;
        t.sample(now - 5 * M, counts(10, 10, 0));
        t.sample(now - 2 * M, counts(25, 20, 5));
        let doc = answer(&t, &Request::default(), now, "files").unwrap();
        assert_eq!(doc["step_s"], 60);
        assert_eq!(doc["end_ns"], 100_001 * M);
        assert_eq!(doc["start_ns"], 100_001 * M - 1440 * M);
        let points = doc["points"].as_array().unwrap();
        assert_eq!(points.len(), 2);
        assert_eq!(points[1]["seen"], 15);
        assert_eq!(points[1]["dropped"]["staging_full"], 5);
        assert_eq!(points[1]["t"], (now - 2 * M) / M * 60);
        // A week: the step grows to keep 1,440 points at most.
        let week = Request {
            start: Some(format!("{}", (now - 7 * 1440 * M) / 1_000_000_000)),
            ..Request::default()
        };
        assert_eq!(answer(&t, &week, now, "files").unwrap()["step_s"], 600);
        let step = |s: &str| Request {
            step: Some(s.into()),
            ..Request::default()
        };
        assert_eq!(answer(&t, &step("1h"), now, "x").unwrap()["step_s"], 3600);
        assert_eq!(answer(&t, &step("300"), now, "x").unwrap()["step_s"], 300);
        for bad in ["90", "0", "5x", "-1", "1.5m"] {
            let e = answer(&t, &step(bad), now, "x").unwrap_err().to_string();
            assert!(e.contains("step"), "{bad}: {e}");
        }
        let year = Request {
            start: Some("0".into()),
            step: Some("1m".into()),
            ..Request::default()
        };
        assert!(answer(&t, &year, now, "x")
            .unwrap_err()
            .to_string()
            .contains("larger step"));
        let empty = Request {
            start: Some("2000".into()),
            end: Some("1000".into()),
            ..Request::default()
        };
        assert!(answer(&t, &empty, now, "x")
            .unwrap_err()
            .to_string()
            .contains("before end"));
        let garbage = Request {
            end: Some("yesterday".into()),
            ..Request::default()
        };
        assert!(answer(&t, &garbage, now, "x")
            .unwrap_err()
            .to_string()
            .starts_with("end: "));
    }

    #[test]
    fn a_record_store_gets_its_timeline_from_stats_records() {
        let dir = tempfile::tempdir().unwrap();
        let rec = |ts: u64, seen: u64, stored: u64, staging: u64| {
            format!(
                "{{\"ts_ns\":{ts},\"bytes_written\":{},\"totals\":{{\"seen\":{seen},\"stored\":{stored},\"wire_bytes\":{},\"dropped\":{{\"kernel\":0,\"staging_full\":{staging},\"write_error\":0}}}}}}\n",
                stored * 50,
                stored * 100
            )
        };
        let text = [
            rec(3 * M + 1, 10, 10, 0),
            rec(4 * M + 1, 50, 40, 10),
            // A second run appended to the same file.
            rec(9 * M, 5, 5, 0),
        ]
        .concat();
        std::fs::write(dir.path().join("stats.jsonl"), text).unwrap();
        let t = Timeline::read(dir.path());
        assert_eq!(
            t.range(0, 10 * M, 1),
            vec![
                (3 * M, counts(10, 10, 0)),
                (4 * M, counts(40, 30, 10)),
                (9 * M, counts(5, 5, 0))
            ]
        );
    }
}
