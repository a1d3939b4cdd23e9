//! The key file: one small text file holding the two independent secret keys.
//!
//! ```text
//! # tapdeck anonymization key: keep it secret, keep a backup (see the tapdeck-anon README)
//! tapdeck-anon-key 1
//! names aes-256-siv <128 hex digits>
//! addresses crypto-pan <64 hex digits>
//! ```

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::cryptopan::CryptoPan;
use crate::error::Error;
use crate::names::NameCipher;

const MAGIC: &str = "tapdeck-anon-key";
const VERSION: &str = "1";
const NAMES_LABEL: &str = "names aes-256-siv";
const ADDRESSES_LABEL: &str = "addresses crypto-pan";
/// A valid file is about 300 bytes; reading stops here so a wrong path (a trace, a device)
/// cannot make us read gigabytes.
const MAX_FILE_LEN: u64 = 4096;

/// The secret keys of one anonymized dataset: an AES-256-SIV key for names and a Crypto-PAn
/// key (16-byte AES key, 16-byte pad seed) for addresses. They are generated independently,
/// so a leak of one tells nothing about the other.
pub struct KeyFile {
    names: Zeroizing<[u8; 64]>,
    addresses: Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for KeyFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyFile")
            .field("key_id", &self.key_id())
            .finish_non_exhaustive()
    }
}

impl KeyFile {
    /// Makes a new key from the operating system's CSPRNG and writes it to `path` with mode
    /// 0600. Never overwrites: a lost key makes every dataset made with it undecryptable.
    pub fn generate(path: &Path) -> Result<KeyFile, Error> {
        let mut names = Zeroizing::new([0u8; 64]);
        let mut addresses = Zeroizing::new([0u8; 32]);
        getrandom::getrandom(&mut names[..])
            .map_err(|e| io_error(path, std::io::Error::other(e)))?;
        getrandom::getrandom(&mut addresses[..])
            .map_err(|e| io_error(path, std::io::Error::other(e)))?;
        let key = KeyFile { names, addresses };

        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => Error::KeyFileExists {
                    path: path.to_owned(),
                },
                _ => io_error(path, e),
            })?;
        let text = key.to_text();
        if let Err(e) = file
            .write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
        {
            // Leave no half-written key behind for someone to "use" later.
            drop(file);
            let _ = std::fs::remove_file(path);
            return Err(io_error(path, e));
        }
        Ok(key)
    }

    /// Reads a key file. Refuses files that group or others may read or write (like ssh does
    /// with private keys): a key that leaked is worse than a key that is awkward to use.
    pub fn load(path: &Path) -> Result<KeyFile, Error> {
        let file = std::fs::File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::KeyFileMissing {
                path: path.to_owned(),
            },
            _ => io_error(path, e),
        })?;
        let meta = file.metadata().map_err(|e| io_error(path, e))?;
        if !meta.is_file() {
            return Err(format_error(path, None, "not a regular file"));
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(Error::KeyFilePermissions {
                path: path.to_owned(),
                mode,
            });
        }
        let mut text = Zeroizing::new(String::new());
        file.take(MAX_FILE_LEN + 1)
            .read_to_string(&mut text)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidData => format_error(path, None, "not UTF-8 text"),
                _ => io_error(path, e),
            })?;
        if text.len() as u64 > MAX_FILE_LEN {
            return Err(format_error(path, None, "file too large for a key file"));
        }
        KeyFile::parse(&text, path)
    }

    /// Parses the text of a key file (as [`to_text`](Self::to_text) writes it). `origin` only
    /// names the source in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<KeyFile, Error> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));

        match lines.next() {
            Some((_, l)) if l == format!("{MAGIC} {VERSION}") => {}
            Some((n, l)) if l.starts_with(MAGIC) => {
                return Err(format_error(
                    origin,
                    n,
                    &format!("unsupported version {:?} (this tapdeck reads version {VERSION}); use a newer tapdeck", l[MAGIC.len()..].trim()),
                ))
            }
            Some((n, _)) => {
                return Err(format_error(origin, n, &format!("expected \"{MAGIC} {VERSION}\"")))
            }
            None => return Err(format_error(origin, None, "empty file")),
        }

        let mut names: Option<Zeroizing<[u8; 64]>> = None;
        let mut addresses: Option<Zeroizing<[u8; 32]>> = None;
        for (n, line) in lines {
            if let Some(hex) = line.strip_prefix(NAMES_LABEL) {
                if names.is_some() {
                    return Err(format_error(origin, n, "second \"names\" key"));
                }
                names = Some(parse_hex::<64>(hex, origin, n)?);
            } else if let Some(hex) = line.strip_prefix(ADDRESSES_LABEL) {
                if addresses.is_some() {
                    return Err(format_error(origin, n, "second \"addresses\" key"));
                }
                addresses = Some(parse_hex::<32>(hex, origin, n)?);
            } else {
                return Err(format_error(
                    origin,
                    n,
                    &format!("expected \"{NAMES_LABEL} <hex>\" or \"{ADDRESSES_LABEL} <hex>\""),
                ));
            }
        }
        match (names, addresses) {
            (Some(names), Some(addresses)) => Ok(KeyFile { names, addresses }),
            (None, _) => Err(format_error(origin, None, "no \"names\" key line")),
            (_, None) => Err(format_error(origin, None, "no \"addresses\" key line")),
        }
    }

    /// Builds a key from raw key bytes (tests, or keys kept in another secret store).
    pub fn from_keys(names: [u8; 64], addresses: [u8; 32]) -> KeyFile {
        KeyFile {
            names: Zeroizing::new(names),
            addresses: Zeroizing::new(addresses),
        }
    }

    /// The file's text. It contains the secret keys.
    pub fn to_text(&self) -> String {
        format!(
            "# tapdeck anonymization key: keep it secret, keep a backup (see the tapdeck-anon README)\n\
             # key id {}\n\
             {MAGIC} {VERSION}\n\
             {NAMES_LABEL} {}\n\
             {ADDRESSES_LABEL} {}\n",
            self.key_id(),
            hex::encode(&self.names[..]),
            hex::encode(&self.addresses[..]),
        )
    }

    /// A short public fingerprint of both keys (16 hex digits: the first 8 bytes of a
    /// domain-separated SHA-256 of them). Record it in the dataset's metadata; before
    /// decrypting, [`check_key_id`](Self::check_key_id) tells a wrong key from damaged data.
    /// 64 bits make an accidental match between two keys practically impossible; they reveal
    /// nothing usable about 768 bits of key.
    pub fn key_id(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"tapdeck-anon key id v1\0");
        h.update(&self.names[..]);
        h.update(&self.addresses[..]);
        hex::encode(&h.finalize()[..8])
    }

    /// Fails with [`Error::WrongKey`] unless `expected` (as recorded in a dataset) is this
    /// key's id. Case and surrounding spaces are ignored.
    pub fn check_key_id(&self, expected: &str) -> Result<(), Error> {
        let found = self.key_id();
        if expected.trim().eq_ignore_ascii_case(&found) {
            Ok(())
        } else {
            Err(Error::WrongKey {
                expected: expected.trim().to_owned(),
                found,
            })
        }
    }

    /// The cipher for file and directory names.
    pub fn name_cipher(&self) -> NameCipher {
        NameCipher::new(&self.names)
    }

    /// The prefix-preserving address map.
    pub fn crypto_pan(&self) -> CryptoPan {
        CryptoPan::new(&self.addresses)
    }
}

