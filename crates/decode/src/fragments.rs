//! IP fragment reassembly (RFC 791 §3.2 for IPv4, RFC 8200 §4.5 for IPv6), bounded for
//! hostile traces.
//!
//! [`FragmentReassembler::insert`] takes a dissected fragment ([`Headers::fragment`]) and
//! gives back the whole datagram when this fragment completes it. Datagrams are keyed by
//! (source, destination, protocol, identification) for IPv4 and (source, destination,
//! identification) for IPv6, whose fragment header's identification is 32 bits and whose
//! next header may differ between fragments only in a malformed datagram.
//!
//! Rules:
//! - **Time**: packet time, never the clock. A datagram not complete `timeout_ns` after its
//!   first fragment arrived (30 s, as Linux' `ipfrag_time`) is dropped and counted. "Now" is
//!   the latest packet time seen, so a trace whose times step back does not revive anything.
//! - **Which packet a datagram belongs to**: the fragment that completes it (the last to
//!   arrive, not necessarily the one with the highest offset). tshark shows the reassembled
//!   datagram in that frame too ("Reassembled IPv4 in frame"), so RPC rows compare frame by
//!   frame, and a reply can never be dated before the last byte of its call arrived.
//! - **Duplicates**: a fragment with the same offset and length as one held is dropped
//!   (RFC 8200 §4.5 allows this for IPv6; retransmitted fragments are common).
//! - **Overlaps**: IPv6 drops the whole datagram (RFC 5722); later fragments of it are
//!   absorbed until its timeout so they do not start a new datagram. IPv4 keeps the bytes
//!   that arrived first ("first wins", as BSD and Windows do; RFC 791 leaves it open): only
//!   the parts of a later fragment not yet covered are taken.
//! - **Malformed**: a datagram longer than 65535 bytes, two different ends (last fragments
//!   disagreeing, or data past the end), or an IPv6 non-last fragment whose length is not a
//!   multiple of 8, is dropped and counted as invalid.
//! - **Bounds**: at most `max_datagrams` in progress and `max_bytes` of captured bytes held;
//!   beyond either, the oldest datagrams (by first arrival, then arrival order) are evicted,
//!   so the result is a function of the input alone.
//! - **Snap length**: a fragment cut by the capture holds only its captured bytes; the
//!   datagram's payload is then its captured prefix, and `wire_len` still says how long it was.
//!
//! Memory grows only with bytes actually captured, within `max_bytes`.

use std::collections::{BTreeMap, HashMap};

use crate::packet::{transport, Headers, IpHeader};
use crate::wire::ExtensionChain;

/// Largest IP datagram payload the offset field can address.
const MAX_DATAGRAM: u32 = 65_535;

/// Bounds of a [`FragmentReassembler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentConfig {
    /// A datagram incomplete this long (packet time) after its first fragment is dropped.
    pub timeout_ns: u64,
    /// Captured bytes held over all datagrams in progress.
    pub max_bytes: usize,
    /// Datagrams in progress.
    pub max_datagrams: usize,
}

impl Default for FragmentConfig {
    fn default() -> Self {
        FragmentConfig {
            timeout_ns: 30_000_000_000,
            max_bytes: 64 << 20,
            max_datagrams: 16_384,
        }
    }
}

/// What the reassembler did, for the converter's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FragmentCounters {
    /// Fragments taken in (valid enough to key).
    pub fragments: u64,
    /// Datagrams made whole.
    pub reassembled: u64,
    /// Datagrams dropped because they were incomplete after the timeout.
    pub timed_out: u64,
    /// Datagrams in which fragments overlapped (IPv6: dropped; IPv4: kept, first wins).
    pub overlapped: u64,
    /// Of those, IPv6 datagrams dropped for it.
    pub overlap_dropped: u64,
    /// Fragments dropped as exact duplicates of one held.
    pub duplicates: u64,
    /// Datagrams evicted to stay within `max_bytes` or `max_datagrams`.
    pub evicted: u64,
    /// Datagrams dropped as malformed (see the module docs).
    pub invalid: u64,
}

/// (version, source, destination, protocol — 0 for IPv6, identification).
type Key = (u8, [u8; 16], [u8; 16], u8, u32);

/// A run of a datagram's bytes: its place on the wire and the bytes of it captured.
#[derive(Debug)]
struct Piece {
    start: u32,
    end: u32,
    data: Vec<u8>,
}

