//! Per-packet header dissection: link layer → IP → TCP/UDP/ICMP, zero-copy and allocation-free.
//!
//! [`dissect`] never panics and never allocates. A header cut short by the capture sets
//! [`Headers::truncated`] and leaves everything parsed before it in place.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// LINKTYPE_NULL: BSD loopback, 4-byte address family in the capturing host's byte order.
pub const LINKTYPE_NULL: u32 = 0;
/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// DLT_RAW as most BSDs number it; libpcap maps it to LINKTYPE_RAW.
pub const DLT_RAW_12: u32 = 12;
/// DLT_RAW as OpenBSD numbers it; libpcap maps it to LINKTYPE_RAW.
pub const DLT_RAW_14: u32 = 14;
/// LINKTYPE_RAW: the frame starts with an IPv4 or IPv6 header.
pub const LINKTYPE_RAW: u32 = 101;
/// LINKTYPE_LOOP: OpenBSD loopback (family nominally big-endian; both orders are seen).
pub const LINKTYPE_LOOP: u32 = 108;
/// LINKTYPE_LINUX_SLL: Linux "cooked" capture, 16-byte header.
pub const LINKTYPE_LINUX_SLL: u32 = 113;
/// LINKTYPE_IPV4: raw IPv4 only.
pub const LINKTYPE_IPV4: u32 = 228;
/// LINKTYPE_IPV6: raw IPv6 only.
pub const LINKTYPE_IPV6: u32 = 229;
/// LINKTYPE_LINUX_SLL2: Linux cooked capture v2, 20-byte header.
pub const LINKTYPE_LINUX_SLL2: u32 = 276;
/// LINKTYPE_SLIP: 16-byte pseudo-header, then IP.
pub const LINKTYPE_SLIP: u32 = 8;
/// LINKTYPE_PPP: PPP, with or without HDLC-like framing (RFC 1661/1662).
pub const LINKTYPE_PPP: u32 = 9;
/// LINKTYPE_PPP_HDLC: PPP in HDLC-like framing, or Cisco PPP with HDLC framing.
pub const LINKTYPE_PPP_HDLC: u32 = 50;
/// LINKTYPE_ATM_RFC1483: LLC/SNAP-encapsulated ATM.
pub const LINKTYPE_ATM_RFC1483: u32 = 100;
/// LINKTYPE_C_HDLC: Cisco HDLC.
pub const LINKTYPE_C_HDLC: u32 = 104;
/// LINKTYPE_FRELAY: Frame Relay.
pub const LINKTYPE_FRELAY: u32 = 107;
/// LINKTYPE_SUNATM: SunATM pseudo-header, then LLC/SNAP.
pub const LINKTYPE_SUNATM: u32 = 123;
/// LINKTYPE_ARCNET_LINUX.
pub const LINKTYPE_ARCNET_LINUX: u32 = 129;
/// LINKTYPE_JUNIPER_ETHER: Juniper's header, then an Ethernet frame.
pub const LINKTYPE_JUNIPER_ETHER: u32 = 178;
/// LINKTYPE_IPNET: Solaris ipnet.
pub const LINKTYPE_IPNET: u32 = 226;
/// LINKTYPE_NFLOG: Linux netfilter log messages.
pub const LINKTYPE_NFLOG: u32 = 239;
/// LINKTYPE_IPOIB: IP over InfiniBand (RFC 4391).
pub const LINKTYPE_IPOIB: u32 = 242;
/// LINKTYPE_PKTAP: Apple PKTAP.
pub const LINKTYPE_PKTAP: u32 = 258;
/// LINKTYPE_DSA_TAG_BRCM: Ethernet with a Broadcom tag after the source address.
pub const LINKTYPE_DSA_TAG_BRCM: u32 = 281;
/// LINKTYPE_DSA_TAG_BRCM_PREPEND: a Broadcom tag, then an Ethernet frame.
pub const LINKTYPE_DSA_TAG_BRCM_PREPEND: u32 = 282;

/// Ethertypes we look at.
const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
const ETH_VLAN: u16 = 0x8100;
const ETH_QINQ: u16 = 0x88a8;
const ETH_QINQ_OLD: u16 = 0x9100;

/// IP protocol numbers we look at.
pub const PROTO_ICMP: u8 = 1;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_ICMPV6: u8 = 58;

/// More tags than this is not a real frame; the bound keeps the loop finite.
const MAX_VLAN_TAGS: usize = 8;
/// Bound on the IPv6 extension header walk.
const MAX_IPV6_EXT: usize = 16;

