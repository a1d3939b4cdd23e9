//! The recorder's errors: settings that do not parse (CPU lists, codec ladders, record
//! options) and a pinning the kernel refused. Each keeps the text the user gave and, where
//! there is one, the underlying cause.

use std::path::PathBuf;

use tapdeck_pcap::container::UnknownCodec;
use tapdeck_store::extract::ExtractError;
use tapdeck_store::read::FileError;

/// A setting that cannot be used as given.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("CPU range {part:?} runs backwards: write LOW-HIGH")]
    CpuRangeBackwards { part: String },
    #[error("CPU {cpu} does not exist: this machine has CPUs 0-{last}")]
    NoSuchCpu { cpu: usize, last: usize },
    #[error("empty CPU list {list:?}: give CPUs like 0,1 or 0-3")]
    EmptyCpuList { list: String },
    #[error("bad CPU list {list:?}: give CPUs like 0,1 or 0-3")]
    BadCpuList { list: String },
    /// The kernel's refusal is part of the message (it is logged, not chained).
    #[error("cannot pin to CPUs {cpus:?}: {cause}")]
    Pin {
        cpus: Vec<usize>,
        cause: std::io::Error,
    },
    #[error("bad threshold in '{part}': give a fraction of the pool, 0 to 1")]
    LadderThreshold { part: String },
    #[error("codec ladder '{spec}' names {codec} twice")]
    LadderCodecTwice { spec: String, codec: String },
    #[error("thresholds in '{spec}' must increase from rung to rung")]
    LadderThresholdsDecrease { spec: String },
    #[error("raw may appear once, as the last rung")]
    LadderRawTwice,
    #[error("in '{spec}', raw must be the last rung: nothing is cheaper")]
    LadderRawNotLast { spec: String },
    #[error(transparent)]
    Codec(#[from] UnknownCodec),
}

/// A record option (a `tapdeck record` flag, or the same key of a config file) that cannot
/// be used as given. `flag` is the option's name as a flag (`--rotate-size`); the key of a
/// config file is the same without the dashes (see [`OptionsError::key`]).
#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    /// A value that is wrong in itself: `--codec: …`, `--pin-capture: …`.
    #[error("{flag}: {cause}")]
    Invalid {
        flag: &'static str,
        cause: ConfigError,
    },
    #[error("{flag} {value}: not a size (e.g. 4MiB, 10G, 123456)")]
    NotASize {
        flag: &'static str,
        value: String,
        #[source]
        source: parse_size::Error,
    },
    #[error("{flag} must be a positive number of seconds")]
    NotSeconds { flag: &'static str },
    #[error("{flag} {value:?}: use one of {expected}")]
    NotOneOf {
        flag: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("--staging must hold at least two chunks ({need} bytes with --chunk-size {chunk})")]
    StagingTooSmall { need: usize, chunk: String },
    #[error("--ring-block-size must be under 4 GiB")]
    RingBlockTooLarge {
        #[source]
        source: std::num::TryFromIntError,
    },
    #[error("--store: say where the store is (a directory)")]
    NoStore,
    #[error("--chunk-size must be at least {min} bytes, to hold the largest packet")]
    ChunkTooSmall { min: usize },
    #[error("{flag} applies to live capture: add -i IF (`interface` in a config file)")]
    LiveOnly { flag: &'static str },
    #[error("{flag} applies to --synthetic")]
    SyntheticOnly { flag: &'static str },
}

impl OptionsError {
    /// The option's name as a flag, e.g. `--rotate-size`.
    pub fn flag(&self) -> &'static str {
        match self {
            OptionsError::Invalid { flag, .. }
            | OptionsError::NotASize { flag, .. }
            | OptionsError::NotSeconds { flag }
            | OptionsError::NotOneOf { flag, .. }
            | OptionsError::LiveOnly { flag }
            | OptionsError::SyntheticOnly { flag } => flag,
            OptionsError::StagingTooSmall { .. } => "--staging",
            OptionsError::RingBlockTooLarge { .. } => "--ring-block-size",
            OptionsError::NoStore => "--store",
            OptionsError::ChunkTooSmall { .. } => "--chunk-size",
        }
    }

    /// The option's name as a config file key, e.g. `rotate-size`.
    pub fn key(&self) -> &'static str {
        self.flag().trim_start_matches('-')
    }
}

