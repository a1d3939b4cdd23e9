//! Packet sources: where the recorder's packets come from.
//!
//! A source hands packets to a [`PacketSink`] in batches (a kernel ring block, a buffer of
//! a file) and must never block for long: the recorder polls it in a loop that also rotates
//! files and flushes partial chunks. Sources own no disk I/O beyond their input.

mod afpacket;
pub use tapdeck_pcap::compression;
mod file;
mod synthetic;

pub use afpacket::{
    drop_privileges, lookup_user, AfPacketConfig, AfPacketSource, KernelStats, DEFAULT_SNAPLEN,
};
pub use compression::{ArchiveError, Compression};
pub use file::{open_trace, open_trace_bytes, FileSource};
pub use synthetic::{
    parse_schedule, BadSchedule, Phase, SyntheticProfile, SyntheticSource, UnknownProfile,
};
pub use tapdeck_pcap::{Interface, Packet};

/// Receives the packets a source delivers; implemented by the recorder's capture loop.
pub trait PacketSink {
    fn packet(&mut self, packet: &Packet<'_>);

    /// The staging behind this sink, for a source that shares it out among its senders
    /// (the IPFIX collector). A sink without a pool reports one that is empty and never
    /// drains.
    fn backlog(&self) -> Backlog {
        Backlog::default()
    }
}

/// How full the staging pool behind a [`PacketSink`] is, and how much it has drained.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Backlog {
    /// Fraction of the pool's segments in use: being filled, compressed or written.
    pub fill: f64,
    /// Bytes of staged records the pool has handed on since it was made (segments
    /// emptied and returned): its drain, as a counter.
    pub drained_bytes: u64,
}

/// What one call to [`PacketSource::poll`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// Delivered some packets (possibly zero); call again.
    Delivered,
    /// Nothing arrived within the source's short wait; the recorder may do housekeeping.
    Idle,
    /// The source is exhausted (end of file, or synthetic count reached).
    End,
}

/// Per-interface counts from the source's own point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SourceCounters {
    /// Packets the source saw: for a live socket, what the kernel counted (delivered plus
    /// dropped); for a file, the records read.
    pub seen: u64,
    /// Packets the source lost before delivering them (kernel ring full).
    pub dropped: u64,
    /// Times the kernel froze the queue (TPACKET_V3 queue freezes).
    pub freezes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{path}: {source}")]
    Format {
        path: String,
        source: tapdeck_pcap::FormatError,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Other(String),
    /// A capture setting that cannot work, or a switch of user that failed.
    #[error(transparent)]
    Setting(#[from] SettingError),
}

/// A live capture's setting that cannot work. The messages name the value and the cause but
/// no command-line flag: the binary words them with the flag that gave the value.
#[derive(Debug, thiserror::Error)]
pub enum SettingError {
    #[error("name at least one interface to capture")]
    NoInterface,
    #[error("capture with at least one thread")]
    NoThreads,
    #[error("the snap length must be at least 1")]
    ZeroSnaplen,
    #[error("a ring block of {block} bytes must be a nonzero multiple of the page size ({page}) and of the frame size ({frame}), and a ring at least one block")]
    RingGeometry { block: u32, page: u32, frame: u32 },
    #[error("a ring of {blocks} blocks of {block} bytes is too large")]
    RingTooLarge { blocks: u32, block: u32 },
    #[error("a receive ring of {} MiB on {iface} ({blocks} blocks of {block} bytes) is more than half of this machine's memory", .bytes >> 20)]
    RingOverHalfMemory {
        iface: String,
        blocks: u32,
        block: u32,
        bytes: u64,
    },
    #[error("cannot allocate a {} MiB receive ring on {iface} ({blocks} blocks of {block} bytes: {cause})", .bytes >> 20)]
    RingAlloc {
        iface: String,
        blocks: u32,
        block: u32,
        bytes: u64,
        cause: std::io::Error,
    },
    #[error("{iface}: the kernel refused a ring of {blocks} blocks of {block} bytes ({cause}); it must stay under 4 GiB")]
    RingRefused {
        iface: String,
        blocks: u32,
        block: u32,
        cause: std::io::Error,
    },
    /// Several capture threads need a PACKET_FANOUT group.
    #[error("{iface}: cannot join a PACKET_FANOUT group: {cause}")]
    Fanout {
        iface: String,
        cause: std::io::Error,
    },
    #[error("cannot start libpcap: {0}")]
    Libpcap(String),
    #[error("capture filter '{expr}': {what}")]
    Filter { expr: String, what: String },
    #[error(
        "capture filter '{expr}' compiles to {insns} instructions, more than the kernel takes"
    )]
    FilterTooLong { expr: String, insns: usize },
    #[error("user {user:?}: not a user name")]
    NotAUserName { user: String },
    /// No such user, or the password database could not be read (`why`).
    #[error("user {user}: {why}")]
    NoSuchUser { user: String, why: String },
    #[error("user {user}: cannot {what}: {cause} (tapdeck must start as root to switch users)")]
    SwitchUser {
        user: String,
        what: &'static str,
        cause: std::io::Error,
    },
    #[error("user {user}: root privileges could be regained after switching; refusing to go on")]
    RootRegainable { user: String },
}

/// A source of packets for one stream of the recorder.
pub trait PacketSource: Send {
    /// The interfaces packets refer to by index. May grow while reading (a pcapng file can
    /// declare interfaces late); the recorder re-reads it when a packet names a new one.
    fn interfaces(&self) -> &[Interface];

    /// Delivers the next batch of packets to `sink`. Returns promptly (within about 100 ms)
    /// even when no packet arrives.
    fn poll<K: PacketSink>(&mut self, sink: &mut K) -> Result<Poll, SourceError>;

    /// Counters per interface, indexed as [`PacketSource::interfaces`].
    fn counters(&self) -> Vec<SourceCounters>;

    /// A short human description ("file capture.pcap", "synthetic 64-byte frames").
    fn describe(&self) -> String;

    /// Whether packets arrive whether or not the recorder keeps up (a link, or synthetic
    /// traffic offered on a schedule): then a full staging pool drops and counts. A source
    /// that can wait (a file) is instead made to wait, and loses nothing.
    fn live(&self) -> bool {
        true
    }

    /// Whether packets arrive into a buffer of the source's (a capture ring) whether or not
    /// it is read, and if so the longest one may sit there before a poll can see it (a ring
    /// block the kernel has not yet handed over). The recorder then reads such a source at
    /// once, without waiting for its compressors to warm up, and at a stop reads on until the
    /// buffer is empty, so that nothing the kernel accepted is lost. `None` for sources that
    /// make packets only when read (files, synthetic traffic).
    fn buffers_unread(&self) -> Option<std::time::Duration> {
        None
    }
}
