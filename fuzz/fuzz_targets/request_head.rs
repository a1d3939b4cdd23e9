//! A request's head as the service's checks read it (the `Host`, the bearer header, the
//! session cookie, the origin, the query values that go into the log): lines of
//! `name: value` become headers, the last line the query's values. No input panics, only
//! the token lets a request in, and no logged value holds a line break.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use tapdeck_service::auth::{self, Tokens, Verdict};
use tapdeck_service::config::ServeSettings;
use tapdeck_service::listen::Hosts;
use tapdeck_service::session::{self, Sessions};
use tapdeck_service::query;

const TOKEN: &[u8] = b"alice-0123456789abcdef";
static TOKENS: std::sync::OnceLock<Tokens> = std::sync::OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let mut headers = HeaderMap::new();
    let mut lines = data.split(|&b| b == b'\n').peekable();
    let mut last = &[][..];
    while let Some(line) = lines.next() {
        if lines.peek().is_none() {
            last = line;
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    let tokens = TOKENS.get_or_init(|| {
        // Written once per process: the service reads tokens only from files.
        let path = std::env::temp_dir().join(format!("tapdeck-fuzz-tokens-{}", std::process::id()));
        std::fs::write(&path, b"alice alice-0123456789abcdef\n").unwrap();
        let settings = ServeSettings { token_file: Some(path), ..ServeSettings::default() };
        Tokens::load(&settings).unwrap()
    });
    let sessions = Sessions::default();
    let host = headers.get("host").map(|v| v.as_bytes());
    Hosts::new("127.0.0.1:9780".parse().unwrap(), &[], false).admits(host);
    Hosts::new("0.0.0.0:9780".parse().unwrap(), &["tap.example.org".into()], true).admits(host);
    let secure = data.first() == Some(&b'1');
    let _ = session::cross_site(&headers, secure);
    let _ = session::cookie_id(&headers, secure);
    match auth::authenticate(tokens, &sessions, &headers, secure) {
        Verdict::Token(_) => assert_eq!(auth::bearer(&headers).map(str::as_bytes), Some(TOKEN)),
        Verdict::Open(_) | Verdict::Session(_) => panic!("let in without a credential"),
        Verdict::WrongToken | Verdict::Nobody => {}
    }
    let text = String::from_utf8_lossy(last).into_owned();
    let req = query::Request {
        start: Some(text.clone()),
        end: Some(text.clone()),
        filter: Some(text.clone()),
        format: Some(text),
    };
    assert!(!req.describe().contains(['\n', '\r']));
});