#[derive(Debug)]
struct Datagram {
    /// Pieces by start; they never overlap.
    pieces: BTreeMap<u32, Piece>,
    /// Where the datagram ends, once the last fragment came.
    end: Option<u32>,
    /// Time of the first fragment, and its place in the age order.
    first_ns: u64,
    seq: u64,
    held: usize,
    overlapped: bool,
    /// Dropped (IPv6 overlap): absorbs its remaining fragments until the timeout.
    dead: bool,
}

impl Datagram {
    /// The pieces' bytes in order, up to the first one the snap length cut: what follows
    /// it is not contiguous.
    fn joined(&self) -> Vec<u8> {
        let mut data = Vec::with_capacity(self.held);
        for p in self.pieces.values() {
            data.extend_from_slice(&p.data);
            if p.data.len() < (p.end - p.start) as usize {
                break;
            }
        }
        data
    }
}

/// A datagram made whole by its last fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reassembled {
    /// The last fragment's IP header, as if unfragmented: `protocol` is the datagram's,
    /// `fragment` is false.
    pub ip: IpHeader,
    /// The datagram's data from its start (IPv4: after the IP header; IPv6: the
    /// fragmentable part), as far as it was captured without a gap.
    pub data: Vec<u8>,
    /// Its length on the wire.
    pub wire_len: u32,
}

impl Reassembled {
    /// The datagram dissected like a frame: transport header and payload from `data`
    /// (through any IPv6 extension headers of the fragmentable part). `vlan` and
    /// `ethertype` are taken from `outer`, the last fragment's headers.
    pub fn headers<'a>(&'a self, outer: &Headers<'_>) -> Headers<'a> {
        let mut h = Headers {
            vlan: outer.vlan,
            ethertype: outer.ethertype,
            ..Headers::default()
        };
        let mut ip = self.ip;
        let wire = self.wire_len as usize;
        let (proto, off) = if ip.version == 6 {
            let chain = ExtensionChain::walk(ip.protocol, &self.data);
            if chain.end.is_err() {
                h.ip = Some(ip);
                h.truncated = true;
                return h;
            }
            (chain.next_header, chain.len)
        } else {
            (ip.protocol, 0)
        };
        ip.protocol = proto;
        h.ip = Some(ip);
        h.network_end = off as u32;
        transport(&mut h, &self.data, off, wire, proto);
        h
    }
}

/// Reassembles IP fragments; see the module docs for the rules and bounds.
#[derive(Debug)]
pub struct FragmentReassembler {
    config: FragmentConfig,
    datagrams: HashMap<Key, Datagram>,
    /// Age order: (first arrival time, sequence) → key.
    by_age: BTreeMap<(u64, u64), Key>,
    held: usize,
    now_ns: u64,
    seq: u64,
    counters: FragmentCounters,
}

impl Default for FragmentReassembler {
    fn default() -> Self {
        FragmentReassembler::new(FragmentConfig::default())
    }
}

impl FragmentReassembler {
    pub fn new(config: FragmentConfig) -> FragmentReassembler {
        FragmentReassembler {
            config,
            datagrams: HashMap::new(),
            by_age: BTreeMap::new(),
            held: 0,
            now_ns: 0,
            seq: 0,
            counters: FragmentCounters::default(),
        }
    }

    pub fn counters(&self) -> &FragmentCounters {
        &self.counters
    }

    /// Zeroes the counters (the state stays): the converter's warm-up over the previous
    /// file's end counts nothing.
    pub fn reset_counters(&mut self) {
        self.counters = FragmentCounters::default();
    }

    /// Datagrams in progress (dropped ones waiting out their timeout excluded), and the
    /// fragments they hold.
    pub fn in_progress(&self) -> (usize, usize) {
        let live = self.datagrams.values().filter(|d| !d.dead);
        live.fold((0, 0), |(n, f), d| (n + 1, f + d.pieces.len()))
    }

