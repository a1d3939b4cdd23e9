//! What one scrape reads, gathered at once so that every family shows the same moment,
//! and so that the families are functions of plain data (a test can pin their text).

use std::sync::atomic::Ordering;

use tapdeck_recorder::live::{DirState, LiveView};
use tapdeck_recorder::stats::{CaptureCounts, StatsRecord};
use tapdeck_store::meta::InterfaceCounts;

use super::family::Labels;
use crate::health;
use crate::process::Process;
use crate::state::Service;

#[derive(Debug)]
pub(super) struct Reading {
    pub healthy: bool,
    /// The `min-horizon` setting, seconds.
    pub min_horizon_s: u64,
    pub process: Process,
    /// `None` while the recorder is not running.
    pub recorder: Option<RecorderReading>,
}

/// The running recorder's counters and state, as one scrape reads them.
#[derive(Debug)]
pub(super) struct RecorderReading {
    pub record: StatsRecord,
    /// Per stream, its interfaces' names as the capture loop learnt them.
    pub interface_names: Vec<Vec<String>>,
    /// Per stream, its capture loop's counts per interface.
    pub capture: Vec<Vec<CaptureCounts>>,
    pub staging_fill: Vec<f64>,
    pub compressor_backlog: usize,
    pub dirs: Vec<DirState>,
    pub retention_enabled: bool,
    pub horizon_ns: u64,
    /// 0: no file completed yet.
    pub last_file_completed_ns: u64,
    pub progress_ns: Vec<u64>,
}

impl Reading {
    pub(super) fn gather(service: &Service) -> Reading {
        Reading {
            healthy: health::check(service).healthy,
            min_horizon_s: service.settings().min_horizon,
            process: crate::process::read(),
            recorder: service.live().map(|live| RecorderReading::gather(&live)),
        }
    }
}

impl RecorderReading {
    fn gather(live: &LiveView) -> RecorderReading {
        let streams = &live.stats.streams;
        RecorderReading {
            record: live.snapshot(),
            interface_names: streams
                .iter()
                .map(|s| s.interface_names.lock().unwrap().clone())
                .collect(),
            capture: streams
                .iter()
                .map(|s| s.capture.lock().unwrap().clone())
                .collect(),
            staging_fill: live.staging_fill(),
            compressor_backlog: live.compressor_backlog(),
            dirs: live.dirs(),
            retention_enabled: live.retention.policy().is_set(),
            horizon_ns: live.horizon_ns(),
            last_file_completed_ns: live.stats.last_file_completed_ns.load(Ordering::Relaxed),
            progress_ns: live.progress_ns(),
        }
    }

    /// Every interface's counts with its `stream` and `interface` labels (an interface
    /// whose name the capture loop has not learnt yet goes by its index).
    pub(super) fn interfaces(&self) -> impl Iterator<Item = (Labels, &InterfaceCounts)> {
        self.record.streams.iter().flat_map(move |s| {
            let names = &self.interface_names[s.stream as usize];
            s.interfaces.iter().enumerate().map(move |(i, c)| {
                let labels = vec![
                    ("stream", s.stream.to_string()),
                    (
                        "interface",
                        names.get(i).cloned().unwrap_or_else(|| i.to_string()),
                    ),
                ];
                (labels, c)
            })
        })
    }
}

/// A `stream` label.
pub(super) fn stream(stream: usize) -> Labels {
    vec![("stream", stream.to_string())]
}
