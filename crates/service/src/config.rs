//! The service's configuration: a TOML file whose keys are every `tapdeck record` option
//! (named as its flag, see [`RecordOptions`]) and the service's own settings
//! ([`ServeSettings`]), all at the top level. Command-line flags override the file.
//!
//! Errors name the file, the line and the key: an operator editing a config at 3 a.m.
//! should not have to guess which of forty lines is wrong.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use tapdeck_recorder::error::OptionsError;
use tapdeck_recorder::options::RecordOptions;
use toml::Spanned;

/// The service's own keys, beside the record options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServeSettings {
    /// Address of the HTTP server (metrics, health). Beyond loopback, a token is required.
    pub listen: String,
    /// A file holding one bearer token (named `metrics`), for Prometheus.
    pub metrics_token_file: Option<PathBuf>,
    /// A file of `NAME TOKEN` lines: the tokens requests may carry, with who they are.
    pub token_file: Option<PathBuf>,
    /// PEM certificate chain: with `tls-key`, the service speaks HTTPS only.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls-cert`.
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates: every client must present a certificate they signed.
    pub tls_client_ca: Option<PathBuf>,
    /// Names requests may give in `Host` besides loopback and the listen address (a
    /// proxy's name, say). Without tokens only those are served (against DNS rebinding);
    /// with tokens, setting it turns the same check on.
    pub allowed_hosts: Vec<String>,
    /// How long a browser's login lasts (e.g. "12h", "30m").
    pub session_lifetime: String,
    pub log_format: LogFormat,
    pub log_level: String,
    /// Seconds a capture loop may go without progress before `/healthz` says 503.
    pub health_stall: f64,
    /// Drops in the last minute above which `/healthz` says 503.
    pub health_max_drops: u64,
    /// Seconds of history the store should hold; exported for the alert rule (0: none).
    pub min_horizon: u64,
    /// Queries (`/api/v1/packets`) running at once; more are refused with 429.
    pub query_max_concurrent: usize,
    /// Bytes one query's answer may have (it ends there, and the log says so).
    pub query_max_bytes: String,
    /// Seconds one query may take.
    pub query_max_seconds: u64,
}

impl Default for ServeSettings {
    fn default() -> Self {
        ServeSettings {
            listen: DEFAULT_LISTEN.into(),
            metrics_token_file: None,
            token_file: None,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            allowed_hosts: Vec::new(),
            session_lifetime: "12h".into(),
            log_format: LogFormat::Human,
            log_level: "info".into(),
            health_stall: 10.0,
            health_max_drops: 0,
            min_horizon: 0,
            query_max_concurrent: 4,
            query_max_bytes: "4GiB".into(),
            query_max_seconds: 300,
        }
    }
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:9780";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Human,
    Json,
}

/// Everything `serve` runs with.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServeConfig {
    pub record: RecordOptions,
    pub serve: ServeSettings,
    /// The config file, and the line of each key still set by it (not by a flag): values
    /// are checked again as a whole after parsing (sizes, ladders, combinations), and
    /// those errors must name the line too.
    pub file: Option<PathBuf>,
    pub lines: BTreeMap<String, usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}, line {line}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}, line {line}: unknown key `{key}` (not a `tapdeck record` option nor a serve setting){hint}")]
    UnknownKey {
        path: PathBuf,
        line: usize,
        key: String,
        hint: String,
    },
    #[error("{path}, line {line}: key `{key}`: {message}")]
    BadValue {
        path: PathBuf,
        line: usize,
        key: String,
        message: String,
    },
    #[error("{origin}: {message}")]
    Override { origin: String, message: String },
}

/// Keys of the service's own settings.
pub fn serve_keys() -> Vec<String> {
    keys_of(&ServeSettings::default())
}

/// Keys of the record options.
pub fn record_keys() -> Vec<String> {
    keys_of(&RecordOptions::default())
}