    /// Takes one dissected packet at `time_ns`. Returns the datagram when this packet is a
    /// fragment that completes one; None for everything else (not a fragment, or one held).
    pub fn insert(&mut self, h: &Headers<'_>, frame: &[u8], time_ns: u64) -> Option<Reassembled> {
        let (Some(ip), Some(f)) = (h.ip, h.fragment) else {
            return None;
        };
        self.now_ns = self.now_ns.max(time_ns);
        self.expire();
        self.counters.fragments += 1;
        let key: Key = (
            ip.version,
            ip.src,
            ip.dst,
            if ip.version == 4 { f.protocol } else { 0 },
            f.ident,
        );
        let start = u32::from(f.offset);
        let end = start + f.data_wire_len;
        let captured = frame
            .get(f.data_offset as usize..)
            .unwrap_or_default()
            .get(..f.data_wire_len as usize)
            .unwrap_or_else(|| frame.get(f.data_offset as usize..).unwrap_or_default());
        let bad_v6_len = ip.version == 6 && f.more && f.data_wire_len % 8 != 0;
        let bad = end > MAX_DATAGRAM || bad_v6_len || (f.more && f.data_wire_len == 0);
        if !self.datagrams.contains_key(&key) {
            if bad {
                self.counters.invalid += 1;
                return None;
            }
            self.open(key);
        }
        let d = self.datagrams.get_mut(&key).expect("inserted above");
        if d.dead {
            return None;
        }
        let ends_disagree = match (f.more, d.end) {
            (false, Some(e)) => e != end,
            (false, None) => d.pieces.values().any(|p| p.end > end),
            (true, Some(e)) => end > e,
            (true, None) => false,
        };
        if bad || ends_disagree {
            self.counters.invalid += 1;
            self.remove(&key);
            return None;
        }
        if !f.more {
            d.end = Some(end);
        }
        let added = match add_piece(d, ip.version, start, end, captured) {
            Added::Duplicate => {
                self.counters.duplicates += 1;
                0
            }
            Added::Bytes(n, overlap) => {
                if overlap && !d.overlapped {
                    d.overlapped = true;
                    self.counters.overlapped += 1;
                }
                n
            }
            Added::Dropped => {
                if !d.overlapped {
                    self.counters.overlapped += 1;
                }
                d.overlapped = true;
                d.dead = true;
                self.counters.overlap_dropped += 1;
                self.held -= d.held;
                d.held = 0;
                d.pieces.clear();
                return None;
            }
        };
        d.held += added;
        self.held += added;
        if let Some(total) = d.end.filter(|&e| covered(d, e)) {
            let d = self.remove(&key).expect("present");
            self.counters.reassembled += 1;
            let ip = IpHeader {
                protocol: f.protocol,
                fragment: false,
                fragment_offset: 0,
                ..ip
            };
            return Some(Reassembled {
                ip,
                data: d.joined(),
                wire_len: total,
            });
        }
        while self.held > self.config.max_bytes {
            self.evict_oldest();
        }
        None
    }

    /// Starts a datagram for `key`'s first fragment, making room under the cap on
    /// datagrams (oldest first).
    fn open(&mut self, key: Key) {
        self.seq += 1;
        let d = Datagram {
            pieces: BTreeMap::new(),
            end: None,
            first_ns: self.now_ns,
            seq: self.seq,
            held: 0,
            overlapped: false,
            dead: false,
        };
        self.by_age.insert((d.first_ns, d.seq), key);
        self.datagrams.insert(key, d);
        while self.datagrams.len() > self.config.max_datagrams {
            self.evict_oldest();
        }
    }

    /// Drops datagrams whose timeout has passed (oldest first).
    fn expire(&mut self) {
        while let Some((&(first, _), &key)) = self.by_age.first_key_value() {
            if self.now_ns.saturating_sub(first) <= self.config.timeout_ns {
                break;
            }
            if let Some(d) = self.remove(&key) {
                if !d.dead {
                    self.counters.timed_out += 1;
                }
            }
        }
    }

    fn evict_oldest(&mut self) {
        if let Some((_, key)) = self.by_age.pop_first() {
            if let Some(d) = self.datagrams.remove(&key) {
                self.held -= d.held;
                if !d.dead {
                    self.counters.evicted += 1;
                }
            }
        }
    }

    fn remove(&mut self, key: &Key) -> Option<Datagram> {
        let d = self.datagrams.remove(key)?;
        self.by_age.remove(&(d.first_ns, d.seq));
        self.held -= d.held;
        Some(d)
    }
}

enum Added {
    /// Same place as a piece held: nothing taken.
    Duplicate,
    /// Bytes taken, and whether the fragment overlapped others.
    Bytes(usize, bool),
    /// IPv6 overlap: the datagram is to be dropped.
    Dropped,
}

