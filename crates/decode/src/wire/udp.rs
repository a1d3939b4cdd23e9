//! UDP header (RFC 768).

use super::{be16, check_len, Layer, Result};

mod field {
    use crate::wire::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    /// Header and data.
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
    pub const PAYLOAD: usize = 8;
}

pub const HEADER_LEN: usize = field::PAYLOAD;

/// A UDP datagram. `new_checked` guarantees the 8-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::Udp, buffer.as_ref(), HEADER_LEN)?;
        Ok(UdpPacket { buffer })
    }

    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }

    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// The length field (header + data) as on the wire; 0 for jumbograms (RFC 2675).
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    /// True when the length field says there is no data.
    pub fn is_empty(&self) -> bool {
        self.len() <= HEADER_LEN as u16
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The captured data, up to the length field when it is at least the header's length.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = match usize::from(self.len()) {
            n if n >= HEADER_LEN => n.min(b.len()),
            _ => b.len(),
        };
        &b[HEADER_LEN..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Error;

    /// tcpdump-tests/dns_udp.pcap, frame 1: a DNS query from port 43966 to 53, then the
    /// first 4 bytes of the DNS header.
    const DATAGRAM: [u8; 12] = [
        0xab, 0xbe, 0x00, 0x35, 0x00, 0x40, 0x78, 0x24, 0x59, 0x34, 0x01, 0x20,
    ];

    #[test]
    fn deconstruct() {
        let u = UdpPacket::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.len()), (43966, 53, 64));
        assert_eq!(u.checksum(), 0x7824);
        assert!(!u.is_empty());
        assert_eq!(u.payload(), &[0x59, 0x34, 0x01, 0x20]);
    }

    #[test]
    fn length_field_bounds_the_payload() {
        let mut b = DATAGRAM;
        b[4..6].copy_from_slice(&10u16.to_be_bytes());
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap().payload(),
            &[0x59, 0x34]
        );
        b[4..6].copy_from_slice(&0u16.to_be_bytes());
        assert_eq!(UdpPacket::new_checked(&b[..]).unwrap().payload().len(), 4);
    }

    #[test]
    fn every_prefix() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                UdpPacket::new_checked(&DATAGRAM[..n]),
                Err(Error::Truncated {
                    layer: Layer::Udp,
                    need: 8,
                    have: n
                })
            );
        }
    }
}