fn keys_of(value: &impl Serialize) -> Vec<String> {
    match to_json(value) {
        Json::Object(map) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// Why `session-lifetime` is no lifetime.
#[derive(Debug, thiserror::Error)]
pub enum LifetimeError {
    #[error("session-lifetime = {value:?}: {source} (e.g. \"12h\", \"30m\")")]
    NotADuration {
        value: String,
        source: humantime::DurationError,
    },
    #[error("session-lifetime = {value:?} must be at least a second")]
    TooShort { value: String },
}

/// Why the query settings give no limits.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    #[error(transparent)]
    Size(#[from] OptionsError),
    #[error("query-max-concurrent, query-max-bytes and query-max-seconds must be above 0")]
    Zero,
}

impl ServeSettings {
    /// How long a login lasts.
    pub fn session_lifetime(&self) -> Result<std::time::Duration, LifetimeError> {
        let value = self.session_lifetime.trim();
        let d = humantime::parse_duration(value).map_err(|source| LifetimeError::NotADuration {
            value: value.to_string(),
            source,
        })?;
        if d.as_secs() == 0 {
            return Err(LifetimeError::TooShort {
                value: value.to_string(),
            });
        }
        Ok(d)
    }

    /// The query limits these settings give.
    pub fn query_limits(&self) -> Result<crate::query::Limits, LimitsError> {
        let max_bytes =
            tapdeck_recorder::options::parse_size("query-max-bytes", &self.query_max_bytes)?;
        if self.query_max_concurrent == 0 || self.query_max_seconds == 0 || max_bytes == 0 {
            return Err(LimitsError::Zero);
        }
        Ok(crate::query::Limits {
            concurrent: self.query_max_concurrent,
            max_bytes,
            max_seconds: self.query_max_seconds,
        })
    }
}

impl ServeConfig {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<ServeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        ServeConfig::parse(path, &text)
    }

    /// Parses a config file's text; `path` only names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<ServeConfig, ConfigError> {
        let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
        let doc: BTreeMap<Spanned<String>, Spanned<toml::Value>> =
            toml::from_str(text).map_err(|e| ConfigError::Syntax {
                path: path.to_path_buf(),
                line: e.span().map_or(1, |s| line_of(s.start)),
                message: e.message().trim().replace('\n', " "),
            })?;
        let (serve_keys, record_keys) = (serve_keys(), record_keys());
        let mut serve = toml::Table::new();
        let mut record = toml::Table::new();
        let mut lines = BTreeMap::new();
        for (key, value) in doc {
            let line = line_of(key.span().start);
            let name = key.into_inner();
            lines.insert(name.clone(), line);
            let is_serve = serve_keys.contains(&name);
            if !is_serve && !record_keys.contains(&name) {
                let hint = closest(&name, serve_keys.iter().chain(&record_keys))
                    .map(|k| format!("; did you mean `{k}`?"))
                    .unwrap_or_default();
                return Err(ConfigError::UnknownKey {
                    path: path.to_path_buf(),
                    line,
                    key: name,
                    hint,
                });
            }
            // Each key on its own first, so that an error names it and its line.
            let one = toml::Table::from_iter([(name.clone(), value.into_inner())]);
            let checked = if is_serve {
                toml::Value::Table(one.clone())
                    .try_into::<ServeSettings>()
                    .map(|_| ())
            } else {
                toml::Value::Table(one.clone())
                    .try_into::<RecordOptions>()
                    .map(|_| ())
            };
            if let Err(e) = checked {
                return Err(ConfigError::BadValue {
                    path: path.to_path_buf(),
                    line,
                    key: name,
                    message: first_line(e.message()),
                });
            }
            if is_serve {
                serve.extend(one)
            } else {
                record.extend(one)
            }
        }
        let whole = |e: toml::de::Error| ConfigError::Syntax {
            path: path.to_path_buf(),
            line: 1,
            message: first_line(e.message()),
        };
        Ok(ServeConfig {
            record: toml::Value::Table(record).try_into().map_err(whole)?,
            serve: toml::Value::Table(serve).try_into().map_err(whole)?,
            file: Some(path.to_path_buf()),
            lines,
        })
    }

    /// An option the recorder refused, named by the file and line that set it (as a parse
    /// error is) when it came from the config file; by its flag when from the command line.
    pub fn option_error(&self, e: &OptionsError) -> String {
        let text = e.to_string();
        match (&self.file, self.lines.get(e.key())) {
            (Some(path), Some(line)) => {
                // "--max-bytes lots: not a size" → "key `max-bytes`: lots: not a size"
                let rest = text.strip_prefix(e.flag()).unwrap_or(&text);
                let rest = rest.trim_start_matches(':').trim_start();
                format!("{}, line {line}: key `{}`: {rest}", path.display(), e.key())
            }
            _ => text,
        }
    }

    /// Sets the keys given on the command line (`key` → value as JSON), over the file.
    pub fn override_with(&mut self, flags: &BTreeMap<String, Json>) -> Result<(), ConfigError> {
        let bad = |message: String| ConfigError::Override {
            origin: "command line".into(),
            message,
        };
        let mut record = serde_json::to_value(&self.record).map_err(|e| bad(e.to_string()))?;
        let mut serve = serde_json::to_value(&self.serve).map_err(|e| bad(e.to_string()))?;
        for (key, value) in flags {
            let target = if serve.get(key).is_some() {
                &mut serve
            } else if record.get(key).is_some() {
                &mut record
            } else {
                return Err(bad(format!("`{key}` is not an option of serve")));
            };
            target[key] = value.clone();
            self.lines.remove(key);
        }
        self.record = serde_json::from_value(record).map_err(|e| bad(e.to_string()))?;
        self.serve = serde_json::from_value(serve).map_err(|e| bad(e.to_string()))?;
        Ok(())
    }

    /// The keys whose values differ between `self` and `new`, record options first.
    pub fn changed_keys(&self, new: &ServeConfig) -> Vec<String> {
        let diff = |a: Json, b: Json| -> Vec<String> {
            let (Json::Object(a), Json::Object(b)) = (a, b) else {
                return Vec::new();
            };
            a.iter()
                .filter(|(k, v)| b.get(*k) != Some(*v))
                .map(|(k, _)| k.clone())
                .collect()
        };
        let mut keys = diff(to_json(&self.record), to_json(&new.record));
        keys.extend(diff(to_json(&self.serve), to_json(&new.serve)));
        keys
    }
}

