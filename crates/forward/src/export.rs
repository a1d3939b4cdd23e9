//! The exporter: each captured packet's kept bytes become a PSAMP packet report, batched
//! into IPFIX messages sized to the path MTU and sent with `sendmmsg` to one of several
//! collectors.
//!
//! One [`Exporter`] per capture thread, each with its own socket per collector: a socket is
//! a transport session, and the thread's observation domain (thread index + 1) keeps its
//! sequence numbers apart from the other threads', so balancing never looks like loss.
//! Packets wait in a per-collector batch only until the source's poll returns (or the batch
//! holds a `sendmmsg` worth of messages); nothing is shared between threads on the packet
//! path.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tapdeck_capture::{Interface, Packet, PacketSink, PacketSource, Poll, SourceCounters};
use tapdeck_decode::{dissect, headers_len, FlowKey, HeaderDepth};
use tapdeck_ipfix::{
    ie, max_section_len, read_header, BuildError, Decoder, ExporterStats, InterfaceInfo,
    MessageBuilder, MessageHeader, PacketReport, Record,
};

use crate::error::ForwardError;
use crate::tcp::{StreamLink, StreamTarget, Unsent, DOWN_AFTER, STREAM_MESSAGE_LEN};
use crate::udp;

/// Messages per `sendmmsg` call.
const BATCH: usize = 64;
/// The smallest message size accepted: room for the templates, a few interface records and
/// a statistics record in one message (IPv4's minimum reassembly size less 28).
pub const MIN_MESSAGE_LEN: usize = 548;
/// The PSAMP selector id of tapdeck's one selector (the capture filter).
pub const SELECTOR: u64 = 1;
/// How long a stopping exporter waits for its collectors to acknowledge what it queued
/// (TCP and TLS); what they have not acknowledged by then is counted as unconfirmed.
pub const LINGER: Duration = Duration::from_secs(5);
/// UDP: a collector that refused (ICMP port, host or network unreachable) is down until a
/// probe (a templates message) draws no error for this long. Longer than the kernel's ICMP
/// rate limit (one error a second per destination), so a still-closed port answers every
/// probe.
pub const PROBE_WINDOW: Duration = Duration::from_millis(1200);
/// UDP: host or network unreachable comes when neighbour resolution gives up (Linux: three
/// solicitations a second apart), so it speaks for everything sent this long before it, and a
/// probe is answered only after that long.
pub const UNREACHABLE_WINDOW: Duration = Duration::from_millis(3500);

/// IPFIX over TCP or TLS instead of UDP, for every collector.
#[derive(Clone)]
pub struct StreamSettings {
    /// TLS client settings, and per collector the name its certificate must carry.
    pub tls: Option<(
        Arc<rustls::ClientConfig>,
        Vec<rustls::pki_types::ServerName<'static>>,
    )>,
    /// Bytes of messages queued in all, split evenly over threads and collectors.
    pub buffer: usize,
}

/// How packets are spread over several collectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// By the symmetric flow id: both directions of a connection reach one collector.
    FlowHash,
    /// Whole batches to each collector in turn.
    RoundRobin,
}

pub struct ExportConfig {
    pub collectors: Vec<SocketAddr>,
    pub balance: Balance,
    /// Message size (IPFIX octets per datagram); `None`: the path MTU less IP and UDP headers.
    pub message_len: Option<usize>,
    /// Templates, interface and statistics records are re-sent this often.
    pub template_interval: Duration,
    pub stats_interval: Duration,
    pub headers: Option<HeaderDepth>,
    pub duration: Option<Duration>,
    /// Send runs of equal-size messages as one UDP GSO buffer where the kernel allows it.
    pub gso: bool,
    /// TCP or TLS instead of UDP.
    pub stream: Option<StreamSettings>,
}

/// Counts of one collector link (summed over threads in [`ExportStats`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct LinkCounts {
    pub collector: String,
    /// `udp`, `tcp` or `tls`.
    pub transport: &'static str,
    /// IPFIX octets per message in use.
    pub message_len: usize,
    pub messages: u64,
    /// Data records sent (packet reports and options records): what sequence numbers count.
    pub records: u64,
    pub packets: u64,
    pub bytes: u64,
    /// Packets of messages that could not be sent.
    pub not_sent: u64,
    /// Failed `sendmmsg` calls; ICMP port unreachable errors seen (on a send or after one).
    pub send_errors: u64,
    pub refused: u64,
    /// TCP/TLS: `messages`, `records`, `packets` and `bytes` count what the collector
    /// acknowledged. Packets queued and not yet acknowledged; packets not sent because the
    /// queue was full, and not acknowledged by the end (both within `not_sent`).
    pub buffered: u64,
    pub over_buffer: u64,
    pub unconfirmed: u64,
    /// Connections made, and ended (lost, or closed by the collector).
    pub connects: u64,
    pub disconnects: u64,
    /// UDP: packets not sent because the collector was down (it refused and no probe has
    /// been answered without an error since; within `not_sent`). UDP, TCP and TLS: packets
    /// of this collector's flows sent to another collector while it was down (counted
    /// there), including, over TCP/TLS, those taken back from its queue unsent.
    pub down: u64,
    pub failed_over: u64,
    /// Down now. UDP: refused, no probe answered without an error since. TCP/TLS: no
    /// connection, and the last attempt failed or none succeeded for [`DOWN_AFTER`].
    pub down_now: bool,
}

/// What the exporter reports, as JSON lines.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ExportStats {
    pub ts_ns: u64,
    pub elapsed_s: f64,
    /// Packets read from the capture rings.
    pub observed: u64,
    /// Packets the kernel dropped before tapdeck read them (ring full).
    pub kernel_dropped: u64,
    /// Packets sent in a packet report, and not sent (send failures).
    pub sent: u64,
    pub not_sent: u64,
    /// Packets a report could not hold whole and were cut further (the message size).
    pub cut_to_message: u64,
    /// Frames too short for the own-traffic exclusion to read (kept and exported: they
    /// cannot be export traffic).
    pub too_short_to_exclude: u64,
    /// TCP/TLS: packets queued and not yet acknowledged (sent or not sent by the end).
    pub buffered: u64,
    pub collectors: Vec<LinkCounts>,
}

impl ExportStats {
    /// Packets read but neither sent nor counted as not sent: zero once stopped.
    pub fn unaccounted(&self) -> i128 {
        i128::from(self.observed)
            - i128::from(self.sent)
            - i128::from(self.not_sent)
            - i128::from(self.buffered)
    }

    fn add(&mut self, t: &ThreadCounts) {
        self.observed += t.observed;
        self.kernel_dropped += t.kernel_dropped;
        self.cut_to_message += t.cut_to_message;
        self.too_short_to_exclude += t.too_short_to_exclude;
        for (sum, l) in self.collectors.iter_mut().zip(&t.links) {
            sum.transport = l.transport;
            sum.message_len = l.message_len;
            sum.messages += l.messages;
            sum.records += l.records;
            sum.packets += l.packets;
            sum.bytes += l.bytes;
            sum.not_sent += l.not_sent;
            sum.send_errors += l.send_errors;
            sum.refused += l.refused;
            sum.buffered += l.buffered;
            sum.over_buffer += l.over_buffer;
            sum.unconfirmed += l.unconfirmed;
            sum.connects += l.connects;
            sum.down += l.down;
            sum.down_now |= l.down_now;
            sum.failed_over += l.failed_over;
            sum.disconnects += l.disconnects;
            self.buffered += l.buffered;
            self.sent += l.packets;
            self.not_sent += l.not_sent;
        }
    }
}

#[derive(Debug, Clone, Default)]
struct ThreadCounts {
    observed: u64,
    too_short_to_exclude: u64,
    kernel_dropped: u64,
    cut_to_message: u64,
    links: Vec<LinkCounts>,
}

/// A packet waiting in a batch: its place in the batch's bytes.
struct Pending {
    ts_ns: u64,
    iface: u32,
    orig_len: u32,
    start: usize,
    len: usize,
}

