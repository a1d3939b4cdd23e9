//! Log lines to standard error (journald under systemd), one per event: human-readable
//! text, or JSON objects with `--log-format json`; the level can change while running.

use std::io::IsTerminal;

use tapdeck_service::reload::LogLevelError;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, reload, EnvFilter};

/// Changes the log level (a `RUST_LOG`-style filter) of the running process.
pub type SetLevel = Box<dyn Fn(&str) -> Result<(), LogLevelError> + Send + Sync>;

/// Why the log level stays as it is.
#[derive(Debug, thiserror::Error)]
pub enum LevelError {
    #[error("log-level {level:?} is not a level or filter: {source}")]
    NotAFilter {
        level: String,
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("cannot change the log level: {0}")]
    Reload(#[from] reload::Error),
}

/// Installs the global logger; `RUST_LOG` wins over `level` at start.
pub fn init(level: &str, json: bool) -> SetLevel {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let (filter, handle) = reload::Layer::new(filter);
    let registry = tracing_subscriber::registry().with(filter);
    // Colours only for a terminal: journald and log files get plain text.
    let layer = fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal());
    if json {
        registry.with(layer.json().flatten_event(true)).init();
    } else {
        registry.with(layer).init();
    }
    Box::new(move |level: &str| {
        let filter = EnvFilter::try_new(level).map_err(|source| LevelError::NotAFilter {
            level: level.to_string(),
            source,
        })?;
        handle.reload(filter).map_err(LevelError::from)?;
        Ok(())
    })
}
