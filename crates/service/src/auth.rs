//! Who may ask the service, and who asked: bearer tokens with names.
//!
//! Two files give tokens: `token-file`, one `NAME TOKEN` pair a line, and the older
//! `metrics-token-file`, one token that is named `metrics`. Both may be set; every token
//! they hold is accepted. With either set, every request must carry one of them (on
//! loopback too); the name of the token a request carried is its [`Identity`], which the
//! query log names.
//!
//! Tokens are compared in constant time ([`subtle`]), every token every time, so the time
//! an answer takes tells nothing about how much of which token a guess got right.

use std::path::{Path, PathBuf};

use axum::http::{header, HeaderMap};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::config::ServeSettings;

/// The name `metrics-token-file`'s token goes by.
pub const METRICS_NAME: &str = "metrics";
/// The name of every caller when no token is required.
pub const ANONYMOUS: &str = "anonymous";
/// A named token is at least this long: long enough not to be guessed.
pub const MIN_TOKEN_LEN: usize = 16;

/// Why a token file gives no tokens: one line, naming the file (and the line).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read token-file {}: {source}", path.display())]
    ReadTokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: {problem}", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        problem: LineProblem,
    },
    #[error("token-file {} holds no `NAME TOKEN` line: an empty file would let nobody in, or everybody", path.display())]
    NoPairs { path: PathBuf },
    #[error("cannot read metrics-token-file {}: {source}", path.display())]
    ReadMetricsTokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("metrics-token-file {} is empty: put a token in it (e.g. `openssl rand -hex 32 > {}`)", path.display(), path.display())]
    EmptyMetricsToken { path: PathBuf },
    #[error("{}:{line}: the metrics token has {len} characters, fewer than {MIN_TOKEN_LEN} (e.g. `openssl rand -hex 32`)", path.display())]
    ShortMetricsToken {
        path: PathBuf,
        line: usize,
        len: usize,
    },
    #[error("cannot read token file {}: {source}", path.display())]
    ReadClientTokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("token file {} has no token named `{name}`", path.display())]
    NoTokenNamed { path: PathBuf, name: String },
}

/// What is wrong with one line of a token file.
#[derive(Debug, thiserror::Error)]
pub enum LineProblem {
    #[error("expected `NAME TOKEN` (two words), found {words} word(s)")]
    NotAPair { words: usize },
    #[error("the name `{name}` may hold only letters, digits and - _ . @")]
    BadName { name: String },
    #[error("the token of `{name}` has {len} characters, fewer than {MIN_TOKEN_LEN} (e.g. `openssl rand -hex 32`)")]
    ShortToken { name: String, len: usize },
    #[error("the name `{name}` is also on line {first}: names must be unique")]
    DuplicateName { name: String, first: usize },
    #[error("the token of `{name}` is another name's too: a token must say who it is")]
    SharedToken { name: String },
    #[error("the name `{METRICS_NAME}` is metrics-token-file's token: name this one otherwise")]
    MetricsNameTaken,
}

/// Who made a request: the name of the token it carried (see [`authenticate`]), and what
/// that token opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub scope: Scope,
}

/// What a token opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every route: a `token-file` token, or anyone when no token is required.
    Everything,
    /// `/metrics` and `/healthz` only: `metrics-token-file`'s token is Prometheus's, kept
    /// in its config and on its disk; it must not download packets.
    Metrics,
}

impl Scope {
    /// The routes the metrics token opens.
    pub const METRICS_PATHS: [&'static str; 2] = ["/metrics", "/healthz"];

    pub fn allows(self, path: &str) -> bool {
        self == Scope::Everything || Self::METRICS_PATHS.contains(&path)
    }
}

impl Identity {
    pub fn anonymous() -> Identity {
        Identity {
            name: ANONYMOUS.into(),
            scope: Scope::Everything,
        }
    }
}

/// The tokens in force, each with its name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    /// `metrics-token-file`'s (its name is [`METRICS_NAME`]: `token-file` may not use it
    /// while this is set).
    metrics: Option<Vec<u8>>,
    /// `token-file`'s, in its order.
    named: Vec<(String, Vec<u8>)>,
}

