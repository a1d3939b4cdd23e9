//! [`ChunkFilterBuilder`]: fed every packet of a chunk, it records what a libpcap filter can
//! be answered from, as libpcap's generated code reads it (libpcap 1.10, `gencode.c`):
//!
//! | dimension | recorded from | libpcap primitives it answers |
//! |---|---|---|
//! | IPv4 addresses | IPv4 source and destination; ARP/RARP sender and target protocol addresses (bytes 14..18 and 24..28 of the ARP header, unchecked, as libpcap reads them) | `host`, `net` (IPv4: libpcap's default also matches ARP/RARP) |
//! | IPv6 addresses | IPv6 source and destination | `host`, `net` (IPv6) |
//! | IP protocols | IPv4 protocol field | `ip proto`, `proto`, `tcp`, `udp`, `icmp`, `sctp` |
//! | IPv6 protocols | the fixed header's next header; when that is a fragment header (44), the fragment header's next header (libpcap's `ip6 proto N` tests both); the upper layer after walking the extension headers | `ip6 proto`, `proto`, `tcp`, `udp`, `icmp6`, `sctp` |
//! | TCP / UDP / SCTP ports | IPv4: protocol 6/17/132, fragment offset 0, ports at 4 × IHL after the IP header (IHL as written, even if impossible, as libpcap's `ldxb 4*([14]&0xf)` does); IPv6: fixed next header 6/17/132, ports right after the 40-byte header; also the ports after a walked extension header chain | `port`, `portrange` (with `tcp`/`udp`/`sctp`) |
//! | VLAN ids | every tag of an 802.1Q/802.1ad/0x9100 stack | `vlan`, `vlan N` |
//!
//! Values a port or address field would have are added only when its bytes were captured:
//! libpcap rejects a packet when its program loads past the captured bytes, so such a packet
//! cannot match that primitive. Recording more than libpcap reads (tagged frames' inner
//! headers, which libpcap only sees after `vlan`; the walked IPv6 chain, which libpcap 1.10
//! does not follow for ports) only makes the index less selective, never wrong.
//!
//! Flags: a frame whose network layer is IPv4 / IPv6 (`ip`, `ip6`), a frame that is neither
//! (ARP, LLDP, 802.3 LLC …), a non-first IP fragment (no ports: `port` never matches it,
//! `host` does), and a frame the builder could not read (an unknown link type, a link or
//! VLAN header cut short, an IP header shorter than its fixed part or of the wrong version):
//! the index of a chunk holding one answers "maybe" to every filter.
//!
//! Memory is allocated when the builder is made, and again only when a chunk holds more
//! addresses than any before it: address sets are open-addressing tables (a few tens of
//! KiB for a calm chunk, grown up to [`MAX_ADDRESSES`] addresses for a busy one, and kept
//! for the chunks after it), ports and VLANs bitmaps. Making all of it at once cost a
//! short recorder run as much as indexing its packets (6 MiB zeroed per thread). A port,
//! protocol or VLAN set that would hold more than [`MAX_VALUES`] values, and an address
//! set over [`MAX_ADDRESSES`] or whose probe run grows past [`MAX_PROBE`] slots (crafted
//! addresses), is marked overflowed and answers "maybe", so the cost of `add` is bounded
//! on any input. At [`finish`](ChunkFilterBuilder::finish) an address set is listed, or
//! held as a Bloom filter when that is smaller (more than about a hundred addresses).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use tapdeck_decode::packet::{
    DLT_RAW_12, DLT_RAW_14, LINKTYPE_ETHERNET, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2, LINKTYPE_LOOP, LINKTYPE_NULL, LINKTYPE_RAW,
};
use tapdeck_decode::wire::{
    ethernet, ipv6, null, sll, vlan, EtherType, EthernetFrame, ExtensionChain, Ipv4Packet,
    Ipv6Packet, NullHeader, Sll2Header, SllHeader, VlanTag,
};

use crate::address::BloomKey;
use crate::bloom::AddressBloom;
use crate::chunk_filter::{flag, keep_listed, AddressSet, ChunkFilter, ValueSet};

/// Distinct values a port, protocol or VLAN set of one chunk holds before it is marked
/// overflowed; also the addresses a chunk's address table starts with room for.
pub const MAX_VALUES: usize = 4096;

/// Distinct addresses of one family a chunk may hold before its set is marked overflowed
/// ("any address"): more than a 4 MiB chunk of the smallest packets can carry.
pub const MAX_ADDRESSES: usize = 1 << 17;

/// Longest probe run in an address table before the set is marked overflowed.
pub const MAX_PROBE: usize = 64;

/// More stacked tags than this is not a real frame (the decoder's bound too).
const MAX_VLAN_TAGS: usize = 8;

const ETHERTYPE_ARP: u16 = 0x0806;
const ETHERTYPE_RARP: u16 = 0x8035;

const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_SCTP: u8 = 132;

/// Where TCP, UDP and SCTP keep their ports: the same first four bytes in all three.
mod ports_field {
    use std::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
}

/// ARP (RFC 826) as libpcap's `host` reads it: the sender and target protocol addresses at
/// the offsets they have for IPv4 over Ethernet, whatever the header's lengths say.
mod arp_field {
    use std::ops::Range;
    pub const SPA: Range<usize> = 14..18;
    pub const TPA: Range<usize> = 24..28;
}

/// The addresses of a chunk's sets that [`ChunkFilterBuilder::finish_with_values`] gave as
/// Bloom filters (empty for a listed or overflowed set), in no particular order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BloomValues {
    pub ipv4: Vec<u32>,
    pub ipv6: Vec<u128>,
}

