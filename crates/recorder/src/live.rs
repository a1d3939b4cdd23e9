//! What a running recorder shows an observer (the service's `/metrics` and `/healthz`):
//! the counters of this moment, the staging pools, the data directories and the store's
//! retention horizon. Read on demand, never on the packet path.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::os::now_ns;
use crate::pipeline::StreamStaging;
use crate::retention::{filesystem_bytes, free_bytes, Retention};
use crate::stats::{StatsHub, StatsRecord};
use crate::writer::DataDirs;

pub struct LiveView {
    pub stats: Arc<StatsHub>,
    pub retention: Arc<Retention>,
    streams: Vec<StreamStaging>,
    dirs: Arc<DataDirs>,
    started: Instant,
    started_ns: u64,
}

/// One data directory as an operator sees it.
#[derive(Debug, Clone)]
pub struct DirState {
    pub path: PathBuf,
    pub free_bytes: Option<u64>,
    pub size_bytes: Option<u64>,
    /// False while the directory is in a failure episode (writes failed; retried).
    pub up: bool,
}

impl LiveView {
    pub(crate) fn new(
        stats: Arc<StatsHub>,
        retention: Arc<Retention>,
        streams: Vec<StreamStaging>,
        dirs: Arc<DataDirs>,
        started: Instant,
        started_ns: u64,
    ) -> LiveView {
        LiveView {
            stats,
            retention,
            streams,
            dirs,
            started,
            started_ns,
        }
    }

    /// The counters of this moment. Like every stats record it balances: seen = stored +
    /// dropped + in flight.
    pub fn snapshot(&self) -> StatsRecord {
        let fill = self.staging_fill().into_iter().fold(0.0, f64::max);
        let mut record = self
            .stats
            .peek(now_ns(), self.started.elapsed().as_secs_f64(), fill);
        record.controller = self.streams.iter().map(|s| s.controller.view()).collect();
        record
    }

    /// The recorder's periodic stats record: as [`LiveView::snapshot`], with the ladder's
    /// rates per second since the previous one (only the recorder's own reports take them).
    pub(crate) fn periodic_record(&self) -> StatsRecord {
        let fill = self.staging_fill().into_iter().fold(0.0, f64::max);
        let mut record = self
            .stats
            .snapshot(now_ns(), self.started.elapsed().as_secs_f64(), fill);
        record.controller = self.streams.iter().map(|s| s.controller.view()).collect();
        record
    }

    /// The compressors' least share of a CPU over the streams, as the controllers measured
    /// it; `None` until measured.
    pub fn compressor_share(&self) -> Option<f64> {
        self.streams
            .iter()
            .filter_map(|s| s.controller.view().compressor_cpu_share)
            .reduce(f64::min)
    }

    /// Each stream's staging pool fill, 0 to 1.
    pub fn staging_fill(&self) -> Vec<f64> {
        self.streams.iter().map(|s| s.pool.fill()).collect()
    }

    /// Chunks waiting for (or in) a compressor, all streams.
    pub fn compressor_backlog(&self) -> usize {
        self.streams
            .iter()
            .map(|s| s.pool.awaiting_compression())
            .sum()
    }

    pub fn dirs(&self) -> Vec<DirState> {
        self.dirs
            .paths
            .iter()
            .zip(self.dirs.failing())
            .map(|(path, failing)| DirState {
                path: path.clone(),
                free_bytes: free_bytes(path),
                size_bytes: filesystem_bytes(path),
                up: !failing,
            })
            .collect()
    }

    /// The first packet time of the oldest file still stored; before any file is complete,
    /// when this run started.
    pub fn horizon_ns(&self) -> u64 {
        self.retention.horizon_ns().unwrap_or(self.started_ns)
    }

    /// Per stream, when its capture loop last went round (ns since the epoch); before its
    /// first round, when the run started.
    pub fn progress_ns(&self) -> Vec<u64> {
        self.stats
            .streams
            .iter()
            .map(|s| match s.progress_ns.load(Ordering::Relaxed) {
                0 => self.started_ns,
                at => at,
            })
            .collect()
    }

    pub fn started_ns(&self) -> u64 {
        self.started_ns
    }
}