/// The network layer of a packet: the outermost IPv4 or IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IpHeader {
    /// 4 or 6.
    pub version: u8,
    /// Source address; IPv4 as an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`), so the 16
    /// bytes alone identify the address.
    pub src: [u8; 16],
    /// Destination address, same representation as `src`.
    pub dst: [u8; 16],
    /// Transport protocol; for IPv6 the one after the extension headers we walk
    /// (hop-by-hop, routing, fragment, destination options, AH).
    pub protocol: u8,
    /// TTL (IPv4) or hop limit (IPv6).
    pub ttl: u8,
    /// True if this is a fragment: more-fragments set or a non-zero offset (IPv4, or an
    /// IPv6 fragment header).
    pub fragment: bool,
    /// Fragment offset in bytes (0 for the first fragment and for unfragmented packets).
    /// Non-first fragments carry no transport header.
    pub fragment_offset: u16,
}

impl IpHeader {
    /// The source address as a std address.
    pub fn src_addr(&self) -> IpAddr {
        to_ip(self.version, &self.src)
    }
    /// The destination address as a std address.
    pub fn dst_addr(&self) -> IpAddr {
        to_ip(self.version, &self.dst)
    }
}

fn to_ip(version: u8, a: &[u8; 16]) -> IpAddr {
    if version == 4 {
        IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
    } else {
        IpAddr::V6(Ipv6Addr::from(*a))
    }
}

/// Maps an IPv4 address into the 16-byte form used by [`IpHeader`].
pub fn v4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[10] = 0xff;
    out[11] = 0xff;
    out[12..].copy_from_slice(&a);
    out
}

/// TCP header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpHeader {
    pub src_port: u16,
    pub dst_port: u16,
    /// Raw (absolute) sequence number.
    pub seq: u32,
    pub ack: u32,
    /// The 12 flag bits of bytes 12–13 (reserved, AE/NS, CWR, ECE, URG, ACK, PSH, RST, SYN,
    /// FIN), the same value as tshark's `tcp.flags`.
    pub flags: u16,
    pub window: u16,
    /// Header length in bytes (data offset × 4), options included.
    pub header_len: u8,
}

impl TcpHeader {
    pub const FIN: u16 = 0x001;
    pub const SYN: u16 = 0x002;
    pub const RST: u16 = 0x004;
    pub const PSH: u16 = 0x008;
    pub const ACK: u16 = 0x010;
    pub fn syn(&self) -> bool {
        self.flags & Self::SYN != 0
    }
    pub fn fin(&self) -> bool {
        self.flags & Self::FIN != 0
    }
    pub fn rst(&self) -> bool {
        self.flags & Self::RST != 0
    }
}

/// UDP header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdpHeader {
    pub src_port: u16,
    pub dst_port: u16,
    /// The UDP length field (header + data), as on the wire.
    pub length: u16,
}

/// ICMP or ICMPv6 header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IcmpHeader {
    pub icmp_type: u8,
    pub code: u8,
}

/// The transport header, when one was parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// No transport header: not IP, a non-first fragment, another protocol, or truncated.
    #[default]
    None,
    Tcp(TcpHeader),
    Udp(UdpHeader),
    Icmp(IcmpHeader),
}

impl Transport {
    /// Source and destination ports for TCP and UDP.
    pub fn ports(&self) -> Option<(u16, u16)> {
        match self {
            Transport::Tcp(t) => Some((t.src_port, t.dst_port)),
            Transport::Udp(u) => Some((u.src_port, u.dst_port)),
            _ => None,
        }
    }
}

/// Everything [`dissect`] found in one frame. Plain data (Copy); `payload` borrows the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Headers<'a> {
    /// VLAN id of the outermost 802.1Q / 802.1ad tag.
    pub vlan: Option<u16>,
    /// Ethertype of the network layer (after any VLAN tags), or the one implied by the link
    /// type (raw IP, loopback).
    pub ethertype: Option<u16>,
    /// The outermost IP header.
    pub ip: Option<IpHeader>,
    pub transport: Transport,
    /// Transport payload: clipped to the captured bytes and to the IP (and UDP) length, so
    /// Ethernet padding is never payload. Empty without a transport header.
    pub payload: &'a [u8],
    /// Length the payload had on the wire according to the IP (and UDP) length fields;
    /// `payload.len()` is smaller when the capture's snap length cut the frame.
    pub payload_wire_len: u32,
    /// A header that the frame announces was cut short by the end of the captured bytes, or
    /// is malformed (e.g. an IPv4 header length under 20).
    pub truncated: bool,
    /// Offset of the network header in the frame (0 when there is none).
    pub network_offset: u32,
    /// Offset just past the network header (IPv6 extension headers included); 0 without IP.
    pub network_end: u32,
    /// Offset just past the transport header (where the payload starts); 0 without one.
    pub transport_end: u32,
}

