//! What the service's threads share: the recorder's control, the settings a reload may
//! change, the tokens and TLS settings, and the recent drop history the health check reads.
//!
//! The modules that answer requests (health, metrics, web, http) read this state; it reads
//! none of them, so dependencies point one way.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tapdeck_recorder::live::LiveView;
use tapdeck_recorder::pipeline::Control;

use crate::auth::Tokens;
use crate::backoff::Backoff;
use crate::config::ServeSettings;
use crate::error::Error;
use crate::listen::Hosts;
use crate::session::Sessions;
use crate::tls::Tls;

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
    /// The running recorder's view, while it runs (see [`Service::watch`]).
    live: RwLock<Option<Arc<LiveView>>>,
    /// The stores queries read (`/api/v1/packets`, `/api/v1/files`).
    pub stores: RwLock<Vec<std::path::PathBuf>>,
    pub query_limits: crate::query::Limits,
    settings: RwLock<ServeSettings>,
    tokens: RwLock<Arc<Tokens>>,
    /// The `Host` values answered (see [`Hosts`]).
    hosts: RwLock<Arc<Hosts>>,
    /// Browsers' logins; they end when their token leaves the token files.
    pub sessions: Sessions,
    /// Wrong tokens per address.
    pub backoff: Backoff,
    /// `None`: plain HTTP. Each connection takes the one in force when it is accepted.
    tls: RwLock<Option<Arc<Tls>>>,
    pub drops: Mutex<DropWindow>,
    /// The recording store's per-minute counts, kept by the monitor (`None` when serving
    /// stores read-only: their timelines are read from their files).
    pub timeline: Mutex<Option<crate::history::Timeline>>,
    phase: AtomicU8,
}

impl Service {
    pub fn new(control: Arc<Control>, settings: ServeSettings) -> Result<Service, Error> {
        let Access { tokens, tls, hosts } = load_access(&settings)?;
        Ok(Service {
            control,
            live: RwLock::new(None),
            stores: RwLock::new(Vec::new()),
            query_limits: settings.query_limits()?,
            settings: RwLock::new(settings),
            tokens: RwLock::new(Arc::new(tokens)),
            hosts: RwLock::new(Arc::new(hosts)),
            sessions: Sessions::default(),
            backoff: Backoff::default(),
            tls: RwLock::new(tls.map(Arc::new)),
            drops: Mutex::new(DropWindow::default()),
            timeline: Mutex::new(None),
            phase: AtomicU8::new(Phase::Starting as u8),
        })
    }

    /// Shows the service a running recorder (`Running::live`), or, with `None`, that it has
    /// drained.
    pub fn watch(&self, live: Option<Arc<LiveView>>) {
        *self.live.write().unwrap() = live;
    }

    /// The running recorder's view, while one runs.
    pub fn live(&self) -> Option<Arc<LiveView>> {
        self.live.read().unwrap().clone()
    }

    pub fn settings(&self) -> ServeSettings {
        self.settings.read().unwrap().clone()
    }

