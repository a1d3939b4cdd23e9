//! ONC RPC and NFS extraction: packets in; RPC messages out of UDP datagrams and of
//! reassembled, record-framed TCP streams; calls paired with replies; rows for the rpc and
//! nfs tables.
//!
//! Pairing: a reply answers the call on the same connection (transport, both addresses and
//! ports) with the same xid that came before it in packet time and is not yet answered. A
//! message's time is that of the packet that completed it (for TCP, the segment that
//! delivered its last byte, or filled the last hole before it), never of a later one.
//!
//! Ids: a call's transaction id is a hash of its connection, xid and time, so it is a
//! function of the packets alone, whatever the file cuts, shards or threads; a reply, a
//! retransmitted call and a duplicate reply take the id of the transaction they belong to;
//! a reply without a call gets a hash of its own. Pass one and pass two run this same code.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use tapdeck_decode::rpc_framing::{probe_rpc_header, Probe, Strictness};
use tapdeck_decode::{
    FlowKey, FragmentReassembler, Headers, TcpRpcTracker, TrackerConfig, Transport,
};
use tapdeck_rpc::names::proc_name;
use tapdeck_rpc::{decode_message, parse_message, CallInfo, Decoded, Header, Outcome};

use crate::anonymize::Anonymizer;
use crate::columns::Addr;
use crate::error::Result;
use crate::nfsrows;
pub use crate::rpc_sinks::RpcSinks;
use crate::state::{OpenCall, OrphanReply, PassTwoInput};
use crate::tables::RpcRow;

/// An answered call is remembered this long, to recognise duplicate replies.
const ANSWERED_KEEP_NS: i64 = 60 * 1_000_000_000;

/// What the engine reports at the end of a file.
pub struct RpcResult {
    pub messages: u64,
    pub answered_warm: Vec<i64>,
    pub open_calls: Vec<OpenCall>,
    pub orphan_replies: Vec<OrphanReply>,
    pub counts: BTreeMap<String, u64>,
}

/// Where a message came from, handed through reassembly. Metas order by record number,
/// which is arrival order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Meta {
    // First: the derived order is by record.
    record: i64,
    time_ns: i64,
}

/// Transport, client and server: the scope of an xid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Conv {
    tcp: bool,
    client: ([u8; 16], u16),
    server: ([u8; 16], u16),
    version: u8,
}

impl Conv {
    fn key(&self) -> String {
        let ip = |a: &[u8; 16]| to_ip(self.version, a);
        format!(
            "{} {} {} {} {}",
            if self.tcp { "tcp" } else { "udp" },
            ip(&self.client.0),
            self.client.1,
            ip(&self.server.0),
            self.server.1
        )
    }
}

fn to_ip(version: u8, a: &[u8; 16]) -> IpAddr {
    if version == 4 {
        IpAddr::from([a[12], a[13], a[14], a[15]])
    } else {
        IpAddr::from(*a)
    }
}

/// A call waiting for (or recently given) its reply.
struct Pending {
    tid: i64,
    time_ns: i64,
    info: CallInfo,
    answered_at: Option<i64>,
    /// Seen while warming up over the previous file: its rows are that file's.
    warm: bool,
    /// Pass two: the decoded call (for names and handles in the reply's rows) and its rpc
    /// rows, written once it is known whether a reply came. Boxed, and both emptied once
    /// answered: an answered call stays in the map for a minute (to spot duplicate
    /// replies), so its entry should be small.
    decoded: Option<Box<Decoded>>,
    rows: Vec<RpcRow>,
}

