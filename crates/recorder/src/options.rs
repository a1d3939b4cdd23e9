//! Record options as a user writes them, and the one place they become a [`RecorderConfig`].
//!
//! [`RecordOptions`] holds every `tapdeck record` option under its flag's name
//! (`rotate-size`, `pin-capture`, …), with the flag's default, as text where the user writes
//! text (`4MiB`, `0-1`, `zstd:3,lz4`). The CLI fills it from its flags; a config file
//! deserializes into the same struct (serde, kebab-case, unknown keys refused), so a flag and
//! its key cannot drift apart. [`RecordOptions::builder`] checks and converts every value,
//! naming the option in each error, and applies the live-capture defaults; `merge` and
//! `convert --merge`, which have no such options, start from [`RecorderConfig::builder`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tapdeck_capture::AfPacketConfig;
use tapdeck_pcap::Format;

use crate::affinity::{parse_cpu_list, Pinning};
use crate::error::OptionsError;
use crate::ladder::CodecLadder;
use crate::recorder::{default_staging_bytes, HeaderDepth, RecorderConfig, Rotation};
use crate::retention::{filesystem_bytes, RetentionPolicy, DEFAULT_MIN_KEEP};

/// Live capture (`-i`) cuts files at 1 GiB of capture data or every minute, whichever
/// comes first.
pub const LIVE_ROTATE_SIZE: u64 = 1 << 30;
pub const LIVE_ROTATE_INTERVAL_S: u64 = 60;
/// Capture data per chunk unless told otherwise.
pub const DEFAULT_CHUNK_SIZE: usize = 4 << 20;
pub const DEFAULT_CODEC: &str = "zstd:3,zstd:1,lz4,raw";

/// Every option of `tapdeck record`, named as its flag. Defaults are the flags' defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RecordOptions {
    // Where packets come from.
    pub read: Option<String>,
    pub synthetic: Option<String>,
    #[serde(rename = "interface")]
    pub interfaces: Vec<String>,
    pub threads: usize,
    pub filter: Option<String>,
    pub snaplen: Option<u32>,
    pub headers: Option<String>,
    pub ring_block_size: String,
    pub ring_blocks: u32,
    pub block_timeout_ms: u32,
    pub user: Option<String>,
    pub rate: Option<f64>,
    pub rate_schedule: Option<String>,
    // Where they go and how long they stay.
    pub store: PathBuf,
    #[serde(rename = "dir")]
    pub dirs: Vec<PathBuf>,
    pub max_bytes: Option<String>,
    pub min_free: Option<String>,
    pub min_keep: u64,
    // How files are written.
    pub format: String,
    pub codec: String,
    pub chunk_size: String,
    pub staging: Option<String>,
    pub rotate_size: Option<String>,
    pub rotate_interval: Option<u64>,
    pub flush_interval: f64,
    pub no_direct: bool,
    pub no_flow_index: bool,
    // Threads.
    pub compressors: Option<usize>,
    pub pin_capture: Option<String>,
    pub pin_writers: Option<String>,
    pub pin_compressors: Option<String>,
    // When to stop, and what to report.
    pub count: Option<u64>,
    pub duration: Option<f64>,
    pub stats_interval: f64,
    pub stats: Option<String>,
    pub discard: bool,
    pub bench_disk_limit: Option<String>,
    pub bench_fixed_codec: bool,
    pub quiet: bool,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            read: None,
            synthetic: None,
            interfaces: Vec::new(),
            threads: 1,
            filter: None,
            snaplen: None,
            headers: None,
            ring_block_size: "4MiB".into(),
            ring_blocks: 64,
            block_timeout_ms: 10,
            user: None,
            rate: None,
            rate_schedule: None,
            store: PathBuf::new(),
            dirs: Vec::new(),
            max_bytes: None,
            min_free: None,
            min_keep: DEFAULT_MIN_KEEP.as_secs(),
            format: "pcapng".into(),
            codec: DEFAULT_CODEC.into(),
            chunk_size: "4MiB".into(),
            staging: None,
            rotate_size: None,
            rotate_interval: None,
            flush_interval: 2.0,
            no_direct: false,
            no_flow_index: false,
            compressors: None,
            pin_capture: None,
            pin_writers: None,
            pin_compressors: None,
            count: None,
            duration: None,
            stats_interval: 5.0,
            stats: None,
            discard: false,
            bench_disk_limit: None,
            bench_fixed_codec: false,
            quiet: false,
        }
    }
}

