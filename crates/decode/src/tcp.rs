//! TCP stream reassembly for one direction of a connection ([`TcpReassembler`]) and a
//! bounded table of connections ([`ConnectionTable`]).
//!
//! In-order segments are delivered straight from the caller's buffer (no copy); only
//! out-of-order data is copied into a bounded buffer. Overlaps keep the first-seen bytes.

use std::collections::{BTreeMap, HashMap};

use crate::flow::FlowKey;

/// Absolute stream offsets start here so that bytes before the first one seen (late
/// retransmissions) still get a non-negative offset.
const ORIGIN: u64 = 1 << 40;
/// Bookkeeping cost charged per buffered segment, on top of its bytes.
const ENTRY_OVERHEAD: usize = 64;

/// One TCP segment of one direction, as the caller saw it.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a, M> {
    /// Raw sequence number.
    pub seq: u32,
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
    /// The captured payload bytes.
    pub payload: &'a [u8],
    /// Payload length on the wire (from the IP length). When the capture's snap length cut
    /// the segment, this is larger than `payload.len()` and the missing tail is reported as
    /// a [`GapCause::NotCaptured`] gap, so a consumer can skip it and stay in sync.
    pub wire_len: u32,
    /// Caller's data (e.g. timestamp and record number), handed back with the bytes.
    pub meta: M,
}

/// Why bytes of the stream are missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapCause {
    /// Never seen: capture loss. Skipped when the buffer bound is hit or at flush.
    Lost,
    /// On the wire but cut by the snap length; the size is known from the IP length.
    NotCaptured,
}

/// What the reassembler delivers, in stream order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEvent<'a, M> {
    /// Contiguous bytes. `meta` is that of the segment whose arrival made them contiguous:
    /// the one that carried them, or, for bytes that waited behind a hole, the segment that
    /// filled it (the packet at which a reader of the wire could first have them, as
    /// Wireshark's "reassembled in" frame).
    Data { bytes: &'a [u8], meta: M },
    /// `len` bytes of the stream that will never be delivered.
    Gap { len: u64, cause: GapCause, meta: M },
    /// The stream ended: FIN reached in order, or RST (`reset`).
    End { reset: bool, meta: M },
}

/// Limits of one direction's reassembly.
#[derive(Debug, Clone, Copy)]
pub struct ReassemblyConfig {
    /// Out-of-order bytes buffered before the oldest hole is declared lost.
    pub max_buffer: usize,
}

impl Default for ReassemblyConfig {
    fn default() -> Self {
        // Above Linux's largest default receive window (tcp_rmem max, 6 MiB): a hole the
        // sender will fill can stay open for a whole window of later data. The connection
        // table's budget bounds the total.
        ReassemblyConfig {
            max_buffer: 16 << 20,
        }
    }
}

/// Counts of what one reassembler did with its input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReassemblyCounters {
    pub segments: u64,
    /// Captured payload bytes fed.
    pub fed_bytes: u64,
    /// Captured bytes delivered as `Data`.
    pub delivered_bytes: u64,
    /// Bytes dropped because they were already delivered or buffered (retransmissions).
    pub duplicate_bytes: u64,
    /// Segments that arrived ahead of a hole and were buffered.
    pub out_of_order_segments: u64,
    /// Bytes reported as lost gaps.
    pub lost_bytes: u64,
    /// Bytes reported as not captured (snap length).
    pub not_captured_bytes: u64,
    /// Times the buffer bound forced a hole to be skipped.
    pub forced_skips: u64,
    /// Holes declared lost because the receiver acknowledged past them (capture loss).
    pub acked_holes: u64,
    /// Segments after the stream ended.
    pub after_end_segments: u64,
}