/// How a link reaches its collector.
enum Wire {
    Udp(UdpSocket),
    Stream(Box<StreamLink>),
}

/// One collector, as seen from one thread.
struct Link {
    to: SocketAddr,
    wire: Wire,
    message_len: usize,
    /// UDP GSO in use: asked for, and not refused by the kernel or the route.
    gso: bool,
    bytes: Vec<u8>,
    pending: Vec<Pending>,
    sequence: u32,
    templates_due: bool,
    failing: bool,
    /// UDP: the collector refused; when, and when the last probe went out.
    down: bool,
    error_at: Option<Instant>,
    probe_at: Option<Instant>,
    /// UDP: packets sent lately, when, and whether the socket showed no error since (the
    /// time windows an ICMP error, when it comes, makes unconfirmed); and how long a probe
    /// waits for an error after the last one.
    recent: std::collections::VecDeque<(Instant, u64, bool)>,
    probe_window: Duration,
    bufs: Vec<Vec<u8>>,
    counts: LinkCounts,
}

impl Link {
    fn open(to: SocketAddr, message_len: Option<usize>, gso: bool) -> Result<Link, ForwardError> {
        let socket = udp::connect(to).map_err(|cause| match cause.kind() {
            std::io::ErrorKind::PermissionDenied => ForwardError::CollectorRefused { to, cause },
            _ => ForwardError::CollectorUnreachable { to, cause },
        })?;
        let len = match message_len {
            Some(n) => n,
            None => {
                let mtu = udp::path_mtu(&socket, &to)
                    .map_err(|cause| ForwardError::PathMtu { to, cause })?;
                mtu.saturating_sub(udp::ip_udp_overhead(&to))
            }
        }
        .min(udp::MAX_UDP_PAYLOAD);
        if len < MIN_MESSAGE_LEN {
            return Err(ForwardError::MessagesTooSmall {
                to,
                len,
                min: MIN_MESSAGE_LEN,
            });
        }
        let gso = gso && udp::gso_supported(&socket);
        Ok(Link::new(to, Wire::Udp(socket), len, gso))
    }

    /// A TCP or TLS link: connects in the background, messages queue meanwhile.
    fn open_stream(target: StreamTarget, message_len: Option<usize>) -> Result<Link, ForwardError> {
        let to = target.to;
        let len = message_len
            .unwrap_or(STREAM_MESSAGE_LEN)
            .min(usize::from(u16::MAX));
        if len < MIN_MESSAGE_LEN {
            return Err(ForwardError::MessagesTooSmall {
                to,
                len,
                min: MIN_MESSAGE_LEN,
            });
        }
        let stream = StreamLink::open(target).map_err(ForwardError::Thread)?;
        Ok(Link::new(to, Wire::Stream(Box::new(stream)), len, false))
    }

    fn new(to: SocketAddr, wire: Wire, len: usize, gso: bool) -> Link {
        let transport = match &wire {
            Wire::Udp(_) => "udp",
            Wire::Stream(s) if s.is_tls() => "tls",
            Wire::Stream(_) => "tcp",
        };
        Link {
            to,
            wire,
            message_len: len,
            gso,
            bytes: Vec::with_capacity(BATCH * len),
            pending: Vec::with_capacity(BATCH * 32),
            sequence: 0,
            templates_due: true,
            failing: false,
            down: false,
            error_at: None,
            probe_at: None,
            recent: std::collections::VecDeque::new(),
            probe_window: PROBE_WINDOW,
            bufs: (0..BATCH).map(|_| vec![0u8; len]).collect(),
            counts: LinkCounts {
                collector: to.to_string(),
                transport,
                message_len: len,
                ..LinkCounts::default()
            },
        }
    }

    /// The socket showed no error: what was sent so far is not refused; what is older
    /// than any error could speak for is forgotten.
    fn clean_check(&mut self) {
        let now = Instant::now();
        while self
            .recent
            .front()
            .is_some_and(|(t, _, _)| now - *t > UNREACHABLE_WINDOW)
        {
            self.recent.pop_front();
        }
        for e in &mut self.recent {
            e.2 = true;
        }
    }

    /// An ICMP error came back: the packets of its time window are unconfirmed (moved from
    /// sent to not sent), and the collector is down. Port unreachable comes at once, so its
    /// window is what was sent since the socket last showed no error; host or network
    /// unreachable comes when neighbour resolution gives up, so its window is the last
    /// [`UNREACHABLE_WINDOW`].
    fn mark_down(&mut self, e: &std::io::Error) {
        let unreachable = e.kind() != std::io::ErrorKind::ConnectionRefused;
        let moved: u64 = if unreachable {
            let n = self.recent.iter().map(|r| r.1).sum();
            self.recent.clear();
            n
        } else {
            let n = self.recent.iter().filter(|r| !r.2).map(|r| r.1).sum();
            self.recent.retain(|r| r.2);
            n
        };
        let c = &mut self.counts;
        let moved = moved.min(c.packets);
        c.packets -= moved;
        c.unconfirmed += moved;
        c.not_sent += moved;
        self.error_at = Some(Instant::now());
        self.probe_window = if unreachable {
            UNREACHABLE_WINDOW
        } else {
            PROBE_WINDOW
        };
        if !self.down {
            self.down = true;
            tracing::warn!(
                "collector {}: {e}; down until a probe draws no error for {} ms; its packets meanwhile go to the other collectors or are counted as not sent",
                self.to,
                self.probe_window.as_millis()
            );
        }
    }

    /// A batch's worth of bytes is waiting: time to send.
    fn full(&self) -> bool {
        self.bytes.len() >= BATCH * self.message_len / 2
    }

    /// Sends a built batch: UDP with one `sendmmsg` (plainly again when the route refuses
    /// GSO), TCP/TLS into the stream's queue. How many messages went, and the error that
    /// stopped the rest.
    fn send(&mut self, batch: &Batch) -> (usize, Option<std::io::Error>) {
        let built = batch.built;
        let messages: Vec<&[u8]> = self.bufs[..built]
            .iter()
            .zip(&batch.lens)
            .map(|(b, &len)| &b[..len])
            .collect();
        let socket = match &mut self.wire {
            Wire::Udp(socket) => socket,
            Wire::Stream(stream) => {
                // Queued now, counted as sent once the collector acknowledges them.
                let taken = messages
                    .iter()
                    .zip(&batch.reports)
                    .zip(&batch.records)
                    .take_while(|((m, n), r)| stream.offer(m, **n, **r))
                    .count();
                let full = std::io::Error::other(format!(
                    "its queue is full ({} messages waiting for the collector's acknowledgement)",
                    stream.queued_messages()
                ));
                return (taken, (taken < built).then_some(full));
            }
        };
        let (mut sent, mut err) = udp::send_batch(socket, &messages, self.gso);
        if sent < built && self.gso && err.as_ref().is_some_and(gso_refused) {
            // The route cannot take GSO (no checksum offload, say): send plainly from now on.
            tracing::info!(
                "collector {}: UDP GSO refused ({}); sending datagrams one by one",
                self.to,
                err.as_ref().map_or(String::new(), |e| e.to_string())
            );
            self.gso = false;
            let (more, e) = udp::send_batch(socket, &messages[sent..], false);
            sent += more;
            err = e;
        }
        (sent, err)
    }