/// A size as the user wrote it (`4MiB`, `10G`, `123456`).
pub fn parse_size(flag: &'static str, value: &str) -> Result<u64, OptionsError> {
    parse_size::parse_size(value).map_err(|source| OptionsError::NotASize {
        flag,
        value: value.into(),
        source,
    })
}

/// A positive number of seconds.
pub fn parse_seconds(flag: &'static str, s: f64) -> Result<Duration, OptionsError> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or(OptionsError::NotSeconds { flag })
}

fn size(flag: &'static str, v: &Option<String>) -> Result<Option<u64>, OptionsError> {
    v.as_deref().map(|s| parse_size(flag, s)).transpose()
}

fn cpus(flag: &'static str, v: &Option<String>) -> Result<Vec<usize>, OptionsError> {
    v.as_deref()
        .map(|s| parse_cpu_list(s).map_err(|cause| OptionsError::Invalid { flag, cause }))
        .transpose()
        .map(Option::unwrap_or_default)
}

/// `--chunk-size` and `--staging` (default: the recorder's), checked to hold two chunks.
pub fn chunk_and_staging(
    chunk: &str,
    staging: Option<&str>,
) -> Result<(usize, usize), OptionsError> {
    let chunk_size = parse_size("--chunk-size", chunk)? as usize;
    let staging_bytes = match staging {
        Some(s) => parse_size("--staging", s)? as usize,
        None => default_staging_bytes(),
    };
    if staging_bytes < 2 * chunk_size {
        return Err(OptionsError::StagingTooSmall {
            need: 2 * chunk_size,
            chunk: chunk.into(),
        });
    }
    Ok((chunk_size, staging_bytes))
}

/// `-i` keeps the smaller of 10 % of the data filesystem and 1 GiB free.
fn live_min_free(store: &Path, dir: Option<&PathBuf>) -> Option<u64> {
    // The store may not exist yet: ask about the nearest directory that does.
    let mut at = dir.map_or(store, |d| d.as_path());
    while !at.exists() {
        at = at
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
    }
    let size = filesystem_bytes(at)?;
    Some((size / 10).min(1 << 30))
}

impl RecordOptions {
    /// Live capture from interfaces, which records until stopped: unless told otherwise,
    /// files are cut and the disk is kept from filling.
    pub fn is_live(&self) -> bool {
        !self.interfaces.is_empty()
    }