/// Collects one chunk's [`ChunkFilter`]: [`add`](Self::add) every packet, then
/// [`finish`](Self::finish), which hands out the index and starts the next chunk.
pub struct ChunkFilterBuilder {
    packets: u64,
    flags: u32,
    ipv4: AddressTable<u32>,
    ipv6: AddressTable<u128>,
    ip_protocols: Bitmap<4>,
    ip6_protocols: Bitmap<4>,
    tcp_ports: Bitmap<1024>,
    udp_ports: Bitmap<1024>,
    sctp_ports: Bitmap<1024>,
    vlans: Bitmap<64>,
    /// Keys ([`ethernet_ipv4_key`]) of packets added to this chunk, by slot: a packet whose
    /// key is here adds nothing new, so it is only counted. Most packets of a link belong
    /// to a flow that sent one a moment ago, and this spares them the sets.
    recent: Box<[u128; RECENT_SLOTS]>,
    /// Numbers the chunks, in bits 104..120 of the keys in `recent`: a key of an earlier
    /// chunk never matches, so the table needs no clearing per chunk.
    generation: u16,
    /// This chunk's lookups in `recent` that found the key, and all its lookups. On a link
    /// of many interleaved flows the table mostly misses and costs more than it saves:
    /// past [`RECENT_TRIAL`] lookups with fewer than half found, it is left unused until
    /// the next chunk.
    recent_hits: u32,
    recent_lookups: u32,
}

/// Lookups in [`ChunkFilterBuilder::recent`] after which a chunk stops using it when
/// fewer than half found their key.
const RECENT_TRIAL: u32 = 512;

/// Slots of [`ChunkFilterBuilder::recent`] (128 KiB): room for the few thousand flows a
/// busy link interleaves. Two ways per set (half a cache line): direct-mapped, 4,096 flows
/// taking turns missed on 35 % of their packets (two keys on one slot evict each other
/// every time), each miss costing a full parse and two address-set lookups.
const RECENT_SLOTS: usize = 8192;

/// The fields an Ethernet frame holding IPv4 with a 20-byte header, not a later fragment,
/// and TCP, UDP or SCTP with both ports captured gives the index (protocol, addresses,
/// ports), with the top bit set; `None` for any other frame. Such frames are most of most
/// links, and for them `add` records exactly these fields.
#[inline]
fn ethernet_ipv4_key(frame: &[u8]) -> Option<u128> {
    const LEN: usize = ethernet::HEADER_LEN + 20 + 4;
    let h: &[u8; LEN] = frame.get(..LEN)?.try_into().ok()?;
    let fragment = (u16::from(h[20] & 0x1f) << 8) | u16::from(h[21]);
    if h[12..14] != [0x08, 0x00] || h[14] != 0x45 || fragment != 0 {
        return None;
    }
    let proto = h[23];
    if !matches!(proto, PROTO_TCP | PROTO_UDP | PROTO_SCTP) {
        return None;
    }
    let addresses = u64::from_be_bytes(h[26..34].try_into().ok()?);
    let ports = u32::from_be_bytes(h[34..38].try_into().ok()?);
    Some(1 << 127 | u128::from(proto) << 96 | u128::from(addresses) << 32 | u128::from(ports))
}

/// The first of the two slots of `key`'s set in [`ChunkFilterBuilder::recent`].
#[inline]
fn recent_set(key: u128) -> usize {
    let folded = (key as u64) ^ ((key >> 64) as u64);
    let sets = RECENT_SLOTS / 2;
    2 * (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - sets.trailing_zeros())) as usize
}

impl Default for ChunkFilterBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkFilterBuilder {
    /// A builder with the memory of a calm chunk allocated (about 400 KiB).
    pub fn new() -> Self {
        // One random key per builder, so addresses crafted to collide in one recorder's
        // tables do not collide in another's (and a collision only costs selectivity).
        let seed = RandomState::new().hash_one(0x7464_6669u64);
        ChunkFilterBuilder {
            packets: 0,
            flags: 0,
            ipv4: AddressTable::new(seed),
            ipv6: AddressTable::new(seed.rotate_left(17) ^ 0x5bd1_e995),
            ip_protocols: Bitmap::new(),
            ip6_protocols: Bitmap::new(),
            tcp_ports: Bitmap::new(),
            udp_ports: Bitmap::new(),
            sctp_ports: Bitmap::new(),
            vlans: Bitmap::new(),
            recent: vec![0; RECENT_SLOTS]
                .into_boxed_slice()
                .try_into()
                .unwrap_or_else(|_| unreachable!()),
            generation: 0,
            recent_hits: 0,
            recent_lookups: 0,
        }
    }

    /// Packets added since the last [`finish`](Self::finish).
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Records one captured frame of pcap link type `linktype`. Never panics, never
    /// allocates. Link types read: Ethernet, raw IP (12, 14, 101, 228, 229), Linux SLL and
    /// SLL2, BSD null/loopback; a frame of any other makes the chunk unprunable.
    #[inline]
    pub fn add(&mut self, linktype: u32, frame: &[u8]) {
        let useful =
            self.recent_lookups < RECENT_TRIAL || 2 * self.recent_hits >= self.recent_lookups;
        if linktype == LINKTYPE_ETHERNET && useful {
            if let Some(key) = ethernet_ipv4_key(frame) {
                let key = key | u128::from(self.generation) << 104;
                let set = recent_set(key);
                self.recent_lookups += 1;
                // The most recent key of the set first; a hit on the other moves it there.
                let (first, second) = (self.recent[set], self.recent[set + 1]);
                if first == key || second == key {
                    if second == key {
                        self.recent[set] = key;
                        self.recent[set + 1] = first;
                    }
                    self.recent_hits += 1;
                    self.packets += 1;
                    return;
                }
                self.add_parsed(linktype, frame);
                self.recent[set + 1] = first;
                self.recent[set] = key;
                return;
            }
        }
        self.add_parsed(linktype, frame);
    }

    /// [`add`](Self::add) without the recent-flow shortcut: every header read.
    #[inline(never)]
    fn add_parsed(&mut self, linktype: u32, frame: &[u8]) {
        self.packets += 1;
        let (mut ethertype, mut off) = match link_layer(linktype, frame) {
            Link::Next(t, off) => (t, off),
            Link::NotIp => {
                self.flags |= flag::NON_IP;
                return;
            }
            Link::Unreadable => {
                self.flags |= flag::UNPARSED;
                return;
            }
        };
        let mut tags = 0;
        while EtherType::is_vlan(ethertype) {
            let Ok(tag) = VlanTag::new_checked(rest(frame, off)) else {
                self.flags |= flag::UNPARSED;
                return;
            };
            tags += 1;
            if tags > MAX_VLAN_TAGS {
                self.flags |= flag::UNPARSED;
                return;
            }
            self.vlans.insert(tag.vlan_id());
            ethertype = tag.ethertype();
            off += vlan::TAG_LEN;
        }
        let network = rest(frame, off);
        match ethertype {
            EtherType::IPV4 => self.ipv4(network),
            EtherType::IPV6 => self.ipv6(network),
            ETHERTYPE_ARP | ETHERTYPE_RARP => {
                self.flags |= flag::NON_IP;
                for field in [arp_field::SPA, arp_field::TPA] {
                    if let Some(a) = network.get(field) {
                        self.ipv4
                            .insert(u32::from_be_bytes([a[0], a[1], a[2], a[3]]));
                    }
                }
            }
            _ => self.flags |= flag::NON_IP,
        }
    }