    /// Counts a batch of which `sent` messages went (UDP: as sent; TCP/TLS: they count once
    /// acknowledged). What did not go is counted as not sent, its sequence numbers are
    /// taken back and its templates are due again; a collector error marks it down.
    /// Whether to go on with the next batch.
    fn account(&mut self, batch: &Batch, sent: usize, err: Option<std::io::Error>) -> bool {
        let built = batch.built;
        let stream = matches!(self.wire, Wire::Stream(_));
        let mut sent_packets = 0;
        let c = &mut self.counts;
        for ((len, recs), n) in batch
            .lens
            .iter()
            .zip(&batch.records)
            .zip(&batch.reports)
            .take(sent)
            .filter(|_| !stream)
        {
            c.messages += 1;
            c.records += u64::from(*recs);
            c.packets += n;
            c.bytes += *len as u64;
            sent_packets += n;
        }
        if sent_packets > 0 {
            sent_now(&mut self.recent, sent_packets);
        }
        if sent == built {
            self.sequence = batch.next_sequence;
            if self.failing && !self.down {
                self.failing = false;
                tracing::info!("collector {}: sending again", self.to);
            }
            return true;
        }
        c.send_errors += 1;
        self.sequence = batch.records[..sent]
            .iter()
            .fold(batch.first_sequence, |seq, r| seq.wrapping_add(*r));
        for (n, templates) in batch.reports[sent..built]
            .iter()
            .zip(&batch.with_templates[sent..built])
        {
            c.not_sent += n;
            if stream {
                c.over_buffer += n;
            }
            if *templates {
                self.templates_due = true;
            }
        }
        let refused = err
            .as_ref()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused);
        if refused {
            c.refused += 1;
        }
        if let Some(e) = err.as_ref().filter(|e| !stream && collector_error(e)) {
            self.mark_down(e);
        }
        if !self.failing {
            self.failing = true;
            let why = err.map_or("nothing sent".to_string(), |e| e.to_string());
            tracing::warn!(
                "collector {}: {}{why}; its packets are counted as not sent until it answers again",
                self.to,
                if refused {
                    "not listening (ICMP port unreachable): "
                } else {
                    "send failed: "
                }
            );
        }
        // Whatever was not sent stays unsent: the next batch starts afresh, unless nothing
        // went and the templates are due again (no spinning on a refusing collector within
        // one flush).
        sent > 0 || !self.templates_due
    }
}

/// Up to [`BATCH`] messages built in a link's buffers, ready to send.
struct Batch {
    built: usize,
    /// Per message: its length, packet reports, data records, and whether it opens with the
    /// templates.
    lens: [usize; BATCH],
    reports: [u64; BATCH],
    records: [u32; BATCH],
    with_templates: [bool; BATCH],
    /// The sequence number of the first message, and the one after the last.
    first_sequence: u32,
    next_sequence: u32,
}

impl Batch {
    fn new(sequence: u32) -> Batch {
        Batch {
            built: 0,
            lens: [0; BATCH],
            reports: [0; BATCH],
            records: [0; BATCH],
            with_templates: [false; BATCH],
            first_sequence: sequence,
            next_sequence: sequence,
        }
    }
}

/// Adds waiting packets from `*next` on to a message until it is full; how many went in.
/// A report that does not fit even an empty message is counted as not sent and skipped.
fn add_reports(
    b: &mut MessageBuilder<'_>,
    pending: &[Pending],
    bytes: &[u8],
    next: &mut usize,
    counts: &mut LinkCounts,
) -> u64 {
    let mut n = 0u64;
    while let Some(p) = pending.get(*next) {
        let r = PacketReport {
            time_ns: p.ts_ns,
            interface: p.iface,
            selector: SELECTOR,
            frame_size: u64::from(p.orig_len),
            frame_section: &bytes[p.start..p.start + p.len],
        };
        match b.add_packet_report(&r) {
            Ok(()) => {
                n += 1;
                *next += 1;
            }
            Err(BuildError::Full) if !b.is_empty() => break,
            Err(e) => {
                // Cut to fit at entry; a report that still does not fit is lost.
                tracing::debug!("packet report not built: {e}");
                counts.not_sent += 1;
                *next += 1;
            }
        }
    }
    n
}

/// What identifies this exporter in its statistics records.
#[derive(Debug, Clone, Copy)]
struct Identity {
    process: u32,
    domain: u32,
    start_time_ms: u64,
}

/// One thread's exporter: a [`PacketSink`] for its capture source.
pub struct Exporter {
    links: Vec<Link>,
    interfaces: Vec<Interface>,
    balance: Balance,
    next_link: usize,
    headers: Option<HeaderDepth>,
    id: Identity,
    counts: ThreadCounts,
}

impl Exporter {
    fn new(
        links: Vec<Link>,
        interfaces: Vec<Interface>,
        balance: Balance,
        headers: Option<HeaderDepth>,
        id: Identity,
    ) -> Exporter {
        let counts = ThreadCounts {
            links: links.iter().map(|l| l.counts.clone()).collect(),
            ..ThreadCounts::default()
        };
        Exporter {
            links,
            interfaces,
            balance,
            next_link: 0,
            headers,
            id,
            counts,
        }
    }

    /// The collector of a packet, and whether it is another than the flow's own (whose
    /// collector is down). Flows are placed by rendezvous hashing: each flow ranks the
    /// collectors by a hash of (flow, collector), so when one is down only its flows move,
    /// each to its next in rank, and back when it returns.
    fn link_for(&self, p: &Packet<'_>) -> (usize, Option<usize>) {
        let n = self.links.len();
        if n == 1 {
            return (0, None);
        }
        match self.balance {
            Balance::RoundRobin => {
                let k = (0..n)
                    .map(|i| (self.next_link + i) % n)
                    .find(|&k| !self.links[k].down)
                    .unwrap_or(self.next_link);
                (k, None)
            }
            Balance::FlowHash => {
                let linktype = self
                    .interfaces
                    .get(p.iface as usize)
                    .map_or(1, |i| u32::from(i.linktype));
                let id = FlowKey::from_headers(&dissect(linktype, p.data)).map_or(0, |k| k.id());
                let rank = |k: usize| splitmix(id ^ splitmix(k as u64 + 1));
                let own = (0..n).max_by_key(|&k| rank(k)).expect("n > 1");
                if !self.links[own].down {
                    return (own, None);
                }
                match (0..n)
                    .filter(|&k| !self.links[k].down)
                    .max_by_key(|&k| rank(k))
                {
                    Some(k) => (k, Some(own)),
                    None => (own, None),
                }
            }
        }
    }

