//! [`ChunkFilter`]: one chunk's (or, merged, one file's) sets of addresses, protocols, ports
//! and VLAN ids, and its binary encoding (documented at [`ChunkFilter`]).

use std::fmt;

use crate::address::{BloomKey, Masked};
use crate::bloom::{AddressBloom, BLOCK_BYTES, MAX_BLOCKS};

/// Bytes that open an encoded index.
pub const MAGIC: [u8; 4] = *b"TDFI";
/// The encoding version written; 1 (without Bloom filters) is read too.
pub const VERSION: u8 = 2;
/// Values a set of a merged index holds before it is marked overflowed; also the most a
/// set may hold when decoded.
pub const MAX_MERGED_VALUES: usize = 1 << 16;

const HEADER_LEN: usize = MAGIC.len() + 1;
const CHECKSUM_LEN: usize = 4;
/// 128 bits in 7-bit groups.
const MAX_VARINT_LEN: usize = 19;
const MAX_VLAN_ID: u128 = 0x0fff;

/// The flag bits of the encoding.
pub(crate) mod flag {
    pub const IPV4: u32 = 1;
    pub const IPV6: u32 = 2;
    pub const NON_IP: u32 = 4;
    pub const FRAGMENT: u32 = 8;
    pub const UNPARSED: u32 = 16;
    pub const ALL: u32 = IPV4 | IPV6 | NON_IP | FRAGMENT | UNPARSED;
}

/// Why an encoded index was refused. Offsets count from the first byte of the encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("flow index: {len} bytes, shorter than the {min} of header and checksum")]
    TooShort { len: usize, min: usize },
    #[error("flow index: magic is {found:02x?}, not \"TDFI\"")]
    BadMagic { found: [u8; 4] },
    #[error("flow index: version {0} (this build reads versions 1 and {VERSION})")]
    UnsupportedVersion(u8),
    #[error("flow index: checksum {stored:08x} stored, {computed:08x} computed")]
    Checksum { stored: u32, computed: u32 },
    #[error("flow index: {what} at byte {offset}: {problem}")]
    Malformed {
        offset: usize,
        what: &'static str,
        problem: &'static str,
    },
}

/// The distinct values of one dimension, sorted, or "too many to list" (any value may be
/// present).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ValueSet<T> {
    Exact(Vec<T>),
    Overflowed,
}

impl<T: Copy + Ord> ValueSet<T> {
    /// False only when no value in `lo..=hi` is present.
    pub(crate) fn may_contain_range(&self, lo: T, hi: T) -> bool {
        match self {
            ValueSet::Overflowed => true,
            ValueSet::Exact(v) => {
                let i = v.partition_point(|x| *x < lo);
                v.get(i).is_some_and(|x| *x <= hi)
            }
        }
    }

    pub(crate) fn may_contain(&self, x: T) -> bool {
        self.may_contain_range(x, x)
    }

    /// False only when the set is known to be empty.
    pub(crate) fn may_be_nonempty(&self) -> bool {
        !matches!(self, ValueSet::Exact(v) if v.is_empty())
    }

    /// False only when no value `x` has `x & mask == addr`.
    pub(crate) fn may_contain_masked(&self, addr: T, mask: T) -> bool
    where
        T: Masked,
    {
        if addr.and(mask.not()) != T::ZERO {
            return false;
        }
        if mask.is_prefix() {
            return self.may_contain_range(addr, addr.or(mask.not()));
        }
        match self {
            ValueSet::Overflowed => true,
            ValueSet::Exact(v) => v.iter().any(|x| x.and(mask) == addr),
        }
    }

    fn describe(&self) -> String {
        match self {
            ValueSet::Exact(v) => v.len().to_string(),
            ValueSet::Overflowed => "*".to_string(),
        }
    }

    /// The union of two sets, overflowed past `limit` values.
    fn union(&self, other: &ValueSet<T>, limit: usize) -> ValueSet<T> {
        let (ValueSet::Exact(a), ValueSet::Exact(b)) = (self, other) else {
            return ValueSet::Overflowed;
        };
        let mut out = Vec::with_capacity((a.len() + b.len()).min(limit + 1));
        let (mut i, mut j) = (0, 0);
        while out.len() <= limit {
            let next = match (a.get(i), b.get(j)) {
                (Some(&x), Some(&y)) if x == y => {
                    i += 1;
                    j += 1;
                    x
                }
                (Some(&x), Some(&y)) if x < y => {
                    i += 1;
                    x
                }
                (_, Some(&y)) => {
                    j += 1;
                    y
                }
                (Some(&x), None) => {
                    i += 1;
                    x
                }
                (None, None) => break,
            };
            out.push(next);
        }
        if out.len() > limit {
            ValueSet::Overflowed
        } else {
            ValueSet::Exact(out)
        }
    }
}

