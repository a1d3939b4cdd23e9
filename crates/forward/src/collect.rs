//! The collector: IPFIX packet reports received over UDP become packets of a
//! [`PacketSource`], so the recorder stores them like any other capture.
//!
//! Each SO_REUSEPORT socket is one source (one stream of the store). [`Intake`] is the pure
//! part — allow list, strict decoding, sequence accounting in the shared [`Ledger`] — and
//! is what the fuzz target drives; [`CollectorSource`] adds the socket, the optional raw
//! message file (RFC 5655) and the optional live pcapng stream.

use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tapdeck_capture::{
    Backlog, Interface, Packet, PacketSink, PacketSource, Poll, SourceCounters, SourceError,
};
use tapdeck_ipfix::{ie, read_header, Decoder, MessageInfo, Record, SequenceEvent};
use tapdeck_pcap::{Format, SectionInfo};

use crate::error::ForwardError;
use crate::ledger::{Ledger, Refusal};
use crate::share::{staged_len, Admission, FairShare};
use crate::tcp::{StreamListener, StreamMessage};
use crate::udp::{self, RecvBatch};

/// Datagrams per `recvmmsg`.
const RECV_BATCH: usize = 64;
/// How long `poll` waits for a datagram before reporting `Idle`.
const POLL_WAIT_MS: i32 = 100;
/// Snap length declared for the store's interfaces: the exporter's own is not sent, and a
/// frame section can be as long as a message.
pub const COLLECTED_SNAPLEN: u32 = 262_144;

/// Where an exporter's interface lives: its address, observation domain and interface id.
pub type InterfaceKey = (IpAddr, u32, u32);

/// Store interfaces one exporter address may announce (per collector socket); the packets of
/// any more go to its catch-all interface `ADDRESS/other`. Every new interface starts a new
/// store file, so this also bounds the files a flood of interface ids can make.
pub const INTERFACES_PER_ADDRESS: usize = 16;
/// Store interfaces in all (per collector socket), catch-alls included; beyond, one last
/// catch-all `other` takes everything new.
pub const INTERFACES_TOTAL: usize = 256;
/// Octets of an interface name kept (a name can be 65535 octets long on the wire).
const NAME_MAX: usize = 64;

/// The store's interfaces of one source: one per exporter interface seen, named after the
/// exporter and the name its interface options record gave, within the caps above.
#[derive(Default)]
pub struct InterfaceTable {
    index: HashMap<InterfaceKey, u32>,
    names: HashMap<InterfaceKey, (String, u16)>,
    /// Per address: interfaces, names.
    per_address: HashMap<IpAddr, (usize, usize)>,
    catch_all: HashMap<IpAddr, u32>,
    last_catch_all: Option<u32>,
    pub interfaces: Vec<Interface>,
}

impl InterfaceTable {
    /// The store interface of an exporter's interface, if the table has decided it (its own,
    /// or a catch-all once its address or the table is full).
    pub fn get(&self, k: &InterfaceKey) -> Option<u32> {
        if let Some(&i) = self.index.get(k) {
            return Some(i);
        }
        if self.has_room(k.0) {
            return None;
        }
        self.catch_all.get(&k.0).copied().or(self.last_catch_all)
    }

    /// Whether `k` has a store interface of its own (not a catch-all).
    pub fn is_own(&self, k: &InterfaceKey) -> bool {
        self.index.contains_key(k)
    }

    fn has_room(&self, ip: IpAddr) -> bool {
        self.per_address.get(&ip).map_or(0, |c| c.0) < INTERFACES_PER_ADDRESS
            && self.interfaces.len() < INTERFACES_TOTAL
    }

    /// Remembers an interface's name; false when the address has named as many interfaces as
    /// it may have (the name is not kept).
    fn learn(&mut self, k: InterfaceKey, name: &str, frame_type: u16) -> bool {
        let mut name = name.to_string();
        if name.len() > NAME_MAX {
            let mut cut = NAME_MAX;
            while !name.is_char_boundary(cut) {
                cut -= 1;
            }
            name.truncate(cut);
        }
        if let Some(v) = self.names.get_mut(&k) {
            *v = (name, frame_type);
            return true;
        }
        let c = self.per_address.entry(k.0).or_default();
        if c.1 >= INTERFACES_PER_ADDRESS {
            return false;
        }
        c.1 += 1;
        self.names.insert(k, (name, frame_type));
        true
    }

    fn push(&mut self, name: String, description: String, linktype: u16) -> u32 {
        let n = self.interfaces.len() as u32;
        self.interfaces.push(Interface {
            linktype,
            snaplen: COLLECTED_SNAPLEN,
            name: Some(name),
            description: Some(description),
        });
        n
    }