pub struct RpcEngine {
    file_id: i32,
    input: Option<PassTwoInput>,
    answered_later: HashSet<i64>,
    /// Out only while it runs (see `packet`).
    tcp: Option<TcpRpcTracker<Meta>>,
    /// IP fragments, made into datagrams before UDP (or TCP) sees them. Across a file cut
    /// the warm-up feeds it too, so a datagram belongs to the file of its last fragment.
    frags: FragmentReassembler,
    calls: FastMap<(Conv, u32), Pending>,
    ordinal: u64,
    orphan_replies: Vec<OrphanReply>,
    counts: BTreeMap<String, u64>,
    last_time_ns: i64,
    last_sweep_ns: i64,
    continued: bool,
    last_record: i64,
    /// Replies seen before their call: a hole in the client's direction holds the call back
    /// in reassembly while the server's replies flow. Paired when the call arrives; orphans
    /// at the end of the file.
    early: FastMap<(Conv, u32), Early>,
    /// Set while an early reply is processed again: its ordinal, kept from its arrival.
    replay_ordinal: Option<u64>,
    /// At the end of the file, early replies are orphans.
    finishing: bool,
    /// Feeding the end of the previous file of the same capture: messages register calls
    /// and answers (so that pairing continues across the cut) but write and count nothing.
    warming: bool,
    /// Ids of calls seen while warming up that a reply in this file answered.
    answered_warm: Vec<i64>,
}

/// A hash map keyed by what a trace holds: ahash with per-process random keys is several
/// times faster than the standard SipHash and still resists crafted collisions.
type FastMap<K, V> = HashMap<K, V, ahash::RandomState>;

/// A message as it came off the wire, before parsing.
#[derive(Clone, Copy)]
struct Wire<'a> {
    key: &'a FlowKey,
    tcp: bool,
    body: &'a [u8],
    wire_len: u64,
    truncated: bool,
    meta: Meta,
}

/// What a reply found to answer.
enum Partner {
    /// A call of this file (or of the warm-up), with its decoded body when kept.
    Call(CallInfo, Option<Box<Decoded>>),
    /// A call of an earlier file, found by the stitch.
    Remote(CallInfo),
    /// No call (yet).
    None,
    /// While warming up: nothing to do.
    Ignore,
}

/// A reply waiting for its call.
struct Early {
    ordinal: u64,
    key: FlowKey,
    tcp: bool,
    body: Vec<u8>,
    wire_len: u64,
    truncated: bool,
    meta: Meta,
}

impl RpcEngine {
    /// `input` is None in pass one (count only) and the file's pass-two input otherwise.
    pub fn new(file_id: i32, input: Option<&PassTwoInput>) -> RpcEngine {
        RpcEngine {
            file_id,
            answered_later: input
                .map(|i| i.answered_later.iter().copied().collect())
                .unwrap_or_default(),
            input: input.cloned(),
            warming: false,
            answered_warm: Vec::new(),
            tcp: Some(TcpRpcTracker::new(TrackerConfig::default())),
            frags: FragmentReassembler::default(),
            calls: FastMap::default(),
            ordinal: 0,
            orphan_replies: Vec::new(),
            counts: BTreeMap::new(),
            last_time_ns: 0,
            last_sweep_ns: 0,
            continued: false,
            last_record: 0,
            early: FastMap::default(),
            replay_ordinal: None,
            finishing: false,
        }
    }

    fn count(&mut self, key: &str) {
        if self.warming {
            return; // counted by the file the message belongs to
        }
        // Called per message: no allocation for a key already there.
        match self.counts.get_mut(key) {
            Some(n) => *n += 1,
            None => _ = self.counts.insert(key.to_string(), 1),
        }
    }

