//! ICMP (RFC 792) and ICMPv6 (RFC 4443) share their first 8 bytes' layout: type, code,
//! checksum, and 4 bytes whose meaning depends on the type.

use super::{be16, check_len, Layer, Result};

mod field {
    use crate::wire::Field;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const REST: Field = 4..8;
    pub const BODY: usize = 8;
}

/// The header length [`dissect`](crate::dissect) counts (a quoted packet in an error
/// message is body, not header).
pub const HEADER_LEN: usize = field::BODY;

/// An ICMP or ICMPv6 message. `new_checked` guarantees the first 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::Icmp, buffer.as_ref(), HEADER_LEN)?;
        Ok(IcmpPacket { buffer })
    }

    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Bytes 4..8: identifier and sequence for echo, unused or a pointer/MTU for errors.
    pub fn rest_of_header(&self) -> &[u8] {
        &self.buffer.as_ref()[field::REST]
    }

    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[field::BODY..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Error;

    /// tcpdump-tests/ipv6-routing-header.pcap, frame 1: an ICMPv6 echo request.
    const ECHO: [u8; 8] = [0x80, 0x00, 0xd3, 0xab, 0x00, 0x00, 0x00, 0x00];

    #[test]
    fn deconstruct() {
        let m = IcmpPacket::new_checked(&ECHO[..]).unwrap();
        assert_eq!((m.msg_type(), m.code(), m.checksum()), (128, 0, 0xd3ab));
        assert_eq!(m.rest_of_header(), &[0, 0, 0, 0]);
        assert!(m.body().is_empty());
    }

    #[test]
    fn every_prefix() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                IcmpPacket::new_checked(&ECHO[..n]),
                Err(Error::Truncated {
                    layer: Layer::Icmp,
                    need: 8,
                    have: n
                })
            );
        }
    }
}
