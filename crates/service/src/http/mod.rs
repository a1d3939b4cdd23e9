//! The service's HTTP server (axum on a one-thread tokio runtime, beside the recorder's
//! threads): `GET /metrics`, `GET /healthz`, `GET /api/v1/status`, the query API and the
//! web page. With a token file every route requires `Authorization: Bearer TOKEN`
//! ([`crate::auth`]); with `tls-cert` it is HTTPS ([`crate::tls`]).
//!
//! Hostile or broken clients cannot take it over: at most [`MAX_CONNECTIONS`] at once and
//! [`MAX_PER_CLIENT`] from one address, connections without a token short-lived and
//! closed first to make room for others, a TLS handshake within [`HANDSHAKE_TIMEOUT`],
//! request headers within [`HEADER_TIMEOUT`] and [`MAX_HEADER_BYTES`], bodies within
//! [`BODY_TIMEOUT`] and [`MAX_BODY_BYTES`], and no connection lives longer than
//! [`CONNECTION_LIFETIME`] (see [`conn`]). Wrong tokens slow their address down
//! ([`crate::backoff`]); a `Host` that is not the service's gets 421 ([`guard`]); the page
//! and the listings are read once for many requests ([`crate::overview`]).
//!
//! Layers, outside in: [`conn`] accepts and times connections and bounds bodies; [`guard`]
//! decides which requests reach a handler; [`api`] and [`browser`] answer them.

mod api;
mod browser;
mod conn;
mod guard;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use prometheus_client::registry::Registry;

pub use api::{OPENMETRICS, PROMETHEUS_TEXT};
pub use conn::{
    BODY_TIMEOUT, CONNECTION_LIFETIME, HANDSHAKE_TIMEOUT, HEADER_TIMEOUT, MAX_BODY_BYTES,
    MAX_CONNECTIONS, MAX_HEADER_BYTES, MAX_PER_CLIENT, MAX_UNPROVEN, UNPROVEN_LIFETIME,
};

use crate::state::Service;
use crate::web;

/// What every handler reads.
struct Shared {
    service: Arc<Service>,
    registry: Registry,
    /// Slots for queries running at once (see `query::Limits`).
    queries: Arc<tokio::sync::Semaphore>,
    /// The stores' listing, read once for many requests.
    overview: crate::overview::Overview,
}

/// The address a request came from (for the query log).
#[derive(Clone, Copy)]
struct Client(SocketAddr);

/// Serves on `listener` (from [`crate::listen::bind`]) from a thread of its own until the
/// process exits.
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
        overview: Default::default(),
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
                conn::serve(listener, router(shared), service).await;
            });
        })
}

fn router(shared: Arc<Shared>) -> Router {
    let protected = Router::new()
        .route("/", get(browser::page))
        .route("/assets/{name}", get(browser::asset))
        .route("/metrics", get(api::metrics))
        .route("/healthz", get(api::healthz))
        .route("/api/v1/status", get(api::status))
        .route("/api/v1/packets", get(api::packets))
        .route("/api/v1/count", get(api::count))
        .route("/api/v1/stats", get(api::stats))
        .route("/api/v1/files", get(api::files))
        .route("/api/v1/info", get(api::info))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&shared),
            guard::require_token,
        ));
    Router::new()
        .merge(protected)
        .route("/login", get(browser::login_form).post(browser::login))
        .route("/logout", post(browser::logout))
        // Browsers ask for it on every page; there is none.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        // Outermost last: the Host first, then the body, then (protected routes) the token.
        .layer(middleware::from_fn(conn::bounded_body))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&shared),
            guard::check_host,
        ))
        .layer(middleware::map_response(nosniff))
        .with_state(shared)
}

/// Every answer, JSON and errors included, is taken for what its type says.
async fn nosniff(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    response
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

fn json_error(code: StatusCode, message: impl Into<String>) -> Response {
    (
        code,
        axum::Json(serde_json::json!({ "error": message.into() })),
    )
        .into_response()
}