/// Dissects one frame of the given pcap/pcapng link type. Never panics, never allocates.
pub fn dissect(linktype: u32, frame: &[u8]) -> Headers<'_> {
    let mut h = Headers::default();
    let (ethertype, off) = match link_layer(linktype, frame, 0) {
        Link::Next(t, off) => (t, off),
        Link::Truncated => {
            h.truncated = true;
            return h;
        }
        Link::Other => return h,
    };
    let mut ethertype = ethertype;
    let mut off = off;
    // VLAN tags: keep the outermost id, skip inner (QinQ) tags.
    for _ in 0..MAX_VLAN_TAGS {
        if !matches!(ethertype, ETH_VLAN | ETH_QINQ | ETH_QINQ_OLD) {
            break;
        }
        let (Some(tci), Some(next)) = (be16(frame, off), be16(frame, off + 2)) else {
            h.truncated = true;
            return h;
        };
        if h.vlan.is_none() {
            h.vlan = Some(tci & 0x0fff);
        }
        ethertype = next;
        off += 4;
    }
    h.ethertype = Some(ethertype);
    match ethertype {
        ETH_IPV4 => ipv4(&mut h, frame, off),
        ETH_IPV6 => ipv6(&mut h, frame, off),
        _ => {}
    }
    h
}

/// What the link layer leads to.
enum Link {
    /// An ethertype and the offset of the header it names.
    Next(u16, usize),
    /// The link header is cut short.
    Truncated,
    /// Not a link type, or not a protocol, that leads to IP.
    Other,
}

/// PPP protocol numbers (RFC 1661/1332/5072).
const PPP_IPV4: u16 = 0x0021;
const PPP_IPV6: u16 = 0x0057;
/// Frame Relay NLPIDs (RFC 2427).
const NLPID_SNAP: u8 = 0x80;
const NLPID_IPV4: u8 = 0xcc;
const NLPID_IPV6: u8 = 0x8e;
/// ARCNET protocol ids: RFC 1201 and the older RFC 1051.
const ARC_IP_RFC1201: u8 = 212;
const ARC_IP_RFC1051: u8 = 240;
/// Bound on nested encapsulations (PKTAP carries another link type).
const MAX_LINK_DEPTH: u8 = 2;

/// The link layer of `frame`: where its network header starts and what it is.
fn link_layer(linktype: u32, frame: &[u8], depth: u8) -> Link {
    let at = |off: usize| -> Link {
        match be16(frame, off) {
            Some(t) => Link::Next(t, off + 2),
            None => Link::Truncated,
        }
    };
    let ip_by_version = |off: usize| -> Link {
        match frame.get(off).map(|b| b >> 4) {
            Some(4) => Link::Next(ETH_IPV4, off),
            Some(6) => Link::Next(ETH_IPV6, off),
            Some(_) => Link::Other,
            None => Link::Truncated,
        }
    };
    match linktype {
        LINKTYPE_ETHERNET => at(12),
        LINKTYPE_RAW | DLT_RAW_12 | DLT_RAW_14 => ip_by_version(0),
        LINKTYPE_IPV4 => Link::Next(ETH_IPV4, 0),
        LINKTYPE_IPV6 => Link::Next(ETH_IPV6, 0),
        LINKTYPE_LINUX_SLL => at(14),
        LINKTYPE_LINUX_SLL2 => match be16(frame, 0) {
            Some(t) if frame.len() >= 20 => Link::Next(t, 20),
            _ => Link::Truncated,
        },
        LINKTYPE_NULL | LINKTYPE_LOOP => {
            let Some(b) = frame.get(..4) else {
                return Link::Truncated;
            };
            // Written in the capturing host's order; a family fits in 16 bits, so the order
            // whose value does is the right one.
            let mut fam = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if fam > 0xffff {
                fam = fam.swap_bytes();
            }
            match fam {
                2 => Link::Next(ETH_IPV4, 4),
                // AF_INET6 on NetBSD/OpenBSD/BSD-OS, FreeBSD, Darwin, Linux, Windows.
                24 | 28 | 30 | 10 | 23 => Link::Next(ETH_IPV6, 4),
                _ => Link::Other,
            }
        }
        // 16-byte pseudo-header (direction, compressed-header info), then the IP packet.
        LINKTYPE_SLIP => ip_by_version(16),
        LINKTYPE_PPP | LINKTYPE_PPP_HDLC => match frame.first() {
            // Cisco HDLC framing inside LINKTYPE_PPP_HDLC (RFC 1547 4.3.1).
            Some(0x0f | 0x8f) if linktype == LINKTYPE_PPP_HDLC => at(2),
            Some(0xff) if frame.get(1) == Some(&0x03) => ppp(frame, 2),
            Some(_) => ppp(frame, 0),
            None => Link::Truncated,
        },
        // Address, control, then an ethertype.
        LINKTYPE_C_HDLC => at(2),
        LINKTYPE_FRELAY => frame_relay(frame),
        // Source and destination addresses (20 bytes each: QPN and GID), then the RFC 4391
        // header: an ethertype and 2 reserved bytes.
        LINKTYPE_IPOIB => match be16(frame, 40) {
            Some(t) if frame.len() >= 44 => Link::Next(t, 44),
            _ => Link::Truncated,
        },
        // Solaris ipnet: 24-byte header, address family in byte 1 (AF_INET 2, AF_INET6 26).
        LINKTYPE_IPNET => match frame.get(1) {
            Some(_) if frame.len() < 24 => Link::Truncated,
            Some(2) => Link::Next(ETH_IPV4, 24),
            Some(26) => Link::Next(ETH_IPV6, 24),
            Some(_) => Link::Other,
            None => Link::Truncated,
        },
        LINKTYPE_NFLOG => nflog(frame),
        LINKTYPE_JUNIPER_ETHER => juniper_ether(frame),
        LINKTYPE_ARCNET_LINUX => arcnet(frame),
        // 4-byte ATM pseudo-header, then LLC/SNAP.
        LINKTYPE_SUNATM => llc_snap(frame, 4),
        LINKTYPE_ATM_RFC1483 => llc_snap(frame, 0),
        // Broadcom switch tag: 4 bytes between the source address and the ethertype, or
        // in front of the whole Ethernet frame.
        LINKTYPE_DSA_TAG_BRCM | LINKTYPE_DSA_TAG_BRCM_PREPEND => at(16),
        // Apple PKTAP: a header whose length (host order) and inner link type lead on.
        LINKTYPE_PKTAP if depth < MAX_LINK_DEPTH => {
            let (Some(len), Some(dlt)) = (le32(frame, 0), le32(frame, 4)) else {
                return Link::Truncated;
            };
            let len = len as usize;
            if len < 8 || len > frame.len() {
                return Link::Truncated;
            }
            match link_layer(dlt, &frame[len..], depth + 1) {
                Link::Next(t, off) => Link::Next(t, off + len),
                other => other,
            }
        }
        _ => Link::Other,
    }
}

