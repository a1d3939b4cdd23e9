//! The errors of exporting and collecting: each names the collector, the listening address
//! or the file it is about, and keeps the system's own error (in the message, as users
//! have always read it). They name no command-line flag: the binary words them (`--listen`,
//! `--tls-cert` and so on), as only it knows which flag gave the value.

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
    #[error("cannot open {}: {cause}", .path.display())]
    History {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("name at least one collector")]
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
    #[error("collector {to}: messages of {len} octets are too small (at least {min})")]
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
    /// The raw message file (RFC 5655) could not be created.
    #[error("{}: cannot create it: {cause}", .path.display())]
    IpfixFile {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("a collector needs at least one socket")]
    NoSockets,
    #[error("{listen}: the port is in use by another program; choose another port or stop it")]
    PortInUse { listen: SocketAddr },
    #[error("{listen}: no interface here has that address")]
    NoSuchAddress { listen: SocketAddr },
    #[error("{listen}: cannot listen there: {cause}")]
    Listen {
        listen: SocketAddr,
        cause: std::io::Error,
    },
    /// A TLS file that cannot be read or used.
    #[error("TLS {file} {}: {what}", .path.display())]
    TlsFile {
        file: TlsFile,
        path: PathBuf,
        what: String,
    },
    #[error("TLS key {} is not the key of the certificate in {}", .key.display(), .cert.display())]
    KeyMismatch { key: PathBuf, cert: PathBuf },
    /// The TLS library's own settings.
    #[error("TLS: {0}")]
    Tls(String),
    /// A collector named for TLS by something that cannot be a certificate's name.
    #[error("{host}: not a host name or address")]
    ServerName { host: String },
}

/// Which of one side's TLS files an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    /// Its own certificate chain.
    Cert,
    /// Its private key.
    Key,
    /// The CAs the exporter trusts for collectors' certificates.
    ServerCa,
    /// The CAs the collector trusts for exporters' (client) certificates.
    ClientCa,
}

impl std::fmt::Display for TlsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TlsFile::Cert => "certificate",
            TlsFile::Key => "key",
            TlsFile::ServerCa => "collector CA",
            TlsFile::ClientCa => "client CA",
        })
    }
}