    /// Decides the store interface of `k` (which [`InterfaceTable::get`] did not know).
    fn add(&mut self, k: InterfaceKey) -> u32 {
        let (ip, domain, id) = k;
        if self.has_room(ip) {
            let (name, frame_type) = self
                .names
                .get(&k)
                .cloned()
                .unwrap_or_else(|| (format!("if{id}"), ie::FRAME_TYPE_ETHERNET));
            let linktype = if frame_type == ie::FRAME_TYPE_IEEE802_11 {
                105
            } else {
                1
            };
            let n = self.push(
                format!("{ip}/{name}"),
                format!(
                    "IPFIX packet reports from {ip}, observation domain {domain}, interface {id} ({name})"
                ),
                linktype,
            );
            self.index.insert(k, n);
            self.per_address.entry(ip).or_default().0 += 1;
            return n;
        }
        if let Some(n) = self.get(&k) {
            return n;
        }
        if self.interfaces.len() < INTERFACES_TOTAL {
            let n = self.push(
                format!("{ip}/other"),
                format!("IPFIX packet reports from {ip} on interfaces beyond the first {INTERFACES_PER_ADDRESS} it announced"),
                1,
            );
            self.catch_all.insert(ip, n);
            return n;
        }
        let n = self.push(
            "other".into(),
            format!("IPFIX packet reports on interfaces beyond the first {INTERFACES_TOTAL} of all exporters"),
            1,
        );
        self.last_catch_all = Some(n);
        n
    }
}

/// What became of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Counted, and its packet reports delivered.
    Accepted {
        packets: u64,
    },
    /// The message names interfaces the table did not have: they are added now, and the
    /// message must be offered again once the recorder knows them (nothing was counted).
    NewInterfaces,
    NotAllowed,
    Malformed,
    NoTemplate,
    /// New state (an observation domain, templates) over a cap: counted, dropped.
    Refused,
    /// Counted by sequence number, its packets shed: the exporter is over its share of a
    /// staging pool under pressure (`crate::share`).
    Shed {
        packets: u64,
    },
}

/// Allow list, decoder and accounting: takes messages, hands out packets.
pub struct Intake {
    decoder: Decoder,
    allow: Vec<IpAddr>,
    ledger: Arc<Mutex<Ledger>>,
    share: FairShare,
}

impl Intake {
    /// `allow` empty: every exporter is accepted.
    pub fn new(allow: Vec<IpAddr>, ledger: Arc<Mutex<Ledger>>) -> Intake {
        Intake {
            decoder: Decoder::new(),
            allow,
            ledger,
            share: FairShare::new(),
        }
    }

    /// Brings the exporters' shares of the staging pool up to date (once a tick; call it
    /// once per batch of messages).
    pub fn tick(&mut self, now: Instant, backlog: Backlog) {
        self.share.tick(now, backlog.fill, backlog.drained_bytes);
    }

    pub fn ledger(&self) -> &Arc<Mutex<Ledger>> {
        &self.ledger
    }

    /// Takes one message from `peer` as [`Intake::take_at`] does with a staging pool that is
    /// never under pressure (nothing is shed).
    pub fn take<'m>(
        &mut self,
        peer: SocketAddr,
        message: &'m [u8],
        table: &mut InterfaceTable,
        deliver: impl FnMut(Packet<'m>),
    ) -> Outcome {
        self.take_at(peer, message, table, 0.0, deliver)
    }

    /// Takes one message from `peer`: refused, counted and dropped, or counted and its
    /// packets handed to `deliver` (never a malformed or an unknown template's; a
    /// duplicate's or an out-of-line message's are, as their sequence number proves
    /// nothing), or counted and its packets shed when the staging pool is `fill` full and
    /// the exporter over its share.
    pub fn take_at<'m>(
        &mut self,
        peer: SocketAddr,
        message: &'m [u8],
        table: &mut InterfaceTable,
        fill: f64,
        deliver: impl FnMut(Packet<'m>),
    ) -> Outcome {
        let ip = canonical_ip(peer.ip());
        if let Some(refused) = self.admit(ip, message) {
            return refused;
        }
        let mut records = Vec::new();
        let info = match self.decode(peer, ip, message, &mut records) {
            Ok(info) => info,
            Err(dropped) => return dropped,
        };
        let domain = info.header.domain;
        if self.learn_interfaces(ip, domain, &records, table) {
            return Outcome::NewInterfaces;
        }
        let mut ledger = self.ledger.lock().unwrap();
        count_sequence(&mut ledger, peer, ip, &info, &records);
        let (reports, bytes) = records.iter().fold((0, 0), |(n, b), r| match r {
            Record::Packet(p) => (n + 1, b + staged_len(p.frame_section.len())),
            _ => (n, b),
        });
        if let Admission::Shed { first } = self.share.admit(ip, bytes, reports, fill) {
            for r in &records {
                if let Record::ExporterStats(s) = r {
                    ledger.exporter_stats(ip, domain, s);
                }
            }
            ledger.shed(ip, domain, reports);
            if first {
                let share = self.share.share().unwrap_or(0.0);
                tracing::warn!(
                    "collector: {ip} sends more than its share ({:.1} MB/s) of a staging pool under pressure; its packets are shed and counted as its own (`shed`) while it does (logged once per episode)",
                    share / 1e6
                );
            }
            return Outcome::Shed { packets: reports };
        }
        let packets = deliver_records(&mut ledger, ip, domain, records, table, deliver);
        Outcome::Accepted { packets }
    }