    /// One dissected frame (`frame`: its bytes, which a fragment's data is taken from).
    /// A fragment is held until its datagram is whole; the datagram is then handled as a
    /// packet of the fragment that completed it (its time and record).
    pub fn packet(
        &mut self,
        h: &Headers<'_>,
        frame: &[u8],
        time_ns: i64,
        record: i64,
        anon: &mut Anonymizer,
        mut out: Option<&mut RpcSinks>,
    ) -> Result<()> {
        self.last_time_ns = time_ns;
        self.last_record = record;
        if h.fragment.is_some() {
            let Some(d) = self.frags.insert(h, frame, time_ns.max(0) as u64) else {
                return Ok(());
            };
            return self.packet(&d.headers(h), &d.data, time_ns, record, anon, out);
        }
        let meta = Meta { time_ns, record };
        match h.transport {
            Transport::Udp(_) => {
                let Some(key) = FlowKey::from_headers(h) else {
                    return Ok(());
                };
                // Only datagrams that look like RPC: UDP carries everything else too.
                if !matches!(
                    probe_rpc_header(h.payload, Strictness::Lenient),
                    Probe::Header(_)
                ) {
                    return Ok(());
                }
                let truncated = (h.payload.len() as u32) < h.payload_wire_len;
                let wire_len = h.payload_wire_len as u64;
                self.message(
                    Wire {
                        key: &key,
                        tcp: false,
                        body: h.payload,
                        wire_len,
                        truncated,
                        meta,
                    },
                    anon,
                    out.as_deref_mut(),
                )?;
            }
            Transport::Tcp(_) => {
                // The tracker is taken out while it runs, so that messages are handled as
                // it frames them, straight from its buffers (no copy of READ/WRITE data).
                let mut tcp = self.tcp.take().expect("the tracker is back after each use");
                let mut failed = None;
                tcp.packet(h, meta, time_ns.max(0) as u64, &mut |k, m| {
                    if failed.is_none() {
                        let r = self.message(
                            Wire {
                                key: k,
                                tcp: true,
                                body: m.body,
                                wire_len: m.wire_len,
                                truncated: m.truncated,
                                meta: m.last_meta,
                            },
                            anon,
                            out.as_deref_mut(),
                        );
                        failed = r.err();
                    }
                });
                self.tcp = Some(tcp);
                if let Some(e) = failed {
                    return Err(e);
                }
            }
            _ => {}
        }
        if time_ns - self.last_sweep_ns > ANSWERED_KEEP_NS {
            self.sweep(time_ns, out)?;
            self.last_sweep_ns = time_ns;
        }
        Ok(())
    }

    /// Processes a held reply again: paired with the call that has now arrived, or (with
    /// `orphan`) as a reply without a call.
    fn replay_early(
        &mut self,
        e: Early,
        orphan: bool,
        anon: &mut Anonymizer,
        out: Option<&mut RpcSinks>,
    ) -> Result<()> {
        let finishing = std::mem::replace(&mut self.finishing, orphan);
        self.replay_ordinal = Some(e.ordinal);
        let r = self.message(
            Wire {
                key: &e.key,
                tcp: e.tcp,
                body: &e.body,
                wire_len: e.wire_len,
                truncated: e.truncated,
                meta: e.meta,
            },
            anon,
            out,
        );
        self.finishing = finishing;
        r
    }

    /// Feeds a packet of the previous file of the same capture, so that TCP messages
    /// spanning the file boundary are reassembled whole and replies here find their calls
    /// there, as if the files were one. Messages that complete here belong to the previous
    /// file (which writes and counts them): they only register calls and answers.
    pub fn warm_up(
        &mut self,
        h: &Headers<'_>,
        frame: &[u8],
        time_ns: i64,
        anon: &mut Anonymizer,
    ) -> Result<()> {
        self.warming = true;
        let r = self.packet(h, frame, time_ns, 0, anon, None);
        self.frags.reset_counters(); // the previous file counts its own fragments
        self.warming = false;
        r
    }

    /// The next file of the same stream completes the messages in progress at the end of
    /// this one: they are not emitted here as truncated.
    pub fn set_continued(&mut self, continued: bool) {
        self.continued = continued;
    }

