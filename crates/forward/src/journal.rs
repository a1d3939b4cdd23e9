//! The collector's ledger kept in step with its store while it records: a snapshot is
//! saved as `STORE/collector.json` only once the packets it counts are durable (see
//! [`DurableSaves`]), and what changed goes to the history `STORE/collector.jsonl` beside
//! the recorder's `stats.jsonl`, one line per stats record.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::ForwardError;
use crate::ledger::{DurableSaves, Ledger, LedgerFile, LEDGER_FILE};

/// The history of a collector's ledger, beside its store's `stats.jsonl`.
pub const HISTORY_FILE: &str = "collector.jsonl";

/// Saves and logs a shared [`Ledger`] as the recorder reports.
pub struct LedgerJournal {
    ledger: Arc<Mutex<Ledger>>,
    path: PathBuf,
    history: std::fs::File,
    saves: DurableSaves,
    /// The snapshot the last history line was written from.
    last: LedgerFile,
    /// Packets a resumed ledger counted in earlier runs: the recorder counts this run's.
    earlier: u64,
}

impl LedgerJournal {
    /// The journal of `ledger` in `store` (the history is appended to).
    pub fn open(ledger: Arc<Mutex<Ledger>>, store: &Path) -> Result<LedgerJournal, ForwardError> {
        let history_path = store.join(HISTORY_FILE);
        let history = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&history_path)
            .map_err(|cause| ForwardError::History {
                path: history_path,
                cause,
            })?;
        let earlier = ledger.lock().unwrap().snapshot().packets();
        Ok(LedgerJournal {
            ledger,
            path: store.join(LEDGER_FILE),
            history,
            saves: DurableSaves::new(),
            last: LedgerFile::default(),
            earlier,
        })
    }

    /// One stats record of the recorder, at `ts_ns`, when `settled` packets of this run are
    /// durable or counted as dropped; `done` for the final one.
    pub fn record(&mut self, ts_ns: u64, settled: u64, done: bool) {
        // Each stats record snapshots the ledger with the packets delivered so far; a
        // snapshot is saved only once the recorder has that many synced to the disk (or
        // counted as dropped): see `DurableSaves`. With several sockets the streams drain
        // apart and this holds for the totals only.
        let snap = self.ledger.lock().unwrap().snapshot();
        self.saves
            .taken(snap.packets() - self.earlier, snap.clone());
        if let Some(saved) = self.saves.ready(settled) {
            if let Err(e) = saved.save(&self.path) {
                tracing::warn!("{e}");
            }
        }
        // Only what changed since the last line (the final line: everything), so an idle
        // collector's history does not grow by its whole ledger every interval.
        let last = if done { None } else { Some(&self.last) };
        if let Some(mut line) = history_line(&snap, last, ts_ns) {
            if done {
                line["final"] = serde_json::json!(true);
            }
            // One write a record: a reader tailing the history never sees half a line.
            let _ = self.history.write_all(format!("{line}\n").as_bytes());
        }
        self.last = snap;
    }

    /// At the end: the whole ledger saved, and its last snapshot.
    pub fn finish(self) -> Result<LedgerFile, ForwardError> {
        let ledger = self.ledger.lock().unwrap();
        ledger.save(&self.path)?;
        Ok(ledger.snapshot())
    }
}

/// A `collector.jsonl` line: the streams and per-address counts that differ from `last`
/// (everything when there is no `last`); None when nothing changed.
fn history_line(
    snap: &LedgerFile,
    last: Option<&LedgerFile>,
    ts_ns: u64,
) -> Option<serde_json::Value> {
    let streams: Vec<_> = snap
        .streams
        .iter()
        .filter(|s| last.is_none_or(|l| !l.streams.contains(s)))
        .collect();
    // Per-address maps: the addresses whose counts changed.
    let changed = |now: serde_json::Value, before: Option<serde_json::Value>| {
        let now = now.as_object().cloned().unwrap_or_default();
        let before = before
            .and_then(|b| b.as_object().cloned())
            .unwrap_or_default();
        now.into_iter()
            .filter(|(k, v)| before.get(k) != Some(v))
            .collect::<serde_json::Map<_, _>>()
    };
    let json = |v: &dyn Fn(&LedgerFile) -> serde_json::Value, l: Option<&LedgerFile>| l.map(v);
    let na = |l: &LedgerFile| serde_json::json!(l.not_allowed);
    let un = |l: &LedgerFile| serde_json::json!(l.unreadable);
    let re = |l: &LedgerFile| serde_json::json!(l.refused);
    let not_allowed = changed(na(snap), json(&na, last));
    let unreadable = changed(un(snap), json(&un, last));
    let refused = changed(re(snap), json(&re, last));
    if last.is_some()
        && streams.is_empty()
        && not_allowed.is_empty()
        && unreadable.is_empty()
        && refused.is_empty()
    {
        return None;
    }
    Some(serde_json::json!({
        "version": snap.version,
        "ts_ns": ts_ns,
        "streams": streams,
        "not_allowed": not_allowed,
        "unreadable": unreadable,
        "refused": refused,
    }))
}