    fn ipv4(&mut self, b: &[u8]) {
        self.flags |= flag::IPV4;
        let Ok(ip) = Ipv4Packet::new_checked(b) else {
            self.flags |= flag::UNPARSED;
            return;
        };
        self.ipv4.insert(u32::from_be_bytes(ip.src_addr()));
        self.ipv4.insert(u32::from_be_bytes(ip.dst_addr()));
        let proto = ip.protocol();
        self.ip_protocols.insert(proto.into());
        if ip.frag_offset() != 0 {
            self.flags |= flag::FRAGMENT;
            return;
        }
        // The IHL as written, as libpcap uses it: an impossible IHL under 5 puts the
        // "ports" inside the IP header, and libpcap reads them there.
        self.transport(proto, rest(b, ip.header_len()));
    }

    fn ipv6(&mut self, b: &[u8]) {
        self.flags |= flag::IPV6;
        let Ok(ip) = Ipv6Packet::new_checked(b) else {
            self.flags |= flag::UNPARSED;
            return;
        };
        self.ipv6.insert(u128::from_be_bytes(ip.src_addr()));
        self.ipv6.insert(u128::from_be_bytes(ip.dst_addr()));
        let next = ip.next_header();
        self.ip6_protocols.insert(next.into());
        let chain_bytes = rest(b, ipv6::HEADER_LEN);
        if !ipv6::is_extension_header(next) {
            self.transport(next, chain_bytes);
            return;
        }
        // libpcap's `ip6 proto N` also matches a fragment header whose next header is N.
        if next == ipv6::FRAGMENT {
            if let Some(&inner) = chain_bytes.first() {
                self.ip6_protocols.insert(inner.into());
            }
        }
        // libpcap 1.10 goes no further, but a later one (or `ip6 protochain`) may: the
        // upper layer and its ports are recorded too, which costs only selectivity.
        let chain = ExtensionChain::walk(next, chain_bytes);
        self.ip6_protocols.insert(chain.next_header.into());
        if chain.frag_offset != 0 {
            self.flags |= flag::FRAGMENT;
        } else if chain.end.is_ok() {
            self.transport(chain.next_header, rest(chain_bytes, chain.len));
        }
    }

    /// The ports of a TCP, UDP or SCTP header at the start of `b`, those captured.
    fn transport(&mut self, proto: u8, b: &[u8]) {
        let ports = match proto {
            PROTO_TCP => &mut self.tcp_ports,
            PROTO_UDP => &mut self.udp_ports,
            PROTO_SCTP => &mut self.sctp_ports,
            _ => return,
        };
        for field in [ports_field::SRC_PORT, ports_field::DST_PORT] {
            if let Some(p) = b.get(field) {
                ports.insert(u16::from_be_bytes([p[0], p[1]]));
            }
        }
    }

    /// The index of the packets added since the builder was made or last finished; the
    /// builder is then empty, ready for the next chunk.
    pub fn finish(&mut self) -> ChunkFilter {
        self.finish_with_values().0
    }

    /// [`finish`](Self::finish), with the addresses of the sets held as Bloom filters,
    /// which a file's summary needs (a filter cannot be merged into one of another size).
    pub fn finish_with_values(&mut self) -> (ChunkFilter, BloomValues) {
        let (ipv4, v4) = self.ipv4.take();
        let (ipv6, v6) = self.ipv6.take();
        let index = ChunkFilter {
            packets: self.packets,
            flags: self.flags,
            ipv4,
            ipv6,
            ip_protocols: self.ip_protocols.take(),
            ip6_protocols: self.ip6_protocols.take(),
            tcp_ports: self.tcp_ports.take(),
            udp_ports: self.udp_ports.take(),
            sctp_ports: self.sctp_ports.take(),
            vlans: self.vlans.take(),
        };
        self.packets = 0;
        self.flags = 0;
        (self.recent_hits, self.recent_lookups) = (0, 0);
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.recent.fill(0);
        }
        (index, BloomValues { ipv4: v4, ipv6: v6 })
    }
}

/// The bytes of `b` from `off` on (none past the end).
#[inline]
fn rest(b: &[u8], off: usize) -> &[u8] {
    b.get(off..).unwrap_or_default()
}

/// What the link layer of a frame leads to.
enum Link {
    /// An ethertype and where the header it names starts.
    Next(u16, usize),
    /// A link type that leads to no IP (a BSD loopback family that is not IP, a raw
    /// "IP" frame of another version).
    NotIp,
    /// A link type not read here, or a link header cut short.
    Unreadable,
}

/// The link layers libpcap's and the decoder's views agree on. libpcap tests the same field
/// for each: the ethertype (Ethernet, SLL, SLL2), the version nibble (raw IP), the address
/// family (loopback, where the decoder accepts both byte orders and more IPv6 families than
/// libpcap, which only widens what counts as IP).
fn link_layer(linktype: u32, frame: &[u8]) -> Link {
    let by_version = || match frame.first().map(|b| b >> 4) {
        Some(4) => Link::Next(EtherType::IPV4, 0),
        Some(6) => Link::Next(EtherType::IPV6, 0),
        Some(_) => Link::NotIp,
        None => Link::Unreadable,
    };
    match linktype {
        LINKTYPE_ETHERNET => match EthernetFrame::new_checked(frame) {
            Ok(eth) => Link::Next(eth.ethertype(), ethernet::HEADER_LEN),
            Err(_) => Link::Unreadable,
        },
        LINKTYPE_RAW | DLT_RAW_12 | DLT_RAW_14 => by_version(),
        LINKTYPE_IPV4 => Link::Next(EtherType::IPV4, 0),
        LINKTYPE_IPV6 => Link::Next(EtherType::IPV6, 0),
        LINKTYPE_LINUX_SLL => match SllHeader::new_checked(frame) {
            Ok(h) => Link::Next(h.protocol(), sll::SLL_HEADER_LEN),
            Err(_) => Link::Unreadable,
        },
        LINKTYPE_LINUX_SLL2 => match Sll2Header::new_checked(frame) {
            Ok(h) => Link::Next(h.protocol(), sll::SLL2_HEADER_LEN),
            Err(_) => Link::Unreadable,
        },
        LINKTYPE_NULL | LINKTYPE_LOOP => match NullHeader::new_checked(frame) {
            Ok(h) => match h.ethertype() {
                Some(t) => Link::Next(t, null::HEADER_LEN),
                None => Link::NotIp,
            },
            Err(_) => Link::Unreadable,
        },
        _ => Link::Unreadable,
    }
}

