//! The client side of `tapdeck status` (`/api/v1/status`) and `tapdeck query`
//! (`/api/v1/packets`), over HTTP or HTTPS.
//!
//! Its errors say what went wrong with which file or answer; the binary, which knows its
//! flags, words them as the flags that gave each file ([`ClientError`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};

use crate::auth::TokenError;

type Response = ureq::http::Response<ureq::Body>;

/// Which of a [`Remote`]'s TLS files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    /// [`Remote::cacert`].
    CaCert,
    /// [`Remote::cert`].
    Cert,
    /// [`Remote::key`].
    Key,
}

impl std::fmt::Display for TlsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TlsFile::CaCert => "the CA certificate file",
            TlsFile::Cert => "the client certificate file",
            TlsFile::Key => "the client key file",
        })
    }
}

/// Why a service could not be asked, or what its refusal was.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read {file} {}: {source}", path.display())]
    Read {
        file: TlsFile,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{file} {}: not PEM: {reason}", path.display())]
    NotPem {
        file: TlsFile,
        path: PathBuf,
        reason: ureq::Error,
    },
    #[error("{file} {} holds no certificate (-----BEGIN CERTIFICATE-----)", path.display())]
    NoCertificate { file: TlsFile, path: PathBuf },
    #[error("the client key file {} holds no PEM private key: {reason}", path.display())]
    NoPrivateKey { path: PathBuf, reason: ureq::Error },
    #[error("a client certificate and its key go together")]
    CertWithoutKey,
    #[error("a token name names a token of the token file: give the file too")]
    TokenNameWithoutFile,
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error("TLS with {addr} failed ({reason})")]
    Tls { addr: String, reason: ureq::Error },
    #[error("no tapdeck service answers at {addr} ({reason})")]
    Unreachable { addr: String, reason: ureq::Error },
    /// A 401 to a request without a token.
    #[error("{url} wants a token")]
    TokenRequired { url: String },
    /// A 401 to the token of `path`.
    #[error("{url} refused the token in {}: is it one of the service's tokens (its token-file or metrics-token-file), as they are now?", path.display())]
    TokenRefused { url: String, path: PathBuf },
    #[error("{url}: cannot read the answer: {reason}")]
    ReadAnswer { url: String, reason: ureq::Error },
    #[error("{url}: not a status document: {reason}")]
    NotStatus {
        url: String,
        reason: serde_json::Error,
    },
    /// Any other status than 200 and 401, with the service's reason.
    #[error("{url} answered {code}: {reason}")]
    Answered {
        url: String,
        code: u16,
        reason: String,
    },
}

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

    fn tls_config(&self) -> Result<TlsConfig, ClientError> {
        let mut tls = TlsConfig::builder();
        if let Some(ca) = &self.cacert {
            let certs = read_pem_certs(TlsFile::CaCert, ca)?;
            tls = tls.root_certs(RootCerts::new_with_certs(&certs));
        }
        match (&self.cert, &self.key) {
            (None, None) => {}
            (Some(cert), Some(key)) => {
                let chain = read_pem_certs(TlsFile::Cert, cert)?;
                let pem = std::fs::read(key).map_err(|source| ClientError::Read {
                    file: TlsFile::Key,
                    path: key.clone(),
                    source,
                })?;
                let key =
                    PrivateKey::from_pem(&pem).map_err(|reason| ClientError::NoPrivateKey {
                        path: key.clone(),
                        reason,
                    })?;
                tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
            }
            _ => return Err(ClientError::CertWithoutKey),
        }
        Ok(tls.build())
    }

    /// The token to send, if any.
    fn token(&self) -> Result<Option<String>, ClientError> {
        match &self.token_file {
            Some(file) => Ok(Some(crate::auth::client_token(
                file,
                self.token_name.as_deref(),
            )?)),
            None if self.token_name.is_some() => Err(ClientError::TokenNameWithoutFile),
            None => Ok(None),
        }
    }
}

fn read_pem_certs(file: TlsFile, path: &Path) -> Result<Vec<Certificate<'static>>, ClientError> {
    let pem = std::fs::read(path).map_err(|source| ClientError::Read {
        file,
        path: path.to_path_buf(),
        source,
    })?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(reason) => {
                return Err(ClientError::NotPem {
                    file,
                    path: path.to_path_buf(),
                    reason,
                })
            }
        }
    }
    if certs.is_empty() {
        return Err(ClientError::NoCertificate {
            file,
            path: path.to_path_buf(),
        });
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
) -> Result<(String, Response), ClientError> {
    let token = remote.token()?;
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
    let addr = remote.addr.clone();
    let response = request.call().map_err(|reason| match reason {
        reason if is_tls(&reason) => ClientError::Tls { addr, reason },
        reason => ClientError::Unreachable { addr, reason },
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

/// What a 401 means.
fn refused(url: String, remote: &Remote) -> ClientError {
    match &remote.token_file {
        Some(file) => ClientError::TokenRefused {
            url,
            path: file.clone(),
        },
        None => ClientError::TokenRequired { url },
    }
}

/// The service's status document, or the reason it could not be had.
pub fn fetch(remote: &Remote) -> Result<serde_json::Value, ClientError> {
    let (url, mut response) = get(remote, "/api/v1/status", &[], true)?;
    let code = response.status().as_u16();
    let body = match response.body_mut().read_to_string() {
        Ok(body) => body,
        Err(reason) => return Err(ClientError::ReadAnswer { url, reason }),
    };
    match code {
        200 => serde_json::from_str(&body).map_err(|reason| ClientError::NotStatus { url, reason }),
        401 => Err(refused(url, remote)),
        _ => Err(ClientError::Answered {
            url,
            code,
            reason: reason_of(&body),
        }),
    }
}

/// The service's reason in a refusal: its JSON `error`, or the text as it is.
fn reason_of(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| body.trim().to_string())
}

/// Starts `/api/v1/packets` with `params` and returns the answer's body to read; a refusal
/// is the service's one-line reason.
pub fn fetch_packets(
    remote: &Remote,
    params: &[(&str, Option<&str>)],
) -> Result<Box<dyn std::io::Read + Send>, ClientError> {
    let (url, response) = get(remote, "/api/v1/packets", params, false)?;
    let code = response.status().as_u16();
    if code == 200 {
        return Ok(Box::new(response.into_body().into_reader()));
    }
    let body = response.into_body().read_to_string().unwrap_or_default();
    let reason = reason_of(&body);
    Err(match code {
        401 => refused(url, remote),
        _ => ClientError::Answered { url, code, reason },
    })
}
