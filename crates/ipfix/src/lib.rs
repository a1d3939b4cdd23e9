//! IPFIX (RFC 7011) messages carrying PSAMP packet reports (RFC 5476) with the data-link
//! information elements of RFC 7133: what `tapdeck export` sends and `tapdeck collect`
//! receives. No sockets here.
//!
//! - [`MessageBuilder`] (exporter): one message into a caller's buffer, up to a size limit:
//!   the templates ([`ie`] lists them), [`PacketReport`]s, [`ExporterStats`] and
//!   [`InterfaceInfo`] options records.
//! - [`Decoder`] (collector): strict parsing with a [`TemplateStore`] per (exporter, observation
//!   domain), yielding [`Record`]s that borrow the message.
//! - [`SequenceTracker`]: lost, reordered and duplicate records and exporter restarts.
//! - [`file`]: RFC 5655 files ([`write_message`], [`messages`], [`FileReader`]).
//! - [`time`]: the nanosecond timestamp encoding (rounded up, so truncating readers agree).
//!
//! Nothing here panics on input bytes, and nothing allocates in proportion to a length field.

pub mod builder;
pub mod decoder;
pub mod file;
pub mod ie;
pub mod sequence;
pub mod time;
pub mod wire;

pub use builder::{max_section_len, BuildError, Built, MessageBuilder};
pub use decoder::{Decoder, MessageInfo, Template, TemplateKind, TemplateLimits, TemplateStore};
pub use file::{messages, write_message, FileError, FileReader};
pub use sequence::{SequenceCounts, SequenceEvent, SequenceTracker, StreamState};
pub use wire::{read_header, set_sequence, MessageHeader};

/// The IANA port for IPFIX over UDP, TCP and SCTP.
pub const IPFIX_PORT: u16 = 4739;

/// Why a message was rejected. Offsets count from the start of the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("truncated {what} at offset {at}")]
    Truncated { what: &'static str, at: usize },
    #[error("invalid {what} at offset {at}")]
    Invalid { what: &'static str, at: usize },
    #[error("template limit reached: {limit} {what}")]
    TemplateLimit { what: &'static str, limit: usize },
}

impl Error {
    fn offset_by(self, base: usize) -> Error {
        match self {
            Error::Truncated { what, at } => Error::Truncated {
                what,
                at: at + base,
            },
            Error::Invalid { what, at } => Error::Invalid {
                what,
                at: at + base,
            },
            e => e,
        }
    }
}

/// One captured packet: the kept bytes and what the capture knew about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketReport<'a> {
    /// Capture time, nanoseconds since 1970 (UTC).
    pub time_ns: u64,
    /// The exporter's interface id (ingressInterface).
    pub interface: u32,
    /// The PSAMP selector that chose the packet; tapdeck sends ids up to 2^32 - 1.
    pub selector: u64,
    /// The frame's original length on the wire.
    pub frame_size: u64,
    /// The kept bytes from the start of the frame (its link-layer header on).
    pub frame_section: &'a [u8],
}

/// The exporter's own counts since it started (options template 258). Counters are totals,
/// so a lost statistics record costs nothing but freshness.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExporterStats {
    /// exportingProcessId (scope).
    pub exporting_process: u32,
    /// selectorId (scope).
    pub selector: u64,
    /// systemInitTimeMilliseconds: when the exporter started (0 if not sent). A new value
    /// means a restart, with sequence numbers from 0.
    pub start_time_ms: u64,
    /// exportedMessageTotalCount: messages sent before the one carrying this record.
    pub messages: u64,
    /// exportedFlowRecordTotalCount: data records (packet reports included) sent before it.
    pub records: u64,
    /// ignoredPacketTotalCount: packets the kernel saw but dropped before tapdeck got them
    /// (ring full).
    pub ignored_packets: u64,
    /// notSentPacketTotalCount: packets tapdeck received but did not send (batch staging full,
    /// send failures).
    pub not_sent_packets: u64,
    /// selectorIDTotalPktsObserved: packets the selector saw.
    pub observed_packets: u64,
    /// selectorIDTotalPktsSelected: packets it selected for export.
    pub selected_packets: u64,
}

/// A capture interface of the exporter (options template 259).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InterfaceInfo<'a> {
    /// The id packet reports carry in ingressInterface.
    pub id: u32,
    pub name: &'a str,
    pub description: &'a str,
    /// dataLinkFrameType: 1 for Ethernet ([`ie::FRAME_TYPE_ETHERNET`]).
    pub frame_type: u16,
}

/// A decoded data record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    Packet(PacketReport<'a>),
    ExporterStats(ExporterStats),
    Interface(InterfaceInfo<'a>),
}