/// Adds the fragment [start, end) with its captured bytes to `d`, by the overlap rules.
fn add_piece(d: &mut Datagram, version: u8, start: u32, end: u32, captured: &[u8]) -> Added {
    if d.pieces.get(&start).is_some_and(|p| p.end == end) {
        return Added::Duplicate;
    }
    // Pieces that may overlap [start, end): the one starting before it, and those inside.
    let before = d
        .pieces
        .range(..start)
        .next_back()
        .map(|(_, p)| (p.start, p.end));
    let mut held: Vec<(u32, u32)> = before.into_iter().filter(|&(_, e)| e > start).collect();
    held.extend(d.pieces.range(start..end).map(|(_, p)| (p.start, p.end)));
    if held.is_empty() {
        let n = captured.len();
        d.pieces.insert(
            start,
            Piece {
                start,
                end,
                data: captured.to_vec(),
            },
        );
        return Added::Bytes(n, false);
    }
    if version == 6 {
        return Added::Dropped;
    }
    // IPv4, first wins: take only the gaps between the pieces held.
    let mut taken = 0;
    let mut at = start;
    let mut gaps = Vec::new();
    for (s, e) in held {
        if s > at {
            gaps.push((at, s.min(end)));
        }
        at = at.max(e);
    }
    if at < end {
        gaps.push((at, end));
    }
    for (s, e) in gaps {
        let from = ((s - start) as usize).min(captured.len());
        let to = ((e - start) as usize).min(captured.len());
        taken += to - from;
        d.pieces.insert(
            s,
            Piece {
                start: s,
                end: e,
                data: captured[from..to].to_vec(),
            },
        );
    }
    Added::Bytes(taken, true)
}