    /// Forgets answered calls old enough that a duplicate reply is no longer expected.
    fn sweep(&mut self, now: i64, out: Option<&mut RpcSinks>) -> Result<()> {
        // In a fixed order: the rows they still hold are written now.
        let mut old: Vec<(i64, i64, (Conv, u32))> = self
            .calls
            .iter()
            .filter(|(_, p)| p.answered_at.is_some_and(|t| now - t > ANSWERED_KEEP_NS))
            .map(|(k, p)| (p.time_ns, p.tid, *k))
            .collect();
        old.sort_unstable_by_key(|(t, id, _)| (*t, *id));
        let mut rows = Vec::new();
        for (_, _, k) in old {
            if let Some(p) = self.calls.remove(&k) {
                rows.extend(p.rows);
            }
        }
        if let Some(out) = out {
            for r in rows {
                out.rpc.push(r)?;
            }
        }
        Ok(())
    }

    /// One RPC message: parsed, given its row, then handled as a call or a reply.
    fn message(
        &mut self,
        w: Wire<'_>,
        anon: &mut Anonymizer,
        out: Option<&mut RpcSinks>,
    ) -> Result<()> {
        let msg = match parse_message(w.body) {
            Ok(m) => m,
            Err(e) => {
                let reason = match e {
                    tapdeck_rpc::Error::Truncated => "rpc_header_truncated".to_string(),
                    tapdeck_rpc::Error::Invalid(why) => format!("rpc_header_invalid:{why}"),
                };
                self.count(&format!("failed.{reason}"));
                return Ok(());
            }
        };
        let replayed = self.replay_ordinal.take();
        let ordinal = match replayed {
            Some(o) => o,
            None if self.warming => 0,
            None => {
                self.ordinal += 1;
                self.ordinal - 1
            }
        };
        let is_call = matches!(msg.header, Header::Call(_));
        let (client, server) = if is_call {
            (w.key.src, w.key.dst)
        } else {
            (w.key.dst, w.key.src)
        };
        let conv = Conv {
            tcp: w.tcp,
            client: (client.addr, client.port),
            server: (server.addr, server.port),
            version: w.key.version,
        };
        let mut row = RpcRow {
            time_ns: w.meta.time_ns,
            file_id: self.file_id,
            record: w.meta.record,
            transaction_id: 0,
            direction: if is_call { "call" } else { "reply" },
            transport: if w.tcp { "tcp" } else { "udp" },
            client_addr: Some(Addr(anon.ip(to_ip(w.key.version, &client.addr)))),
            server_addr: Some(Addr(anon.ip(to_ip(w.key.version, &server.addr)))),
            client_port: Some(i32::from(client.port)),
            server_port: Some(i32::from(server.port)),
            xid: i64::from(msg.xid),
            message_len: w.wire_len.min(i32::MAX as u64) as i32,
            payload_len: (w
                .wire_len
                .saturating_sub((w.body.len() - msg.body.len()) as u64))
            .min(i32::MAX as u64) as i32,
            truncated: w.truncated,
            ..Default::default()
        };
        // Calls get their id here, replies from their call (or their own, without one).
        row.transaction_id = message_id(&row, w.meta.time_ns, is_call);
        let k = (conv, msg.xid);
        match &msg.header {
            Header::Call(c) => {
                self.count("rpc.calls");
                row.program = Some(c.prog as i32);
                row.version = Some(c.vers as i32);
                row.procedure = Some(c.proc_ as i32);
                row.program_name = tapdeck_rpc::program_name(c.prog);
                row.procedure_name = Some(proc_name(c.prog, c.vers, c.proc_));
                row.auth_flavor = Some(c.cred.flavor as i32);
                if let Some(sys) = &c.cred.sys {
                    row.uid = Some(i64::from(sys.uid));
                    row.gid = Some(i64::from(sys.gid));
                }
                row.first_time_ns = Some(w.meta.time_ns);
                self.call(k, c.info(), &msg, row, anon, out)
            }
            Header::Reply(r) => {
                if replayed.is_none() {
                    self.count("rpc.replies");
                }
                row.reply_stat = Some(r.reply_stat as i8);
                row.accept_stat = r.accept_stat.map(|v| v as i32);
                row.reject_stat = r.reject_stat.map(|v| v as i32);
                row.auth_stat = r.auth_stat.map(|v| v as i32);
                self.reply(k, w, ordinal, &msg, row, anon, out)
            }
        }
    }