impl ReassemblyCounters {
    /// Adds another reassembler's counts.
    pub fn add(&mut self, o: &ReassemblyCounters) {
        self.segments += o.segments;
        self.fed_bytes += o.fed_bytes;
        self.delivered_bytes += o.delivered_bytes;
        self.duplicate_bytes += o.duplicate_bytes;
        self.out_of_order_segments += o.out_of_order_segments;
        self.lost_bytes += o.lost_bytes;
        self.not_captured_bytes += o.not_captured_bytes;
        self.forced_skips += o.forced_skips;
        self.acked_holes += o.acked_holes;
        self.after_end_segments += o.after_end_segments;
    }
}

/// A buffered, out-of-order piece: `data` then `uncaptured` bytes known to be missing.
#[derive(Debug)]
struct Piece<M> {
    data: Vec<u8>,
    uncaptured: u64,
    meta: M,
}

impl<M> Piece<M> {
    fn len(&self) -> u64 {
        self.data.len() as u64 + self.uncaptured
    }
}

/// Reassembles one direction of one TCP connection. `M` is the caller's per-segment data.
#[derive(Debug)]
pub struct TcpReassembler<M> {
    config: ReassemblyConfig,
    /// Next expected sequence number and its absolute offset.
    next_seq: u32,
    next_abs: u64,
    started: bool,
    syn_seen: bool,
    fin_at: Option<u64>,
    ended: bool,
    buffer: BTreeMap<u64, Piece<M>>,
    buffered: usize,
    counters: ReassemblyCounters,
}

impl<M> TcpReassembler<M> {
    pub fn counters(&self) -> &ReassemblyCounters {
        &self.counters
    }

    /// True once the stream's start was seen (a SYN), so byte 0 is a message boundary.
    pub fn syn_seen(&self) -> bool {
        self.syn_seen
    }

    /// True after FIN was reached in order or RST was seen.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Bytes of memory held (buffered data plus bookkeeping).
    pub fn memory_use(&self) -> usize {
        self.buffered + ENTRY_OVERHEAD * self.buffer.len()
    }
}

impl<M: Copy> TcpReassembler<M> {
    pub fn new(config: ReassemblyConfig) -> Self {
        TcpReassembler {
            config,
            next_seq: 0,
            next_abs: ORIGIN,
            started: false,
            syn_seen: false,
            fin_at: None,
            ended: false,
            buffer: BTreeMap::new(),
            buffered: 0,
            counters: ReassemblyCounters::default(),
        }
    }

    fn abs(&self, seq: u32) -> u64 {
        let d = seq.wrapping_sub(self.next_seq) as i32 as i64;
        self.next_abs.wrapping_add_signed(d)
    }

