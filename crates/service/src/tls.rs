//! HTTPS for the service: `tls-cert` (a PEM chain, the server's certificate first) and
//! `tls-key` (its PEM private key); with `tls-client-ca` (PEM CA certificates) every
//! client must present a certificate one of them signed, or the handshake fails.
//!
//! rustls with the ring provider. Every problem a file can have is found when the files
//! are read (at start, by `serve --check`, and on SIGHUP), in one line naming the key and
//! the file, never at the first handshake.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};

use crate::config::ServeSettings;

/// Why the TLS settings cannot be used: one line, naming the key and its file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tls-client-ca is set without tls-cert and tls-key: client certificates are asked for over TLS only")]
    ClientCaWithoutCert,
    #[error("tls-cert is set without tls-key: set both (the key of the certificate)")]
    CertWithoutKey,
    #[error("tls-key is set without tls-cert: set both (the certificate of the key)")]
    KeyWithoutCert,
    #[error("cannot read {key} {}: {source}", path.display())]
    Read {
        key: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{key} {}: not PEM: {reason}", path.display())]
    NotPem {
        key: &'static str,
        path: PathBuf,
        reason: rustls::pki_types::pem::Error,
    },
    #[error("{key} {} holds no certificate (-----BEGIN CERTIFICATE-----)", path.display())]
    NoCertificate { key: &'static str, path: PathBuf },
    #[error("tls-key {} holds no PEM private key (-----BEGIN PRIVATE KEY-----): {reason}", path.display())]
    NoPrivateKey {
        path: PathBuf,
        reason: rustls::pki_types::pem::Error,
    },
    #[error("tls-key {} is not the key of the certificate in tls-cert {}", key.display(), cert.display())]
    NotTheCertificatesKey { key: PathBuf, cert: PathBuf },
    #[error("tls-key {}: not a usable private key: {reason}", path.display())]
    UnusableKey {
        path: PathBuf,
        reason: rustls::Error,
    },
    #[error("TLS: {0}")]
    Protocols(rustls::Error),
    #[error("tls-client-ca {}: not a CA certificate: {reason}", path.display())]
    NotACa {
        path: PathBuf,
        reason: rustls::Error,
    },
    #[error("tls-client-ca {}: {reason}", path.display())]
    ClientVerifier {
        path: PathBuf,
        reason: rustls::server::VerifierBuilderError,
    },
}

/// The server's TLS settings as read from their files.
#[derive(Clone)]
pub struct Tls {
    pub config: Arc<ServerConfig>,
    /// Whether client certificates are required.
    pub client_ca: bool,
    /// The files' bytes as read: a reload that finds them unchanged changes nothing.
    source: Vec<u8>,
}

impl Tls {
    /// TLS as `settings` ask for it: `None` without `tls-cert` and `tls-key`.
    pub fn load(settings: &ServeSettings) -> Result<Option<Tls>, TlsError> {
        let (cert, key) = match (&settings.tls_cert, &settings.tls_key) {
            (None, None) if settings.tls_client_ca.is_some() => {
                return Err(TlsError::ClientCaWithoutCert)
            }
            (None, None) => return Ok(None),
            (Some(_), None) => return Err(TlsError::CertWithoutKey),
            (None, Some(_)) => return Err(TlsError::KeyWithoutCert),
            (Some(c), Some(k)) => (c, k),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (chain, mut source) = read_certs("tls-cert", cert)?;
        let key_pem = read("tls-key", key)?;
        let key_der =
            PrivateKeyDer::from_pem_slice(&key_pem).map_err(|reason| TlsError::NoPrivateKey {
                path: key.clone(),
                reason,
            })?;
        source.extend_from_slice(&key_pem);
        let certified = CertifiedKey::from_der(chain, key_der, &provider).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => TlsError::NotTheCertificatesKey {
                key: key.clone(),
                cert: cert.clone(),
            },
            reason => TlsError::UnusableKey {
                path: key.clone(),
                reason,
            },
        })?;
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Protocols)?;
        let builder = match &settings.tls_client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let (verifier, ca_source) = client_verifier(ca, provider)?;
                source.extend_from_slice(&ca_source);
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config =
            builder.with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some(Tls {
            config: Arc::new(config),
            client_ca: settings.tls_client_ca.is_some(),
            source,
        }))
    }

    /// Whether `other` was read from the same bytes.
    pub fn same_files(&self, other: &Tls) -> bool {
        self.source == other.source
    }
}

/// The verifier of client certificates signed by the CAs of `tls-client-ca`, and the
/// file's bytes.
fn client_verifier(
    ca: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<(Arc<dyn rustls::server::danger::ClientCertVerifier>, Vec<u8>), TlsError> {
    let (cas, source) = read_certs("tls-client-ca", ca)?;
    let mut roots = RootCertStore::empty();
    for c in cas {
        roots.add(c).map_err(|reason| TlsError::NotACa {
            path: ca.to_path_buf(),
            reason,
        })?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|reason| TlsError::ClientVerifier {
            path: ca.to_path_buf(),
            reason,
        })?;
    Ok((verifier, source))
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        key,
        path: path.to_path_buf(),
        source,
    })
}

/// The PEM certificates of a file (at least one), and its bytes.
fn read_certs(
    key: &'static str,
    path: &Path,
) -> Result<(Vec<CertificateDer<'static>>, Vec<u8>), TlsError> {
    let pem = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|reason| TlsError::NotPem {
            key,
            path: path.to_path_buf(),
            reason,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            key,
            path: path.to_path_buf(),
        });
    }
    Ok((certs, pem))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn settings(cert: bool, key: bool, ca: bool) -> ServeSettings {
        let some =
            |set: bool, name: &str| set.then(|| PathBuf::from(format!("/nonexistent/{name}")));
        ServeSettings {
            tls_cert: some(cert, "cert.pem"),
            tls_key: some(key, "key.pem"),
            tls_client_ca: some(ca, "ca.pem"),
            ..ServeSettings::default()
        }
    }

    fn error(s: &ServeSettings) -> String {
        match Tls::load(s) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn keys_go_together_and_errors_name_them() {
        assert!(Tls::load(&settings(false, false, false)).unwrap().is_none());
        assert!(error(&settings(true, false, false)).starts_with("tls-cert is set without tls-key"));
        assert!(error(&settings(false, true, true)).starts_with("tls-key is set without tls-cert"));
        assert!(error(&settings(false, false, true))
            .starts_with("tls-client-ca is set without tls-cert and tls-key"));
        let e = error(&settings(true, true, true));
        assert!(
            e.starts_with("cannot read tls-cert /nonexistent/cert.pem: "),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn a_file_without_a_certificate_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        std::fs::write(
            &cert,
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let e = read_certs("tls-cert", &cert).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "tls-cert {} holds no certificate (-----BEGIN CERTIFICATE-----)",
                cert.display()
            )
        );
    }
}