/// A PPP header at `off`: a 1-byte (compressed, odd) or 2-byte protocol number.
fn ppp(frame: &[u8], off: usize) -> Link {
    let Some(&first) = frame.get(off) else {
        return Link::Truncated;
    };
    let (proto, next) = if first & 1 == 1 {
        (u16::from(first), off + 1)
    } else {
        match be16(frame, off) {
            Some(p) => (p, off + 2),
            None => return Link::Truncated,
        }
    };
    match proto {
        PPP_IPV4 => Link::Next(ETH_IPV4, next),
        PPP_IPV6 => Link::Next(ETH_IPV6, next),
        _ => Link::Other,
    }
}

/// Frame Relay (RFC 2427): a Q.922 address (its last byte has the EA bit set), the UI
/// control byte 0x03, optional padding, then an NLPID (IP directly, or SNAP); or, in Cisco's
/// encapsulation, an ethertype right after the address.
fn frame_relay(frame: &[u8]) -> Link {
    let mut off = 0;
    loop {
        let Some(&b) = frame.get(off) else {
            return Link::Truncated;
        };
        off += 1;
        if b & 1 == 1 {
            break;
        }
        if off >= 4 {
            return Link::Other;
        }
    }
    match frame.get(off) {
        Some(0x03) => off += 1,
        // Cisco's encapsulation: an ethertype right after the address.
        Some(_) => {
            return match be16(frame, off) {
                Some(t) => Link::Next(t, off + 2),
                None => Link::Truncated,
            }
        }
        None => return Link::Truncated,
    }
    if frame.get(off) == Some(&0x00) {
        off += 1;
    }
    match frame.get(off) {
        Some(&NLPID_IPV4) => Link::Next(ETH_IPV4, off + 1),
        Some(&NLPID_IPV6) => Link::Next(ETH_IPV6, off + 1),
        // SNAP: a 3-byte OUI, then a 2-byte PID that is an ethertype under OUI 0.
        Some(&NLPID_SNAP) => match frame.get(off + 1..off + 4) {
            Some([0, 0, 0]) => match be16(frame, off + 4) {
                Some(t) => Link::Next(t, off + 6),
                None => Link::Truncated,
            },
            Some(_) => Link::Other,
            None => Link::Truncated,
        },
        Some(_) => Link::Other,
        None => Link::Truncated,
    }
}

