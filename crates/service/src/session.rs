//! The browser's session: a browser cannot send a bearer header when it loads a page, so
//! `/login` takes a token once and gives the browser a session instead.
//!
//! The cookie holds an opaque id (32 random bytes), never the token: browsers send a host's
//! cookies to every port on it, so another service on the host sees the cookie, and a
//! session can expire and be revoked where a token cannot. Sessions live in this process
//! ([`Sessions`]): they end after their lifetime, at logout, when their token leaves the
//! token files (a reload), and when the service restarts.
//!
//! Over TLS the cookie is `__Host-` prefixed (`Secure`, `Path=/`, no `Domain`: only this
//! origin may set or overwrite it).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap};

use crate::logsafe;

/// The cookie over plain HTTP (a `__Host-` cookie must be `Secure`).
pub const COOKIE: &str = "tapdeck_session";
/// The cookie over TLS.
pub const SECURE_COOKIE: &str = "__Host-tapdeck_session";
/// How long a session lasts unless `session-lifetime` says otherwise.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at most; the oldest goes first (a login flood cannot fill the memory).
pub const MAX_SESSIONS: usize = 4096;

/// One login: whose token, and until when.
struct Session {
    name: String,
    /// The token it was opened with: a session lives only while that token does.
    token: Vec<u8>,
    expires: Instant,
}

/// The live sessions, by id.
#[derive(Default)]
pub struct Sessions {
    live: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// A new session for `name`, opened with `token`, lasting `lifetime`; its id.
    pub fn open(&self, name: &str, token: &[u8], lifetime: Duration) -> std::io::Result<String> {
        let id = random_id()?;
        let now = Instant::now();
        let mut live = self.live.lock().unwrap();
        live.retain(|_, s| s.expires > now);
        if live.len() >= MAX_SESSIONS {
            let oldest = live
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                live.remove(&oldest);
            }
        }
        live.insert(
            id.clone(),
            Session {
                name: name.to_string(),
                token: token.to_vec(),
                expires: now + lifetime,
            },
        );
        Ok(id)
    }

    /// The name of the token session `id` was opened with, while it lives.
    pub fn find(&self, id: &str) -> Option<String> {
        let mut live = self.live.lock().unwrap();
        let session = live.get(id)?;
        if session.expires <= Instant::now() {
            live.remove(id);
            return None;
        }
        Some(session.name.clone())
    }

    /// Ends session `id` (logout).
    pub fn close(&self, id: &str) {
        self.live.lock().unwrap().remove(id);
    }

    /// Ends every session whose name and token `holds` no longer (the tokens after a
    /// reload); how many ended.
    pub fn keep_only(&self, holds: impl Fn(&str, &[u8]) -> bool) -> usize {
        let mut live = self.live.lock().unwrap();
        let before = live.len();
        live.retain(|_, s| holds(&s.name, &s.token));
        before - live.len()
    }

    pub fn len(&self) -> usize {
        self.live.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// 32 bytes from the kernel's random source, in hex.
fn random_id() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`, which is valid
        // and writable for that length.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        filled += n as usize;
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Why a request that a browser may have sent on another site's behalf (a form posted to
/// `/login`, a request carrying the session cookie) is refused: `Sec-Fetch-Site` says
/// another site (on this host's other ports too: `same-site`), or `Origin` is not this
/// origin (`https://` + `Host` over TLS). `None`: it came from the service's own pages, or
/// from no page at all (a typed address, curl).
pub fn cross_site(headers: &HeaderMap, tls: bool) -> Option<String> {
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.as_bytes();
        if !(site.eq_ignore_ascii_case(b"same-origin") || site.eq_ignore_ascii_case(b"none")) {
            return Some(format!(
                "Sec-Fetch-Site: {}",
                logsafe::text(&String::from_utf8_lossy(site))
            ));
        }
    }
    let origin = headers.get(header::ORIGIN)?.as_bytes();
    // A browser that says `same-origin` (which no page's script can forge) may still send
    // `Origin: null` (a page under a strict referrer policy): its word stands for it.
    if origin == b"null"
        && headers
            .get("sec-fetch-site")
            .is_some_and(|s| s.as_bytes().eq_ignore_ascii_case(b"same-origin"))
    {
        return None;
    }
    let host = headers.get(header::HOST).map(|h| h.as_bytes());
    let scheme: &[u8] = if tls { b"https://" } else { b"http://" };
    let same = host.is_some_and(|host| {
        origin.len() == scheme.len() + host.len()
            && origin[..scheme.len()].eq_ignore_ascii_case(scheme)
            && origin[scheme.len()..].eq_ignore_ascii_case(host)
    });
    (!same).then(|| {
        format!(
            "Origin: {}",
            logsafe::text(&String::from_utf8_lossy(origin))
        )
    })
}

