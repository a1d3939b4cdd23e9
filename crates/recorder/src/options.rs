//! Record options as a user writes them, and the one place they become a [`RecorderConfig`].
//!
//! [`RecordOptions`] defines every `tapdeck record` option once: its flag (clap: name,
//! alias, default, the `--help` text from its documentation) and its config file key
//! (serde: the flag's name, kebab-case, unknown keys refused), as text where the user
//! writes text (`4MiB`, `0-1`, `zstd:3,lz4`). The CLI parses its flags into it; `serve`'s
//! config file deserializes into the same struct, whose defaults are the flags' (see
//! `Default`), so a flag and its key cannot drift apart. [`WriteOptions`], how a store is
//! written, is shared with `collect`. [`RecordOptions::builder`] checks and converts every
//! value, naming the option in each error, and applies the live-capture defaults; `merge`
//! and `convert --merge`, which have no such options, start from [`RecorderConfig::builder`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, FromArgMatches};
use serde::{Deserialize, Serialize};
use tapdeck_capture::AfPacketConfig;
use tapdeck_pcap::Format;

use crate::affinity::{parse_cpu_list, Pinning};
use crate::error::OptionsError;
use crate::ladder::CodecLadder;
use crate::os::default_staging_bytes;
use crate::pipeline::Rotation;
use crate::recorder::{HeaderDepth, RecorderConfig};
use crate::retention::{filesystem_bytes, RetentionPolicy, DEFAULT_MIN_KEEP};

/// Live capture (`-i`) cuts files at 1 GiB of capture data or every minute, whichever
/// comes first.
pub const LIVE_ROTATE_SIZE: u64 = 1 << 30;
pub const LIVE_ROTATE_INTERVAL_S: u64 = 60;
/// Capture data per chunk unless told otherwise: as the flag shows it, and in bytes.
pub const DEFAULT_CHUNK: &str = "4MiB";
pub const DEFAULT_CHUNK_SIZE: usize = 4 << 20;
pub const DEFAULT_CODEC: &str = "zstd:3,zstd:1,lz4,raw";
/// Seconds between handing a partly filled chunk on, and between stats records.
pub const DEFAULT_FLUSH_INTERVAL_S: f64 = 2.0;
pub const DEFAULT_STATS_INTERVAL_S: f64 = 5.0;
/// The compressors' nice value while capturing live: they yield the CPU to everything else.
pub const DEFAULT_COMPRESSOR_NICE: i32 = 19;