    /// Checks and converts every recorder option; the builder can still be adjusted (the
    /// manifest's options, say) before `build`.
    pub fn builder(&self) -> Result<RecorderConfigBuilder, OptionsError> {
        let ladder = CodecLadder::parse(&self.codec).map_err(|cause| OptionsError::Invalid {
            flag: "--codec",
            cause,
        })?;
        let format = match self.format.as_str() {
            "pcapng" => Format::Pcapng,
            "pcap" => Format::Pcap,
            other => {
                return Err(OptionsError::NotOneOf {
                    flag: "--format",
                    value: other.into(),
                    expected: "pcapng, pcap",
                })
            }
        };
        let headers = match self.headers.as_deref() {
            None => None,
            Some("transport") => Some(HeaderDepth::Transport),
            Some("rpc") => Some(HeaderDepth::Rpc),
            Some(other) => {
                return Err(OptionsError::NotOneOf {
                    flag: "--headers",
                    value: other.into(),
                    expected: "transport, rpc",
                })
            }
        };
        if self.store.as_os_str().is_empty() {
            return Err(OptionsError::NoStore);
        }
        self.check_sources()?;
        let (chunk_size, staging_bytes) =
            chunk_and_staging(&self.chunk_size, self.staging.as_deref())?;
        // Checked here too (the recorder refuses it at its start): a config check must
        // refuse what the start would.
        let max_record = format.max_record_len(256 * 1024);
        if chunk_size < max_record {
            return Err(OptionsError::ChunkTooSmall { min: max_record });
        }
        let live = self.is_live();
        let rotation = Rotation {
            max_bytes: match size("--rotate-size", &self.rotate_size)? {
                Some(0) => None,
                None if live => Some(LIVE_ROTATE_SIZE),
                s => s,
            },
            interval_ns: match self.rotate_interval {
                Some(0) => None,
                None if live => Some(LIVE_ROTATE_INTERVAL_S * 1_000_000_000),
                s => s.map(|s| s * 1_000_000_000),
            },
        };
        let retention = RetentionPolicy {
            max_bytes: size("--max-bytes", &self.max_bytes)?,
            min_free: match size("--min-free", &self.min_free)? {
                Some(0) => None,
                None if live => live_min_free(&self.store, self.dirs.first()),
                m => m,
            },
            min_keep: Duration::from_secs(self.min_keep),
        };
        let pinning = Pinning {
            capture: cpus("--pin-capture", &self.pin_capture)?,
            writers: cpus("--pin-writers", &self.pin_writers)?,
            compressors: cpus("--pin-compressors", &self.pin_compressors)?,
        };
        let source = if live {
            Some(format!("live {}", self.interfaces.join(",")))
        } else {
            self.read
                .as_ref()
                .map(|r| format!("file {r}"))
                .or(self.synthetic.as_ref().map(|s| format!("synthetic {s}")))
        };
        let mut options = serde_json::json!({
            "source": source,
            "format": self.format,
            "codec": ladder.describe(),
            "chunk_size": chunk_size,
            "staging_bytes": staging_bytes,
            "rotate_size": rotation.max_bytes,
            "rotate_interval_s": self.rotate_interval,
            "max_bytes": retention.max_bytes,
            "min_free": retention.min_free,
            "direct": !self.no_direct,
            "flow_index": !self.no_flow_index,
            "pin_capture": self.pin_capture,
            "pin_writers": self.pin_writers,
            "pin_compressors": self.pin_compressors,
            "headers": self.headers,
        });
        if live {
            options["threads"] = serde_json::json!(self.threads);
            options["filter"] = serde_json::json!(self.filter);
            options["snaplen"] = serde_json::json!(self.snaplen);
        }
        let mut b = RecorderConfig::builder(self.store.clone())
            .dirs(self.dirs.clone())
            .format(format)
            .ladder(ladder)
            .chunk_size(chunk_size)
            .staging_bytes(staging_bytes)
            .rotation(rotation)
            .retention(retention)
            .pinning(pinning)
            .direct(!self.no_direct)
            .flow_index(!self.no_flow_index)
            .discard(self.discard)
            .disk_limit(size("--bench-disk-limit", &self.bench_disk_limit)?)
            .fixed_codec(self.bench_fixed_codec)
            .flush_interval(parse_seconds("--flush-interval", self.flush_interval)?)
            .stats_interval(parse_seconds("--stats-interval", self.stats_interval)?)
            .duration(
                self.duration
                    .map(|d| parse_seconds("--duration", d))
                    .transpose()?,
            )
            .headers(headers)
            .options(options);
        if let Some(n) = self.compressors {
            b = b.compressors(n);
        }
        Ok(b)
    }

