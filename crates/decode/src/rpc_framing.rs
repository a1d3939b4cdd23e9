//! ONC RPC messages out of byte streams: record marking over TCP (RFC 5531 §11), with
//! resynchronisation after gaps and mid-stream starts, and snap-length truncation handled
//! without losing sync.
//!
//! Over UDP each datagram is one message, without a record mark: hand the UDP payload to
//! [`probe_rpc_header`] (or straight to the RPC decoder) — no framing needed.
//!
//! Layers: [`probe_rpc_header`] (is this an RPC header, and how long?), [`RpcFramer`] (one
//! direction's reassembled stream → messages), [`TcpRpcTracker`] (packets → reassembly →
//! framing, for all connections of a trace).

use crate::flow::FlowKey;
use crate::packet::{Headers, TcpHeader, Transport};
use crate::tcp::{
    ConnectionTable, GapCause, MemoryUse, ReassemblyConfig, ReassemblyCounters, Segment,
    StreamEvent, TableConfig, TcpReassembler,
};

/// Longest credential or verifier body RFC 5531 allows.
pub const MAX_AUTH_LEN: u32 = 400;
/// Shortest record that can hold an RPC header (a reply with an empty verifier).
const MIN_RECORD: u32 = 24;
/// Longest possible mark + RPC header: resync looks this far ahead.
const LOOKAHEAD: usize = 1024;

/// How picky [`probe_rpc_header`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// Message type, RPC version 2 for calls, reply status, auth lengths <= 400. For
    /// bytes already known to start a message (UDP payload, TCP segment start).
    Lenient,
    /// Also plausible program numbers, versions, procedures, auth flavors and accept
    /// status. For hunting through a stream for a message boundary.
    Strict,
}

/// What the start of an RPC message says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcHeader {
    pub xid: u32,
    pub kind: RpcKind,
    /// Bytes from the xid through the verifier and, for accepted replies, accept_stat (for
    /// denied replies, through the reject details).
    pub header_len: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcKind {
    Call {
        prog: u32,
        vers: u32,
        proc_: u32,
    },
    /// `reply_stat`: 0 accepted, 1 denied. `stat` is accept_stat or reject_stat.
    Reply {
        reply_stat: u32,
        stat: u32,
    },
}

/// Result of [`probe_rpc_header`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Header(RpcHeader),
    /// Plausible so far, but the bytes end before the header does.
    Incomplete,
    NotRpc,
}

/// Checks whether `msg` (without record mark) starts with an ONC RPC call or reply header.
pub fn probe_rpc_header(msg: &[u8], strictness: Strictness) -> Probe {
    let strict = strictness == Strictness::Strict;
    let w = |i: usize| -> Option<u32> {
        let b = msg.get(i * 4..i * 4 + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    macro_rules! word {
        ($i:expr) => {
            match w($i) {
                Some(v) => v,
                None => return Probe::Incomplete,
            }
        };
    }
    let xid = word!(0);
    match word!(1) {
        0 => {
            if word!(2) != 2 {
                return Probe::NotRpc;
            }
            let (prog, vers, proc_) = (word!(3), word!(4), word!(5));
            if strict && !(plausible_program(prog) && (1..=255).contains(&vers) && proc_ < 1024) {
                return Probe::NotRpc;
            }
            // Credential then verifier: flavor, length, body padded to 4.
            let mut at = 6;
            for _ in 0..2 {
                let (flavor, len) = (word!(at), word!(at + 1));
                if len > MAX_AUTH_LEN || (strict && !plausible_flavor(flavor)) {
                    return Probe::NotRpc;
                }
                at += 2 + (len as usize).div_ceil(4);
            }
            let header_len = at * 4;
            if msg.len() < header_len {
                return Probe::Incomplete;
            }
            Probe::Header(RpcHeader {
                xid,
                kind: RpcKind::Call { prog, vers, proc_ },
                header_len,
            })
        }
        1 => {
            let reply_stat = word!(2);
            let (stat, header_len) = match reply_stat {
                0 => {
                    let (flavor, len) = (word!(3), word!(4));
                    if len > MAX_AUTH_LEN || (strict && !plausible_flavor(flavor)) {
                        return Probe::NotRpc;
                    }
                    let at = 5 + (len as usize).div_ceil(4);
                    let stat = word!(at);
                    if strict && stat > 5 {
                        return Probe::NotRpc;
                    }
                    (stat, (at + 1) * 4)
                }
                1 => match word!(3) {
                    0 => (0, 24),
                    1 => (1, 20),
                    _ => return Probe::NotRpc,
                },
                _ => return Probe::NotRpc,
            };
            if msg.len() < header_len {
                return Probe::Incomplete;
            }
            Probe::Header(RpcHeader {
                xid,
                kind: RpcKind::Reply { reply_stat, stat },
                header_len,
            })
        }
        _ => Probe::NotRpc,
    }
}

/// Sun/IANA-assigned program ranges and the user-defined / transient ranges.
fn plausible_program(prog: u32) -> bool {
    (100_000..=400_000).contains(&prog) || (0x2000_0000..0x6000_0000).contains(&prog)
}

/// AUTH_NONE, SYS, SHORT, DH, KERB4, RSA, RPCSEC_GSS, TLS, and the 390003–390006 range
/// (Kerberos pseudo-flavors that show up in SECINFO but also on the wire).
fn plausible_flavor(f: u32) -> bool {
    f <= 7 || (390_003..=390_010).contains(&f)
}

/// Limits of an [`RpcFramer`].
#[derive(Debug, Clone, Copy)]
pub struct FramingConfig {
    /// Largest record (fragment) length accepted while in sync, and while resyncing.
    pub max_record: u32,
    /// Largest message (all fragments) accepted; bigger ones are counted and dropped.
    pub max_message: u64,
}

impl Default for FramingConfig {
    fn default() -> Self {
        // Linux NFS moves at most 1 MiB of data per READ/WRITE; leave room for the rest.
        FramingConfig {
            max_record: 4 << 20,
            max_message: 16 << 20,
        }
    }
}

/// What an [`RpcFramer`] skipped or cut, by reason. The converter reports these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FramingCounters {
    /// Messages emitted (truncated ones included).
    pub messages: u64,
    /// Emitted messages whose body is shorter than the record marks say.
    pub truncated_messages: u64,
    /// Bytes the reassembler reported lost (capture loss, or the start of a stream whose
    /// buffer overflowed).
    pub gap_bytes: u64,
    /// Bytes cut by the snap length.
    pub not_captured_bytes: u64,
    /// Times a message boundary was found by scanning.
    pub resyncs: u64,
    /// Bytes skipped while scanning for a message boundary.
    pub resync_skipped_bytes: u64,
    /// Records or messages over the configured maxima (sync is then sought again).
    pub oversized_record: u64,
    /// Messages cut by a gap that also swallowed the next record mark.
    pub truncated_at_gap: u64,
    /// Messages cut by the end of the stream.
    pub truncated_at_end: u64,
    /// Messages of which no byte was captured (not emitted).
    pub empty_messages: u64,
    /// Streams that began (SYN seen) with something other than an RPC record: other TCP
    /// traffic, not a failure. Their bytes are not looked at.
    pub not_rpc_streams: u64,
}

impl FramingCounters {
    pub fn add(&mut self, o: &FramingCounters) {
        self.messages += o.messages;
        self.truncated_messages += o.truncated_messages;
        self.gap_bytes += o.gap_bytes;
        self.not_captured_bytes += o.not_captured_bytes;
        self.resyncs += o.resyncs;
        self.resync_skipped_bytes += o.resync_skipped_bytes;
        self.oversized_record += o.oversized_record;
        self.truncated_at_gap += o.truncated_at_gap;
        self.truncated_at_end += o.truncated_at_end;
        self.empty_messages += o.empty_messages;
        self.not_rpc_streams += o.not_rpc_streams;
    }
}

/// One RPC message out of a TCP stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcMessage<'a, M> {
    /// The message without record marks: all captured bytes up to the first missing one.
    pub body: &'a [u8],
    /// Length according to the record marks.
    pub wire_len: u64,
    /// `body` is shorter than `wire_len` (snap length, capture loss, or end of stream).
    pub truncated: bool,
    /// Meta of the data event that delivered the first byte (of the record mark).
    pub first_meta: M,
    /// Meta of the data event that completed the message. Metas are those of the
    /// reassembler's events: with reordering, the segment that filled the last hole, so
    /// `last_meta` is the packet at which the whole message had arrived.
    pub last_meta: M,
}

