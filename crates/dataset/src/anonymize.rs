//! What the converter hides: addresses (Crypto-PAn, prefix-preserving) and names (AES-SIV,
//! reversible with the key). One `Anonymizer` per worker thread, since the address cache
//! is mutable.

use std::net::IpAddr;
use std::sync::Arc;

use tapdeck_anon::{CachedCryptoPan, KeyFile, NameCipher};

/// What to anonymize, and with which key; shared by the workers.
#[derive(Clone, Default)]
pub struct Anonymization {
    pub key: Option<Arc<KeyFile>>,
    pub addresses: bool,
}

impl Anonymization {
    pub fn key_id(&self) -> Option<String> {
        self.key.as_ref().map(|k| k.key_id())
    }

    pub fn worker(&self) -> Anonymizer {
        Anonymizer {
            pan: self
                .key
                .as_ref()
                .filter(|_| self.addresses)
                .map(|k| CachedCryptoPan::new(k.crypto_pan())),
            names: self.key.as_ref().map(|k| k.name_cipher()),
        }
    }
}

#[derive(Default)]
pub struct Anonymizer {
    pan: Option<CachedCryptoPan>,
    names: Option<NameCipher>,
}

impl Anonymizer {
    pub fn ip(&mut self, ip: IpAddr) -> IpAddr {
        match &mut self.pan {
            Some(p) => p.anonymize(ip),
            None => ip,
        }
    }

    /// A file or directory name as the dataset stores it.
    pub fn name(&self, name: &[u8]) -> String {
        match &self.names {
            Some(c) => c.encrypt(name),
            None => String::from_utf8_lossy(name).into_owned(),
        }
    }

    /// A path (MOUNT's dirpath), each component encrypted on its own.
    pub fn path(&self, path: &[u8]) -> String {
        match &self.names {
            Some(c) => c.encrypt_path(path),
            None => String::from_utf8_lossy(path).into_owned(),
        }
    }
}