/// Every option of `tapdeck record`: a flag, and the config file key of the same name.
#[derive(Args, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RecordOptions {
    // Where packets come from.
    /// Replay a pcap or pcapng file (`-` for standard input) with its original timestamps:
    /// plain, or compressed with gzip, bzip2, xz, zstd or LZ4 (told by content), or a
    /// stored tapdeck file. A file cut short: the packets before the cut are stored, then
    /// an error names the file and where.
    #[arg(
        short = 'r',
        long = "read",
        value_name = "FILE",
        conflicts_with = "synthetic"
    )]
    pub read: Option<String>,

    /// Generate packets in memory at full speed: 64, 1514 or mix.
    #[arg(long, value_name = "PROFILE")]
    pub synthetic: Option<String>,

    /// Capture live from this network interface (repeat for several: each becomes an
    /// interface of the same files). AF_PACKET with a TPACKET_V3 ring per interface,
    /// promiscuous, nanosecond timestamps (the NIC's clock where the driver stamps in
    /// hardware). Needs CAP_NET_RAW. Turn GRO/LRO off on it (`ethtool -K IF gro off`).
    #[arg(
        short = 'i',
        long = "interface",
        value_name = "IF",
        conflicts_with_all = ["read", "synthetic"]
    )]
    #[serde(rename = "interface")]
    pub interfaces: Vec<String>,

    /// With -i: capture threads, each its own stream (and files). The sockets of an
    /// interface form a PACKET_FANOUT group with a symmetric flow hash, so both directions
    /// of a connection land in the same stream; `extract` merges streams by time.
    #[arg(long, value_name = "N", default_value = "1", requires = "interfaces")]
    pub threads: usize,

    /// With -i: capture filter in tcpdump syntax (compiled by libpcap, run in the kernel,
    /// so other packets never reach tapdeck), e.g. `tcp port 2049 or udp port 2049`.
    #[arg(long, value_name = "EXPR", requires = "interfaces")]
    pub filter: Option<String>,

    /// With -i: keep at most this many bytes of each packet (header-only capture, e.g. 96);
    /// the original length is still recorded. Default 262144.
    #[arg(long, value_name = "BYTES", requires = "interfaces")]
    pub snaplen: Option<u32>,

    /// Header-only capture, from any source: keep each packet up to the end of its TCP,
    /// UDP or ICMP header (`--headers`, same as `--headers=transport`), or also through
    /// the ONC RPC header when the payload is RPC (`--headers=rpc`; over TCP after the
    /// record mark). IP packets without such a header keep their IP headers (at least 64
    /// bytes), other frames their first 128 bytes. The original length is recorded, and
    /// the summary says how much of the captured bytes was kept. With --snaplen, the
    /// smaller cut wins; the files declare the snap length in force as before.
    #[arg(
        long,
        value_name = "DEPTH",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "transport",
        value_parser = ["transport", "rpc"]
    )]
    pub headers: Option<String>,

    /// With -i: bytes per kernel ring block (a multiple of the page size).
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "4MiB",
        requires = "interfaces"
    )]
    pub ring_block_size: String,

    /// With -i: blocks per kernel ring; one ring per interface and thread.
    #[arg(long, value_name = "N", default_value = "64", requires = "interfaces")]
    pub ring_blocks: u32,

    /// With -i: the kernel hands over a partly filled ring block after this many
    /// milliseconds, so packets on a quiet link arrive promptly.
    #[arg(long, value_name = "MS", default_value = "10", requires = "interfaces")]
    pub block_timeout_ms: u32,

    /// With -i: once the sockets are open, drop root privileges and run as this user
    /// (who must be able to write the store).
    #[arg(long, value_name = "NAME", requires = "interfaces")]
    pub user: Option<String>,

    /// With --synthetic: offer this many packets per second on a fixed schedule (default:
    /// as fast as the capture thread can generate them).
    #[arg(long, value_name = "PPS", requires = "synthetic")]
    pub rate: Option<f64>,

    /// With --synthetic: offer packets phase by phase, PPS:SECONDS[,PPS:SECONDS...] (e.g.
    /// `10000:5,1200000:10,10000:5` for a 10 s burst between quiet spells), then stop.
    #[arg(
        long,
        value_name = "SCHEDULE",
        requires = "synthetic",
        conflicts_with = "rate"
    )]
    pub rate_schedule: Option<String>,

    // Where they go and how long they stay.
    /// Store directory: holds the manifest and, unless --dir is given, the data files.
    #[arg(long, value_name = "DIR", required = true)]
    pub store: Option<PathBuf>,

    /// Data directory (repeat for several disks): new files go to them in round-robin; a
    /// directory that fails is reported and skipped.
    #[arg(long = "dir", value_name = "DIR")]
    #[serde(rename = "dir")]
    pub dirs: Vec<PathBuf>,

    /// Keep the store under this size (the files being written count too), deleting the
    /// oldest complete files.
    #[arg(long, value_name = "SIZE")]
    pub max_bytes: Option<String>,

    /// Keep at least this much free on each data directory's filesystem, deleting the
    /// oldest complete files. With -i the default is the smaller of 10 % of the filesystem
    /// and 1 GiB; 0 turns it off. A disk already below it at start is an error.
    #[arg(long, value_name = "SIZE")]
    pub min_free: Option<String>,

    /// Retention never deletes a file completed less than this many seconds ago, nor the
    /// two newest files: when --max-bytes or --min-free can only be kept by deleting those,
    /// writing stops, and packets are dropped, counted and logged until there is room.
    #[arg(long, default_value_t = DEFAULT_MIN_KEEP.as_secs(), value_name = "SECONDS")]
    pub min_keep: u64,

    // How files are written.
    #[command(flatten)]
    #[serde(flatten)]
    pub write: WriteOptions,

    // Threads.
    /// Compressor threads (default: one per core beyond the first).
    #[arg(long, value_name = "N")]
    pub compressors: Option<usize>,

    /// The compressors' nice value while capturing live: 19 (the default) yields the CPU to
    /// everything else, an IDS beside the recorder included; 0 competes with it on equal
    /// terms. Chunks the compressors are late with are written raw either way.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_COMPRESSOR_NICE,
          allow_negative_numbers = true, value_parser = clap::value_parser!(i32).range(-20..=19))]
    pub compressor_nice: i32,

    /// Pin capture threads to these CPUs, one each in turn (e.g. `1`, `0-1`, `2,3`).
    #[arg(long, value_name = "CPUS")]
    pub pin_capture: Option<String>,

    /// Pin writer threads to these CPUs, one each in turn.
    #[arg(long, value_name = "CPUS")]
    pub pin_writers: Option<String>,

    /// Let the compressor threads run only on these CPUs.
    #[arg(long, value_name = "CPUS")]
    pub pin_compressors: Option<String>,

    // When to stop, and what to report.
    /// Stop after this many packets.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,

    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,

    /// Seconds between JSON-lines stats records.
    #[arg(long, default_value_t = DEFAULT_STATS_INTERVAL_S, value_name = "SECONDS")]
    pub stats_interval: f64,

    /// Where JSON-lines stats go (default: STORE/stats.jsonl; `-` for standard output).
    #[arg(long, value_name = "FILE")]
    pub stats: Option<String>,

    /// Write nothing: run the whole pipeline but discard the chunks instead of writing
    /// them, counting them as stored. For measuring the recorder without the disk.
    #[arg(long)]
    pub discard: bool,

    /// Benchmarks only: the writer writes at most this much per second (e.g. 400MB), as a
    /// slower disk would: each write takes at least its bytes at this rate, and time spent
    /// idle earns no credit. A limit in the writer, not on the device.
    #[arg(long, value_name = "SIZE")]
    pub bench_disk_limit: Option<String>,

    /// Benchmarks only: every chunk takes the first rung of --codec, whatever the load (no
    /// controller, no raw fallback), to compare the ladder with a fixed choice.
    #[arg(long)]
    pub bench_fixed_codec: bool,

    /// No live progress line.
    #[arg(short, long)]
    pub quiet: bool,
}

