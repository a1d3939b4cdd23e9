//! The service's HTTP server (axum on a one-thread tokio runtime, beside the recorder's
//! threads): `GET /metrics`, `GET /healthz` and `GET /api/v1/status`. With a token file
//! every route requires `Authorization: Bearer TOKEN` ([`crate::auth`]); with `tls-cert`
//! it is HTTPS ([`crate::tls`]).
//!
//! Hostile or broken clients cannot take it over: at most [`MAX_CONNECTIONS`] at once and
//! [`MAX_PER_CLIENT`] from one address (more are closed on accept), a TLS handshake within
//! [`HANDSHAKE_TIMEOUT`], request headers within [`HEADER_TIMEOUT`] and
//! [`MAX_HEADER_BYTES`], and no connection lives longer than [`CONNECTION_LIFETIME`].

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use prometheus_client::registry::Registry;

use crate::auth::{self, Identity};
use crate::health;
use crate::state::Service;
use crate::web;

/// Content type of the OpenMetrics text format (Prometheus asks for it and parses it).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic Prometheus text format, for everyone else.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub const MAX_CONNECTIONS: usize = 64;
/// Connections one client address may hold, so that one client (with or without a token:
/// the token is read with the request) cannot take every slot from Prometheus.
pub const MAX_PER_CLIENT: usize = 16;
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);

struct Shared {
    service: Arc<Service>,
    registry: Registry,
    /// Slots for queries running at once (see `query::Limits`).
    queries: Arc<tokio::sync::Semaphore>,
}

/// The address a request came from (for the query log).
#[derive(Clone, Copy)]
struct Client(SocketAddr);

/// The address to listen on, refused beyond loopback without a token file.
pub fn check_listen(listen: &str, has_token: bool) -> Result<SocketAddr, String> {
    let addr: SocketAddr = listen.parse().map_err(|e| {
        format!("listen = {listen:?} is not an address and port (e.g. 127.0.0.1:9780): {e}")
    })?;
    if !addr.ip().is_loopback() && !has_token {
        return Err(format!(
            "listen = {listen} is reachable beyond this host, and neither token-file nor metrics-token-file is set: set one (a file of secret tokens) or listen on 127.0.0.1"
        ));
    }
    Ok(addr)
}

/// Binds `addr` (from [`check_listen`]) now, so that a taken port fails the start, not a
/// thread later.
pub fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    Ok(listener)
}

/// Serves on `listener` from a thread of its own until the process exits.
pub fn spawn(
    listener: TcpListener,
    service: Arc<Service>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let registry = crate::metrics::registry(Arc::clone(&service));
    let queries = Arc::new(tokio::sync::Semaphore::new(service.query_limits.concurrent));
    let shared = Arc::new(Shared {
        service,
        registry,
        queries,
    });
    std::thread::Builder::new()
        .name("http".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("the HTTP server cannot start: {e}");
                    return;
                }
            };
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!("the HTTP server cannot start: {e}");
                        return;
                    }
                };
                let service = Arc::clone(&shared.service);
                serve(listener, router(shared), service).await;
            });
        })
}

/// Accepts connections for ever, each served by hyper under the limits above; over TLS
/// when the service has TLS settings as the connection is accepted.
async fn serve(listener: tokio::net::TcpListener, router: Router, service: Arc<Service>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let per_client = Arc::new(std::sync::Mutex::new(HashMap::<IpAddr, usize>::new()));
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
    counts: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl ClientSlot {
    fn take(counts: &Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr) -> Option<Self> {
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

fn router(shared: Arc<Shared>) -> Router {
    let protected = Router::new()
        .route("/", get(page))
        .route("/assets/{name}", get(asset))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/api/v1/status", get(status))
        .route("/api/v1/packets", get(packets))
        .route("/api/v1/count", get(count))
        .route("/api/v1/stats", get(stats))
        .route("/api/v1/files", get(files))
        .route("/api/v1/info", get(info))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&shared),
            require_token,
        ));
    Router::new()
        .merge(protected)
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        // Browsers ask for it on every page; there is none.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .with_state(shared)
}

/// Lets through the requests [`auth::authenticate`] names someone for, with their
/// [`Identity`] among the request's extensions; the rest get 401 and nothing that says
/// which tokens exist.
async fn require_token(
    State(shared): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    match auth::authenticate(&shared.service, request.headers()) {
        Some(identity) => {
            request.extensions_mut().insert(identity);
            next.run(request).await
        }
        // A browser asking for the page: the way in.
        None if request.uri().path() == "/" => {
            html(StatusCode::UNAUTHORIZED, web::login_page(None))
        }
        None => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
        )
            .into_response(),
    }
}