/// A fixed-size bitmap of `64 × W` values with a count of those set.
struct Bitmap<const W: usize> {
    words: Box<[u64; W]>,
    count: usize,
}

impl<const W: usize> Bitmap<W> {
    fn new() -> Self {
        Bitmap {
            words: Box::new([0; W]),
            count: 0,
        }
    }

    #[inline]
    fn insert(&mut self, v: u16) {
        let (word, bit) = (usize::from(v >> 6), 1u64 << (v & 63));
        // Every caller's values fit: u8 in 4 words, 12-bit VLAN ids in 64, u16 in 1024.
        if let Some(w) = self.words.get_mut(word) {
            if *w & bit == 0 {
                *w |= bit;
                self.count += 1;
            }
        }
    }

    /// The values in order (or overflowed past [`MAX_VALUES`]); the bitmap is then empty.
    fn take<T: TryFrom<usize>>(&mut self) -> ValueSet<T> {
        if self.count == 0 {
            return ValueSet::Exact(Vec::new());
        }
        let overflowed = self.count > MAX_VALUES;
        let mut values = Vec::with_capacity(if overflowed { 0 } else { self.count });
        for (i, w) in self.words.iter_mut().enumerate() {
            let mut bits = std::mem::take(w);
            while !overflowed && bits != 0 {
                let v = i * 64 + bits.trailing_zeros() as usize;
                if let Ok(v) = T::try_from(v) {
                    values.push(v);
                }
                bits &= bits - 1;
            }
        }
        self.count = 0;
        if overflowed {
            ValueSet::Overflowed
        } else {
            ValueSet::Exact(values)
        }
    }
}

/// An address as a table key: zero marks a free slot (the zero address itself is kept
/// apart), `mix` spreads it over the table.
trait Address: Copy + Eq + Ord + Default {
    fn mix(self, seed: u64) -> u64;
}

const MIX_1: u64 = 0x9e37_79b9_7f4a_7c15;
const MIX_2: u64 = 0xc2b2_ae3d_27d4_eb4f;

impl Address for u32 {
    #[inline]
    fn mix(self, seed: u64) -> u64 {
        (u64::from(self) ^ seed).wrapping_mul(MIX_1)
    }
}

impl Address for u128 {
    #[inline]
    fn mix(self, seed: u64) -> u64 {
        let (hi, lo) = ((self >> 64) as u64, self as u64);
        ((lo ^ seed).wrapping_mul(MIX_1) ^ hi).wrapping_mul(MIX_2)
    }
}

/// Slots of a table when a chunk starts: room for [`MAX_VALUES`] at half load, in a few
/// tens of KiB that stay in cache; busier chunks double it (see [`AddressTable`]).
const FIRST_TABLE_BITS: u32 = (2 * MAX_VALUES).trailing_zeros();
const MAX_TABLE_BITS: u32 = (2 * MAX_ADDRESSES).trailing_zeros();

/// A set of at most [`MAX_ADDRESSES`] addresses: open addressing with linear probing, the
/// load at or under one half. Its slots are allocated once, for the largest size (pages
/// the kernel maps only when a busy chunk first reaches them); a chunk starts on the first
/// 2^13 of them and doubles the part in use, rehashing, each time it fills to half.
struct AddressTable<T: Address> {
    slots: Box<[T]>,
    /// log2 of the slots in use (`slots[..1 << bits]`).
    bits: u32,
    /// Slots in use, in insertion order: what `take` lists and clears.
    used: Vec<u32>,
    has_zero: bool,
    overflowed: bool,
    seed: u64,
}

impl<T: Address> AddressTable<T> {
    fn new(seed: u64) -> Self {
        const { assert!((2 * MAX_ADDRESSES).is_power_of_two()) };
        AddressTable {
            slots: vec![T::default(); 1 << FIRST_TABLE_BITS].into_boxed_slice(),
            bits: FIRST_TABLE_BITS,
            used: Vec::with_capacity(1 << (FIRST_TABLE_BITS - 1)),
            has_zero: false,
            overflowed: false,
            seed,
        }
    }

    fn len(&self) -> usize {
        self.used.len() + usize::from(self.has_zero)
    }

    #[inline]
    fn insert(&mut self, a: T) {
        if self.overflowed {
            return;
        }
        if a == T::default() {
            if !self.has_zero && self.len() >= MAX_ADDRESSES {
                self.overflowed = true;
            }
            self.has_zero = true;
            return;
        }
        if self.used.len() >= 1 << (self.bits - 1) && !self.grow() {
            // Full at the largest size: a new address overflows, a known one does not.
            if !self.probe(a, false) {
                self.overflowed = true;
            }
            return;
        }
        if !self.probe(a, true) {
            self.overflowed = true;
        }
    }

    /// Looks `a` up, adding it when `add` and it is absent. False when it is absent and
    /// not added, or the probe run grew past [`MAX_PROBE`] (crafted addresses).
    #[inline]
    fn probe(&mut self, a: T, add: bool) -> bool {
        let mask = (1usize << self.bits) - 1;
        let mut i = (a.mix(self.seed) >> (64 - self.bits)) as usize;
        for _ in 0..MAX_PROBE {
            let slot = &mut self.slots[i];
            if *slot == a {
                return true;
            }
            if *slot == T::default() {
                if add {
                    *slot = a;
                    self.used.push(i as u32);
                }
                return add;
            }
            i = (i + 1) & mask;
        }
        false
    }

