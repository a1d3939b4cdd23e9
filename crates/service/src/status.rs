//! The client side of `tapdeck status` (`/api/v1/status`) and `tapdeck query`
//! (`/api/v1/packets`), over HTTP or HTTPS.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};

type Response = ureq::http::Response<ureq::Body>;

/// A service and how to reach it.
#[derive(Debug, Clone, Default)]
pub struct Remote {
    /// `HOST:PORT` (https when a CA or a client certificate is given, http otherwise), or
    /// an http:// or https:// URL.
    pub addr: String,
    /// A file with the token to send: one token, or `NAME TOKEN` lines.
    pub token_file: Option<PathBuf>,
    /// Which of the token file's `NAME TOKEN` lines (default: the first).
    pub token_name: Option<String>,
    /// PEM certificates to trust for the service's certificate (a CA, or the server's own).
    pub cacert: Option<PathBuf>,
    /// PEM client certificate (chain), with its key in `key`.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl Remote {
    fn base_url(&self) -> String {
        let addr = self.addr.trim_end_matches('/');
        if addr.starts_with("http://") || addr.starts_with("https://") {
            addr.to_string()
        } else if self.cacert.is_some() || self.cert.is_some() {
            format!("https://{addr}")
        } else {
            format!("http://{addr}")
        }
    }

    fn tls_config(&self) -> Result<TlsConfig, String> {
        let mut tls = TlsConfig::builder();
        if let Some(ca) = &self.cacert {
            let certs = read_pem_certs("--cacert", ca)?;
            tls = tls.root_certs(RootCerts::new_with_certs(&certs));
        }
        match (&self.cert, &self.key) {
            (None, None) => {}
            (Some(cert), Some(key)) => {
                let chain = read_pem_certs("--cert", cert)?;
                let pem = std::fs::read(key)
                    .map_err(|e| format!("cannot read --key {}: {e}", key.display()))?;
                let key = PrivateKey::from_pem(&pem).map_err(|e| {
                    format!("--key {} holds no PEM private key: {e}", key.display())
                })?;
                tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
            }
            _ => {
                return Err(
                    "--cert and --key go together (a client certificate and its key)".into(),
                )
            }
        }
        Ok(tls.build())
    }
}

fn read_pem_certs(flag: &str, path: &Path) -> Result<Vec<Certificate<'static>>, String> {
    let pem =
        std::fs::read(path).map_err(|e| format!("cannot read {flag} {}: {e}", path.display()))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(format!("{flag} {}: not PEM: {e}", path.display())),
        }
    }
    if certs.is_empty() {
        return Err(format!(
            "{flag} {} holds no certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

/// GET `path` of `remote` with its token and the `params` that are set. `whole`: the
/// answer is read at once, so everything must be done in 5 s; otherwise it is streamed, and
/// only connecting is bounded. Returns the URL (for messages) and the answer, whatever its
/// status.
fn get(
    remote: &Remote,
    path: &str,
    params: &[(&str, Option<&str>)],
    whole: bool,
) -> Result<(String, Response), String> {
    let token = match &remote.token_file {
        Some(file) => Some(crate::auth::client_token(
            file,
            remote.token_name.as_deref(),
        )?),
        None if remote.token_name.is_some() => {
            return Err("--token-name names a token of --token-file: give the file too".into())
        }
        None => None,
    };
    let url = format!("{}{path}", remote.base_url());
    let limit = Some(Duration::from_secs(5));
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(remote.tls_config()?);
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
    let addr = &remote.addr;
    let response = request.call().map_err(|e| match e {
        e if is_tls(&e) => format!(
            "TLS with {addr} failed ({e}): does --cacert hold the CA of the service's certificate, and does the service want a client certificate (--cert, --key)?"
        ),
        e => format!(
            "no tapdeck service answers at {addr} ({e}): is `tapdeck serve` running, and is the address (and http or https) right?"
        ),
    })?;
    Ok((url, response))
}

/// A failed handshake: rustls' errors come as they are, or inside I/O errors.
fn is_tls(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) => true,
        ureq::Error::Io(io) => io.get_ref().is_some_and(|i| i.is::<rustls::Error>()),
        _ => false,
    }
}

/// What a 401 means, in one line.
fn refused(url: &str, remote: &Remote) -> String {
    match &remote.token_file {
        Some(file) => format!(
            "{url} refused the token in {}: is it one of the service's tokens (its token-file or metrics-token-file), as they are now?",
            file.display()
        ),
        None => format!("{url} wants a token: pass --token-file (a file with one of the service's tokens)"),
    }
}

/// The service's status document, or a one-line reason it could not be had.
pub fn fetch(remote: &Remote) -> Result<serde_json::Value, String> {
    let (url, mut response) = get(remote, "/api/v1/status", &[], true)?;
    let code = response.status().as_u16();
    let body = response
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("{url}: cannot read the answer: {e}"))?;
    match code {
        200 => {
            serde_json::from_str(&body).map_err(|e| format!("{url}: not a status document: {e}"))
        }
        401 => Err(refused(&url, remote)),
        _ => Err(format!("{url} answered {code}: {}", body.trim())),
    }
}

/// Starts `/api/v1/packets` with `params` and returns the answer's body to read; a refusal
/// is the service's one-line reason.
pub fn fetch_packets(
    remote: &Remote,
    params: &[(&str, Option<&str>)],
) -> Result<Box<dyn std::io::Read + Send>, String> {
    let (url, response) = get(remote, "/api/v1/packets", params, false)?;
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
        401 => refused(&url, remote),
        _ => format!("{url} answered {code}: {reason}"),
    })
}
