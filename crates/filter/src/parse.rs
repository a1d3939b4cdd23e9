//! The subset of libpcap's filter language a [`ChunkFilter`](crate::ChunkFilter) can answer,
//! parsed as libpcap 1.10's `grammar.y` and `scanner.l` do. Anything outside it, and anything
//! libpcap refuses, gives `None`; whatever is accepted means what it means to libpcap.
//!
//! The syntax accepted is listed at [`Predicate::parse`](crate::Predicate::parse).

use std::net::Ipv6Addr;

use crate::expr::{Dir, Node, Test, Transports};

/// The predicate tree of `filter`, or `None`.
pub(crate) fn parse(filter: &str) -> Option<Node> {
    let tokens = lex(filter)?;
    let mut p = Parser {
        tokens,
        pos: 0,
        qual: None,
        vlans: 0,
    };
    let node = p.expr()?;
    (p.pos == p.tokens.len()).then(|| resolve_shifted(node, false))
}

/// Decides, for each primitive one `vlan` further on ([`Node::Shifted`]), whether the index
/// can answer it: yes when the first `vlan` is a conjunct of an `and` above it (`vlan 100
/// and host A`, `host B and vlan and (port 1 or port 2)`). Every packet that satisfies that
/// `and` has an outer tag, so libpcap's shifted offsets read the header under a single tag
/// (the decoded one the index recorded) or a second tag (which no host, net, port, protocol
/// or `ip` test accepts; a second `vlan` reads that tag's id, which the index recorded too).
/// Elsewhere (`vlan or host A`, where untagged packets are read 4 bytes off) it stays opaque.
fn resolve_shifted(node: Node, guarded: bool) -> Node {
    match node {
        Node::And(..) => {
            let mut conjuncts = Vec::new();
            flatten_and(node, &mut conjuncts);
            let guarded = guarded
                || conjuncts
                    .iter()
                    .any(|c| matches!(c, Node::Test(Test::Vlan(_))));
            conjuncts
                .into_iter()
                .map(|c| resolve_shifted(c, guarded))
                .reduce(|a, b| Node::And(Box::new(a), Box::new(b)))
                .expect("an and has conjuncts")
        }
        Node::Or(a, b) => Node::Or(
            Box::new(resolve_shifted(*a, guarded)),
            Box::new(resolve_shifted(*b, guarded)),
        ),
        // `not not x` is `x` to libpcap too; the index can answer `x`.
        Node::Not(a) => match *a {
            Node::Not(x) => resolve_shifted(*x, guarded),
            a => Node::Not(Box::new(resolve_shifted(a, guarded))),
        },
        Node::Shifted(t) if guarded => Node::Test(t),
        Node::Shifted(t) => Node::Opaque(t),
        leaf => leaf,
    }
}

