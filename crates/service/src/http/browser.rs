//! What a browser asks for: the page at `/` (see [`crate::web`]), its assets, and the
//! login form that turns a token into the session cookie ([`crate::session`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::{html, Client, Shared};
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

/// `POST /login`: a right token becomes a cookie; a wrong one gets the form again (401).
pub(super) async fn login(
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
            session::set_cookie(form.token.trim(), secure),
        )],
        Redirect::to("/"),
    )
        .into_response()
}

pub(super) async fn logout() -> Response {
    (
        [(header::SET_COOKIE, session::clear_cookie())],
        Redirect::to("/login"),
    )
        .into_response()
}

/// `GET /`: the page (see [`web`]).
pub(super) async fn page(State(shared): State<Arc<Shared>>) -> Response {
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