    /// UDP: reads the error an ICMP message left on the socket. An error makes the packets
    /// of the window unconfirmed and the collector down; a down collector is probed every
    /// [`PROBE_WINDOW`] and comes back once a probe drew no error for that long.
    fn check_udp(&mut self, k: usize) {
        let link = &mut self.links[k];
        let Wire::Udp(socket) = &link.wire else {
            return;
        };
        match socket.take_error() {
            Ok(Some(e)) if collector_error(&e) => {
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    link.counts.refused += 1;
                }
                link.mark_down(&e);
            }
            _ => link.clean_check(),
        }
        if !link.down {
            return;
        }
        let now = Instant::now();
        match link.probe_at {
            Some(p) if now - p < link.probe_window => {}
            Some(p) if link.error_at.is_some_and(|e| e < p) => {
                link.down = false;
                link.failing = false;
                tracing::info!("collector {}: answers again (a probe drew no error for {} ms); sending to it again", link.to, link.probe_window.as_millis());
            }
            _ => {
                link.probe_at = Some(now);
                link.templates_due = true;
                self.flush_link(k);
            }
        }
    }

    /// Sends every waiting packet, and the templates where due; moves the streams on.
    fn flush(&mut self) {
        self.watch_streams();
        for k in 0..self.links.len() {
            self.check_udp(k);
            // A down stream link gets no templates of its own: a new connection starts with them.
            let templates = self.links[k].templates_due
                && !(self.links[k].down && matches!(self.links[k].wire, Wire::Stream(_)));
            if !self.links[k].pending.is_empty() || templates {
                self.flush_link(k);
            }
            self.pump_stream(k);
            let link = &mut self.links[k];
            link.counts.down_now = link.down;
            self.counts.links[k].clone_from(&link.counts);
        }
    }

    /// TCP/TLS: marks links down (no connection for [`DOWN_AFTER`], or the last attempt to
    /// connect failed) and up again (connected), as UDP's ICMP errors and probes do, and
    /// hands what a down link's queue holds unsent to the living collectors.
    fn watch_streams(&mut self) {
        for link in &mut self.links {
            let Wire::Stream(stream) = &link.wire else {
                continue;
            };
            let down = stream.is_down();
            if down && !link.down {
                tracing::warn!(
                    "collector {}: no connection (the last attempt failed, or none for {} s); down: its flows go to the other collectors until it connects again",
                    link.to,
                    DOWN_AFTER.as_secs()
                );
            } else if !down && link.down {
                tracing::info!(
                    "collector {}: connected again; its flows come back to it",
                    link.to
                );
            }
            link.down = down;
        }
        if self.links.iter().all(|l| l.down) {
            return;
        }
        for k in 0..self.links.len() {
            let unsent = match &self.links[k].wire {
                Wire::Stream(s) => self.links[k].down && s.has_unsent(),
                Wire::Udp(_) => false,
            };
            if unsent {
                self.reroute(k);
            }
        }
    }

    /// TCP/TLS: the messages queued for down link `k` that never went out on any
    /// connection go to the living collectors, packet by packet by the same rendezvous
    /// hash as new packets (counted as failed over). Messages that went out and were not
    /// acknowledged stay queued for `k`: its collector may hold them, and sending them
    /// elsewhere could store them twice.
    fn reroute(&mut self, k: usize) {
        let Wire::Stream(stream) = &mut self.links[k].wire else {
            return;
        };
        let unsent = stream.take_unsent();
        let Some(first) = unsent.first().and_then(|u| read_header(&u.bytes)) else {
            return;
        };
        // Their records were never numbered on any connection: the line goes back.
        self.links[k].sequence = first.sequence;
        let moved: u64 = unsent.iter().map(|u| u.packets).sum();
        tracing::info!(
            "collector {}: {moved} packets queued for it and never sent go to the other collectors",
            self.links[k].to
        );
        let mut decoder = self.own_decoder(k);
        let peer = SocketAddr::from(([0, 0, 0, 0], 0));
        for Unsent { bytes, packets } in &unsent {
            let decoded = decoder.decode_each(peer, bytes, |r| {
                if let Record::Packet(p) = r {
                    self.place(&Packet {
                        ts_ns: p.time_ns,
                        iface: p.interface,
                        orig_len: u32::try_from(p.frame_size).unwrap_or(u32::MAX),
                        flags: None,
                        data: p.frame_section,
                    });
                }
            });
            if let Err(e) = decoded {
                // Our own messages always decode; if one did not, its packets are counted.
                tracing::error!("collector {}: a queued message does not decode ({e}); its {packets} packets are counted as not sent", self.links[k].to);
                self.links[k].counts.not_sent += packets;
            }
        }
    }

    /// A decoder that knows this exporter's templates, to read its own queued messages.
    fn own_decoder(&self, k: usize) -> Decoder {
        let mut decoder = Decoder::new();
        let len = self.links[k].message_len;
        let mut buf = vec![0u8; len];
        let header = MessageHeader {
            domain: self.id.domain,
            ..MessageHeader::default()
        };
        if let Ok(mut b) = MessageBuilder::new(&mut buf, len, header) {
            let _ = b.add_templates();
            let built = b.finish();
            let peer = SocketAddr::from(([0, 0, 0, 0], 0));
            let _ = decoder.decode(peer, &buf[..built.len], &mut Vec::new());
        }
        decoder
    }

    /// A TCP/TLS link: writes what the socket takes, opens a new connection with the
    /// templates, and counts what the collector acknowledged.
    fn pump_stream(&mut self, k: usize) {
        let Wire::Stream(stream) = &mut self.links[k].wire else {
            return;
        };
        stream.pump();
        if let Some(first) = stream.wants_start() {
            let link = &self.links[k];
            let sequence = first.unwrap_or(link.sequence);
            let stats = self.stats_record(link, 0, 0);
            let mut buf = vec![0u8; link.message_len];
            let header = MessageHeader {
                export_time: (unix_ns() / 1_000_000_000) as u32,
                sequence,
                domain: self.id.domain,
                ..MessageHeader::default()
            };
            let built = MessageBuilder::new(&mut buf, link.message_len, header).map(|mut b| {
                add_session_records(&mut b, &self.interfaces, &stats);
                b.finish()
            });
            let link = &mut self.links[k];
            if let (Ok(built), Wire::Stream(stream)) = (built, &mut link.wire) {
                buf.truncate(built.len);
                stream.start(buf, built.data_records);
                link.sequence = link.sequence.wrapping_add(built.data_records);
                stream.pump();
            }
        }
        let link = &mut self.links[k];
        let Wire::Stream(stream) = &mut link.wire else {
            return;
        };
        let a = stream.take_acked();
        let c = &mut link.counts;
        c.messages += a.messages;
        c.records += a.records;
        c.packets += a.packets;
        c.bytes += a.bytes;
        c.buffered = stream.queued_packets();
        c.connects = stream.connects;
        c.disconnects = stream.disconnects;
        self.counts.links[k] = link.counts.clone();
    }

    /// At stop: waits up to [`LINGER`] for the collectors to acknowledge what is queued,
    /// closes the connections, and counts what they did not acknowledge as unconfirmed.
    fn drain_streams(&mut self) {
        let deadline = Instant::now() + LINGER;
        loop {
            self.flush();
            let waiting = self.links.iter().find_map(|l| match &l.wire {
                Wire::Stream(s) if !s.is_empty() => Some(s),
                _ => None,
            });
            match waiting {
                Some(s) if Instant::now() < deadline => s.wait(Duration::from_millis(20)),
                _ => break,
            }
        }
        for k in 0..self.links.len() {
            if let Wire::Stream(s) = &mut self.links[k].wire {
                s.close();
            }
            self.pump_stream(k);
            let link = &mut self.links[k];
            if let Wire::Stream(s) = &link.wire {
                let left = s.queued_packets();
                if left > 0 {
                    tracing::warn!(
                        "collector {}: {left} packets not acknowledged within {} s of stopping; counted as unconfirmed (not sent)",
                        link.to,
                        LINGER.as_secs()
                    );
                }
                link.counts.unconfirmed += left;
                link.counts.not_sent += left;
                link.counts.buffered = 0;
            }
            self.counts.links[k] = self.links[k].counts.clone();
        }
    }

    fn templates_due(&mut self) {
        for l in &mut self.links {
            l.templates_due = true;
        }
    }

    fn stats_record(
        &self,
        link: &Link,
        messages_before: u64,
        records_before: u64,
    ) -> ExporterStats {
        let not_sent: u64 = self.links.iter().map(|l| l.counts.not_sent).sum();
        ExporterStats {
            exporting_process: self.id.process,
            selector: SELECTOR,
            start_time_ms: self.id.start_time_ms,
            messages: link.counts.messages + messages_before,
            records: link.counts.records + records_before,
            ignored_packets: self.counts.kernel_dropped,
            not_sent_packets: not_sent,
            observed_packets: self.counts.observed,
            selected_packets: self.counts.observed,
        }
    }

    /// Builds the link's waiting packets into messages and sends them, `BATCH` at a time.
    /// Messages that could not be sent are counted, and the sequence number goes back to
    /// the first of them, so the collector sees no gap for records that never left.
    fn flush_link(&mut self, k: usize) {
        let had_packets = !self.links[k].pending.is_empty();
        let export_time = (unix_ns() / 1_000_000_000) as u32;
        let mut next = 0;
        loop {
            let link = &self.links[k];
            if next >= link.pending.len() && !link.templates_due {
                break;
            }
            let batch = self.build_batch(k, &mut next, export_time);
            if batch.built == 0 {
                break;
            }
            let link = &mut self.links[k];
            let (sent, err) = link.send(&batch);
            if !link.account(&batch, sent, err) {
                break;
            }
        }
        // Anything left (a send failure stopped the loop) is counted as not sent.
        let link = &mut self.links[k];
        let left = link.pending.len().saturating_sub(next) as u64;
        link.counts.not_sent += left;
        link.pending.clear();
        link.bytes.clear();
        if had_packets && k == self.next_link {
            self.next_link = (k + 1) % self.links.len();
        }
        self.counts.links[k] = self.links[k].counts.clone();
    }

    /// Builds up to `BATCH` messages into link `k`'s buffers from its waiting packets,
    /// starting at `*next` (moved past what went in); the templates, interface and
    /// statistics records open the first message when they are due.
    fn build_batch(&mut self, k: usize, next: &mut usize, export_time: u32) -> Batch {
        let mut batch = Batch::new(self.links[k].sequence);
        let (mut msgs_before, mut recs_before) = (0u64, 0u64);
        while batch.built < BATCH
            && (*next < self.links[k].pending.len() || self.links[k].templates_due)
        {
            let stats = self.links[k]
                .templates_due
                .then(|| self.stats_record(&self.links[k], msgs_before, recs_before));
            let interfaces = &self.interfaces;
            let link = &mut self.links[k];
            let header = MessageHeader {
                export_time,
                sequence: batch.next_sequence,
                domain: self.id.domain,
                ..MessageHeader::default()
            };
            let i = batch.built;
            let Ok(mut b) = MessageBuilder::new(&mut link.bufs[i], link.message_len, header) else {
                break;
            };
            if let Some(stats) = stats {
                add_session_records(&mut b, interfaces, &stats);
                link.templates_due = false;
                batch.with_templates[i] = true;
            }
            let n = add_reports(&mut b, &link.pending, &link.bytes, next, &mut link.counts);
            let out = b.finish();
            batch.lens[i] = out.len;
            batch.reports[i] = n;
            batch.records[i] = out.data_records;
            batch.next_sequence = batch.next_sequence.wrapping_add(out.data_records);
            msgs_before += 1;
            recs_before += u64::from(out.data_records);
            batch.built += 1;
        }
        batch
    }

    fn set_kernel_drops(&mut self, counters: &[SourceCounters]) {
        self.counts.kernel_dropped = counters.iter().map(|c| c.dropped).sum();
    }
}