/// Juniper: magic "MGC", a flags byte, extensions when flag 0x80 is set (a 2-byte length,
/// then TLVs), then the Ethernet frame; flag 0x02 ("no layer 2") is not followed.
fn juniper_ether(frame: &[u8]) -> Link {
    const EXTENSIONS: u8 = 0x80;
    const NO_L2: u8 = 0x02;
    let Some(head) = frame.get(..4) else {
        return Link::Truncated;
    };
    if &head[..3] != b"MGC" || head[3] & NO_L2 != 0 {
        return Link::Other;
    }
    let eth = if head[3] & EXTENSIONS != 0 {
        match be16(frame, 4) {
            Some(n) => 6 + usize::from(n),
            None => return Link::Truncated,
        }
    } else {
        4
    };
    match be16(frame, eth + 12) {
        Some(t) => Link::Next(t, eth + 14),
        None => Link::Truncated,
    }
}

/// LLC/SNAP (AA AA 03, OUI 0, ethertype) at `off`.
fn llc_snap(frame: &[u8], off: usize) -> Link {
    match frame.get(off..off + 6) {
        Some([0xaa, 0xaa, 0x03, 0, 0, 0]) => match be16(frame, off + 6) {
            Some(t) => Link::Next(t, off + 8),
            None => Link::Truncated,
        },
        Some(_) => Link::Other,
        None => Link::Truncated,
    }
}

/// Linux NFLOG: family, version, resource id, then TLVs (length and type in host order,
/// little-endian here; values padded to 4 bytes); the packet is the NFULA_PAYLOAD value.
fn nflog(frame: &[u8]) -> Link {
    const NFULA_PAYLOAD: u16 = 9;
    let Some(&family) = frame.first() else {
        return Link::Truncated;
    };
    let mut off = 4;
    while off < frame.len() {
        let (Some(len), Some(kind)) = (le16(frame, off), le16(frame, off + 2)) else {
            return Link::Truncated;
        };
        let len = usize::from(len);
        if len < 4 {
            return Link::Other;
        }
        if kind & 0x7fff == NFULA_PAYLOAD {
            return match family {
                2 => Link::Next(ETH_IPV4, off + 4),
                10 => Link::Next(ETH_IPV6, off + 4),
                _ => Link::Other,
            };
        }
        off += (len + 3) & !3;
    }
    Link::Other
}

/// Linux ARCNET: source, destination, a 2-byte offset, the protocol id, and for RFC 1201
/// protocols a split flag and sequence number (an exception packet repeats those after
/// 4 more bytes).
fn arcnet(frame: &[u8]) -> Link {
    match frame.get(4) {
        Some(&ARC_IP_RFC1051) => Link::Next(ETH_IPV4, 5),
        Some(&ARC_IP_RFC1201) => match frame.get(5) {
            Some(0xff) if frame.len() >= 12 => Link::Next(ETH_IPV4, 12),
            Some(0xff) => Link::Truncated,
            Some(_) if frame.len() >= 8 => Link::Next(ETH_IPV4, 8),
            _ => Link::Truncated,
        },
        Some(_) => Link::Other,
        None => Link::Truncated,
    }
}

fn ipv4<'a>(h: &mut Headers<'a>, frame: &'a [u8], off: usize) {
    let Some(b) = frame.get(off..off + 20) else {
        h.truncated = true;
        return;
    };
    if b[0] >> 4 != 4 {
        h.truncated = true;
        return;
    }
    let ihl = usize::from(b[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([b[2], b[3]]));
    let frag = u16::from_be_bytes([b[6], b[7]]);
    let fragment_offset = (frag & 0x1fff) * 8;
    let ip = IpHeader {
        version: 4,
        src: v4_mapped([b[12], b[13], b[14], b[15]]),
        dst: v4_mapped([b[16], b[17], b[18], b[19]]),
        protocol: b[9],
        ttl: b[8],
        fragment: frag & 0x2000 != 0 || fragment_offset != 0,
        fragment_offset,
    };
    h.ip = Some(ip);
    h.network_offset = off as u32;
    if ihl < 20 {
        h.truncated = true;
        return;
    }
    let end = off + ihl;
    if frame.len() < end {
        h.truncated = true;
        return;
    }
    h.network_end = end as u32;
    // A total length of 0 comes from segmentation offload (TSO) captures: trust the frame.
    let ip_end = if total == 0 {
        frame.len()
    } else if total < ihl {
        h.truncated = true;
        return;
    } else {
        off + total
    };
    if fragment_offset != 0 {
        return;
    }
    transport(h, frame, end, ip_end, ip.protocol);
}