/// How a store is written: options of `record` that `collect` has too. Flattened into
/// [`RecordOptions`], whose keys these are (and which refuses unknown ones).
#[derive(Args, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct WriteOptions {
    /// File format: pcapng (several interfaces, statistics blocks) or pcap (nanosecond magic).
    #[arg(long, default_value = "pcapng", value_parser = ["pcapng", "pcap"])]
    pub format: String,

    /// Codec ladder, strongest first: `zstd:3,zstd:1,lz4,raw`. Per chunk a controller picks
    /// the rung that writes the fewest bytes while keeping up, from the measured speed of each
    /// rung and of the disk; chunks go raw at once when the compressors fall behind and the
    /// disk has headroom, and queue in the staging pool when the disk is the limit. A threshold
    /// caps a rung by the compression backlog (`zstd:6@0.2` = not while 20 % or more of the
    /// staging pool waits for a compressor); rungs without one are spread evenly below 75 %,
    /// and a raw rung applies from 90 % (when the disk has headroom). A file source (-r)
    /// always gets the first rung. `none` (or `raw` alone) writes plain files.
    #[arg(long, default_value = DEFAULT_CODEC, value_name = "LADDER")]
    pub codec: String,

    /// Capture data per chunk (an independently decompressible unit), e.g. 4MiB.
    #[arg(long, default_value = DEFAULT_CHUNK, value_name = "SIZE")]
    pub chunk_size: String,

    /// Staging pool size (for `collect`, per socket); default: 1/32 of RAM, between 64 MiB
    /// and 2 GiB.
    #[arg(long, value_name = "SIZE")]
    pub staging: Option<String>,

    /// Start a new file once this much capture data (before compression) is in it.
    /// `record -i` defaults to 1GiB; 0 turns size cuts off.
    #[arg(long, value_name = "SIZE")]
    pub rotate_size: Option<String>,

    /// Start a new file at every multiple of this many seconds of packet time since the
    /// epoch (60 cuts at :00 of each minute). With --rotate-size too, whichever comes first;
    /// a size cut does not move the interval boundaries. `record -i` defaults to 60; 0
    /// turns interval cuts off.
    #[arg(long, value_name = "SECONDS")]
    pub rotate_interval: Option<u64>,

    /// Hand a partly filled chunk to the writers after this many seconds, so a quiet link's
    /// packets reach the disk promptly.
    #[arg(long, default_value_t = DEFAULT_FLUSH_INTERVAL_S, value_name = "SECONDS")]
    pub flush_interval: f64,

    /// Use buffered writes instead of O_DIRECT.
    #[arg(long)]
    pub no_direct: bool,

    /// Write no flow index (which addresses, ports, protocols and VLANs each chunk holds,
    /// built off the capture path and used by filtered extracts to skip chunks). For
    /// measuring its cost; files without one are read whole by a filtered extract.
    #[arg(long)]
    pub no_flow_index: bool,
}