    /// Options that only apply to one kind of source are refused with another (a config
    /// file's `threads` without `interface` would otherwise be silently ignored).
    fn check_sources(&self) -> Result<(), OptionsError> {
        let d = RecordOptions::default();
        if !self.is_live() {
            let live_only = [
                ("--threads", self.threads != d.threads),
                ("--filter", self.filter.is_some()),
                ("--snaplen", self.snaplen.is_some()),
                (
                    "--ring-block-size",
                    self.ring_block_size != d.ring_block_size,
                ),
                ("--ring-blocks", self.ring_blocks != d.ring_blocks),
                (
                    "--block-timeout-ms",
                    self.block_timeout_ms != d.block_timeout_ms,
                ),
                ("--user", self.user.is_some()),
            ];
            if let Some((flag, _)) = live_only.iter().find(|(_, set)| *set) {
                return Err(OptionsError::LiveOnly { flag });
            }
        }
        if self.rate.is_some() && self.synthetic.is_none() {
            return Err(OptionsError::SyntheticOnly { flag: "--rate" });
        }
        if self.rate_schedule.is_some() && self.synthetic.is_none() {
            return Err(OptionsError::SyntheticOnly {
                flag: "--rate-schedule",
            });
        }
        Ok(())
    }

    /// The AF_PACKET settings of live capture (`-i`).
    pub fn capture_config(&self) -> Result<AfPacketConfig, OptionsError> {
        let block_size = parse_size("--ring-block-size", &self.ring_block_size)?;
        Ok(AfPacketConfig {
            interfaces: self.interfaces.clone(),
            block_size: u32::try_from(block_size)
                .map_err(|source| OptionsError::RingBlockTooLarge { source })?,
            blocks: self.ring_blocks,
            block_timeout_ms: self.block_timeout_ms,
            filter: self.filter.clone(),
            snaplen: self.snaplen,
            count: self.count,
            ..AfPacketConfig::default()
        })
    }
}

/// A [`RecorderConfig`] from the recorder's defaults: pcapng, the default ladder, 4 MiB
/// chunks, the default staging pool, no rotation, no retention, a compressor per core
/// beyond the first, no pinning, O_DIRECT, a flush every 2 s and stats every 5 s.
pub struct RecorderConfigBuilder {
    cfg: RecorderConfig,
}

impl std::fmt::Debug for RecorderConfigBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecorderConfigBuilder")
            .field("store", &self.cfg.store)
            .finish_non_exhaustive()
    }
}

impl RecorderConfig {
    pub fn builder(store: PathBuf) -> RecorderConfigBuilder {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        RecorderConfigBuilder {
            cfg: RecorderConfig {
                store,
                dirs: Vec::new(),
                format: Format::Pcapng,
                ladder: CodecLadder::parse(DEFAULT_CODEC).expect("the default ladder parses"),
                chunk_size: DEFAULT_CHUNK_SIZE,
                staging_bytes: default_staging_bytes(),
                rotation: Rotation::default(),
                retention: RetentionPolicy::default(),
                compressors: cores.saturating_sub(1).max(1),
                pinning: Pinning::default(),
                direct: true,
                flow_index: true,
                discard: false,
                disk_limit: None,
                sync_interval: None,
                fixed_codec: false,
                flush_interval: Duration::from_secs(2),
                stats_interval: Duration::from_secs(5),
                duration: None,
                headers: None,
                options: serde_json::Value::Null,
                merge: None,
            },
        }
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $field(mut self, $field: $ty) -> Self {
                self.cfg.$field = $field;
                self
            }
        )*
    };
}

impl RecorderConfigBuilder {
    setters! {
        dirs: Vec<PathBuf>,
        format: Format,
        ladder: CodecLadder,
        chunk_size: usize,
        staging_bytes: usize,
        rotation: Rotation,
        retention: RetentionPolicy,
        compressors: usize,
        pinning: Pinning,
        direct: bool,
        /// Build a flow index per chunk (see `crate::flows`).
        flow_index: bool,
        discard: bool,
        disk_limit: Option<u64>,
        /// Sync the open files this often (see `WriterConfig::sync_interval`).
        sync_interval: Option<Duration>,
        /// Benchmarks only: every chunk takes the ladder's first rung (see
        /// `LadderController::fixed`).
        fixed_codec: bool,
        flush_interval: Duration,
        stats_interval: Duration,
        duration: Option<Duration>,
        headers: Option<HeaderDepth>,
        /// The options as the user gave them, kept in the manifest.
        options: serde_json::Value,
    }