impl PacketSink for Exporter {
    fn packet(&mut self, p: &Packet<'_>) {
        self.counts.observed += 1;
        if too_short_to_exclude(p) {
            self.counts.too_short_to_exclude += 1;
        }
        self.place(p);
    }
}

impl Exporter {
    /// Cuts a packet and puts it in its collector's batch (or counts it not sent, when every
    /// UDP collector is down).
    fn place(&mut self, p: &Packet<'_>) {
        let mut keep = p.data.len();
        if let Some(depth) = self.headers {
            let linktype = self
                .interfaces
                .get(p.iface as usize)
                .map_or(1, |i| u32::from(i.linktype));
            keep = keep.min(headers_len(linktype, p.data, depth));
        }
        let (k, moved_from) = self.link_for(p);
        if let Some(own) = moved_from {
            self.links[own].counts.failed_over += 1;
        }
        let link = &mut self.links[k];
        if link.down && matches!(link.wire, Wire::Udp(_)) {
            // Every collector is down: nothing is sent (only probes), and it is counted.
            // (Over TCP/TLS the packets queue for their own collector, within --buffer.)
            link.counts.down += 1;
            link.counts.not_sent += 1;
            return;
        }
        let max = max_section_len(link.message_len);
        if keep > max {
            keep = max;
            self.counts.cut_to_message += 1;
        }
        let start = link.bytes.len();
        link.bytes.extend_from_slice(&p.data[..keep]);
        link.pending.push(Pending {
            ts_ns: p.ts_ns,
            iface: p.iface,
            orig_len: p.orig_len.max(keep as u32),
            start,
            len: keep,
        });
        if link.full() {
            self.flush_link(k);
        }
    }
}

/// Packets just sent (UDP), for the time windows of [`Link::mark_down`].
fn sent_now(recent: &mut std::collections::VecDeque<(Instant, u64, bool)>, n: u64) {
    let now = Instant::now();
    match recent.back_mut() {
        Some((t, m, false)) if now - *t < Duration::from_millis(10) => *m += n,
        _ => recent.push_back((now, n, false)),
    }
}

/// Errors that an ICMP message from (or on the way to) a collector leaves on a connected
/// UDP socket: port, host or network unreachable.
fn collector_error(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED)
            | Some(libc::EHOSTUNREACH)
            | Some(libc::ENETUNREACH)
            | Some(libc::EHOSTDOWN)
    )
}

/// The frames the capture filter's length guard keeps (`export`'s `capture_filter`): an
/// Ethernet frame too short for the exclusion's IPv4 or IPv6 fields.
fn too_short_to_exclude(p: &Packet<'_>) -> bool {
    let len = p.orig_len as usize;
    let ethertype = p.data.get(12..14).map(|t| u16::from_be_bytes([t[0], t[1]]));
    let ihl = p.data.get(14).map_or(0, |b| usize::from(b & 0xf) * 4);
    len < 34
        || (ethertype == Some(0x0800) && len < 18 + ihl)
        || (ethertype == Some(0x86dd) && len < 58)
}

/// A 64-bit mix (splitmix64's finalizer): rendezvous ranks from a flow id.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Errors with which a kernel or route turns down a GSO send (not a collector's fault).
fn gso_refused(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EIO) | Some(libc::EOPNOTSUPP) | Some(libc::ENOPROTOOPT)
    )
}

/// What opens a transport session and is repeated on the template interval: the templates,
/// the interfaces' names and the exporter's own counts. Checked at start-up: these fit an
/// empty message of MIN_MESSAGE_LEN.
fn add_session_records(
    b: &mut MessageBuilder<'_>,
    interfaces: &[Interface],
    stats: &ExporterStats,
) {
    let _ = b.add_templates();
    for (i, iface) in interfaces.iter().enumerate() {
        let _ = b.add_interface(&InterfaceInfo {
            id: i as u32,
            name: iface.name.as_deref().unwrap_or(""),
            description: iface.description.as_deref().unwrap_or(""),
            frame_type: frame_type(iface.linktype),
        });
    }
    let _ = b.add_exporter_stats(stats);
}

