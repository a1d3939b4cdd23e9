//! What a request must show before a handler sees it, as layers of the router:
//!
//! - [`check_host`] (every route): a `Host` the service answers to ([`crate::listen::Hosts`]),
//!   else 421, against DNS rebinding.
//! - [`require_token`] (every route but the login form's): a token, as a bearer header, or a
//!   session ([`crate::auth::authenticate`] decides), else 401. A token is checked in its
//!   address's turn ([`crate::backoff`]); a session must come from the service's own pages
//!   ([`session::cross_site`]), else 403; the metrics token opens only its routes, else 403. A request
//!   let through proves its connection ([`super::conn::Standing`]).

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::conn::Standing;
use super::{html, json_error, Client, Shared};
use crate::auth::{self, Verdict};
use crate::backoff::Episode;
use crate::listen::client_key;
use crate::state::Service;
use crate::{logsafe, session, web};

/// Answers 421 to a request whose `Host` the service does not answer to.
pub(super) async fn check_host(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request.headers().get(header::HOST).map(|v| v.as_bytes());
    if shared.service.hosts().admits(host) {
        return next.run(request).await;
    }
    // Debug only: anyone can send these, and the answer says what to do.
    tracing::debug!(
        "refused a request for Host {}: not a name of this service",
        logsafe::text(&String::from_utf8_lossy(host.unwrap_or_default()))
    );
    (
        StatusCode::MISDIRECTED_REQUEST,
        "this service answers to localhost, loopback addresses and its listen address \
         (a name in Host that is none of these is refused against DNS rebinding; add it \
         to allowed-hosts)\n",
    )
        .into_response()
}

/// Lets through the requests [`auth::authenticate`] names someone for, with their
/// [`auth::Identity`] among the request's extensions; the rest get 401 and nothing that says
/// which tokens exist, or 403 (a cross-site session, the metrics token elsewhere).
pub(super) async fn require_token(
    State(shared): State<Arc<Shared>>,
    axum::Extension(Client(peer)): axum::Extension<Client>,
    axum::Extension(standing): axum::Extension<Standing>,
    mut request: Request,
    next: Next,
) -> Response {
    let service = &shared.service;
    let tokens = service.tokens();
    let key = client_key(peer.ip());
    let turn = match auth::bearer(request.headers()) {
        Some(_) if !tokens.is_empty() => Some(service.backoff.turn(key).await),
        _ => None,
    };
    let secure = service.tls().is_some();
    let identity = match auth::authenticate(&tokens, &service.sessions, request.headers(), secure) {
        Verdict::Open(identity) | Verdict::Token(identity) => identity,
        Verdict::Session(identity) => {
            if let Some(why) = session::cross_site(request.headers(), secure) {
                tracing::info!("refused {}'s session from {peer}: {why}", identity.name);
                return forbidden(request.uri().path(), "a request from another site");
            }
            identity
        }
        Verdict::WrongToken => {
            wrong_token(service, key, peer);
            return unauthorized(request.uri().path());
        }
        Verdict::Nobody => return unauthorized(request.uri().path()),
    };
    drop(turn);
    let path = request.uri().path();
    if !identity.scope.allows(path) {
        return forbidden(
            path,
            "the metrics token opens only /metrics and /healthz: use a token of token-file",
        );
    }
    standing.prove();
    request.extensions_mut().insert(identity);
    next.run(request).await
}

/// Counts a wrong token from `key` (see [`crate::backoff`]); says so in the log once an
/// episode begins.
pub(super) fn wrong_token(service: &Service, key: IpAddr, peer: std::net::SocketAddr) {
    if let Episode::Begins { failures } = service.backoff.failed(key) {
        // The address as counted: an IPv6 client is its /64.
        let who = match key {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("{v6}/64"),
        };
        tracing::warn!(
            "wrong tokens from {who} (last from {peer}): {failures} in a row; answering it \
             slower (each try waits up to {} s, one at a time) until it stops for {} minutes",
            crate::backoff::MAX_DELAY.as_secs(),
            crate::backoff::FORGET.as_secs() / 60
        );
    }
}

fn unauthorized(path: &str) -> Response {
    // A browser asking for the page: the way in.
    if path == "/" {
        return html(StatusCode::UNAUTHORIZED, web::login_page(None));
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
    )
        .into_response()
}

fn forbidden(path: &str, why: &str) -> Response {
    if path == "/" {
        return html(StatusCode::FORBIDDEN, web::login_page(Some(why)));
    }
    json_error(StatusCode::FORBIDDEN, why)
}
