//! Per-packet header dissection: link layer → IP → TCP/UDP/ICMP, zero-copy and allocation-free.
//!
//! [`dissect`] walks the [`wire`](crate::wire) views (the link layers through
//! [`link`](crate::link)) and gathers what the recorder and the converter use into
//! [`Headers`], plain `Copy` data. It never panics and never allocates. A header cut short
//! by the capture sets [`Headers::truncated`] and leaves everything parsed before it in
//! place. IP fragments are reported as they are ([`Headers::fragment`]); the
//! [`fragments`](crate::fragments) reassembler makes datagrams of them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::link::{link_layer, Link};
use crate::wire::{
    ipv6, vlan, EtherType, ExtensionChain, IcmpPacket, Ipv4Packet, Ipv6Packet, TcpPacket,
    UdpPacket, VlanTag,
};

pub use crate::link::{
    DLT_RAW_12, DLT_RAW_14, LINKTYPE_ARCNET_LINUX, LINKTYPE_ATM_RFC1483, LINKTYPE_C_HDLC,
    LINKTYPE_DSA_TAG_BRCM, LINKTYPE_DSA_TAG_BRCM_PREPEND, LINKTYPE_ETHERNET, LINKTYPE_FRELAY,
    LINKTYPE_IPNET, LINKTYPE_IPOIB, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_JUNIPER_ETHER,
    LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, LINKTYPE_LOOP, LINKTYPE_NFLOG, LINKTYPE_NULL,
    LINKTYPE_PKTAP, LINKTYPE_PPP, LINKTYPE_PPP_HDLC, LINKTYPE_RAW, LINKTYPE_SLIP, LINKTYPE_SUNATM,
};

/// IP protocol numbers we look at.
pub const PROTO_ICMP: u8 = 1;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_ICMPV6: u8 = 58;

/// More tags than this is not a real frame; the bound keeps the loop finite.
const MAX_VLAN_TAGS: usize = 8;

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
    /// What reassembly needs when the packet is an IP fragment (`ip.fragment`): set once the
    /// IPv4 header, or the IPv6 fragment header, was read whole.
    pub fragment: Option<Fragment>,
}

/// An IP fragment, as reassembly needs it (RFC 791 §3.2, RFC 8200 §4.5). Fragments of one
/// datagram share the source, destination and `ident` (and, for IPv4, the protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fragment {
    /// IPv4 identification (16 bits), or the IPv6 fragment header's (32 bits).
    pub ident: u32,
    /// Offset of this fragment's data in the datagram's data (IPv4) or fragmentable part
    /// (IPv6), in bytes.
    pub offset: u16,
    /// More fragments follow (clear on the last one).
    pub more: bool,
    /// The protocol of the reassembled data: IPv4's protocol field, or the IPv6 fragment
    /// header's next header (which may name a further extension header).
    pub protocol: u8,
    /// Where this fragment's data begins in the frame: after the IPv4 header (options
    /// included) or after the IPv6 fragment header.
    pub data_offset: u32,
    /// Length of this fragment's data by the IP length field (to the end of the frame when
    /// that is 0); fewer bytes are captured when the snap length cut the frame.
    pub data_wire_len: u32,
}

/// Dissects one frame of the given pcap/pcapng link type. Never panics, never allocates.
pub fn dissect(linktype: u32, frame: &[u8]) -> Headers<'_> {
    let mut h = Headers::default();
    let (mut ethertype, mut off) = match link_layer(linktype, frame) {
        Link::Next(t, off) => (t, off),
        Link::Truncated => {
            h.truncated = true;
            return h;
        }
        Link::Other => return h,
    };
    // VLAN tags: keep the outermost id, skip inner (QinQ) tags.
    for _ in 0..MAX_VLAN_TAGS {
        if !EtherType::is_vlan(ethertype) {
            break;
        }
        let Ok(tag) = VlanTag::new_checked(rest(frame, off)) else {
            h.truncated = true;
            return h;
        };
        h.vlan.get_or_insert(tag.vlan_id());
        ethertype = tag.ethertype();
        off += vlan::TAG_LEN;
    }
    h.ethertype = Some(ethertype);
    match ethertype {
        EtherType::IPV4 => ipv4(&mut h, frame, off),
        EtherType::IPV6 => ipv6(&mut h, frame, off),
        _ => {}
    }
    h
}