    /// A call: a retransmission of the transaction open on its connection and xid, or a
    /// new transaction; then a reply that was waiting for it.
    fn call(
        &mut self,
        k: (Conv, u32),
        info: CallInfo,
        msg: &tapdeck_rpc::RpcMessage<'_>,
        mut row: RpcRow,
        anon: &mut Anonymizer,
        mut out: Option<&mut RpcSinks>,
    ) -> Result<()> {
        let pass_two = out.is_some();
        // Decoded calls are kept for their replies' rows, warm ones included.
        let keep_decoded = pass_two || (self.warming && self.input.is_some());
        let decoded = keep_decoded.then(|| decode_message(msg, None));
        let time_ns = row.time_ns;
        match self.calls.get_mut(&k) {
            // The same xid and procedure again before any reply: a retransmission.
            Some(p) if p.answered_at.is_none() && p.info == info => {
                if !self.warming {
                    *self.counts.entry("rpc.retransmits".into()).or_default() += 1;
                }
                row.retransmit = true;
                row.transaction_id = p.tid;
                row.first_time_ns = Some(p.time_ns);
                if pass_two {
                    p.rows.push(row.clone());
                }
            }
            _ => {
                // A new transaction (an xid reused after its reply starts a new one).
                if let Some(old) = self.calls.remove(&k) {
                    if let Some(out) = out.as_deref_mut_opt() {
                        for r in old.rows {
                            out.rpc.push(r)?;
                        }
                    }
                }
                let pending = Pending {
                    tid: row.transaction_id,
                    time_ns,
                    info,
                    answered_at: None,
                    warm: self.warming,
                    decoded: None,
                    rows: if pass_two {
                        vec![row.clone()]
                    } else {
                        Vec::new()
                    },
                };
                self.calls.insert(k, pending);
            }
        }
        if let Some(d) = decoded {
            if let Some(out) = out.as_deref_mut_opt() {
                self.note_decode(&d);
                nfsrows::write(out, &row, info, &d, None, anon)?;
            }
            if let Some(p) = self.calls.get_mut(&k) {
                if p.decoded.is_none() {
                    p.decoded = Some(Box::new(d));
                }
            }
        }
        if let Some(early) = self.early.remove(&k) {
            // A reply processed before its call completed (held behind a hole): paired
            // only if the call came first in packet time.
            let answers = early.meta.time_ns >= time_ns;
            if answers {
                self.count("rpc.reply_before_call");
            }
            self.replay_early(early, !answers, anon, out)?;
        }
        Ok(())
    }