/// The operands of a chain of `and`s, left to right.
fn flatten_and(node: Node, out: &mut Vec<Node>) {
    match node {
        Node::And(a, b) => {
            flatten_and(*a, out);
            flatten_and(*b, out);
        }
        other => out.push(other),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kw {
    And,
    Or,
    Not,
    Src,
    Dst,
    Host,
    Net,
    Mask,
    Port,
    Portrange,
    Proto,
    Ip,
    Ip6,
    Tcp,
    Udp,
    Sctp,
    Icmp,
    Icmp6,
    Vlan,
}

impl Kw {
    fn from_word(w: &str) -> Option<Kw> {
        Some(match w {
            "and" => Kw::And,
            "or" => Kw::Or,
            "not" => Kw::Not,
            "src" => Kw::Src,
            "dst" => Kw::Dst,
            "host" => Kw::Host,
            "net" => Kw::Net,
            "mask" => Kw::Mask,
            "port" => Kw::Port,
            "portrange" => Kw::Portrange,
            "proto" => Kw::Proto,
            "ip" => Kw::Ip,
            "ip6" => Kw::Ip6,
            "tcp" => Kw::Tcp,
            "udp" => Kw::Udp,
            "sctp" => Kw::Sctp,
            "icmp" => Kw::Icmp,
            "icmp6" => Kw::Icmp6,
            "vlan" => Kw::Vlan,
            _ => return None,
        })
    }

    /// The protocol qualifiers (libpcap's `pname`) among our keywords.
    fn pname(self) -> Option<QProto> {
        Some(match self {
            Kw::Ip => QProto::Ip,
            Kw::Ip6 => QProto::Ip6,
            Kw::Tcp => QProto::Tcp,
            Kw::Udp => QProto::Udp,
            Kw::Sctp => QProto::Sctp,
            Kw::Icmp => QProto::Icmp,
            Kw::Icmp6 => QProto::Icmp6,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    Kw(Kw),
    /// A run of `[A-Za-z0-9._:-]` that is not one of our keywords: a number, an address, a
    /// port range, or something we do not read (a name, another keyword).
    Word(&'a str),
    LParen,
    RParen,
    Slash,
}

/// Splits `s` into tokens. A word here is never shorter than libpcap's token at the same
/// place, and is used only when it is wholly a number, an address or a range, where
/// libpcap's token is the same word; anything else is refused later.
fn lex(s: &str) -> Option<Vec<Tok<'_>>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let word_byte = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-');
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            b'(' => {
                out.push(Tok::LParen);
                i += 1;
            }
            b')' => {
                out.push(Tok::RParen);
                i += 1;
            }
            b'/' => {
                out.push(Tok::Slash);
                i += 1;
            }
            b'!' if b.get(i + 1) != Some(&b'=') => {
                out.push(Tok::Kw(Kw::Not));
                i += 1;
            }
            b'&' if b.get(i + 1) == Some(&b'&') => {
                out.push(Tok::Kw(Kw::And));
                i += 2;
            }
            b'|' if b.get(i + 1) == Some(&b'|') => {
                out.push(Tok::Kw(Kw::Or));
                i += 2;
            }
            // libpcap reads a leading '-' as an operator.
            c if word_byte(c) && c != b'-' => {
                let start = i;
                while i < b.len() && word_byte(b[i]) {
                    i += 1;
                }
                let w = &s[start..i];
                out.push(Kw::from_word(w).map_or(Tok::Word(w), Tok::Kw));
            }
            _ => return None,
        }
    }
    Some(out)
}

/// libpcap's protocol qualifier, among those that can lead to a primitive we answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QProto {
    Default,
    Ip,
    Ip6,
    Tcp,
    Udp,
    Sctp,
    Icmp,
    Icmp6,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QAddr {
    Default,
    Host,
    Net,
    Port,
    PortRange,
    Proto,
}

/// libpcap's `struct qual`: what a bare value means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Qual {
    proto: QProto,
    dir: Dir,
    addr: QAddr,
}

struct Parser<'a> {
    tokens: Vec<Tok<'a>>,
    pos: usize,
    /// The qualifiers a bare value after `and`/`or` takes: those of the last primitive
    /// (`None` after `tcp`, `vlan` …, where libpcap has none and refuses a bare value).
    qual: Option<Qual>,
    /// `vlan`s read so far: libpcap reads everything after each 4 bytes further on.
    vlans: u32,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Tok<'a>> {
        self.tokens.get(self.pos).copied()
    }

    fn peek_at(&self, k: usize) -> Option<Tok<'a>> {
        self.tokens.get(self.pos + k).copied()
    }

    fn bump(&mut self) -> Option<Tok<'a>> {
        let t = self.peek()?;
        self.pos += 1;
        Some(t)
    }

    fn eat(&mut self, t: Tok<'a>) -> bool {
        let hit = self.peek() == Some(t);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn leaf(&mut self, t: Test) -> Node {
        match self.vlans {
            0 => Node::Test(t),
            1 => Node::Shifted(t),
            _ => Node::Opaque(t),
        }
    }

    /// `expr: term | expr and term | expr and id | expr or term | expr or id`.
    fn expr(&mut self) -> Option<Node> {
        let mut node = self.term()?;
        loop {
            let and = match self.peek() {
                Some(Tok::Kw(Kw::And)) => true,
                Some(Tok::Kw(Kw::Or)) => false,
                _ => return Some(node),
            };
            self.pos += 1;
            let rhs = if self.starts_id() {
                self.id(self.qual)?
            } else {
                self.term()?
            };
            node = if and {
                Node::And(Box::new(node), Box::new(rhs))
            } else {
                Node::Or(Box::new(node), Box::new(rhs))
            };
        }
    }

    /// After `and`/`or`, whether a bare value (libpcap's `id`) follows rather than a term:
    /// past any `not`s, a word, or `(` and then (past `not`s) a word.
    fn starts_id(&self) -> bool {
        let mut k = 0;
        let skip_nots = |k: &mut usize| {
            while self.peek_at(*k) == Some(Tok::Kw(Kw::Not)) {
                *k += 1;
            }
        };
        skip_nots(&mut k);
        if self.peek_at(k) == Some(Tok::LParen) {
            k += 1;
            skip_nots(&mut k);
        }
        matches!(self.peek_at(k), Some(Tok::Word(_)))
    }

    /// `term: rterm | not term`; `rterm: head id | paren expr ')' | pname | other`.
    fn term(&mut self) -> Option<Node> {
        match self.peek()? {
            Tok::Kw(Kw::Not) => {
                self.pos += 1;
                Some(Node::Not(Box::new(self.term()?)))
            }
            Tok::LParen => {
                // A parenthesized expression leaves the qualifiers as they were before it.
                let saved = self.qual;
                self.pos += 1;
                let node = self.expr()?;
                self.eat(Tok::RParen).then_some(())?;
                self.qual = saved;
                Some(node)
            }
            Tok::Kw(Kw::Vlan) => {
                self.pos += 1;
                let id = match self.peek() {
                    Some(Tok::Word(_)) | Some(Tok::LParen) => {
                        let n = self.pnum()?;
                        Some(u16::try_from(n).ok().filter(|&n| n <= 0x0fff)?)
                    }
                    _ => None,
                };
                let node = self.leaf(Test::Vlan(id));
                self.vlans += 1;
                self.qual = None;
                Some(node)
            }
            Tok::Kw(k) if k.pname().is_some() => {
                self.pos += 1;
                let proto = k.pname()?;
                if self.starts_head_rest() {
                    return self.head(proto);
                }
                self.qual = None;
                let t = match proto {
                    QProto::Ip => Test::Network { v6: false },
                    QProto::Ip6 => Test::Network { v6: true },
                    QProto::Tcp => protocol(true, true, 6, "tcp"),
                    QProto::Udp => protocol(true, true, 17, "udp"),
                    QProto::Sctp => protocol(true, true, 132, "sctp"),
                    QProto::Icmp => protocol(true, false, 1, "icmp"),
                    QProto::Icmp6 => protocol(false, true, 58, "icmp6"),
                    QProto::Default => return None,
                };
                Some(self.leaf(t))
            }
            Tok::Kw(
                Kw::Src | Kw::Dst | Kw::Host | Kw::Net | Kw::Port | Kw::Portrange | Kw::Proto,
            ) => self.head(QProto::Default),
            _ => None,
        }
    }

    /// Whether a protocol keyword is a qualifier (`tcp port 80`) rather than a primitive.
    fn starts_head_rest(&self) -> bool {
        matches!(
            self.peek(),
            Some(Tok::Kw(
                Kw::Src | Kw::Dst | Kw::Host | Kw::Net | Kw::Port | Kw::Portrange | Kw::Proto
            ))
        )
    }

    /// `head id`, the protocol qualifier read: `head: pqual dqual aqual | pqual dqual |
    /// pqual aqual | pqual PROTO`.
    fn head(&mut self, proto: QProto) -> Option<Node> {
        let dir = match self.peek() {
            Some(Tok::Kw(first @ (Kw::Src | Kw::Dst))) => {
                self.pos += 1;
                let other = if first == Kw::Src { Kw::Dst } else { Kw::Src };
                let plain = if first == Kw::Src { Dir::Src } else { Dir::Dst };
                match (self.peek(), self.peek_at(1)) {
                    (Some(Tok::Kw(Kw::Or)), Some(Tok::Kw(k))) if k == other => {
                        self.pos += 2;
                        Dir::SrcOrDst
                    }
                    (Some(Tok::Kw(Kw::And)), Some(Tok::Kw(k))) if k == other => {
                        self.pos += 2;
                        Dir::SrcAndDst
                    }
                    _ => plain,
                }
            }
            _ => Dir::Any,
        };
        let addr = match self.peek() {
            Some(Tok::Kw(Kw::Host)) => QAddr::Host,
            Some(Tok::Kw(Kw::Net)) => QAddr::Net,
            Some(Tok::Kw(Kw::Port)) => QAddr::Port,
            Some(Tok::Kw(Kw::Portrange)) => QAddr::PortRange,
            Some(Tok::Kw(Kw::Proto)) if dir == Dir::Any => QAddr::Proto,
            _ if dir != Dir::Any => QAddr::Default,
            _ => return None,
        };
        if addr != QAddr::Default {
            self.pos += 1;
        }
        let q = Qual { proto, dir, addr };
        let node = self.id(Some(q))?;
        self.qual = Some(q);
        Some(node)
    }

    /// `id: nid | pnum | paren pid ')'`; `nid: … | not id`.
    fn id(&mut self, q: Option<Qual>) -> Option<Node> {
        // libpcap refuses a bare value where no qualifiers are set.
        let q = q?;
        match self.peek()? {
            Tok::Kw(Kw::Not) => {
                self.pos += 1;
                Some(Node::Not(Box::new(self.id(Some(q))?)))
            }
            Tok::LParen => {
                self.pos += 1;
                let node = self.pid(q)?;
                self.eat(Tok::RParen).then_some(node)
            }
            Tok::Word(_) => self.value(q),
            _ => None,
        }
    }

    /// `pid: nid | qid and id | qid or id` (`qid: pnum | pid`): values under one set of
    /// qualifiers, inside the parentheses of `host (A or B)`.
    fn pid(&mut self, q: Qual) -> Option<Node> {
        let mut node = match self.peek()? {
            // A pid starts with a value or `not`; a parenthesis only opens a number.
            Tok::LParen => {
                let n = self.pnum()?;
                self.number(q, n)?
            }
            Tok::Kw(Kw::Not) => {
                self.pos += 1;
                Node::Not(Box::new(self.id(Some(q))?))
            }
            Tok::Word(_) => self.value(q)?,
            _ => return None,
        };
        loop {
            let and = match self.peek() {
                Some(Tok::Kw(Kw::And)) => true,
                Some(Tok::Kw(Kw::Or)) => false,
                _ => return Some(node),
            };
            self.pos += 1;
            let rhs = self.id(Some(q))?;
            node = if and {
                Node::And(Box::new(node), Box::new(rhs))
            } else {
                Node::Or(Box::new(node), Box::new(rhs))
            };
        }
    }

    /// `pnum: NUM | paren pnum ')'`.
    fn pnum(&mut self) -> Option<u32> {
        match self.bump()? {
            Tok::Word(w) => number(w),
            Tok::LParen => {
                let n = self.pnum()?;
                self.eat(Tok::RParen).then_some(n)
            }
            _ => None,
        }
    }

    /// One value word under qualifiers `q` (and a `/LEN` or `mask M` after it).
    fn value(&mut self, q: Qual) -> Option<Node> {
        let Some(Tok::Word(w)) = self.bump() else {
            return None;
        };
        if let Some(n) = number(w) {
            return self.number(q, n);
        }
        if let Some((addr, bits)) = dotted(w) {
            // libpcap: HID '/' NUM, HID NETMASK HID, HID.
            if self.eat(Tok::Slash) {
                let Some(Tok::Word(len)) = self.bump() else {
                    return None;
                };
                let len = number(len)?;
                if len > 32 {
                    return None;
                }
                let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                return self.masked_ipv4(q, addr << (32 - bits), mask);
            }
            if self.eat(Tok::Kw(Kw::Mask)) {
                let Some(Tok::Word(m)) = self.bump() else {
                    return None;
                };
                let (m, mbits) = dotted(m)?;
                return self.masked_ipv4(q, addr << (32 - bits), m << (32 - mbits));
            }
            if !matches!(q.addr, QAddr::Default | QAddr::Host | QAddr::Net) {
                return None;
            }
            // "Promote short ipaddr": `host 10.1` is 10.1.0.0/16, for host and net alike.
            let shift = 32 - bits;
            return self.ipv4(q, addr << shift, u32::MAX << shift);
        }
        if w.contains(':') {
            let addr = u128::from(w.parse::<Ipv6Addr>().ok()?);
            let len = if self.eat(Tok::Slash) {
                let Some(Tok::Word(len)) = self.bump() else {
                    return None;
                };
                number(len)?
            } else {
                128
            };
            if len > 128 {
                return None;
            }
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            if addr & !mask != 0 {
                return None;
            }
            let ok_addr = match q.addr {
                QAddr::Default | QAddr::Host => len == 128,
                QAddr::Net => true,
                _ => false,
            };
            if !ok_addr || !matches!(q.proto, QProto::Default | QProto::Ip6) {
                return None;
            }
            return Some(self.leaf(Test::Ipv6 {
                dir: q.dir,
                addr,
                mask,
            }));
        }
        if q.addr == QAddr::PortRange {
            let (lo, hi) = port_range(w)?;
            return self.ports(q, lo, hi, true);
        }
        None
    }

    /// A number under qualifiers `q` (libpcap's `gen_ncode` without a string).
    fn number(&mut self, q: Qual, n: u32) -> Option<Node> {
        match q.addr {
            QAddr::Default | QAddr::Host | QAddr::Net => {
                let (mut addr, mut mask) = (n, u32::MAX);
                if q.addr == QAddr::Net {
                    // "Promote short net number": `net 10` is 10.0.0.0/8.
                    while addr != 0 && addr & 0xff00_0000 == 0 {
                        addr <<= 8;
                        mask <<= 8;
                    }
                }
                self.ipv4(q, addr, mask)
            }
            QAddr::Port | QAddr::PortRange => {
                let p = u16::try_from(n).ok()?;
                self.ports(q, p, p, q.addr == QAddr::PortRange)
            }
            QAddr::Proto => {
                if q.dir != Dir::Any {
                    return None;
                }
                let (v4, v6) = match q.proto {
                    QProto::Default => (true, true),
                    QProto::Ip => (true, false),
                    QProto::Ip6 => (false, true),
                    _ => return None,
                };
                // libpcap 1.10 compiles a protocol over 255 into a test that never
                // matches, later versions refuse it: leave it to libpcap.
                let number = u8::try_from(n).ok()?;
                Some(self.leaf(Test::Protocol {
                    v4,
                    v6,
                    number,
                    name: None,
                }))
            }
        }
    }

    /// `gen_mcode`: an IPv4 network with an explicit mask, `net` only, and no host bits.
    fn masked_ipv4(&mut self, q: Qual, addr: u32, mask: u32) -> Option<Node> {
        if q.addr != QAddr::Net || addr & !mask != 0 {
            return None;
        }
        self.ipv4(q, addr, mask)
    }

    fn ipv4(&mut self, q: Qual, addr: u32, mask: u32) -> Option<Node> {
        let ip_only = match q.proto {
            QProto::Default => false,
            QProto::Ip => true,
            _ => return None,
        };
        Some(self.leaf(Test::Ipv4 {
            ip_only,
            dir: q.dir,
            addr,
            mask,
        }))
    }

    fn ports(&mut self, q: Qual, lo: u16, hi: u16, range: bool) -> Option<Node> {
        let transports = match q.proto {
            QProto::Default => Transports::ALL,
            QProto::Tcp => Transports {
                tcp: true,
                udp: false,
                sctp: false,
            },
            QProto::Udp => Transports {
                tcp: false,
                udp: true,
                sctp: false,
            },
            QProto::Sctp => Transports {
                tcp: false,
                udp: false,
                sctp: true,
            },
            _ => return None,
        };
        let (lo, hi) = (lo.min(hi), lo.max(hi));
        Some(self.leaf(Test::Port {
            transports,
            dir: q.dir,
            lo,
            hi,
            range,
        }))
    }
}

