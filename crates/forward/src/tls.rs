//! TLS settings of IPFIX over TLS (RFC 7011 §10.4.2): the collector requires a client
//! certificate signed by one of its `--tls-client-ca` certificates, and the exporter checks
//! the collector's certificate against `--tls-ca`. rustls with the ring provider, as the
//! service's HTTPS (`tapdeck-service`'s `tls.rs`); every problem a file can have is found
//! when it is read at start, in one line naming the option and the file.

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::error::ForwardError;

/// The files of one side: its certificate chain and key, and the CA certificates it trusts
/// for the other side.
#[derive(Debug, Clone)]
pub struct TlsFiles<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    pub ca: &'a Path,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn bad(option: &str, path: &Path, what: impl std::fmt::Display) -> ForwardError {
    ForwardError::Tls(format!("{option} {}: {what}", path.display()))
}

fn read(option: &str, path: &Path) -> Result<Vec<u8>, ForwardError> {
    std::fs::read(path).map_err(|e| bad(option, path, format!("cannot read it: {e}")))
}

fn certs(option: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, ForwardError> {
    let pem = read(option, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(option, path, format!("not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad(
            option,
            path,
            "holds no certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, ForwardError> {
    let pem = read("--tls-key", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        bad(
            "--tls-key",
            path,
            format!("holds no PEM private key (-----BEGIN PRIVATE KEY-----): {e}"),
        )
    })
}

fn roots(option: &str, path: &Path) -> Result<Arc<RootCertStore>, ForwardError> {
    let mut roots = RootCertStore::empty();
    for c in certs(option, path)? {
        roots
            .add(c)
            .map_err(|e| bad(option, path, format!("not a CA certificate: {e}")))?;
    }
    Ok(Arc::new(roots))
}

fn key_mismatch(files: &TlsFiles<'_>, e: rustls::Error) -> ForwardError {
    match e {
        rustls::Error::InconsistentKeys(_) => ForwardError::Tls(format!(
            "--tls-key {} is not the key of the certificate in --tls-cert {}",
            files.key.display(),
            files.cert.display()
        )),
        e => bad(
            "--tls-key",
            files.key,
            format!("not a usable private key: {e}"),
        ),
    }
}

/// The collector's side: its certificate, and the CAs whose client certificates it takes
/// (a client without one, or with another CA's, fails the handshake).
pub fn server_config(files: &TlsFiles<'_>) -> Result<Arc<ServerConfig>, ForwardError> {
    let provider = provider();
    let chain = certs("--tls-cert", files.cert)?;
    let key = key(files.key)?;
    let verifier =
        WebPkiClientVerifier::builder_with_provider(roots("--tls-client-ca", files.ca)?, {
            Arc::clone(&provider)
        })
        .build()
        .map_err(|e| bad("--tls-client-ca", files.ca, e))?;
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ForwardError::Tls(format!("TLS: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| key_mismatch(files, e))?;
    Ok(Arc::new(config))
}

/// The exporter's side: its client certificate, and the CAs that may sign the collector's.
pub fn client_config(files: &TlsFiles<'_>) -> Result<Arc<ClientConfig>, ForwardError> {
    let provider = provider();
    let chain = certs("--tls-cert", files.cert)?;
    let key = key(files.key)?;
    let verifier = WebPkiServerVerifier::builder_with_provider(roots("--tls-ca", files.ca)?, {
        Arc::clone(&provider)
    })
    .build()
    .map_err(|e| bad("--tls-ca", files.ca, e))?;
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ForwardError::Tls(format!("TLS: {e}")))?
        .with_webpki_verifier(verifier)
        .with_client_auth_cert(chain, key)
        .map_err(|e| key_mismatch(files, e))?;
    Ok(Arc::new(config))
}

/// The name a collector's certificate must carry: the host of `--to` (a DNS name or an
/// address).
pub fn server_name(host: &str) -> Result<ServerName<'static>, ForwardError> {
    ServerName::try_from(host.to_string())
        .map_err(|_| ForwardError::Tls(format!("--to tls://{host}: not a host name or address")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_option_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let missing = dir.path().join("missing.pem");
        let e = client_config(&TlsFiles {
            cert: &missing,
            key: &empty,
            ca: &empty,
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("--tls-cert ") && e.contains("cannot read it"),
            "{e}"
        );
        let e = server_config(&TlsFiles {
            cert: &empty,
            key: &empty,
            ca: &empty,
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("holds no certificate"), "{e}");
    }
}