    /// A reply: paired with its call (here, in an earlier file, or not at all), held for
    /// a call still behind a hole, or (while warming up) dropped.
    #[allow(clippy::too_many_arguments)]
    fn reply(
        &mut self,
        k: (Conv, u32),
        w: Wire<'_>,
        ordinal: u64,
        msg: &tapdeck_rpc::RpcMessage<'_>,
        mut row: RpcRow,
        anon: &mut Anonymizer,
        mut out: Option<&mut RpcSinks>,
    ) -> Result<()> {
        let call = match self.pair(&k, &mut row, out.as_deref_mut_opt())? {
            Partner::Call(info, decoded) => Some((info, decoded)),
            Partner::Remote(info) => Some((info, None)),
            Partner::Ignore => return Ok(()),
            Partner::None if !self.finishing => {
                // Perhaps its call is still held behind a hole: wait for it.
                let early = Early {
                    ordinal,
                    key: *w.key,
                    tcp: w.tcp,
                    body: w.body.to_vec(),
                    wire_len: w.wire_len,
                    truncated: w.truncated,
                    meta: w.meta,
                };
                if let Some(older) = self.early.insert(k, early) {
                    self.replay_early(older, true, anon, out)?;
                }
                return Ok(());
            }
            Partner::None => {
                self.orphan_replies.push(OrphanReply {
                    conv: k.0.key(),
                    xid: k.1,
                    id: row.transaction_id,
                    time_ns: row.time_ns,
                });
                self.count("rpc.unmatched_replies");
                None
            }
        };
        if let Some((info, _)) = &call {
            row.program = Some(info.prog as i32);
            row.version = Some(info.vers as i32);
            row.procedure = Some(info.proc_ as i32);
            row.program_name = tapdeck_rpc::program_name(info.prog);
            row.procedure_name = Some(proc_name(info.prog, info.vers, info.proc_));
        }
        if let Some(out) = out {
            out.rpc.push(row.clone())?;
            if let Some((info, call_decoded)) = call {
                let d = decode_message(msg, Some(info));
                self.note_decode(&d);
                nfsrows::write(out, &row, info, &d, call_decoded.as_deref(), anon)?;
            }
        }
        Ok(())
    }

    /// Finds the call a reply answers: the one on its connection and xid that came before
    /// it and is not yet answered (or was answered within `ANSWERED_KEEP_NS`: a duplicate
    /// reply), else one an earlier file holds. Fills the reply's pairing columns, and
    /// writes the call's rows once it is answered.
    fn pair(
        &mut self,
        k: &(Conv, u32),
        row: &mut RpcRow,
        out: Option<&mut RpcSinks>,
    ) -> Result<Partner> {
        let time_ns = row.time_ns;
        // An answered call stays for duplicate replies for a fixed span of packet time
        // (not until a sweep happens to run), so the result is the same wherever the
        // files are cut.
        if self.calls.get(k).is_some_and(|p| {
            p.answered_at
                .is_some_and(|t| time_ns - t > ANSWERED_KEEP_NS)
        }) {
            self.calls.remove(k);
        }
        let warming = self.warming;
        if let Some(p) = self.calls.get_mut(k).filter(|p| p.time_ns <= time_ns) {
            row.transaction_id = p.tid;
            row.matched = true;
            row.first_time_ns = Some(p.time_ns);
            if p.answered_at.is_some() {
                if !warming {
                    *self
                        .counts
                        .entry("rpc.duplicate_replies".into())
                        .or_default() += 1;
                }
                row.retransmit = true;
            } else {
                if p.warm && !warming {
                    self.answered_warm.push(p.tid);
                }
                p.answered_at = Some(time_ns);
                for r in &mut p.rows {
                    r.matched = true;
                }
                if let Some(out) = out {
                    for r in std::mem::take(&mut p.rows) {
                        out.rpc.push(r)?;
                    }
                }
            }
            // The decoded call is needed once, for its reply's rows; a duplicate reply does
            // without (keeping it would hold every call in memory).
            return Ok(Partner::Call(p.info, p.decoded.take()));
        }
        if warming {
            // A reply of the previous file whose call is not in the warm-up span: that
            // file's business.
            return Ok(Partner::Ignore);
        }
        let remote = self
            .input
            .as_ref()
            .and_then(|i| i.remote_replies.get(&row.transaction_id));
        if let Some(remote) = remote {
            row.transaction_id = remote.transaction_id;
            row.matched = true;
            row.first_time_ns = Some(remote.time_ns);
            return Ok(Partner::Remote(CallInfo {
                prog: remote.program,
                vers: remote.version,
                proc_: remote.procedure,
                gss_wrapped: false,
            }));
        }
        Ok(Partner::None)
    }