    /// The allow list, then the cap on observation domains: `Some` when the message is
    /// refused (counted, logged once).
    fn admit(&mut self, ip: IpAddr, message: &[u8]) -> Option<Outcome> {
        if !self.allow.is_empty() && !self.allow.contains(&ip) {
            if self.ledger.lock().unwrap().not_allowed(ip) {
                tracing::warn!(
                    "collector: refusing IPFIX from {ip}, which is not in --allow (counted; logged once)"
                );
            }
            return Some(Outcome::NotAllowed);
        }
        let d = read_header(message)?.domain;
        let admitted = self.ledger.lock().unwrap().admit(ip, d);
        if let Err(what) = admitted {
            if self.ledger.lock().unwrap().refused(ip, Refusal::Domains) {
                tracing::warn!(
                    "collector: refusing observation domain {d} of {ip}: {what} reached (counted; logged once)"
                );
            }
            return Some(Outcome::Refused);
        }
        None
    }

    /// Decodes strictly into `records`; a message over the template cap, malformed, or
    /// with data before its templates is dropped (counted, logged once).
    fn decode<'m>(
        &mut self,
        peer: SocketAddr,
        ip: IpAddr,
        message: &'m [u8],
        records: &mut Vec<Record<'m>>,
    ) -> Result<MessageInfo, Outcome> {
        let info = match self.decoder.decode(peer, message, records) {
            Ok(info) => info,
            Err(e @ tapdeck_ipfix::Error::TemplateLimit { .. }) => {
                if self.ledger.lock().unwrap().refused(ip, Refusal::Templates) {
                    tracing::warn!(
                        "collector: refusing templates from {peer}: {e}; the message is dropped and counted (logged once)"
                    );
                }
                return Err(Outcome::Refused);
            }
            Err(e) => {
                let domain = read_header(message).map(|h| h.domain);
                if self.ledger.lock().unwrap().malformed(ip, domain) {
                    tracing::warn!(
                        "collector: malformed IPFIX message from {peer} ({e}); dropped and counted (logged once per exporter)"
                    );
                }
                return Err(Outcome::Malformed);
            }
        };
        let domain = info.header.domain;
        if info.sets_without_template > 0 {
            // Not counted by sequence number: the next message that is counted shows its
            // records as lost, which they are (they cannot be stored).
            if self.ledger.lock().unwrap().no_template(ip, domain) {
                tracing::info!(
                    "collector: data from {peer} (domain {domain}) before its templates; dropped and counted until they arrive"
                );
            }
            return Err(Outcome::NoTemplate);
        }
        Ok(info)
    }

    /// Learns the interface names the message gives and adds a store interface for each
    /// exporter interface its packets name that the table did not have: true when it added
    /// one (the message waits for the recorder to declare it).
    fn learn_interfaces(
        &self,
        ip: IpAddr,
        domain: u32,
        records: &[Record<'_>],
        table: &mut InterfaceTable,
    ) -> bool {
        let mut added = false;
        let mut names_refused = 0;
        for r in records {
            match r {
                Record::Interface(i) => {
                    if !table.learn((ip, domain, i.id), i.name, i.frame_type) {
                        names_refused += 1;
                    }
                }
                Record::Packet(p) => {
                    let k = (ip, domain, p.interface);
                    if table.get(&k).is_none() {
                        table.add(k);
                        added = true;
                    }
                }
                Record::ExporterStats(_) => {}
            }
        }
        if names_refused > 0 {
            let mut ledger = self.ledger.lock().unwrap();
            if ledger.refused_n(ip, Refusal::Names, names_refused) {
                tracing::warn!(
                    "collector: {ip} names more than {INTERFACES_PER_ADDRESS} interfaces; further names are not kept (counted; logged once)"
                );
            }
        }
        added
    }

    /// A datagram longer than the receive buffer: counted as malformed.
    pub fn truncated(&mut self, peer: SocketAddr) {
        let ip = canonical_ip(peer.ip());
        if self.ledger.lock().unwrap().malformed(ip, None) {
            tracing::warn!("collector: a datagram from {peer} was longer than 65535 bytes; dropped and counted");
        }
    }
}