fn protocol(v4: bool, v6: bool, number: u8, name: &'static str) -> Test {
    Test::Protocol {
        v4,
        v6,
        number,
        name: Some(name),
    }
}

/// libpcap's NUM: decimal, `0x` hexadecimal, or (leading `0`) octal, at most 32 bits.
fn number(w: &str) -> Option<u32> {
    let (digits, radix) = if let Some(h) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        (h, 16)
    } else if w.len() > 1 && w.starts_with('0') {
        (&w[1..], 8)
    } else {
        (w, 10)
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    // from_str_radix alone would take a sign.
    u32::from_str_radix(digits, radix).ok()
}

/// libpcap's HID as `__pcap_atoin` reads it: 2 to 4 dotted decimal parts of at most 255;
/// the value of the parts given, and how many bits they are (8 per part).
fn dotted(w: &str) -> Option<(u32, u32)> {
    let mut v: u32 = 0;
    let mut parts = 0;
    for part in w.split('.') {
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let n: u32 = part.parse().ok()?;
        if n > 255 {
            return None;
        }
        v = v << 8 | n;
        parts += 1;
        if parts > 4 {
            return None;
        }
    }
    (parts >= 2).then_some((v, 8 * parts))
}

/// `A-B` as libpcap's `pcap_nametoportrange` reads numbers (decimal), each a port.
fn port_range(w: &str) -> Option<(u16, u16)> {
    let (a, b) = w.split_once('-')?;
    let port = |s: &str| -> Option<u16> {
        if s.is_empty() || s.len() > 5 || !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    Some((port(a)?, port(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> String {
        match parse(s) {
            Some(n) => n.to_string(),
            None => panic!("refused: {s}"),
        }
    }

    #[test]
    fn primitives() {
        let cases = [
            ("host 10.0.0.1", "host 10.0.0.1"),
            ("src host 10.0.0.1", "src host 10.0.0.1"),
            ("ip dst host 10.0.0.1", "ip dst host 10.0.0.1"),
            ("src or dst host 10.0.0.1", "src or dst host 10.0.0.1"),
            ("dst and src 10.0.0.1", "src and dst host 10.0.0.1"),
            ("src 10.0.0.1", "src host 10.0.0.1"),
            ("host 2001:db8::1", "host 2001:db8::1"),
            ("ip6 src host ::ffff:1.2.3.4", "src host ::ffff:1.2.3.4"),
            ("net 10.0.0.0/8", "net 10.0.0.0/8"),
            ("net 10.1/16", "net 10.1.0.0/16"),
            ("net 192.168.1", "net 192.168.1.0/24"),
            ("net 10", "net 10.0.0.0/8"),
            ("host 10.1", "net 10.1.0.0/16"),
            ("net 10.0.0.0 mask 255.0.0.0", "net 10.0.0.0/8"),
            (
                "net 10.0.0.0 mask 255.0.255.0",
                "net 10.0.0.0 mask 255.0.255.0",
            ),
            ("net 172.16.0.0/0x0c", "net 172.16.0.0/12"),
            ("dst net 2001:db8::/32", "dst net 2001:db8::/32"),
            ("net 2001:db8::1", "host 2001:db8::1"),
            ("host 167772161", "host 10.0.0.1"),
            ("port 80", "port 80"),
            ("port 0x50", "port 80"),
            ("port 0120", "port 80"),
            ("tcp port 80", "tcp port 80"),
            ("udp src port 53", "udp src port 53"),
            ("sctp dst port 9", "sctp dst port 9"),
            ("portrange 1000-2000", "portrange 1000-2000"),
            ("tcp portrange 2000-1000", "tcp portrange 1000-2000"),
            ("portrange 53", "portrange 53-53"),
            ("tcp", "tcp"),
            ("udp", "udp"),
            ("icmp", "icmp"),
            ("icmp6", "icmp6"),
            ("sctp", "sctp"),
            ("ip", "ip"),
            ("ip6", "ip6"),
            ("proto 47", "proto 47"),
            ("ip proto 6", "ip proto 6"),
            ("ip6 proto 0x11", "ip6 proto 17"),
            ("vlan", "vlan"),
            ("vlan 100", "vlan 100"),
            ("vlan (100)", "vlan 100"),
        ];
        for (filter, shown) in cases {
            assert_eq!(p(filter), shown, "{filter}");
        }
    }

    #[test]
    fn operators_bind_as_in_libpcap() {
        // One precedence, left to right.
        assert_eq!(
            p("host 10.0.0.1 or host 10.0.0.2 and port 80"),
            "(host 10.0.0.1 or host 10.0.0.2) and port 80"
        );
        assert_eq!(
            p("host 10.0.0.1 or (host 10.0.0.2 and port 80)"),
            "host 10.0.0.1 or (host 10.0.0.2 and port 80)"
        );
        assert_eq!(p("! tcp && ip || udp"), "([any: not tcp] and ip) or udp");
        assert_eq!(p("not not tcp"), "tcp");
        assert_eq!(p("not ! not tcp"), "[any: not tcp]");
        assert_eq!(p("not (tcp or udp)"), "[any: not (tcp or udp)]");
    }

    #[test]
    fn elided_qualifiers() {
        assert_eq!(
            p("host 10.0.0.1 or 10.0.0.2"),
            "host 10.0.0.1 or host 10.0.0.2"
        );
        assert_eq!(
            p("tcp dst port 80 or 443"),
            "tcp dst port 80 or tcp dst port 443"
        );
        assert_eq!(
            p("host 10.0.0.1 and not 10.0.0.2"),
            "host 10.0.0.1 and [any: not host 10.0.0.2]"
        );
        assert_eq!(
            p("src host (10.0.0.1 or 10.0.0.2)"),
            "src host 10.0.0.1 or src host 10.0.0.2"
        );
        assert_eq!(p("port (80 or (443))"), "port 80 or port 443");
        assert_eq!(p("ip proto 6 or 17"), "ip proto 6 or ip proto 17");
        assert_eq!(p("host not 10.0.0.1"), "[any: not host 10.0.0.1]");
        // A parenthesized expression leaves the qualifiers before it in force.
        assert_eq!(
            p("host 10.0.0.1 and (port 80) or 10.0.0.2"),
            "(host 10.0.0.1 and port 80) or host 10.0.0.2"
        );
        assert_eq!(p("port 80 or 443 or 22"), "port 80 or port 443 or port 22");
        assert_eq!(p("net 10 or 11"), "net 10.0.0.0/8 or net 11.0.0.0/8");
    }

    #[test]
    fn after_vlan_only_what_the_vlan_guards() {
        assert_eq!(
            p("host 10.0.0.1 and vlan 100 and (host 10.0.0.2 or port 80)"),
            "host 10.0.0.1 and vlan 100 and (host 10.0.0.2 or port 80)"
        );
        assert_eq!(
            p("vlan and vlan 200 and tcp"),
            "vlan and vlan 200 and [any: tcp (after vlan)]"
        );
        assert_eq!(
            p("(vlan 1 and udp) or tcp"),
            "(vlan 1 and udp) or [any: tcp (after vlan)]"
        );
        assert_eq!(
            p("(vlan or tcp) and vlan 200"),
            "(vlan or [any: tcp (after vlan)]) and [any: vlan 200 (after vlan)]"
        );
        assert_eq!(
            p("not vlan and ip"),
            "[any: not vlan] and [any: ip (after vlan)]"
        );
        assert_eq!(p("vlan or ip"), "vlan or [any: ip (after vlan)]");
    }

    #[test]
    fn refused() {
        for f in [
            "",
            "  ",
            "10.0.0.1",        // libpcap: syntax error
            "not 10.0.0.1",    // likewise
            "tcp or 10.0.0.1", // no qualifiers to repeat
            "vlan 100 or 200", // likewise
            "(host 10.0.0.1) or 10.0.0.2",
            "Host 10.0.0.1", // keywords are lower case
            "TCP",
            "host example.com",
            "host 10.0.0.256",
            "host 10.0.0.1.2",
            "host 10.0.0.0/8", // mask syntax is for networks
            "src 10.0.0.0/8",
            "net 10.0.0.1/8", // host bits set
            "net 10.0.0.0/33",
            "net 2001:db8::1/32",
            "net 2001:db8::/129",
            "host 2001:db8::/64",
            "host fe80::1%eth0",
            "ip6 host 10.0.0.1",
            "ip host 2001:db8::1",
            "tcp host 10.0.0.1",
            "port 65536",
            "port 080", // libpcap: not octal
            "port http",
            "port 10.0.0.1",
            "ip port 80",
            "icmp port 80",
            "portrange 1-70000",
            "portrange a-b",
            "portrange 1 - 2",
            "proto 256",
            "proto tcp",
            "tcp proto 6",
            "src proto 6",
            "vlan 4096",
            "vlan abc",
            "ether host 00:11:22:33:44:55",
            "arp",
            "ether proto 0x0800",
            "len > 100",
            "greater 100",
            "less 100",
            "tcp[13] & 2 != 0",
            "ip[0] & 0xf > 5",
            "icmp[icmptype] == icmp-echo",
            "tcp port 80 and",
            "(tcp",
            "tcp)",
            "host (10.0.0.1 or port 80)",
            "host ((10.0.0.1))",
            "mpls",
            "gateway foo",
            "tcp & udp",
            "host 10.0.0.1 != 1",
            "\\tcp",
            "port -1",
        ] {
            assert_eq!(parse(f), None, "{f:?}");
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(number("0"), Some(0));
        assert_eq!(number("0x1F"), Some(31));
        assert_eq!(number("0X1f"), Some(31));
        assert_eq!(number("017"), Some(15));
        assert_eq!(number("4294967295"), Some(u32::MAX));
        for bad in ["4294967296", "0x", "08", "+1", "1a", "0x1g", "-1", ""] {
            assert_eq!(number(bad), None, "{bad}");
        }
        assert_eq!(dotted("10.0.0.1"), Some((0x0a00_0001, 32)));
        assert_eq!(
            dotted("010.1"),
            Some((0x0a01, 16)),
            "decimal, as __pcap_atoin"
        );
        for bad in ["10", "1..2", "1.2.3.4.5", "256.1", "0x1.2", "1.2."] {
            assert_eq!(dotted(bad), None, "{bad}");
        }
    }
}