fn html(code: StatusCode, body: String) -> Response {
    let mut response = (
        code,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response();
    web::security_headers(response.headers_mut());
    response
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: String,
}

async fn login_form(State(shared): State<Arc<Shared>>) -> Response {
    if shared.service.tokens().is_empty() {
        return Redirect::to("/").into_response();
    }
    html(StatusCode::OK, web::login_page(None))
}

/// `POST /login`: a right token becomes a cookie; a wrong one gets the form again (401).
async fn login(
    State(shared): State<Arc<Shared>>,
    axum::Extension(Client(peer)): axum::Extension<Client>,
    axum::Form(form): axum::Form<LoginForm>,
) -> Response {
    let tokens = shared.service.tokens();
    if tokens.is_empty() {
        return Redirect::to("/").into_response();
    }
    let Some(name) = tokens.find(form.token.trim().as_bytes()) else {
        tracing::info!("web login from {peer} refused: wrong token");
        return html(
            StatusCode::UNAUTHORIZED,
            web::login_page(Some("That token is not one of the service's.")),
        );
    };
    tracing::info!("web login by {name} from {peer}");
    // Secure over TLS (which a reload may turn on or off).
    let secure = shared.service.tls().is_some();
    (
        [(
            header::SET_COOKIE,
            web::set_cookie(form.token.trim(), secure),
        )],
        Redirect::to("/"),
    )
        .into_response()
}

async fn logout() -> Response {
    (
        [(header::SET_COOKIE, web::clear_cookie())],
        Redirect::to("/login"),
    )
        .into_response()
}

/// `GET /`: the page (see [`web`]).
async fn page(State(shared): State<Arc<Shared>>) -> Response {
    let stores = shared.service.stores.read().unwrap().clone();
    let gathered = tokio::task::spawn_blocking(move || crate::query::overview(&stores)).await;
    let (info, files) = match gathered {
        Ok(Ok(both)) => both,
        Ok(Err(e)) => {
            return html(
                StatusCode::INTERNAL_SERVER_ERROR,
                web::escape(&e.to_string()),
            )
        }
        Err(_) => {
            return html(
                StatusCode::INTERNAL_SERVER_ERROR,
                "reading the store failed".into(),
            )
        }
    };
    let service = &shared.service;
    let health = health::check(service);
    let live = service.live();
    let body = web::page(&web::Page {
        health: &health,
        info: &info,
        files: &files,
        horizon_ns: live.as_ref().map(|l| l.horizon_ns()),
        recording: live.as_ref().map(|l| {
            let t = l.snapshot().totals;
            (t.seen, t.stored, t.dropped.total(), l.started_ns())
        }),
        dirs: live.as_ref().map(|l| l.dirs()).unwrap_or_default(),
        authenticated: !service.tokens().is_empty(),
    });
    html(StatusCode::OK, body)
}

/// The page's script, style and chart library, from the binary.
async fn asset(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    let (mime, body) = match name.as_str() {
        "uPlot.iife.min.js" => ("text/javascript; charset=utf-8", web::UPLOT_JS),
        "uPlot.min.css" => ("text/css; charset=utf-8", web::UPLOT_CSS),
        "tapdeck.js" => ("text/javascript; charset=utf-8", web::PAGE_JS),
        "tapdeck.css" => ("text/css; charset=utf-8", web::PAGE_CSS),
        _ => return (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    };
    let mut response = (
        [
            (header::CONTENT_TYPE, mime),
            (header::CACHE_CONTROL, "private, max-age=3600"),
        ],
        body,
    )
        .into_response();
    web::security_headers(response.headers_mut());
    response
}

/// `GET /api/v1/stats?start=&end=&step=`: seen, stored, bytes and drops by cause per step.
async fn stats(
    State(shared): State<Arc<Shared>>,
    axum::extract::Query(req): axum::extract::Query<crate::history::Request>,
) -> Response {
    let service = Arc::clone(&shared.service);
    let answer = tokio::task::spawn_blocking(move || {
        let now = tapdeck_recorder::recorder::now_ns();
        if let Some(timeline) = service.timeline.lock().unwrap().as_ref() {
            return crate::history::answer(timeline, &req, now, "recording");
        }
        let mut all = crate::history::Timeline::default();
        for store in service.stores.read().unwrap().iter() {
            all.merge(&crate::history::Timeline::read(store));
        }
        crate::history::answer(&all, &req, now, "files")
    })
    .await;
    match answer {
        Ok(Ok(doc)) => axum::Json(doc).into_response(),
        Ok(Err(e)) => json_error(StatusCode::BAD_REQUEST, e),
        Err(_) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "reading the timeline failed",
        ),
    }
}

/// `GET /api/v1/count?start=&end=&filter=`: how many packets `/api/v1/packets` would
/// send, and how much it would read, without sending them.
async fn count(
    State(shared): State<Arc<Shared>>,
    axum::Extension(Client(peer)): axum::Extension<Client>,
    axum::Extension(Identity { name: who }): axum::Extension<Identity>,
    axum::extract::Query(req): axum::extract::Query<crate::query::Request>,
) -> Response {
    let Ok(slot) = Arc::clone(&shared.queries).try_acquire_owned() else {
        return too_many(&shared);
    };
    let stores = shared.service.stores.read().unwrap().clone();
    let limits = shared.service.query_limits;
    let answer = tokio::task::spawn_blocking(move || {
        crate::query::lower_priority();
        let started = std::time::Instant::now();
        let prepared = crate::query::prepare(&stores, &req)?;
        let describe = prepared.describe.clone();
        let (read, skipped) = prepared.chunks();
        let mut counter = crate::query::Counter::default();
        let result = crate::query::run(prepared, &mut counter, limits.deadline());
        drop(slot);
        let seconds = started.elapsed().as_secs_f64();
        // Cut short by the time limit, the count is unknown (null), not a wrong number.
        let (packets, cut) = match result {
            Ok(r) => (Some(r.packets_written), None),
            Err(e) if e.contains(crate::query::TIME_LIMIT) => (None, Some(crate::query::TIME_LIMIT)),
            Err(e) => return Err(crate::query::QueryError::Store(e)),
        };
        tracing::info!(
            "count by {who} from {peer}: {describe}; {packets:?} packets, {} bytes in {seconds:.2} s{}",
            counter.bytes,
            cut.map(|w| format!("; cut short: {w}")).unwrap_or_default()
        );
        Ok(serde_json::json!({
            "packets": packets, "bytes": counter.bytes, "chunks_read": read,
            "chunks_skipped": skipped, "seconds": seconds,
            "complete": cut.is_none(), "cut": cut,
        }))
    })
    .await;
    match answer {
        Ok(Ok(doc)) => axum::Json(doc).into_response(),
        Ok(Err(crate::query::QueryError::BadRequest(m))) => json_error(StatusCode::BAD_REQUEST, m),
        Ok(Err(e)) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(_) => json_error(StatusCode::INTERNAL_SERVER_ERROR, "the count failed"),
    }
}

fn too_many(shared: &Shared) -> Response {
    json_error(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "{} queries are running, the most at once: try again shortly",
            shared.service.query_limits.concurrent
        ),
    )
}