fn ipv6<'a>(h: &mut Headers<'a>, frame: &'a [u8], off: usize) {
    let Some(b) = frame.get(off..off + 40) else {
        h.truncated = true;
        return;
    };
    if b[0] >> 4 != 6 {
        h.truncated = true;
        return;
    }
    let plen = usize::from(u16::from_be_bytes([b[4], b[5]]));
    let mut ip = IpHeader {
        version: 6,
        protocol: b[6],
        ttl: b[7],
        ..Default::default()
    };
    ip.src.copy_from_slice(&b[8..24]);
    ip.dst.copy_from_slice(&b[24..40]);
    h.network_offset = off as u32;
    // Payload length 0 is a jumbogram or an offloaded segment: trust the frame.
    let ip_end = if plen == 0 {
        frame.len()
    } else {
        off + 40 + plen
    };
    let mut pos = off + 40;
    let mut next = ip.protocol;
    let mut done = false;
    for _ in 0..MAX_IPV6_EXT {
        let len = match next {
            0 | 43 | 60 => match frame.get(pos + 1) {
                Some(&l) => (usize::from(l) + 1) * 8,
                None => break,
            },
            51 => match frame.get(pos + 1) {
                Some(&l) => (usize::from(l) + 2) * 4,
                None => break,
            },
            44 => {
                let Some(f) = be16(frame, pos + 2) else {
                    break;
                };
                ip.fragment_offset = f & 0xfff8;
                ip.fragment = f & 1 != 0 || ip.fragment_offset != 0;
                8
            }
            _ => {
                done = true;
                break;
            }
        };
        let Some(&n) = frame.get(pos) else {
            break;
        };
        if pos + len > frame.len() {
            break;
        }
        next = n;
        pos += len;
    }
    ip.protocol = next;
    h.ip = Some(ip);
    if !done {
        // Ran out of captured bytes (or extension headers) inside the chain.
        h.truncated = true;
        return;
    }
    h.network_end = pos as u32;
    if ip.fragment_offset != 0 {
        return;
    }
    transport(h, frame, pos, ip_end, next);
}

/// Parses the transport header at `off`; `ip_end` is where the IP length says the packet ends.
fn transport<'a>(h: &mut Headers<'a>, frame: &'a [u8], off: usize, ip_end: usize, proto: u8) {
    let mut end_wire = ip_end;
    let hdr_len = match proto {
        PROTO_TCP => {
            let Some(b) = frame.get(off..off + 20) else {
                h.truncated = true;
                return;
            };
            let hl = usize::from(b[12] >> 4) * 4;
            if hl < 20 || off + hl > frame.len() {
                h.truncated = true;
                return;
            }
            h.transport = Transport::Tcp(TcpHeader {
                src_port: u16::from_be_bytes([b[0], b[1]]),
                dst_port: u16::from_be_bytes([b[2], b[3]]),
                seq: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
                ack: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
                flags: u16::from_be_bytes([b[12], b[13]]) & 0x0fff,
                window: u16::from_be_bytes([b[14], b[15]]),
                header_len: hl as u8,
            });
            hl
        }
        PROTO_UDP => {
            let Some(b) = frame.get(off..off + 8) else {
                h.truncated = true;
                return;
            };
            let length = u16::from_be_bytes([b[4], b[5]]);
            h.transport = Transport::Udp(UdpHeader {
                src_port: u16::from_be_bytes([b[0], b[1]]),
                dst_port: u16::from_be_bytes([b[2], b[3]]),
                length,
            });
            if length >= 8 {
                end_wire = end_wire.min(off + usize::from(length));
            }
            8
        }
        PROTO_ICMP | PROTO_ICMPV6 => {
            let Some(b) = frame.get(off..off + 8) else {
                h.truncated = true;
                return;
            };
            h.transport = Transport::Icmp(IcmpHeader {
                icmp_type: b[0],
                code: b[1],
            });
            8
        }
        _ => return,
    };
    let start = off + hdr_len;
    h.transport_end = start as u32;
    let end = end_wire.min(frame.len()).max(start);
    h.payload = &frame[start..end];
    h.payload_wire_len = end_wire.saturating_sub(start) as u32;
}

#[inline]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at + 2)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

#[inline]
fn le16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at + 2)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