fn frame_type(linktype: u16) -> u16 {
    match linktype {
        105 | 127 => ie::FRAME_TYPE_IEEE802_11,
        _ => ie::FRAME_TYPE_ETHERNET,
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Exports from `sources` (one thread each) until they end, `stop` is set or the duration
/// passes. `report` gets a stats record every `stats_interval` and the final one.
pub fn run<S: PacketSource + 'static>(
    cfg: ExportConfig,
    sources: Vec<S>,
    stop: Arc<AtomicBool>,
    mut report: impl FnMut(&ExportStats, bool),
) -> Result<ExportStats, ForwardError> {
    if cfg.collectors.is_empty() {
        return Err(ForwardError::NoCollector);
    }
    // Sockets are opened here, before any thread starts, so a bad collector is one error.
    let exporters = sources
        .iter()
        .enumerate()
        .map(|(k, source)| open_exporter(&cfg, k, sources.len(), source.interfaces()))
        .collect::<Result<Vec<_>, _>>()?;
    let published: Arc<Vec<Mutex<ThreadCounts>>> = Arc::new(
        exporters
            .iter()
            .map(|e| Mutex::new(e.counts.clone()))
            .collect(),
    );
    let start = Instant::now();
    let deadline = cfg.duration.map(|d| start + d);
    let mut threads = Vec::new();
    for (k, (source, exporter)) in sources.into_iter().zip(exporters).enumerate() {
        let stop = Arc::clone(&stop);
        let published = Arc::clone(&published);
        let interval = cfg.template_interval;
        threads.push(
            thread::Builder::new()
                .name(format!("export-{k}"))
                .spawn(move || {
                    export_loop(source, exporter, &stop, deadline, interval, &published[k])
                })
                .map_err(ForwardError::Thread)?,
        );
    }
    let snapshot = |ts_ns: u64| sum_threads(&cfg.collectors, start, &published, ts_ns);
    let mut next_report = start + cfg.stats_interval;
    while threads.iter().any(|t| !t.is_finished()) {
        thread::sleep(Duration::from_millis(50));
        if Instant::now() >= next_report {
            report(&snapshot(unix_ns()), false);
            next_report += cfg.stats_interval;
        }
    }
    let error = join_all(threads);
    let last = snapshot(unix_ns());
    report(&last, true);
    match error {
        Some(e) => Err(e),
        None => Ok(last),
    }
}

/// Thread `k`'s exporter: a link per collector (a socket, or a stream with its share of
/// the buffer), and its own observation domain.
fn open_exporter(
    cfg: &ExportConfig,
    k: usize,
    threads: usize,
    interfaces: &[Interface],
) -> Result<Exporter, ForwardError> {
    let per_link = |buffer: usize| buffer / (threads * cfg.collectors.len()).max(1);
    let links = cfg
        .collectors
        .iter()
        .enumerate()
        .map(|(i, &to)| match &cfg.stream {
            None => Link::open(to, cfg.message_len, cfg.gso),
            Some(st) => Link::open_stream(
                StreamTarget {
                    to,
                    tls: st
                        .tls
                        .as_ref()
                        .map(|(c, names)| (Arc::clone(c), names[i].clone())),
                    buffer: per_link(st.buffer),
                },
                cfg.message_len,
            ),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let id = Identity {
        process: std::process::id(),
        domain: k as u32 + 1,
        start_time_ms: unix_ns() / 1_000_000,
    };
    Ok(Exporter::new(
        links,
        interfaces.to_vec(),
        cfg.balance,
        cfg.headers,
        id,
    ))
}

/// The threads' latest counts, summed per collector.
fn sum_threads(
    collectors: &[SocketAddr],
    start: Instant,
    published: &[Mutex<ThreadCounts>],
    ts_ns: u64,
) -> ExportStats {
    let mut s = ExportStats {
        ts_ns,
        elapsed_s: start.elapsed().as_secs_f64(),
        collectors: collectors
            .iter()
            .map(|c| LinkCounts {
                collector: c.to_string(),
                ..LinkCounts::default()
            })
            .collect(),
        ..ExportStats::default()
    };
    for t in published {
        s.add(&t.lock().unwrap());
    }
    s
}

/// Waits for every thread; the first error (or panic) among them.
fn join_all(threads: Vec<thread::JoinHandle<Result<(), ForwardError>>>) -> Option<ForwardError> {
    let mut error = None;
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                error.get_or_insert(e);
            }
            Err(_) => {
                error.get_or_insert(ForwardError::ThreadPanicked);
            }
        }
    }
    error
}