/// The bytes of `frame` from `off` on (none past the end).
fn rest(frame: &[u8], off: usize) -> &[u8] {
    frame.get(off..).unwrap_or_default()
}

fn ipv4<'a>(h: &mut Headers<'a>, frame: &'a [u8], off: usize) {
    let Ok(p) = Ipv4Packet::new_checked(rest(frame, off)) else {
        h.truncated = true;
        return;
    };
    let ip = IpHeader {
        version: 4,
        src: v4_mapped(p.src_addr()),
        dst: v4_mapped(p.dst_addr()),
        protocol: p.protocol(),
        ttl: p.ttl(),
        fragment: p.is_fragment(),
        fragment_offset: p.frag_offset(),
    };
    h.ip = Some(ip);
    h.network_offset = off as u32;
    let Ok(header_len) = p.check_header_len() else {
        h.truncated = true;
        return;
    };
    let end = off + header_len;
    h.network_end = end as u32;
    // A total length of 0 comes from segmentation offload (TSO) captures: trust the frame.
    let ip_end = match usize::from(p.total_len()) {
        0 => frame.len(),
        total if total < header_len => {
            h.truncated = true;
            return;
        }
        total => off + total,
    };
    if ip.fragment {
        h.fragment = Some(Fragment {
            ident: u32::from(p.ident()),
            offset: p.frag_offset(),
            more: p.more_frags(),
            protocol: p.protocol(),
            data_offset: end as u32,
            data_wire_len: (ip_end - end) as u32,
        });
    }
    if ip.fragment_offset != 0 {
        return;
    }
    transport(h, frame, end, ip_end, ip.protocol);
}

fn ipv6<'a>(h: &mut Headers<'a>, frame: &'a [u8], off: usize) {
    let Ok(p) = Ipv6Packet::new_checked(rest(frame, off)) else {
        h.truncated = true;
        return;
    };
    h.network_offset = off as u32;
    let chain_start = off + ipv6::HEADER_LEN;
    // Payload length 0 is a jumbogram or an offloaded segment: trust the frame.
    let ip_end = match usize::from(p.payload_len()) {
        0 => frame.len(),
        n => chain_start + n,
    };
    let chain = ExtensionChain::walk(p.next_header(), rest(frame, chain_start));
    let ip = IpHeader {
        version: 6,
        src: p.src_addr(),
        dst: p.dst_addr(),
        protocol: chain.next_header,
        ttl: p.hop_limit(),
        fragment: chain.is_fragment(),
        fragment_offset: chain.frag_offset,
    };
    h.ip = Some(ip);
    if let (true, Some(f)) = (ip.fragment, chain.fragment) {
        let data_offset = chain_start + f.data_offset;
        h.fragment = Some(Fragment {
            ident: f.ident,
            offset: f.offset,
            more: f.more,
            protocol: f.next_header,
            data_offset: data_offset as u32,
            data_wire_len: ip_end.saturating_sub(data_offset) as u32,
        });
    }
    if chain.end.is_err() {
        // Ran out of captured bytes (or extension headers) inside the chain.
        h.truncated = true;
        return;
    }
    let end = chain_start + chain.len;
    h.network_end = end as u32;
    if ip.fragment_offset != 0 {
        return;
    }
    transport(h, frame, end, ip_end, ip.protocol);
}