/// The value of each flag when none is given: parsed by clap from an empty command line,
/// so that the defaults are written once, in the flags' definitions.
fn flag_defaults<T: Args + FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults").no_binary_name(true))
        .mut_args(|a| a.required(false));
    let matches = command
        .try_get_matches_from(std::iter::empty::<String>())
        .expect("no flags parse");
    T::from_arg_matches(&matches).expect("the flags' defaults parse")
}

impl Default for RecordOptions {
    fn default() -> Self {
        flag_defaults()
    }
}

impl Default for WriteOptions {
    fn default() -> Self {
        flag_defaults()
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
        let ladder =
            CodecLadder::parse(&self.write.codec).map_err(|cause| OptionsError::Invalid {
                flag: "--codec",
                cause,
            })?;
        let format = self.format()?;
        let headers = self.headers()?;
        let store = match &self.store {
            Some(store) if !store.as_os_str().is_empty() => store.clone(),
            _ => return Err(OptionsError::NoStore),
        };
        self.check_sources()?;
        let (chunk_size, staging_bytes) =
            chunk_and_staging(&self.write.chunk_size, self.write.staging.as_deref())?;
        // Checked here too (the recorder refuses it at its start): a config check must
        // refuse what the start would.
        let max_record = format.max_record_len(256 * 1024);
        if chunk_size < max_record {
            return Err(OptionsError::ChunkTooSmall { min: max_record });
        }
        let rotation = self.rotation()?;
        let retention = self.retention(&store)?;
        let options =
            self.manifest_options(&ladder, chunk_size, staging_bytes, &rotation, &retention);
        let mut b = RecorderConfig::builder(store)
            .dirs(self.dirs.clone())
            .format(format)
            .ladder(ladder)
            .chunk_size(chunk_size)
            .staging_bytes(staging_bytes)
            .rotation(rotation)
            .retention(retention)
            .pinning(self.pinning()?)
            .direct(!self.write.no_direct)
            .flow_index(!self.write.no_flow_index)
            .discard(self.discard)
            .disk_limit(size("--bench-disk-limit", &self.bench_disk_limit)?)
            .fixed_codec(self.bench_fixed_codec)
            .flush_interval(parse_seconds(
                "--flush-interval",
                self.write.flush_interval,
            )?)
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
        Ok(b.compressor_nice(self.compressor_nice))
    }