fn to_json(value: &impl Serialize) -> Json {
    serde_json::to_value(value).unwrap_or_default()
}

/// What a reload may change while recording, without losing a packet.
pub const LIVE_KEYS: &[&str] = &[
    "max-bytes",
    "min-free",
    "min-keep",
    "rotate-size",
    "rotate-interval",
    "log-level",
    "health-stall",
    "health-max-drops",
    "min-horizon",
    "metrics-token-file",
    "token-file",
    "tls-cert",
    "tls-key",
    "tls-client-ca",
    "allowed-hosts",
    "session-lifetime",
];

fn first_line(message: &str) -> String {
    message.lines().next().unwrap_or("").trim().to_string()
}

/// The known key nearest to a misspelt one (at most two edits away).
fn closest<'a>(key: &str, known: impl Iterator<Item = &'a String>) -> Option<&'a String> {
    known
        .map(|k| (edit_distance(key, k), k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (row[j] + 1).min(cur + 1).min(prev + usize::from(ca != *cb));
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ServeConfig, ConfigError> {
        ServeConfig::parse(Path::new("/etc/tapdeck/tapdeck.toml"), text)
    }

    #[test]
    fn record_options_and_serve_settings_share_the_top_level() {
        let c = parse(
            "interface = [\"eth1\"]\nstore = \"/var/lib/tapdeck\"\nmax-bytes = \"10GiB\"\n\
             listen = \"127.0.0.1:9999\"\nhealth-max-drops = 5\n",
        )
        .unwrap();
        assert_eq!(c.record.interfaces, vec!["eth1".to_string()]);
        assert_eq!(c.record.store, Some(PathBuf::from("/var/lib/tapdeck")));
        assert_eq!(c.record.max_bytes.as_deref(), Some("10GiB"));
        assert_eq!(c.record.threads, 1, "defaults stay");
        assert_eq!(c.serve.listen, "127.0.0.1:9999");
        assert_eq!(c.serve.health_max_drops, 5);
        assert_eq!(c.serve.log_format, LogFormat::Human);
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line_and_the_nearest_key() {
        let e = parse("store = \"/s\"\n\n# comment\nmax-byte = \"1G\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/tapdeck/tapdeck.toml, line 4: unknown key `max-byte` (not a `tapdeck record` \
             option nor a serve setting); did you mean `max-bytes`?"
        );
        let e = parse("zzzzzz = 1\n").unwrap_err();
        assert!(e.to_string().ends_with("nor a serve setting)"), "{e}");
    }

    #[test]
    fn a_bad_value_is_named_with_its_key_and_line() {
        let e = parse("store = \"/s\"\nthreads = \"two\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/tapdeck/tapdeck.toml, line 2: key `threads`: invalid type: string \"two\", expected usize"
        );
        let e = parse("log-format = \"xml\"\n").unwrap_err();
        assert!(
            e.to_string().starts_with(
                "/etc/tapdeck/tapdeck.toml, line 1: key `log-format`: unknown variant `xml`"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_value_the_recorder_refuses_is_named_with_its_key_and_line() {
        let c = parse("store = \"/s\"\ninterface = [\"eth1\"]\nmax-bytes = \"lots\"\n").unwrap();
        let e = c.record.builder().unwrap_err();
        assert_eq!(
            c.option_error(&e),
            "/etc/tapdeck/tapdeck.toml, line 3: key `max-bytes`: lots: not a size (e.g. 4MiB, 10G, 123456)"
        );
        // Set by a flag instead: named as the flag.
        let mut c = c;
        let flags = BTreeMap::from([("max-bytes".to_string(), Json::from("many"))]);
        c.override_with(&flags).unwrap();
        let e = c.record.builder().unwrap_err();
        assert_eq!(
            c.option_error(&e),
            "--max-bytes many: not a size (e.g. 4MiB, 10G, 123456)"
        );
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let e = parse("store = \"/s\"\n\nthreads = \n").unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("/etc/tapdeck/tapdeck.toml, line 3: "), "{s}");
        assert!(!s.contains('\n'), "one line: {s}");
    }

    #[test]
    fn flags_override_the_file() {
        let mut c = parse("store = \"/s\"\nthreads = 2\nlisten = \"127.0.0.1:1\"\n").unwrap();
        let flags = BTreeMap::from([
            ("threads".to_string(), Json::from(4)),
            ("listen".to_string(), Json::from("127.0.0.1:2")),
        ]);
        c.override_with(&flags).unwrap();
        assert_eq!(c.record.threads, 4);
        assert_eq!(
            c.record.store,
            Some(PathBuf::from("/s")),
            "untouched keys stay"
        );
        assert_eq!(c.serve.listen, "127.0.0.1:2");
    }

    #[test]
    fn changed_keys_are_listed() {
        let a = parse("store = \"/s\"\nmax-bytes = \"1G\"\n").unwrap();
        let b = parse("store = \"/s\"\nmax-bytes = \"2G\"\nlisten = \"0.0.0.0:1\"\n").unwrap();
        assert_eq!(a.changed_keys(&b), vec!["max-bytes", "listen"]);
        assert!(a.changed_keys(&a).is_empty());
    }

    #[test]
    fn every_key_is_a_record_option_or_a_serve_setting_never_both() {
        let serve = serve_keys();
        for key in record_keys() {
            assert!(!serve.contains(&key), "{key} is both");
        }
        for key in LIVE_KEYS {
            assert!(
                serve.contains(&key.to_string()) || record_keys().contains(&key.to_string()),
                "{key}"
            );
        }
    }
}
