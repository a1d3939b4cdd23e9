//! Connections: how many at once, how many from one address, and how long each may take
//! (the handshake, the request headers, the whole connection). Every connection is
//! accepted and timed here, before any request is read, so a limit on connections
//! (a body's read time, a shorter life for connections without a token) belongs here.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::Response;
use axum::Router;

use super::Client;
use crate::state::Service;

pub const MAX_CONNECTIONS: usize = 64;
/// Connections one client address may hold, so that one client (with or without a token:
/// the token is read with the request) cannot take every slot from Prometheus.
pub const MAX_PER_CLIENT: usize = 16;
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);

/// Accepts connections for ever, each served by hyper under the limits above; over TLS
/// when the service has TLS settings as the connection is accepted.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    service: Arc<Service>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let per_client = Arc::new(Mutex::new(HashMap::<IpAddr, usize>::new()));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, say: wait rather than spin.
                tracing::warn!("HTTP accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(client) = ClientSlot::take(&per_client, peer.ip()) else {
            drop(stream);
            continue;
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Full: this one is turned away, the ones being served keep going.
            drop(stream);
            continue;
        };
        let app = hyper_util::service::TowerToHyperService::new(
            router.clone().layer(axum::Extension(Client(peer))),
        );
        let tls = service.tls();
        tokio::spawn(async move {
            // The handshake holds its connection's slots: half-open handshakes cannot
            // crowd out the clients being served.
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, async move {
                match tls {
                    None => serve_connection(stream, app).await,
                    Some(tls) => {
                        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&tls.config));
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
                        {
                            Ok(Ok(stream)) => serve_connection(stream, app).await,
                            Ok(Err(e)) => tracing::info!("TLS handshake with {peer} failed: {e}"),
                            Err(_) => tracing::info!(
                                "TLS handshake with {peer} took over {} s: closed",
                                HANDSHAKE_TIMEOUT.as_secs()
                            ),
                        }
                    }
                }
            })
            .await;
            drop((slot, client));
        });
    }
}

/// One connection's requests, plain or TLS.
async fn serve_connection<I, S>(io: I, app: S)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = Response,
            Error = std::convert::Infallible,
        > + 'static,
    S::Future: Send + 'static,
{
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES)
        .serve_connection(hyper_util::rt::TokioIo::new(io), app)
        .await;
}

/// One of a client address's connections; released when dropped.
struct ClientSlot {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl ClientSlot {
    fn take(counts: &Arc<Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr) -> Option<Self> {
        let mut c = counts.lock().unwrap();
        let n = c.entry(ip).or_default();
        if *n >= MAX_PER_CLIENT {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            counts: Arc::clone(counts),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap();
        if let Some(n) = c.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.ip);
            }
        }
    }
}