/// A chunk's addresses of one family: listed (sorted) while the list is smaller than a
/// Bloom filter of them, else a Bloom filter with their range. Either answers "no" only
/// for an address (or prefix) no packet carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AddressSet<T> {
    Listed(ValueSet<T>),
    Bloom(AddressBloom<T>),
}

impl<T: BloomKey> AddressSet<T> {
    /// False only when no address `x` has `x & mask == addr`.
    pub(crate) fn may_contain_masked(&self, addr: T, mask: T) -> bool {
        match self {
            AddressSet::Listed(s) => s.may_contain_masked(addr, mask),
            AddressSet::Bloom(b) => {
                if addr.and(mask.not()) != T::ZERO {
                    return false;
                }
                // A prefix is a range, which the bounds answer; any other mask: maybe.
                !mask.is_prefix() || b.may_contain_range(addr, addr.or(mask.not()))
            }
        }
    }

    /// The union of two sets: a Bloom filter takes a list's addresses; two filters of one
    /// size are laid over each other; filters of different sizes give "any address".
    fn union(&self, other: &AddressSet<T>, limit: usize) -> AddressSet<T> {
        use AddressSet::{Bloom, Listed};
        match (self, other) {
            (Listed(a), Listed(b)) => Listed(a.union(b, limit)),
            (Bloom(b), Listed(ValueSet::Exact(v))) | (Listed(ValueSet::Exact(v)), Bloom(b)) => {
                let mut b = b.clone();
                b.insert_all(v);
                Bloom(b)
            }
            (Bloom(a), Bloom(b)) => a
                .union(b)
                .map_or(Listed(ValueSet::Overflowed), AddressSet::Bloom),
            _ => Listed(ValueSet::Overflowed),
        }
    }

    /// How the set is held, for `Display`: its count, `*` when overflowed, or its filter's
    /// size.
    fn describe(&self) -> String {
        match self {
            AddressSet::Listed(s) => s.describe(),
            AddressSet::Bloom(b) => format!("a {}-byte filter of", b.bytes().len()),
        }
    }
}

/// What one chunk of packets holds, as far as a libpcap filter can tell: the finished,
/// immutable form of a [`ChunkFilterBuilder`](crate::ChunkFilterBuilder).
///
/// # Encoding (version 2)
///
/// ```text
/// magic      4 bytes  "TDFI"
/// version    1 byte   2 (1: the same without Bloom filters; still read)
/// packets    varint   packets indexed
/// flags      varint   1 IPv4 frame seen, 2 IPv6 frame seen, 4 a frame that is neither,
///                     8 a non-first IP fragment, 16 a frame that could not be read
///                     (the index then answers "maybe" to everything); other bits: invalid
/// 8 sets, in this order:
///   IPv4 addresses (u32), IPv6 addresses (u128), IPv4 protocols (u8), IPv6 protocols (u8),
///   TCP ports (u16), UDP ports (u16), SCTP ports (u16), VLAN ids (0..=4095)
///   each:    varint   count × 2 + overflowed (an overflowed set has count 0 and means
///                     "any value")
///            count varints: the smallest value, then each next value's gap to the
///                     previous one minus 1 (values are strictly increasing)
///   or, for the two address sets only, a Bloom filter:
///            varint   3 (odd, as overflowed, with count 1)
///            varint   the smallest address;  varint  the largest minus the smallest
///            varint   blocks (1 to 131072)
///            blocks × 32 bytes: the Parquet format's split-block Bloom filter (eight
///                     little-endian u32 words per block), of each address's
///                     network-order bytes hashed with XXH64, seed 0
/// checksum   4 bytes  XXH32 (seed 0) of every byte before it, little-endian
/// ```
///
/// Example: 3 packets, IPv4 seen, addresses 10.0.0.1 and 10.0.0.2, TCP port 80, VLAN 100:
///
/// ```text
/// 54 44 46 49 02  03  01  04 81 80 80 50 00  00  00  00  02 50  00  00  02 64  (checksum)
/// magic     ver   pk  fl  IPv4: 2 values,    v6  p4  p6  TCP:   UDP SCTP VLAN:
///                         10.0.0.1, +0+1                 80             100
/// ```
///
/// Varints are unsigned LEB128, at most 19 bytes (128 bits), minimal (no trailing zero
/// groups). The encoding is canonical: one index has exactly one encoding, and
/// [`ChunkFilter::decode`] accepts nothing else (trailing bytes, unsorted or duplicate values,
/// values out of their range, unknown flags, an overflowed set with values).
///
/// Sizes: a chunk's index is a few bytes per distinct value (IPv4 addresses 2–5, ports 1–3,
/// IPv6 addresses up to 19); the builder caps each set at [`MAX_VALUES`], merges at
/// [`MAX_MERGED_VALUES`], and decoding refuses larger sets, so what a decoded index
/// allocates is bounded by its input's length (at most 16 bytes of values per input byte).
/// On traffic shaped like a busy link (`tests/cost.rs`) a 4 MiB chunk's index is about
/// 5 KB, 0.12 % of the chunk.
///
/// [`MAX_VALUES`]: crate::MAX_VALUES
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkFilter {
    pub(crate) packets: u64,
    pub(crate) flags: u32,
    pub(crate) ipv4: AddressSet<u32>,
    pub(crate) ipv6: AddressSet<u128>,
    pub(crate) ip_protocols: ValueSet<u8>,
    pub(crate) ip6_protocols: ValueSet<u8>,
    pub(crate) tcp_ports: ValueSet<u16>,
    pub(crate) udp_ports: ValueSet<u16>,
    pub(crate) sctp_ports: ValueSet<u16>,
    pub(crate) vlans: ValueSet<u16>,
}

