//! [`Predicate`]: the part of a libpcap filter a [`ChunkFilter`] can answer, evaluated over a
//! chunk's index with three-valued logic reduced to "no packet can match" / "maybe".
//!
//! Each primitive asks whether the chunk holds a value it names (an address under a mask,
//! a port range, a protocol number, a VLAN id). `a and b` is "no" when either side is;
//! `a or b` when both are; `not a` is always "maybe", because a set of values present
//! cannot say that every packet has one (a chunk where every packet is TCP is
//! indistinguishable from one where a single packet is). A chunk with an unreadable frame
//! is always "maybe"; an empty chunk is always "no".
//!
//! The semantics follow libpcap 1.10 (see [`Predicate::parse`] for the syntax), with
//! each primitive answered as a superset of what libpcap matches:
//! - `host`/`net` (IPv4, without `ip`) also match ARP and RARP addresses, as libpcap's do;
//!   `src`/`dst` are answered as either direction.
//! - `port`/`portrange` without a protocol are TCP, UDP or SCTP; they never match
//!   non-first IPv4 fragments (libpcap checks the fragment offset), and for IPv6 libpcap
//!   reads ports only when the fixed header's next header is the transport.
//! - `tcp`, `udp`, `sctp`, `proto N` test IPv4's protocol and IPv6's next header (or the
//!   next header of a fragment header right after the fixed header).
//! - `vlan`: libpcap moves every later offset by 4 bytes after each `vlan` in the filter's
//!   text, whatever the expression's structure (`vlan 100 or host A` reads `host A` 4 bytes
//!   further into *every* packet). The first `vlan` is answered from the tags' ids; what
//!   follows it in the text only where the first `vlan` is a conjunct of an `and` above it
//!   (`vlan 100 and host A`), else it is "maybe"; everything after a second
//!   `vlan` is "maybe".

use crate::chunk_filter::{flag, ChunkFilter};
use crate::expr::{Node, Test};

/// A filter the index can answer. Made by [`Predicate::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Predicate {
    pub(crate) root: Node,
}

impl Predicate {
    /// The predicate for a libpcap filter, or `None` when the filter uses anything the
    /// index cannot answer (host names, `ether`, `arp`, `len`, `greater`, byte offsets,
    /// `tcp[13] & 2` …) or that libpcap itself refuses: the caller then reads every chunk.
    /// The filter is read as libpcap 1.10's grammar and scanner read it; whatever is
    /// accepted means what it means to libpcap.
    ///
    /// Accepted:
    /// - `[ip|ip6] [DIR] host ADDR`, `… net ADDR/LEN`, `… net ADDR mask MASK`, `net A.B.C`
    ///   (the missing bytes are the host part, as `host A.B` is in libpcap), `DIR ADDR`;
    ///   DIR is `src`, `dst`, `src or dst` or `src and dst`; ADDR is dotted IPv4 or IPv6
    ///   (a plain number N is the IPv4 address N, as in libpcap);
    /// - `[tcp|udp|sctp] [DIR] port N`, `… portrange A-B` (numbers decimal, `0x` hex or
    ///   `0` octal);
    /// - `tcp`, `udp`, `sctp`, `icmp`, `icmp6`, `ip`, `ip6`, `[ip|ip6] proto N`;
    /// - `vlan`, `vlan N`;
    /// - `and`/`&&`, `or`/`||` (one precedence, left to right, as in libpcap: `a or b and c`
    ///   is `(a or b) and c`), `not`/`!`, parentheses;
    /// - libpcap's elided qualifiers: after `and`/`or`, a bare value repeats the last
    ///   primitive's qualifiers (`host A or B`, `port 80 or 443`, `host A and not B`, `host
    ///   (A or B)`), and only there: libpcap refuses a filter that starts with a bare address.
    ///
    /// Keywords are lower case, as libpcap's scanner has them.
    ///
    /// ```
    /// use tapdeck_filter::Predicate;
    ///
    /// let p = Predicate::parse("host 10.0.0.1 or 10.0.0.2 and not port 22").unwrap();
    /// assert_eq!(
    ///     p.explain(),
    ///     "(host 10.0.0.1 or host 10.0.0.2) and [any: not port 22]"
    /// );
    /// assert!(Predicate::parse("ether host 00:11:22:33:44:55").is_none());
    /// assert!(Predicate::parse("tcp[13] & 2 != 0").is_none());
    /// ```
    pub fn parse(filter: &str) -> Option<Predicate> {
        crate::parse::parse(filter).map(|root| Predicate { root })
    }

    /// False only when no packet of the chunk `index` describes can match the filter.
    pub fn may_match(&self, index: &ChunkFilter) -> bool {
        if index.is_empty() {
            return false;
        }
        index.has_unreadable() || self.root.may_match(index)
    }

    /// The filter as the index reads it, one line: qualifiers spelled out, `and`/`or`
    /// grouped with parentheses, and the parts the index cannot rule anything out with
    /// shown as `[any: …]`.
    pub fn explain(&self) -> String {
        self.root.to_string()
    }
}

impl Node {
    fn may_match(&self, index: &ChunkFilter) -> bool {
        match self {
            Node::And(a, b) => a.may_match(index) && b.may_match(index),
            Node::Or(a, b) => a.may_match(index) || b.may_match(index),
            Node::Not(_) | Node::Opaque(_) | Node::Shifted(_) => true,
            Node::Test(t) => t.may_match(index),
        }
    }
}

impl Test {
    fn may_match(&self, index: &ChunkFilter) -> bool {
        match *self {
            Test::Ipv4 { addr, mask, .. } => index.ipv4.may_contain_masked(addr, mask),
            Test::Ipv6 { addr, mask, .. } => index.ipv6.may_contain_masked(addr, mask),
            Test::Port {
                transports, lo, hi, ..
            } => {
                (transports.tcp && index.tcp_ports.may_contain_range(lo, hi))
                    || (transports.udp && index.udp_ports.may_contain_range(lo, hi))
                    || (transports.sctp && index.sctp_ports.may_contain_range(lo, hi))
            }
            Test::Protocol { v4, v6, number, .. } => {
                (v4 && index.ip_protocols.may_contain(number))
                    || (v6 && index.ip6_protocols.may_contain(number))
            }
            Test::Network { v6: false } => index.has(flag::IPV4),
            Test::Network { v6: true } => index.has(flag::IPV6),
            Test::Vlan(None) => index.vlans.may_be_nonempty(),
            Test::Vlan(Some(id)) => index.vlans.may_contain(id),
        }
    }
}
