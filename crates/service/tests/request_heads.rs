//! The checks every request passes before a handler (the `Host`, the bearer header, the
//! session cookie, the origin, the values that go into the log) never panic, whatever bytes
//! a client sends, and a request with neither a valid token nor a live session is never
//! let in. A seeded pseudo-random pass that runs with every test run; `fuzz/` has the same
//! under libFuzzer (`request_head`), and the end-to-end suite fuzzes a real `serve` over
//! sockets (tests/e2e/test_serve_hostile.py).

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use tapdeck_service::auth::{self, Tokens, Verdict};
use tapdeck_service::config::ServeSettings;
use tapdeck_service::listen::Hosts;
use tapdeck_service::session::{self, Sessions};
use tapdeck_service::{logsafe, query};

const TOKEN: &str = "alice-0123456789abcdef";

/// xorshift64*: enough randomness for inputs, the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Bytes biased toward what the parsers look at.
    fn bytes(&mut self) -> Vec<u8> {
        const PIECES: &[&[u8]] = &[
            b"Bearer ",
            b"bearer",
            TOKEN.as_bytes(),
            b"tapdeck_session=",
            b"__Host-tapdeck_session=",
            b"; ",
            b"=",
            b"http://",
            b"https://",
            b"127.0.0.1",
            b":9780",
            b"[::1]",
            b"localhost",
            b"evil.example",
            b"null",
            b"same-origin",
            b"cross-site",
            b"%",
            b"\r\n",
            b"\n",
            b"\0",
            b"\xff",
            b"\xc3\xa9",
            b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ];
        let mut out = Vec::new();
        for _ in 0..self.below(8) {
            if self.below(3) == 0 {
                out.push(self.next() as u8);
            } else {
                out.extend_from_slice(PIECES[self.below(PIECES.len())]);
            }
        }
        out
    }
}

fn random_headers(rng: &mut Rng) -> HeaderMap {
    const NAMES: &[&str] = &[
        "host",
        "authorization",
        "cookie",
        "origin",
        "sec-fetch-site",
        "x-other",
    ];
    let mut h = HeaderMap::new();
    for _ in 0..rng.below(7) {
        let name = HeaderName::from_static(NAMES[rng.below(NAMES.len())]);
        if let Ok(value) = HeaderValue::from_bytes(&rng.bytes()) {
            h.append(name, value);
        }
    }
    h
}

#[test]
fn no_request_head_panics_or_gets_in_without_a_credential() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, format!("alice {TOKEN}\n")).unwrap();
    let tokens = Tokens::load(&ServeSettings {
        token_file: Some(file),
        ..ServeSettings::default()
    })
    .unwrap();
    let sessions = Sessions::default();
    let hosts = [
        Hosts::new("127.0.0.1:9780".parse().unwrap(), &[], false),
        Hosts::new(
            "0.0.0.0:9780".parse().unwrap(),
            &["tap.example.org".into()],
            true,
        ),
    ];
    let mut rng = Rng(0x7a9d_ec31_0000_0031);
    let mut let_in = 0;
    for _ in 0..50_000 {
        let h = random_headers(&mut rng);
        for hosts in &hosts {
            hosts.admits(h.get("host").map(|v| v.as_bytes()));
        }
        let secure = rng.below(2) == 0;
        let _ = session::cross_site(&h, secure);
        let _ = session::cookie_id(&h, secure);
        match auth::authenticate(&tokens, &sessions, &h, secure) {
            Verdict::Token(identity) => {
                assert_eq!(auth::bearer(&h), Some(TOKEN), "only the token opens");
                assert_eq!(identity.name, "alice");
                let_in += 1;
            }
            Verdict::Open(_) | Verdict::Session(_) => panic!("no session exists: {h:?}"),
            Verdict::WrongToken | Verdict::Nobody => {}
        }
        let text = String::from_utf8_lossy(&rng.bytes()).into_owned();
        let req = query::Request {
            start: Some(text.clone()),
            end: Some(text.repeat(rng.below(4))),
            filter: Some(text.repeat(rng.below(100))),
            format: Some(text.clone()),
        };
        let line = req.describe();
        assert!(!line.contains(['\n', '\r']), "{line:?}");
        assert!(!logsafe::filter(&text).contains('\n'));
    }
    assert!(let_in > 0, "the generator reaches the valid token too");
}
