//! Deterministic, reversible encryption of file and directory names (AES-256-SIV, RFC 5297).

use std::sync::{Mutex, MutexGuard};

use aes_siv::aead::generic_array::GenericArray;
use aes_siv::siv::Aes256Siv;
use aes_siv::KeyInit;
use data_encoding::BASE64URL_NOPAD;
use zeroize::Zeroizing;

use crate::error::{excerpt, Error};

/// Marks an encrypted name. `~` is legal in file names, Parquet strings and URLs, and no
/// base64url text starts with it, so a reader can tell encrypted names from plain ones.
pub const ENCRYPTED_MARKER: char = '~';

/// Names are padded to a multiple of this many bytes before encryption, so the ciphertext
/// reveals the length of a name only to within this bucket.
pub const LENGTH_BUCKET: usize = 16;

/// The fixed associated data: binds ciphertexts to this use and format version, so the same
/// key used elsewhere (or a later format) can never yield a ciphertext that decrypts here.
const CONTEXT: &[u8] = b"tapdeck-anon name v1";

/// The SIV tag that precedes the ciphertext.
const TAG_LEN: usize = 16;

/// Longest encrypted component `decrypt` accepts (characters after the marker). Real names are
/// at most a few hundred bytes; this bounds the work an arbitrary input can cause.
const MAX_ENCODED_LEN: usize = 64 * 1024;

/// Encrypts names so that equal names give equal ciphertexts (analyses can still group and
/// join on them) while only the holder of the key can read them.
///
/// `Send + Sync`. It keeps one keyed AES-SIV state behind a mutex (re-keying on every call
/// cost 40 % of an encryption); threads that encrypt a lot should each use their own clone,
/// which gets its own state, so the mutex is never contended.
pub struct NameCipher {
    key: Zeroizing<[u8; 64]>,
    siv: Mutex<Aes256Siv>,
}

impl Clone for NameCipher {
    fn clone(&self) -> NameCipher {
        NameCipher::new(&self.key)
    }
}

impl std::fmt::Debug for NameCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NameCipher { key: <secret> }")
    }
}

impl NameCipher {
    /// `key` is an AES-256-SIV key: 32 bytes for the S2V/CMAC half, then 32 for the CTR half.
    pub fn new(key: &[u8; 64]) -> NameCipher {
        NameCipher {
            key: Zeroizing::new(*key),
            siv: Mutex::new(Aes256Siv::new(GenericArray::from_slice(&key[..]))),
        }
    }

    fn siv(&self) -> MutexGuard<'_, Aes256Siv> {
        // No code path panics while holding the lock, and the state is reset by every call
        // anyway, so a poisoned lock is still usable.
        self.siv
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Encrypts one name (any bytes: NFS names need not be UTF-8) to `~` + unpadded base64url.
    /// The result never contains `/`, so it is a valid path component.
    pub fn encrypt(&self, name: &[u8]) -> String {
        let padded_len = (name.len() / LENGTH_BUCKET + 1) * LENGTH_BUCKET;
        let mut buf = Vec::with_capacity(padded_len + TAG_LEN);
        buf.extend_from_slice(name);
        // ISO/IEC 7816-4 padding: one 0x80, then zeros. Always at least one byte, so it is
        // unambiguous to strip.
        buf.push(0x80);
        buf.resize(padded_len, 0);
        self.siv()
            .encrypt_in_place([CONTEXT], &mut buf)
            .expect("AES-SIV encryption with one header cannot fail");
        let mut out = String::with_capacity(1 + BASE64URL_NOPAD.encode_len(buf.len()));
        out.push(ENCRYPTED_MARKER);
        BASE64URL_NOPAD.encode_append(&buf, &mut out);
        out
    }