/// Whether the pieces cover [0, end) without a gap.
fn covered(d: &Datagram, end: u32) -> bool {
    let mut at = 0;
    for p in d.pieces.values() {
        if p.start > at {
            return false;
        }
        at = at.max(p.end);
    }
    at >= end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{dissect, Transport, LINKTYPE_RAW};

    /// A UDP datagram (header + payload) from 10.0.0.1:800 to 10.0.0.2:2049.
    fn udp(payload: &[u8]) -> Vec<u8> {
        let len = (8 + payload.len()) as u16;
        let mut d = vec![0x03, 0x20, 0x08, 0x01];
        d.extend(len.to_be_bytes());
        d.extend([0, 0]);
        d.extend(payload);
        d
    }

    /// An IPv4 fragment of `data` at byte `off` (a multiple of 8) with `len` bytes.
    fn v4(ident: u16, data: &[u8], off: usize, len: usize, more: bool) -> Vec<u8> {
        let body = &data[off..(off + len).min(data.len())];
        let total = (20 + body.len()) as u16;
        let flags = ((off / 8) as u16) | if more { 0x2000 } else { 0 };
        let mut f = vec![0x45, 0];
        f.extend(total.to_be_bytes());
        f.extend(ident.to_be_bytes());
        f.extend(flags.to_be_bytes());
        f.extend([64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend(body);
        f
    }

    /// An IPv6 fragment (fragment header, next header UDP) of `data`.
    fn v6(ident: u32, data: &[u8], off: usize, len: usize, more: bool) -> Vec<u8> {
        let body = &data[off..(off + len).min(data.len())];
        let mut f = vec![0x60, 0, 0, 0];
        f.extend(((8 + body.len()) as u16).to_be_bytes());
        f.extend([44, 64]);
        f.extend([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        let fo = (off as u16) | u16::from(more);
        f.extend([17, 0]);
        f.extend(fo.to_be_bytes());
        f.extend(ident.to_be_bytes());
        f.extend(body);
        f
    }

    fn feed(r: &mut FragmentReassembler, frame: &[u8], t: u64) -> Option<Reassembled> {
        let h = dissect(LINKTYPE_RAW, frame);
        r.insert(&h, frame, t)
    }

    fn payload() -> Vec<u8> {
        (0..100u8).collect()
    }

    fn check_whole(d: &Reassembled, frame: &[u8], want: &[u8]) {
        assert_eq!(d.data, udp(want));
        assert_eq!(d.wire_len as usize, 8 + want.len());
        let outer = dissect(LINKTYPE_RAW, frame);
        let h = d.headers(&outer);
        let Transport::Udp(u) = h.transport else {
            panic!("no udp")
        };
        assert_eq!((u.src_port, u.dst_port), (800, 2049));
        assert_eq!(h.payload, want);
        assert_eq!(h.payload_wire_len as usize, want.len());
        assert!(!h.ip.unwrap().fragment);
    }

    #[test]
    fn in_order_and_out_of_order_v4() {
        let p = payload();
        let d = udp(&p);
        let frags = [
            v4(7, &d, 0, 48, true),
            v4(7, &d, 48, 48, true),
            v4(7, &d, 96, 12, false),
        ];
        for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0], [2, 1, 0]] {
            let mut r = FragmentReassembler::default();
            assert!(feed(&mut r, &frags[order[0]], 1).is_none());
            assert!(feed(&mut r, &frags[order[1]], 2).is_none());
            let whole = feed(&mut r, &frags[order[2]], 3).expect("complete");
            check_whole(&whole, &frags[order[2]], &p);
            assert_eq!(r.counters().reassembled, 1);
            assert_eq!(r.in_progress(), (0, 0));
        }
    }

    #[test]
    fn in_order_and_out_of_order_v6() {
        let p = payload();
        let d = udp(&p);
        let frags = [v6(9, &d, 0, 56, true), v6(9, &d, 56, 52, false)];
        for order in [[0, 1], [1, 0]] {
            let mut r = FragmentReassembler::default();
            assert!(feed(&mut r, &frags[order[0]], 1).is_none());
            let whole = feed(&mut r, &frags[order[1]], 2).expect("complete");
            check_whole(&whole, &frags[order[1]], &p);
        }
    }

    #[test]
    fn duplicates_are_dropped() {
        let p = payload();
        let d = udp(&p);
        let mut r = FragmentReassembler::default();
        let a = v4(1, &d, 0, 56, true);
        assert!(feed(&mut r, &a, 1).is_none());
        assert!(feed(&mut r, &a, 2).is_none());
        assert!(feed(&mut r, &v4(1, &d, 56, 52, false), 3).is_some());
        assert_eq!(r.counters().duplicates, 1);
        assert_eq!(r.counters().overlapped, 0);
        // A duplicate after completion starts a datagram that never completes.
        assert!(feed(&mut r, &a, 4).is_none());
        assert_eq!(r.in_progress(), (1, 1));
        let mut r = FragmentReassembler::default();
        let a = v6(1, &d, 0, 56, true);
        feed(&mut r, &a, 1);
        feed(&mut r, &a, 2);
        assert!(feed(&mut r, &v6(1, &d, 56, 52, false), 3).is_some());
        assert_eq!(r.counters().duplicates, 1);
    }

    #[test]
    fn overlap_v4_first_wins() {
        let p = payload();
        let d = udp(&p);
        let mut other = d.clone();
        other.iter_mut().skip(8).for_each(|b| *b ^= 0xff);
        let mut r = FragmentReassembler::default();
        assert!(feed(&mut r, &v4(2, &d, 0, 56, true), 1).is_none());
        // Overlaps bytes 48..56 with different content: the first fragment's bytes stay.
        assert!(feed(&mut r, &v4(2, &other, 48, 16, true), 2).is_none());
        let whole = feed(&mut r, &v4(2, &d, 64, 44, false), 3).expect("complete");
        let mut want = d.clone();
        want[56..64].copy_from_slice(&other[56..64]);
        assert_eq!(whole.data, want);
        assert_eq!(r.counters().overlapped, 1);
        assert_eq!(r.counters().reassembled, 1);
    }

    #[test]
    fn overlap_v6_drops_the_datagram() {
        let p = payload();
        let d = udp(&p);
        let mut r = FragmentReassembler::default();
        assert!(feed(&mut r, &v6(3, &d, 0, 56, true), 1).is_none());
        assert!(feed(&mut r, &v6(3, &d, 48, 16, true), 2).is_none());
        // The rest comes, but the datagram is gone (and its late fragments are absorbed).
        assert!(feed(&mut r, &v6(3, &d, 0, 56, true), 3).is_none());
        assert!(feed(&mut r, &v6(3, &d, 56, 52, false), 4).is_none());
        assert_eq!(r.counters().overlapped, 1);
        assert_eq!(r.counters().overlap_dropped, 1);
        assert_eq!(r.counters().reassembled, 0);
        assert_eq!(r.in_progress(), (0, 0));
        // After its timeout the identification is free again, and nothing counts as timed out.
        assert!(feed(&mut r, &v6(3, &d, 0, 56, true), 40_000_000_000).is_none());
        assert!(feed(&mut r, &v6(3, &d, 56, 52, false), 40_000_000_001).is_some());
        assert_eq!(r.counters().timed_out, 0);
    }

    #[test]
    fn timeout_in_packet_time() {
        let d = udp(&payload());
        let mut r = FragmentReassembler::default();
        feed(&mut r, &v4(4, &d, 0, 56, true), 1_000);
        // 30 s later it is still there; just past, it is dropped.
        assert!(feed(&mut r, &v4(5, &d, 0, 56, true), 30_000_001_000).is_none());
        assert_eq!(r.counters().timed_out, 0);
        assert!(feed(&mut r, &v4(4, &d, 56, 52, false), 30_000_001_001).is_none());
        assert_eq!(r.counters().timed_out, 1);
        assert_eq!(r.in_progress(), (2, 2));
    }

    #[test]
    fn memory_and_count_caps_evict_oldest() {
        let d = udp(&payload());
        let mut r = FragmentReassembler::new(FragmentConfig {
            max_bytes: 120,
            ..FragmentConfig::default()
        });
        feed(&mut r, &v4(1, &d, 0, 56, true), 1);
        feed(&mut r, &v4(2, &d, 0, 56, true), 2);
        assert_eq!(r.counters().evicted, 0);
        feed(&mut r, &v4(3, &d, 0, 56, true), 3);
        assert_eq!(r.counters().evicted, 1);
        // 1 went first: 2 still completes, 1's last fragment starts a new datagram.
        assert!(feed(&mut r, &v4(2, &d, 56, 52, false), 4).is_some());
        assert!(feed(&mut r, &v4(1, &d, 56, 52, false), 5).is_none());
        assert_eq!(r.in_progress(), (2, 2));
        let mut r = FragmentReassembler::new(FragmentConfig {
            max_datagrams: 2,
            ..FragmentConfig::default()
        });
        for id in 1..=3 {
            feed(&mut r, &v4(id, &d, 0, 56, true), u64::from(id));
        }
        assert_eq!(r.counters().evicted, 1);
        assert_eq!(r.in_progress(), (2, 2));
        assert!(feed(&mut r, &v4(3, &d, 56, 52, false), 5).is_some());
    }

    #[test]
    fn malformed_ends_are_invalid() {
        let d = udp(&payload());
        let mut r = FragmentReassembler::default();
        feed(&mut r, &v4(1, &d, 0, 56, true), 1);
        feed(&mut r, &v4(1, &d, 56, 52, false), 2);
        let mut r = FragmentReassembler::default();
        feed(&mut r, &v4(1, &d, 56, 52, false), 1);
        assert!(feed(&mut r, &v4(1, &d, 48, 8, false), 2).is_none());
        assert_eq!(r.counters().invalid, 1);
        // IPv6 non-last fragment not a multiple of 8.
        let mut r = FragmentReassembler::default();
        assert!(feed(&mut r, &v6(1, &d, 0, 50, true), 1).is_none());
        assert_eq!((r.counters().invalid, r.in_progress().0), (1, 0));
    }

    #[test]
    fn snap_length_cut_fragments_give_the_captured_prefix() {
        let p = payload();
        let d = udp(&p);
        let mut r = FragmentReassembler::default();
        let a = v4(6, &d, 0, 56, true);
        feed(&mut r, &a[..20 + 30], 1);
        let whole = feed(&mut r, &v4(6, &d, 56, 52, false), 2).expect("complete");
        assert_eq!(whole.data, d[..30]);
        assert_eq!(whole.wire_len, 108);
        let h = whole.headers(&dissect(LINKTYPE_RAW, &a));
        assert_eq!(h.payload, &p[..22]);
        assert_eq!(h.payload_wire_len, 100);
    }

    #[test]
    fn every_prefix_of_every_fragment_is_safe() {
        let d = udp(&payload());
        let frags = [
            v4(8, &d, 0, 48, true),
            v4(8, &d, 48, 48, true),
            v4(8, &d, 96, 12, false),
            v6(8, &d, 0, 56, true),
            v6(8, &d, 56, 52, false),
        ];
        let mut r = FragmentReassembler::default();
        for (i, f) in frags.iter().enumerate() {
            for n in 0..=f.len() {
                if let Some(x) = feed(&mut r, &f[..n], (i * 1000 + n) as u64) {
                    let _ = x.headers(&dissect(LINKTYPE_RAW, &f[..n]));
                }
            }
        }
        assert!(r.counters().fragments > 0);
    }
}