#[derive(Debug, Clone, Copy)]
enum State<M> {
    /// The stream's first byte (its SYN was seen) must start a record mark + RPC header;
    /// if it does not, the stream is not RPC.
    First,
    /// Not an RPC stream: bytes are dropped unseen.
    NotRpc,
    /// Scanning for a plausible record mark + RPC header.
    Hunting,
    /// Reading a 4-byte record mark; `meta` of its first byte.
    Mark {
        buf: [u8; 4],
        have: u8,
        meta: Option<M>,
    },
    /// Inside a fragment.
    Body { remaining: u32, last: bool },
}

#[derive(Debug, Clone, Copy)]
struct InProgress<M> {
    first_meta: M,
    /// Meta of the latest data event (the greatest meta: metas order by arrival) that
    /// carried bytes of the message: a message cut by a hole or the end of the stream is
    /// timed by its last captured bytes, not by whatever revealed the hole (often a packet
    /// after the reply). Pieces flushed at the end come in stream order, each with its own
    /// meta, so a retransmission that filled an early hole late still counts.
    last_data: M,
    wire_len: u64,
    /// Still appending: no byte of the message has been missing yet.
    collecting: bool,
}

/// Splits one direction's reassembled TCP stream into RPC messages.
///
/// Feed it [`StreamEvent`]s in order ([`event`](Self::event), or [`data`](Self::data) /
/// [`gap`](Self::gap) / [`end`](Self::end)); it calls `out` for every complete message.
/// Messages that fit in one `data` call are handed out without copying.
#[derive(Debug)]
pub struct RpcFramer<M> {
    config: FramingConfig,
    state: State<M>,
    msg: Option<InProgress<M>>,
    body: Vec<u8>,
    /// Hunting: a tail too short to judge yet, and the meta it came with.
    pending: Vec<u8>,
    pending_meta: Option<M>,
    counters: FramingCounters,
}

impl<M> RpcFramer<M> {
    pub fn counters(&self) -> &FramingCounters {
        &self.counters
    }

    /// Bytes held: the message being assembled and the resync tail.
    pub fn memory_use(&self) -> usize {
        self.body.capacity() + self.pending.capacity()
    }
}

