//! TLS settings of IPFIX over TLS (RFC 7011 §10.4.2): the collector requires a client
//! certificate signed by one of its `--tls-client-ca` certificates, and the exporter checks
//! the collector's certificate against `--tls-ca`. rustls with the ring provider, as the
//! service's HTTPS (`tapdeck-service`'s `tls.rs`); every problem a file can have is found
//! when it is read at start, in one line naming the file and which of the side's files it
//! is (the binary words that as its option).

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
pub use rustls::{ClientConfig, ServerConfig};

use crate::error::{ForwardError, TlsFile};

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

fn bad(file: TlsFile, path: &Path, what: impl std::fmt::Display) -> ForwardError {
    ForwardError::TlsFile {
        file,
        path: path.into(),
        what: what.to_string(),
    }
}

fn read(file: TlsFile, path: &Path) -> Result<Vec<u8>, ForwardError> {
    std::fs::read(path).map_err(|e| bad(file, path, format!("cannot read it: {e}")))
}

fn certs(file: TlsFile, path: &Path) -> Result<Vec<CertificateDer<'static>>, ForwardError> {
    let pem = read(file, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(file, path, format!("not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad(
            file,
            path,
            "holds no certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, ForwardError> {
    let pem = read(TlsFile::Key, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        bad(
            TlsFile::Key,
            path,
            format!("holds no PEM private key (-----BEGIN PRIVATE KEY-----): {e}"),
        )
    })
}

fn roots(file: TlsFile, path: &Path) -> Result<Arc<RootCertStore>, ForwardError> {
    let mut roots = RootCertStore::empty();
    for c in certs(file, path)? {
        roots
            .add(c)
            .map_err(|e| bad(file, path, format!("not a CA certificate: {e}")))?;
    }
    Ok(Arc::new(roots))
}

fn key_mismatch(files: &TlsFiles<'_>, e: rustls::Error) -> ForwardError {
    match e {
        rustls::Error::InconsistentKeys(_) => ForwardError::KeyMismatch {
            key: files.key.into(),
            cert: files.cert.into(),
        },
        e => bad(
            TlsFile::Key,
            files.key,
            format!("not a usable private key: {e}"),
        ),
    }
}

/// The collector's side: its certificate, and the CAs whose client certificates it takes
/// (a client without one, or with another CA's, fails the handshake).
pub fn server_config(files: &TlsFiles<'_>) -> Result<Arc<ServerConfig>, ForwardError> {
    let provider = provider();
    let chain = certs(TlsFile::Cert, files.cert)?;
    let key = key(files.key)?;
    let verifier =
        WebPkiClientVerifier::builder_with_provider(roots(TlsFile::ClientCa, files.ca)?, {
            Arc::clone(&provider)
        })
        .build()
        .map_err(|e| bad(TlsFile::ClientCa, files.ca, e))?;
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ForwardError::Tls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| key_mismatch(files, e))?;
    Ok(Arc::new(config))
}

/// The exporter's side: its client certificate, and the CAs that may sign the collector's.
pub fn client_config(files: &TlsFiles<'_>) -> Result<Arc<ClientConfig>, ForwardError> {
    let provider = provider();
    let chain = certs(TlsFile::Cert, files.cert)?;
    let key = key(files.key)?;
    let verifier =
        WebPkiServerVerifier::builder_with_provider(roots(TlsFile::ServerCa, files.ca)?, {
            Arc::clone(&provider)
        })
        .build()
        .map_err(|e| bad(TlsFile::ServerCa, files.ca, e))?;
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ForwardError::Tls(e.to_string()))?
        .with_webpki_verifier(verifier)
        .with_client_auth_cert(chain, key)
        .map_err(|e| key_mismatch(files, e))?;
    Ok(Arc::new(config))
}

/// The name a collector's certificate must carry: the host the collector was named by (a
/// DNS name or an address).
pub fn server_name(host: &str) -> Result<ServerName<'static>, ForwardError> {
    ServerName::try_from(host.to_string()).map_err(|_| ForwardError::ServerName {
        host: host.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file_and_its_role() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let missing = dir.path().join("missing.pem");
        let e = client_config(&TlsFiles {
            cert: &missing,
            key: &empty,
            ca: &empty,
        })
        .unwrap_err();
        assert!(
            matches!(&e, ForwardError::TlsFile { file: TlsFile::Cert, path, what }
                if *path == missing && what.starts_with("cannot read it")),
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