impl Tokens {
    /// The tokens of `settings`' token files; an unreadable, empty or malformed file is an
    /// error, never an open door.
    pub fn load(settings: &ServeSettings) -> Result<Tokens, TokenError> {
        let mut tokens = Tokens::default();
        if let Some(path) = &settings.metrics_token_file {
            tokens.metrics = Some(read_metrics_token(path)?.into_bytes());
        }
        if let Some(path) = &settings.token_file {
            let text =
                std::fs::read_to_string(path).map_err(|source| TokenError::ReadTokenFile {
                    path: path.clone(),
                    source,
                })?;
            for (line, name, token) in parse_token_file(path, &text)? {
                if name == METRICS_NAME && settings.metrics_token_file.is_some() {
                    return Err(TokenError::Line {
                        path: path.clone(),
                        line,
                        problem: LineProblem::MetricsNameTaken,
                    });
                }
                tokens.named.push((name, token.into_bytes()));
            }
        }
        Ok(tokens)
    }

    /// No token is required.
    pub fn is_empty(&self) -> bool {
        self.metrics.is_none() && self.named.is_empty()
    }

    /// Which files' tokens differ between `self` and `other`, by their keys.
    pub fn changed_keys(&self, other: &Tokens) -> Vec<&'static str> {
        let mut keys = Vec::new();
        if self.metrics != other.metrics {
            keys.push("metrics-token-file");
        }
        if self.named != other.named {
            keys.push("token-file");
        }
        keys
    }

    /// Every token with its name and what it opens, `metrics-token-file`'s first.
    fn entries(&self) -> impl Iterator<Item = (&str, &[u8], Scope)> {
        let metrics = self
            .metrics
            .as_deref()
            .map(|t| (METRICS_NAME, t, Scope::Metrics));
        let named = self
            .named
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_slice(), Scope::Everything));
        metrics.into_iter().chain(named)
    }

    /// The name of the token equal to `given`; see [`Tokens::identify`].
    pub fn find(&self, given: &[u8]) -> Option<&str> {
        self.position(given)
            .and_then(|i| self.entries().nth(i))
            .map(|(name, _, _)| name)
    }

    /// The identity of the token equal to `given`. Every token is compared, each in
    /// constant time, and the match is selected without a branch.
    pub fn identify(&self, given: &[u8]) -> Option<Identity> {
        let (name, _, scope) = self.entries().nth(self.position(given)?)?;
        Some(Identity {
            name: name.to_string(),
            scope,
        })
    }

    fn position(&self, given: &[u8]) -> Option<usize> {
        let mut found = subtle::Choice::from(0);
        let mut index = 0u64;
        for (i, (_, token, _)) in self.entries().enumerate() {
            let equal = token.ct_eq(given);
            index.conditional_assign(&(i as u64), equal);
            found |= equal;
        }
        bool::from(found).then_some(index as usize)
    }

    /// Whether `name`'s token is still `token` (a session lives only as long as that).
    pub fn holds(&self, name: &str, token: &[u8]) -> bool {
        self.entries()
            .any(|(n, t, _)| n == name && bool::from(t.ct_eq(token)))
    }

    /// Warnings about the token files of `settings` (others can read them).
    pub fn warnings(settings: &ServeSettings) -> Vec<String> {
        [&settings.metrics_token_file, &settings.token_file]
            .into_iter()
            .flatten()
            .filter_map(|p| readable_by_others(p))
            .collect()
    }
}

/// How a request was let in, or why not: see [`authenticate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No token is required: everyone is [`ANONYMOUS`].
    Open(Identity),
    /// A right bearer token.
    Token(Identity),
    /// A live session (the browser's cookie from `/login`).
    Session(Identity),
    /// A bearer token that is none of the service's: a guess, as far as the service can
    /// tell (the per-address backoff counts these).
    WrongToken,
    /// Nothing that names anyone: no header, no live session.
    Nobody,
}