    /// Counts bodies that did not decode fully, per reason.
    fn note_decode(&mut self, d: &Decoded) {
        match d.outcome {
            Outcome::Decoded => {}
            Outcome::Unsupported | Outcome::NoResults | Outcome::NoCall => return,
            Outcome::GssWrapped => self.count("failed.gss_wrapped_body"),
        }
        if d.truncated {
            self.count("failed.body_truncated");
        }
        if let Some(why) = d.invalid {
            self.count(&format!("failed.body_invalid:{why}"));
        }
        if d.undecoded_op.is_some() {
            self.count("failed.v4_undecoded_op");
        }
    }

    /// The end of the file: messages the end completes, replies whose call never came,
    /// the reassemblers' counts, and the calls still open.
    pub fn finish(
        mut self,
        anon: &mut Anonymizer,
        mut out: Option<&mut RpcSinks>,
    ) -> Result<RpcResult> {
        let mut tcp = self.tcp.take().expect("the tracker is back after each use");
        let continued_messages = self.finish_streams(&mut tcp, anon, out.as_deref_mut())?;
        // Replies whose call never came.
        let mut early: Vec<Early> = self.early.drain().map(|(_, e)| e).collect();
        early.sort_by_key(|e| e.ordinal);
        for e in early {
            self.replay_early(e, true, anon, out.as_deref_mut())?;
        }
        self.count_reassembly(&tcp, continued_messages);
        let open_calls = self.close_calls(out)?;
        Ok(RpcResult {
            messages: self.ordinal,
            answered_warm: self.answered_warm,
            open_calls,
            orphan_replies: self.orphan_replies,
            counts: self.counts,
        })
    }

    /// TCP messages completed only by the end of the capture (truncated by it) are
    /// handled now, unless a next file continues this one: then it completes them, and
    /// their number is returned so they are not counted as truncated here.
    fn finish_streams(
        &mut self,
        tcp: &mut TcpRpcTracker<Meta>,
        anon: &mut Anonymizer,
        mut out: Option<&mut RpcSinks>,
    ) -> Result<u64> {
        let mut done: Vec<(FlowKey, Vec<u8>, u64, bool, Meta)> = Vec::new();
        let end = Meta {
            time_ns: self.last_time_ns,
            record: self.last_record,
        };
        let continued = self.continued;
        let mut continued_messages = 0u64;
        tcp.finish(end, &mut |k, m| {
            if !continued {
                done.push((*k, m.body.to_vec(), m.wire_len, m.truncated, m.last_meta));
            } else if m.truncated {
                // Not cut: the next file completes it.
                continued_messages += 1;
            }
        });
        for (k, body, wire_len, truncated, m) in done {
            self.message(
                Wire {
                    key: &k,
                    tcp: true,
                    body: &body,
                    wire_len,
                    truncated,
                    meta: m,
                },
                anon,
                out.as_deref_mut(),
            )?;
        }
        Ok(continued_messages)
    }

    /// Adds what TCP framing and IP reassembly counted (gaps, resyncs, failures) to the
    /// file's counts; zeros are left out.
    fn count_reassembly(&mut self, tcp: &TcpRpcTracker<Meta>, continued_messages: u64) {
        let continued = self.continued;
        let c = *tcp.counters();
        let f = c.framing;
        let g = *self.frags.counters();
        let held = self.frags.in_progress().1 as u64;
        for (k, v) in [
            ("tcp.gap_bytes", f.gap_bytes),
            ("tcp.not_captured_bytes", f.not_captured_bytes),
            ("tcp.resyncs", f.resyncs),
            ("tcp.resync_skipped_bytes", f.resync_skipped_bytes),
            ("failed.oversized_record", f.oversized_record),
            ("failed.truncated_at_gap", f.truncated_at_gap),
            (
                "failed.truncated_at_end",
                f.truncated_at_end.saturating_sub(continued_messages),
            ),
            ("tcp.evicted_connections", c.evicted_connections),
            ("tcp.not_rpc_streams", f.not_rpc_streams),
            ("ip.fragments", g.fragments),
            ("ip.datagrams_reassembled", g.reassembled),
            ("ip.datagrams_overlapped", g.overlapped),
            ("ip.fragments_duplicate", g.duplicates),
            ("failed.ip_datagram_timed_out", g.timed_out),
            ("failed.ip_datagram_overlap_dropped", g.overlap_dropped),
            ("failed.ip_datagram_evicted", g.evicted),
            ("failed.ip_datagram_invalid", g.invalid),
            // Held at the end of a file that a next one continues: that file completes them.
            (
                "failed.ip_fragments_held_at_end",
                if continued { 0 } else { held },
            ),
        ] {
            if v > 0 {
                *self.counts.entry(k.into()).or_default() += v;
            }
        }
    }

