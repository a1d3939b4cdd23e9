//! Connections: how many at once, how many from one address, and how long each may take
//! (the handshake, the request headers and body, the whole connection). Every connection
//! is accepted and timed here, before any request is read.
//!
//! A connection starts *unproven*: it lives at most [`UNPROVEN_LIFETIME`], and unproven
//! connections hold at most [`MAX_UNPROVEN`] of the [`MAX_CONNECTIONS`] slots. When the
//! slots (or an address's [`MAX_PER_CLIENT`]) are full, the oldest unproven connection is
//! closed to let the new one in. A request that shows a valid token (or a session) proves
//! its connection ([`Standing::prove`]): it then lives up to [`CONNECTION_LIFETIME`] and is
//! never closed for another. So sockets that connect and hang (slow headers, slow bodies,
//! half-open TLS) cannot keep a client with a token out: it gets in, proves itself with its
//! first request, and stays.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::sync::oneshot;

use super::Client;
use crate::listen::client_key;
use crate::state::Service;

pub const MAX_CONNECTIONS: usize = 64;
/// Slots unproven connections may hold: the rest are kept for clients with a token.
pub const MAX_UNPROVEN: usize = 48;
/// Connections one client address (an IPv6 /64) may hold, so that one client cannot take
/// every slot from Prometheus.
pub const MAX_PER_CLIENT: usize = 16;
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// A request's body must be in within this of its headers (only `/login`'s form has one).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(5);
pub const MAX_BODY_BYTES: usize = 4096;
pub const UNPROVEN_LIFETIME: Duration = Duration::from_secs(15);
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);

/// Accepts connections for ever, each served by hyper under the limits above; over TLS
/// when the service has TLS settings as the connection is accepted.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    service: Arc<Service>,
) {
    let table = Arc::new(Table::default());
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
        let Some(admitted) = table.admit(client_key(peer.ip())) else {
            // Full of proven connections: this one is turned away, the ones being served
            // keep going.
            drop(stream);
            continue;
        };
        let app = hyper_util::service::TowerToHyperService::new(
            router
                .clone()
                .layer(axum::Extension(Client(peer)))
                .layer(axum::Extension(admitted.standing.clone())),
        );
        let tls = service.tls();
        tokio::spawn(async move {
            let Admitted {
                standing,
                closed,
                release,
            } = admitted;
            // The handshake holds its connection's slots: half-open handshakes are
            // unproven connections like any other.
            let work = async move {
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
            };
            let lifetime = async {
                tokio::time::sleep(UNPROVEN_LIFETIME).await;
                if standing.proven() {
                    tokio::time::sleep(CONNECTION_LIFETIME.saturating_sub(UNPROVEN_LIFETIME)).await;
                }
            };
            tokio::select! {
                _ = work => {}
                _ = closed => {}
                _ = lifetime => {}
            }
            drop(release);
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

/// Reads a request's body in full, within [`BODY_TIMEOUT`] and [`MAX_BODY_BYTES`], before
/// any handler sees the request: a body that trickles or never comes gets 408, one too big
/// 413, and either closes the connection (hyper would otherwise wait to drain it).
pub(super) async fn bounded_body(request: Request, next: Next) -> Response {
    let headers = request.headers();
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let chunked = headers.contains_key(header::TRANSFER_ENCODING);
    if !chunked && length.unwrap_or(0) == 0 {
        return next.run(request).await;
    }
    if length.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return closing(StatusCode::PAYLOAD_TOO_LARGE, "the body is too large\n");
    }
    let (parts, body) = request.into_parts();
    let read = axum::body::to_bytes(body, MAX_BODY_BYTES);
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
                .await
        }
        Ok(Err(_)) => closing(StatusCode::PAYLOAD_TOO_LARGE, "the body is too large\n"),
        Err(_) => closing(
            StatusCode::REQUEST_TIMEOUT,
            "the body did not arrive in time\n",
        ),
    }
}