    /// Feeds one segment; delivers whatever became contiguous to `out`.
    pub fn push(&mut self, seg: Segment<'_, M>, out: &mut impl FnMut(StreamEvent<'_, M>)) {
        self.counters.segments += 1;
        self.counters.fed_bytes += seg.payload.len() as u64;
        if self.ended {
            self.counters.after_end_segments += 1;
            return;
        }
        let wire = u64::from(seg.wire_len.max(seg.payload.len() as u32));
        if !self.started {
            if seg.syn {
                self.next_seq = seg.seq.wrapping_add(1);
                self.syn_seen = true;
            } else if wire > 0 || seg.fin {
                // Capture started mid-stream: the first byte seen is the start.
                self.next_seq = seg.seq;
            } else {
                return;
            }
            self.started = true;
        }
        if seg.rst {
            self.flush(out);
            self.ended = true;
            out(StreamEvent::End {
                reset: true,
                meta: seg.meta,
            });
            return;
        }
        let start = self.abs(seg.seq.wrapping_add(u32::from(seg.syn)));
        let end = start + wire;
        if seg.fin && self.fin_at.is_none() {
            self.fin_at = Some(end);
        }
        if end <= self.next_abs {
            self.counters.duplicate_bytes += seg.payload.len() as u64;
        } else if start <= self.next_abs && self.buffer.is_empty() {
            self.deliver(start, seg.payload, wire, seg.meta, out);
        } else {
            if start > self.next_abs {
                self.counters.out_of_order_segments += 1;
            }
            self.insert(start, seg.payload, wire, seg.meta);
            self.drain(Some(seg.meta), out);
            while self.memory_use() > self.config.max_buffer {
                let Some((&first, _)) = self.buffer.first_key_value() else {
                    break;
                };
                self.counters.forced_skips += 1;
                self.gap(first - self.next_abs, GapCause::Lost, seg.meta, out);
                // Nothing filled the hole: the bytes behind it arrived with their own
                // segments, not with this one.
                self.drain(None, out);
            }
        }
        self.check_fin(seg.meta, out);
    }

    /// The receiver acknowledged the stream up to `ack` (raw sequence number, from a
    /// segment of the other direction). Bytes of a hole below it reached the receiver but
    /// not the capture, so no retransmission will fill it: the hole becomes a lost gap now
    /// and the data behind it is delivered at once, each piece with the meta of the
    /// segment that carried it. Without this, data behind a capture gap would wait for the
    /// buffer bound and be timed by whatever segment forced it out, much later.
    pub fn acknowledged(&mut self, ack: u32, out: &mut impl FnMut(StreamEvent<'_, M>)) {
        if !self.started || self.ended {
            return;
        }
        let ahead = ack.wrapping_sub(self.next_seq) as i32;
        if ahead <= 0 {
            return;
        }
        let acked = self.next_abs + ahead as u64;
        let mut end_meta = None;
        while let Some((&first, p)) = self.buffer.first_key_value() {
            if first >= acked {
                // Only the part of the hole below the ACK is known lost; the rest may
                // still come.
                if first > self.next_abs && acked > self.next_abs {
                    let meta = p.meta;
                    self.counters.acked_holes += 1;
                    self.gap(acked - self.next_abs, GapCause::Lost, meta, out);
                }
                break;
            }
            let meta = p.meta;
            end_meta = Some(meta);
            if first > self.next_abs {
                self.counters.acked_holes += 1;
                self.gap(first - self.next_abs, GapCause::Lost, meta, out);
            }
            self.drain(None, out);
        }
        if let Some(f) = self.fin_at {
            if self.next_abs >= f {
                self.ended = true;
                if let Some(meta) = end_meta {
                    out(StreamEvent::End { reset: false, meta });
                }
            }
        }
    }

    /// Delivers everything buffered, skipping holes (reported as lost gaps). Use at the end
    /// of the capture or before evicting the connection.
    pub fn flush(&mut self, out: &mut impl FnMut(StreamEvent<'_, M>)) {
        while let Some((&first, p)) = self.buffer.first_key_value() {
            if first > self.next_abs {
                let meta = p.meta;
                self.gap(first - self.next_abs, GapCause::Lost, meta, out);
            }
            self.drain(None, out);
        }
    }

    fn gap(
        &mut self,
        len: u64,
        cause: GapCause,
        meta: M,
        out: &mut impl FnMut(StreamEvent<'_, M>),
    ) {
        if len == 0 {
            return;
        }
        match cause {
            GapCause::Lost => self.counters.lost_bytes += len,
            GapCause::NotCaptured => self.counters.not_captured_bytes += len,
        }
        self.advance(len);
        out(StreamEvent::Gap { len, cause, meta });
    }

    fn advance(&mut self, n: u64) {
        self.next_abs += n;
        self.next_seq = self.next_seq.wrapping_add(n as u32);
    }

    /// Delivers a piece that starts at or before `next_abs` and ends after it.
    fn deliver(
        &mut self,
        start: u64,
        data: &[u8],
        wire: u64,
        meta: M,
        out: &mut impl FnMut(StreamEvent<'_, M>),
    ) {
        let skip = self.next_abs - start;
        self.counters.duplicate_bytes += skip.min(data.len() as u64);
        if skip < data.len() as u64 {
            let bytes = &data[skip as usize..];
            self.counters.delivered_bytes += bytes.len() as u64;
            self.advance(bytes.len() as u64);
            out(StreamEvent::Data { bytes, meta });
        }
        let end = start + wire;
        if end > self.next_abs {
            self.gap(end - self.next_abs, GapCause::NotCaptured, meta, out);
        }
    }

    /// Delivers buffered pieces that became contiguous, with the meta of the segment whose
    /// arrival made them so (`arrival`), or their own at a flush.
    fn drain(&mut self, arrival: Option<M>, out: &mut impl FnMut(StreamEvent<'_, M>)) {
        while let Some(entry) = self.buffer.first_entry() {
            let start = *entry.key();
            if start > self.next_abs {
                break;
            }
            let p = entry.remove();
            self.buffered -= p.data.len();
            if start + p.len() <= self.next_abs {
                self.counters.duplicate_bytes += p.data.len() as u64;
                continue;
            }
            self.deliver(start, &p.data, p.len(), arrival.unwrap_or(p.meta), out);
        }
    }

    /// Buffers the parts of [start, start+wire) not already covered (first-seen wins).
    fn insert(&mut self, start: u64, data: &[u8], wire: u64, meta: M) {
        let end = start + wire;
        let from = start.max(self.next_abs);
        // Covered intervals overlapping [from, end), in order.
        let mut covered: Vec<(u64, u64)> = Vec::new();
        if let Some((&s, p)) = self.buffer.range(..from).next_back() {
            if s + p.len() > from {
                covered.push((s, s + p.len()));
            }
        }
        for (&s, p) in self.buffer.range(from..end) {
            covered.push((s, s + p.len()));
        }
        let mut at = from;
        let data_end = start + data.len() as u64;
        let add = |a: u64, b: u64, this: &mut Self| {
            if a >= b {
                return;
            }
            let da = a.min(data_end);
            let db = b.min(data_end);
            let bytes = data[(da - start) as usize..(db - start) as usize].to_vec();
            this.buffered += bytes.len();
            this.buffer.insert(
                a,
                Piece {
                    uncaptured: (b - a) - bytes.len() as u64,
                    data: bytes,
                    meta,
                },
            );
        };
        let mut dup = 0u64;
        for (s, e) in covered {
            add(at, s.max(at).min(end), self);
            dup += e.min(end).saturating_sub(s.max(at));
            at = at.max(e);
        }
        add(at, end, self);
        self.counters.duplicate_bytes += dup.min(data.len() as u64);
    }

    fn check_fin(&mut self, meta: M, out: &mut impl FnMut(StreamEvent<'_, M>)) {
        if let Some(f) = self.fin_at {
            if self.next_abs >= f {
                self.ended = true;
                out(StreamEvent::End { reset: false, meta });
            }
        }
    }
}

/// Something that can say how much memory it holds, for [`ConnectionTable`]'s budget.
pub trait MemoryUse {
    fn memory_use(&self) -> usize;
}

/// Limits of a [`ConnectionTable`].
#[derive(Debug, Clone, Copy)]
pub struct TableConfig {
    /// Connections silent for this long (in the caller's clock, e.g. trace nanoseconds)
    /// are evicted by [`ConnectionTable::evict`].
    pub idle_timeout: u64,
    /// Total memory budget; least recently used connections go first when it is exceeded.
    pub max_memory: usize,
    pub max_connections: usize,
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            idle_timeout: 120_000_000_000,
            max_memory: 1 << 30,
            max_connections: 4_000_000,
        }
    }
}

/// Fixed cost charged per connection on top of what the value reports.
const CONN_OVERHEAD: usize = 128;

struct Slot<V> {
    value: V,
    last_seen: u64,
    mem: usize,
}

/// Connections keyed by their canonical [`FlowKey`] (both directions map to one entry),
/// with idle eviction and bounds on count and total memory.
pub struct ConnectionTable<V> {
    config: TableConfig,
    /// ahash with random keys: fast, and resists collisions crafted into a trace.
    map: HashMap<FlowKey, Slot<V>, ahash::RandomState>,
    memory: usize,
    last_sweep: u64,
}

impl<V: MemoryUse> ConnectionTable<V> {
    pub fn new(config: TableConfig) -> Self {
        ConnectionTable {
            config,
            map: HashMap::default(),
            memory: 0,
            last_sweep: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Memory charged to all connections.
    pub fn memory_use(&self) -> usize {
        self.memory
    }

    /// Runs `f` on the connection `key` (canonical form), creating it with `make`, and
    /// records its new memory use and `now` as its last activity.
    pub fn with<R>(
        &mut self,
        key: FlowKey,
        now: u64,
        make: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> R {
        let slot = self.map.entry(key).or_insert_with(|| Slot {
            value: make(),
            last_seen: now,
            mem: 0,
        });
        self.memory -= slot.mem;
        let r = f(&mut slot.value);
        slot.mem = CONN_OVERHEAD + slot.value.memory_use();
        slot.last_seen = slot.last_seen.max(now);
        self.memory += slot.mem;
        r
    }

    /// True when [`evict`](Self::evict) has work: a bound is exceeded or a second of
    /// `now` (nanoseconds) passed since the last idle sweep.
    pub fn needs_eviction(&self, now: u64) -> bool {
        self.memory > self.config.max_memory
            || self.map.len() > self.config.max_connections
            || now >= self.last_sweep.saturating_add(1_000_000_000)
    }

    /// Evicts idle connections, then least recently used ones until both bounds hold with
    /// 10 % headroom; hands each to `evicted`. O(connections): call it when
    /// [`needs_eviction`](Self::needs_eviction) says so.
    pub fn evict(&mut self, now: u64, mut evicted: impl FnMut(FlowKey, V)) {
        self.last_sweep = now;
        let cutoff = now.saturating_sub(self.config.idle_timeout);
        // Evicted connections flush what they hold, so the order is part of the output:
        // a fixed one (the map's is random per process).
        let mut idle: Vec<(u64, FlowKey)> = self
            .map
            .iter()
            .filter(|(_, s)| s.last_seen < cutoff)
            .map(|(k, s)| (s.last_seen, *k))
            .collect();
        idle.sort_unstable();
        for (_, k) in idle {
            self.remove_into(k, &mut evicted);
        }
        if self.memory > self.config.max_memory || self.map.len() > self.config.max_connections {
            let mut by_age: Vec<(u64, FlowKey)> =
                self.map.iter().map(|(k, s)| (s.last_seen, *k)).collect();
            by_age.sort_unstable();
            let mem_goal = self.config.max_memory / 10 * 9;
            let count_goal = self.config.max_connections / 10 * 9;
            for (_, k) in by_age {
                if self.memory <= mem_goal && self.map.len() <= count_goal {
                    break;
                }
                self.remove_into(k, &mut evicted);
            }
        }
    }

    /// Removes every connection (end of input), handing each to `evicted`.
    pub fn drain(&mut self, mut evicted: impl FnMut(FlowKey, V)) {
        let mut keys: Vec<(u64, FlowKey)> =
            self.map.iter().map(|(k, s)| (s.last_seen, *k)).collect();
        keys.sort_unstable();
        for (_, k) in keys {
            self.remove_into(k, &mut evicted);
        }
    }

    fn remove_into(&mut self, k: FlowKey, evicted: &mut impl FnMut(FlowKey, V)) {
        if let Some(v) = self.remove(k) {
            evicted(k, v);
        }
    }

    /// Removes one connection (e.g. when it closed) and returns it.
    pub fn remove(&mut self, k: FlowKey) -> Option<V> {
        let s = self.map.remove(&k)?;
        self.memory -= s.mem;
        Some(s.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Collects events as (kind, bytes-or-len, meta) for easy assertions.
    #[derive(Debug, PartialEq, Eq, Clone)]
    enum Ev {
        D(Vec<u8>, u32),
        Lost(u64),
        Cut(u64),
        Fin,
        Rst,
    }

    fn run(r: &mut TcpReassembler<u32>, segs: &[(u32, &[u8], u32)]) -> Vec<Ev> {
        let mut evs = vec![];
        for &(seq, p, meta) in segs {
            push(r, seq, p, p.len() as u32, meta, false, &mut evs);
        }
        evs
    }

    fn push(
        r: &mut TcpReassembler<u32>,
        seq: u32,
        p: &[u8],
        wire: u32,
        meta: u32,
        fin: bool,
        evs: &mut Vec<Ev>,
    ) {
        let seg = Segment {
            seq,
            syn: false,
            fin,
            rst: false,
            payload: p,
            wire_len: wire,
            meta,
        };
        r.push(seg, &mut |e| evs.push(ev(e)));
    }

    fn ev(e: StreamEvent<'_, u32>) -> Ev {
        match e {
            StreamEvent::Data { bytes, meta } => Ev::D(bytes.to_vec(), meta),
            StreamEvent::Gap {
                len,
                cause: GapCause::Lost,
                ..
            } => Ev::Lost(len),
            StreamEvent::Gap { len, .. } => Ev::Cut(len),
            StreamEvent::End { reset: false, .. } => Ev::Fin,
            StreamEvent::End { reset: true, .. } => Ev::Rst,
        }
    }

    fn bytes(evs: &[Ev]) -> Vec<u8> {
        evs.iter()
            .flat_map(|e| match e {
                Ev::D(b, _) => b.clone(),
                _ => vec![],
            })
            .collect()
    }

    fn syn(r: &mut TcpReassembler<u32>, isn: u32) {
        let seg = Segment {
            seq: isn,
            syn: true,
            fin: false,
            rst: false,
            payload: &[],
            wire_len: 0,
            meta: 0,
        };
        r.push(seg, &mut |_| panic!("a bare SYN delivers nothing"));
    }

    #[test]
    fn in_order_and_reordered() {
        let mut r = TcpReassembler::new(ReassemblyConfig::default());
        syn(&mut r, 999);
        let evs = run(
            &mut r,
            &[(1000, b"abc", 1), (1006, b"ghi", 3), (1003, b"def", 2)],
        );
        assert_eq!(
            evs,
            vec![
                Ev::D(b"abc".to_vec(), 1),
                Ev::D(b"def".to_vec(), 2),
                // waited behind the hole: delivered at (with the meta of) the segment 2
                // that filled it
                Ev::D(b"ghi".to_vec(), 2)
            ]
        );
        assert_eq!(r.counters().out_of_order_segments, 1);
        assert_eq!(r.memory_use(), 0);
    }

    #[test]
    fn retransmissions_keep_first_seen_bytes() {
        let mut r = TcpReassembler::new(ReassemblyConfig::default());
        syn(&mut r, 0);
        let evs = run(
            &mut r,
            &[
                (1, b"aaaa", 1),     // 1..5
                (1, b"XXXX", 2),     // exact duplicate
                (3, b"XXcc", 3),     // partial overlap at the front
                (11, b"ffff", 4),    // ahead: 11..15
                (9, b"eeXXXXgg", 5), // 9..17 straddles the buffered 11..15
                (7, b"dd", 6),       // fills 7..9
            ],
        );
        assert_eq!(bytes(&evs), b"aaaaccddeeffffgg");
        assert_eq!(r.counters().delivered_bytes, 16);
        assert_eq!(r.counters().duplicate_bytes, 4 + 2 + 4);
    }

    #[test]
    fn wraparound() {
        let mut r = TcpReassembler::new(ReassemblyConfig::default());
        syn(&mut r, u32::MAX - 3);
        let evs = run(
            &mut r,
            &[(2, b"56", 2), (u32::MAX - 2, b"012", 0), (0, b"34", 1)],
        );
        assert_eq!(bytes(&evs), b"0123456");
    }

    #[test]
    fn loss_gap_after_bound_and_at_flush() {
        let mut r = TcpReassembler::new(ReassemblyConfig { max_buffer: 350 });
        let mut evs = vec![];
        push(&mut r, 5000, b"start", 5, 0, false, &mut evs);
        // 10 bytes lost at 5005; then data keeps coming until the buffer bound forces a skip.
        let chunk = [7u8; 50];
        for i in 0..3 {
            push(&mut r, 5015 + i * 50, &chunk, 50, 1, false, &mut evs);
        }
        assert_eq!(evs.len(), 1, "buffered, not delivered: {evs:?}");
        push(&mut r, 5165, &chunk, 50, 2, false, &mut evs);
        assert_eq!(evs[1], Ev::Lost(10));
        assert_eq!(bytes(&evs).len(), 5 + 200);
        // A second hole, delivered by flush.
        push(&mut r, 5300, b"tail", 4, 3, false, &mut evs);
        r.flush(&mut |e| evs.push(ev(e)));
        assert_eq!(evs[evs.len() - 2], Ev::Lost(85));
        assert_eq!(evs[evs.len() - 1], Ev::D(b"tail".to_vec(), 3));
        assert_eq!(r.counters().lost_bytes, 95);
    }

    #[test]
    fn an_ack_past_a_hole_makes_it_lost_and_keeps_each_pieces_own_meta() {
        let mut r = TcpReassembler::new(ReassemblyConfig::default());
        let mut evs = vec![];
        push(&mut r, 100, b"aa", 2, 1, false, &mut evs);
        // 102..105 reached the receiver but not the capture.
        push(&mut r, 105, b"bb", 2, 2, false, &mut evs);
        push(&mut r, 107, b"cc", 2, 3, false, &mut evs);
        push(&mut r, 112, b"dd", 2, 4, false, &mut evs); // behind a second hole, 109..112
        assert_eq!(evs, vec![Ev::D(b"aa".to_vec(), 1)]);
        // An ACK inside the second hole: the first is lost; of the second only what the
        // ACK covers (109..110); 110..112 may still come.
        r.acknowledged(110, &mut |e| evs.push(ev(e)));
        assert_eq!(
            evs[1..],
            [
                Ev::Lost(3),
                Ev::D(b"bb".to_vec(), 2),
                Ev::D(b"cc".to_vec(), 3),
                Ev::Lost(1)
            ]
        );
        push(&mut r, 110, b"xy", 2, 5, false, &mut evs);
        assert_eq!(
            evs[5..],
            [Ev::D(b"xy".to_vec(), 5), Ev::D(b"dd".to_vec(), 5)]
        );
        // Old, duplicate and absurd ACKs change nothing.
        for ack in [90, 114, 114 + (1 << 31)] {
            r.acknowledged(ack, &mut |e| evs.push(ev(e)));
        }
        assert_eq!(evs.len(), 7);
        assert_eq!(r.counters().acked_holes, 2);
    }

    #[test]
    fn data_forced_out_behind_a_hole_keeps_its_own_meta() {
        let mut r = TcpReassembler::new(ReassemblyConfig { max_buffer: 200 });
        let mut evs = vec![];
        push(&mut r, 0, b"a", 1, 0, false, &mut evs);
        push(&mut r, 10, &[1; 100], 100, 1, false, &mut evs);
        push(&mut r, 110, &[2; 100], 100, 2, false, &mut evs); // over the bound
        assert_eq!(evs[1], Ev::Lost(9));
        assert_eq!(
            evs[2],
            Ev::D(vec![1; 100], 1),
            "its own segment, not the one forcing it"
        );
    }

    #[test]
    fn mid_stream_start_and_fin_rst() {
        let mut r = TcpReassembler::new(ReassemblyConfig::default());
        let mut evs = vec![];
        push(&mut r, 77, b"", 0, 0, false, &mut evs); // pure ACK: nothing to anchor on
        push(&mut r, 100, b"xy", 2, 1, false, &mut evs);
        push(&mut r, 98, b"wxy", 3, 2, false, &mut evs); // older than the start: dropped
        push(&mut r, 104, b"", 0, 3, true, &mut evs); // FIN ahead of a hole
        push(&mut r, 102, b"zz", 2, 4, false, &mut evs);
        assert_eq!(
            evs,
            vec![Ev::D(b"xy".to_vec(), 1), Ev::D(b"zz".to_vec(), 4), Ev::Fin]
        );
        push(&mut r, 104, b"late", 4, 5, false, &mut evs);
        assert_eq!(r.counters().after_end_segments, 1);

        let mut r = TcpReassembler::new(ReassemblyConfig::default());
        let mut evs = vec![];
        push(&mut r, 10, b"ab", 2, 0, false, &mut evs);
        push(&mut r, 20, b"cd", 2, 0, false, &mut evs);
        let rst = Segment {
            seq: 22,
            syn: false,
            fin: false,
            rst: true,
            payload: &[],
            wire_len: 0,
            meta: 9,
        };
        r.push(rst, &mut |e| evs.push(ev(e)));
        assert_eq!(
            evs,
            vec![
                Ev::D(b"ab".to_vec(), 0),
                Ev::Lost(8),
                Ev::D(b"cd".to_vec(), 0),
                Ev::Rst
            ]
        );
    }

    #[test]
    fn snaplen_truncated_segments_report_known_holes() {
        let mut r = TcpReassembler::new(ReassemblyConfig::default());
        let mut evs = vec![];
        push(&mut r, 0, b"head", 1000, 0, false, &mut evs);
        // Out of order and truncated: buffered with its hole.
        push(&mut r, 2000, b"third", 500, 2, false, &mut evs);
        push(&mut r, 1000, b"second", 1000, 1, false, &mut evs);
        assert_eq!(
            evs,
            vec![
                Ev::D(b"head".to_vec(), 0),
                Ev::Cut(996),
                Ev::D(b"second".to_vec(), 1),
                Ev::Cut(994),
                Ev::D(b"third".to_vec(), 1),
                Ev::Cut(495)
            ]
        );
        assert_eq!(r.counters().not_captured_bytes, 996 + 994 + 495);
    }

    struct Mem(usize);
    impl MemoryUse for Mem {
        fn memory_use(&self) -> usize {
            self.0
        }
    }

    #[test]
    fn table_evicts_idle_then_lru() {
        let mut t = ConnectionTable::new(TableConfig {
            idle_timeout: 100,
            max_memory: 10_000,
            max_connections: 100,
        });
        let key = |p: u16| FlowKey {
            src: crate::flow::Endpoint {
                addr: [0; 16],
                port: p,
            },
            ..Default::default()
        };
        for p in 0..10u16 {
            t.with(key(p), u64::from(p) * 10, || Mem(0), |m| m.0 = 500);
        }
        assert_eq!(t.memory_use(), 10 * (500 + CONN_OVERHEAD));
        let mut gone = vec![];
        // At 150, connections last seen before 50 are idle.
        t.evict(150, |k, _| gone.push(k.src.port));
        gone.sort();
        assert_eq!(gone, vec![0, 1, 2, 3, 4]);
        // Grow one connection past the budget: the least recently used go first.
        t.with(key(9), 160, || Mem(0), |m| m.0 = 8000);
        assert!(t.needs_eviction(160));
        gone.clear();
        t.evict(160, |k, _| gone.push(k.src.port));
        assert_eq!(gone, vec![5, 6, 7]);
        assert!(t.memory_use() <= 9000);
        t.drain(|_, _| {});
        assert_eq!((t.len(), t.memory_use()), (0, 0));
    }
}