#[inline]
fn le32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + 802.1ad + 802.1Q + IPv4 + TCP with 4 payload bytes and 2 padding bytes.
    fn qinq_tcp() -> Vec<u8> {
        let mut f = vec![];
        f.extend([
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb,
        ]);
        f.extend([0x88, 0xa8, 0x00, 0x64]); // S-tag, vid 100
        f.extend([0x81, 0x00, 0x00, 0xc8]); // C-tag, vid 200
        f.extend([0x08, 0x00]);
        f.extend([
            0x45, 0x00, 0x00, 44, 0x12, 0x34, 0x40, 0x00, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f.extend([
            0x03, 0x20, 0x08, 0x01, 0, 0, 0, 1, 0, 0, 0, 2, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0,
        ]);
        f.extend(b"abcd");
        f.extend([0, 0]);
        f
    }

    #[test]
    fn ethernet_qinq_tcp() {
        let f = qinq_tcp();
        let h = dissect(LINKTYPE_ETHERNET, &f);
        assert_eq!(h.vlan, Some(100));
        assert_eq!(h.ethertype, Some(ETH_IPV4));
        let ip = h.ip.unwrap();
        assert_eq!(ip.src_addr().to_string(), "10.0.0.1");
        assert_eq!(ip.dst_addr().to_string(), "10.0.0.2");
        assert_eq!((ip.protocol, ip.ttl, ip.fragment), (6, 64, false));
        let Transport::Tcp(t) = h.transport else {
            panic!("no tcp")
        };
        assert_eq!((t.src_port, t.dst_port, t.seq, t.ack), (800, 2049, 1, 2));
        assert_eq!((t.flags, t.window, t.header_len), (0x18, 0xffff, 20));
        assert_eq!(h.payload, b"abcd", "padding is not payload");
        assert_eq!(h.payload_wire_len, 4);
        assert!(!h.truncated);
        assert_eq!(
            (h.network_offset, h.network_end, h.transport_end),
            (22, 42, 62)
        );
    }

    #[test]
    fn every_prefix_is_safe_and_flags_truncation() {
        let f = qinq_tcp();
        for n in 0..62 {
            let h = dissect(LINKTYPE_ETHERNET, &f[..n]);
            assert!(h.truncated, "prefix {n}");
            assert_eq!(h.transport, Transport::None);
        }
        let h = dissect(LINKTYPE_ETHERNET, &f[..64]);
        assert!(!h.truncated);
        assert_eq!(h.payload, b"ab");
        assert_eq!(h.payload_wire_len, 4);
    }

    #[test]
    fn raw_and_loopback_link_types() {
        let f = qinq_tcp();
        let ip = &f[22..];
        for lt in [LINKTYPE_RAW, DLT_RAW_12, DLT_RAW_14, LINKTYPE_IPV4] {
            let h = dissect(lt, ip);
            assert_eq!(h.ip.unwrap().protocol, 6, "linktype {lt}");
            assert_eq!(h.payload, b"abcd");
        }
        for fam in [[2u8, 0, 0, 0], [0, 0, 0, 2]] {
            for lt in [LINKTYPE_NULL, LINKTYPE_LOOP] {
                let mut g = fam.to_vec();
                g.extend(ip);
                let h = dissect(lt, &g);
                assert_eq!(h.ip.unwrap().version, 4);
                assert_eq!(h.network_offset, 4);
            }
        }
        let mut sll = vec![0u8; 14];
        sll.extend([0x08, 0x00]);
        sll.extend(ip);
        assert_eq!(dissect(LINKTYPE_LINUX_SLL, &sll).payload, b"abcd");
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend([0u8; 18]);
        sll2.extend(ip);
        assert_eq!(dissect(LINKTYPE_LINUX_SLL2, &sll2).payload, b"abcd");
        assert_eq!(dissect(147, &sll2), Headers::default());
    }

    #[test]
    fn other_link_types_lead_to_ip() {
        let f = qinq_tcp();
        let ip = &f[22..];
        let eth = {
            let mut e = f[..12].to_vec();
            e.extend([0x08, 0x00]);
            e.extend(ip);
            e
        };
        let with = |head: &[u8], body: &[u8]| {
            let mut v = head.to_vec();
            v.extend(body);
            v
        };
        let mut pktap = vec![0u8; 108];
        pktap[0] = 108;
        pktap[4] = 1;
        let mut nflog = vec![2, 0, 0, 0, 8, 0, 1, 0, 0x08, 0x00, 0, 0];
        nflog.extend(((4 + ip.len()) as u16).to_le_bytes());
        nflog.extend(9u16.to_le_bytes());
        let mut brcm = f[..12].to_vec();
        brcm.extend([0x20, 0, 0, 0, 0x08, 0x00]);
        let cases: Vec<(u32, Vec<u8>, usize)> = vec![
            (LINKTYPE_SLIP, with(&[0; 16], ip), 16),
            (LINKTYPE_PPP, with(&[0xff, 0x03, 0x00, 0x21], ip), 4),
            (LINKTYPE_PPP, with(&[0x00, 0x21], ip), 2),
            (LINKTYPE_PPP, with(&[0x21], ip), 1),
            (LINKTYPE_PPP_HDLC, with(&[0xff, 0x03, 0x00, 0x21], ip), 4),
            (LINKTYPE_PPP_HDLC, with(&[0x0f, 0x00, 0x08, 0x00], ip), 4),
            (LINKTYPE_C_HDLC, with(&[0x8f, 0x00, 0x08, 0x00], ip), 4),
            (LINKTYPE_FRELAY, with(&[0x18, 0x41, 0x03, 0xcc], ip), 4),
            (
                LINKTYPE_FRELAY,
                with(&[0x18, 0x41, 0x03, 0x00, 0x80, 0, 0, 0, 0x08, 0x00], ip),
                10,
            ),
            (
                LINKTYPE_IPOIB,
                with(&[[0u8; 40].as_slice(), &[0x08, 0x00, 0, 0]].concat(), ip),
                44,
            ),
            (LINKTYPE_FRELAY, with(&[0x48, 0xe1, 0x08, 0x00], ip), 4),
            (
                LINKTYPE_IPNET,
                with(
                    &[
                        1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                    ],
                    ip,
                ),
                24,
            ),
            (LINKTYPE_NFLOG, with(&nflog, ip), 16),
            (
                LINKTYPE_ARCNET_LINUX,
                with(&[1, 2, 0, 0, 212, 0, 0, 0], ip),
                8,
            ),
            (LINKTYPE_ARCNET_LINUX, with(&[1, 2, 0, 0, 240], ip), 5),
            (
                LINKTYPE_SUNATM,
                with(&[0, 0, 0, 0, 0xaa, 0xaa, 3, 0, 0, 0, 8, 0], ip),
                12,
            ),
            (LINKTYPE_PKTAP, with(&pktap, &eth), 122),
            (LINKTYPE_DSA_TAG_BRCM, with(&brcm, ip), 18),
            (
                LINKTYPE_JUNIPER_ETHER,
                with(&[b"MGC".as_slice(), &[0x80, 0, 2, 9, 9]].concat(), &eth),
                22,
            ),
            (LINKTYPE_JUNIPER_ETHER, with(b"MGC\x00", &eth), 18),
            (
                LINKTYPE_DSA_TAG_BRCM_PREPEND,
                with(&[0x20, 0, 0, 0], &eth),
                18,
            ),
        ];
        for (lt, frame, off) in cases {
            let h = dissect(lt, &frame);
            assert_eq!(h.network_offset as usize, off, "linktype {lt}");
            assert_eq!(h.ip.unwrap().protocol, 6, "linktype {lt}");
            assert_eq!(h.payload, b"abcd", "linktype {lt}");
            for n in 0..off {
                let h = dissect(lt, &frame[..n]);
                assert!(h.ip.is_none(), "linktype {lt}, prefix {n}");
            }
        }
        // Not IP: PPP LCP, Frame Relay Q.933, an NFLOG without a payload.
        assert!(dissect(LINKTYPE_PPP, &with(&[0xff, 0x03, 0xc0, 0x21], ip))
            .ip
            .is_none());
        assert!(
            dissect(LINKTYPE_FRELAY, &with(&[0x00, 0x01, 0x03, 0x08], ip))
                .ip
                .is_none()
        );
        assert!(
            dissect(LINKTYPE_FRELAY, &with(&[0x00, 0x00, 0x00, 0x00, 0x01], ip))
                .ip
                .is_none()
        );
        assert!(dissect(LINKTYPE_NFLOG, &nflog[..12]).ip.is_none());
    }

    #[test]
    fn ipv6_extension_headers_and_fragments() {
        // IPv6, hop-by-hop (8 bytes) -> fragment (offset 0, M=1) -> UDP.
        let mut f = vec![0x60, 0, 0, 0, 0, 24, 0, 64];
        f.extend(
            [0x20, 0x01, 0x0d, 0xb8]
                .iter()
                .chain([0u8; 11].iter())
                .chain([1u8].iter()),
        );
        f.extend(
            [0x20, 0x01, 0x0d, 0xb8]
                .iter()
                .chain([0u8; 11].iter())
                .chain([2u8].iter()),
        );
        f.extend([44, 0, 1, 4, 0, 0, 0, 0]);
        f.extend([17, 0, 0x00, 0x01, 0, 0, 0, 7]);
        f.extend([0x00, 0x35, 0x04, 0x00, 0x00, 0x08, 0, 0]);
        let h = dissect(LINKTYPE_IPV6, &f);
        let ip = h.ip.unwrap();
        assert_eq!(ip.dst_addr().to_string(), "2001:db8::2");
        assert_eq!(
            (ip.protocol, ip.fragment, ip.fragment_offset),
            (17, true, 0)
        );
        assert_eq!(h.transport.ports(), Some((53, 1024)));
        assert_eq!(h.network_end, 56);
        // Non-first fragment: offset 8, no transport header.
        f[50] = 0;
        f[51] = 8;
        let h = dissect(LINKTYPE_IPV6, &f);
        assert_eq!(h.ip.unwrap().fragment_offset, 8);
        assert_eq!(h.transport, Transport::None);
        assert!(!h.truncated);
    }
}