    /// The manifest's options, to add to what the builder recorded.
    pub fn options_mut(&mut self) -> &mut serde_json::Value {
        &mut self.cfg.options
    }

    pub fn build(self) -> RecorderConfig {
        self.cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(json: serde_json::Value) -> Result<RecordOptions, serde_json::Error> {
        serde_json::from_value(json)
    }

    #[test]
    fn keys_are_the_flag_names() {
        let o = opts(serde_json::json!({
            "store": "s", "interface": ["eth0"], "dir": ["d1"], "rotate-size": "8MiB",
            "pin-capture": "0", "no-direct": true, "min-keep": 5
        }))
        .unwrap();
        assert_eq!(o.interfaces, ["eth0"]);
        assert_eq!(o.dirs, [PathBuf::from("d1")]);
        assert_eq!(o.rotate_size.as_deref(), Some("8MiB"));
        assert!(o.no_direct);
        assert_eq!(o.chunk_size, "4MiB", "unset keys keep the flag's default");
        let err = opts(serde_json::json!({"store": "s", "rotate_size": "1"})).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `rotate_size`"),
            "{err}"
        );
    }

    #[test]
    fn live_capture_gets_rotation_and_zero_turns_it_off() {
        let mut o = RecordOptions {
            store: "s".into(),
            interfaces: vec!["eth0".into()],
            min_free: Some("0".into()),
            ..Default::default()
        };
        let cfg = o.builder().unwrap().build();
        assert_eq!(cfg.rotation.max_bytes, Some(LIVE_ROTATE_SIZE));
        assert_eq!(cfg.rotation.interval_ns, Some(60_000_000_000));
        assert_eq!(cfg.retention.min_free, None);
        assert_eq!(cfg.options["source"], "live eth0");
        o.rotate_size = Some("0".into());
        o.rotate_interval = Some(0);
        let cfg = o.builder().unwrap().build();
        assert_eq!(cfg.rotation.max_bytes, None);
        assert_eq!(cfg.rotation.interval_ns, None);
        o.interfaces.clear();
        o.rotate_size = None;
        o.rotate_interval = None;
        let cfg = o.builder().unwrap().build();
        assert_eq!(
            cfg.rotation.max_bytes, None,
            "files and synthetic: no default cut"
        );
    }

    #[test]
    fn errors_name_the_option() {
        let base = RecordOptions {
            store: "s".into(),
            ..Default::default()
        };
        let cases: [(RecordOptions, &str); 5] = [
            (
                RecordOptions {
                    rotate_size: Some("lots".into()),
                    ..base.clone()
                },
                "--rotate-size lots: not a size (e.g. 4MiB, 10G, 123456)",
            ),
            (
                RecordOptions {
                    stats_interval: 0.0,
                    ..base.clone()
                },
                "--stats-interval must be a positive number of seconds",
            ),
            (
                RecordOptions {
                    codec: "gzip".into(),
                    ..base.clone()
                },
                "--codec: unknown codec 'gzip': use raw, lz4, zstd or zstd:LEVEL (LEVEL -7..22)",
            ),
            (
                RecordOptions {
                    staging: Some("1MiB".into()),
                    ..base.clone()
                },
                "--staging must hold at least two chunks (8388608 bytes with --chunk-size 4MiB)",
            ),
            (
                RecordOptions {
                    pin_writers: Some("1-0".into()),
                    ..base.clone()
                },
                "--pin-writers: CPU range \"1-0\" runs backwards: write LOW-HIGH",
            ),
        ];
        for (o, says) in cases {
            let err = o.builder().unwrap_err();
            assert_eq!(err.to_string(), says);
            assert_eq!(format!("--{}", err.key()), err.flag());
        }
    }
}
