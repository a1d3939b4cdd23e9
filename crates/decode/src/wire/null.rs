//! BSD loopback (link types NULL, 0, and LOOP, 108): a 4-byte address family in front of
//! the packet, written in the capturing host's byte order (LOOP nominally big-endian, but
//! both orders are seen in the wild).

use super::{check_len, EtherType, Layer, Result};

mod field {
    use crate::wire::Field;
    pub const FAMILY: Field = 0..4;
    pub const PAYLOAD: usize = 4;
}

pub const HEADER_LEN: usize = field::PAYLOAD;

/// AF_INET everywhere.
pub const AF_INET: u32 = 2;
/// AF_INET6 on NetBSD/OpenBSD/BSD/OS (24), FreeBSD (28), Darwin (30), Linux (10), Windows (23).
pub const AF_INET6: [u32; 5] = [24, 28, 30, 10, 23];

/// A loopback header. `new_checked` guarantees its 4 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NullHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NullHeader<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::Null, buffer.as_ref(), HEADER_LEN)?;
        Ok(NullHeader { buffer })
    }

    /// The address family in whichever byte order makes it fit in 16 bits (every real family
    /// does, so the writer's order need not be known; bytes that fit in neither order are
    /// returned little-endian and name no family).
    pub fn family(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::FAMILY];
        let fam = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if fam > 0xffff {
            fam.swap_bytes()
        } else {
            fam
        }
    }

    /// The ethertype equivalent of the family, for IPv4 and IPv6.
    pub fn ethertype(&self) -> Option<u16> {
        match self.family() {
            AF_INET => Some(EtherType::IPV4),
            f if AF_INET6.contains(&f) => Some(EtherType::IPV6),
            _ => None,
        }
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Error;

    /// tcpdump-tests/dns-badcookie.pcap, frame 1: AF_INET in little-endian order, then
    /// the start of an IPv4 header.
    const LOOPBACK: [u8; 8] = [0x02, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x44];

    #[test]
    fn both_byte_orders() {
        let h = NullHeader::new_checked(&LOOPBACK[..]).unwrap();
        assert_eq!(
            (h.family(), h.ethertype()),
            (AF_INET, Some(EtherType::IPV4))
        );
        assert_eq!(h.payload(), &[0x45, 0x00, 0x00, 0x44]);
        for (fam, t) in [([0, 0, 0, 30], Some(EtherType::IPV6)), ([0, 0, 0, 7], None)] {
            let h = NullHeader::new_checked(fam).unwrap();
            assert_eq!(h.ethertype(), t);
        }
        assert_eq!(
            NullHeader::new_checked([10, 0, 0, 0]).unwrap().ethertype(),
            Some(EtherType::IPV6)
        );
    }

    #[test]
    fn every_prefix() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                NullHeader::new_checked(&LOOPBACK[..n]),
                Err(Error::Truncated {
                    layer: Layer::Null,
                    need: 4,
                    have: n
                })
            );
        }
    }
}
