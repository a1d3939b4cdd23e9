/// One captured packet, borrowed from whoever holds its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Index into the interface list of the source or file the packet came from.
    pub iface: u32,
    /// Length of the packet on the wire; `data.len()` is the captured length.
    pub orig_len: u32,
    pub data: &'a [u8],
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