/// Parses the transport header at `off`; `ip_end` is where the IP length says the packet ends.
pub(crate) fn transport<'a>(
    h: &mut Headers<'a>,
    frame: &'a [u8],
    off: usize,
    ip_end: usize,
    proto: u8,
) {
    let buf = rest(frame, off);
    let mut end_wire = ip_end;
    let header_len = match proto {
        PROTO_TCP => {
            let Ok(t) = TcpPacket::new_checked(buf) else {
                h.truncated = true;
                return;
            };
            h.transport = Transport::Tcp(TcpHeader {
                src_port: t.src_port(),
                dst_port: t.dst_port(),
                seq: t.seq_number(),
                ack: t.ack_number(),
                flags: t.flags(),
                window: t.window_len(),
                header_len: t.header_len() as u8,
            });
            t.header_len()
        }
        PROTO_UDP => {
            let Ok(u) = UdpPacket::new_checked(buf) else {
                h.truncated = true;
                return;
            };
            h.transport = Transport::Udp(UdpHeader {
                src_port: u.src_port(),
                dst_port: u.dst_port(),
                length: u.len(),
            });
            if usize::from(u.len()) >= crate::wire::udp::HEADER_LEN {
                end_wire = end_wire.min(off + usize::from(u.len()));
            }
            crate::wire::udp::HEADER_LEN
        }
        PROTO_ICMP | PROTO_ICMPV6 => {
            let Ok(m) = IcmpPacket::new_checked(buf) else {
                h.truncated = true;
                return;
            };
            h.transport = Transport::Icmp(IcmpHeader {
                icmp_type: m.msg_type(),
                code: m.code(),
            });
            crate::wire::icmp::HEADER_LEN
        }
        _ => return,
    };
    let start = off + header_len;
    h.transport_end = start as u32;
    let end = end_wire.min(frame.len()).max(start);
    h.payload = &frame[start..end];
    h.payload_wire_len = end_wire.saturating_sub(start) as u32;
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
        assert_eq!(h.ethertype, Some(EtherType::IPV4));
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

    /// Bytes from hex, whitespace ignored, so a frame can be written header by header.
    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|d| u8::from_str_radix(std::str::from_utf8(d).unwrap(), 16).unwrap())
            .collect()
    }

    const VETH_ETHERNET: &str = "4a0725710436 6a4cdfd702f5";

    /// A 3072-byte UDP datagram from 10.209.0.1 to port 2049, fragmented by the Linux
    /// kernel for a 1280-byte MTU and captured on a veth (frames cut after 48 bytes;
    /// tshark: ID 0x99ed, offsets 0, 1256, 2512).
    fn ipv4_fragments() -> [Vec<u8>; 3] {
        let ip = |len_id_frag_ttl_proto_sum: &str, data: &str| {
            hex(&format!(
                "{VETH_ETHERNET} 0800 4500 {len_id_frag_ttl_proto_sum} 0ad10001 0ad10002 {data}"
            ))
        };
        [
            ip(
                "04fc 99ed 2000 4011 a65f",
                "985c 0801 0c08 2edf 000102030405",
            ),
            ip("04fc 99ed 209d 4011 a5c2", "e0e1e2e3e4e5e6e7e8e9eaebeced"),
            ip("024c 99ed 013a 4011 c7d5", "c8c9cacbcccdcecfd0d1d2d3d4d5"),
        ]
    }

    /// A 2560-byte UDP datagram from fd09::1 to port 2049, fragmented the same way
    /// (frames cut after 70 bytes; tshark: ident 0x8d9c89aa, offsets 0, 1232, 2464).
    fn ipv6_fragments() -> [Vec<u8>; 3] {
        let ip = |plen: &str, frag: &str, data: &str| {
            hex(&format!(
                "{VETH_ETHERNET} 86dd 600924f1 {plen} 2c 40 \
                 fd090000000000000000000000000001 fd090000000000000000000000000002 \
                 1100 {frag} 8d9c89aa {data}"
            ))
        };
        [
            ip("04d8", "0001", "820d 0801 0a08 e53b"),
            ip("04d8", "04d1", "c8c9cacbcccdcecf"),
            ip("0070", "09a0", "98999a9b9c9d9e9f"),
        ]
    }

    #[test]
    fn ipv4_fragments_are_reported_for_reassembly() {
        let [first, middle, last] = ipv4_fragments();
        let h = dissect(LINKTYPE_ETHERNET, &first);
        let ip = h.ip.unwrap();
        assert_eq!(
            (ip.fragment, ip.fragment_offset, ip.protocol),
            (true, 0, 17)
        );
        assert_eq!(
            h.transport.ports(),
            Some((39004, 2049)),
            "the first carries UDP"
        );
        assert_eq!(h.payload_wire_len, 1248);
        let f = h.fragment.unwrap();
        assert_eq!(
            (f.ident, f.offset, f.more, f.protocol),
            (0x99ed, 0, true, 17)
        );
        assert_eq!((f.data_offset, f.data_wire_len), (34, 1256));
        for (frame, offset, more, len) in [(&middle, 1256, true, 1256), (&last, 2512, false, 568)] {
            let h = dissect(LINKTYPE_ETHERNET, frame);
            assert_eq!(h.ip.unwrap().fragment_offset, offset);
            assert_eq!((h.transport, h.truncated), (Transport::None, false));
            assert_eq!(h.network_end, 34);
            let f = h.fragment.unwrap();
            assert_eq!((f.ident, f.offset, f.more), (0x99ed, offset, more));
            assert_eq!((f.data_offset, f.data_wire_len), (34, len));
            assert_eq!(frame[f.data_offset as usize..], frame[34..]);
        }
        // Not a fragment: the first with MF cleared.
        let mut whole = first.clone();
        whole[20] = 0x40;
        let h = dissect(LINKTYPE_ETHERNET, &whole);
        assert!(h.fragment.is_none() && !h.ip.unwrap().fragment);
    }

    #[test]
    fn ipv6_fragments_are_reported_for_reassembly() {
        let [first, middle, last] = ipv6_fragments();
        let h = dissect(LINKTYPE_ETHERNET, &first);
        assert_eq!(h.transport.ports(), Some((33293, 2049)));
        assert_eq!((h.network_end, h.transport_end), (62, 70));
        let f = h.fragment.unwrap();
        assert_eq!(
            (f.ident, f.offset, f.more, f.protocol),
            (0x8d9c_89aa, 0, true, 17)
        );
        assert_eq!((f.data_offset, f.data_wire_len), (62, 1232));
        for (frame, offset, more, len) in [(&middle, 1232, true, 1232), (&last, 2464, false, 104)] {
            let h = dissect(LINKTYPE_ETHERNET, frame);
            assert_eq!(
                (h.ip.unwrap().fragment_offset, h.ip.unwrap().protocol),
                (offset, 17)
            );
            assert_eq!((h.transport, h.truncated), (Transport::None, false));
            let f = h.fragment.unwrap();
            assert_eq!((f.ident, f.offset, f.more), (0x8d9c_89aa, offset, more));
            assert_eq!((f.data_offset, f.data_wire_len), (62, len));
        }
    }

    #[test]
    fn every_prefix_of_real_fragments_is_clean() {
        for frame in ipv4_fragments().iter().chain(ipv6_fragments().iter()) {
            let full = dissect(LINKTYPE_ETHERNET, frame);
            for n in 0..=frame.len() {
                let h = dissect(LINKTYPE_ETHERNET, &frame[..n]);
                assert!(h.network_end as usize <= n && h.transport_end as usize <= n);
                match h.fragment {
                    // Once known, the fragment is the same as in the whole frame.
                    Some(f) => assert_eq!(Some(f), full.fragment, "prefix {n}"),
                    None => assert!(n < full.network_end as usize, "prefix {n}"),
                }
                if h.truncated {
                    assert_eq!(h.transport, Transport::None, "prefix {n}");
                }
            }
        }
    }

    #[test]
    fn hop_by_hop_then_icmpv6() {
        // An MLDv2 report captured on a veth: hop-by-hop (router alert), ICMPv6 type 143.
        let f = hex("333300000016 4a0725710436 86dd 60000000 0038 00 01 \
             fe800000000000004807 25fffe710436 ff020000000000000000000000000016 \
             3a00 0502 0000 0100 8f00 f997 0000 0002");
        let h = dissect(LINKTYPE_ETHERNET, &f);
        assert_eq!(
            (h.ip.unwrap().protocol, h.network_end, h.transport_end),
            (58, 62, 70)
        );
        assert_eq!(
            h.transport,
            Transport::Icmp(IcmpHeader {
                icmp_type: 143,
                code: 0
            })
        );
        assert!(h.fragment.is_none());
    }
}