/// The session id in the request's cookie, if any: over TLS only the `__Host-` cookie,
/// which no plain-HTTP service on this host can have set (cookies do not keep to their
/// port; a planted session would log the victim in as someone else). A reload that turns
/// TLS on or off therefore asks browsers to log in again.
pub fn cookie_id(headers: &HeaderMap, secure: bool) -> Option<String> {
    let name = if secure { SECURE_COOKIE } else { COOKIE };
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().to_string())
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The `Set-Cookie` value that keeps session `id` for `lifetime` (`__Host-` and `Secure`
/// over TLS).
pub fn set_cookie(id: &str, secure: bool, lifetime: Duration) -> String {
    let name = if secure { SECURE_COOKIE } else { COOKIE };
    format!(
        "{name}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        lifetime.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that forgets it.
pub fn clear_cookie(secure: bool) -> String {
    let name = if secure { SECURE_COOKIE } else { COOKIE };
    format!(
        "{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;
    use crate::auth::Tokens;
    use crate::config::ServeSettings;

    const ALICE: &str = "0123456789abcdef-alice";

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn tokens_of(dir: &std::path::Path, text: &str) -> Tokens {
        let path = dir.join("tokens");
        std::fs::write(&path, text).unwrap();
        Tokens::load(&ServeSettings {
            token_file: Some(path),
            ..ServeSettings::default()
        })
        .unwrap()
    }

    fn cookie(set: &str) -> HeaderMap {
        let value = set.split(';').next().unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {value}; x=y")).unwrap(),
        );
        h
    }

    #[test]
    fn the_cookie_holds_an_id_not_the_token_and_names_its_owner() {
        let sessions = Sessions::default();
        let id = sessions
            .open("alice", ALICE.as_bytes(), DEFAULT_LIFETIME)
            .unwrap();
        assert_eq!(id.len(), 64);
        assert_ne!(
            id,
            sessions
                .open("alice", ALICE.as_bytes(), DEFAULT_LIFETIME)
                .unwrap()
        );
        for secure in [false, true] {
            let set = set_cookie(&id, secure, DEFAULT_LIFETIME);
            assert!(!set.contains(ALICE) && !set.contains("alice"), "{set}");
            assert!(set.contains("HttpOnly; SameSite=Strict; Max-Age=43200"));
            assert_eq!(set.starts_with("__Host-"), secure);
            assert_eq!(set.ends_with("; Secure"), secure);
            let got = cookie_id(&cookie(&set), secure).unwrap();
            assert_eq!(sessions.find(&got).unwrap(), "alice");
            assert_eq!(
                cookie_id(&cookie(&set), !secure),
                None,
                "over TLS only the __Host- cookie, without it only the plain one"
            );
        }
        assert_eq!(cookie_id(&HeaderMap::new(), false), None);
        assert_eq!(
            cookie_id(&cookie(&format!("{COOKIE}={ALICE}")), false),
            None,
            "only an id's shape is read"
        );
        sessions.close(&id);
        assert_eq!(sessions.find(&id), None, "logout ends it");
    }

    #[test]
    fn a_session_expires() {
        let sessions = Sessions::default();
        let id = sessions
            .open("alice", ALICE.as_bytes(), Duration::ZERO)
            .unwrap();
        assert_eq!(sessions.find(&id), None);
        assert!(sessions.is_empty(), "an expired session is forgotten");
    }

    #[test]
    fn a_reload_ends_the_sessions_of_removed_or_changed_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let bob = "fedcba9876543210-bob";
        let sessions = Sessions::default();
        let a = sessions
            .open("alice", ALICE.as_bytes(), DEFAULT_LIFETIME)
            .unwrap();
        let b = sessions
            .open("bob", bob.as_bytes(), DEFAULT_LIFETIME)
            .unwrap();
        let both = tokens_of(dir.path(), &format!("alice {ALICE}\nbob {bob}\n"));
        assert_eq!(sessions.keep_only(|n, t| both.holds(n, t)), 0);
        let alice_changed = tokens_of(dir.path(), &format!("alice {bob}-new\nbob {bob}\n"));
        assert_eq!(sessions.keep_only(|n, t| alice_changed.holds(n, t)), 1);
        assert_eq!(sessions.find(&a), None);
        assert_eq!(sessions.find(&b).unwrap(), "bob");
        let bob_gone = tokens_of(dir.path(), &format!("alice {ALICE}\n"));
        assert_eq!(sessions.keep_only(|n, t| bob_gone.holds(n, t)), 1);
        assert!(sessions.is_empty());
    }

    #[test]
    fn only_the_services_own_pages_and_no_page_at_all_pass() {
        let host = ("host", "127.0.0.1:9780");
        for ok in [
            vec![host],
            vec![host, ("sec-fetch-site", "same-origin")],
            vec![host, ("sec-fetch-site", "none")],
            vec![host, ("origin", "http://127.0.0.1:9780")],
            vec![
                host,
                ("origin", "HTTP://127.0.0.1:9780"),
                ("sec-fetch-site", "same-origin"),
            ],
            // Chromium's own form post from a page whose referrer policy hides its origin.
            vec![host, ("origin", "null"), ("sec-fetch-site", "same-origin")],
        ] {
            assert_eq!(cross_site(&headers(&ok), false), None, "{ok:?}");
        }
        for bad in [
            vec![host, ("sec-fetch-site", "cross-site")],
            vec![host, ("sec-fetch-site", "same-site")],
            vec![host, ("origin", "https://evil.example")],
            vec![host, ("origin", "null")],
            vec![host, ("origin", "http://127.0.0.1:9781")],
            vec![host, ("origin", "http://127.0.0.1:978")],
            vec![("origin", "http://127.0.0.1:9780")],
            // `same-origin` excuses only a null Origin, not another one.
            vec![
                host,
                ("origin", "http://127.0.0.1:9781"),
                ("sec-fetch-site", "same-origin"),
            ],
        ] {
            assert!(cross_site(&headers(&bad), false).is_some(), "{bad:?}");
        }
        // Over TLS the origin is https.
        let tls = headers(&[host, ("origin", "https://127.0.0.1:9780")]);
        assert_eq!(cross_site(&tls, true), None);
        assert!(cross_site(&tls, false).is_some());
    }
}
