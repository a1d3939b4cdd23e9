//! IPv4 header (RFC 791 §3.1), with the fields fragment reassembly needs (identification,
//! more-fragments, fragment offset) exposed as they are on the wire.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! |Version|  IHL  |Type of Service|          Total Length         |
//! |         Identification        |Flags|      Fragment Offset    |
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! |                       Source Address                          |
//! |                    Destination Address                        |
//! |                    Options                    |    Padding    |
//! ```

use super::{array, be16, check_len, Error, Layer, Result};

mod field {
    use crate::wire::Field;
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    /// Flags (reserved, DF, MF) and the fragment offset in 8-byte units.
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
    pub const OPTIONS: usize = 20;
}

/// Length of the header without options.
pub const MIN_HEADER_LEN: usize = field::OPTIONS;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// An IPv4 packet. `new_checked` guarantees the fixed 20-byte header and version 4, so
/// every field accessor is infallible; [`check_header_len`](Self::check_header_len) checks
/// the IHL before [`options`](Self::options) and [`payload`](Self::payload) use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// A view over `buffer`: the fixed header must be captured and say version 4.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        check_len(Layer::Ipv4, b, MIN_HEADER_LEN)?;
        let version = b[field::VER_IHL] >> 4;
        if version != 4 {
            return Err(Error::Malformed {
                layer: Layer::Ipv4,
                field: "version",
                value: u32::from(version),
            });
        }
        Ok(Ipv4Packet { buffer })
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4) as the packet states it; see
    /// [`check_header_len`](Self::check_header_len).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// Total length (header and data) as stated. 0 in captures of segmentation offload.
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification: with source, destination and protocol, names the datagram a
    /// fragment belongs to.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }

    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_DF != 0
    }

    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_MF != 0
    }

    /// Where this fragment's data sits in the datagram's data, in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK) * 8
    }

    /// A fragment of a larger datagram: more-fragments set or a non-zero offset.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    pub fn src_addr(&self) -> [u8; 4] {
        array(self.buffer.as_ref(), field::SRC_ADDR)
    }

    pub fn dst_addr(&self) -> [u8; 4] {
        array(self.buffer.as_ref(), field::DST_ADDR)
    }

    /// The header length, once checked: at least 20 (else `Malformed`) and captured
    /// (else `Truncated`).
    pub fn check_header_len(&self) -> Result<usize> {
        let hl = self.header_len();
        if hl < MIN_HEADER_LEN {
            return Err(Error::Malformed {
                layer: Layer::Ipv4,
                field: "header length",
                value: hl as u32,
            });
        }
        check_len(Layer::Ipv4, self.buffer.as_ref(), hl)?;
        Ok(hl)
    }

    /// The options (and padding) between the fixed header and the data.
    pub fn options(&self) -> Result<&[u8]> {
        let hl = self.check_header_len()?;
        Ok(&self.buffer.as_ref()[field::OPTIONS..hl])
    }

    /// The data after the header: up to the total length (to the end of the buffer when
    /// that is 0, as offload captures write it), clipped to the captured bytes, so link
    /// padding is never data. A total length under the header length is `Malformed`.
    pub fn payload(&self) -> Result<&[u8]> {
        let hl = self.check_header_len()?;
        let b = self.buffer.as_ref();
        let end = match usize::from(self.total_len()) {
            0 => b.len(),
            total if total < hl => {
                return Err(Error::Malformed {
                    layer: Layer::Ipv4,
                    field: "total length",
                    value: total as u32,
                })
            }
            total => total.min(b.len()),
        };
        Ok(&b[hl..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tcpdump-tests/nfs-write-verf-cookie.pcapng, frame 1: an NFSv3 WRITE call from
    /// 10.207.74.149, DF set, TCP; the first 4 bytes of the TCP header follow.
    const DF_TCP: [u8; 24] = [
        0x45, 0x00, 0x00, 0xc8, 0xdf, 0x37, 0x40, 0x00, 0x40, 0x06, 0x5b, 0xbd, 0x0a, 0xcf, 0x4a,
        0x95, 0x0a, 0x62, 0x9f, 0x75, 0x03, 0xe1, 0x08, 0x01,
    ];

    #[test]
    fn deconstruct() {
        let p = Ipv4Packet::new_checked(&DF_TCP[..]).unwrap();
        assert_eq!((p.version(), p.header_len(), p.tos()), (4, 20, 0));
        assert_eq!(
            (p.total_len(), p.ident(), p.ttl(), p.protocol()),
            (200, 0xdf37, 64, 6)
        );
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!((p.frag_offset(), p.checksum()), (0, 0x5bbd));
        assert_eq!(p.src_addr(), [10, 207, 74, 149]);
        assert_eq!(p.dst_addr(), [10, 98, 159, 117]);
        assert_eq!(p.options(), Ok(&[][..]));
        // The capture holds 4 of the 180 data bytes.
        assert_eq!(p.payload(), Ok(&[0x03, 0xe1, 0x08, 0x01][..]));
    }

    #[test]
    fn fragment_fields() {
        // The same header, made a middle fragment: MF set, offset 185 × 8 bytes.
        let mut b = DF_TCP;
        b[6..8].copy_from_slice(&(0x2000u16 | 185).to_be_bytes());
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.more_frags() && !p.dont_frag() && p.is_fragment());
        assert_eq!((p.ident(), p.frag_offset()), (0xdf37, 1480));
        // The last fragment: MF clear, offset non-zero.
        b[6..8].copy_from_slice(&370u16.to_be_bytes());
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(!p.more_frags() && p.is_fragment());
        assert_eq!(p.frag_offset(), 2960);
    }

    #[test]
    fn options_and_padding_bound_the_payload() {
        // IHL 6: a 4-byte option (NOP, NOP, NOP, EOL); total length 28 of 30 captured.
        let mut b = vec![
            0x46, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        b.extend([1, 1, 1, 0]);
        b.extend([0xaa, 0xbb, 0xcc, 0xdd, 0, 0]);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.options(), Ok(&[1, 1, 1, 0][..]));
        assert_eq!(p.payload(), Ok(&[0xaa, 0xbb, 0xcc, 0xdd][..]));
        // Total length 0 (segmentation offload): to the end of the buffer.
        b[2..4].copy_from_slice(&[0, 0]);
        assert_eq!(
            Ipv4Packet::new_checked(&b[..])
                .unwrap()
                .payload()
                .unwrap()
                .len(),
            6
        );
        // Total length under the header length.
        b[2..4].copy_from_slice(&[0, 23]);
        assert!(matches!(
            Ipv4Packet::new_checked(&b[..]).unwrap().payload(),
            Err(Error::Malformed {
                field: "total length",
                value: 23,
                ..
            })
        ));
    }

    #[test]
    fn every_prefix_and_bad_header_lengths() {
        let mut b = DF_TCP.to_vec();
        b[0] = 0x46;
        b.truncate(24);
        for n in 0..MIN_HEADER_LEN {
            assert_eq!(
                Ipv4Packet::new_checked(&b[..n]),
                Err(Error::Truncated {
                    layer: Layer::Ipv4,
                    need: 20,
                    have: n
                })
            );
        }
        for n in MIN_HEADER_LEN..24 {
            let p = Ipv4Packet::new_checked(&b[..n]).unwrap();
            assert_eq!(p.src_addr(), [10, 207, 74, 149], "fixed fields at {n}");
            assert_eq!(
                p.options(),
                Err(Error::Truncated {
                    layer: Layer::Ipv4,
                    need: 24,
                    have: n
                })
            );
        }
        assert_eq!(
            Ipv4Packet::new_checked(&b[..])
                .unwrap()
                .options()
                .unwrap()
                .len(),
            4
        );
        b[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap().check_header_len(),
            Err(Error::Malformed {
                layer: Layer::Ipv4,
                field: "header length",
                value: 16
            })
        );
        b[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]),
            Err(Error::Malformed {
                layer: Layer::Ipv4,
                field: "version",
                value: 6
            })
        );
    }
}
