//! What a browser asks for: the page at `/` (see [`crate::web`]), its assets, and the
//! login form that turns a token into a session, whose id the cookie keeps
//! ([`crate::session`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::conn::Standing;
use super::{guard, html, Client, Shared};
use crate::auth::Scope;
use crate::listen::client_key;
use crate::{health, session, web};

#[derive(serde::Deserialize)]
pub(super) struct LoginForm {
    token: String,
}

pub(super) async fn login_form(State(shared): State<Arc<Shared>>) -> Response {
    if shared.service.tokens().is_empty() {
        return Redirect::to("/").into_response();
    }
    html(StatusCode::OK, web::login_page(None))
}

/// `POST /login`: a right token opens a session, whose id the cookie keeps; a wrong one
/// gets the form again (401), in its address's turn (see [`crate::backoff`]). A form posted
/// from another site is refused (403): it would log the victim in as the attacker.
pub(super) async fn login(
    State(shared): State<Arc<Shared>>,
    axum::Extension(Client(peer)): axum::Extension<Client>,
    axum::Extension(standing): axum::Extension<Standing>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<LoginForm>,
) -> Response {
    let service = &shared.service;
    let tokens = service.tokens();
    if tokens.is_empty() {
        return Redirect::to("/").into_response();
    }
    // Secure and __Host- over TLS (which a reload may turn on or off).
    let secure = service.tls().is_some();
    if let Some(why) = session::cross_site(&headers, secure) {
        tracing::info!("web login from {peer} refused: {why}");
        return html(
            StatusCode::FORBIDDEN,
            web::login_page(Some("A login from another site is refused.")),
        );
    }
    let key = client_key(peer.ip());
    let turn = service.backoff.turn(key).await;
    let token = form.token.trim();
    let Some(identity) = tokens.identify(token.as_bytes()) else {
        guard::wrong_token(service, key, peer);
        drop(turn);
        tracing::info!("web login from {peer} refused: wrong token");
        return html(
            StatusCode::UNAUTHORIZED,
            web::login_page(Some("That token is not one of the service's.")),
        );
    };
    drop(turn);
    if identity.scope != Scope::Everything {
        return html(
            StatusCode::FORBIDDEN,
            web::login_page(Some(
                "That is the metrics token: it opens only /metrics and /healthz. Log in with a token of the token file.",
            )),
        );
    }
    let lifetime = service.session_lifetime();
    let id = match service
        .sessions
        .open(&identity.name, token.as_bytes(), lifetime)
    {
        Ok(id) => id,
        Err(e) => {
            tracing::error!("cannot open a web session: {e}");
            return html(
                StatusCode::INTERNAL_SERVER_ERROR,
                web::login_page(Some("The service could not open a session (see its log).")),
            );
        }
    };
    standing.prove();
    tracing::info!("web login by {} from {peer}", identity.name);
    (
        [(
            header::SET_COOKIE,
            session::set_cookie(&id, secure, lifetime),
        )],
        Redirect::to("/"),
    )
        .into_response()
}

/// `POST /logout`: ends the session (a cross-site form may not end it).
pub(super) async fn logout(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let secure = shared.service.tls().is_some();
    if session::cross_site(&headers, secure).is_some() {
        return html(
            StatusCode::FORBIDDEN,
            web::login_page(Some("A logout from another site is refused.")),
        );
    }
    if let Some(id) = session::cookie_id(&headers, secure) {
        shared.service.sessions.close(&id);
    }
    (
        [(header::SET_COOKIE, session::clear_cookie(secure))],
        Redirect::to("/login"),
    )
        .into_response()
}

/// `GET /`: the page (see [`web`]).
pub(super) async fn page(State(shared): State<Arc<Shared>>) -> Response {
    let listing = match shared.overview.get(&shared.service).await {
        Ok(listing) => listing,
        Err(e) => {
            return html(
                StatusCode::INTERNAL_SERVER_ERROR,
                web::escape(&e.to_string()),
            )
        }
    };
    let service = &shared.service;
    let health = health::check(service);
    let live = service.live();
    let body = web::page(&web::Page {
        health: &health,
        info: &listing.info,
        files: &listing.files,
        horizon_ns: live.as_ref().map(|l| l.horizon_ns()),
        recording: live.as_ref().map(|l| {
            let t = l.snapshot().totals;
            web::Recording {
                seen: t.seen,
                stored: t.stored,
                dropped: t.dropped.total(),
                started_ns: l.started_ns(),
            }
        }),
        dirs: live.as_ref().map(|l| l.dirs()).unwrap_or_default(),
        authenticated: !service.tokens().is_empty(),
    });
    html(StatusCode::OK, body)
}

/// The page's script, style and chart library, from the binary.
pub(super) async fn asset(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
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
