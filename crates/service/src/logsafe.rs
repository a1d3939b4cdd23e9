//! Values from requests, made safe to log: a newline in a query's `start` must not start a
//! forged line in the log, and a 64 KB filter must not fill it. Every value a request
//! brought (parameters, headers, errors that repeat them) goes into a log line through
//! [`text`] or [`filter`].

use std::fmt;

/// Characters of a filter the log keeps; the rest is summed up by its length and hash.
pub const FILTER_CHARS: usize = 200;
/// Characters of any other value the log keeps.
pub const TEXT_CHARS: usize = 400;

/// `value` with control characters and line separators escaped (`\n`, `\u{1b}`), cut
/// at [`TEXT_CHARS`].
pub fn text(value: &str) -> Escaped<'_> {
    Escaped {
        value,
        keep: TEXT_CHARS,
    }
}

/// A filter for the log: quoted and escaped, and beyond [`FILTER_CHARS`] cut, with its
/// length and the start of its SHA-256 (the same filter always logs the same hash).
pub fn filter(value: &str) -> String {
    let n = value.chars().count();
    let head = Escaped {
        value,
        keep: FILTER_CHARS,
    };
    if n <= FILTER_CHARS {
        return format!("\"{head}\"");
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, value.as_bytes());
    let hex: String = digest.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("\"{head}\"… ({n} characters, sha256 {hex})")
}

/// See [`text`].
pub struct Escaped<'a> {
    value: &'a str,
    keep: usize,
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut chars = self.value.chars();
        for c in chars.by_ref().take(self.keep) {
            // Control characters (C0, C1) and the Unicode line and paragraph separators:
            // whatever a terminal or a log reader might take for a new line.
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        if chars.next().is_some() {
            f.write_str("…")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_value_can_start_a_log_line() {
        let forged = "2026-01-01\n2026-12-07T00:00:00Z  INFO forged\r\x1b[2J\u{2028}x";
        let out = text(forged).to_string();
        assert!(!out.contains(['\n', '\r', '\x1b', '\u{2028}']), "{out}");
        assert!(out.starts_with("2026-01-01\\n2026-12-07T00:00:00Z  INFO forged\\r"));
        assert_eq!(text("tcp port 80").to_string(), "tcp port 80");
        assert!(!filter(forged).contains('\n'));
    }

    #[test]
    fn long_filters_are_cut_and_hashed() {
        assert_eq!(filter("host 198.18.0.1"), "\"host 198.18.0.1\"");
        let long = "host 198.18.0.1 or ".repeat(3500);
        let out = filter(&long);
        assert!(out.len() < FILTER_CHARS + 80, "{}", out.len());
        assert!(out.contains(&format!("({} characters, sha256 ", long.len())));
        assert_eq!(out, filter(&long), "the same filter, the same line");
        assert_ne!(out, filter(&format!("{long}x")));
        let cut = text(&"a".repeat(TEXT_CHARS + 5)).to_string();
        assert_eq!(cut.chars().count(), TEXT_CHARS + 1);
    }
}
