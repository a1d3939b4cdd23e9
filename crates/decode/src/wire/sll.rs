//! Linux "cooked" capture headers, written by libpcap for the `any` device: SLL (link type
//! 113, 16 bytes) and SLL2 (link type 276, 20 bytes). Both name the protocol that follows
//! with an ethertype.

use super::{array, be16, be32, check_len, Layer, Result};

mod field {
    use crate::wire::Field;
    pub const PKTTYPE: Field = 0..2;
    pub const HATYPE: Field = 2..4;
    pub const HALEN: Field = 4..6;
    pub const ADDR: Field = 6..14;
    pub const PROTOCOL: Field = 14..16;
    pub const PAYLOAD: usize = 16;

    pub mod v2 {
        use crate::wire::Field;
        pub const PROTOCOL: Field = 0..2;
        pub const RESERVED: Field = 2..4;
        pub const IFINDEX: Field = 4..8;
        pub const HATYPE: Field = 8..10;
        pub const PKTTYPE: usize = 10;
        pub const HALEN: usize = 11;
        pub const ADDR: Field = 12..20;
        pub const PAYLOAD: usize = 20;
    }
}

pub const SLL_HEADER_LEN: usize = field::PAYLOAD;
pub const SLL2_HEADER_LEN: usize = field::v2::PAYLOAD;

/// An SLL header. `new_checked` guarantees its 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SllHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SllHeader<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::Sll, buffer.as_ref(), SLL_HEADER_LEN)?;
        Ok(SllHeader { buffer })
    }

    /// To us (0), broadcast (1), multicast (2), to another host (3), sent by us (4).
    pub fn packet_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PKTTYPE)
    }

    /// ARPHRD_ type of the device.
    pub fn hardware_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::HATYPE)
    }

    pub fn address_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::HALEN)
    }

    /// The link-layer address field (only the first `address_len` bytes are meaningful).
    pub fn address(&self) -> [u8; 8] {
        array(self.buffer.as_ref(), field::ADDR)
    }

    /// The ethertype of what follows.
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PROTOCOL)
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

/// An SLL2 header. `new_checked` guarantees its 20 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sll2Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Sll2Header<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::Sll2, buffer.as_ref(), SLL2_HEADER_LEN)?;
        Ok(Sll2Header { buffer })
    }

    /// The ethertype of what follows.
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), field::v2::PROTOCOL)
    }

    pub fn reserved(&self) -> u16 {
        be16(self.buffer.as_ref(), field::v2::RESERVED)
    }

    pub fn interface_index(&self) -> u32 {
        be32(self.buffer.as_ref(), field::v2::IFINDEX)
    }

    pub fn hardware_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::v2::HATYPE)
    }

    pub fn packet_type(&self) -> u8 {
        self.buffer.as_ref()[field::v2::PKTTYPE]
    }

    pub fn address_len(&self) -> u8 {
        self.buffer.as_ref()[field::v2::HALEN]
    }

    pub fn address(&self) -> [u8; 8] {
        array(self.buffer.as_ref(), field::v2::ADDR)
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::v2::PAYLOAD..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Error, EtherType, Ipv4Packet};

    /// tcpdump-tests/RADIUS-RFC3162.pcap, frame 1: SLL, to us (0) on loopback
    /// (ARPHRD_LOOPBACK 772), then the start of an IPv4 header.
    const SLL: [u8; 20] = [
        0x00, 0x00, 0x03, 0x04, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08,
        0x00, 0x45, 0x00, 0x00, 0xa9,
    ];

    /// Captured here with `tcpdump -i any` (libpcap 1.10, SLL2): a UDP datagram with the
    /// 7 bytes "tapdeck" to 127.0.0.1:40999, received on lo (ifindex 1).
    const SLL2: [u8; 55] = [
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x04, 0x00, 0x06, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x23, 0xba, 0x12, 0x40, 0x00, 0x40, 0x11,
        0x82, 0xb5, 0x7f, 0x00, 0x00, 0x01, 0x7f, 0x00, 0x00, 0x01, 0xb5, 0x71, 0xa0, 0x27, 0x00,
        0x0f, 0xfe, 0x22, 0x74, 0x61, 0x70, 0x64, 0x65, 0x63, 0x6b,
    ];

    #[test]
    fn sll() {
        let mut b = SLL;
        // The corpus file says packet type 0; make it "outgoing" to see the field move.
        b[1] = 4;
        let h = SllHeader::new_checked(&b[..]).unwrap();
        assert_eq!(
            (h.packet_type(), h.hardware_type(), h.address_len()),
            (4, 772, 6)
        );
        assert_eq!(h.address(), [0; 8]);
        assert_eq!(h.protocol(), EtherType::IPV4);
        assert_eq!(h.payload(), &[0x45, 0x00, 0x00, 0xa9]);
        for n in 0..SLL_HEADER_LEN {
            assert_eq!(
                SllHeader::new_checked(&SLL[..n]),
                Err(Error::Truncated {
                    layer: Layer::Sll,
                    need: 16,
                    have: n
                })
            );
        }
    }

    #[test]
    fn sll2() {
        let h = Sll2Header::new_checked(&SLL2[..]).unwrap();
        assert_eq!(
            (h.protocol(), h.reserved(), h.interface_index()),
            (EtherType::IPV4, 0, 1)
        );
        assert_eq!(
            (h.hardware_type(), h.packet_type(), h.address_len()),
            (772, 0, 6)
        );
        assert_eq!(h.address(), [0; 8]);
        let ip = Ipv4Packet::new_checked(h.payload()).unwrap();
        assert_eq!((ip.src_addr(), ip.protocol()), ([127, 0, 0, 1], 17));
        assert_eq!(&ip.payload().unwrap()[8..], b"tapdeck");
        for n in 0..SLL2_HEADER_LEN {
            assert_eq!(
                Sll2Header::new_checked(&SLL2[..n]),
                Err(Error::Truncated {
                    layer: Layer::Sll2,
                    need: 20,
                    have: n
                })
            );
        }
    }
}
