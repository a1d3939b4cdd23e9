//! SIGHUP: read the config file again and apply what can change without losing a packet
//! (retention limits, rotation, log level, health thresholds, tokens, TLS); log which
//! changed keys need a restart. A file that does not load, or whose values do not check,
//! changes nothing.

use std::path::Path;

use crate::config::{ConfigError, ServeConfig, LIVE_KEYS};
use crate::state::Service;

/// What a reload did.
#[derive(Debug, Default, PartialEq)]
pub struct Outcome {
    /// Keys now in effect.
    pub applied: Vec<String>,
    /// Keys that changed in the file but keep their old value until a restart.
    pub need_restart: Vec<String>,
}

/// Why the log level could not be changed: the logger is the binary's, and so is its error.
pub type LogLevelError = Box<dyn std::error::Error + Send + Sync>;

/// Changes the log level of the running process (a `RUST_LOG`-style filter).
pub type SetLogLevel<'a> = &'a dyn Fn(&str) -> Result<(), LogLevelError>;

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A record option the recorder refused, named as the config file or flag set it
    /// ([`ServeConfig::option_error`]).
    #[error("{0}")]
    Option(String),
    /// The token or TLS files, the address or the query limits.
    #[error(transparent)]
    Settings(#[from] crate::error::Error),
    #[error(transparent)]
    LogLevel(LogLevelError),
}

/// Loads `path`, applies the command line's `overrides` over it as at start, and puts
/// the live-changeable differences from `current` into effect. Returns the config now
/// in effect (changed live keys only) and what happened.
pub fn reload(
    path: &Path,
    overrides: &std::collections::BTreeMap<String, serde_json::Value>,
    current: &ServeConfig,
    service: &Service,
    set_log_level: SetLogLevel<'_>,
) -> Result<(ServeConfig, Outcome), ReloadError> {
    let mut new = ServeConfig::load(path)?;
    new.override_with(overrides)?;
    apply(current, &new, service, set_log_level)
}

