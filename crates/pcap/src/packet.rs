/// One captured packet, borrowed from whoever holds its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Index into the interface list of the source or file the packet came from.
    pub iface: u32,
    /// Length of the packet on the wire; `data.len()` is the captured length.
    pub orig_len: u32,
    /// The pcapng `epb_flags` word when the source knows it (a live socket), or when the
    /// file read had one; `None` writes no option.
    pub flags: Option<PacketFlags>,
    pub data: &'a [u8],
}

impl Packet<'_> {
    /// Inbound or outbound, when the packet's flags say.
    pub fn direction(&self) -> Option<Direction> {
        self.flags.and_then(PacketFlags::direction)
    }
}

/// Which way a packet crossed the capturing interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Inbound,
    Outbound,
}

/// The pcapng `epb_flags` word: bits 0-1 direction, 2-4 reception type, 16-31 link-layer
/// errors. Kept whole, so that extract and merge write back exactly what they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketFlags(pub u32);

impl PacketFlags {
    const INBOUND: u32 = 1;
    const OUTBOUND: u32 = 2;
    const UNICAST: u32 = 1 << 2;
    const MULTICAST: u32 = 2 << 2;
    const BROADCAST: u32 = 3 << 2;
    const PROMISCUOUS: u32 = 4 << 2;

    /// From Linux's `sll_pkttype` (linux/if_packet.h). Loopback, user and kernel types
    /// say nothing about the wire, so they give no flags.
    pub fn from_pkttype(pkttype: u8) -> Option<PacketFlags> {
        let bits = match pkttype {
            0 => Self::INBOUND | Self::UNICAST,     // PACKET_HOST
            1 => Self::INBOUND | Self::BROADCAST,   // PACKET_BROADCAST
            2 => Self::INBOUND | Self::MULTICAST,   // PACKET_MULTICAST
            3 => Self::INBOUND | Self::PROMISCUOUS, // PACKET_OTHERHOST
            4 => Self::OUTBOUND,                    // PACKET_OUTGOING
            _ => return None,
        };
        Some(PacketFlags(bits))
    }

    /// Bits 0-1; 0 ("not available") and the reserved 3 give `None`.
    pub fn direction(self) -> Option<Direction> {
        match self.0 & 3 {
            Self::INBOUND => Some(Direction::Inbound),
            Self::OUTBOUND => Some(Direction::Outbound),
            _ => None,
        }
    }
}

/// What a capture file says about one interface (a pcapng IDB, or a classic pcap header).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interface {
    /// LINKTYPE_* value (1 = Ethernet).
    pub linktype: u16,
    /// Maximum captured length; 0 means unlimited.
    pub snaplen: u32,
    pub name: Option<String>,
    pub description: Option<String>,
}

/// Counters carried by a pcapng interface statistics block, all cumulative since the
/// capture began (as the pcapng specification defines them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InterfaceStats {
    pub iface: u32,
    pub ts_ns: u64,
    /// Packets the interface (or kernel socket) received.
    pub received: Option<u64>,
    /// Packets dropped by the operating system (kernel ring full).
    pub os_dropped: Option<u64>,
    /// Packets dropped by the interface (`isb_ifdrop`); tapdeck puts every other drop
    /// cause here (staging full, write errors) and names them in the block comment.
    pub if_dropped: Option<u64>,
    /// Packets delivered to the recorder.
    pub delivered: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkttypes_map_to_the_flags_wireshark_reads() {
        let flags = |t| PacketFlags::from_pkttype(t).map(|f| f.0);
        assert_eq!(flags(0), Some(0b00101)); // host: inbound, unicast
        assert_eq!(flags(1), Some(0b01101)); // broadcast
        assert_eq!(flags(2), Some(0b01001)); // multicast
        assert_eq!(flags(3), Some(0b10001)); // otherhost: promiscuous
        assert_eq!(flags(4), Some(0b00010)); // outgoing
        for t in 5..=255 {
            assert_eq!(flags(t), None, "pkttype {t}");
        }
    }

    #[test]
    fn direction_is_the_low_two_bits() {
        assert_eq!(
            PacketFlags(0x0001_0011).direction(),
            Some(Direction::Inbound)
        );
        assert_eq!(PacketFlags(2).direction(), Some(Direction::Outbound));
        assert_eq!(PacketFlags(0).direction(), None);
        assert_eq!(PacketFlags(3).direction(), None);
    }
}