/// Sequence numbers count; they never decide. Over UDP anyone can send a message with the
/// exporter's address and any number, so a message that decodes is stored whatever its
/// number says, and the tracker only counts (and logs an anomaly once per episode).
fn count_sequence(
    ledger: &mut Ledger,
    peer: SocketAddr,
    ip: IpAddr,
    info: &MessageInfo,
    records: &[Record<'_>],
) {
    let domain = info.header.domain;
    let start = records.iter().find_map(|r| match r {
        Record::ExporterStats(s) if s.start_time_ms != 0 => Some(s.start_time_ms),
        _ => None,
    });
    let (event, log) = ledger.observe(ip, domain, info.header.sequence, info.data_records, start);
    match event {
        SequenceEvent::Restart { lost } => tracing::info!(
            "collector: exporter {ip} (domain {domain}) restarted; {lost} records of its new session came before"
        ),
        e if log => tracing::warn!(
            "collector: sequence anomaly from {peer} (domain {domain}): {e:?} at sequence {}; counted, its records stored (logged once per episode)",
            info.header.sequence
        ),
        _ => {}
    }
}

/// Hands the message's packets to `deliver` on their store interfaces and keeps the
/// exporter's own counts; how many packets went. Packets on a catch-all interface are
/// counted as refused interfaces (logged once).
fn deliver_records<'m>(
    ledger: &mut Ledger,
    ip: IpAddr,
    domain: u32,
    records: Vec<Record<'m>>,
    table: &InterfaceTable,
    mut deliver: impl FnMut(Packet<'m>),
) -> u64 {
    let mut packets = 0;
    let mut caught = 0;
    for r in records {
        match r {
            Record::Packet(p) => {
                let k = (ip, domain, p.interface);
                let iface = table.get(&k).expect("added above");
                if !table.is_own(&k) {
                    caught += 1;
                }
                packets += 1;
                deliver(Packet {
                    ts_ns: p.time_ns,
                    iface,
                    orig_len: u32::try_from(p.frame_size).unwrap_or(u32::MAX),
                    flags: None,
                    data: p.frame_section,
                });
            }
            Record::ExporterStats(s) => ledger.exporter_stats(ip, domain, &s),
            Record::Interface(_) => {}
        }
    }
    ledger.stored(ip, domain, packets);
    if caught > 0 && ledger.refused_n(ip, Refusal::Interfaces, caught) {
        tracing::warn!(
            "collector: {ip} reports on more interfaces than a collector socket keeps apart ({INTERFACES_PER_ADDRESS} per exporter, {INTERFACES_TOTAL} in all); their packets go to a catch-all interface (counted; logged once)"
        );
    }
    packets
}

fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The accepted raw messages as an RFC 5655 IPFIX file.
pub struct MessageFile {
    out: std::io::BufWriter<std::fs::File>,
    failed: bool,
}

impl MessageFile {
    pub fn create(path: &std::path::Path) -> Result<MessageFile, ForwardError> {
        let f = std::fs::File::create(path).map_err(|cause| ForwardError::IpfixFile {
            path: path.into(),
            cause,
        })?;
        Ok(MessageFile {
            out: std::io::BufWriter::with_capacity(1 << 20, f),
            failed: false,
        })
    }

    fn write(&mut self, message: &[u8]) {
        if self.failed {
            return;
        }
        if let Err(e) = tapdeck_ipfix::write_message(&mut self.out, message) {
            tracing::error!(
                "--ipfix-file: cannot write ({e}); no more messages go there, the store goes on"
            );
            self.failed = true;
        }
    }

    pub fn flush(&mut self) {
        if !self.failed {
            if let Err(e) = self.out.flush() {
                tracing::error!("--ipfix-file: cannot write ({e}); no more messages go there, the store goes on");
                self.failed = true;
            }
        }
    }
}

/// Packets as a pcapng stream (`collect -w -`), interfaces declared as they appear.
pub struct LiveStream {
    out: Box<dyn Write + Send>,
    index: HashMap<(usize, u32), u32>,
    declared: u32,
    buf: Vec<u8>,
    failed: bool,
}

impl LiveStream {
    pub fn new(mut out: Box<dyn Write + Send>) -> LiveStream {
        let section = SectionInfo {
            application: Some(format!("tapdeck {} collect", env!("CARGO_PKG_VERSION"))),
            ..SectionInfo::default()
        };
        let header = Format::Pcapng
            .file_header(&[], &section)
            .expect("pcapng holds any number of interfaces");
        let failed = out.write_all(&header).and_then(|_| out.flush()).is_err();
        LiveStream {
            out,
            index: HashMap::new(),
            declared: 0,
            buf: Vec::new(),
            failed,
        }
    }

    /// Writes one packet of `source`'s interface `iface` (declared in the stream first).
    fn packet(&mut self, source: usize, iface: &Interface, p: &Packet<'_>) {
        if self.failed {
            return;
        }
        let id = match self.index.get(&(source, p.iface)) {
            Some(&id) => id,
            None => {
                // A header of one interface is the section header followed by its IDB.
                let both = Format::Pcapng
                    .file_header(std::slice::from_ref(iface), &SectionInfo::default())
                    .expect("pcapng holds any number of interfaces");
                let shb_len = u32::from_le_bytes(both[4..8].try_into().unwrap()) as usize;
                self.buf.extend_from_slice(&both[shb_len..]);
                let id = self.declared;
                self.declared += 1;
                self.index.insert((source, p.iface), id);
                id
            }
        };
        let q = Packet { iface: id, ..*p };
        let at = self.buf.len();
        self.buf.resize(at + Format::Pcapng.record_len(&q), 0);
        Format::Pcapng.write_record(&q, &mut self.buf[at..]);
    }

    fn flush(&mut self) {
        if self.failed || self.buf.is_empty() {
            return;
        }
        if let Err(e) = self.out.write_all(&self.buf).and_then(|_| self.out.flush()) {
            tracing::warn!("-w -: the reader went away ({e}); the store goes on");
            self.failed = true;
        }
        self.buf.clear();
    }
}

/// What the sources of one collector share.
pub struct Outputs {
    pub file: Option<Mutex<MessageFile>>,
    pub live: Option<Mutex<LiveStream>>,
}

/// Where a source's messages come from.
enum Input {
    /// One SO_REUSEPORT socket, read a `recvmmsg` batch at a time.
    Udp {
        socket: UdpSocket,
        batch: RecvBatch,
        received: usize,
        next: usize,
    },
    /// Whole messages of every TCP/TLS connection; `current` waits to be offered again.
    Stream {
        messages: Receiver<StreamMessage>,
        current: Option<StreamMessage>,
    },
}

/// One listening socket (UDP), or every connection (TCP, TLS), as a packet source.
pub struct CollectorSource {
    input: Input,
    local: SocketAddr,
    number: usize,
    intake: Intake,
    table: InterfaceTable,
    delivered: Vec<u64>,
    outputs: Arc<Outputs>,
    description: String,
}

impl CollectorSource {
    /// `sockets` sources sharing `listen` through SO_REUSEPORT. A port already taken by
    /// another program is refused (a plain bind is tried first: SO_REUSEPORT alone would
    /// quietly share the port with another collector of the same user).
    pub fn open(
        listen: SocketAddr,
        sockets: usize,
        allow: &[IpAddr],
        ledger: &Arc<Mutex<Ledger>>,
        outputs: &Arc<Outputs>,
    ) -> Result<Vec<CollectorSource>, ForwardError> {
        if sockets == 0 {
            return Err(ForwardError::NoSockets);
        }
        let bind_error = |cause: std::io::Error| match cause.kind() {
            std::io::ErrorKind::AddrInUse => ForwardError::PortInUse { listen },
            std::io::ErrorKind::AddrNotAvailable => ForwardError::NoSuchAddress { listen },
            _ => ForwardError::Listen { listen, cause },
        };
        let probe = UdpSocket::bind(listen).map_err(bind_error)?;
        let listen = probe.local_addr().map_err(bind_error)?;
        drop(probe);
        let mut out = Vec::new();
        for number in 0..sockets {
            let socket = udp::bind_reuseport(listen).map_err(bind_error)?;
            out.push(CollectorSource {
                input: Input::Udp {
                    socket,
                    batch: RecvBatch::new(RECV_BATCH, 65_536),
                    received: 0,
                    next: 0,
                },
                local: listen,
                number,
                intake: Intake::new(allow.to_vec(), Arc::clone(ledger)),
                table: InterfaceTable::default(),
                delivered: Vec::new(),
                outputs: Arc::clone(outputs),
                description: format!(
                    "IPFIX collector on udp {listen} (socket {} of {sockets})",
                    number + 1
                ),
            });
        }
        Ok(out)
    }

    /// One source for every TCP (or, with `tls`, TLS) connection to `listen`: messages are
    /// read until `stop` is set; then the connections are closed by the handshake of
    /// [`crate::tcp`] and the source ends once they all have.
    pub fn open_stream(
        listen: SocketAddr,
        tls: Option<Arc<rustls::ServerConfig>>,
        allow: &[IpAddr],
        ledger: &Arc<Mutex<Ledger>>,
        outputs: &Arc<Outputs>,
        stop: Arc<AtomicBool>,
    ) -> Result<CollectorSource, ForwardError> {
        let with_tls = tls.is_some();
        let l =
            StreamListener::open(listen, tls, allow, ledger, stop).map_err(|cause| match cause
                .kind()
            {
                std::io::ErrorKind::AddrInUse => ForwardError::PortInUse { listen },
                std::io::ErrorKind::AddrNotAvailable => ForwardError::NoSuchAddress { listen },
                _ => ForwardError::Listen { listen, cause },
            })?;
        Ok(CollectorSource {
            input: Input::Stream {
                messages: l.messages,
                current: None,
            },
            local: l.local,
            number: 0,
            intake: Intake::new(allow.to_vec(), Arc::clone(ledger)),
            table: InterfaceTable::default(),
            delivered: Vec::new(),
            outputs: Arc::clone(outputs),
            description: format!(
                "IPFIX collector on {} {}",
                if with_tls { "tls" } else { "tcp" },
                l.local
            ),
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.input {
            Input::Udp { socket, .. } => socket.local_addr().ok(),
            Input::Stream { .. } => Some(self.local),
        }
    }
}

/// The parts of a source that take one message.
struct Taker<'a> {
    intake: &'a mut Intake,
    table: &'a mut InterfaceTable,
    delivered: &'a mut Vec<u64>,
    number: usize,
    live: Option<&'a mut LiveStream>,
    file: Option<&'a mut MessageFile>,
}

impl Taker<'_> {
    /// Offers one message to the intake; its packets go to `sink` (and the live stream),
    /// the message itself to the raw file once accepted.
    fn offer<K: PacketSink>(&mut self, sink: &mut K, peer: SocketAddr, bytes: &[u8]) -> Outcome {
        let delivered = &mut *self.delivered;
        let want_live = self.live.is_some();
        let mut pending_live: Vec<Packet<'_>> = Vec::new();
        // Two atomic loads per message: the pool's fill decides whether shares apply.
        let fill = sink.backlog().fill;
        let outcome = self.intake.take_at(peer, bytes, self.table, fill, |p| {
            let i = p.iface as usize;
            if delivered.len() <= i {
                delivered.resize(i + 1, 0);
            }
            delivered[i] += 1;
            sink.packet(&p);
            if want_live {
                pending_live.push(p);
            }
        });
        if let Outcome::Accepted { .. } = outcome {
            if let Some(f) = self.file.as_mut() {
                f.write(bytes);
            }
            if let Some(l) = self.live.as_mut() {
                for p in &pending_live {
                    l.packet(self.number, &self.table.interfaces[p.iface as usize], p);
                }
            }
        }
        outcome
    }
}

impl PacketSource for CollectorSource {
    fn interfaces(&self) -> &[Interface] {
        &self.table.interfaces
    }

    fn poll<K: PacketSink>(&mut self, sink: &mut K) -> Result<Poll, SourceError> {
        self.intake.tick(Instant::now(), sink.backlog());
        let outputs = Arc::clone(&self.outputs);
        let mut live = outputs.live.as_ref().map(|l| l.lock().unwrap());
        let mut file = outputs.file.as_ref().map(|f| f.lock().unwrap());
        let mut taker = Taker {
            intake: &mut self.intake,
            table: &mut self.table,
            delivered: &mut self.delivered,
            number: self.number,
            live: live.as_deref_mut(),
            file: file.as_deref_mut(),
        };
        let poll = match &mut self.input {
            Input::Udp {
                socket,
                batch,
                received,
                next,
            } => {
                if *next >= *received {
                    if !udp::wait_readable(socket, POLL_WAIT_MS) {
                        return Ok(Poll::Idle);
                    }
                    *received = batch.recv(socket)?;
                    *next = 0;
                    if *received == 0 {
                        return Ok(Poll::Idle);
                    }
                }
                while *next < *received {
                    let d = batch.get(*next);
                    let Some(peer) = d.peer else {
                        *next += 1;
                        continue;
                    };
                    if d.truncated {
                        taker.intake.truncated(peer);
                        *next += 1;
                        continue;
                    }
                    if taker.offer(sink, peer, d.bytes) == Outcome::NewInterfaces {
                        // The recorder must learn them before their packets: offer this
                        // message again on the next poll.
                        break;
                    }
                    *next += 1;
                }
                Poll::Delivered
            }
            Input::Stream { messages, current } => {
                let mut poll = Poll::Idle;
                for _ in 0..RECV_BATCH {
                    let wait = if poll == Poll::Idle {
                        Duration::from_millis(POLL_WAIT_MS as u64)
                    } else {
                        Duration::ZERO
                    };
                    let (peer, bytes) = match current.take() {
                        Some(m) => m,
                        None => match messages.recv_timeout(wait) {
                            Ok(m) => m,
                            Err(RecvTimeoutError::Timeout) => break,
                            // Stopped, and every connection has ended.
                            Err(RecvTimeoutError::Disconnected) if poll == Poll::Idle => {
                                poll = Poll::End;
                                break;
                            }
                            Err(RecvTimeoutError::Disconnected) => break,
                        },
                    };
                    poll = Poll::Delivered;
                    if taker.offer(sink, peer, &bytes) == Outcome::NewInterfaces {
                        *current = Some((peer, bytes));
                        break;
                    }
                }
                poll
            }
        };
        if let Some(l) = live.as_mut() {
            l.flush();
        }
        if let Some(f) = file.as_mut() {
            f.flush();
        }
        Ok(poll)
    }

    /// A collector sees what arrives: what it could not store is counted in the ledger
    /// (per exporter and domain), not per interface.
    fn counters(&self) -> Vec<SourceCounters> {
        (0..self.table.interfaces.len())
            .map(|i| SourceCounters {
                seen: self.delivered.get(i).copied().unwrap_or(0),
                dropped: 0,
                freezes: 0,
            })
            .collect()
    }

    fn describe(&self) -> String {
        self.description.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapdeck_ipfix::{
        ExporterStats, InterfaceInfo, MessageBuilder, MessageHeader, PacketReport,
    };

    fn message(seq: u32, templates: bool, packets: &[(u64, &[u8])], start_ms: u64) -> Vec<u8> {
        let mut buf = vec![0u8; 1472];
        let header = MessageHeader {
            export_time: 1_795_000_000,
            sequence: seq,
            domain: 1,
            ..MessageHeader::default()
        };
        let mut b = MessageBuilder::new(&mut buf, 1472, header).unwrap();
        if templates {
            b.add_templates().unwrap();
            b.add_interface(&InterfaceInfo {
                id: 0,
                name: "cap0",
                description: "",
                frame_type: 1,
            })
            .unwrap();
            b.add_exporter_stats(&ExporterStats {
                start_time_ms: start_ms,
                selector: 1,
                ..ExporterStats::default()
            })
            .unwrap();
        }
        for (t, data) in packets {
            b.add_packet_report(&PacketReport {
                time_ns: *t,
                interface: 0,
                selector: 1,
                frame_size: 1000,
                frame_section: data,
            })
            .unwrap();
        }
        let n = b.finish().len;
        buf.truncate(n);
        buf
    }

    fn take_all(
        intake: &mut Intake,
        table: &mut InterfaceTable,
        peer: SocketAddr,
        m: &[u8],
    ) -> (Outcome, Vec<(u64, Vec<u8>, u32)>) {
        let mut got = Vec::new();
        let mut o = intake.take(peer, m, table, |p| {
            got.push((p.ts_ns, p.data.to_vec(), p.orig_len))
        });
        if o == Outcome::NewInterfaces {
            o = intake.take(peer, m, table, |p| {
                got.push((p.ts_ns, p.data.to_vec(), p.orig_len))
            });
        }
        (o, got)
    }

    /// The failure cases are counted and store nothing; good messages store their packets.
    #[test]
    fn bad_messages_are_counted_and_dropped() {
        let ledger = Arc::new(Mutex::new(Ledger::new()));
        let good: IpAddr = "198.18.0.1".parse().unwrap();
        let mut intake = Intake::new(vec![good], Arc::clone(&ledger));
        let mut table = InterfaceTable::default();
        let peer = SocketAddr::new(good, 40000);
        let stranger: SocketAddr = "198.18.0.99:40000".parse().unwrap();
        let pkt: &[u8] = &[0xaa; 54];

        // Data before its template: counted, dropped.
        let data_only = message(3, false, &[(5, pkt)], 0);
        assert_eq!(
            take_all(&mut intake, &mut table, peer, &data_only),
            (Outcome::NoTemplate, vec![])
        );
        // Not allowed.
        let m0 = message(0, true, &[(1, pkt), (2, pkt)], 77);
        assert_eq!(
            take_all(&mut intake, &mut table, stranger, &m0),
            (Outcome::NotAllowed, vec![])
        );
        // Good: templates (3 records) + 2 packets.
        let (o, got) = take_all(&mut intake, &mut table, peer, &m0);
        assert_eq!(o, Outcome::Accepted { packets: 2 });
        assert_eq!(got, vec![(1, pkt.to_vec(), 1000), (2, pkt.to_vec(), 1000)]);
        assert_eq!(table.interfaces[0].name.as_deref(), Some("198.18.0.1/cap0"));
        // Truncated at every length: malformed, nothing stored.
        let m1 = message(4, false, &[(3, pkt)], 0);
        for cut in [0, 5, 16, 20, m1.len() - 1] {
            assert_eq!(
                take_all(&mut intake, &mut table, peer, &m1[..cut]),
                (Outcome::Malformed, vec![])
            );
        }
        assert_eq!(
            take_all(&mut intake, &mut table, peer, &m1).0,
            Outcome::Accepted { packets: 1 }
        );
        // Replayed: counted as duplicates and stored all the same (a sequence number proves
        // nothing: a forger could as well have sent them with a fresh one).
        assert_eq!(
            take_all(&mut intake, &mut table, peer, &m1),
            (
                Outcome::Accepted { packets: 1 },
                vec![(3, pkt.to_vec(), 1000)]
            )
        );
        assert_eq!(
            take_all(&mut intake, &mut table, peer, &m0).0,
            Outcome::Accepted { packets: 2 }
        );
        // m0 held 4 data records (interface, statistics, 2 reports), m1 one: a gap of 4.
        let m2 = message(9, false, &[(4, pkt)], 0);
        assert_eq!(
            take_all(&mut intake, &mut table, peer, &m2).0,
            Outcome::Accepted { packets: 1 }
        );

        let snap = ledger.lock().unwrap().snapshot();
        let s = &snap.streams[0];
        assert_eq!(s.exporter, "198.18.0.1");
        assert_eq!(s.packets, 7);
        assert_eq!(s.no_template, 1);
        assert_eq!(
            s.malformed, 3,
            "cuts past the header are counted under the stream"
        );
        assert_eq!(s.duplicates, 2);
        assert_eq!(s.lost, 4);
        assert_eq!(s.records, 6);
        assert_eq!(s.exporter_counts.unwrap().start_time_ms, 77);
        assert_eq!(snap.not_allowed["198.18.0.99"], 1);
        assert_eq!(
            snap.unreadable["198.18.0.1"], 2,
            "a cut inside the header has no domain"
        );
    }

    /// A restarted exporter (new start time, new port) is the same stream, restarted.
    #[test]
    fn exporter_restart_is_counted() {
        let ledger = Arc::new(Mutex::new(Ledger::new()));
        let mut intake = Intake::new(vec![], Arc::clone(&ledger));
        let mut table = InterfaceTable::default();
        let pkt: &[u8] = &[1; 60];
        let a: SocketAddr = "198.18.0.1:40000".parse().unwrap();
        let b: SocketAddr = "198.18.0.1:40001".parse().unwrap();
        assert!(matches!(
            take_all(
                &mut intake,
                &mut table,
                a,
                &message(0, true, &[(1, pkt)], 100)
            )
            .0,
            Outcome::Accepted { .. }
        ));
        assert!(matches!(
            take_all(
                &mut intake,
                &mut table,
                a,
                &message(3, false, &[(1, pkt)], 0)
            )
            .0,
            Outcome::Accepted { .. }
        ));
        assert!(matches!(
            take_all(
                &mut intake,
                &mut table,
                b,
                &message(0, true, &[(1, pkt)], 200)
            )
            .0,
            Outcome::Accepted { .. }
        ));
        let s = &ledger.lock().unwrap().snapshot().streams[0];
        assert_eq!((s.restarts, s.lost, s.duplicates, s.packets), (1, 0, 0, 3));
        assert_eq!(table.interfaces.len(), 1);
    }

    /// Two exporters into one pool under pressure: the one over its share of the drain is
    /// shed, its packets counted as its own (`shed`, and by sequence number, so not
    /// `lost`); the one within its share keeps every packet; without pressure nobody is shed.
    #[test]
    fn over_its_share_under_pressure_an_exporter_is_shed_and_counted() {
        let ledger = Arc::new(Mutex::new(Ledger::new()));
        let mut intake = Intake::new(vec![], Arc::clone(&ledger));
        let mut table = InterfaceTable::default();
        let flood: SocketAddr = "198.18.53.1:45000".parse().unwrap();
        let real: SocketAddr = "198.18.51.1:40000".parse().unwrap();
        let (big, small): (&[u8], &[u8]) = (&[0x55; 1000], &[1; 60]);
        for peer in [flood, real] {
            let (o, _) = take_all(&mut intake, &mut table, peer, &message(0, true, &[], 77));
            assert_eq!(o, Outcome::Accepted { packets: 0 });
        }
        // Sequence numbers: the first message held two data records (interface, statistics).
        let mut next = [2u32, 2u32];
        let mut offer = |intake: &mut Intake, k: usize, fill: f64| {
            let (peer, data) = [(flood, big), (real, small)][k];
            let m = message(next[k], false, &[(1, data)], 0);
            next[k] += 1;
            let o = intake.take_at(peer, &m, &mut table, fill, |_| {});
            if o != Outcome::NewInterfaces {
                return o;
            }
            // As the source does: offered again once the recorder knows the interface.
            intake.take_at(peer, &m, &mut table, fill, |_| {})
        };
        let t0 = Instant::now();
        let mut sent = [0u64; 2];
        // Three seconds: the pool drains 20 kB/s and stays over half full; the flood offers
        // 51.6 kB/s, the real exporter 0.9 kB/s.
        for t in 0..30u32 {
            let backlog = Backlog {
                fill: 0.9,
                drained_bytes: 2_000 * u64::from(t),
            };
            intake.tick(t0 + crate::share::TICK * t, backlog);
            for _ in 0..5 {
                offer(&mut intake, 0, 0.9);
                sent[0] += 1;
            }
            assert_eq!(offer(&mut intake, 1, 0.9), Outcome::Accepted { packets: 1 });
            sent[1] += 1;
        }
        let stream = |ip: &str| {
            let snap = ledger.lock().unwrap().snapshot();
            snap.streams.into_iter().find(|s| s.exporter == ip).unwrap()
        };
        let (f, r) = (stream("198.18.53.1"), stream("198.18.51.1"));
        assert!(f.shed > sent[0] / 2, "{f:?}");
        assert_eq!((f.packets + f.shed, f.lost), (sent[0], 0), "{f:?}");
        assert_eq!((r.packets, r.shed, r.lost), (sent[1], 0, 0), "{r:?}");
        // Below half full nothing is shed, however far over its share the flood is.
        assert_eq!(offer(&mut intake, 0, 0.5), Outcome::Accepted { packets: 1 });
        assert_eq!(stream("198.18.53.1").shed, f.shed);
    }

    fn report_on(domain: u32, interface: u32, seq: u32) -> Vec<u8> {
        let mut buf = vec![0u8; 1472];
        let header = MessageHeader {
            export_time: 1_795_000_000,
            sequence: seq,
            domain,
            ..MessageHeader::default()
        };
        let mut b = MessageBuilder::new(&mut buf, 1472, header).unwrap();
        b.add_templates().unwrap();
        b.add_packet_report(&PacketReport {
            time_ns: 5,
            interface,
            selector: 1,
            frame_size: 60,
            frame_section: &[7; 60],
        })
        .unwrap();
        let n = b.finish().len;
        buf.truncate(n);
        buf
    }

    /// Interface ids past the cap go to one catch-all interface per address (their packets
    /// stored and counted); observation domains past the cap are refused and counted.
    #[test]
    fn interfaces_and_domains_are_capped() {
        let ledger = Arc::new(Mutex::new(Ledger::new()));
        let mut intake = Intake::new(vec![], Arc::clone(&ledger));
        let mut table = InterfaceTable::default();
        let peer: SocketAddr = "198.18.0.1:40000".parse().unwrap();
        let mut stored = 0;
        for id in 0..100u32 {
            let (o, got) = take_all(&mut intake, &mut table, peer, &report_on(1, id, id * 5));
            assert_eq!(o, Outcome::Accepted { packets: 1 }, "interface {id}");
            stored += got.len();
        }
        assert_eq!(stored, 100);
        assert_eq!(table.interfaces.len(), INTERFACES_PER_ADDRESS + 1);
        assert_eq!(
            table.interfaces.last().unwrap().name.as_deref(),
            Some("198.18.0.1/other")
        );
        // Every address gets its own up to the total cap, then one last catch-all.
        for a in 2..40u8 {
            let p = SocketAddr::new(IpAddr::from([198, 18, 1, a]), 1);
            for id in 0..20u32 {
                let (o, _) = take_all(&mut intake, &mut table, p, &report_on(1, id, id * 5));
                assert_eq!(o, Outcome::Accepted { packets: 1 });
            }
        }
        assert_eq!(table.interfaces.len(), INTERFACES_TOTAL + 1);
        assert_eq!(
            table.interfaces.last().unwrap().name.as_deref(),
            Some("other")
        );
        let snap = ledger.lock().unwrap().snapshot();
        assert_eq!(snap.refused["198.18.0.1"].interfaces, 100 - 16);

        for d in 2..100u32 {
            let o = take_all(&mut intake, &mut table, peer, &report_on(d, 0, 0)).0;
            let want = if d <= crate::ledger::STREAMS_PER_ADDRESS as u32 {
                Outcome::Accepted { packets: 1 }
            } else {
                Outcome::Refused
            };
            assert_eq!(o, want, "domain {d}");
        }
        let snap = ledger.lock().unwrap().snapshot();
        let mine = snap
            .streams
            .iter()
            .filter(|s| s.exporter == "198.18.0.1")
            .count();
        assert_eq!(mine, crate::ledger::STREAMS_PER_ADDRESS);
        assert_eq!(snap.refused["198.18.0.1"].domains, 99 - 32);
    }
}
