//! What a request must show before a handler sees it. Today: a token, as a bearer header
//! or the login cookie ([`crate::auth::authenticate`] decides). Every check that stands in
//! front of all protected routes (the `Host` a request names, where a cookie-carrying
//! request came from) belongs here, as a layer of the router.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{html, Shared};
use crate::auth;
use crate::web;

/// Lets through the requests [`auth::authenticate`] names someone for, with their
/// [`auth::Identity`] among the request's extensions; the rest get 401 and nothing that says
/// which tokens exist.
pub(super) async fn require_token(
    State(shared): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    match auth::authenticate(&shared.service.tokens(), request.headers()) {
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
