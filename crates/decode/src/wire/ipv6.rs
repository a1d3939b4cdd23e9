//! IPv6 fixed header (RFC 8200 §3) and the extension headers [`dissect`](crate::dissect)
//! walks to reach the upper layer (§4): hop-by-hop options (0), routing (43), fragment (44),
//! destination options (60), and the authentication header (51, RFC 4302).
//!
//! ```text
//! |Version| Traffic Class |           Flow Label                  |
//! |         Payload Length        |  Next Header  |   Hop Limit   |
//! |                         Source Address (16)                   |
//! |                      Destination Address (16)                 |
//! ```
//!
//! The fragment header keeps what reassembly needs: the identification, the offset of the
//! fragment's data, more-fragments, and the protocol of the reassembled payload.
//! [`ExtensionChain`] records where the fragment header ended, which is where the
//! fragmentable part (the data to be reassembled) begins.

use super::{array, be16, be32, check_len, Error, Layer, Result};

mod field {
    use crate::wire::Field;
    /// Version (4 bits), traffic class (8), flow label (20).
    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
    pub const PAYLOAD: usize = 40;

    /// Extension headers other than the fragment header.
    pub mod ext {
        pub const NXT_HDR: usize = 0;
        /// In 8-byte units beyond the first 8 (in 4-byte units beyond the first 8 for AH).
        pub const LENGTH: usize = 1;
        pub const MIN_LEN: usize = 2;
    }

    /// The fragment header (RFC 8200 §4.5).
    pub mod frag {
        use crate::wire::Field;
        pub const NXT_HDR: usize = 0;
        /// Fragment offset (13 bits, 8-byte units), 2 reserved bits, M.
        pub const FR_OF_M: Field = 2..4;
        pub const IDENT: Field = 4..8;
        pub const LEN: usize = 8;
    }
}

/// Length of the fixed header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// Next-header values of the extension headers walked.
pub const HOP_BY_HOP: u8 = 0;
pub const ROUTING: u8 = 43;
pub const FRAGMENT: u8 = 44;
pub const AUTHENTICATION: u8 = 51;
pub const DESTINATION_OPTIONS: u8 = 60;

/// True for the next-header values [`ExtensionChain::walk`] steps over.
pub fn is_extension_header(next_header: u8) -> bool {
    matches!(
        next_header,
        HOP_BY_HOP | ROUTING | FRAGMENT | AUTHENTICATION | DESTINATION_OPTIONS
    )
}

/// Headers walked at most: more is not a real packet, and the bound keeps the walk finite.
pub const MAX_EXTENSION_HEADERS: usize = 16;

/// The fixed IPv6 header and what follows it. `new_checked` guarantees the 40 bytes and
/// version 6, so every accessor is infallible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// A view over `buffer`: the fixed header must be captured and say version 6.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        check_len(Layer::Ipv6, b, HEADER_LEN)?;
        let version = b[0] >> 4;
        if version != 6 {
            return Err(Error::Malformed {
                layer: Layer::Ipv6,
                field: "version",
                value: u32::from(version),
            });
        }
        Ok(Ipv6Packet { buffer })
    }

    fn ver_tc_flow(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }

    pub fn version(&self) -> u8 {
        (self.ver_tc_flow() >> 28) as u8
    }

    pub fn traffic_class(&self) -> u8 {
        (self.ver_tc_flow() >> 20) as u8
    }

    pub fn flow_label(&self) -> u32 {
        self.ver_tc_flow() & 0x000f_ffff
    }

    /// Bytes after the fixed header (extension headers included) as stated. 0 for a
    /// jumbogram (RFC 2675) or a segmentation-offload capture.
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The first extension header's type, or the upper-layer protocol.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    pub fn src_addr(&self) -> [u8; 16] {
        array(self.buffer.as_ref(), field::SRC_ADDR)
    }

    pub fn dst_addr(&self) -> [u8; 16] {
        array(self.buffer.as_ref(), field::DST_ADDR)
    }

    /// Everything after the fixed header, up to the payload length (to the end of the
    /// buffer when that is 0), clipped to the captured bytes.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = match usize::from(self.payload_len()) {
            0 => b.len(),
            n => (HEADER_LEN + n).min(b.len()),
        };
        &b[HEADER_LEN..end]
    }
}

/// A hop-by-hop, routing, destination options or authentication header: a next header, a
/// length, then data this crate does not interpret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
    kind: u8,
}