    /// Reverses [`encrypt`](Self::encrypt). Fails (never panics) on anything it did not make
    /// with this key.
    pub fn decrypt(&self, s: &str) -> Result<Vec<u8>, Error> {
        let Some(encoded) = s.strip_prefix(ENCRYPTED_MARKER) else {
            return Err(Error::NotEncrypted { input: excerpt(s) });
        };
        if encoded.len() > MAX_ENCODED_LEN {
            return Err(Error::BadEncoding { input: excerpt(s) });
        }
        let mut buf = BASE64URL_NOPAD
            .decode(encoded.as_bytes())
            .map_err(|_| Error::BadEncoding { input: excerpt(s) })?;
        // A valid ciphertext is the tag plus at least one padding bucket.
        if buf.len() < TAG_LEN + LENGTH_BUCKET || (buf.len() - TAG_LEN) % LENGTH_BUCKET != 0 {
            return Err(Error::Authentication { input: excerpt(s) });
        }
        self.siv()
            .decrypt_in_place([CONTEXT], &mut buf)
            .map_err(|_| Error::Authentication { input: excerpt(s) })?;
        // Authentic, so the padding is ours; still check rather than trust.
        let end = buf
            .iter()
            .rposition(|&b| b != 0)
            .filter(|&i| buf[i] == 0x80)
            .ok_or_else(|| Error::Authentication { input: excerpt(s) })?;
        buf.truncate(end);
        Ok(buf)
    }

    /// Encrypts each `/`-separated component of a path separately, so equal directory names
    /// stay equal and the tree shape (depth, siblings) stays analysable. Empty components
    /// (leading, trailing or doubled `/`), `.` and `..` are structure, not names, and are kept.
    pub fn encrypt_path(&self, path: &[u8]) -> String {
        let mut out = String::new();
        for (i, component) in path.split(|&b| b == b'/').enumerate() {
            if i > 0 {
                out.push('/');
            }
            match component {
                b"" | b"." | b".." => {
                    // Plain ASCII, so this cannot fail.
                    out.push_str(std::str::from_utf8(component).unwrap_or_default())
                }
                name => out.push_str(&self.encrypt(name)),
            }
        }
        out
    }

