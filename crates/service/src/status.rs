//! The client side of `tapdeck status` (`/api/v1/status`) and `tapdeck query`
//! (`/api/v1/packets`).

use std::path::Path;
use std::time::Duration;

type Response = ureq::http::Response<ureq::Body>;

/// GET `path` of the service at `listen` (`HOST:PORT`, or an http:// URL) with the token of
/// `token_file` and the `params` that are set. `whole`: the answer is read at once, so
/// everything must be done in 5 s; otherwise it is streamed, and only connecting is bounded.
/// Returns the URL (for messages) and the answer, whatever its status.
fn get(
    listen: &str,
    token_file: Option<&Path>,
    path: &str,
    params: &[(&str, Option<&str>)],
    whole: bool,
) -> Result<(String, Response), String> {
    let token = crate::state::read_token(token_file)?;
    let base = if listen.starts_with("http://") || listen.starts_with("https://") {
        listen.trim_end_matches('/').to_string()
    } else {
        format!("http://{listen}")
    };
    let url = format!("{base}{path}");
    let limit = Some(Duration::from_secs(5));
    let config = ureq::Agent::config_builder().http_status_as_error(false);
    let config = if whole {
        config.timeout_global(limit)
    } else {
        config.timeout_connect(limit)
    };
    let agent: ureq::Agent = config.build().into();
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
        format!("no tapdeck service answers at {listen} ({e}): is `tapdeck serve` running, and is --listen right?")
    })?;
    Ok((url, response))
}

/// The service's status document, or a one-line reason it could not be had.
pub fn fetch(listen: &str, token_file: Option<&Path>) -> Result<serde_json::Value, String> {
    let (url, mut response) = get(listen, token_file, "/api/v1/status", &[], true)?;
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
    let (url, response) = get(listen, token_file, "/api/v1/packets", params, false)?;
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
