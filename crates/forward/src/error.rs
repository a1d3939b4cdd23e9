//! The errors of exporting and collecting: each names the collector, the listening address
//! or the file it is about, and keeps the system's own error (in the message, as users
//! have always read it).

use std::net::SocketAddr;
use std::path::PathBuf;

use tapdeck_capture::SourceError;

#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("cannot read {}: {cause}", .path.display())]
    LedgerRead {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{} is not a collector ledger ({cause}); move it away to start counting afresh", .path.display())]
    LedgerParse {
        path: PathBuf,
        cause: serde_json::Error,
    },
    #[error("cannot write {}: {cause}", .path.display())]
    LedgerWrite {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("name at least one collector (--to HOST:PORT)")]
    NoCollector,
    #[error("collector {to}: cannot send to it ({cause}); is it a broadcast address?")]
    CollectorRefused {
        to: SocketAddr,
        cause: std::io::Error,
    },
    #[error("collector {to}: unreachable from here ({cause}); check the address and the routes (`ip route get {}`)", .to.ip())]
    CollectorUnreachable {
        to: SocketAddr,
        cause: std::io::Error,
    },
    #[error("collector {to}: cannot learn the path MTU: {cause}")]
    PathMtu {
        to: SocketAddr,
        cause: std::io::Error,
    },
    #[error("collector {to}: messages of {len} octets are too small (at least {min}): raise --mtu or the path's MTU")]
    MessagesTooSmall {
        to: SocketAddr,
        len: usize,
        min: usize,
    },
    #[error("cannot start an export thread: {0}")]
    Thread(std::io::Error),
    #[error("an export thread panicked")]
    ThreadPanicked,
    /// A capture source failed while exporting.
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("--ipfix-file {}: cannot create it: {cause}", .path.display())]
    IpfixFile {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("--sockets must be at least 1")]
    NoSockets,
    #[error(
        "--listen {listen}: the port is in use by another program; choose another port or stop it"
    )]
    PortInUse { listen: SocketAddr },
    #[error("--listen {listen}: no interface here has that address")]
    NoSuchAddress { listen: SocketAddr },
    #[error("--listen {listen}: cannot listen there: {cause}")]
    Listen {
        listen: SocketAddr,
        cause: std::io::Error,
    },
    /// A TLS file or setting: the message names the option and the file.
    #[error("{0}")]
    Tls(String),
    #[error("--listen {listen}: {what}")]
    ListenOption { listen: String, what: String },
}
