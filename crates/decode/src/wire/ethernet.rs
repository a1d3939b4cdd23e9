//! Ethernet II frame (IEEE 802.3 with an ethertype): two addresses and the type of what follows.

use super::{array, be16, check_len, Layer, Result};

/// The ethertypes [`dissect`](crate::dissect) acts on.
pub struct EtherType;

impl EtherType {
    pub const IPV4: u16 = 0x0800;
    pub const IPV6: u16 = 0x86dd;
    /// IEEE 802.1Q customer tag.
    pub const VLAN: u16 = 0x8100;
    /// IEEE 802.1ad service tag (QinQ outer tag).
    pub const QINQ: u16 = 0x88a8;
    /// The pre-standard QinQ outer tag some switches still send.
    pub const QINQ_OLD: u16 = 0x9100;

    /// True for the three tag types a VLAN header ([`VlanTag`](super::VlanTag)) follows.
    pub fn is_vlan(t: u16) -> bool {
        matches!(t, Self::VLAN | Self::QINQ | Self::QINQ_OLD)
    }
}

mod field {
    use crate::wire::Field;
    pub const DESTINATION: Field = 0..6;
    pub const SOURCE: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const PAYLOAD: usize = 14;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// An Ethernet II frame (without FCS: captures rarely keep it, and we never read it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// A view over `buffer`, which must hold the 14-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::Ethernet, buffer.as_ref(), HEADER_LEN)?;
        Ok(EthernetFrame { buffer })
    }

    pub fn dst_addr(&self) -> [u8; 6] {
        array(self.buffer.as_ref(), field::DESTINATION)
    }

    pub fn src_addr(&self) -> [u8; 6] {
        array(self.buffer.as_ref(), field::SOURCE)
    }

    /// What follows: an [`EtherType`] (values under 0x0600 are 802.3 lengths).
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE)
    }

    pub fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Everything after the header (padding and any FCS included).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Error;

    /// tcpdump-tests/nfs-write-verf-cookie.pcapng, frame 1: the Ethernet header and the
    /// first bytes of the IPv4 header of an NFSv3 WRITE call.
    const FRAME: [u8; 18] = [
        0x00, 0x1c, 0x73, 0x00, 0x00, 0x9a, 0x00, 0x50, 0x56, 0x3e, 0x2b, 0xcc, 0x08, 0x00, 0x45,
        0x00, 0x00, 0xc8,
    ];

    #[test]
    fn deconstruct() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst_addr(), [0x00, 0x1c, 0x73, 0x00, 0x00, 0x9a]);
        assert_eq!(f.src_addr(), [0x00, 0x50, 0x56, 0x3e, 0x2b, 0xcc]);
        assert_eq!(f.ethertype(), EtherType::IPV4);
        assert_eq!(f.payload(), &[0x45, 0x00, 0x00, 0xc8]);
    }

    #[test]
    fn every_prefix() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                EthernetFrame::new_checked(&FRAME[..n]),
                Err(Error::Truncated {
                    layer: Layer::Ethernet,
                    need: 14,
                    have: n
                })
            );
        }
        let f = EthernetFrame::new_checked(&FRAME[..HEADER_LEN]).unwrap();
        assert!(f.payload().is_empty());
    }

    #[test]
    fn vlan_ethertypes() {
        for t in [0x8100, 0x88a8, 0x9100] {
            assert!(EtherType::is_vlan(t));
        }
        assert!(!EtherType::is_vlan(EtherType::IPV4));
    }
}