/// Applies `new` over `current`; see [`reload`].
pub fn apply(
    current: &ServeConfig,
    new: &ServeConfig,
    service: &Service,
    set_log_level: SetLogLevel<'_>,
) -> Result<(ServeConfig, Outcome), ReloadError> {
    // Every value is checked as at start, even those that will wait for a restart.
    let built = new
        .record
        .builder()
        .map_err(|e| ReloadError::Option(new.option_error(&e)))?
        .build();
    let changed = current.changed_keys(new);
    let (mut live, restart): (Vec<String>, Vec<String>) = changed
        .into_iter()
        .partition(|k| LIVE_KEYS.contains(&k.as_str()));
    let mut effective = current.clone();
    let mut outcome = Outcome {
        need_restart: restart,
        ..Outcome::default()
    };
    // The serve settings first, their token and TLS files read again (a token or a
    // certificate is rotated by rewriting its file, whose path stays, so new content is a
    // change too); files that do not load change nothing. Then the log level.
    let mut settings = current.serve.clone();
    settings.health_stall = new.serve.health_stall;
    settings.health_max_drops = new.serve.health_max_drops;
    settings.min_horizon = new.serve.min_horizon;
    settings.metrics_token_file = new.serve.metrics_token_file.clone();
    settings.token_file = new.serve.token_file.clone();
    settings.tls_cert = new.serve.tls_cert.clone();
    settings.tls_key = new.serve.tls_key.clone();
    settings.tls_client_ca = new.serve.tls_client_ca.clone();
    settings.allowed_hosts = new.serve.allowed_hosts.clone();
    settings.session_lifetime = new.serve.session_lifetime.clone();
    settings.log_level = new.serve.log_level.clone();
    let rewritten = service.set_settings(settings.clone())?;
    for key in rewritten {
        if !live.iter().any(|k| k == key) {
            live.push(key.to_string());
        }
    }
    if settings.log_level != current.serve.log_level {
        set_log_level(&settings.log_level).map_err(ReloadError::LogLevel)?;
    }
    effective.serve = settings;
    if live.is_empty() {
        return Ok((effective, outcome));
    }
    let record_live = |k: &str| live.iter().any(|l| l == k);
    if ["max-bytes", "min-free", "min-keep"]
        .iter()
        .any(|k| record_live(k))
    {
        if let Some(view) = service.live() {
            view.retention.set_policy(built.retention, &view.stats);
        }
        effective.record.max_bytes = new.record.max_bytes.clone();
        effective.record.min_free = new.record.min_free.clone();
        effective.record.min_keep = new.record.min_keep;
    }
    if ["rotate-size", "rotate-interval"]
        .iter()
        .any(|k| record_live(k))
    {
        service.control.set_rotation(built.rotation);
        effective.record.write.rotate_size = new.record.write.rotate_size.clone();
        effective.record.write.rotate_interval = new.record.write.rotate_interval;
    }
    outcome.applied = live;
    Ok((effective, outcome))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tapdeck_recorder::pipeline::Control;

    use super::*;

    fn config(text: &str) -> ServeConfig {
        ServeConfig::parse(Path::new("t.toml"), text).unwrap()
    }

    #[test]
    fn live_keys_apply_and_the_rest_wait_for_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("s");
        let base = format!(
            "interface = [\"lo\"]\nstore = {:?}\nmax-bytes = \"1GiB\"\n",
            store.display().to_string()
        );
        let current = config(&base);
        let new = config(&format!(
            "{base}health-max-drops = 7\nthreads = 2\nrotate-size = \"1MiB\"\nlog-level = \"debug\"\n"
        ));
        let control = Arc::new(Control::default());
        let service = Service::new(Arc::clone(&control), current.serve.clone()).unwrap();
        let levels = std::sync::Mutex::new(Vec::new());
        let set_level = |l: &str| {
            levels.lock().unwrap().push(l.to_string());
            Ok(())
        };
        let (effective, outcome) = apply(&current, &new, &service, &set_level).unwrap();
        assert_eq!(
            outcome.applied,
            vec!["rotate-size", "health-max-drops", "log-level"]
        );
        assert_eq!(outcome.need_restart, vec!["threads"]);
        assert_eq!(service.settings().health_max_drops, 7);
        assert_eq!(*levels.lock().unwrap(), vec!["debug"]);
        assert_eq!(effective.record.threads, 1, "threads waits for a restart");
        assert_eq!(effective.record.write.rotate_size.as_deref(), Some("1MiB"));
        let rotation = control.rotation.lock().unwrap().unwrap();
        assert_eq!(rotation.max_bytes, Some(1 << 20));
        // Applying the effective config again changes nothing live.
        let (_, again) = apply(&effective, &new, &service, &set_level).unwrap();
        assert!(again.applied.is_empty());
        assert_eq!(again.need_restart, vec!["threads"]);
    }

    #[test]
    fn a_rewritten_token_file_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "old-0123456789abcdef\n").unwrap();
        let text = format!(
            "interface = [\"lo\"]\nstore = \"/tmp/x\"\nmetrics-token-file = {:?}\n",
            token.display().to_string()
        );
        let current = config(&text);
        let control = Arc::new(Control::default());
        let service = Service::new(control, current.serve.clone()).unwrap();
        let (_, same) = apply(&current, &current, &service, &|_| Ok(())).unwrap();
        assert!(same.applied.is_empty(), "an unchanged token is no change");
        std::fs::write(&token, "new-0123456789abcdef\n").unwrap();
        let (_, outcome) = apply(&current, &config(&text), &service, &|_| Ok(())).unwrap();
        assert_eq!(outcome.applied, vec!["metrics-token-file"]);
        assert_eq!(
            service.tokens().find(b"new-0123456789abcdef"),
            Some("metrics")
        );
        assert_eq!(service.tokens().find(b"old-0123456789abcdef"), None);
        // An emptied file is refused, and the token in force stays.
        std::fs::write(&token, "").unwrap();
        assert!(apply(&current, &config(&text), &service, &|_| Ok(())).is_err());
        assert_eq!(
            service.tokens().find(b"new-0123456789abcdef"),
            Some("metrics")
        );
    }

    #[test]
    fn a_bad_value_changes_nothing() {
        let current = config("interface = [\"lo\"]\nstore = \"/tmp/x\"\n");
        let new = config(
            "interface = [\"lo\"]\nstore = \"/tmp/x\"\nhealth-max-drops = 3\nmax-bytes = \"lots\"\n",
        );
        let control = Arc::new(Control::default());
        let service = Service::new(control, current.serve.clone()).unwrap();
        let e = apply(&current, &new, &service, &|_| Ok(())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.toml, line 4: key `max-bytes`: lots: not a size (e.g. 4MiB, 10G, 123456)"
        );
        assert_eq!(service.settings().health_max_drops, 0, "untouched");
    }
}