/// Why `merge` refused its inputs or its output, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("name at least one store to merge")]
    NoInputs,
    #[error("{given} stores given; merge at most {max} at a time (merge merged stores for more)")]
    TooManyInputs { given: usize, max: usize },
    #[error("{}: not a store directory; name the --store directories of the recordings", .root.display())]
    NotAStore { root: PathBuf },
    #[error(transparent)]
    Store(#[from] FileError),
    /// An input store whose files cannot be surveyed.
    #[error("{cause}; run `tapdeck verify {}` to see what is damaged, or merge without that store", .root.display())]
    Survey { root: PathBuf, cause: FileError },
    #[error(transparent)]
    Plan(#[from] ExtractError),
    #[error("--out {} is one of the inputs; name a new directory", .out.display())]
    OutIsInput { out: PathBuf },
    #[error("--out {} already holds a store; name a new or empty directory", .out.display())]
    OutHoldsStore { out: PathBuf },
    /// The recorder stopped; what was merged is kept.
    #[error("merge stopped: {cause}; {} holds the packets merged before it, in complete files; \
             merge without the damaged store, or `tapdeck verify --repair` it first", .store.display())]
    Stopped { store: PathBuf, cause: RecordError },
    #[error("merge interrupted: {} holds the packets merged so far, in complete files (its \
             manifest says \"complete\": false); merge again into a new directory", .store.display())]
    Interrupted { store: PathBuf },
    /// The output's manifest cannot be read back (the merge section is added last).
    #[error("{}: {cause}", .path.display())]
    ManifestRead {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{}: {cause}", .path.display())]
    ManifestParse {
        path: PathBuf,
        cause: serde_json::Error,
    },
    /// Writing the merged store's manifest (the error names the file and the cause, so it
    /// is shown as the whole message, not chained as a source).
    #[error("{0}")]
    ManifestWrite(tapdeck_store::meta::WriteError),
    #[error("--offset {given:?}: {problem}; write STORE=±NANOSECONDS or with a unit, e.g. mon1=+1500 or mon1=-1.5ms")]
    Offset {
        given: String,
        problem: OffsetProblem,
    },
}

/// What is wrong with a `STORE=±NS` offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffsetProblem {
    #[error("no '='")]
    NoEquals,
    #[error("no store before '='")]
    NoStore,
    #[error(transparent)]
    Time(#[from] TimeError),
}

/// A signed time (`-1500`, `+2.5ms`, `50us`) that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("not a whole number of nanoseconds")]
    NotWholeNanos,
    #[error("not a number")]
    NotANumber,
    #[error("too large")]
    TooLarge,
}

/// Why a capture loop stopped before its source ended.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error(transparent)]
    Source(#[from] tapdeck_capture::SourceError),
    #[error(
        "{described} has {interfaces} interfaces, and classic pcap holds one: use --format pcapng"
    )]
    PcapOneInterface {
        described: String,
        interfaces: usize,
    },
    #[error("a packet is timed after 2106-02-07, past what classic pcap's 32-bit seconds hold: use --format pcapng")]
    PcapTimeLimit,
}

/// Why a recording could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot create store {}: {source}", .path.display())]
    CreateStore {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create data directory {}: {source}", .path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", .path.display())]
    Resolve {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Lock(#[from] tapdeck_store::lock::LockError),
    #[error("--chunk-size must be at least {min} bytes, to hold the largest packet")]
    ChunkTooSmall { min: usize },
    #[error("cannot list the store's files: {0}")]
    ListFiles(std::io::Error),
    #[error("the store cannot record within {limit}: only files retention may not delete are left (the 2 newest, or younger than --min-keep); free some space, raise the limit or lower --min-keep")]
    RetentionHolds { limit: &'static str },
    #[error("cannot allocate the staging pool ({bytes} bytes): {source}")]
    Staging {
        bytes: usize,
        source: std::io::Error,
    },
    /// Marking the data directories or writing the manifest (the error names the file and
    /// the cause, so it is shown as the whole message, not chained as a source).
    #[error("{0}")]
    Manifest(tapdeck_store::meta::WriteError),
    /// A capture loop stopped: its source failed, or the trace does not fit the format.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error("a {0} thread panicked")]
    Panicked(&'static str),
}
