//! Name encryption against an independent AES-SIV: Python's `cryptography` (OpenSSL's
//! AES-SIV), given the format as the README states it (ISO 7816-4 padding to 16 bytes, the
//! fixed associated data, "~" + unpadded base64url). Skips, saying so, where Python or the
//! package is missing.

use std::io::Write;
use std::process::{Command, Stdio};

use rand::{Rng, SeedableRng};
use tapdeck_anon::NameCipher;

const ORACLE: &str = r#"
import base64, sys
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
for line in sys.stdin:
    key, name = line.split(" ")
    name = bytes.fromhex(name.strip())
    padded = name + b"\x80" + b"\0" * (15 - len(name) % 16)
    ct = AESSIV(bytes.fromhex(key)).encrypt(padded, [b"tapdeck-anon name v1"])
    print("~" + base64.urlsafe_b64encode(ct).decode().rstrip("="))
"#;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn names_match_an_independent_aes_siv() {
    let probe = Command::new("python3")
        .args([
            "-c",
            "from cryptography.hazmat.primitives.ciphers.aead import AESSIV",
        ])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: python3 with the `cryptography` package (AESSIV) is not available");
        return;
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(5297);
    let mut input = String::new();
    let mut ours = Vec::new();
    for i in 0..400 {
        let key: [u8; 64] = std::array::from_fn(|_| rng.gen());
        // Every length from 0 to 40 (around the bucket edges), then longer ones.
        let len = if i <= 40 { i } else { rng.gen_range(0..300) };
        let name: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let cipher = NameCipher::new(&key);
        let enc = cipher.encrypt(&name);
        assert_eq!(cipher.decrypt(&enc).unwrap(), name);
        input.push_str(&format!("{} {}\n", hex(&key), hex(&name)));
        ours.push(enc);
    }
    let mut child = Command::new("python3")
        .args(["-c", ORACLE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let theirs: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(theirs.len(), ours.len());
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "name {i}");
    }
}
