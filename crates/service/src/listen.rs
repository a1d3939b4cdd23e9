//! Where the service listens: the address from `listen`, refused beyond loopback unless a
//! token is required, and the socket bound before capture starts (a taken port fails the
//! start, not a thread later).
//!
//! Which names and addresses the service answers to is here too ([`Hosts`]: the `Host` a
//! request names, against DNS rebinding), and how client addresses are counted
//! ([`client_key`]).

use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener};

/// Why the service cannot listen where it is told to.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("listen = {listen:?} is not an address and port (e.g. 127.0.0.1:9780): {source}")]
    NotAnAddress {
        listen: String,
        source: std::net::AddrParseError,
    },
    #[error("listen = {listen} is reachable beyond this host, and neither token-file nor metrics-token-file is set: set one (a file of secret tokens) or listen on 127.0.0.1")]
    OpenBeyondLoopback { listen: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The address to listen on, refused beyond loopback without a token file.
pub fn check_listen(listen: &str, has_token: bool) -> Result<SocketAddr, ListenError> {
    let addr: SocketAddr = listen.parse().map_err(|source| ListenError::NotAnAddress {
        listen: listen.to_string(),
        source,
    })?;
    if !addr.ip().is_loopback() && !has_token {
        return Err(ListenError::OpenBeyondLoopback {
            listen: listen.to_string(),
        });
    }
    Ok(addr)
}

/// Binds `addr` (from [`check_listen`]) now, so that a taken port fails the start, not a
/// thread later.
pub fn bind(addr: SocketAddr) -> Result<TcpListener, ListenError> {
    let bind_error = |source| ListenError::Bind { addr, source };
    let listener = TcpListener::bind(addr).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    Ok(listener)
}

/// The address a client is counted as, for limits per client: itself for IPv4 (and
/// IPv4-mapped IPv6), its /64 for IPv6 (one host gets a whole /64, so counting single
/// IPv6 addresses would count nothing).
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Which `Host` values the service answers (DNS rebinding: a page elsewhere rebinds its
/// own name to 127.0.0.1 and reads the answers, which its browser then takes for its own
/// site's). Checked when no token is required (the token is the defence otherwise) or
/// when `allowed-hosts` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts {
    listen: IpAddr,
    /// `allowed-hosts`, lowercased: a name (any port) or `name:port`.
    allowed: Vec<String>,
    enforced: bool,
}

impl Hosts {
    pub fn new(listen: SocketAddr, allowed: &[String], tokens_required: bool) -> Hosts {
        Hosts {
            listen: listen.ip(),
            allowed: allowed
                .iter()
                .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                .collect(),
            enforced: !tokens_required || !allowed.is_empty(),
        }
    }

    /// Whether a request naming `host` (the header's raw bytes; `None`: no header, which
    /// no browser sends) is answered.
    pub fn admits(&self, host: Option<&[u8]>) -> bool {
        if !self.enforced {
            return true;
        }
        let Some(raw) = host else { return true };
        let Ok(text) = std::str::from_utf8(raw) else {
            return false;
        };
        let text = text.trim().to_ascii_lowercase();
        let Some((name, port)) = split_host(&text) else {
            return false;
        };
        let name = name.trim_end_matches('.');
        if name == "localhost" {
            return true;
        }
        if let Ok(ip) = name.parse::<IpAddr>() {
            if ip.is_loopback() || ip == self.listen {
                return true;
            }
        }
        self.allowed.iter().any(|a| {
            a == name
                || port.is_some_and(|p| {
                    a.len() == name.len() + 1 + p.len() && *a == format!("{name}:{p}")
                })
        })
    }
}

/// A `Host` value's name (an IPv6 literal without its brackets) and port.
fn split_host(text: &str) -> Option<(&str, Option<&str>)> {
    let digits = |p: &str| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        return match after {
            "" => Some((v6, None)),
            _ => after
                .strip_prefix(':')
                .filter(|p| digits(p))
                .map(|p| (v6, Some(p))),
        };
    }
    match text.rsplit_once(':') {
        Some((name, port)) if digits(port) && !name.contains(':') => Some((name, Some(port))),
        Some(_) => None,
        None => Some((text, None)),
    }
    .filter(|(name, _)| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(listen: &str, allowed: &[&str], tokens: bool) -> Hosts {
        let allowed: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
        Hosts::new(listen.parse().unwrap(), &allowed, tokens)
    }

    #[test]
    fn without_tokens_only_loopback_names_and_the_listen_address_are_answered() {
        let h = hosts("127.0.0.1:9780", &[], false);
        for ok in [
            "127.0.0.1:9780",
            "127.0.0.1",
            "localhost:9780",
            "LOCALHOST",
            "localhost.:1",
            "127.1.2.3:80",
            "[::1]:9780",
            "[::1]",
        ] {
            assert!(h.admits(Some(ok.as_bytes())), "{ok}");
        }
        assert!(h.admits(None), "no Host: not a browser");
        for bad in [
            "attacker.example:9780",
            "attacker.example",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "0.0.0.0:9780",
            "[::1]x",
            "[::1]:",
            ":9780",
            "",
            "a:b:c",
            "127.0.0.1:99999999",
            "192.0.2.1",
        ] {
            assert!(!h.admits(Some(bad.as_bytes())), "{bad}");
        }
        assert!(!h.admits(Some(b"\xff\xfe")), "not text");
        let on = hosts("198.18.0.1:9780", &[], false);
        assert!(
            on.admits(Some(b"198.18.0.1:9780")),
            "the listen address itself"
        );
    }

    #[test]
    fn with_tokens_allowed_hosts_turns_the_check_on() {
        assert!(hosts("0.0.0.0:9780", &[], true).admits(Some(b"anything.example")));
        let h = hosts(
            "0.0.0.0:9780",
            &["Tap.Example.org", "proxy.example:8443"],
            true,
        );
        assert!(h.admits(Some(b"tap.example.org:9780")));
        assert!(h.admits(Some(b"TAP.example.org")));
        assert!(h.admits(Some(b"proxy.example:8443")));
        assert!(!h.admits(Some(b"proxy.example:8444")));
        assert!(!h.admits(Some(b"proxy.example")));
        assert!(!h.admits(Some(b"evil.example")));
        assert!(h.admits(Some(b"127.0.0.1:9780")), "loopback stays");
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        let key = |s: &str| client_key(s.parse().unwrap());
        assert_eq!(key("2001:db8:1:2:aaaa::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:192.0.2.7"), key("192.0.2.7"));
        assert_ne!(key("192.0.2.7"), key("192.0.2.8"));
    }
}