    /// Reverses [`encrypt_path`](Self::encrypt_path); also decrypts a single name. Every
    /// component other than empty, `.` and `..` must be an encrypted name.
    pub fn decrypt_path(&self, s: &str) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(s.len());
        for (i, component) in s.split('/').enumerate() {
            if i > 0 {
                out.push(b'/');
            }
            match component {
                "" | "." | ".." => out.extend_from_slice(component.as_bytes()),
                name => out.extend_from_slice(&self.decrypt(name)?),
            }
        }
        Ok(out)
    }

    /// Whether `s` looks like the output of [`encrypt`](Self::encrypt) (marker and alphabet
    /// only; authenticity needs [`decrypt`](Self::decrypt)).
    pub fn is_encrypted(s: &str) -> bool {
        s.strip_prefix(ENCRYPTED_MARKER).is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cipher() -> NameCipher {
        let mut key = [0u8; 64];
        for (i, b) in key.iter_mut().enumerate() {
            *b = i as u8;
        }
        NameCipher::new(&key)
    }

    #[test]
    fn equal_names_give_equal_ciphertexts_and_round_trip() {
        let c = cipher();
        for name in [
            &b""[..],
            b"a",
            b"thesis.tex",
            &[0xff, 0xfe, 0x00, 0x80],
            &[b'x'; 255],
        ] {
            let e1 = c.encrypt(name);
            let e2 = c.encrypt(name);
            assert_eq!(e1, e2);
            assert!(e1.starts_with('~'));
            assert!(!e1.contains('/'));
            assert!(NameCipher::is_encrypted(&e1));
            assert_eq!(c.decrypt(&e1).unwrap(), name);
        }
        assert_ne!(c.encrypt(b"a"), c.encrypt(b"b"));
    }

    #[test]
    fn clones_and_threads_agree() {
        let c = cipher();
        let want = c.encrypt(b"shared");
        let c2 = c.clone();
        assert_eq!(c2.encrypt(b"shared"), want);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        assert_eq!(c.encrypt(b"shared"), want);
                        assert!(c
                            .decrypt("~AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
                            .is_err());
                        assert_eq!(c.decrypt(&want).unwrap(), b"shared");
                    }
                });
            }
        });
    }

    #[test]
    fn length_is_bucketed() {
        let c = cipher();
        // 0..=15 bytes share one length, 16..=31 the next.
        let short: Vec<usize> = (0..16).map(|n| c.encrypt(&vec![b'a'; n]).len()).collect();
        assert!(short.iter().all(|&l| l == short[0]), "{short:?}");
        let next = c.encrypt(&[b'a'; 16]).len();
        assert!(next > short[0]);
        assert_eq!(c.encrypt(&[b'a'; 31]).len(), next);
        // "~" + base64url(16 tag + 16 data) = 1 + 43 chars.
        assert_eq!(short[0], 44);
    }

    #[test]
    fn a_different_key_fails_authentication() {
        let e = cipher().encrypt(b"secret.doc");
        let other = NameCipher::new(&[7u8; 64]);
        assert!(matches!(
            other.decrypt(&e),
            Err(Error::Authentication { .. })
        ));
    }

    #[test]
    fn tampering_is_detected() {
        let c = cipher();
        let e = c.encrypt(b"report.pdf");
        let mut bytes = e.into_bytes();
        // Change one base64 character in the middle.
        let i = bytes.len() / 2;
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert!(matches!(
            c.decrypt(&tampered),
            Err(Error::Authentication { .. })
        ));
    }

    #[test]
    fn malformed_inputs_are_errors() {
        let c = cipher();
        assert!(matches!(
            c.decrypt("plain"),
            Err(Error::NotEncrypted { .. })
        ));
        assert!(matches!(c.decrypt("~"), Err(Error::Authentication { .. })));
        assert!(matches!(c.decrypt("~!!!"), Err(Error::BadEncoding { .. })));
        assert!(matches!(
            c.decrypt("~AAAA"),
            Err(Error::Authentication { .. })
        ));
        // Padded base64 is not our encoding.
        assert!(matches!(c.decrypt("~AA=="), Err(Error::BadEncoding { .. })));
        let long = format!("~{}", "A".repeat(MAX_ENCODED_LEN + 4));
        assert!(matches!(c.decrypt(&long), Err(Error::BadEncoding { .. })));
    }

    #[test]
    fn paths_encrypt_per_component() {
        let c = cipher();
        let p = c.encrypt_path(b"/home/alice/../alice/./notes//x");
        let parts: Vec<&str> = p.split('/').collect();
        assert_eq!(parts.len(), 9);
        assert_eq!(parts[0], "");
        assert_eq!(parts[3], "..");
        assert_eq!(parts[5], ".");
        assert_eq!(parts[7], "");
        // Same name, same ciphertext, wherever it is.
        assert_eq!(parts[2], parts[4]);
        assert_eq!(parts[2], c.encrypt(b"alice"));
        assert_eq!(
            c.decrypt_path(&p).unwrap(),
            b"/home/alice/../alice/./notes//x"
        );
        assert_eq!(c.encrypt_path(b""), "");
        assert_eq!(c.encrypt_path(b"/"), "/");
        assert_eq!(c.decrypt_path("/").unwrap(), b"/");
        // A single name is a one-component path.
        assert_eq!(c.decrypt_path(&c.encrypt(b"x y")).unwrap(), b"x y");
        assert!(matches!(
            c.decrypt_path("/home/~x"),
            Err(Error::NotEncrypted { .. })
        ));
    }

    /// Pins the format: a change to the padding, context or encoding would make old datasets
    /// undecryptable, so it must be a deliberate, versioned decision.
    #[test]
    fn format_is_stable() {
        let c = cipher();
        let e = c.encrypt(b"hello");
        assert_eq!(c.decrypt(&e).unwrap(), b"hello");
        assert_eq!(e, FROZEN_HELLO, "the name format changed");
    }
    /// Cross-checked with an independent AES-SIV (Python `cryptography`'s `AESSIV`, key
    /// 00..3f, plaintext "hello" + 0x80 + ten zeros, associated data [CONTEXT]).
    const FROZEN_HELLO: &str = "~MBvMxWxPWpUFHKSJyyPHxNjnYFzxA_Yut_97SNWDxYA";
}