impl<T: AsRef<[u8]>> Ipv6ExtHeader<T> {
    /// A view over `buffer` as an extension header of type `kind` (the previous header's
    /// next header, which decides how the length counts). The whole header must be captured.
    pub fn new_checked(kind: u8, buffer: T) -> Result<Self> {
        if !is_extension_header(kind) || kind == FRAGMENT {
            return Err(Error::Malformed {
                layer: Layer::Ipv6Extension,
                field: "next header",
                value: u32::from(kind),
            });
        }
        let b = buffer.as_ref();
        check_len(Layer::Ipv6Extension, b, field::ext::MIN_LEN)?;
        let view = Ipv6ExtHeader { buffer, kind };
        check_len(
            Layer::Ipv6Extension,
            view.buffer.as_ref(),
            view.header_len(),
        )?;
        Ok(view)
    }

    /// The header's own type (what the previous header called it).
    pub fn kind(&self) -> u8 {
        self.kind
    }

    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::ext::NXT_HDR]
    }

    /// Length in bytes: (n + 1) × 8, or (n + 2) × 4 for the authentication header.
    pub fn header_len(&self) -> usize {
        let n = usize::from(self.buffer.as_ref()[field::ext::LENGTH]);
        if self.kind == AUTHENTICATION {
            (n + 2) * 4
        } else {
            (n + 1) * 8
        }
    }

    /// The options, routing data or authentication data after the first two bytes.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::ext::MIN_LEN..self.header_len()]
    }
}

/// The fragment header: 8 bytes, always complete when the view exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6FragmentHeader<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::Ipv6Fragment, buffer.as_ref(), field::frag::LEN)?;
        Ok(Ipv6FragmentHeader { buffer })
    }

    /// The protocol of the fragmentable part: of the reassembled payload.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::frag::NXT_HDR]
    }

    /// Where this fragment's data sits in the fragmentable part, in bytes.
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), field::frag::FR_OF_M) & 0xfff8
    }

    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::frag::FR_OF_M) & 1 != 0
    }

    pub fn ident(&self) -> u32 {
        be32(self.buffer.as_ref(), field::frag::IDENT)
    }

    pub fn header_len(&self) -> usize {
        field::frag::LEN
    }
}

/// Offset and more-fragments of a fragment header cut short after them (4 to 7 bytes
/// captured): enough to say the packet is a fragment, not enough to reassemble it.
fn cut_fragment_offset_and_more(buffer: &[u8]) -> Option<(u16, bool)> {
    let b = buffer.get(field::frag::FR_OF_M)?;
    let v = u16::from_be_bytes([b[0], b[1]]);
    Some((v & 0xfff8, v & 1 != 0))
}

/// A complete fragment header found in a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainFragment {
    pub ident: u32,
    /// Offset of this fragment's data in the fragmentable part, in bytes.
    pub offset: u16,
    pub more: bool,
    /// The fragment header's next header: the first header of the fragmentable part.
    pub next_header: u8,
    /// Offset just past the fragment header, from the start of the chain: where this
    /// fragment's data begins.
    pub data_offset: usize,
}

/// The extension headers between a fixed IPv6 header and the upper layer, walked without
/// allocating: which protocol comes next, how long the chain is, and the fragment header.
/// A walk cut short (by the captured bytes, or by [`MAX_EXTENSION_HEADERS`]) keeps what it
/// found before the cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtensionChain {
    /// The upper-layer protocol when `end` is `Ok`; else the type of the header that could
    /// not be walked.
    pub next_header: u8,
    /// Bytes of extension headers walked: the upper layer starts this far into the chain.
    pub len: usize,
    /// Offset and more-fragments of the last fragment header whose offset field was
    /// captured, even if the rest of it was not (`(0, false)` without one).
    pub frag_offset: u16,
    pub more_frags: bool,
    /// The last complete fragment header walked.
    pub fragment: Option<ChainFragment>,
    /// `Ok` when the walk reached a header that is not an extension header.
    pub end: Result<()>,
}

impl ExtensionChain {
    /// Walks the chain that `buffer` (the bytes after the fixed header) starts with, the
    /// first header being of type `next_header`.
    pub fn walk(next_header: u8, buffer: &[u8]) -> ExtensionChain {
        let mut chain = ExtensionChain {
            next_header,
            len: 0,
            frag_offset: 0,
            more_frags: false,
            fragment: None,
            end: Ok(()),
        };
        for _ in 0..MAX_EXTENSION_HEADERS {
            // In bounds: `len` only grows by headers their view found captured.
            let rest = &buffer[chain.len..];
            let step = match chain.next_header {
                FRAGMENT => Ipv6FragmentHeader::new_checked(rest).map(|f| {
                    chain.frag_offset = f.frag_offset();
                    chain.more_frags = f.more_frags();
                    chain.fragment = Some(ChainFragment {
                        ident: f.ident(),
                        offset: f.frag_offset(),
                        more: f.more_frags(),
                        next_header: f.next_header(),
                        data_offset: chain.len + f.header_len(),
                    });
                    (f.next_header(), f.header_len())
                }),
                kind if is_extension_header(kind) => Ipv6ExtHeader::new_checked(kind, rest)
                    .map(|h| (h.next_header(), h.header_len())),
                _ => return chain,
            };
            match step {
                Ok((next, len)) => {
                    chain.next_header = next;
                    chain.len += len;
                }
                Err(e) => {
                    // A cut fragment header whose offset was captured still marks the packet
                    // a fragment (the packets table's ip_fragment has always said so).
                    if chain.next_header == FRAGMENT {
                        if let Some((offset, more)) = cut_fragment_offset_and_more(rest) {
                            chain.frag_offset = offset;
                            chain.more_frags = more;
                        }
                    }
                    chain.end = Err(e);
                    return chain;
                }
            }
        }
        chain.end = Err(Error::TooManyHeaders {
            layer: Layer::Ipv6Extension,
            limit: MAX_EXTENSION_HEADERS,
        });
        chain
    }