impl<M: Copy + Ord> RpcFramer<M> {
    /// `synced`: the stream is known to start at a message boundary (its SYN was seen), so
    /// it is RPC only if it starts with a record (other TCP traffic is then ignored
    /// cheaply). Otherwise the framer scans for a message boundary first.
    pub fn new(config: FramingConfig, synced: bool) -> Self {
        RpcFramer {
            config,
            state: if synced { State::First } else { State::Hunting },
            msg: None,
            body: Vec::new(),
            pending: Vec::new(),
            pending_meta: None,
            counters: FramingCounters::default(),
        }
    }

    fn mark() -> State<M> {
        State::Mark {
            buf: [0; 4],
            have: 0,
            meta: None,
        }
    }

    /// Feeds one reassembler event.
    pub fn event(&mut self, ev: StreamEvent<'_, M>, out: &mut impl FnMut(RpcMessage<'_, M>)) {
        match ev {
            StreamEvent::Data { bytes, meta } => self.data(bytes, meta, out),
            StreamEvent::Gap { len, cause, meta } => self.gap(len, cause, meta, out),
            StreamEvent::End { meta, .. } => self.end(meta, out),
        }
    }

    /// Feeds contiguous stream bytes.
    pub fn data(&mut self, bytes: &[u8], meta: M, out: &mut impl FnMut(RpcMessage<'_, M>)) {
        if bytes.is_empty() {
            return;
        }
        // A resync tail from earlier data: judge its positions with a look at the new bytes.
        // Each round consumes at least one pending byte, so this ends.
        while matches!(self.state, State::Hunting | State::First) && !self.pending.is_empty() {
            let old_len = self.pending.len();
            let pmeta = self.pending_meta.take().unwrap_or(meta);
            let mut buf = std::mem::take(&mut self.pending);
            buf.extend_from_slice(&bytes[..bytes.len().min(LOOKAHEAD)]);
            if matches!(self.state, State::First) {
                // Only position 0 counts: the stream's first bytes were held back.
                match self.starts_with_record(&buf) {
                    Some(true) => {
                        self.state = Self::mark();
                        self.run(&buf[..old_len], pmeta, out);
                    }
                    None => {
                        buf.truncate(old_len);
                        buf.extend_from_slice(bytes);
                        self.pending = buf;
                        self.pending_meta = Some(pmeta);
                        return;
                    }
                    Some(false) => self.not_rpc(),
                }
                continue;
            }
            let mut found = None;
            for i in 0..old_len {
                match self.candidate(&buf[i..]) {
                    Probe::Header(_) => {
                        found = Some(i);
                        break;
                    }
                    Probe::Incomplete => {
                        // Only possible when all of `bytes` is in `buf`: keep waiting.
                        self.counters.resync_skipped_bytes += i as u64;
                        buf.drain(..i);
                        self.pending = buf;
                        self.pending_meta = Some(pmeta);
                        return;
                    }
                    Probe::NotRpc => {}
                }
            }
            match found {
                None => self.counters.resync_skipped_bytes += old_len as u64,
                Some(i) => {
                    self.counters.resync_skipped_bytes += i as u64;
                    self.counters.resyncs += 1;
                    self.state = Self::mark();
                    self.run(&buf[i..old_len], pmeta, out);
                }
            }
        }
        self.run(bytes, meta, out);
    }

    /// Is there a plausible record mark + RPC header at the start of `b`?
    fn candidate(&self, b: &[u8]) -> Probe {
        let Some(m) = b.get(..4) else {
            return Probe::Incomplete;
        };
        let len = u32::from_be_bytes([m[0], m[1], m[2], m[3]]) & 0x7fff_ffff;
        if !(MIN_RECORD..=self.config.max_record).contains(&len) {
            return Probe::NotRpc;
        }
        probe_rpc_header(&b[4..], Strictness::Strict)
    }

    /// Does a stream start with a record here? [`candidate`](Self::candidate) at position
    /// 0, except that a first fragment too short to hold the header (legal, if odd) is taken
    /// on trust, since the header continues past the next mark. `None`: too few bytes yet.
    fn starts_with_record(&self, b: &[u8]) -> Option<bool> {
        let m = b.get(..4)?;
        let mark = u32::from_be_bytes([m[0], m[1], m[2], m[3]]);
        let len = mark & 0x7fff_ffff;
        if mark & 0x8000_0000 == 0 && (1..MIN_RECORD).contains(&len) {
            return Some(true);
        }
        match self.candidate(b) {
            Probe::Header(_) => Some(true),
            Probe::NotRpc => Some(false),
            Probe::Incomplete => None,
        }
    }

    fn not_rpc(&mut self) {
        self.counters.not_rpc_streams += 1;
        self.state = State::NotRpc;
        self.pending = Vec::new();
        self.pending_meta = None;
    }

    fn run(&mut self, mut bytes: &[u8], meta: M, out: &mut impl FnMut(RpcMessage<'_, M>)) {
        while !bytes.is_empty() {
            match self.state {
                State::NotRpc => return,
                State::First => match self.starts_with_record(bytes) {
                    Some(true) => self.state = Self::mark(),
                    None => {
                        self.pending.clear();
                        self.pending.extend_from_slice(bytes);
                        self.pending_meta = Some(meta);
                        return;
                    }
                    Some(false) => {
                        self.not_rpc();
                        return;
                    }
                },
                State::Hunting => {
                    let mut i = 0;
                    loop {
                        if i == bytes.len() {
                            self.counters.resync_skipped_bytes += i as u64;
                            return;
                        }
                        match self.candidate(&bytes[i..]) {
                            Probe::Header(_) => break,
                            Probe::Incomplete => {
                                self.counters.resync_skipped_bytes += i as u64;
                                self.pending.clear();
                                self.pending.extend_from_slice(&bytes[i..]);
                                self.pending_meta = Some(meta);
                                return;
                            }
                            Probe::NotRpc => i += 1,
                        }
                    }
                    self.counters.resync_skipped_bytes += i as u64;
                    self.counters.resyncs += 1;
                    self.state = Self::mark();
                    bytes = &bytes[i..];
                }
                State::Mark {
                    mut buf,
                    mut have,
                    meta: mark_meta,
                } => {
                    if have == 0 && self.msg.is_none() && bytes.len() >= 4 {
                        // Fast path: a whole single-fragment record inside these bytes is
                        // emitted without copying.
                        let mark = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                        let len = (mark & 0x7fff_ffff) as usize;
                        if mark & 0x8000_0000 != 0
                            && len as u32 <= self.config.max_record
                            && bytes.len() - 4 >= len
                            && len > 0
                        {
                            self.counters.messages += 1;
                            out(RpcMessage {
                                body: &bytes[4..4 + len],
                                wire_len: len as u64,
                                truncated: false,
                                first_meta: meta,
                                last_meta: meta,
                            });
                            bytes = &bytes[4 + len..];
                            continue;
                        }
                    }
                    let first = mark_meta.unwrap_or(meta);
                    let n = (4 - have as usize).min(bytes.len());
                    buf[have as usize..have as usize + n].copy_from_slice(&bytes[..n]);
                    have += n as u8;
                    bytes = &bytes[n..];
                    if have < 4 {
                        self.state = State::Mark {
                            buf,
                            have,
                            meta: Some(first),
                        };
                    } else {
                        self.on_mark(u32::from_be_bytes(buf), first, meta, out);
                    }
                }
                State::Body { remaining, last } => {
                    let n = (remaining as usize).min(bytes.len());
                    if let Some(m) = &mut self.msg {
                        m.last_data = m.last_data.max(meta);
                        if m.collecting {
                            self.body.extend_from_slice(&bytes[..n]);
                        }
                    }
                    bytes = &bytes[n..];
                    let remaining = remaining - n as u32;
                    self.state = State::Body { remaining, last };
                    if remaining == 0 {
                        self.end_fragment(last, meta, out);
                    }
                }
            }
        }
    }

    fn on_mark(&mut self, mark: u32, first: M, meta: M, out: &mut impl FnMut(RpcMessage<'_, M>)) {
        let len = mark & 0x7fff_ffff;
        let last = mark & 0x8000_0000 != 0;
        let msg = self.msg.get_or_insert(InProgress {
            first_meta: first,
            last_data: meta,
            wire_len: 0,
            collecting: true,
        });
        msg.last_data = msg.last_data.max(meta);
        msg.wire_len += u64::from(len);
        if len > self.config.max_record || msg.wire_len > self.config.max_message {
            self.counters.oversized_record += 1;
            self.msg = None;
            self.body.clear();
            self.state = State::Hunting;
            return;
        }
        if msg.collecting {
            // Room for the whole fragment at once, not by doublings (capped: the mark may
            // promise bytes that never come).
            self.body.reserve((len as usize).min(1 << 20));
        }
        self.state = State::Body {
            remaining: len,
            last,
        };
        if len == 0 {
            self.end_fragment(last, meta, out);
        }
    }

    fn end_fragment(&mut self, last: bool, meta: M, out: &mut impl FnMut(RpcMessage<'_, M>)) {
        self.state = Self::mark();
        if last {
            self.emit(meta, out);
        }
    }

    fn emit(&mut self, meta: M, out: &mut impl FnMut(RpcMessage<'_, M>)) {
        let Some(m) = self.msg.take() else {
            return;
        };
        let truncated = (self.body.len() as u64) < m.wire_len;
        if self.body.is_empty() && m.wire_len > 0 {
            self.counters.empty_messages += 1;
        } else {
            self.counters.messages += 1;
            self.counters.truncated_messages += u64::from(truncated);
            out(RpcMessage {
                body: &self.body,
                wire_len: m.wire_len,
                truncated,
                first_meta: m.first_meta,
                last_meta: meta.max(m.last_data),
            });
        }
        self.body.clear();
        // Keep one big message's buffer from pinning memory in a long-lived connection.
        if self.body.capacity() > 64 << 10 {
            self.body = Vec::new();
        }
    }

    /// `len` bytes of the stream are missing. Their size is known, so inside a fragment
    /// the framer skips them and stays in sync; a hole that covers a record mark forces a
    /// resync.
    pub fn gap(
        &mut self,
        len: u64,
        cause: GapCause,
        meta: M,
        out: &mut impl FnMut(RpcMessage<'_, M>),
    ) {
        match cause {
            GapCause::Lost => self.counters.gap_bytes += len,
            GapCause::NotCaptured => self.counters.not_captured_bytes += len,
        }
        if len == 0 {
            return;
        }
        if matches!(self.state, State::First) && !self.pending.is_empty() {
            // The first record's header is cut by the hole: it looked right as far as it
            // went, so take it as the start of a message (cut here) rather than lose it.
            let pmeta = self.pending_meta.take().unwrap_or(meta);
            let buf = std::mem::take(&mut self.pending);
            self.state = Self::mark();
            self.run(&buf, pmeta, out);
        }
        // Bytes cut by the snap length were on the wire in this segment; a message that a
        // lost stretch cuts is timed by its last captured bytes.
        let meta = match (&mut self.msg, cause) {
            (Some(m), GapCause::NotCaptured) => {
                m.last_data = m.last_data.max(meta);
                m.last_data
            }
            (Some(m), GapCause::Lost) => m.last_data,
            (None, _) => meta,
        };
        match self.state {
            State::NotRpc => {}
            State::Hunting | State::First => {
                // A hole at the very start: where the first record began is unknown.
                self.counters.resync_skipped_bytes += self.pending.len() as u64;
                self.pending.clear();
                self.pending_meta = None;
                self.state = State::Hunting;
            }
            State::Mark { have, .. } => {
                if self.msg.is_some() || have > 0 {
                    self.counters.truncated_at_gap += u64::from(self.msg.is_some());
                    self.emit(meta, out);
                }
                self.state = State::Hunting;
            }
            State::Body { remaining, last } => {
                if let Some(m) = &mut self.msg {
                    m.collecting = false;
                }
                if len <= u64::from(remaining) {
                    let remaining = remaining - len as u32;
                    self.state = State::Body { remaining, last };
                    if remaining == 0 {
                        self.end_fragment(last, meta, out);
                    }
                } else {
                    // The next record mark fell into the hole.
                    if !last {
                        self.counters.truncated_at_gap += 1;
                    }
                    self.emit(meta, out);
                    self.state = State::Hunting;
                }
            }
        }
    }

    /// The stream ended (FIN, RST, eviction or end of input): emits a message in progress
    /// as truncated.
    pub fn end(&mut self, _meta: M, out: &mut impl FnMut(RpcMessage<'_, M>)) {
        if let Some(m) = self.msg {
            self.counters.truncated_at_end += 1;
            self.emit(m.last_data, out);
        }
        self.counters.resync_skipped_bytes += self.pending.len() as u64;
        self.pending = Vec::new();
        self.pending_meta = None;
        self.state = State::Hunting;
    }
}

/// One direction of a tracked connection.
struct Direction<M> {
    reasm: TcpReassembler<M>,
    framer: RpcFramer<M>,
    /// Whether the stream's first segment was seen (the framer starts in sync only if
    /// that was a SYN).
    fed: bool,
}

/// Both directions of a connection; index 0 carries data from the canonical key's source.
struct Connection<M> {
    dirs: [Direction<M>; 2],
}

impl<M> MemoryUse for Connection<M> {
    fn memory_use(&self) -> usize {
        self.dirs
            .iter()
            .map(|d| d.reasm.memory_use() + d.framer.memory_use())
            .sum()
    }
}

/// Limits of a [`TcpRpcTracker`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TrackerConfig {
    pub reassembly: ReassemblyConfig,
    pub framing: FramingConfig,
    pub table: TableConfig,
}

/// Counters of a [`TcpRpcTracker`], summed over connections that were closed or evicted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrackerCounters {
    pub reassembly: ReassemblyCounters,
    pub framing: FramingCounters,
    /// Connections evicted while still open (idle or over budget).
    pub evicted_connections: u64,
}

/// Packets in, RPC messages out: reassembles every TCP connection of a trace and frames
/// each direction into RPC messages. Feed it the TCP packets you want decoded (e.g. the
/// NFS/portmap ports, or all).
pub struct TcpRpcTracker<M> {
    config: TrackerConfig,
    table: ConnectionTable<Connection<M>>,
    counters: TrackerCounters,
}

impl<M: Copy + Ord> TcpRpcTracker<M> {
    pub fn new(config: TrackerConfig) -> Self {
        TcpRpcTracker {
            config,
            table: ConnectionTable::new(config.table),
            counters: TrackerCounters::default(),
        }
    }

    /// Counts so far, for closed and evicted connections; complete after [`finish`](Self::finish).
    pub fn counters(&self) -> &TrackerCounters {
        &self.counters
    }

    /// Connections currently tracked.
    pub fn connections(&self) -> usize {
        self.table.len()
    }

    /// Memory charged to tracked connections.
    pub fn memory_use(&self) -> usize {
        self.table.memory_use()
    }

    /// Feeds one dissected packet (ignored unless it is TCP). `now` is the packet's time in
    /// nanoseconds (drives idle eviction). `out` receives each completed message with the
    /// flow key of its sender → receiver direction.
    pub fn packet(
        &mut self,
        h: &Headers<'_>,
        meta: M,
        now: u64,
        out: &mut impl FnMut(&FlowKey, RpcMessage<'_, M>),
    ) {
        let Transport::Tcp(tcp) = h.transport else {
            return;
        };
        let Some(key) = FlowKey::from_headers(h) else {
            return;
        };
        let (canon, reversed) = key.canonical();
        let seg = Segment {
            seq: tcp.seq,
            syn: tcp.syn(),
            fin: tcp.fin(),
            rst: tcp.rst(),
            payload: h.payload,
            wire_len: h.payload_wire_len,
            meta,
        };
        let cfg = self.config;
        let make = || Connection {
            dirs: [Direction::new(&cfg), Direction::new(&cfg)],
        };
        let acks = (tcp.flags & TcpHeader::ACK != 0).then_some(tcp.ack);
        let closed = self.table.with(canon, now, make, |c| {
            let i = usize::from(reversed);
            // The ACK first: it can release the other direction's data held behind a
            // capture gap (a call), which then comes before this segment's (its reply).
            if let Some(ack) = acks {
                let back = key.reversed();
                c.dirs[1 - i].acknowledged(ack, &mut |m| out(&back, m));
            }
            let d = &mut c.dirs[i];
            d.push(seg, &mut |m| out(&key, m));
            c.dirs.iter().all(|d| d.reasm.ended()) || tcp.rst()
        });
        if closed {
            if let Some(c) = self.table.remove(canon) {
                close_connection(canon, c, meta, &mut self.counters, out);
            }
        }
        if self.table.needs_eviction(now) {
            self.evict(now, meta, out);
        }
    }

    fn evict(&mut self, now: u64, meta: M, out: &mut impl FnMut(&FlowKey, RpcMessage<'_, M>)) {
        let counters = &mut self.counters;
        self.table.evict(now, |canon, c| {
            counters.evicted_connections += 1;
            close_connection(canon, c, meta, counters, out);
        });
    }

    /// End of input: flushes every connection (holes become gaps, messages in progress
    /// are emitted as truncated). `meta` is attached to what completes now.
    pub fn finish(&mut self, meta: M, out: &mut impl FnMut(&FlowKey, RpcMessage<'_, M>)) {
        let counters = &mut self.counters;
        self.table
            .drain(|canon, c| close_connection(canon, c, meta, counters, out));
    }
}

fn close_connection<M: Copy + Ord>(
    canon: FlowKey,
    c: Connection<M>,
    meta: M,
    counters: &mut TrackerCounters,
    out: &mut impl FnMut(&FlowKey, RpcMessage<'_, M>),
) {
    for (i, d) in c.dirs.into_iter().enumerate() {
        let k = if i == 0 { canon } else { canon.reversed() };
        d.close(meta, counters, &mut |m| out(&k, m));
    }
}

impl<M: Copy + Ord> Direction<M> {
    fn new(cfg: &TrackerConfig) -> Self {
        Direction {
            reasm: TcpReassembler::new(cfg.reassembly),
            framer: RpcFramer::new(cfg.framing, false),
            fed: false,
        }
    }

    fn push(&mut self, seg: Segment<'_, M>, out: &mut impl FnMut(RpcMessage<'_, M>)) {
        if !self.fed {
            if seg.syn {
                // Byte 0 of the stream is a record mark: no need to scan for one.
                self.framer = RpcFramer::new(self.framer.config, true);
                self.fed = true;
            } else if seg.wire_len > 0 || !seg.payload.is_empty() {
                self.fed = true;
            }
        }
        let Direction { reasm, framer, .. } = self;
        reasm.push(seg, &mut |ev| framer.event(ev, out));
    }

    fn acknowledged(&mut self, ack: u32, out: &mut impl FnMut(RpcMessage<'_, M>)) {
        let Direction { reasm, framer, .. } = self;
        reasm.acknowledged(ack, &mut |ev| framer.event(ev, out));
    }

    fn close(
        mut self,
        meta: M,
        counters: &mut TrackerCounters,
        out: &mut impl FnMut(RpcMessage<'_, M>),
    ) {
        let Direction { reasm, framer, .. } = &mut self;
        reasm.flush(&mut |ev| framer.event(ev, out));
        framer.end(meta, out);
        counters.reassembly.add(reasm.counters());
        counters.framing.add(framer.counters());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An NFSv3 call (prog 100003, vers 3) with AUTH_SYS credentials and `args` bytes.
    fn call(xid: u32, args: &[u8]) -> Vec<u8> {
        let mut m = vec![];
        for w in [xid, 0, 2, 100_003, 3, 7, 1, 20, 0x1234, 4] {
            m.extend(w.to_be_bytes());
        }
        m.extend(b"host"); // machine name, 4 bytes
        for w in [0u32, 0, 0, 0, 0] {
            m.extend(w.to_be_bytes()); // uid, gid, no gids; AUTH_NONE verifier
        }
        m.truncate(4 * 8 + 20 + 8);
        m.extend(args);
        m
    }

    fn reply(xid: u32, res: &[u8]) -> Vec<u8> {
        let mut m = vec![];
        for w in [xid, 1, 0, 0, 0, 0] {
            m.extend(w.to_be_bytes());
        }
        m.extend(res);
        m
    }

    /// Record-marks `msg` as fragments of the given sizes (last one gets the top bit).
    fn framed(msg: &[u8], frags: &[usize]) -> Vec<u8> {
        let mut out = vec![];
        let mut at = 0;
        for (i, &n) in frags.iter().enumerate() {
            let last = if i + 1 == frags.len() { 0x8000_0000 } else { 0 };
            out.extend((n as u32 | last).to_be_bytes());
            out.extend(&msg[at..at + n]);
            at += n;
        }
        assert_eq!(at, msg.len());
        out
    }

    fn one(msg: &[u8]) -> Vec<u8> {
        framed(msg, &[msg.len()])
    }

    #[derive(Debug, PartialEq)]
    struct Got {
        xid: u32,
        len: usize,
        wire: u64,
        truncated: bool,
        first: u32,
        last: u32,
    }

    fn got(m: RpcMessage<'_, u32>) -> Got {
        Got {
            xid: u32::from_be_bytes(m.body[..4].try_into().unwrap()),
            len: m.body.len(),
            wire: m.wire_len,
            truncated: m.truncated,
            first: m.first_meta,
            last: m.last_meta,
        }
    }

    fn feed(f: &mut RpcFramer<u32>, chunks: &[&[u8]]) -> Vec<Got> {
        let mut v = vec![];
        for (i, c) in chunks.iter().enumerate() {
            f.data(c, i as u32, &mut |m| v.push(got(m)));
        }
        v
    }

    #[test]
    fn probe_call_reply_and_junk() {
        let c = call(9, b"args");
        let Probe::Header(h) = probe_rpc_header(&c, Strictness::Strict) else {
            panic!()
        };
        assert_eq!(h.header_len, 60);
        assert_eq!(
            h.kind,
            RpcKind::Call {
                prog: 100_003,
                vers: 3,
                proc_: 7
            }
        );
        let r = reply(9, b"");
        assert_eq!(
            probe_rpc_header(&r, Strictness::Strict),
            Probe::Header(RpcHeader {
                xid: 9,
                kind: RpcKind::Reply {
                    reply_stat: 0,
                    stat: 0
                },
                header_len: 24
            })
        );
        assert_eq!(
            probe_rpc_header(&c[..30], Strictness::Strict),
            Probe::Incomplete
        );
        let mut bad = c.clone();
        bad[11] = 3; // rpcvers 3
        assert_eq!(probe_rpc_header(&bad, Strictness::Lenient), Probe::NotRpc);
        let mut big = c.clone();
        big[28..32].copy_from_slice(&401u32.to_be_bytes()); // credential length
        assert_eq!(probe_rpc_header(&big, Strictness::Lenient), Probe::NotRpc);
        let mut odd = c;
        odd[12..16].copy_from_slice(&7u32.to_be_bytes()); // program 7
        assert_eq!(
            probe_rpc_header(&odd, Strictness::Lenient),
            Probe::Header(RpcHeader {
                xid: 9,
                kind: RpcKind::Call {
                    prog: 7,
                    vers: 3,
                    proc_: 7
                },
                header_len: 60
            })
        );
        assert_eq!(probe_rpc_header(&odd, Strictness::Strict), Probe::NotRpc);
    }

    #[test]
    fn several_messages_in_one_segment_and_one_over_many() {
        let mut f = RpcFramer::new(FramingConfig::default(), true);
        let mut seg = one(&call(1, b"a"));
        seg.extend(one(&reply(1, b"bb")));
        seg.extend(one(&call(2, b"ccc")));
        let v = feed(&mut f, &[&seg]);
        assert_eq!(v.iter().map(|g| g.xid).collect::<Vec<_>>(), [1, 1, 2]);
        assert!(v
            .iter()
            .all(|g| !g.truncated && g.first == 0 && g.last == 0));

        let big = one(&call(3, &[5u8; 5000]));
        let chunks: Vec<&[u8]> = big.chunks(1448).collect();
        let v = feed(&mut f, &chunks);
        assert_eq!(
            v,
            [Got {
                xid: 3,
                len: 5060,
                wire: 5060,
                truncated: false,
                first: 0,
                last: 3
            }]
        );
        assert_eq!(f.counters().messages, 4);
    }

    #[test]
    fn a_stream_that_does_not_start_with_a_record_is_not_rpc_and_not_a_failure() {
        // HTTP after a SYN: its first four bytes read as a 1.2 GB record mark.
        let mut f = RpcFramer::new(FramingConfig::default(), true);
        let http = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(50);
        let mut s = http.clone();
        s.extend(one(&call(7, b"late"))); // RPC-looking bytes later do not revive it
        let v = feed(&mut f, &[&s[..3], &s[3..40], &s[40..]]);
        f.end(9, &mut |_| panic!("nothing to emit"));
        assert!(v.is_empty());
        let c = f.counters();
        assert_eq!(
            (c.not_rpc_streams, c.oversized_record, c.resyncs),
            (1, 0, 0)
        );
        assert_eq!(c.resync_skipped_bytes, 0);
        // A real first record split byte by byte is recognised once its header is whole.
        let rec = one(&call(8, &[5u8; 40]));
        let mut f = RpcFramer::new(FramingConfig::default(), true);
        let chunks: Vec<&[u8]> = rec.chunks(1).collect();
        let v = feed(&mut f, &chunks);
        assert_eq!(
            v.iter().map(|g| (g.xid, g.truncated)).collect::<Vec<_>>(),
            [(8, false)]
        );
        assert_eq!((v[0].first, v[0].last), (0, rec.len() as u32 - 1));
        assert_eq!(f.counters().not_rpc_streams, 0);
    }

    #[test]
    fn multi_fragment_records_byte_by_byte() {
        let msg = call(4, &[1u8; 100]);
        let rec = framed(&msg, &[10, 0, 90, 60]);
        let mut f = RpcFramer::new(FramingConfig::default(), true);
        let chunks: Vec<&[u8]> = rec.chunks(1).collect();
        let v = feed(&mut f, &chunks);
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].xid, v[0].len, v[0].wire, v[0].truncated),
            (4, 160, 160, false)
        );
        assert_eq!((v[0].first, v[0].last), (0, rec.len() as u32 - 1));
    }

    #[test]
    fn mid_stream_start_resyncs_at_any_split() {
        // The tail of some earlier WRITE, then a reply and a call.
        let mut stream = vec![0x42u8; 37];
        stream.extend(one(&reply(10, &[0u8; 8])));
        stream.extend(one(&call(11, b"xyz0")));
        for split in 0..stream.len() {
            let mut f = RpcFramer::new(FramingConfig::default(), false);
            let v = feed(&mut f, &[&stream[..split], &stream[split..]]);
            assert_eq!(
                v.iter().map(|g| g.xid).collect::<Vec<_>>(),
                [10, 11],
                "split {split}"
            );
            assert_eq!(f.counters().resync_skipped_bytes, 37, "split {split}");
            assert_eq!(f.counters().resyncs, 1);
        }
    }

    #[test]
    fn known_size_holes_keep_sync() {
        // Header-only capture of a 3000-byte WRITE over three segments, then a small call.
        let write = one(&call(20, &[9u8; 3000 - 60]));
        let next = one(&call(21, b"abcd"));
        let mut f = RpcFramer::new(FramingConfig::default(), true);
        let mut v = vec![];
        let mut push = |f: &mut RpcFramer<u32>, d: &[u8], hole: u64, meta: u32| {
            f.data(d, meta, &mut |m| v.push(got(m)));
            f.gap(hole, GapCause::NotCaptured, meta, &mut |m| v.push(got(m)));
        };
        push(&mut f, &write[..100], 1000 - 100, 0);
        push(&mut f, &write[1000..1040], 1000 - 40, 1);
        push(&mut f, &write[2000..2030], (write.len() - 2030) as u64, 2);
        push(&mut f, &next, 0, 3);
        assert_eq!(
            v,
            [
                Got {
                    xid: 20,
                    len: 96,
                    wire: 3000,
                    truncated: true,
                    first: 0,
                    last: 2
                },
                Got {
                    xid: 21,
                    len: 64,
                    wire: 64,
                    truncated: false,
                    first: 3,
                    last: 3
                },
            ]
        );
        assert_eq!(f.counters().resyncs, 0);
        assert_eq!(f.counters().truncated_messages, 1);
        assert_eq!(
            f.counters().not_captured_bytes,
            900 + 960 + (write.len() as u64 - 2030)
        );
    }

    #[test]
    fn hole_over_a_record_mark_resyncs_on_next_segment() {
        // One segment holds two calls; the capture kept its first 80 bytes.
        let mut seg = one(&call(30, &[1u8; 100]));
        seg.extend(one(&call(31, &[2u8; 100])));
        let mut f = RpcFramer::new(FramingConfig::default(), true);
        let mut v = vec![];
        f.data(&seg[..80], 0, &mut |m| v.push(got(m)));
        f.gap(
            (seg.len() - 80) as u64,
            GapCause::NotCaptured,
            0,
            &mut |m| v.push(got(m)),
        );
        f.data(&one(&reply(30, b"")), 1, &mut |m| v.push(got(m)));
        assert_eq!(
            v.iter().map(|g| (g.xid, g.truncated)).collect::<Vec<_>>(),
            [(30, true), (30, false)]
        );
        assert_eq!(f.counters().resyncs, 1);
        assert_eq!(f.counters().resync_skipped_bytes, 0);
        // Loss inside a multi-fragment message that also covers the next mark.
        let rec = framed(&call(40, &[3u8; 200]), &[100, 160]);
        let mut f = RpcFramer::new(FramingConfig::default(), true);
        let mut v = vec![];
        f.data(&rec[..50], 0, &mut |m| v.push(got(m)));
        f.gap(100, GapCause::Lost, 1, &mut |m| v.push(got(m)));
        assert_eq!(
            v,
            // Timed by its last captured bytes (meta 0), not by what revealed the hole.
            [Got {
                xid: 40,
                len: 46,
                wire: 100,
                truncated: true,
                first: 0,
                last: 0
            }]
        );
        assert_eq!(f.counters().truncated_at_gap, 1);
        assert_eq!(f.counters().gap_bytes, 100);
    }

    /// At a flush, a message's pieces come in stream order, each with the meta of the packet
    /// that carried it. A retransmission that filled part of an early hole after the tail
    /// had arrived is the message's last captured packet, as tshark reckons it.
    #[test]
    fn a_cut_message_is_timed_by_its_latest_piece_not_its_last_in_stream_order() {
        let rec = one(&call(60, &[7u8; 300]));
        let mut f = RpcFramer::new(FramingConfig::default(), true);
        let mut v = vec![];
        f.data(&rec[..100], 1, &mut |m| v.push(got(m)));
        f.gap(50, GapCause::Lost, 1, &mut |m| v.push(got(m)));
        f.data(&rec[150..200], 5, &mut |m| v.push(got(m)));
        f.gap(50, GapCause::Lost, 5, &mut |m| v.push(got(m)));
        f.data(&rec[250..], 2, &mut |m| v.push(got(m)));
        assert_eq!(
            v,
            [Got {
                xid: 60,
                // The body keeps the bytes before the first hole.
                len: 96,
                wire: rec.len() as u64 - 4,
                truncated: true,
                first: 1,
                last: 5
            }]
        );
    }

    #[test]
    fn oversized_records_and_end_of_stream() {
        let cfg = FramingConfig {
            max_record: 1000,
            max_message: 1500,
        };
        let mut f = RpcFramer::new(cfg, true);
        let mut s = one(&call(49, b"ok00"));
        s.extend((5000u32 | 0x8000_0000).to_be_bytes());
        s.extend([0u8; 64]);
        s.extend(one(&call(50, b"ok00")));
        s.extend(framed(&call(51, &[0u8; 1540]), &[800, 800]));
        s.extend(&one(&call(52, &[0u8; 100]))[..70]);
        let v = feed(&mut f, &[&s]);
        assert_eq!(v.iter().map(|g| g.xid).collect::<Vec<_>>(), [49, 50]);
        assert_eq!(f.counters().oversized_record, 2);
        let mut v = vec![];
        f.end(9, &mut |m| v.push(got(m)));
        assert_eq!(
            v,
            // Cut by the end of the stream: timed by its last captured bytes.
            [Got {
                xid: 52,
                len: 66,
                wire: 160,
                truncated: true,
                first: 0,
                last: 0
            }]
        );
        assert_eq!(f.counters().truncated_at_end, 1);
    }
}
