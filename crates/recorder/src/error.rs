//! The recorder's errors: settings that do not parse (CPU lists, codec ladders, record
//! options) and a pinning the kernel refused. Each keeps the text the user gave and, where
//! there is one, the underlying cause.

use tapdeck_pcap::container::UnknownCodec;

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
}

impl OptionsError {
    /// The option's name as a flag, e.g. `--rotate-size`.
    pub fn flag(&self) -> &'static str {
        match self {
            OptionsError::Invalid { flag, .. }
            | OptionsError::NotASize { flag, .. }
            | OptionsError::NotSeconds { flag }
            | OptionsError::NotOneOf { flag, .. } => flag,
            OptionsError::StagingTooSmall { .. } => "--staging",
            OptionsError::RingBlockTooLarge { .. } => "--ring-block-size",
            OptionsError::NoStore => "--store",
        }
    }

    /// The option's name as a config file key, e.g. `rotate-size`.
    pub fn key(&self) -> &'static str {
        self.flag().trim_start_matches('-')
    }
}
