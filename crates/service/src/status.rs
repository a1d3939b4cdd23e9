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

/// Starts `/api/v1/packets` with `params` and returns the answer's body to read; a refusal
/// is the service's one-line reason.
pub fn fetch_packets(
    listen: &str,
    token_file: Option<&Path>,
    params: &[(&str, Option<&str>)],
) -> Result<Box<dyn std::io::Read + Send>, String> {
    let token = crate::state::read_token(token_file)?;
    let base = if listen.starts_with("http://") || listen.starts_with("https://") {
        listen.trim_end_matches('/').to_string()
    } else {
        format!("http://{listen}")
    };
    let url = format!("{base}/api/v1/packets");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(5)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent.get(&url);
    for (k, v) in params {
        if let Some(v) = v {
            request = request.query(*k, *v);
        }
    }
    if let Some(t) = &token {
        request = request.header("Authorization", &format!("Bearer {t}"));
    }
    let response = request.call().map_err(|e| {
        format!("no tapdeck service answers at {listen} ({e}): is `tapdeck serve` running?")
    })?;
    let code = response.status().as_u16();
    if code == 200 {
        return Ok(Box::new(response.into_body().into_reader()));
    }
    let body = response.into_body().read_to_string().unwrap_or_default();
    let reason = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| body.trim().to_string());
    Err(match code {
        401 => format!(
            "{url} refused the token: pass the service's token file with --metrics-token-file"
        ),
        _ => format!("{url} answered {code}: {reason}"),
    })
}
