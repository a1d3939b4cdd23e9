//! systemd's notification protocol (`Type=notify`): READY once recording, WATCHDOG while
//! the capture loops make progress, STATUS lines, RELOADING and STOPPING. Without
//! `NOTIFY_SOCKET` (not started by systemd) every call does nothing.

use std::time::Duration;

use sd_notify::NotifyState;

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!("sd_notify failed: {e}");
    }
}

pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// After a reload: READY again, as systemd expects.
pub fn reloaded(status: &str) {
    ready(status);
}

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("draining")]);
}

/// How often to ping the watchdog: half its timeout, if systemd set one.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|d| d / 2)
}
