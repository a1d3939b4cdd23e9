//! What the service's threads share: the recorder's control, the settings a reload may
//! change, the token, and the recent drop history the health check reads.

use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tapdeck_recorder::pipeline::Control;

use crate::config::ServeSettings;
use crate::health::DropWindow;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Finishing what an earlier run left, opening sockets.
    Starting = 0,
    Recording = 1,
    /// Draining after SIGTERM/SIGINT.
    Stopping = 2,
    /// `--no-capture`: serving existing stores, recording nothing.
    ReadOnly = 3,
}

pub struct Service {
    pub control: Arc<Control>,
    /// The stores queries read (`/api/v1/packets`, `/api/v1/files`).
    pub stores: RwLock<Vec<std::path::PathBuf>>,
    pub query_limits: crate::query::Limits,
    settings: RwLock<ServeSettings>,
    token: RwLock<Option<String>>,
    pub drops: Mutex<DropWindow>,
    /// The recording store's per-minute counts, kept by the monitor (`None` when serving
    /// stores read-only: their timelines are read from their files).
    pub timeline: Mutex<Option<crate::history::Timeline>>,
    phase: AtomicU8,
}

impl Service {
    pub fn new(control: Arc<Control>, settings: ServeSettings) -> Result<Service, String> {
        let token = read_token(settings.metrics_token_file.as_deref())?;
        Ok(Service {
            control,
            stores: RwLock::new(Vec::new()),
            query_limits: settings.query_limits()?,
            settings: RwLock::new(settings),
            token: RwLock::new(token),
            drops: Mutex::new(DropWindow::default()),
            timeline: Mutex::new(None),
            phase: AtomicU8::new(Phase::Starting as u8),
        })
    }

    pub fn settings(&self) -> ServeSettings {
        self.settings.read().unwrap().clone()
    }

    /// New settings from a reload (the token file is read again, so a token can be
    /// rotated without a restart). On error nothing changes.
    pub fn set_settings(&self, settings: ServeSettings) -> Result<(), String> {
        let token = read_token(settings.metrics_token_file.as_deref())?;
        *self.token.write().unwrap() = token;
        *self.settings.write().unwrap() = settings;
        Ok(())
    }

    pub fn token(&self) -> Option<String> {
        self.token.read().unwrap().clone()
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            0 => Phase::Starting,
            1 => Phase::Recording,
            3 => Phase::ReadOnly,
            _ => Phase::Stopping,
        }
    }

    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Relaxed);
    }
}

/// The token in a file (surrounding whitespace ignored); an empty file is an error, not
/// an open door.
pub fn read_token(path: Option<&Path>) -> Result<Option<String>, String> {
    let Some(path) = path else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read metrics-token-file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!(
            "metrics-token-file {} is empty: put a token in it (e.g. `openssl rand -hex 32 > {}`)",
            path.display(),
            path.display()
        ));
    }
    Ok(Some(token.to_string()))
}
