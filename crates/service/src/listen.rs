//! Where the service listens: the address from `listen`, refused beyond loopback unless a
//! token is required, and the socket bound before capture starts (a taken port fails the
//! start, not a thread later).
//!
//! Which names and addresses the service answers to belongs here too: a check of a
//! request's `Host` against the listen address starts from [`check_listen`]'s address.

use std::net::{SocketAddr, TcpListener};

/// Why the service cannot listen where it is told to.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("listen = {listen:?} is not an address and port (e.g. 127.0.0.1:9780): {source}")]
    NotAnAddress {
        listen: String,
        source: std::net::AddrParseError,
    },
    #[error("listen = {listen} is reachable beyond this host, and neither token-file nor metrics-token-file is set: set one (a file of secret tokens) or listen on 127.0.0.1")]
    OpenBeyondLoopback { listen: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The address to listen on, refused beyond loopback without a token file.
pub fn check_listen(listen: &str, has_token: bool) -> Result<SocketAddr, ListenError> {
    let addr: SocketAddr = listen.parse().map_err(|source| ListenError::NotAnAddress {
        listen: listen.to_string(),
        source,
    })?;
    if !addr.ip().is_loopback() && !has_token {
        return Err(ListenError::OpenBeyondLoopback {
            listen: listen.to_string(),
        });
    }
    Ok(addr)
}

/// Binds `addr` (from [`check_listen`]) now, so that a taken port fails the start, not a
/// thread later.
pub fn bind(addr: SocketAddr) -> Result<TcpListener, ListenError> {
    let bind_error = |source| ListenError::Bind { addr, source };
    let listener = TcpListener::bind(addr).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    Ok(listener)
}