    /// Doubles the slots in use and places every address again; false at the largest size.
    #[cold]
    fn grow(&mut self) -> bool {
        if self.bits == MAX_TABLE_BITS {
            return false;
        }
        let old: Vec<T> = (self.used.drain(..))
            .map(|i| std::mem::take(&mut self.slots[i as usize]))
            .collect();
        self.bits += 1;
        if self.slots.len() < 1 << self.bits {
            // Every slot is free now (drained above): a larger table replaces it.
            self.slots = vec![T::default(); 1 << self.bits].into_boxed_slice();
        }
        for a in old {
            if !self.probe(a, true) {
                self.overflowed = true;
            }
        }
        true
    }

    /// The addresses, listed in order or as a Bloom filter, whichever is smaller (or
    /// overflowed), and for a filter the addresses in it; the table is then empty and back
    /// at its first size.
    fn take(&mut self) -> (AddressSet<T>, Vec<T>)
    where
        T: BloomKey + Into<u128>,
    {
        let n = self.len();
        let set = if self.overflowed {
            (AddressSet::Listed(ValueSet::Overflowed), Vec::new())
        } else if n > 0 && AddressBloom::<T>::bytes_for(n) < n {
            // Every listed value takes a byte at least: the filter is smaller.
            (AddressSet::Bloom(self.bloom()), self.values().collect())
        } else {
            let values = self.sorted();
            if n > 0 && !keep_listed(&values, AddressBloom::<T>::bytes_for(n)) {
                (AddressSet::Bloom(self.bloom()), values)
            } else {
                (AddressSet::Listed(ValueSet::Exact(values)), Vec::new())
            }
        };
        for &i in &self.used {
            self.slots[i as usize] = T::default();
        }
        self.used.clear();
        self.has_zero = false;
        self.overflowed = false;
        self.bits = FIRST_TABLE_BITS;
        set
    }