impl Default for ChunkFilter {
    /// The index of no packets.
    fn default() -> Self {
        ChunkFilter {
            packets: 0,
            flags: 0,
            ipv4: AddressSet::Listed(ValueSet::Exact(Vec::new())),
            ipv6: AddressSet::Listed(ValueSet::Exact(Vec::new())),
            ip_protocols: ValueSet::Exact(Vec::new()),
            ip6_protocols: ValueSet::Exact(Vec::new()),
            tcp_ports: ValueSet::Exact(Vec::new()),
            udp_ports: ValueSet::Exact(Vec::new()),
            sctp_ports: ValueSet::Exact(Vec::new()),
            vlans: ValueSet::Exact(Vec::new()),
        }
    }
}

impl ChunkFilter {
    /// Packets indexed.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// True when no packet was indexed: no filter can match.
    pub fn is_empty(&self) -> bool {
        self.packets == 0
    }

    /// True when a packet could not be read (unknown link type, cut link or IP header):
    /// every filter may match.
    pub fn has_unreadable(&self) -> bool {
        self.flags & flag::UNPARSED != 0
    }

    pub(crate) fn has(&self, f: u32) -> bool {
        self.flags & f != 0
    }

    /// Adds `other`'s packets to this index (a file's summary from its chunks'). A set
    /// that would exceed [`MAX_MERGED_VALUES`] is marked overflowed.
    pub fn merge(&mut self, other: &ChunkFilter) {
        let l = MAX_MERGED_VALUES;
        self.ipv4 = self.ipv4.union(&other.ipv4, l);
        self.ipv6 = self.ipv6.union(&other.ipv6, l);
        self.merge_all_but_addresses(other);
    }

    /// [`merge`](Self::merge) of everything but the address sets (a file's summary
    /// gathers those as values).
    pub(crate) fn merge_all_but_addresses(&mut self, other: &ChunkFilter) {
        let l = MAX_MERGED_VALUES;
        self.packets = self.packets.saturating_add(other.packets);
        self.flags |= other.flags;
        self.ip_protocols = self.ip_protocols.union(&other.ip_protocols, l);
        self.ip6_protocols = self.ip6_protocols.union(&other.ip6_protocols, l);
        self.tcp_ports = self.tcp_ports.union(&other.tcp_ports, l);
        self.udp_ports = self.udp_ports.union(&other.udp_ports, l);
        self.sctp_ports = self.sctp_ports.union(&other.sctp_ports, l);
        self.vlans = self.vlans.union(&other.vlans, l);
    }