    fn format(&self) -> Result<Format, OptionsError> {
        match self.write.format.as_str() {
            "pcapng" => Ok(Format::Pcapng),
            "pcap" => Ok(Format::Pcap),
            other => Err(OptionsError::NotOneOf {
                flag: "--format",
                value: other.into(),
                expected: "pcapng, pcap",
            }),
        }
    }

    fn headers(&self) -> Result<Option<HeaderDepth>, OptionsError> {
        match self.headers.as_deref() {
            None => Ok(None),
            Some("transport") => Ok(Some(HeaderDepth::Transport)),
            Some("rpc") => Ok(Some(HeaderDepth::Rpc)),
            Some(other) => Err(OptionsError::NotOneOf {
                flag: "--headers",
                value: other.into(),
                expected: "transport, rpc",
            }),
        }
    }

    /// The cuts asked for; live capture cuts by size and time unless told otherwise (0
    /// turns a cut off).
    fn rotation(&self) -> Result<Rotation, OptionsError> {
        let live = self.is_live();
        Ok(Rotation {
            max_bytes: match size("--rotate-size", &self.write.rotate_size)? {
                Some(0) => None,
                None if live => Some(LIVE_ROTATE_SIZE),
                s => s,
            },
            interval_ns: match self.write.rotate_interval {
                Some(0) => None,
                None if live => Some(LIVE_ROTATE_INTERVAL_S * 1_000_000_000),
                s => s.map(|s| s * 1_000_000_000),
            },
        })
    }

    /// The limits retention keeps; live capture keeps some space free unless told
    /// otherwise (0 turns it off).
    fn retention(&self, store: &Path) -> Result<RetentionPolicy, OptionsError> {
        Ok(RetentionPolicy {
            max_bytes: size("--max-bytes", &self.max_bytes)?,
            min_free: match size("--min-free", &self.min_free)? {
                Some(0) => None,
                None if self.is_live() => live_min_free(store, self.dirs.first()),
                m => m,
            },
            min_keep: Duration::from_secs(self.min_keep),
        })
    }

    fn pinning(&self) -> Result<Pinning, OptionsError> {
        Ok(Pinning {
            capture: cpus("--pin-capture", &self.pin_capture)?,
            writers: cpus("--pin-writers", &self.pin_writers)?,
            compressors: cpus("--pin-compressors", &self.pin_compressors)?,
        })
    }