/// An answer after which the connection closes.
fn closing(code: StatusCode, text: &'static str) -> Response {
    let mut r = (code, text).into_response();
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// What a request knows of its connection: it can prove it.
#[derive(Clone)]
pub(super) struct Standing {
    id: u64,
    proven: Arc<AtomicBool>,
    table: Arc<Table>,
}

impl Standing {
    /// The connection carried a request with a valid token or session: it keeps its slot.
    pub(super) fn prove(&self) {
        if !self.proven.swap(true, Ordering::SeqCst) {
            if let Some(c) = self.table.conns.lock().unwrap().get_mut(&self.id) {
                c.proven = true;
            }
        }
    }

    fn proven(&self) -> bool {
        self.proven.load(Ordering::SeqCst)
    }
}

/// The open connections, oldest first.
#[derive(Default)]
struct Table {
    conns: Mutex<BTreeMap<u64, Conn>>,
    next: std::sync::atomic::AtomicU64,
}

struct Conn {
    key: IpAddr,
    proven: bool,
    /// Dropped to close the connection.
    _close: oneshot::Sender<()>,
}

/// A connection let in: its standing, the signal that closes it, and its slot.
struct Admitted {
    standing: Standing,
    closed: oneshot::Receiver<()>,
    release: Release,
}

/// Frees the connection's slot when dropped.
struct Release {
    id: u64,
    table: Arc<Table>,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.table.conns.lock().unwrap().remove(&self.id);
    }
}

impl Table {
    /// Lets a connection from `key` in, closing the oldest unproven connection (of that
    /// address, when it is the address that is full) to make room; `None` when only
    /// proven connections hold the slots.
    fn admit(self: &Arc<Self>, key: IpAddr) -> Option<Admitted> {
        let mut conns = self.conns.lock().unwrap();
        if conns.values().filter(|c| c.key == key).count() >= MAX_PER_CLIENT
            && !close_oldest_unproven(&mut conns, |c| c.key == key)
        {
            return None;
        }
        let unproven = conns.values().filter(|c| !c.proven).count();
        if (conns.len() >= MAX_CONNECTIONS || unproven >= MAX_UNPROVEN)
            && !close_oldest_unproven(&mut conns, |_| true)
        {
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (close, closed) = oneshot::channel();
        conns.insert(
            id,
            Conn {
                key,
                proven: false,
                _close: close,
            },
        );
        Some(Admitted {
            standing: Standing {
                id,
                proven: Arc::new(AtomicBool::new(false)),
                table: Arc::clone(self),
            },
            closed,
            release: Release {
                id,
                table: Arc::clone(self),
            },
        })
    }
}

/// Closes the oldest unproven connection that `which` picks (its entry goes now, so its
/// slot is free at once); whether there was one.
fn close_oldest_unproven(conns: &mut BTreeMap<u64, Conn>, which: impl Fn(&Conn) -> bool) -> bool {
    let oldest = conns
        .iter()
        .find(|(_, c)| !c.proven && which(c))
        .map(|(id, _)| *id);
    oldest.is_some_and(|id| conns.remove(&id).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn open(table: &Table, a: &Admitted) -> bool {
        table.conns.lock().unwrap().contains_key(&a.standing.id)
    }

    #[test]
    fn unproven_connections_make_room_and_proven_ones_keep_their_slots() {
        let table = Arc::new(Table::default());
        let mut held = Vec::new();
        // An address fills its share; its next connection closes its oldest.
        for _ in 0..MAX_PER_CLIENT {
            held.push(table.admit(key("192.0.2.1")).unwrap());
        }
        held.push(table.admit(key("192.0.2.1")).unwrap());
        let mut first = held.remove(0);
        assert!(!open(&table, &first));
        assert!(first.closed.try_recv().is_err(), "told to close");
        assert!(held.iter().all(|a| open(&table, a)));
        // Other addresses fill the unproven share; every new one closes the oldest.
        for i in 0..MAX_CONNECTIONS {
            held.push(
                table
                    .admit(key(&format!("192.0.2.{}", 10 + i / 10)))
                    .unwrap(),
            );
        }
        assert_eq!(table.conns.lock().unwrap().len(), MAX_UNPROVEN);
        assert!(open(&table, held.last().unwrap()), "the newest got in");
        // Proven connections are never closed for another; when they hold every slot, a
        // new one is turned away.
        held.retain(|a| open(&table, a));
        for a in &held {
            a.standing.prove();
        }
        for _ in MAX_UNPROVEN..MAX_CONNECTIONS {
            let a = table.admit(key("198.51.100.1")).unwrap();
            a.standing.prove();
            held.push(a);
        }
        assert!(held.iter().all(|a| open(&table, a)));
        assert!(
            table.admit(key("198.51.100.2")).is_none(),
            "full of proven ones"
        );
        // A slot freed is a slot for the next.
        drop(held.pop());
        assert!(table.admit(key("198.51.100.2")).is_some());
    }
}