    /// The calls still held at the end, in time order: the unanswered ones of this file
    /// are returned for the stitch, and the rpc rows not yet written go out, marked
    /// matched when a reply came (here, or in a later file as the stitch found).
    fn close_calls(&mut self, mut out: Option<&mut RpcSinks>) -> Result<Vec<OpenCall>> {
        let mut open_calls = Vec::new();
        let mut pending: Vec<Pending> = Vec::new();
        let mut calls: Vec<((Conv, u32), Pending)> = self.calls.drain().collect();
        calls.sort_unstable_by_key(|(_, p)| (p.time_ns, p.tid));
        for ((conv, xid), p) in calls {
            // A warm call is the previous file's open call, reported there.
            if p.answered_at.is_none() && !p.warm {
                open_calls.push(OpenCall {
                    conv: conv.key(),
                    xid,
                    id: p.tid,
                    time_ns: p.time_ns,
                    program: p.info.prog,
                    version: p.info.vers,
                    procedure: p.info.proc_,
                });
            }
            // Answered calls have written their rows already.
            if p.answered_at.is_none() || !p.rows.is_empty() {
                pending.push(p);
            }
        }
        let mut unmatched_calls = 0;
        for p in pending {
            let answered = p.answered_at.is_some() || self.answered_later.contains(&p.tid);
            if !answered && !p.warm {
                unmatched_calls += 1;
            }
            if let Some(out) = out.as_deref_mut() {
                for mut r in p.rows {
                    r.matched = answered;
                    out.rpc.push(r)?;
                }
            }
        }
        if unmatched_calls > 0 {
            self.counts
                .insert("rpc.unmatched_calls".into(), unmatched_calls);
        }
        Ok(open_calls)
    }
}

/// A message's transaction id: a hash of its connection (as written in the row, so
/// anonymized addresses when they are), xid and time, in 63 bits so that ids stay
/// non-negative. Calls and replies without a call hash in separate domains. Collisions
/// are as likely as for any 63-bit hash: about one pair among 3 billion transactions.
fn message_id(row: &RpcRow, time_ns: i64, call: bool) -> i64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&[u8::from(call), u8::from(row.transport == "tcp")]);
    for (addr, port) in [
        (row.client_addr, row.client_port),
        (row.server_addr, row.server_port),
    ] {
        let a = match addr.map(|a| a.0) {
            Some(IpAddr::V4(v4)) => v4.to_ipv6_mapped().octets(),
            Some(IpAddr::V6(v6)) => v6.octets(),
            None => [0; 16],
        };
        h.update(&a);
        h.update(&port.unwrap_or(0).to_le_bytes());
    }
    h.update(&(row.xid as u32).to_le_bytes());
    h.update(&time_ns.to_le_bytes());
    (h.digest() >> 1) as i64
}

/// `Option<&mut T>::as_deref_mut` on an already-reborrowed option.
trait AsDerefMutOpt<'a, T> {
    fn as_deref_mut_opt(&mut self) -> Option<&mut T>;
}

impl<'a, T> AsDerefMutOpt<'a, T> for Option<&'a mut T> {
    fn as_deref_mut_opt(&mut self) -> Option<&mut T> {
        self.as_deref_mut()
    }
}
