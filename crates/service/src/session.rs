//! The browser's session: a browser cannot send a bearer header when it loads a page, so
//! `/login` takes a token once and keeps it in an HttpOnly, SameSite=Strict cookie, which
//! [`crate::auth::authenticate`] accepts as it accepts the header.
//!
//! Everything about the cookie is here: its name, how it is set, cleared and read back. What
//! the cookie holds (today the token itself, percent-encoded) is this module's business
//! alone, so that it can become an opaque, expiring session id without its users changing.

use axum::http::{header, HeaderMap};

/// The cookie `/login` sets.
pub const COOKIE: &str = "tapdeck_token";

/// The token in the request's cookie, if any.
pub fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .and_then(|(_, v)| percent_decode(v))
}

/// The `Set-Cookie` value that keeps `token` (`Secure` when served over TLS).
pub fn set_cookie(token: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict{}",
        percent_encode(token),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that forgets it.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn the_cookie_round_trips_any_token_and_ignores_other_cookies() {
        for token in ["abc123", "a b;c=d%e,f\"g", "ünïcode-tøken"] {
            let set = set_cookie(token, true);
            assert!(
                set.contains("HttpOnly")
                    && set.contains("SameSite=Strict")
                    && set.ends_with("Secure")
            );
            let value = set.split(';').next().unwrap();
            let mut h = HeaderMap::new();
            h.insert(
                header::COOKIE,
                HeaderValue::from_str(&format!("other=1; {value}; x=y")).unwrap(),
            );
            assert_eq!(cookie_token(&h).as_deref(), Some(token));
        }
        assert_eq!(cookie_token(&HeaderMap::new()), None);
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("tapdeck_token=%zz"),
        );
        assert_eq!(cookie_token(&h), None, "a malformed escape is no token");
    }
}