/// Who sent `headers`. The one place that decides: without `tokens` everyone is
/// [`ANONYMOUS`]; otherwise the bearer header, or else the session cookie (see
/// [`crate::session`]; `secure`: the request came over TLS), must name someone.
pub fn authenticate(
    tokens: &Tokens,
    sessions: &crate::session::Sessions,
    headers: &HeaderMap,
    secure: bool,
) -> Verdict {
    if tokens.is_empty() {
        return Verdict::Open(Identity::anonymous());
    }
    if let Some(given) = bearer(headers) {
        return match tokens.identify(given.as_bytes()) {
            Some(identity) => Verdict::Token(identity),
            None => Verdict::WrongToken,
        };
    }
    match crate::session::cookie_id(headers, secure).and_then(|id| sessions.find(&id)) {
        // Only token-file tokens open sessions (see `/login`).
        Some(name) => Verdict::Session(Identity {
            name,
            scope: Scope::Everything,
        }),
        None => Verdict::Nobody,
    }
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme in any case, as
/// RFC 9110 says).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// `NAME TOKEN` pairs, one a line, with the line each is on; `#` starts a comment line,
/// blank lines are skipped. Errors are one line naming `path:line`.
pub fn parse_token_file(
    path: &Path,
    text: &str,
) -> Result<Vec<(usize, String, String)>, TokenError> {
    let mut out: Vec<(usize, String, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let (n, line) = (i + 1, line.trim());
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, token) = parse_pair(line, &out).map_err(|problem| TokenError::Line {
            path: path.to_path_buf(),
            line: n,
            problem,
        })?;
        out.push((n, name.to_string(), token.to_string()));
    }
    if out.is_empty() {
        return Err(TokenError::NoPairs {
            path: path.to_path_buf(),
        });
    }
    Ok(out)
}

/// One `NAME TOKEN` line, checked against the pairs `before` it.
fn parse_pair<'a>(
    line: &'a str,
    before: &[(usize, String, String)],
) -> Result<(&'a str, &'a str), LineProblem> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let [name, token] = words[..] else {
        return Err(LineProblem::NotAPair { words: words.len() });
    };
    let owned = || name.to_string();
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
    {
        return Err(LineProblem::BadName { name: owned() });
    }
    if token.len() < MIN_TOKEN_LEN {
        return Err(LineProblem::ShortToken {
            name: owned(),
            len: token.len(),
        });
    }
    if let Some((first, _, _)) = before.iter().find(|(_, other, _)| other == name) {
        return Err(LineProblem::DuplicateName {
            name: owned(),
            first: *first,
        });
    }
    if before.iter().any(|(_, _, other)| other == token) {
        return Err(LineProblem::SharedToken { name: owned() });
    }
    Ok((name, token))
}

/// `metrics-token-file`'s token: the whole file, surrounding whitespace ignored; an empty
/// file, or a token shorter than [`MIN_TOKEN_LEN`], is an error.
pub fn read_metrics_token(path: &Path) -> Result<String, TokenError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| TokenError::ReadMetricsTokenFile {
            path: path.to_path_buf(),
            source,
        })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(TokenError::EmptyMetricsToken {
            path: path.to_path_buf(),
        });
    }
    if token.chars().count() < MIN_TOKEN_LEN {
        // The line the token starts on, for the error.
        let leading = &text[..text.len() - text.trim_start().len()];
        return Err(TokenError::ShortMetricsToken {
            path: path.to_path_buf(),
            line: leading.matches('\n').count() + 1,
            len: token.chars().count(),
        });
    }
    Ok(token.to_string())
}

/// A warning when others than the file's owner and group can read a token file (they
/// would hold the service's keys); `None` when they cannot, or it cannot be told.
pub fn readable_by_others(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o004 != 0).then(|| {
        format!(
            "token file {} can be read by other users (mode {:o}): `chmod o-r {}`",
            path.display(),
            mode & 0o777,
            path.display()
        )
    })
}

