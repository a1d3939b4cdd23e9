//! The tree a filter parses to ([`crate::parse`]) and a [`Predicate`](crate::Predicate)
//! evaluates: nodes, primitives and their qualifiers, and how `explain` prints them.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A node of the predicate tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    Test(Test),
    /// A primitive after one `vlan`, while parsing; then a `Test` or `Opaque`.
    Shifted(Test),
    /// A primitive the index cannot answer where it stands (after `vlan`): "maybe".
    Opaque(Test),
}

/// `src`, `dst`, `src or dst`, `src and dst`, or none: kept for `explain`; the index holds
/// addresses and ports without their direction, so every one is answered as "either".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Any,
    Src,
    Dst,
    SrcOrDst,
    SrcAndDst,
}

/// Transport protocols a `port` primitive applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transports {
    pub tcp: bool,
    pub udp: bool,
    pub sctp: bool,
}

impl Transports {
    pub const ALL: Transports = Transports {
        tcp: true,
        udp: true,
        sctp: true,
    };
}

/// A primitive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Test {
    /// `(address & mask) == addr` for an IPv4 source or destination; `ip_only` when
    /// qualified by `ip` (libpcap's default also reads ARP and RARP).
    Ipv4 {
        ip_only: bool,
        dir: Dir,
        addr: u32,
        mask: u32,
    },
    Ipv6 {
        dir: Dir,
        addr: u128,
        mask: u128,
    },
    /// A port in `lo..=hi` (`range` for `portrange`).
    Port {
        transports: Transports,
        dir: Dir,
        lo: u16,
        hi: u16,
        range: bool,
    },
    /// IPv4 protocol and/or IPv6 next header `number`; `name` is the keyword it came
    /// from (`tcp`, `icmp6` …), if any.
    Protocol {
        v4: bool,
        v6: bool,
        number: u8,
        name: Option<&'static str>,
    },
    /// `ip` (v4) or `ip6`.
    Network {
        v6: bool,
    },
    /// `vlan` or `vlan N`.
    Vlan(Option<u16>),
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dir::Any => "",
            Dir::Src => "src ",
            Dir::Dst => "dst ",
            Dir::SrcOrDst => "src or dst ",
            Dir::SrcAndDst => "src and dst ",
        })
    }
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Test::Ipv4 {
                ip_only,
                dir,
                addr,
                mask,
            } => {
                let ip = if ip_only { "ip " } else { "" };
                let a = Ipv4Addr::from(addr);
                if mask == u32::MAX {
                    write!(f, "{ip}{dir}host {a}")
                } else if mask.leading_ones() + mask.trailing_zeros() == 32 {
                    write!(f, "{ip}{dir}net {a}/{}", mask.leading_ones())
                } else {
                    write!(f, "{ip}{dir}net {a} mask {}", Ipv4Addr::from(mask))
                }
            }
            Test::Ipv6 { dir, addr, mask } => {
                let a = Ipv6Addr::from(addr);
                if mask == u128::MAX {
                    write!(f, "{dir}host {a}")
                } else {
                    write!(f, "{dir}net {a}/{}", mask.leading_ones())
                }
            }
            Test::Port {
                transports: t,
                dir,
                lo,
                hi,
                range,
            } => {
                let proto = match (t.tcp, t.udp, t.sctp) {
                    (true, false, false) => "tcp ",
                    (false, true, false) => "udp ",
                    (false, false, true) => "sctp ",
                    _ => "",
                };
                if range {
                    write!(f, "{proto}{dir}portrange {lo}-{hi}")
                } else {
                    write!(f, "{proto}{dir}port {lo}")
                }
            }
            Test::Protocol {
                name: Some(name), ..
            } => f.write_str(name),
            Test::Protocol { v4, v6, number, .. } => match (v4, v6) {
                (true, false) => write!(f, "ip proto {number}"),
                (false, true) => write!(f, "ip6 proto {number}"),
                _ => write!(f, "proto {number}"),
            },
            Test::Network { v6 } => f.write_str(if v6 { "ip6" } else { "ip" }),
            Test::Vlan(None) => f.write_str("vlan"),
            Test::Vlan(Some(id)) => write!(f, "vlan {id}"),
        }
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // An operand is parenthesized unless it is a leaf, a `not`, or the same operator
        // (and/or associate, so `a and b and c` needs none).
        fn operand(f: &mut fmt::Formatter<'_>, parent: &Node, n: &Node) -> fmt::Result {
            let same = matches!(
                (parent, n),
                (Node::And(..), Node::And(..)) | (Node::Or(..), Node::Or(..))
            );
            if matches!(n, Node::And(..) | Node::Or(..)) && !same {
                write!(f, "({n})")
            } else {
                write!(f, "{n}")
            }
        }
        match self {
            Node::And(a, b) | Node::Or(a, b) => {
                operand(f, self, a)?;
                f.write_str(if matches!(self, Node::And(..)) {
                    " and "
                } else {
                    " or "
                })?;
                operand(f, self, b)
            }
            Node::Not(n) => write!(f, "[any: not {}]", Paren(n)),
            Node::Test(t) => write!(f, "{t}"),
            Node::Opaque(t) | Node::Shifted(t) => write!(f, "[any: {t} (after vlan)]"),
        }
    }
}

/// A node in parentheses when it is an `and`/`or`.
struct Paren<'a>(&'a Node);

impl fmt::Display for Paren<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Node::And(..) | Node::Or(..) => write!(f, "({})", self.0),
            n => write!(f, "{n}"),
        }
    }
}