fn export_loop<S: PacketSource>(
    mut source: S,
    mut exporter: Exporter,
    stop: &AtomicBool,
    deadline: Option<Instant>,
    template_interval: Duration,
    published: &Mutex<ThreadCounts>,
) -> Result<(), ForwardError> {
    let mut last_templates = Instant::now();
    let mut last_publish = Instant::now();
    let result = loop {
        if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
            break Ok(());
        }
        let poll = source.poll(&mut exporter);
        let now = Instant::now();
        if now - last_templates >= template_interval {
            exporter.set_kernel_drops(&source.counters());
            exporter.templates_due();
            last_templates = now;
        }
        exporter.flush();
        if now - last_publish >= Duration::from_millis(100) {
            exporter.set_kernel_drops(&source.counters());
            *published.lock().unwrap() = exporter.counts.clone();
            last_publish = now;
        }
        match poll {
            Ok(Poll::Delivered | Poll::Idle) => {}
            Ok(Poll::End) => break Ok(()),
            Err(e) => break Err(e.into()),
        }
    };
    // The last word: final counts with the templates, so the collector's record is whole.
    exporter.set_kernel_drops(&source.counters());
    exporter.templates_due();
    exporter.flush();
    exporter.drain_streams();
    *published.lock().unwrap() = exporter.counts.clone();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapdeck_ipfix::{Decoder, Record};

    fn frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len.max(54)];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((len.max(54) - 14) as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f[46] = 0x50;
        f
    }

    fn receiver() -> (UdpSocket, SocketAddr) {
        let rx = udp::bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
        let a = rx.local_addr().unwrap();
        (rx, a)
    }

    fn drain(rx: &UdpSocket) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut batch = udp::RecvBatch::new(64, 65536);
        let mut idle = 0;
        while idle < 3 {
            if !udp::wait_readable(rx, 50) {
                idle += 1;
                continue;
            }
            let n = batch.recv(rx).unwrap();
            for i in 0..n {
                out.push(batch.get(i).bytes.to_vec());
            }
        }
        out
    }

    fn exporter(to: &[SocketAddr], balance: Balance, len: usize) -> Exporter {
        let links = to
            .iter()
            .map(|&a| Link::open(a, Some(len), true).unwrap())
            .collect();
        let iface = Interface {
            linktype: 1,
            snaplen: 128,
            name: Some("veth0".into()),
            description: Some("test".into()),
        };
        Exporter::new(
            links,
            vec![iface],
            balance,
            None,
            Identity {
                process: 7,
                domain: 1,
                start_time_ms: 1_700_000_000_000,
            },
        )
    }

    /// Every packet comes back as sent: bytes, length, time; sequence numbers count records.
    #[test]
    fn packets_round_trip_with_sequence_numbers() {
        let (rx, to) = receiver();
        let mut e = exporter(&[to], Balance::FlowHash, 1472);
        let frames: Vec<Vec<u8>> = (0..500)
            .map(|i| {
                frame(
                    [198, 18, 0, 1],
                    [198, 18, 0, 2],
                    1000 + i as u16,
                    80,
                    60 + i % 70,
                )
            })
            .collect();
        for (i, f) in frames.iter().enumerate() {
            e.packet(&Packet {
                ts_ns: 1_795_000_000_000_000_000 + i as u64 * 1001,
                iface: 0,
                orig_len: f.len() as u32 + 1000,
                flags: None,
                data: f,
            });
        }
        e.flush();
        let msgs = drain(&rx);
        let mut d = Decoder::new();
        let mut got = Vec::new();
        let mut expected_seq = 0u32;
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        for m in &msgs {
            assert!(m.len() <= 1472);
            let info = d
                .decode_each(peer, m, |r| {
                    if let Record::Packet(p) = r {
                        got.push((p.time_ns, p.frame_size, p.frame_section.to_vec()));
                    }
                })
                .unwrap();
            assert_eq!(info.header.sequence, expected_seq);
            assert_eq!(info.header.domain, 1);
            expected_seq = expected_seq.wrapping_add(info.data_records);
        }
        assert_eq!(got.len(), frames.len());
        for (i, (t, size, section)) in got.iter().enumerate() {
            assert_eq!(*t, 1_795_000_000_000_000_000 + i as u64 * 1001);
            assert_eq!(*size, frames[i].len() as u64 + 1000);
            assert_eq!(section, &frames[i]);
        }
        let c = &e.links[0].counts;
        assert_eq!(c.packets, 500);
        assert_eq!(c.records, u64::from(expected_seq));
        assert_eq!(c.messages, msgs.len() as u64);
    }

    /// UDP GSO changes nothing the collector sees: the same datagrams, byte for byte, as
    /// sending them one by one (64-byte frames make equal-size messages, so runs form).
    #[test]
    fn gso_sends_the_same_datagrams() {
        let mut seen = Vec::new();
        for gso in [false, true] {
            let (rx, to) = receiver();
            let mut e = exporter(&[to], Balance::FlowHash, 1472);
            e.links[0].gso = gso && e.links[0].gso;
            assert_eq!(e.links[0].gso, gso, "this kernel takes UDP GSO on loopback");
            let f = frame([198, 18, 0, 1], [198, 18, 0, 2], 1000, 80, 64);
            for i in 0..3000u64 {
                e.packet(&Packet {
                    ts_ns: 1_795_000_000_000_000_000 + i * 67,
                    iface: 0,
                    orig_len: 64,
                    flags: None,
                    data: &f,
                });
            }
            e.flush();
            assert_eq!(
                e.links[0].gso, gso,
                "no fallback: the kernel took the GSO sends"
            );
            let msgs = drain(&rx);
            assert_eq!(e.links[0].counts.messages, msgs.len() as u64);
            assert_eq!(
                (e.links[0].counts.packets, e.links[0].counts.send_errors),
                (3000, 0)
            );
            // Export times may differ between the runs: compare with them zeroed.
            seen.push(
                msgs.into_iter()
                    .map(|mut m| {
                        m[4..8].fill(0);
                        m
                    })
                    .collect::<Vec<_>>(),
            );
        }
        assert!(seen[0].len() > 20);
        assert_eq!(seen[0], seen[1]);
    }

    /// Both directions of a connection reach the same collector; round-robin alternates.
    #[test]
    fn flow_hash_keeps_connections_together() {
        let (rx1, a1) = receiver();
        let (rx2, a2) = receiver();
        let mut e = exporter(&[a1, a2], Balance::FlowHash, 1472);
        for i in 0..200u16 {
            let (c, s) = ([198, 18, 1, (i % 7) as u8], [198, 18, 2, 1]);
            let f = frame(c, s, 2000 + i % 13, 2049, 80);
            let r = frame(s, c, 2049, 2000 + i % 13, 80);
            for d in [&f, &r] {
                e.packet(&Packet {
                    ts_ns: 1,
                    iface: 0,
                    orig_len: 80,
                    flags: None,
                    data: d,
                });
            }
        }
        e.flush();
        let mut flows = std::collections::HashMap::new();
        for (k, rx) in [&rx1, &rx2].into_iter().enumerate() {
            let mut d = Decoder::new();
            for m in drain(rx) {
                d.decode_each("127.0.0.1:1".parse().unwrap(), &m, |r| {
                    if let Record::Packet(p) = r {
                        let s = p.frame_section;
                        let mut ends = [(&s[26..30], &s[34..36]), (&s[30..34], &s[36..38])];
                        ends.sort();
                        assert_eq!(*flows.entry(format!("{ends:?}")).or_insert(k), k);
                    }
                })
                .unwrap();
            }
        }
        assert_eq!(flows.len(), 7 * 13);
        let used: std::collections::HashSet<_> = flows.values().collect();
        assert_eq!(used.len(), 2, "both collectors get flows");
    }

    /// Round-robin sends whole batches to each collector in turn.
    #[test]
    fn round_robin_alternates_batches() {
        let (rx1, a1) = receiver();
        let (rx2, a2) = receiver();
        let mut e = exporter(&[a1, a2], Balance::RoundRobin, 1472);
        let f = frame([198, 18, 0, 1], [198, 18, 0, 2], 1, 2, 60);
        for batch in 0..6u64 {
            for _ in 0..10 {
                e.packet(&Packet {
                    ts_ns: batch,
                    iface: 0,
                    orig_len: 60,
                    flags: None,
                    data: &f,
                });
            }
            e.flush();
        }
        for (k, rx) in [&rx1, &rx2].into_iter().enumerate() {
            let mut d = Decoder::new();
            let mut times = Vec::new();
            for m in drain(rx) {
                d.decode_each("127.0.0.1:1".parse().unwrap(), &m, |r| {
                    if let Record::Packet(p) = r {
                        times.push(p.time_ns);
                    }
                })
                .unwrap();
            }
            let want: Vec<u64> = (0..6u64)
                .filter(|b| *b as usize % 2 == k)
                .flat_map(|b| [b; 10])
                .collect();
            assert_eq!(times, want, "collector {k}");
        }
    }

    /// A collector that is not listening is counted, never fatal, and its sequence numbers
    /// do not advance for messages that never left.
    #[test]
    fn refused_collector_is_counted() {
        let (rx, to) = receiver();
        drop(rx);
        let mut e = exporter(&[to], Balance::FlowHash, 1472);
        let f = frame([198, 18, 0, 1], [198, 18, 0, 2], 1, 2, 60);
        for round in 0..20 {
            for _ in 0..10 {
                e.packet(&Packet {
                    ts_ns: round,
                    iface: 0,
                    orig_len: 60,
                    flags: None,
                    data: &f,
                });
            }
            e.flush();
            std::thread::sleep(Duration::from_millis(5));
        }
        let c = &e.links[0].counts;
        assert_eq!(c.packets + c.not_sent, 200);
        assert!(c.refused > 0, "{c:?}");
        assert!(c.not_sent > 0, "{c:?}");
    }

    /// A collector that refuses (ICMP port unreachable) is down: what was sent to it in the
    /// window before the error is unconfirmed, its flows go to the living collector (counted
    /// as failed over), and every packet is sent once or counted as not sent.
    #[test]
    fn a_refusing_collectors_flows_fail_over() {
        let (rx1, a1) = receiver();
        let (rx2, a2) = receiver();
        drop(rx2);
        let mut e = exporter(&[a1, a2], Balance::FlowHash, 1472);
        let mut total = 0u64;
        for round in 0..20u16 {
            for i in 0..50u16 {
                let f = frame(
                    [198, 18, 1, (i % 9) as u8],
                    [198, 18, 2, 1],
                    2000 + i,
                    2049,
                    80,
                );
                e.packet(&Packet {
                    ts_ns: u64::from(round),
                    iface: 0,
                    orig_len: 80,
                    flags: None,
                    data: &f,
                });
                total += 1;
            }
            e.flush();
        }
        e.flush();
        let (live, dead) = (&e.links[0].counts, &e.links[1].counts);
        assert!(e.links[1].down && !e.links[0].down);
        assert_eq!(dead.packets, 0, "{dead:?}");
        assert!(dead.failed_over > 0 && dead.refused > 0, "{dead:?}");
        assert_eq!(live.not_sent, 0);
        assert_eq!(live.packets + dead.not_sent, total, "{live:?} {dead:?}");
        let mut d = Decoder::new();
        let mut got = 0u64;
        for m in drain(&rx1) {
            let info = d.decode(a1, &m, &mut Vec::new()).unwrap();
            got += u64::from(info.data_records);
        }
        assert_eq!(
            got, live.records,
            "the living collector got every record sent to it"
        );
    }

    /// A stream exporter (TCP, no TLS) to `to`, `buffer` bytes of queue per link.
    fn stream_exporter(to: &[SocketAddr], buffer: usize) -> Exporter {
        let mut e = exporter(&[], Balance::FlowHash, 1472);
        e.links = to
            .iter()
            .map(|&a| {
                let target = StreamTarget {
                    to: a,
                    tls: None,
                    buffer,
                };
                Link::open_stream(target, None).unwrap()
            })
            .collect();
        e.counts.links = e.links.iter().map(|l| l.counts.clone()).collect();
        e
    }

    /// A collector over TCP on a port of its own; stopping it closes its port.
    struct TcpCollector {
        listener: crate::tcp::StreamListener,
        stop: Arc<AtomicBool>,
    }

    impl TcpCollector {
        fn listen(at: SocketAddr) -> TcpCollector {
            let ledger = Arc::new(Mutex::new(crate::Ledger::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let listener =
                crate::tcp::StreamListener::open(at, None, &[], &ledger, Arc::clone(&stop))
                    .unwrap();
            TcpCollector { listener, stop }
        }

        /// The packet reports' times received, once there are `want` of them (or 10 s
        /// have passed: then those there are, and the caller's comparison fails). The
        /// exporter counts a message sent when the kernel has it; the collector's thread
        /// may read it later (under valgrind, much later).
        fn times(&self, d: &mut Decoder, want: u64) -> Vec<u64> {
            let mut out = Vec::new();
            let end = Instant::now() + Duration::from_secs(10);
            while (out.len() as u64) < want && Instant::now() < end {
                let Ok((peer, m)) = self
                    .listener
                    .messages
                    .recv_timeout(Duration::from_millis(50))
                else {
                    continue;
                };
                d.decode_each(peer, &m, |r| {
                    if let Record::Packet(p) = r {
                        out.push(p.time_ns);
                    }
                })
                .unwrap();
            }
            out
        }
    }

    /// `n` ports on loopback where nothing listens (the kernel answers with a reset).
    fn closed_ports(n: usize) -> Vec<SocketAddr> {
        let held: Vec<_> = (0..n)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        held.iter().map(|l| l.local_addr().unwrap()).collect()
    }

    /// `rounds` packets of each of 40 flows, times from `t0` up.
    fn feed(e: &mut Exporter, t0: u64, rounds: u64) -> u64 {
        let mut t = t0;
        for _ in 0..rounds {
            for i in 0..40u16 {
                let f = frame(
                    [198, 18, 1, (i % 5) as u8],
                    [198, 18, 2, 1],
                    3000 + i,
                    2049,
                    90,
                );
                e.packet(&Packet {
                    ts_ns: t,
                    iface: 0,
                    orig_len: 90,
                    flags: None,
                    data: &f,
                });
                t += 1;
            }
            e.flush();
        }
        t - t0
    }

    fn pump_until(e: &mut Exporter, what: &str, done: impl Fn(&Exporter) -> bool) {
        let end = Instant::now() + Duration::from_secs(10);
        while !done(e) {
            assert!(Instant::now() < end, "timed out waiting for {what}");
            e.flush();
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn all_acked(e: &Exporter) -> bool {
        e.links.iter().all(|l| match &l.wire {
            Wire::Stream(s) => s.is_empty() || l.down,
            Wire::Udp(_) => true,
        })
    }

    /// Over TCP a collector that refuses is down from its first failed attempt: its flows go
    /// to the living collector (counted as failed over); once it listens and the link
    /// connects, its flows come back. Every packet reaches exactly one collector.
    #[test]
    fn a_down_stream_collectors_flows_fail_over_and_come_back() {
        let a = TcpCollector::listen("127.0.0.1:0".parse().unwrap());
        let b_addr = closed_ports(1)[0];
        let mut e = stream_exporter(&[a.listener.local, b_addr], 1 << 20);
        pump_until(&mut e, "the refusing collector to be down", |e| {
            e.links[1].down && e.links[0].counts.connects == 1
        });
        let first = feed(&mut e, 1, 20);
        pump_until(&mut e, "the living collector to acknowledge", all_acked);
        let (live, dead) = (&e.links[0].counts, &e.links[1].counts);
        assert_eq!((live.packets, live.buffered), (first, 0), "{live:?}");
        assert_eq!(
            (dead.packets, dead.buffered, dead.not_sent),
            (0, 0, 0),
            "{dead:?}"
        );
        assert!(dead.failed_over > 0 && dead.down_now, "{dead:?}");
        assert_eq!(live.failed_over, 0);
        let failed_over = dead.failed_over;
        // The collector comes: the link connects (backoff at most 5 s) and is up again.
        let b = TcpCollector::listen(b_addr);
        pump_until(&mut e, "the second collector to be up", |e| {
            !e.links[1].down
        });
        let second = feed(&mut e, 1 + first, 20);
        pump_until(&mut e, "both collectors to acknowledge", all_acked);
        let (live, back) = (&e.links[0].counts, &e.links[1].counts);
        assert_eq!(
            back.failed_over, failed_over,
            "nothing moved while it was up"
        );
        assert!(back.packets > 0, "its flows came back: {back:?}");
        assert_eq!(live.packets + back.packets, first + second);
        assert_eq!(live.not_sent + back.not_sent, 0);
        // What the collectors read: every packet once, at one of them.
        let mut d = Decoder::new();
        let mut times = a.times(&mut d, live.packets);
        let at_b = b.times(&mut d, back.packets);
        assert_eq!(at_b.len() as u64, back.packets);
        times.extend(at_b);
        times.sort_unstable();
        assert_eq!(times, (1..=first + second).collect::<Vec<_>>());
    }

    /// Messages queued for a collector that closed and did not come back, and that never
    /// went out, go to the living collector once it is down (counted as failed over): none
    /// is lost and none is sent twice.
    #[test]
    fn unsent_messages_of_a_down_stream_collector_move_to_the_living_one() {
        let a = TcpCollector::listen("127.0.0.1:0".parse().unwrap());
        let b = TcpCollector::listen("127.0.0.1:0".parse().unwrap());
        let mut e = stream_exporter(&[a.listener.local, b.listener.local], 1 << 20);
        pump_until(&mut e, "both connected", |e| {
            e.links.iter().all(|l| l.counts.connects == 1)
        });
        let first = feed(&mut e, 1, 10);
        pump_until(&mut e, "both to acknowledge", all_acked);
        let at_b_before = e.links[1].counts.packets;
        assert!(at_b_before > 0);
        // The second collector stops (a clean close; its port closes with it).
        b.stop.store(true, Ordering::Relaxed);
        pump_until(&mut e, "the link to see the close", |e| {
            e.links[1].counts.disconnects == 1
        });
        assert!(!e.links[1].down, "not down yet: it may be restarting");
        let second = feed(&mut e, 1 + first, 10);
        let Wire::Stream(s) = &e.links[1].wire else {
            unreachable!()
        };
        let queued = s.queued_packets();
        assert!(queued > 0, "its flows' packets queue for it meanwhile");
        pump_until(&mut e, "the closed collector to be down", |e| {
            e.links[1].down
        });
        pump_until(&mut e, "the living collector to acknowledge", all_acked);
        let (live, gone) = (&e.links[0].counts, &e.links[1].counts);
        assert_eq!((gone.packets, gone.buffered), (at_b_before, 0), "{gone:?}");
        assert_eq!(gone.failed_over, queued, "what was queued moved: {gone:?}");
        assert_eq!(live.packets + gone.packets, first + second);
        let mut d = Decoder::new();
        let mut times = a.times(&mut d, live.packets);
        times.extend(b.times(&mut d, gone.packets));
        times.sort_unstable();
        assert_eq!(times, (1..=first + second).collect::<Vec<_>>());
    }

    /// With every collector down, packets queue for their own; the first to come back
    /// also takes what the others' queues hold unsent.
    #[test]
    fn when_all_are_down_the_first_back_takes_the_others_unsent_messages() {
        let [a_addr, b_addr] = closed_ports(2)[..] else {
            unreachable!()
        };
        let mut e = stream_exporter(&[a_addr, b_addr], 1 << 20);
        pump_until(&mut e, "both down", |e| e.links.iter().all(|l| l.down));
        let total = feed(&mut e, 1, 10);
        let queued = |e: &Exporter, k: usize| match &e.links[k].wire {
            Wire::Stream(s) => s.queued_packets(),
            Wire::Udp(_) => unreachable!(),
        };
        let at_b = queued(&e, 1);
        assert!(queued(&e, 0) > 0 && at_b > 0, "each queues its own flows");
        assert_eq!(queued(&e, 0) + at_b, total);
        assert_eq!(e.links[1].counts.failed_over, 0);
        let a = TcpCollector::listen(a_addr);
        pump_until(&mut e, "the first collector to take everything", |e| {
            !e.links[0].down && e.links[0].counts.packets == total
        });
        let (live, down) = (&e.links[0].counts, &e.links[1].counts);
        assert_eq!(
            (down.failed_over, down.buffered, down.packets),
            (at_b, 0, 0)
        );
        assert_eq!(live.buffered, 0);
        let mut times = a.times(&mut Decoder::new(), total);
        times.sort_unstable();
        assert_eq!(times, (1..=total).collect::<Vec<_>>());
    }

    #[test]
    fn small_message_size_refused() {
        let (_rx, to) = receiver();
        let err = Link::open(to, Some(400), true).err().unwrap().to_string();
        assert!(err.contains("too small"), "{err}");
    }
}
