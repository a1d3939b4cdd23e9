//! IEEE 802.1Q / 802.1ad tag: the 4 bytes after a VLAN ethertype. QinQ stacks a service tag
//! (802.1ad, 0x88a8) over a customer tag (802.1Q, 0x8100); each tag names what follows it.

use super::{be16, check_len, Layer, Result};

mod field {
    use crate::wire::Field;
    /// Tag control information: priority (3 bits), drop eligible (1), VLAN id (12).
    pub const TCI: Field = 0..2;
    pub const ETHERTYPE: Field = 2..4;
    pub const PAYLOAD: usize = 4;
}

/// Length of one tag (after the ethertype that announced it).
pub const TAG_LEN: usize = field::PAYLOAD;

/// One VLAN tag, as it follows a [`EtherType::is_vlan`](super::EtherType::is_vlan) ethertype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// A view over `buffer`, which must hold the 4-byte tag.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(Layer::Vlan, buffer.as_ref(), TAG_LEN)?;
        Ok(VlanTag { buffer })
    }

    pub fn tci(&self) -> u16 {
        be16(self.buffer.as_ref(), field::TCI)
    }

    /// The 12-bit VLAN identifier.
    pub fn vlan_id(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// Priority code point (802.1p).
    pub fn priority(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    pub fn drop_eligible(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// The ethertype of what follows the tag (another tag, for QinQ).
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE)
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Error, EtherType, EthernetFrame};

    /// tcpdump-tests/802.1ad_QinQ.pcap, frame 1: an ARP request behind an 802.1ad tag
    /// (VLAN 200) and an 802.1Q tag (VLAN 2001, priority 0); ARP header cut after 4 bytes.
    const FRAME: [u8; 26] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x20, 0xd2, 0x5a, 0xfb, 0x3f, 0x88, 0xa8, 0x00,
        0xc8, 0x81, 0x00, 0x07, 0xd1, 0x08, 0x06, 0x00, 0x01, 0x08, 0x00,
    ];

    #[test]
    fn qinq_from_a_real_frame() {
        let eth = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(eth.ethertype(), EtherType::QINQ);
        let s_tag = VlanTag::new_checked(eth.payload()).unwrap();
        assert_eq!((s_tag.vlan_id(), s_tag.priority()), (200, 0));
        assert!(!s_tag.drop_eligible());
        assert_eq!(s_tag.ethertype(), EtherType::VLAN);
        let c_tag = VlanTag::new_checked(s_tag.payload()).unwrap();
        assert_eq!((c_tag.tci(), c_tag.vlan_id()), (0x07d1, 2001));
        assert_eq!(c_tag.ethertype(), 0x0806);
        assert_eq!(c_tag.payload(), &[0x00, 0x01, 0x08, 0x00]);
    }

    #[test]
    fn priority_and_dei() {
        let t = VlanTag::new_checked([0xb0, 0x64, 0x08, 0x00]).unwrap();
        assert_eq!(
            (t.priority(), t.drop_eligible(), t.vlan_id()),
            (5, true, 100)
        );
    }

    #[test]
    fn every_prefix() {
        for n in 0..TAG_LEN {
            assert_eq!(
                VlanTag::new_checked(&FRAME[14..14 + n]),
                Err(Error::Truncated {
                    layer: Layer::Vlan,
                    need: 4,
                    have: n
                })
            );
        }
    }
}
