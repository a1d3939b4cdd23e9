//! Header forwarding over UDP, TCP or TLS, the socket side of `tapdeck export` and `tapdeck collect`
//! (the IPFIX format itself is `tapdeck-ipfix`).
//!
//! - [`export`]: an [`export::Exporter`] per capture thread turns packets into PSAMP packet
//!   reports in IPFIX messages sized to the path MTU, balanced over collectors by the
//!   symmetric flow hash (or round-robin per batch), sent with `sendmmsg`; templates and the
//!   exporter's own counts go out on a timer. A collector that stops answering is counted.
//! - [`collect`]: a [`collect::CollectorSource`] per SO_REUSEPORT socket is a
//!   `PacketSource` for the recorder, so collected packets land in a normal store;
//!   [`collect::Intake`] is its pure, fuzzed core.
//! - [`tcp`], [`tls`]: IPFIX over TCP and TLS (client certificates): the exporter's
//!   acknowledged, reconnecting [`tcp::StreamLink`] and the collector's [`tcp::StreamListener`].
//! - [`ledger`]: loss, reordering, duplicates and restarts per exporter and observation
//!   domain, saved in the store so a restarted collector counts what it missed.
//! - [`journal`]: the ledger saved once the packets it counts are durable, and its history
//!   beside the store's stats.
//! - [`share`]: each exporter's share of a collector's staging pool; under pressure the
//!   exporters above it are shed first, and it is counted as their own loss.

pub mod collect;
pub mod error;
pub mod export;
pub mod journal;
pub mod ledger;
pub mod share;
pub mod tcp;
pub mod tls;
pub mod udp;

pub use collect::{
    CollectorSource, Intake, InterfaceTable, LiveStream, MessageFile, Outcome, Outputs,
};
pub use error::ForwardError;
pub use export::{Balance, ExportConfig, ExportStats, LinkCounts};
pub use ledger::{Ledger, LedgerFile, StreamLedger, LEDGER_FILE};