async fn metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    // A few locks and a statvfs per data directory: cheap enough to do in place.
    match crate::metrics::encode(&shared.registry) {
        Ok(text) if openmetrics => ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        Ok(text) => (
            [(header::CONTENT_TYPE, PROMETHEUS_TEXT)],
            crate::metrics::to_prometheus_text(&text),
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    let health = health::check(&shared.service);
    let code = if health.healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(health)).into_response()
}

fn json_error(code: StatusCode, message: impl Into<String>) -> Response {
    (
        code,
        axum::Json(serde_json::json!({ "error": message.into() })),
    )
        .into_response()
}

/// `GET /api/v1/packets?start=&end=&filter=&format=`: streamed while it is read.
async fn packets(
    State(shared): State<Arc<Shared>>,
    axum::Extension(Client(peer)): axum::Extension<Client>,
    axum::Extension(Identity { name: who }): axum::Extension<Identity>,
    axum::extract::Query(req): axum::extract::Query<crate::query::Request>,
) -> Response {
    let Ok(slot) = Arc::clone(&shared.queries).try_acquire_owned() else {
        tracing::info!(
            "query by {who} from {peer}: filter {:?}; refused, 0 bytes: {} queries running",
            req.filter.as_deref().unwrap_or(""),
            shared.service.query_limits.concurrent
        );
        return too_many(&shared);
    };
    let stores = shared.service.stores.read().unwrap().clone();
    let limits = shared.service.query_limits;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    // Set once the whole answer is in the channel: an answer cut short (a limit, a read
    // error) ends the response with an error, so the client sees a broken transfer rather
    // than a file that looks complete.
    let complete = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let completed = Arc::clone(&complete);
    tokio::task::spawn_blocking(move || {
        crate::query::lower_priority();
        let started = std::time::Instant::now();
        let prepared = match crate::query::prepare(&stores, &req) {
            Ok(p) => p,
            Err(e) => {
                tracing::info!(
                    "query by {who} from {peer}: window {}..{}, filter {:?}; refused, 0 bytes: {e}",
                    req.start.as_deref().unwrap_or("start"),
                    req.end.as_deref().unwrap_or("end"),
                    req.filter.as_deref().unwrap_or("")
                );
                let _ = ready_tx.send(Err(e));
                return;
            }
        };
        let describe = prepared.describe.clone();
        let format = prepared.format();
        if ready_tx.send(Ok(format)).is_err() {
            return;
        }
        let deadline = limits.deadline();
        let mut sink = crate::query::Sink::new(tx, &limits, deadline);
        let result = crate::query::run(prepared, &mut sink, deadline);
        let cut = sink
            .cut
            .map(|w| format!("; cut short: {w}"))
            .unwrap_or_default();
        let sent = sink.sent;
        if result.is_ok() && sink.cut.is_none() {
            completed.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        // The slot is free before the client sees the end (the sink's channel closing):
        // a client that asks again at once finds it free.
        drop(slot);
        drop(sink);
        match result {
            Ok(r) => tracing::info!(
                "query by {who} from {peer}: {describe}; {} packets, {} bytes in {:.2} s{cut}",
                r.packets_written,
                sent,
                started.elapsed().as_secs_f64()
            ),
            Err(e) => tracing::warn!(
                "query by {who} from {peer}: {describe}; stopped after {sent} bytes: {e}{cut}"
            ),
        }
    });
    let format = match ready_rx.await {
        Ok(Ok(format)) => format,
        Ok(Err(crate::query::QueryError::BadRequest(m))) => {
            return json_error(StatusCode::BAD_REQUEST, m)
        }
        Ok(Err(e)) => return json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(_) => return json_error(StatusCode::INTERNAL_SERVER_ERROR, "the query failed"),
    };
    let (mime, ext) = match format {
        tapdeck_pcap::Format::Pcap => ("application/vnd.tcpdump.pcap", "pcap"),
        tapdeck_pcap::Format::Pcapng => ("application/x-pcapng", "pcapng"),
    };
    let mut ended = false;
    let stream = futures_util::stream::poll_fn(move |cx| {
        if ended {
            return std::task::Poll::Ready(None);
        }
        match rx.poll_recv(cx) {
            std::task::Poll::Ready(None) => {
                ended = true;
                if complete.load(std::sync::atomic::Ordering::SeqCst) {
                    std::task::Poll::Ready(None)
                } else {
                    std::task::Poll::Ready(Some(Err(std::io::Error::other(
                        "the answer was cut short (see the service's log)",
                    ))))
                }
            }
            other => other,
        }
    });
    (
        [
            (header::CONTENT_TYPE, mime.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"tapdeck.{ext}\""),
            ),
        ],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

/// `GET /api/v1/files`: the served stores' files with their time ranges and counts.
async fn files(State(shared): State<Arc<Shared>>) -> Response {
    let stores = shared.service.stores.read().unwrap().clone();
    match tokio::task::spawn_blocking(move || crate::query::files(&stores)).await {
        Ok(Ok(list)) => axum::Json(list).into_response(),
        Ok(Err(e)) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(_) => json_error(StatusCode::INTERNAL_SERVER_ERROR, "listing failed"),
    }
}

/// `GET /api/v1/info`: the served stores in a few numbers.
async fn info(State(shared): State<Arc<Shared>>) -> Response {
    let stores = shared.service.stores.read().unwrap().clone();
    match tokio::task::spawn_blocking(move || crate::query::info(&stores)).await {
        Ok(Ok(doc)) => axum::Json(doc).into_response(),
        Ok(Err(e)) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(_) => json_error(StatusCode::INTERNAL_SERVER_ERROR, "info failed"),
    }
}

/// Everything `tapdeck status` shows: health, the counters of this moment, the data
/// directories and the retention horizon.
async fn status(State(shared): State<Arc<Shared>>) -> Response {
    let service = &shared.service;
    let health = health::check(service);
    let mut body = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "health": health,
    });
    if let Some(live) = service.live() {
        let dirs: Vec<_> = live
            .dirs()
            .into_iter()
            .map(|d| {
                serde_json::json!({
                    "path": d.path, "up": d.up, "free_bytes": d.free_bytes, "size_bytes": d.size_bytes,
                })
            })
            .collect();
        body["stats"] = serde_json::to_value(live.snapshot()).unwrap_or_default();
        body["data_dirs"] = serde_json::Value::from(dirs);
        body["horizon_ns"] = serde_json::Value::from(live.horizon_ns());
        body["started_ns"] = serde_json::Value::from(live.started_ns());
    }
    axum::Json(body).into_response()
}
