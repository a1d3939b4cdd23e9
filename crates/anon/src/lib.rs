//! Anonymization for tapdeck datasets: reversible, deterministic encryption of file and
//! directory names (AES-256-SIV) and prefix-preserving IP address mapping (Crypto-PAn), both
//! keyed by one [`KeyFile`].
//!
//! ```no_run
//! use tapdeck_anon::{CachedCryptoPan, KeyFile};
//! # fn main() -> Result<(), tapdeck_anon::Error> {
//! let key = KeyFile::load("anon.key".as_ref())?;
//! let names = key.name_cipher();
//! let enc = names.encrypt_path(b"/home/alice/thesis.tex"); // "/~…/~…/~…"
//! assert_eq!(names.decrypt_path(&enc)?, b"/home/alice/thesis.tex");
//! let mut addrs = CachedCryptoPan::new(key.crypto_pan());
//! let anon = addrs.anonymize_v4(0x0a00_0001);
//! # let _ = anon;
//! # Ok(()) }
//! ```

mod cryptopan;
mod error;
mod keyfile;
mod names;

pub use cryptopan::{CacheStats, CachedCryptoPan, CryptoPan};
pub use error::Error;
pub use keyfile::KeyFile;
pub use names::{NameCipher, ENCRYPTED_MARKER, LENGTH_BUCKET};
