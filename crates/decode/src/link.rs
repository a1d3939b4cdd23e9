//! Link layers: from a frame of a pcap link type to the ethertype of its network header and
//! where that header starts. Ethernet, Linux cooked (SLL, SLL2) and BSD loopback go through
//! their [`wire`](crate::wire) views; the rarer encapsulations are small functions over
//! bounds-checked reads (`be16` and friends return `None` past the end).

use crate::wire::{
    ethernet, null, sll, EtherType, EthernetFrame, NullHeader, Sll2Header, SllHeader,
};

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

/// What the link layer leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// An ethertype and the offset of the header it names.
    Next(u16, usize),
    /// The link header is cut short.
    Truncated,
    /// Not a link type, or not a protocol, that leads to IP.
    Other,
}

/// The link layer of `frame`: where its network header starts and what it is.
pub(crate) fn link_layer(linktype: u32, frame: &[u8]) -> Link {
    link_layer_at_depth(linktype, frame, 0)
}

fn link_layer_at_depth(linktype: u32, frame: &[u8], depth: u8) -> Link {
    let at = |off: usize| -> Link {
        match be16(frame, off) {
            Some(t) => Link::Next(t, off + 2),
            None => Link::Truncated,
        }
    };
    let ip_by_version = |off: usize| -> Link {
        match frame.get(off).map(|b| b >> 4) {
            Some(4) => Link::Next(EtherType::IPV4, off),
            Some(6) => Link::Next(EtherType::IPV6, off),
            Some(_) => Link::Other,
            None => Link::Truncated,
        }
    };
    match linktype {
        LINKTYPE_ETHERNET => ethernet_at(frame, 0),
        LINKTYPE_RAW | DLT_RAW_12 | DLT_RAW_14 => ip_by_version(0),
        LINKTYPE_IPV4 => Link::Next(EtherType::IPV4, 0),
        LINKTYPE_IPV6 => Link::Next(EtherType::IPV6, 0),
        LINKTYPE_LINUX_SLL => match SllHeader::new_checked(frame) {
            Ok(h) => Link::Next(h.protocol(), sll::SLL_HEADER_LEN),
            Err(_) => Link::Truncated,
        },
        LINKTYPE_LINUX_SLL2 => match Sll2Header::new_checked(frame) {
            Ok(h) => Link::Next(h.protocol(), sll::SLL2_HEADER_LEN),
            Err(_) => Link::Truncated,
        },
        LINKTYPE_NULL | LINKTYPE_LOOP => match NullHeader::new_checked(frame) {
            Ok(h) => match h.ethertype() {
                Some(t) => Link::Next(t, null::HEADER_LEN),
                None => Link::Other,
            },
            Err(_) => Link::Truncated,
        },
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
            Some(2) => Link::Next(EtherType::IPV4, 24),
            Some(26) => Link::Next(EtherType::IPV6, 24),
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
            match link_layer_at_depth(dlt, &frame[len..], depth + 1) {
                Link::Next(t, off) => Link::Next(t, off + len),
                other => other,
            }
        }
        _ => Link::Other,
    }
}

/// An Ethernet II header at `off`.
fn ethernet_at(frame: &[u8], off: usize) -> Link {
    match EthernetFrame::new_checked(frame.get(off..).unwrap_or_default()) {
        Ok(eth) => Link::Next(eth.ethertype(), off + ethernet::HEADER_LEN),
        Err(_) => Link::Truncated,
    }
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
        PPP_IPV4 => Link::Next(EtherType::IPV4, next),
        PPP_IPV6 => Link::Next(EtherType::IPV6, next),
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
        Some(&NLPID_IPV4) => Link::Next(EtherType::IPV4, off + 1),
        Some(&NLPID_IPV6) => Link::Next(EtherType::IPV6, off + 1),
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
    ethernet_at(frame, eth)
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
                2 => Link::Next(EtherType::IPV4, off + 4),
                10 => Link::Next(EtherType::IPV6, off + 4),
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
        Some(&ARC_IP_RFC1051) => Link::Next(EtherType::IPV4, 5),
        Some(&ARC_IP_RFC1201) => match frame.get(5) {
            Some(0xff) if frame.len() >= 12 => Link::Next(EtherType::IPV4, 12),
            Some(0xff) => Link::Truncated,
            Some(_) if frame.len() >= 8 => Link::Next(EtherType::IPV4, 8),
            _ => Link::Truncated,
        },
        Some(_) => Link::Other,
        None => Link::Truncated,
    }
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
