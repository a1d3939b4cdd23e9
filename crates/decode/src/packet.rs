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
    let (ethertype, off) = match linktype {
        LINKTYPE_ETHERNET => {
            let Some(t) = be16(frame, 12) else {
                h.truncated = true;
                return h;
            };
            (t, 14)
        }
        LINKTYPE_RAW | DLT_RAW_12 | DLT_RAW_14 => match frame.first().map(|b| b >> 4) {
            Some(4) => (ETH_IPV4, 0),
            Some(6) => (ETH_IPV6, 0),
            Some(_) => return h,
            None => {
                h.truncated = true;
                return h;
            }
        },
        LINKTYPE_IPV4 => (ETH_IPV4, 0),
        LINKTYPE_IPV6 => (ETH_IPV6, 0),
        LINKTYPE_LINUX_SLL => {
            let Some(t) = be16(frame, 14) else {
                h.truncated = true;
                return h;
            };
            (t, 16)
        }
        LINKTYPE_LINUX_SLL2 => {
            let Some(t) = be16(frame, 0) else {
                h.truncated = true;
                return h;
            };
            if frame.len() < 20 {
                h.truncated = true;
                return h;
            }
            (t, 20)
        }
        LINKTYPE_NULL | LINKTYPE_LOOP => {
            let Some(b) = frame.get(..4) else {
                h.truncated = true;
                return h;
            };
            // Written in the capturing host's order; a family fits in 16 bits, so the order
            // whose value does is the right one.
            let mut fam = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if fam > 0xffff {
                fam = fam.swap_bytes();
            }
            match fam {
                2 => (ETH_IPV4, 4),
                // AF_INET6 on NetBSD/OpenBSD/BSD-OS, FreeBSD, Darwin, Linux, Windows.
                24 | 28 | 30 | 10 | 23 => (ETH_IPV6, 4),
                _ => return h,
            }
        }
        _ => return h,
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
