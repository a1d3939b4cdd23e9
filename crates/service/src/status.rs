//! The client side of `tapdeck status`: asks a running service for `/api/v1/status`.

use std::path::Path;
use std::time::Duration;

/// The service's status document, or a one-line reason it could not be had.
pub fn fetch(listen: &str, token_file: Option<&Path>) -> Result<serde_json::Value, String> {
    let token = crate::state::read_token(token_file)?;
    let url = format!("http://{listen}/api/v1/status");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent.get(&url);
    if let Some(t) = &token {
        request = request.header("Authorization", &format!("Bearer {t}"));
    }
    let mut response = request.call().map_err(|e| {
        format!("no tapdeck service answers at {listen} ({e}): is `tapdeck serve` running, and is --listen right?")
    })?;
    let code = response.status().as_u16();
    let body = response
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("{url}: cannot read the answer: {e}"))?;
    match code {
        200 => {
            serde_json::from_str(&body).map_err(|e| format!("{url}: not a status document: {e}"))
        }
        401 => Err(match token_file {
            Some(file) => format!(
                "{url} refused the token in {}: is it the service's metrics-token-file, as it is now?",
                file.display()
            ),
            None => {
                format!("{url} wants a token: pass --metrics-token-file (the service's token file)")
            }
        }),
        _ => Err(format!("{url} answered {code}: {}", body.trim())),
    }
}