    /// A fragment of a larger datagram: the last fragment header has more-fragments set
    /// or a non-zero offset (an "atomic fragment", offset 0 without M, is not one).
    pub fn is_fragment(&self) -> bool {
        self.more_frags || self.frag_offset != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tcpdump-tests/ipv6-routing-header.pcap, frame 1 after the Ethernet header: an
    /// ICMPv6 echo request behind a type 0 routing header (24 bytes, one segment left).
    const ECHO_BEHIND_ROUTING: [u8; 72] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x2b, 0x04, 0x22, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
        0x44, 0x02, 0x12, 0x3f, 0xff, 0xfe, 0xae, 0x22, 0xf7, 0x22, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x02, 0x40, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x3a, 0x02, 0x00, 0x01, 0x00,
        0x00, 0x00, 0x00, 0x22, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x10, 0x00, 0x02, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x04, 0x80, 0x00, 0xd3, 0xab, 0x00, 0x00, 0x00, 0x00,
    ];

    /// An MLDv2 report captured here on a veth (after the Ethernet header, cut after 56
    /// bytes): hop-by-hop options (router alert, PadN), then ICMPv6 type 143.
    const MLD_REPORT: [u8; 56] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x38, 0x00, 0x01, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x48, 0x07, 0x25, 0xff, 0xfe, 0x71, 0x04, 0x36, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x16, 0x3a, 0x00, 0x05, 0x02, 0x00,
        0x00, 0x01, 0x00, 0x8f, 0x00, 0xf9, 0x97, 0x00, 0x00, 0x00, 0x02,
    ];

    /// A 2560-byte UDP datagram from fd09::1 to port 2049, fragmented by the Linux kernel
    /// for a 1280-byte MTU and captured on the veth (after the Ethernet header, cut after
    /// the fragment header and 8 bytes): the first, second and last of three fragments.
    const FRAGMENTS: [[u8; 56]; 3] = [
        [
            0x60, 0x09, 0x24, 0xf1, 0x04, 0xd8, 0x2c, 0x40, 0xfd, 0x09, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfd, 0x09, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x11, 0x00,
            0x00, 0x01, 0x8d, 0x9c, 0x89, 0xaa, 0x82, 0x0d, 0x08, 0x01, 0x0a, 0x08, 0xe5, 0x3b,
        ],
        [
            0x60, 0x09, 0x24, 0xf1, 0x04, 0xd8, 0x2c, 0x40, 0xfd, 0x09, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfd, 0x09, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x11, 0x00,
            0x04, 0xd1, 0x8d, 0x9c, 0x89, 0xaa, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf,
        ],
        [
            0x60, 0x09, 0x24, 0xf1, 0x00, 0x70, 0x2c, 0x40, 0xfd, 0x09, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfd, 0x09, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x11, 0x00,
            0x09, 0xa0, 0x8d, 0x9c, 0x89, 0xaa, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f,
        ],
    ];

    fn chain_of(packet: &[u8]) -> ExtensionChain {
        let ip = Ipv6Packet::new_checked(packet).unwrap();
        ExtensionChain::walk(ip.next_header(), &packet[HEADER_LEN..])
    }

    #[test]
    fn fixed_header() {
        let ip = Ipv6Packet::new_checked(&FRAGMENTS[0][..]).unwrap();
        assert_eq!(
            (ip.version(), ip.traffic_class(), ip.flow_label()),
            (6, 0, 0x924f1)
        );
        assert_eq!(
            (ip.payload_len(), ip.next_header(), ip.hop_limit()),
            (1240, FRAGMENT, 64)
        );
        let mut src = [0u8; 16];
        src[..2].copy_from_slice(&[0xfd, 0x09]);
        src[15] = 1;
        assert_eq!(ip.src_addr(), src);
        src[15] = 2;
        assert_eq!(ip.dst_addr(), src);
        assert_eq!(ip.payload().len(), 16, "clipped to the captured bytes");
    }

    #[test]
    fn routing_header() {
        let ip = Ipv6Packet::new_checked(&ECHO_BEHIND_ROUTING[..]).unwrap();
        let rh = Ipv6ExtHeader::new_checked(ip.next_header(), ip.payload()).unwrap();
        assert_eq!(
            (rh.kind(), rh.next_header(), rh.header_len()),
            (ROUTING, 58, 24)
        );
        assert_eq!(rh.data()[..2], [0x00, 0x01], "type 0, one segment left");
        let chain = chain_of(&ECHO_BEHIND_ROUTING);
        assert_eq!((chain.next_header, chain.len, chain.end), (58, 24, Ok(())));
        assert!(chain.fragment.is_none() && !chain.is_fragment());
    }

    #[test]
    fn hop_by_hop_header() {
        let chain = chain_of(&MLD_REPORT);
        assert_eq!((chain.next_header, chain.len, chain.end), (58, 8, Ok(())));
        let hbh = Ipv6ExtHeader::new_checked(HOP_BY_HOP, &MLD_REPORT[40..]).unwrap();
        assert_eq!(
            hbh.data(),
            &[0x05, 0x02, 0x00, 0x00, 0x01, 0x00],
            "router alert, PadN"
        );
    }

    #[test]
    fn fragment_headers() {
        let expect = [(0, true), (1232, true), (2464, false)];
        for (packet, (offset, more)) in FRAGMENTS.iter().zip(expect) {
            let f = Ipv6FragmentHeader::new_checked(&packet[40..]).unwrap();
            assert_eq!((f.next_header(), f.ident()), (17, 0x8d9c_89aa));
            assert_eq!((f.frag_offset(), f.more_frags()), (offset, more));
            let chain = chain_of(packet);
            assert_eq!((chain.next_header, chain.len, chain.end), (17, 8, Ok(())));
            assert!(chain.is_fragment());
            assert_eq!(
                chain.fragment,
                Some(ChainFragment {
                    ident: 0x8d9c_89aa,
                    offset,
                    more,
                    next_header: 17,
                    data_offset: 8
                })
            );
        }
    }

    #[test]
    fn chains_of_several_headers() {
        // Hop-by-hop, destination options (16 bytes), authentication (len 4: 24 bytes),
        // then TCP.
        let mut chain = vec![60, 0, 5, 2, 0, 0, 1, 0];
        chain.extend([51, 1, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        chain.extend([6, 4, 0, 0, 0, 0, 0, 1]);
        chain.extend([0; 16]);
        let c = ExtensionChain::walk(HOP_BY_HOP, &chain);
        assert_eq!((c.next_header, c.len, c.end), (6, 48, Ok(())));
        // Every prefix stops at a cut header, keeping what came before.
        for n in 0..chain.len() {
            let c = ExtensionChain::walk(HOP_BY_HOP, &chain[..n]);
            assert!(matches!(c.end, Err(Error::Truncated { .. })), "prefix {n}");
            let walked = [0, 8, 24, 48]
                .into_iter()
                .filter(|&l| l <= n)
                .max()
                .unwrap();
            assert_eq!(c.len, walked, "prefix {n}");
        }
        // An endless chain of destination options stops at the bound.
        let endless = [60, 0, 0, 0, 0, 0, 0, 0].repeat(20);
        let c = ExtensionChain::walk(DESTINATION_OPTIONS, &endless);
        assert_eq!(
            c.end,
            Err(Error::TooManyHeaders {
                layer: Layer::Ipv6Extension,
                limit: 16
            })
        );
        assert_eq!(c.len, 16 * 8);
    }

    #[test]
    fn cut_fragment_header_still_says_fragment() {
        let packet = &FRAGMENTS[1];
        for n in 40..48 {
            let c = chain_of(&packet[..n]);
            assert_eq!(
                c.end,
                Err(Error::Truncated {
                    layer: Layer::Ipv6Fragment,
                    need: 8,
                    have: n - 40
                })
            );
            assert!(c.fragment.is_none());
            assert_eq!(c.is_fragment(), n >= 44, "offset field captured at {n}");
        }
    }

    #[test]
    fn every_prefix_and_version() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Ipv6Packet::new_checked(&ECHO_BEHIND_ROUTING[..n]),
                Err(Error::Truncated {
                    layer: Layer::Ipv6,
                    need: 40,
                    have: n
                })
            );
        }
        let mut b = ECHO_BEHIND_ROUTING;
        b[0] = 0x40;
        assert_eq!(
            Ipv6Packet::new_checked(&b[..]),
            Err(Error::Malformed {
                layer: Layer::Ipv6,
                field: "version",
                value: 4
            })
        );
        assert!(Ipv6ExtHeader::new_checked(FRAGMENT, &b[40..]).is_err());
        assert!(Ipv6ExtHeader::new_checked(6, &b[40..]).is_err());
    }
}
