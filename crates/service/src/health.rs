//! `/healthz`: is the recorder doing its job? Unhealthy when a capture loop has stopped
//! going round (a quiet link is healthy: the loop still goes round), when every data
//! directory is failing, or when more packets were dropped in the last minute than the
//! configured threshold.

use serde::Serialize;
use tapdeck_recorder::recorder::now_ns;

use crate::state::{Phase, Service};

#[derive(Debug, Clone, Serialize)]
pub struct Health {
    pub healthy: bool,
    pub phase: &'static str,
    /// Why it is unhealthy (empty when healthy).
    pub reasons: Vec<String>,
    pub dropped_last_minute: u64,
    /// Per stream, seconds since its capture loop last went round.
    pub capture_idle_s: Vec<f64>,
    pub data_dirs_up: usize,
    pub data_dirs: usize,
    /// A capture loop has stopped going round (the watchdog is then left to fire).
    pub capture_stalled: bool,
}

pub fn check(service: &Service) -> Health {
    let settings = service.settings();
    let phase = service.phase();
    let mut health = Health {
        healthy: true,
        phase: match phase {
            Phase::Starting => "starting",
            Phase::Recording => "recording",
            Phase::Stopping => "stopping",
            Phase::ReadOnly => "read-only",
        },
        reasons: Vec::new(),
        dropped_last_minute: service.drops.lock().unwrap().last_minute(),
        capture_idle_s: Vec::new(),
        data_dirs_up: 0,
        data_dirs: 0,
        capture_stalled: false,
    };
    if phase == Phase::ReadOnly {
        // Nothing to capture: healthy while it serves.
        return health;
    }
    let Some(live) = service.live() else {
        health.healthy = false;
        health.reasons.push(match phase {
            Phase::Stopping => "stopping: the recorder is draining".to_string(),
            _ => "starting: the recorder is not recording yet".to_string(),
        });
        return health;
    };
    if phase == Phase::Starting {
        // The recorder runs; the monitor has not said READY yet (it looks every 250 ms).
        health.phase = "recording";
    }
    let now = now_ns();
    for (stream, at) in live.progress_ns().into_iter().enumerate() {
        let idle = now.saturating_sub(at) as f64 / 1e9;
        health.capture_idle_s.push(idle);
        if idle > settings.health_stall {
            health.capture_stalled = true;
            health.reasons.push(format!(
                "capture stream {stream} has made no progress for {idle:.0} s (health-stall is {} s)",
                settings.health_stall
            ));
        }
    }
    let dirs = live.dirs();
    health.data_dirs = dirs.len();
    health.data_dirs_up = dirs.iter().filter(|d| d.up).count();
    if health.data_dirs_up == 0 {
        health.reasons.push(format!(
            "every data directory is failing ({}): packets are being dropped",
            dirs.iter()
                .map(|d| d.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if health.dropped_last_minute > settings.health_max_drops {
        health.reasons.push(format!(
            "{} packets dropped in the last minute (health-max-drops is {})",
            health.dropped_last_minute, settings.health_max_drops
        ));
    }
    if phase == Phase::Stopping {
        health
            .reasons
            .push("stopping: the recorder is draining".into());
    }
    health.healthy = health.reasons.is_empty();
    health
}
