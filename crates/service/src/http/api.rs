//! The JSON and data endpoints: `/metrics`, `/healthz`, `/api/v1/status`, `/api/v1/stats`,
//! `/api/v1/count`, `/api/v1/packets`, `/api/v1/files` and `/api/v1/info`. Queries take a
//! slot ([`Shared::queries`]) and run on blocking threads at idle priority
//! ([`crate::query`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};

use super::{json_error, Client, Shared};
use crate::auth::Identity;
use crate::query::{self, QueryError};
use crate::{health, history, logsafe};

/// Content type of the OpenMetrics text format (Prometheus asks for it and parses it).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic Prometheus text format, for everyone else.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(super) async fn metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
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

pub(super) async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    let health = health::check(&shared.service);
    let code = if health.healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(health)).into_response()
}

/// Everything `tapdeck status` shows: health, the counters of this moment, the data
/// directories and the retention horizon.
pub(super) async fn status(State(shared): State<Arc<Shared>>) -> Response {
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

/// `GET /api/v1/stats?start=&end=&step=`: seen, stored, bytes and drops by cause per step.
/// While recording, from the recorder's own counts; otherwise from the stores' files, as
/// listed by the overview (see [`crate::overview`]).
pub(super) async fn stats(
    State(shared): State<Arc<Shared>>,
    axum::extract::Query(req): axum::extract::Query<history::Request>,
) -> Response {
    let now = tapdeck_recorder::recorder::now_ns();
    let recording = shared
        .service
        .timeline
        .lock()
        .unwrap()
        .as_ref()
        .map(|timeline| {
            // In memory: a few thousand minutes at most, answered in place.
            history::answer(timeline, &req, now, "recording")
        });
    let answer = match recording {
        Some(a) => a,
        None => match shared.overview.get(&shared.service).await {
            Ok(listing) => match listing.timeline.as_ref() {
                Some(timeline) => history::answer(timeline, &req, now, "files"),
                // Recording began since the listing was read: ask again.
                None => return json_error(StatusCode::SERVICE_UNAVAILABLE, "try again"),
            },
            Err(e) => return json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        },
    };
    match answer {
        Ok(doc) => axum::Json(doc).into_response(),
        Err(e) => json_error(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

/// `GET /api/v1/count?start=&end=&filter=`: how many packets `/api/v1/packets` would
/// send, and how much it would read, without sending them.
pub(super) async fn count(
    State(shared): State<Arc<Shared>>,
    axum::Extension(Client(peer)): axum::Extension<Client>,
    axum::Extension(Identity { name: who, .. }): axum::Extension<Identity>,
    axum::extract::Query(req): axum::extract::Query<query::Request>,
) -> Response {
    let Ok(slot) = Arc::clone(&shared.queries).try_acquire_owned() else {
        return too_many(&shared);
    };
    let stores = shared.service.stores.read().unwrap().clone();
    let limits = shared.service.query_limits;
    let answer = tokio::task::spawn_blocking(move || {
        query::lower_priority();
        let started = std::time::Instant::now();
        let prepared = query::prepare(&stores, &req)?;
        let describe = prepared.describe.clone();
        let (read, skipped) = prepared.chunks();
        let mut counter = query::Counter::default();
        let result = query::run(prepared, &mut counter, limits.deadline());
        drop(slot);
        let seconds = started.elapsed().as_secs_f64();
        // Cut short by the time limit, the count is unknown (null), not a wrong number.
        let (packets, cut) = match result {
            Ok(r) => (Some(r.packets_written), None),
            Err(e) if query::reached_time_limit(&e) => (None, Some(query::TIME_LIMIT)),
            Err(e) => return Err(QueryError::Store(e.to_string())),
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
        Ok(Err(QueryError::BadRequest(m))) => json_error(StatusCode::BAD_REQUEST, m),
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

/// One `/api/v1/packets` request on its way to a blocking thread, with its slot.
struct PacketsJob {
    stores: Vec<std::path::PathBuf>,
    req: query::Request,
    limits: query::Limits,
    who: String,
    peer: SocketAddr,
    slot: OwnedSemaphorePermit,
}

/// `GET /api/v1/packets?start=&end=&filter=&format=`: streamed while it is read.
pub(super) async fn packets(
    State(shared): State<Arc<Shared>>,
    axum::Extension(Client(peer)): axum::Extension<Client>,
    axum::Extension(Identity { name: who, .. }): axum::Extension<Identity>,
    axum::extract::Query(req): axum::extract::Query<query::Request>,
) -> Response {
    let Ok(slot) = Arc::clone(&shared.queries).try_acquire_owned() else {
        tracing::info!(
            "query by {who} from {peer}: {}; refused, 0 bytes: {} queries running",
            req.describe(),
            shared.service.query_limits.concurrent
        );
        return too_many(&shared);
    };
    let job = PacketsJob {
        stores: shared.service.stores.read().unwrap().clone(),
        req,
        limits: shared.service.query_limits,
        who,
        peer,
        slot,
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let (ready_tx, ready_rx) = oneshot::channel();
    // Set once the whole answer is in the channel: an answer cut short (a limit, a read
    // error) ends the response with an error, so the client sees a broken transfer rather
    // than a file that looks complete.
    let complete = Arc::new(AtomicBool::new(false));
    let completed = Arc::clone(&complete);
    tokio::task::spawn_blocking(move || answer_packets(job, tx, ready_tx, &completed));
    match ready_rx.await {
        Ok(Ok(format)) => attachment(format, rx, complete),
        Ok(Err(QueryError::BadRequest(m))) => json_error(StatusCode::BAD_REQUEST, m),
        Ok(Err(e)) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(_) => json_error(StatusCode::INTERNAL_SERVER_ERROR, "the query failed"),
    }
}

/// On a blocking thread: plans the query (its format, or why it is refused, goes to
/// `ready`), then writes the answer into `tx`, setting `completed` if all of it got there.
fn answer_packets(
    job: PacketsJob,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    ready: oneshot::Sender<Result<tapdeck_pcap::Format, QueryError>>,
    completed: &AtomicBool,
) {
    let PacketsJob {
        stores,
        req,
        limits,
        who,
        peer,
        slot,
    } = job;
    query::lower_priority();
    let started = std::time::Instant::now();
    let prepared = match query::prepare(&stores, &req) {
        Ok(p) => p,
        Err(e) => {
            tracing::info!(
                "query by {who} from {peer}: {}; refused, 0 bytes: {}",
                req.describe(),
                logsafe::text(&e.to_string())
            );
            let _ = ready.send(Err(e));
            return;
        }
    };
    let describe = prepared.describe.clone();
    if ready.send(Ok(prepared.format())).is_err() {
        return;
    }
    let deadline = limits.deadline();
    let mut sink = query::Sink::new(tx, &limits, deadline);
    let result = query::run(prepared, &mut sink, deadline);
    let cut = sink
        .cut
        .map(|w| format!("; cut short: {w}"))
        .unwrap_or_default();
    let sent = sink.sent;
    if result.is_ok() && sink.cut.is_none() {
        completed.store(true, Ordering::SeqCst);
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
            "query by {who} from {peer}: {describe}; stopped after {sent} bytes: {}{cut}",
            logsafe::text(&e.to_string())
        ),
    }
}

/// The answer as a download: the pieces of `rx` as they come, ended by an error unless
/// `complete` says all of it came.
fn attachment(
    format: tapdeck_pcap::Format,
    mut rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    complete: Arc<AtomicBool>,
) -> Response {
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
                if complete.load(Ordering::SeqCst) {
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
pub(super) async fn files(State(shared): State<Arc<Shared>>) -> Response {
    match shared.overview.get(&shared.service).await {
        Ok(listing) => axum::Json(&listing.files).into_response(),
        Err(e) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `GET /api/v1/info`: the served stores in a few numbers.
pub(super) async fn info(State(shared): State<Arc<Shared>>) -> Response {
    match shared.overview.get(&shared.service).await {
        Ok(listing) => axum::Json(&listing.info).into_response(),
        Err(e) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