fn parse_hex<const N: usize>(
    text: &str,
    origin: &Path,
    line: usize,
) -> Result<Zeroizing<[u8; N]>, Error> {
    let text = text.trim();
    let mut out = Zeroizing::new([0u8; N]);
    if text.len() != 2 * N {
        return Err(format_error(
            origin,
            line,
            &format!("key has {} hex digits, expected {}", text.len(), 2 * N),
        ));
    }
    hex::decode_to_slice(text, &mut out[..])
        .map_err(|_| format_error(origin, line, "key is not hexadecimal"))?;
    Ok(out)
}

fn format_error(path: &Path, line: impl Into<Option<usize>>, reason: &str) -> Error {
    Error::KeyFileFormat {
        path: PathBuf::from(path),
        line: line.into(),
        reason: reason.to_owned(),
    }
}

fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn generate_then_load_gives_the_same_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("anon.key");
        let made = KeyFile::generate(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let loaded = KeyFile::load(&path).unwrap();
        assert_eq!(*made.names, *loaded.names);
        assert_eq!(*made.addresses, *loaded.addresses);
        assert_eq!(made.key_id(), loaded.key_id());
        assert_eq!(made.key_id().len(), 16);
        // Two keys from the CSPRNG differ (and so do their halves).
        let other = KeyFile::generate(&dir.path().join("b.key")).unwrap();
        assert_ne!(*made.names, *other.names);
        assert_ne!(made.names[..32], made.names[32..]);
        assert_ne!(made.key_id(), other.key_id());
    }

    #[test]
    fn generate_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("anon.key");
        std::fs::write(&path, "precious").unwrap();
        assert!(matches!(
            KeyFile::generate(&path),
            Err(Error::KeyFileExists { .. })
        ));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
    }

    #[test]
    fn load_reports_missing_and_open_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("anon.key");
        let err = KeyFile::load(&path).unwrap_err();
        assert!(matches!(err, Error::KeyFileMissing { .. }));
        assert!(err.to_string().contains("not found"));

        KeyFile::generate(&path).unwrap();
        set_mode(&path, 0o644);
        let err = KeyFile::load(&path).unwrap_err();
        assert!(matches!(err, Error::KeyFilePermissions { mode: 0o644, .. }));
        assert!(err.to_string().contains("chmod 600"), "{err}");
        set_mode(&path, 0o640);
        assert!(KeyFile::load(&path).is_err());
        set_mode(&path, 0o400);
        assert!(KeyFile::load(&path).is_ok());
    }

    #[test]
    fn load_rejects_wrong_formats_with_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let good = KeyFile::from_keys([1; 64], [2; 32]).to_text();
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "empty"),
            ("hello\n".into(), "expected \"tapdeck-anon-key 1\""),
            (
                good.replace("tapdeck-anon-key 1", "tapdeck-anon-key 2"),
                "unsupported version",
            ),
            (good.replace("0101", "01"), "hex digits"),
            (good.replace("0202", "zz02"), "hexadecimal"),
            (
                good.lines()
                    .filter(|l| !l.starts_with("addresses"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                "no \"addresses\"",
            ),
            (
                format!("{good}{}\n", good.lines().nth(3).unwrap()),
                "second \"names\"",
            ),
            (format!("{good}extra line\n"), "line 6"),
            ("x".repeat(5000), "too large"),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let path = dir.path().join(format!("k{i}"));
            std::fs::write(&path, text).unwrap();
            set_mode(&path, 0o600);
            let err = KeyFile::load(&path).unwrap_err().to_string();
            assert!(err.contains(want), "case {i}: {err:?} lacks {want:?}");
            assert!(err.contains(&format!("k{i}")), "{err}");
        }
        // A directory, and a path under a missing directory.
        let err = KeyFile::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("not a regular file") && !err.contains("line"),
            "{err}"
        );
        let err = KeyFile::generate(&dir.path().join("no/such.key")).unwrap_err();
        assert!(matches!(err, Error::Io { .. }) && err.to_string().contains("no/such.key"));
        std::fs::write(dir.path().join("bin"), [0xff, 0xfe, 0x00]).unwrap();
        set_mode(&dir.path().join("bin"), 0o600);
        assert!(KeyFile::load(&dir.path().join("bin"))
            .unwrap_err()
            .to_string()
            .contains("UTF-8"));
    }

    #[test]
    fn text_round_trips_and_comments_are_ignored() {
        let key = KeyFile::from_keys([0xab; 64], [0xcd; 32]);
        let text = key.to_text();
        assert!(text.contains(&"ab".repeat(64)));
        assert!(text.contains(&key.key_id()));
        let back = KeyFile::parse(&format!("\n# hi\n{text}\n"), Path::new("-")).unwrap();
        assert_eq!(back.key_id(), key.key_id());
        // Debug never shows the key.
        assert!(!format!("{key:?}").contains("abab"));
    }

    /// The file's address key feeds Crypto-PAn in the reference layout (AES key, then pad
    /// seed), and its names key feeds AES-SIV: checked with published / pinned outputs.
    #[test]
    fn keys_reach_their_ciphers() {
        let reference = [
            21, 34, 23, 141, 51, 164, 207, 128, 19, 10, 91, 22, 73, 144, 125, 16, 216, 152, 143,
            131, 121, 121, 101, 39, 98, 87, 76, 45, 42, 132, 34, 2,
        ];
        let names: [u8; 64] = std::array::from_fn(|i| i as u8);
        let text = KeyFile::from_keys(names, reference).to_text();
        let key = KeyFile::parse(&text, Path::new("-")).unwrap();
        let anon = key.crypto_pan().anonymize("128.11.68.132".parse().unwrap());
        assert_eq!(anon, "135.242.180.132".parse::<std::net::IpAddr>().unwrap());
        assert_eq!(
            key.name_cipher().encrypt(b"hello"),
            "~MBvMxWxPWpUFHKSJyyPHxNjnYFzxA_Yut_97SNWDxYA"
        );
    }

    #[test]
    fn key_id_detects_a_wrong_key() {
        let a = KeyFile::from_keys([1; 64], [2; 32]);
        let b = KeyFile::from_keys([1; 64], [3; 32]);
        assert_ne!(a.key_id(), b.key_id());
        a.check_key_id(&a.key_id().to_uppercase()).unwrap();
        let err = a.check_key_id(&b.key_id()).unwrap_err();
        assert!(matches!(err, Error::WrongKey { .. }));
        assert!(err.to_string().contains(&b.key_id()));
        // Pinned: an id recorded in old datasets must keep matching.
        assert_eq!(a.key_id(), FROZEN_ID);
    }
    /// Cross-checked with Python's hashlib.
    const FROZEN_ID: &str = "ad741bbf545ad315";
}