    fn values(&self) -> impl Iterator<Item = T> + Clone + '_ {
        let zero = self.has_zero.then(T::default);
        zero.into_iter()
            .chain(self.used.iter().map(|&i| self.slots[i as usize]))
    }

    fn sorted(&self) -> Vec<T> {
        let mut values: Vec<T> = self.values().collect();
        values.sort_unstable();
        values
    }

    fn bloom(&self) -> AddressBloom<T>
    where
        T: BloomKey,
    {
        AddressBloom::of(self.values(), self.len())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Frames built field by field (the layouts are those of the `wire` views' tests).
    pub(crate) mod frames {
        pub const MAC: [u8; 12] = [
            0x00, 0x1c, 0x73, 0x00, 0x00, 0x9a, 0x00, 0x50, 0x56, 0x3e, 0x2b, 0xcc,
        ];

        /// Ethernet header with VLAN tags (TPID, id) and a final ethertype.
        pub fn ethernet(tags: &[(u16, u16)], ethertype: u16, payload: &[u8]) -> Vec<u8> {
            let mut f = MAC.to_vec();
            for &(tpid, id) in tags {
                f.extend(tpid.to_be_bytes());
                f.extend(id.to_be_bytes());
            }
            f.extend(ethertype.to_be_bytes());
            f.extend(payload);
            f
        }

        /// IPv4 header (IHL 5 unless `options` are given) followed by `payload`.
        pub fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, frag: u16, payload: &[u8]) -> Vec<u8> {
            let mut h = vec![0x45, 0, 0, 0, 0x12, 0x34];
            h.extend(frag.to_be_bytes());
            h.extend([64, proto, 0, 0]);
            h.extend(src);
            h.extend(dst);
            let total = (h.len() + payload.len()) as u16;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h.extend(payload);
            h
        }

        /// IPv6 header with next header `next`, followed by `rest` (extension headers and
        /// the upper layer).
        pub fn ipv6(src: [u8; 16], dst: [u8; 16], next: u8, rest: &[u8]) -> Vec<u8> {
            let mut h = vec![0x60, 0, 0, 0];
            h.extend((rest.len() as u16).to_be_bytes());
            h.extend([next, 64]);
            h.extend(src);
            h.extend(dst);
            h.extend(rest);
            h
        }

        /// A TCP header (20 bytes, no options) or the first 8 bytes of UDP/SCTP.
        pub fn ports(src: u16, dst: u16, len: usize) -> Vec<u8> {
            let mut h = vec![0u8; len];
            h[0..2].copy_from_slice(&src.to_be_bytes());
            h[2..4].copy_from_slice(&dst.to_be_bytes());
            if len >= 20 {
                h[12] = 0x50;
            }
            h
        }

        pub fn v6(last: u8) -> [u8; 16] {
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
            a[15] = last;
            a
        }
    }

    use frames::*;

    fn exact<T: Clone>(s: &ValueSet<T>) -> Vec<T> {
        match s {
            ValueSet::Exact(v) => v.clone(),
            ValueSet::Overflowed => panic!("overflowed"),
        }
    }

    /// A listed address set's addresses.
    fn addrs<T: Clone>(s: &AddressSet<T>) -> Vec<T> {
        match s {
            AddressSet::Listed(s) => exact(s),
            AddressSet::Bloom(_) => panic!("a Bloom filter"),
        }
    }

    fn v4(a: [u8; 4]) -> u32 {
        u32::from_be_bytes(a)
    }

    #[test]
    fn ethernet_ipv4_tcp() {
        let mut b = ChunkFilterBuilder::new();
        let ip = ipv4(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            6,
            0x4000,
            &ports(40000, 80, 20),
        );
        b.add(LINKTYPE_ETHERNET, &ethernet(&[], 0x0800, &ip));
        let i = b.finish();
        assert_eq!(i.packets, 1);
        assert_eq!(i.flags, flag::IPV4);
        assert_eq!(addrs(&i.ipv4), vec![v4([10, 0, 0, 1]), v4([10, 0, 0, 2])]);
        assert_eq!(exact(&i.ip_protocols), vec![6]);
        assert_eq!(exact(&i.tcp_ports), vec![80, 40000]);
        assert!(exact(&i.udp_ports).is_empty() && exact(&i.vlans).is_empty());
        // The builder starts over.
        let empty = b.finish();
        assert!(empty.is_empty());
        assert!(addrs(&empty.ipv4).is_empty() && exact(&empty.tcp_ports).is_empty());
    }

    /// The recent-flow shortcut records exactly what reading every header records: random
    /// frames near the shortcut's shape (other IHLs, fragments, protocols, ethertypes, VLAN
    /// tags, cuts), from few flows so that most repeat, give the same index both ways.
    #[test]
    fn the_recent_flow_shortcut_records_what_parsing_does() {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(5);
        // Small chunks, so that a packet wrongly skipped is often the only one that would
        // have recorded what it holds (a flag, a port).
        let (mut fast, mut slow) = (ChunkFilterBuilder::new(), ChunkFilterBuilder::new());
        for round in 0..20_000 {
            for _ in 0..6 {
                let src = [10, 0, 0, rng.gen_range(0..2)];
                let dst = [10, 0, 1, rng.gen_range(0..2)];
                let proto = [6, 17, 132, 1, 6, 17][rng.gen_range(0..6)];
                let frag = [0, 0x4000, 0x2000, 0x0001, 0x2100][rng.gen_range(0..5)];
                let l4 = ports(1000 + rng.gen_range(0..2), 80, 8);
                let mut ip = ipv4(src, dst, proto, frag, &l4);
                if rng.gen_ratio(1, 20) {
                    ip[0] = [0x46, 0x44, 0x55, 0x65][rng.gen_range(0..4)];
                }
                let tags: &[(u16, u16)] = if rng.gen_ratio(1, 10) {
                    &[(0x8100, 7)]
                } else {
                    &[]
                };
                let ethertype = if rng.gen_ratio(1, 30) { 0x86dd } else { 0x0800 };
                let mut f = ethernet(tags, ethertype, &ip);
                if rng.gen_ratio(1, 10) {
                    f.truncate(rng.gen_range(0..f.len()));
                }
                fast.add(LINKTYPE_ETHERNET, &f);
                slow.add_parsed(LINKTYPE_ETHERNET, &f);
            }
            let (a, b) = (fast.finish(), slow.finish());
            assert_eq!(a.packets, b.packets);
            assert_eq!(a.flags, b.flags, "round {round}");
            let mut got = (addrs(&a.ipv4), addrs(&a.ipv6));
            let mut want = (addrs(&b.ipv4), addrs(&b.ipv6));
            for v in [&mut got, &mut want] {
                v.0.sort_unstable();
                v.1.sort_unstable();
            }
            assert_eq!(got, want, "round {round}");
            assert_eq!(exact(&a.ip_protocols), exact(&b.ip_protocols));
            for (x, y) in [
                (&a.tcp_ports, &b.tcp_ports),
                (&a.udp_ports, &b.udp_ports),
                (&a.sctp_ports, &b.sctp_ports),
                (&a.vlans, &b.vlans),
            ] {
                assert_eq!(exact(x), exact(y), "round {round}");
            }
        }
    }

    #[test]
    fn qinq_records_every_tag() {
        let mut b = ChunkFilterBuilder::new();
        let ip = ipv4(
            [192, 168, 1, 1],
            [192, 168, 1, 2],
            17,
            0,
            &ports(53, 5353, 8),
        );
        b.add(
            LINKTYPE_ETHERNET,
            &ethernet(&[(0x88a8, 200), (0x8100, 0x2000 | 2001)], 0x0800, &ip),
        );
        b.add(LINKTYPE_ETHERNET, &ethernet(&[(0x9100, 7)], 0x0800, &ip));
        let i = b.finish();
        assert_eq!(exact(&i.vlans), vec![7, 200, 2001], "priority bits dropped");
        assert_eq!(exact(&i.udp_ports), vec![53, 5353]);
        assert_eq!(i.flags, flag::IPV4);
    }

    #[test]
    fn arp_addresses_count_as_ipv4_hosts() {
        // tcpdump-tests/802.1ad_QinQ.pcap frame 1's ARP request, whole: who has
        // 10.0.0.2, tell 10.0.0.1.
        let arp = [
            0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x00, 0x20, 0xd2, 0x5a, 0xfb, 0x3f, 10,
            0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
        ];
        let mut b = ChunkFilterBuilder::new();
        b.add(LINKTYPE_ETHERNET, &ethernet(&[], 0x0806, &arp));
        // Cut after the sender's address: only that one is readable.
        b.add(
            LINKTYPE_ETHERNET,
            &ethernet(&[], 0x8035, &[&arp[..18], &[9; 3]].concat()),
        );
        let i = b.finish();
        assert_eq!(i.flags, flag::NON_IP);
        assert_eq!(addrs(&i.ipv4), vec![v4([10, 0, 0, 1]), v4([10, 0, 0, 2])]);
        assert!(exact(&i.ip_protocols).is_empty());
    }

    #[test]
    fn other_ethertypes_and_llc_are_non_ip() {
        let mut b = ChunkFilterBuilder::new();
        b.add(LINKTYPE_ETHERNET, &ethernet(&[], 0x88cc, &[0; 30])); // LLDP
        b.add(
            LINKTYPE_ETHERNET,
            &ethernet(&[(0x8100, 5)], 0x0026, &[0xaa; 38]),
        ); // 802.3
        let i = b.finish();
        assert_eq!(i.flags, flag::NON_IP);
        assert_eq!(exact(&i.vlans), vec![5]);
        assert!(addrs(&i.ipv4).is_empty());
    }

    #[test]
    fn ipv4_fragments_have_ports_only_at_offset_zero() {
        let mut b = ChunkFilterBuilder::new();
        let first = ipv4(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            17,
            0x2000,
            &ports(1000, 2049, 8),
        );
        let later = ipv4(
            [10, 0, 0, 3],
            [10, 0, 0, 4],
            17,
            0x2000 | 185,
            &ports(7, 8, 8),
        );
        b.add(LINKTYPE_ETHERNET, &ethernet(&[], 0x0800, &first));
        b.add(LINKTYPE_ETHERNET, &ethernet(&[], 0x0800, &later));
        let i = b.finish();
        assert_eq!(i.flags, flag::IPV4 | flag::FRAGMENT);
        assert_eq!(
            exact(&i.udp_ports),
            vec![1000, 2049],
            "the later fragment's bytes are data"
        );
        assert_eq!(addrs(&i.ipv4).len(), 4, "every fragment has addresses");
    }

    #[test]
    fn ipv4_ports_follow_the_written_ihl() {
        // IHL 6: one option word, ports after it.
        let mut ip = ipv4(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            6,
            0,
            &[[1, 1, 1, 0].as_slice(), &ports(22, 2222, 20)].concat(),
        );
        ip[0] = 0x46;
        // IHL 3 (impossible): libpcap reads the "ports" at byte 12, the source address.
        let mut bad = ipv4([0, 25, 0, 26], [3, 3, 3, 3], 6, 0, &ports(1, 2, 20));
        bad[0] = 0x43;
        // IHL 15 with the options cut: no ports captured.
        let mut cut = ipv4([4, 4, 4, 4], [5, 5, 5, 5], 17, 0, &[0; 12]);
        cut[0] = 0x4f;
        let mut b = ChunkFilterBuilder::new();
        for f in [&ip, &bad, &cut] {
            b.add(LINKTYPE_RAW, f);
        }
        let i = b.finish();
        assert_eq!(exact(&i.tcp_ports), vec![22, 25, 26, 2222]);
        assert!(exact(&i.udp_ports).is_empty());
        assert_eq!(exact(&i.ip_protocols), vec![6, 17]);
        assert_eq!(i.flags, flag::IPV4);
    }

    #[test]
    fn ports_cut_by_the_snap_length() {
        let ip = ipv4([1, 2, 3, 4], [5, 6, 7, 8], 6, 0, &ports(443, 50000, 20));
        let mut b = ChunkFilterBuilder::new();
        b.add(LINKTYPE_RAW, &ip[..22]); // only the source port
        b.add(LINKTYPE_RAW, &ip[..21]);
        let i = b.finish();
        assert_eq!(exact(&i.tcp_ports), vec![443]);
        assert_eq!(
            i.flags,
            flag::IPV4,
            "a cut transport header is not unreadable"
        );
    }

    #[test]
    fn ipv6_extension_headers() {
        let (a, c) = (v6(1), v6(2));
        // Hop-by-hop (8 bytes), destination options (8), then TCP: libpcap sees next
        // header 0 and no ports; the walk finds TCP 8080.
        let mut chain = vec![60, 0, 1, 4, 0, 0, 0, 0, 6, 0, 1, 4, 0, 0, 0, 0];
        chain.extend(ports(8080, 9090, 20));
        let hbh = ipv6(a, c, 0, &chain);
        // Fragment header, first fragment (offset 0, M set), UDP.
        let mut f0 = vec![17, 0, 0x00, 0x01, 0, 0, 0, 9];
        f0.extend(ports(5000, 53, 8));
        let first = ipv6(a, c, 44, &f0);
        // Fragment header, offset 1480: data, no ports.
        let mut f1 = vec![17, 0, 0x05, 0xc8, 0, 0, 0, 9];
        f1.extend(ports(1, 2, 8));
        let later = ipv6(c, a, 44, &f1);
        // Plain ICMPv6.
        let icmp = ipv6(a, v6(3), 58, &[128, 0, 0, 0, 0, 0, 0, 0]);
        let mut b = ChunkFilterBuilder::new();
        for f in [&hbh, &first, &later, &icmp] {
            b.add(LINKTYPE_ETHERNET, &ethernet(&[], 0x86dd, f));
        }
        let i = b.finish();
        assert_eq!(i.flags, flag::IPV6 | flag::FRAGMENT);
        assert_eq!(
            addrs(&i.ipv6),
            vec![
                u128::from_be_bytes(a),
                u128::from_be_bytes(c),
                u128::from_be_bytes(v6(3))
            ]
        );
        assert_eq!(exact(&i.ip6_protocols), vec![0, 6, 17, 44, 58]);
        assert_eq!(exact(&i.tcp_ports), vec![8080, 9090]);
        assert_eq!(exact(&i.udp_ports), vec![53, 5000]);
        assert!(exact(&i.ip_protocols).is_empty());
    }

    #[test]
    fn ipv6_ports_libpcap_reads_after_a_cut_chain() {
        // Fixed next header UDP: the ports right after the fixed header, even if the
        // datagram is cut after them.
        let mut b = ChunkFilterBuilder::new();
        let p = ipv6(v6(1), v6(2), 17, &ports(123, 124, 8));
        b.add(LINKTYPE_IPV6, &p[..44]);
        // A hop-by-hop header cut short: addresses and protocol 0, nothing else.
        let h = ipv6(v6(3), v6(4), 0, &[6, 1, 0, 0]);
        b.add(LINKTYPE_RAW, &h);
        let i = b.finish();
        assert_eq!(exact(&i.udp_ports), vec![123, 124]);
        assert_eq!(addrs(&i.ipv6).len(), 4);
        assert_eq!(i.flags, flag::IPV6);
    }

    #[test]
    fn unreadable_frames() {
        let ip = ipv4([1, 2, 3, 4], [5, 6, 7, 8], 6, 0, &ports(1, 2, 20));
        let eth = ethernet(&[], 0x0800, &ip);
        let cases: Vec<(u32, Vec<u8>)> = vec![
            (LINKTYPE_ETHERNET, eth[..13].to_vec()), // link header cut
            (LINKTYPE_ETHERNET, eth[..14 + 19].to_vec()), // IPv4 fixed header cut
            (LINKTYPE_ETHERNET, ethernet(&[(0x8100, 1)], 0x8100, &[0, 2])), // tag cut
            (LINKTYPE_ETHERNET, ethernet(&[], 0x86dd, &ip)), // version 4 as IPv6
            (LINKTYPE_ETHERNET, ethernet(&[(0x8100, 1); 9], 0x0800, &ip)), // 9 tags
            (127, ip.clone()),                       // radiotap: not read
            (LINKTYPE_LINUX_SLL, vec![0; 15]),
            (LINKTYPE_RAW, vec![]),
        ];
        for (linktype, frame) in cases {
            let mut b = ChunkFilterBuilder::new();
            b.add(linktype, &frame);
            let i = b.finish();
            assert!(i.flags & flag::UNPARSED != 0, "{linktype} {frame:02x?}");
        }
    }

    #[test]
    fn other_link_types() {
        let ip = ipv4([1, 2, 3, 4], [5, 6, 7, 8], 17, 0, &ports(67, 68, 8));
        let mut sll = vec![0, 0, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, 0x08, 0x00];
        sll.extend(&ip);
        let mut sll2 = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0,
        ];
        sll2.extend(&ip);
        let mut null_le = 2u32.to_le_bytes().to_vec();
        null_le.extend(&ip);
        let mut loop_be = 2u32.to_be_bytes().to_vec();
        loop_be.extend(&ip);
        let mut null_other = 7u32.to_le_bytes().to_vec();
        null_other.extend(&ip);
        let mut b = ChunkFilterBuilder::new();
        b.add(LINKTYPE_LINUX_SLL, &sll);
        b.add(LINKTYPE_LINUX_SLL2, &sll2);
        b.add(LINKTYPE_NULL, &null_le);
        b.add(LINKTYPE_LOOP, &loop_be);
        b.add(LINKTYPE_IPV4, &ip);
        b.add(LINKTYPE_RAW, &[0x50; 20]); // version 5
        b.add(LINKTYPE_NULL, &null_other);
        let i = b.finish();
        assert_eq!(i.packets, 7);
        assert_eq!(i.flags, flag::IPV4 | flag::NON_IP);
        assert_eq!(exact(&i.udp_ports), vec![67, 68]);
    }

    #[test]
    fn sets_overflow_at_the_cap() {
        let mut b = ChunkFilterBuilder::new();
        for n in 0..MAX_VALUES as u32 / 2 {
            let ip = ipv4(
                (n << 1).to_be_bytes(),
                ((n << 1) | 1).to_be_bytes(),
                6,
                0,
                &ports(n as u16, 7, 20),
            );
            b.add(LINKTYPE_RAW, &ip);
        }
        let i = b.finish();
        assert_eq!(addrs(&i.ipv4).len(), MAX_VALUES, "0.0.0.0 included");
        assert_eq!(addrs(&i.ipv4)[0], 0);
        assert_eq!(
            exact(&i.tcp_ports).len(),
            MAX_VALUES / 2,
            "7 is one of them"
        );
        for n in 0..=MAX_VALUES as u32 {
            let ip = ipv4(
                (n + 1).to_be_bytes(),
                [0; 4],
                6,
                0,
                &ports(n as u16, 40000, 20),
            );
            b.add(LINKTYPE_RAW, &ip);
        }
        let i = b.finish();
        // Ports overflow at MAX_VALUES; addresses grow on (and 4,098 addresses in a row
        // list in fewer bytes than a filter of them takes).
        assert_eq!(addrs(&i.ipv4).len(), MAX_VALUES + 2);
        assert_eq!(i.tcp_ports, ValueSet::Overflowed);
        assert_eq!(exact(&i.ip_protocols), vec![6]);
        // Overflow is per chunk.
        b.add(LINKTYPE_RAW, &ipv4([9; 4], [8; 4], 6, 0, &ports(1, 2, 20)));
        let i = b.finish();
        assert_eq!(addrs(&i.ipv4), vec![v4([8; 4]), v4([9; 4])]);
        assert_eq!(exact(&i.tcp_ports), vec![1, 2]);
    }

    /// The busy chunk: 50,000 distinct addresses (a scan, a busy uplink) are held
    /// as a Bloom filter that still rules out an absent host, at most 1 % of the time.
    #[test]
    fn a_busy_chunk_of_50_000_addresses_rules_out_an_absent_host() {
        let mut b = ChunkFilterBuilder::new();
        // 25,000 packets between distinct pseudo-random addresses.
        let addr = |i: u32| i.wrapping_mul(2_654_435_761).wrapping_add(0x0a00_0000);
        for i in 0..25_000u32 {
            let ip = ipv4(
                addr(2 * i).to_be_bytes(),
                addr(2 * i + 1).to_be_bytes(),
                17,
                0,
                &ports(53, 4000, 8),
            );
            b.add(LINKTYPE_RAW, &ip);
        }
        let index = ChunkFilter::decode(&b.finish().encode()).unwrap();
        let AddressSet::Bloom(bloom) = &index.ipv4 else {
            panic!("50,000 addresses listed: {index}");
        };
        assert_eq!(bloom.bytes().len(), AddressBloom::<u32>::bytes_for(50_000));
        let may = |a: u32| {
            let host = std::net::Ipv4Addr::from(a);
            crate::Predicate::parse(&format!("host {host}"))
                .unwrap()
                .may_match(&index)
        };
        assert!(
            (0..50_000).all(|i| may(addr(i))),
            "a present host ruled out"
        );
        let absent = (50_000..150_000u32).map(addr);
        let passed = absent.filter(|&a| may(a)).count();
        assert!(
            passed < 1_000,
            "{passed} of 100,000 absent hosts not ruled out"
        );
        // The port and protocol sets are as before.
        assert_eq!(index.udp_ports, ValueSet::Exact(vec![53, 4000]));
    }

    #[test]
    fn addresses_overflow_past_max_addresses_and_the_table_shrinks_back() {
        let mut b = ChunkFilterBuilder::new();
        for i in 0..=(MAX_ADDRESSES as u32 / 2) {
            let ip = ipv4(
                (2 * i + 1).to_be_bytes(),
                (2 * i + 2).to_be_bytes(),
                6,
                0,
                &[],
            );
            b.add(LINKTYPE_RAW, &ip);
        }
        assert_eq!(b.finish().ipv4, AddressSet::Listed(ValueSet::Overflowed));
        assert_eq!(b.ipv4.bits, FIRST_TABLE_BITS);
        assert!(b.ipv4.slots.iter().all(|&s| s == 0), "cleared");
        b.add(LINKTYPE_RAW, &ipv4([1; 4], [2; 4], 6, 0, &[]));
        assert_eq!(addrs(&b.finish().ipv4), vec![v4([1; 4]), v4([2; 4])]);
    }

    #[test]
    fn colliding_addresses_overflow_instead_of_probing_on() {
        let mut t = AddressTable::<u32>::new(1);
        // Fill a run of slots directly, as colliding keys would.
        let start = (7u32.mix(1) >> (64 - FIRST_TABLE_BITS)) as usize;
        for k in 0..MAX_PROBE {
            let i = (start + k) & ((1 << FIRST_TABLE_BITS) - 1);
            t.slots[i] = 1_000_000 + k as u32;
            t.used.push(i as u32);
        }
        t.insert(7);
        assert!(t.overflowed);
        assert_eq!(t.take().0, AddressSet::Listed(ValueSet::Overflowed));
        assert!(t.slots.iter().all(|&s| s == 0), "cleared");
        t.insert(7);
        assert_eq!(t.take().0, AddressSet::Listed(ValueSet::Exact(vec![7])));
    }
}