    /// The binary form described [above](ChunkFilter#encoding-version-2).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend(MAGIC);
        out.push(VERSION);
        put_varint(&mut out, self.packets.into());
        put_varint(&mut out, self.flags.into());
        put_address_set(&mut out, &self.ipv4);
        put_address_set(&mut out, &self.ipv6);
        put_set(&mut out, &self.ip_protocols);
        put_set(&mut out, &self.ip6_protocols);
        put_set(&mut out, &self.tcp_ports);
        put_set(&mut out, &self.udp_ports);
        put_set(&mut out, &self.sctp_ports);
        put_set(&mut out, &self.vlans);
        let sum = xxhash_rust::xxh32::xxh32(&out, 0);
        out.extend(sum.to_le_bytes());
        out
    }

    /// Reads what [`encode`](Self::encode) wrote. Never panics; refuses anything but a
    /// canonical encoding; allocates at most 16 bytes per input byte.
    pub fn decode(bytes: &[u8]) -> Result<ChunkFilter, DecodeError> {
        let min = HEADER_LEN + CHECKSUM_LEN;
        if bytes.len() < min {
            return Err(DecodeError::TooShort {
                len: bytes.len(),
                min,
            });
        }
        let (body, sum) = bytes.split_at(bytes.len() - CHECKSUM_LEN);
        let magic = [body[0], body[1], body[2], body[3]];
        if magic != MAGIC {
            return Err(DecodeError::BadMagic { found: magic });
        }
        let version = body[4];
        if version != 1 && version != VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let stored = u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]);
        let computed = xxhash_rust::xxh32::xxh32(body, 0);
        if stored != computed {
            return Err(DecodeError::Checksum { stored, computed });
        }
        let mut r = Reader {
            buf: body,
            pos: HEADER_LEN,
            blooms: version >= 2,
        };
        let packets = r.varint("packet count")?;
        let packets =
            u64::try_from(packets).map_err(|_| r.error("packet count", "over 64 bits"))?;
        let at = r.pos;
        let flags = r.varint("flags")?;
        if flags & !u128::from(flag::ALL) != 0 {
            return Err(DecodeError::Malformed {
                offset: at,
                what: "flags",
                problem: "unknown flag bits",
            });
        }
        let index = ChunkFilter {
            packets,
            flags: flags as u32,
            ipv4: r.address_set("IPv4 addresses", u32::MAX.into())?,
            ipv6: r.address_set("IPv6 addresses", u128::MAX)?,
            ip_protocols: r.set("IPv4 protocols", u8::MAX.into())?,
            ip6_protocols: r.set("IPv6 protocols", u8::MAX.into())?,
            tcp_ports: r.set("TCP ports", u16::MAX.into())?,
            udp_ports: r.set("UDP ports", u16::MAX.into())?,
            sctp_ports: r.set("SCTP ports", u16::MAX.into())?,
            vlans: r.set("VLAN ids", MAX_VLAN_ID)?,
        };
        if r.pos != body.len() {
            return Err(r.error("end", "bytes after the last set"));
        }
        Ok(index)
    }
}

impl fmt::Display for ChunkFilter {
    /// One line: packets, how many values each set holds (`*` when overflowed), flags.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn n<T: Copy + Ord>(s: &ValueSet<T>) -> String {
            s.describe()
        }
        write!(
            f,
            "{} packets; addresses {} IPv4, {} IPv6; protocols {} IPv4, {} IPv6; ports {} TCP, {} UDP, {} SCTP; {} VLANs",
            self.packets,
            self.ipv4.describe(),
            self.ipv6.describe(),
            n(&self.ip_protocols),
            n(&self.ip6_protocols),
            n(&self.tcp_ports),
            n(&self.udp_ports),
            n(&self.sctp_ports),
            n(&self.vlans),
        )?;
        for (bit, name) in [
            (flag::NON_IP, "non-IP frames"),
            (flag::FRAGMENT, "non-first fragments"),
            (flag::UNPARSED, "unreadable frames"),
        ] {
            if self.has(bit) {
                write!(f, "; {name}")?;
            }
        }
        Ok(())
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_set<T: Copy + Into<u128>>(out: &mut Vec<u8>, set: &ValueSet<T>) {
    let values = match set {
        ValueSet::Overflowed => return put_varint(out, HEAD_OVERFLOWED),
        ValueSet::Exact(v) => v,
    };
    put_varint(out, (values.len() as u128) << 1);
    let mut prev: Option<u128> = None;
    for &v in values {
        let v: u128 = v.into();
        put_varint(out, prev.map_or(v, |p| v - p - 1));
        prev = Some(v);
    }
}

/// The head of a set held as a Bloom filter (version 2): odd, as an overflowed set's, with
/// count 1.
const HEAD_BLOOM: u128 = 3;
const HEAD_OVERFLOWED: u128 = 1;

fn put_address_set<T: Copy + Into<u128>>(out: &mut Vec<u8>, set: &AddressSet<T>) {
    match set {
        AddressSet::Listed(s) => put_set(out, s),
        AddressSet::Bloom(b) => {
            let (lo, hi): (u128, u128) = (b.lo.into(), b.hi.into());
            put_varint(out, HEAD_BLOOM);
            put_varint(out, lo);
            put_varint(out, hi - lo);
            put_varint(out, (b.bytes().len() / BLOCK_BYTES) as u128);
            out.extend(b.bytes());
        }
    }
}