    /// What the manifest keeps of the options: the values in force, as the recorder uses
    /// them.
    fn manifest_options(
        &self,
        ladder: &CodecLadder,
        chunk_size: usize,
        staging_bytes: usize,
        rotation: &Rotation,
        retention: &RetentionPolicy,
    ) -> serde_json::Value {
        let live = self.is_live();
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
            "format": self.write.format,
            "codec": ladder.describe(),
            "chunk_size": chunk_size,
            "staging_bytes": staging_bytes,
            "rotate_size": rotation.max_bytes,
            "rotate_interval_s": self.write.rotate_interval,
            "max_bytes": retention.max_bytes,
            "min_free": retention.min_free,
            "direct": !self.write.no_direct,
            "flow_index": !self.write.no_flow_index,
            "pin_capture": self.pin_capture,
            "pin_writers": self.pin_writers,
            "pin_compressors": self.pin_compressors,
            "compressor_nice": self.compressor_nice,
            "headers": self.headers,
        });
        if live {
            options["threads"] = serde_json::json!(self.threads);
            options["filter"] = serde_json::json!(self.filter);
            options["snaplen"] = serde_json::json!(self.snaplen);
        }
        options
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
                compressor_nice: DEFAULT_COMPRESSOR_NICE,
                pinning: Pinning::default(),
                direct: true,
                flow_index: true,
                discard: false,
                disk_limit: None,
                sync_interval: None,
                fixed_codec: false,
                flush_interval: Duration::from_secs_f64(DEFAULT_FLUSH_INTERVAL_S),
                stats_interval: Duration::from_secs_f64(DEFAULT_STATS_INTERVAL_S),
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
        /// The compressors' nice value while capturing live (see `RecorderConfig`).
        compressor_nice: i32,
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
        assert_eq!(o.write.rotate_size.as_deref(), Some("8MiB"));
        assert!(o.write.no_direct);
        assert_eq!(
            o.write.chunk_size, "4MiB",
            "unset keys keep the flag's default"
        );
        let err = opts(serde_json::json!({"store": "s", "rotate_size": "1"})).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `rotate_size`"),
            "{err}"
        );
    }

    #[test]
    fn live_capture_gets_rotation_and_zero_turns_it_off() {
        let mut o = RecordOptions {
            store: Some("s".into()),
            interfaces: vec!["eth0".into()],
            min_free: Some("0".into()),
            ..Default::default()
        };
        let cfg = o.builder().unwrap().build();
        assert_eq!(cfg.rotation.max_bytes, Some(LIVE_ROTATE_SIZE));
        assert_eq!(cfg.rotation.interval_ns, Some(60_000_000_000));
        assert_eq!(cfg.retention.min_free, None);
        assert_eq!(cfg.options["source"], "live eth0");
        o.write.rotate_size = Some("0".into());
        o.write.rotate_interval = Some(0);
        let cfg = o.builder().unwrap().build();
        assert_eq!(cfg.rotation.max_bytes, None);
        assert_eq!(cfg.rotation.interval_ns, None);
        o.interfaces.clear();
        o.write.rotate_size = None;
        o.write.rotate_interval = None;
        let cfg = o.builder().unwrap().build();
        assert_eq!(
            cfg.rotation.max_bytes, None,
            "files and synthetic: no default cut"
        );
    }

    #[test]
    fn errors_name_the_option() {
        let base = RecordOptions {
            store: Some("s".into()),
            ..Default::default()
        };
        let cases: [(RecordOptions, &str); 5] = [
            (
                RecordOptions {
                    write: WriteOptions {
                        rotate_size: Some("lots".into()),
                        ..base.write.clone()
                    },
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
                    write: WriteOptions {
                        codec: "gzip".into(),
                        ..base.write.clone()
                    },
                    ..base.clone()
                },
                "--codec: unknown codec 'gzip': use raw, lz4, zstd or zstd:LEVEL (LEVEL -7..22)",
            ),
            (
                RecordOptions {
                    write: WriteOptions {
                        staging: Some("1MiB".into()),
                        ..base.write.clone()
                    },
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

    #[test]
    fn the_defaults_are_the_flags_and_agree_with_the_recorders() {
        let o = RecordOptions::default();
        assert_eq!(
            (o.threads, o.ring_block_size.as_str(), o.min_keep),
            (1, "4MiB", 600)
        );
        assert_eq!(o.write.codec, DEFAULT_CODEC);
        assert_eq!(o.write.format, "pcapng");
        assert_eq!(o.store, None);
        assert_eq!(
            parse_size("--chunk-size", &o.write.chunk_size).unwrap(),
            DEFAULT_CHUNK_SIZE as u64
        );
        // `merge` and `collect` start from the recorder's own defaults: the same.
        let from_flags = RecordOptions {
            store: Some("s".into()),
            ..o
        }
        .builder()
        .unwrap()
        .build();
        let recorder = RecorderConfig::builder("s".into()).build();
        assert_eq!(from_flags.chunk_size, recorder.chunk_size);
        assert_eq!(from_flags.ladder.describe(), recorder.ladder.describe());
        assert_eq!(from_flags.flush_interval, recorder.flush_interval);
        assert_eq!(from_flags.stats_interval, recorder.stats_interval);
        assert_eq!(from_flags.retention.min_keep, recorder.retention.min_keep);
    }
}