/// The token a client sends, from a file that holds either one token or `NAME TOKEN`
/// lines (the first, or the one named `name`).
pub fn client_token(path: &Path, name: Option<&str>) -> Result<String, TokenError> {
    let text = std::fs::read_to_string(path).map_err(|source| TokenError::ReadClientTokenFile {
        path: path.to_path_buf(),
        source,
    })?;
    let single = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect::<Vec<_>>();
    if let ([one], None) = (&single[..], name) {
        if one.split_whitespace().count() == 1 {
            return Ok(one.to_string());
        }
    }
    let pairs = parse_token_file(path, &text)?;
    match name {
        None => Ok(pairs[0].2.clone()),
        Some(want) => pairs
            .into_iter()
            .find(|(_, n, _)| n == want)
            .map(|(_, _, t)| t)
            .ok_or_else(|| TokenError::NoTokenNamed {
                path: path.to_path_buf(),
                name: want.to_string(),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef-alice";
    const B: &str = "fedcba9876543210-bob";

    fn parse(text: &str) -> Result<Vec<(usize, String, String)>, String> {
        parse_token_file(Path::new("/etc/tapdeck/tokens"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn pairs_comments_and_blank_lines() {
        let got = parse(&format!(
            "# who may query\n\nalice {A}\n   # indented comment\n\tbob   {B}  \n"
        ))
        .unwrap();
        assert_eq!(
            got,
            vec![
                (3, "alice".to_string(), A.to_string()),
                (5, "bob".to_string(), B.to_string())
            ]
        );
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let e = parse(&format!("alice {A}\n\nbob\n")).unwrap_err();
        assert_eq!(
            e,
            "/etc/tapdeck/tokens:3: expected `NAME TOKEN` (two words), found 1 word(s)"
        );
        let e = parse(&format!("alice {A} extra\n")).unwrap_err();
        assert!(
            e.starts_with("/etc/tapdeck/tokens:1: expected `NAME TOKEN`"),
            "{e}"
        );
        let e = parse("alice short\n").unwrap_err();
        assert_eq!(
            e,
            "/etc/tapdeck/tokens:1: the token of `alice` has 5 characters, fewer than 16 (e.g. `openssl rand -hex 32`)"
        );
        let e = parse(&format!("al/ice {A}\n")).unwrap_err();
        assert!(
            e.starts_with("/etc/tapdeck/tokens:1: the name `al/ice`"),
            "{e}"
        );
        for e in [
            parse(""),
            parse("# nothing\n\n"),
            parse(&format!("alice {A}\nbob\n")),
        ] {
            assert!(!e.unwrap_err().contains('\n'), "one line");
        }
        assert!(parse("")
            .unwrap_err()
            .contains("holds no `NAME TOKEN` line"));
    }

    #[test]
    fn names_and_tokens_are_unique() {
        let e = parse(&format!("alice {A}\n# x\nalice {B}\n")).unwrap_err();
        assert_eq!(
            e,
            "/etc/tapdeck/tokens:3: the name `alice` is also on line 1: names must be unique"
        );
        let e = parse(&format!("alice {A}\nbob {A}\n")).unwrap_err();
        assert!(
            e.starts_with("/etc/tapdeck/tokens:2: the token of `bob` is another name's too"),
            "{e}"
        );
    }

    fn tokens() -> Tokens {
        Tokens {
            metrics: Some(b"m-secret-0123456789".to_vec()),
            named: vec![
                ("alice".into(), A.as_bytes().to_vec()),
                ("bob".into(), B.as_bytes().to_vec()),
            ],
        }
    }

    #[test]
    fn a_token_matches_only_itself_and_names_its_owner() {
        let t = tokens();
        assert_eq!(t.find(A.as_bytes()), Some("alice"));
        assert_eq!(t.find(B.as_bytes()), Some("bob"));
        assert_eq!(t.find(b"m-secret-0123456789"), Some(METRICS_NAME));
        for wrong in [
            &A[..A.len() - 1],
            &format!("{A}x"),
            &A.to_uppercase(),
            "",
            "m-secret-012345678X",
            "m-secret-012345678",
        ] {
            assert_eq!(t.find(wrong.as_bytes()), None, "{wrong:?}");
        }
        assert_eq!(
            Tokens::default().find(b""),
            None,
            "no tokens: nothing matches"
        );
    }

    #[test]
    fn the_header_is_read_as_a_bearer_token() {
        use axum::http::HeaderValue;
        let t = tokens();
        let who = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            t.find(bearer(&h)?.as_bytes()).map(str::to_string)
        };
        assert_eq!(who(&format!("Bearer {B}")).as_deref(), Some("bob"));
        assert_eq!(who(&format!("bearer {B}")).as_deref(), Some("bob"));
        assert_eq!(who(&format!("BEARER  {B} ")).as_deref(), Some("bob"));
        assert_eq!(who("Bearer "), None);
        assert_eq!(who(&format!("Basic {B}")), None);
        assert_eq!(who(B), None);
    }

    #[test]
    fn the_metrics_token_opens_only_its_routes_and_is_long_enough() {
        let t = tokens();
        let m = t.identify(b"m-secret-0123456789").unwrap();
        assert_eq!(m.scope, Scope::Metrics);
        assert!(m.scope.allows("/metrics") && m.scope.allows("/healthz"));
        for path in [
            "/",
            "/api/v1/packets",
            "/api/v1/status",
            "/login",
            "/metrics/",
        ] {
            assert!(!m.scope.allows(path), "{path}");
        }
        assert_eq!(t.identify(A.as_bytes()).unwrap().scope, Scope::Everything);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics");
        std::fs::write(&path, "\n\n  abc  \n").unwrap();
        let e = read_metrics_token(&path).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}:3: the metrics token has 3 characters, fewer than 16 (e.g. `openssl rand -hex 32`)",
                path.display()
            )
        );
        // A token-file token named `metrics` (without metrics-token-file) opens everything:
        // the scope is the file's, not the name's.
        let named = Tokens {
            metrics: None,
            named: vec![("metrics".into(), A.as_bytes().to_vec())],
        };
        assert_eq!(
            named.identify(A.as_bytes()).unwrap().scope,
            Scope::Everything
        );
    }

    #[test]
    fn a_token_file_others_can_read_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, format!("alice {A}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(readable_by_others(&path), None);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let w = readable_by_others(&path).unwrap();
        assert!(
            w.contains("can be read by other users (mode 644)")
                && w.contains(&*path.to_string_lossy()),
            "{w}"
        );
    }

    #[test]
    fn both_files_give_tokens_and_the_metrics_name_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let (named, metrics) = (dir.path().join("tokens"), dir.path().join("metrics"));
        std::fs::write(&named, format!("alice {A}\n")).unwrap();
        std::fs::write(&metrics, "m-secret-0123456789\n").unwrap();
        let mut settings = ServeSettings {
            token_file: Some(named.clone()),
            metrics_token_file: Some(metrics),
            ..ServeSettings::default()
        };
        let t = Tokens::load(&settings).unwrap();
        assert_eq!(t.find(A.as_bytes()), Some("alice"));
        assert_eq!(t.find(b"m-secret-0123456789"), Some(METRICS_NAME));
        std::fs::write(&named, format!("alice {A}\nmetrics {B}\n")).unwrap();
        let e = Tokens::load(&settings).unwrap_err().to_string();
        assert!(
            e.contains("tokens:2: the name `metrics` is metrics-token-file's"),
            "{e}"
        );
        // Without metrics-token-file the name is free.
        settings.metrics_token_file = None;
        let again = Tokens::load(&settings).unwrap();
        assert_eq!(again.find(B.as_bytes()), Some("metrics"));
        assert_eq!(
            t.changed_keys(&again),
            vec!["metrics-token-file", "token-file"]
        );
        assert!(Tokens::default().is_empty() && !again.is_empty());
    }

    #[test]
    fn a_client_reads_one_token_or_the_named_or_first_pair() {
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one");
        std::fs::write(&one, "  just-a-token \n").unwrap();
        assert_eq!(client_token(&one, None).unwrap(), "just-a-token");
        let pairs = dir.path().join("pairs");
        std::fs::write(&pairs, format!("# mine\nalice {A}\nbob {B}\n")).unwrap();
        assert_eq!(client_token(&pairs, None).unwrap(), A);
        assert_eq!(client_token(&pairs, Some("bob")).unwrap(), B);
        let e = client_token(&pairs, Some("carol")).unwrap_err().to_string();
        assert!(e.ends_with("has no token named `carol`"), "{e}");
    }
}