/// The encoded size of a listed set (what [`put_set`] writes).
/// Whether `values` (sorted, distinct) are kept as a list rather than a Bloom filter of
/// `bloom_bytes`: when the list is smaller and no longer than a decoder accepts
/// ([`MAX_MERGED_VALUES`]): a dense run of addresses lists in about a byte each, less than
/// a filter, but a list of more than that would not read back.
pub(crate) fn keep_listed<T: Copy + Into<u128>>(values: &[T], bloom_bytes: usize) -> bool {
    values.len() <= MAX_MERGED_VALUES && listed_len(values) <= bloom_bytes
}

pub(crate) fn listed_len<T: Copy + Into<u128>>(values: &[T]) -> usize {
    let varint_len = |v: u128| (128 - v.leading_zeros()).max(1).div_ceil(7) as usize;
    let mut prev: Option<u128> = None;
    let mut len = varint_len((values.len() as u128) << 1);
    for &v in values {
        let v: u128 = v.into();
        len += varint_len(prev.map_or(v, |p| v - p - 1));
        prev = Some(v);
    }
    len
}

/// A cursor over the body of an encoding: every read checks its bounds here.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Version 2: address sets may be Bloom filters.
    blooms: bool,
}

impl Reader<'_> {
    fn error(&self, what: &'static str, problem: &'static str) -> DecodeError {
        DecodeError::Malformed {
            offset: self.pos,
            what,
            problem,
        }
    }

    fn varint(&mut self, what: &'static str) -> Result<u128, DecodeError> {
        let start = self.pos;
        let mut v: u128 = 0;
        for i in 0..MAX_VARINT_LEN {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(self.error(what, "cut short"));
            };
            let group = u128::from(b & 0x7f);
            let shift = 7 * i as u32;
            if shift == 126 && group > 0b11 {
                return Err(self.error(what, "varint over 128 bits"));
            }
            v |= group << shift;
            self.pos += 1;
            if b & 0x80 == 0 {
                if b == 0 && self.pos - start > 1 {
                    return Err(DecodeError::Malformed {
                        offset: start,
                        what,
                        problem: "varint not minimal",
                    });
                }
                return Ok(v);
            }
        }
        Err(self.error(what, "varint over 19 bytes"))
    }

    fn set<T: TryFrom<u128>>(
        &mut self,
        what: &'static str,
        max: u128,
    ) -> Result<ValueSet<T>, DecodeError> {
        let head = self.varint(what)?;
        self.set_after(head, what, max)
    }

    fn address_set<T: TryFrom<u128> + BloomKey>(
        &mut self,
        what: &'static str,
        max: u128,
    ) -> Result<AddressSet<T>, DecodeError> {
        let head = self.varint(what)?;
        if head != HEAD_BLOOM || !self.blooms {
            return Ok(AddressSet::Listed(self.set_after(head, what, max)?));
        }
        let lo = self.varint(what)?;
        let span = self.varint(what)?;
        let hi = lo.checked_add(span).filter(|&hi| hi <= max);
        let (Ok(lo), Some(Ok(hi))) = (T::try_from(lo), hi.map(T::try_from)) else {
            return Err(self.error(what, "filter bounds out of range"));
        };
        let blocks = self.varint(what)?;
        if blocks == 0 || blocks > MAX_BLOCKS as u128 {
            return Err(self.error(what, "filter of no blocks, or of too many"));
        }
        let len = blocks as usize * BLOCK_BYTES;
        let Some(bytes) = self.buf.get(self.pos..self.pos + len) else {
            return Err(self.error(what, "filter cut short"));
        };
        self.pos += len;
        Ok(AddressSet::Bloom(AddressBloom::from_parts(lo, hi, bytes)))
    }

    /// A listed or overflowed set whose head was read.
    fn set_after<T: TryFrom<u128>>(
        &mut self,
        head: u128,
        what: &'static str,
        max: u128,
    ) -> Result<ValueSet<T>, DecodeError> {
        let count = head >> 1;
        if head & 1 == 1 {
            if count != 0 {
                return Err(self.error(what, "overflowed set with values"));
            }
            return Ok(ValueSet::Overflowed);
        }
        let remaining = self.buf.len() - self.pos;
        if count > MAX_MERGED_VALUES as u128 {
            return Err(self.error(what, "more values than a set may hold"));
        }
        // Every value takes at least one byte.
        if count > remaining as u128 {
            return Err(self.error(what, "more values than bytes left"));
        }
        let mut values = Vec::with_capacity(count as usize);
        let mut prev: Option<u128> = None;
        for _ in 0..count {
            let raw = self.varint(what)?;
            let v = match prev {
                None => Some(raw),
                Some(p) => p.checked_add(raw).and_then(|v| v.checked_add(1)),
            };
            let Some(v) = v.filter(|&v| v <= max) else {
                return Err(self.error(what, "value out of range"));
            };
            let Ok(t) = T::try_from(v) else {
                return Err(self.error(what, "value out of range"));
            };
            values.push(t);
            prev = Some(v);
        }
        Ok(ValueSet::Exact(values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed<T>(v: Vec<T>) -> AddressSet<T> {
        AddressSet::Listed(ValueSet::Exact(v))
    }

    fn sample() -> ChunkFilter {
        ChunkFilter {
            packets: 1234,
            flags: flag::IPV4 | flag::IPV6 | flag::FRAGMENT,
            ipv4: listed(vec![0, 0x0a00_0001, 0x0a00_0002, u32::MAX]),
            ipv6: listed(vec![1, 0x2001_0db8 << 96, u128::MAX]),
            ip_protocols: ValueSet::Exact(vec![1, 6, 17]),
            ip6_protocols: ValueSet::Exact(vec![0, 58, 255]),
            tcp_ports: ValueSet::Exact(vec![22, 80, 443, 65535]),
            udp_ports: ValueSet::Overflowed,
            sctp_ports: ValueSet::Exact(vec![]),
            vlans: ValueSet::Exact(vec![0, 100, 4095]),
        }
    }

    /// Re-seals a body whose bytes a test changed.
    fn reseal(mut bytes: Vec<u8>) -> Vec<u8> {
        bytes.truncate(bytes.len() - CHECKSUM_LEN);
        let sum = xxhash_rust::xxh32::xxh32(&bytes, 0);
        bytes.extend(sum.to_le_bytes());
        bytes
    }

    #[test]
    fn round_trip() {
        for index in [sample(), ChunkFilter::default()] {
            let bytes = index.encode();
            assert_eq!(ChunkFilter::decode(&bytes), Ok(index.clone()));
        }
    }

    #[test]
    fn bloom_sets_round_trip_and_answer() {
        let v4: Vec<u32> = (0..20_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let v6: Vec<u128> = v4
            .iter()
            .map(|&a| (0xfd00u128 << 112) | u128::from(a))
            .collect();
        let index = ChunkFilter {
            packets: 20_000,
            flags: flag::IPV4 | flag::IPV6,
            ipv4: AddressSet::Bloom(AddressBloom::of(v4.iter().copied(), v4.len())),
            ipv6: AddressSet::Bloom(AddressBloom::of(v6.iter().copied(), v6.len())),
            ..ChunkFilter::default()
        };
        let bytes = index.encode();
        let back = ChunkFilter::decode(&bytes).unwrap();
        assert_eq!(back, index);
        assert_eq!(back.encode(), bytes);
        assert!(v4
            .iter()
            .all(|&a| back.ipv4.may_contain_masked(a, u32::MAX)));
        assert!(v6
            .iter()
            .all(|&a| back.ipv6.may_contain_masked(a, u128::MAX)));
        // A prefix answers from the bounds: fd00::/16 may, fe80::/10 may not.
        assert!(back
            .ipv6
            .may_contain_masked(0xfd00u128 << 112, !0u128 << 112));
        assert!(!back
            .ipv6
            .may_contain_masked(0xfe80u128 << 112, !0u128 << 118));
        assert!(
            back.to_string().contains("a 30016-byte filter of IPv4"),
            "{back}"
        );
    }

    #[test]
    fn documented_example() {
        let mut bytes = vec![
            0x54, 0x44, 0x46, 0x49, 0x02, 0x03, 0x01, 0x04, 0x81, 0x80, 0x80, 0x50, 0x00, 0x00,
            0x00, 0x00, 0x02, 0x50, 0x00, 0x00, 0x02, 0x64,
        ];
        bytes.extend(xxhash_rust::xxh32::xxh32(&bytes, 0).to_le_bytes());
        let index = ChunkFilter {
            packets: 3,
            flags: flag::IPV4,
            ipv4: listed(vec![0x0a00_0001, 0x0a00_0002]),
            tcp_ports: ValueSet::Exact(vec![80]),
            vlans: ValueSet::Exact(vec![100]),
            ..ChunkFilter::default()
        };
        assert_eq!(ChunkFilter::decode(&bytes), Ok(index.clone()));
        assert_eq!(index.encode(), bytes);
        // Version 1, as files written before the Bloom filters hold it, reads the same.
        let mut v1 = bytes[..bytes.len() - CHECKSUM_LEN].to_vec();
        v1[4] = 1;
        v1.extend(xxhash_rust::xxh32::xxh32(&v1, 0).to_le_bytes());
        assert_eq!(ChunkFilter::decode(&v1), Ok(index));
    }

    #[test]
    fn empty_index_layout() {
        let bytes = ChunkFilter::default().encode();
        assert_eq!(&bytes[..5], b"TDFI\x02");
        // packets 0, flags 0, eight empty sets, checksum.
        assert_eq!(&bytes[5..15], &[0; 10]);
        assert_eq!(bytes.len(), 19);
    }

    #[test]
    fn varint_edges() {
        for v in [0, 1, 127, 128, 16383, 16384, u64::MAX as u128, u128::MAX] {
            let mut out = vec![];
            put_varint(&mut out, v);
            let mut r = Reader {
                buf: &out,
                pos: 0,
                blooms: true,
            };
            assert_eq!(r.varint("v"), Ok(v));
            assert_eq!(r.pos, out.len());
        }
        let mut max = vec![];
        put_varint(&mut max, u128::MAX);
        assert_eq!(max.len(), MAX_VARINT_LEN);
        assert_eq!(max[18], 0x03);
        let bad: [&[u8]; 4] = [
            &[0x80],       // cut
            &[0x80, 0x00], // not minimal
            &[0xff; 19],   // too long
            &[
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                0xff, 0xff, 0xff, 0xff, 0x04,
            ], // 130 bits
        ];
        for b in bad {
            assert!(
                Reader {
                    buf: b,
                    pos: 0,
                    blooms: true
                }
                .varint("v")
                .is_err(),
                "{b:02x?}"
            );
        }
    }

    #[test]
    fn rejects_corrupt_input() {
        let good = sample().encode();
        assert!(matches!(
            ChunkFilter::decode(&good[..8]),
            Err(DecodeError::TooShort { len: 8, min: 9 })
        ));
        let mut b = good.clone();
        b[0] = b'X';
        assert!(matches!(
            ChunkFilter::decode(&b),
            Err(DecodeError::BadMagic { .. })
        ));
        let mut b = good.clone();
        b[4] = 3;
        assert_eq!(
            ChunkFilter::decode(&b),
            Err(DecodeError::UnsupportedVersion(3))
        );
        // Any single flipped bit is caught by the checksum.
        for i in HEADER_LEN..good.len() {
            for bit in 0..8 {
                let mut b = good.clone();
                b[i] ^= 1 << bit;
                assert!(ChunkFilter::decode(&b).is_err(), "byte {i} bit {bit}");
            }
        }
        // Every truncation fails.
        for n in 0..good.len() {
            assert!(ChunkFilter::decode(&good[..n]).is_err());
        }
        // Also with a valid checksum over the cut body.
        for n in HEADER_LEN + CHECKSUM_LEN..good.len() {
            assert!(
                ChunkFilter::decode(&reseal(good[..n].to_vec())).is_err(),
                "{n}"
            );
        }
    }

    fn body(parts: &[&[u8]]) -> Vec<u8> {
        let mut b = b"TDFI\x02".to_vec();
        for p in parts {
            b.extend(*p);
        }
        b.extend([0; 4]);
        reseal(b)
    }

    fn problem(bytes: &[u8]) -> &'static str {
        match ChunkFilter::decode(bytes) {
            Err(DecodeError::Malformed { problem, .. }) => problem,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rejects_non_canonical_sets() {
        let empty6 = [0u8; 6];
        // Unknown flag.
        assert_eq!(
            problem(&body(&[&[0, 32, 0, 0], &empty6])),
            "unknown flag bits"
        );
        // IPv4 set: 2 values, the second's gap leaves u32.
        assert_eq!(
            problem(&body(&[
                &[1, 0, 4, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 0],
                &empty6
            ])),
            "value out of range"
        );
        // VLAN id 4096.
        assert_eq!(
            problem(&body(&[&[1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0x80, 0x20]])),
            "value out of range"
        );
        // Overflowed with a count (a port set; an address set's head 3 is a Bloom filter).
        assert_eq!(
            problem(&body(&[&[1, 0, 0, 0, 0, 0, 3], &[0; 3]])),
            "overflowed set with values"
        );
        // Bloom filters: no blocks; bounds past u32; cut short.
        assert_eq!(
            problem(&body(&[&[1, 0, 3, 0, 0, 0], &[0; 7]])),
            "filter of no blocks, or of too many"
        );
        assert_eq!(
            problem(&body(&[
                &[1, 0, 3, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 1],
                &[0; 32],
                &[0; 7]
            ])),
            "filter bounds out of range"
        );
        assert_eq!(
            problem(&body(&[&[1, 0, 3, 0, 0, 1], &[0; 31]])),
            "filter cut short"
        );
        // Version 1 has no filters: head 3 there is an overflowed set with a count.
        let mut v1 = body(&[&[1, 0, 3, 0, 0, 1], &[0; 32], &[0; 7]]);
        v1[4] = 1;
        assert_eq!(problem(&reseal(v1)), "overflowed set with values");
        // A count larger than the bytes left.
        assert_eq!(
            problem(&body(&[&[1, 0, 0xc8, 0x01]])),
            "more values than bytes left"
        );
        // A count beyond any set's limit.
        assert_eq!(
            problem(&body(&[&[1, 0, 0x82, 0x80, 0x08]])),
            "more values than a set may hold"
        );
        // Trailing bytes.
        assert_eq!(
            problem(&body(&[&[1, 0], &[0; 8], &[0]])),
            "bytes after the last set"
        );
        // Cut inside the sets.
        assert_eq!(problem(&body(&[&[1, 0], &[0; 7]])), "cut short");
        // Well formed: a duplicate is impossible to write (gaps are at least 1).
        let ok = body(&[&[1, 1, 4, 10, 0], &[0; 7]]);
        let i = ChunkFilter::decode(&ok).unwrap();
        assert_eq!(i.ipv4, listed(vec![10, 11]));
        assert_eq!(i.encode(), ok);
    }

    #[test]
    fn merge_is_a_union() {
        let mut a = sample();
        let mut b = ChunkFilter {
            packets: 10,
            flags: flag::UNPARSED,
            ipv4: listed(vec![5, 0x0a00_0002]),
            tcp_ports: ValueSet::Overflowed,
            udp_ports: ValueSet::Exact(vec![53]),
            sctp_ports: ValueSet::Exact(vec![9]),
            ..ChunkFilter::default()
        };
        a.merge(&b);
        assert_eq!(a.packets, 1244);
        assert!(a.has_unreadable() && a.has(flag::FRAGMENT));
        assert_eq!(
            a.ipv4,
            listed(vec![0, 5, 0x0a00_0001, 0x0a00_0002, u32::MAX])
        );
        assert_eq!(a.tcp_ports, ValueSet::Overflowed);
        assert_eq!(a.udp_ports, ValueSet::Overflowed);
        assert_eq!(a.sctp_ports, ValueSet::Exact(vec![9]));
        assert_eq!(a.vlans, sample().vlans);
        b.merge(&ChunkFilter::default());
        assert_eq!(b.packets, 10);
        // The merged limit.
        let big = |from: u32| listed((from..from + 40_000).collect::<Vec<u32>>());
        let mut x = ChunkFilter {
            ipv4: big(0),
            ..ChunkFilter::default()
        };
        x.merge(&ChunkFilter {
            ipv4: big(20_000),
            ..ChunkFilter::default()
        });
        assert_eq!(x.ipv4.describe(), "60000");
        x.merge(&ChunkFilter {
            ipv4: big(100_000),
            ..ChunkFilter::default()
        });
        assert_eq!(x.ipv4, AddressSet::Listed(ValueSet::Overflowed));
        let round = ChunkFilter::decode(&x.encode()).unwrap();
        assert_eq!(round, x);
    }

    #[test]
    fn masked_lookups() {
        let s = ValueSet::Exact(vec![0x0a00_0001u32, 0x0a01_0203, 0xc0a8_0101]);
        assert!(s.may_contain_masked(0x0a00_0000, 0xff00_0000));
        assert!(s.may_contain_masked(0x0a01_0000, 0xffff_0000));
        assert!(!s.may_contain_masked(0x0a02_0000, 0xffff_0000));
        assert!(s.may_contain_masked(0xc0a8_0101, u32::MAX));
        assert!(!s.may_contain_masked(0xc0a8_0102, u32::MAX));
        assert!(s.may_contain_masked(0, 0), "net 0/0");
        // Non-contiguous mask: 10.x.x.1.
        assert!(s.may_contain_masked(0x0a00_0001, 0xff00_00ff));
        assert!(!s.may_contain_masked(0x0a00_0002, 0xff00_00ff));
        // Bits outside the mask: libpcap's comparison can never be true.
        assert!(!s.may_contain_masked(0x0a00_0001, 0xff00_0000));
        assert!(!ValueSet::<u32>::Exact(vec![]).may_contain_masked(0, 0));
        assert!(ValueSet::<u32>::Overflowed.may_contain_masked(1, u32::MAX));
    }

    #[test]
    fn display() {
        assert_eq!(
            sample().to_string(),
            "1234 packets; addresses 4 IPv4, 3 IPv6; protocols 3 IPv4, 3 IPv6; ports 4 TCP, * UDP, 0 SCTP; 3 VLANs; non-first fragments"
        );
    }
}