    /// New settings from a reload. The token and TLS files are read again, so that a token
    /// or a certificate can be rotated by rewriting its file: returns the keys whose files
    /// now say something else. Sessions whose token is gone end. On error nothing changes.
    pub fn set_settings(&self, settings: ServeSettings) -> Result<Vec<&'static str>, Error> {
        let Access { tokens, tls, hosts } = load_access(&settings)?;
        let mut changed = self.tokens().changed_keys(&tokens);
        let mut current_tls = self.tls.write().unwrap();
        let tls_changed = match (&*current_tls, &tls) {
            (None, None) => false,
            (Some(a), Some(b)) => !a.same_files(b),
            _ => true,
        };
        if tls_changed {
            changed.push("tls-cert");
        }
        *current_tls = tls.map(Arc::new);
        let ended = self
            .sessions
            .keep_only(|name, token| tokens.holds(name, token));
        if ended > 0 {
            tracing::info!("{ended} web session(s) ended: their token is no longer in force");
        }
        *self.tokens.write().unwrap() = Arc::new(tokens);
        *self.hosts.write().unwrap() = Arc::new(hosts);
        *self.settings.write().unwrap() = settings;
        Ok(changed)
    }

    /// Reads the token and TLS files of the settings in force again (a SIGHUP without a
    /// config file to re-read); see [`Service::set_settings`].
    pub fn reread_access(&self) -> Result<Vec<&'static str>, Error> {
        self.set_settings(self.settings())
    }

    /// The tokens in force (none: no token is required).
    pub fn tokens(&self) -> Arc<Tokens> {
        Arc::clone(&self.tokens.read().unwrap())
    }

    /// The `Host` values answered.
    pub fn hosts(&self) -> Arc<Hosts> {
        Arc::clone(&self.hosts.read().unwrap())
    }

    /// How long a login made now lasts (checked when the settings were taken).
    pub fn session_lifetime(&self) -> Duration {
        self.settings
            .read()
            .unwrap()
            .session_lifetime()
            .unwrap_or(crate::session::DEFAULT_LIFETIME)
    }

    /// The TLS settings in force, for the next handshake.
    pub fn tls(&self) -> Option<Arc<Tls>> {
        self.tls.read().unwrap().clone()
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

/// Who may ask, over what, by which names: what a reload reads again.
pub struct Access {
    pub tokens: Tokens,
    pub tls: Option<Tls>,
    pub hosts: Hosts,
}

/// The tokens, TLS settings and answered hosts of `settings`, checked together: beyond
/// loopback, some token is required. A token file others can read is logged (a warning,
/// not an error: the operator may have reasons).
pub fn load_access(settings: &ServeSettings) -> Result<Access, Error> {
    let tokens = Tokens::load(settings)?;
    for warning in Tokens::warnings(settings) {
        tracing::warn!("{warning}");
    }
    let listen = crate::listen::check_listen(&settings.listen, !tokens.is_empty())?;
    settings.session_lifetime()?;
    let tls = Tls::load(settings)?;
    let hosts = Hosts::new(listen, &settings.allowed_hosts, !tokens.is_empty());
    Ok(Access { tokens, tls, hosts })
}

/// Total drops sampled over the last minute.
#[derive(Default)]
pub struct DropWindow {
    samples: VecDeque<(Instant, u64)>,
}

impl DropWindow {
    pub const SPAN: Duration = Duration::from_secs(60);

    pub fn add(&mut self, at: Instant, dropped_total: u64) {
        self.samples.push_back((at, dropped_total));
        // Keep one sample at or before the window's start, to measure from it.
        while self.samples.len() > 2 && at.duration_since(self.samples[1].0) >= Self::SPAN {
            self.samples.pop_front();
        }
    }

    /// Drops between the oldest sample in the window and the newest.
    pub fn last_minute(&self) -> u64 {
        match (self.samples.front(), self.samples.back()) {
            (Some(a), Some(b)) => b.1.saturating_sub(a.1),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_counts_drops_of_the_last_minute_only() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut w = DropWindow::default();
        assert_eq!(w.last_minute(), 0);
        w.add(at(0), 100);
        w.add(at(30), 150);
        assert_eq!(w.last_minute(), 50);
        // Measured from the newest sample at or before the window's start (10 s): the drops
        // between 0 and 30 s may have happened inside it, so they count.
        w.add(at(70), 150);
        assert_eq!(w.last_minute(), 50);
        // From 30 s on: only what came after.
        w.add(at(91), 152);
        assert_eq!(w.last_minute(), 2);
        for s in 72..200 {
            w.add(at(s), 152);
        }
        assert!(w.samples.len() <= 62, "bounded: {}", w.samples.len());
        assert_eq!(w.last_minute(), 0);
    }
}
