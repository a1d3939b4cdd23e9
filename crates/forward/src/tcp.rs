//! IPFIX over TCP and TLS (RFC 7011 §10.4): messages back to back on a stream, each framed
//! by the length in its header.
//!
//! - [`StreamLink`] (exporter): a bounded queue of built messages and one connection to a
//!   collector, made (and remade, with backoff) by a connector thread so the capture loop
//!   never waits for a connect or a handshake. Writes never block. A message leaves the
//!   queue only when TCP says the collector's host acknowledged its last byte
//!   (`tcpi_bytes_acked`), so what the exporter counts as sent is exactly what reached the
//!   collector; what was written but not acknowledged when a connection ends is written
//!   again on the next one (after fresh templates), and what does not fit the queue is
//!   counted as not sent.
//! - [`StreamListener`] (collector): accepts connections (allow list, per-address and total
//!   caps, TLS client certificates) and hands whole messages to the collector source
//!   through a bounded channel, so a slow store slows the exporters down (TCP flow control)
//!   instead of dropping. Stopping is a handshake: the collector half-closes each
//!   connection, a tapdeck exporter answers by half-closing its own side after its last
//!   whole message, and the collector reads to that end, so a clean restart loses nothing.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};
use tapdeck_ipfix::{read_header, set_sequence};

use crate::ledger::{Ledger, Refusal};

/// The exporter's queue per collector link, by default (`export --buffer`, split evenly
/// over threads and collectors).
pub const DEFAULT_BUFFER: usize = 64 << 20;
/// IPFIX octets per message over a stream: one TLS record's plaintext.
pub const STREAM_MESSAGE_LEN: usize = 16_384;
/// Connections a collector keeps at once from one address, and in all; more are refused
/// (closed at once, counted).
pub const CONNECTIONS_PER_ADDRESS: usize = 16;
pub const CONNECTIONS_TOTAL: usize = 128;
/// Whole messages waiting between the connections and the store (at most 64 KiB each).
const CHANNEL_MESSAGES: usize = 256;
/// How long a TLS handshake may take before the peer is refused.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stopping collector reads on after half-closing a connection.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// How often blocking reads look up to see whether the collector is stopping.
const READ_TICK: Duration = Duration::from_millis(100);
/// Bytes of messages encoded for the socket at a time.
const WIRE_CHUNK: usize = 256 << 10;
/// Reconnection backoff.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// After a collector closed cleanly (it is stopping or restarting), the first attempt
/// waits this long: its listener may still accept a connection that dies with it.
const AFTER_CLEAN_CLOSE: Duration = Duration::from_millis(500);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// TLS 1.3: how long the exporter waits for the collector's first record after the
/// handshake (its verdict on our certificate).
const ACCEPT_WAIT: Duration = Duration::from_secs(2);
/// A link is down once it has had no connection this long, or at once when an attempt to
/// connect failed (refused, unreachable, timed out, handshake refused): with several
/// collectors its flows then go to the living ones. Long enough for a collector's clean
/// restart (its close, our 500 ms pause, a new connection) to pass unnoticed.
pub const DOWN_AFTER: Duration = Duration::from_secs(2);

/// Bytes of this connection the peer acknowledged (TCP_INFO `tcpi_bytes_acked`, Linux 4.2+;
/// a FIN counts one more). Kept by the kernel after a reset, so it can be read after the
/// connection failed.
pub fn bytes_acked(s: &TcpStream) -> Option<u64> {
    // SAFETY: an all-zero tcp_info is valid.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    let need = std::mem::offset_of!(libc::tcp_info, tcpi_bytes_acked) + 8;
    (r == 0 && len as usize >= need).then_some(info.tcpi_bytes_acked)
}

/// What the exporter needs to reach one collector over a stream.
#[derive(Clone)]
pub struct StreamTarget {
    pub to: SocketAddr,
    /// TLS, and the name the collector's certificate must carry (host name or address).
    pub tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    /// Bytes of messages the link's queue holds at most.
    pub buffer: usize,
}

/// A message waiting for the collector's acknowledgement.
struct Queued {
    bytes: Vec<u8>,
    packets: u64,
    records: u32,
    /// Offset on the current connection's wire just past its last byte, once encoded.
    end: Option<u64>,
    /// Encoded for some connection, now or before: the collector may hold it, so it may
    /// go to no other collector.
    went_out: bool,
}

/// A queued message that never went out, taken back from a down link.
pub struct Unsent {
    pub bytes: Vec<u8>,
    pub packets: u64,
}

/// What the collector acknowledged since the last [`StreamLink::take_acked`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    pub messages: u64,
    pub records: u64,
    pub packets: u64,
    pub bytes: u64,
}

struct Conn {
    sock: TcpStream,
    tls: Option<Box<ClientConnection>>,
    /// Bytes we sent before the messages (the TLS handshake), which TCP counts too.
    before: u64,
    /// Encoded bytes not yet taken by the socket, from `wire_pos`.
    wire: Vec<u8>,
    wire_pos: usize,
    /// Bytes the socket took, and encoded in all (the end of `wire`).
    written: u64,
    encoded: u64,
    /// Queue index of the first message not encoded yet.
    next: usize,
    /// The collector asked to close (it half-closed): no new messages, then our half-close.
    closing: bool,
    shut: bool,
}

impl Conn {
    /// Reads what the collector sent (nothing but a close is expected); false once the
    /// connection failed.
    fn read_peer(&mut self) -> bool {
        let mut scratch = [0u8; 4096];
        match &mut self.tls {
            None => loop {
                match self.sock.read(&mut scratch) {
                    Ok(0) => {
                        self.closing = true;
                        return true;
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            },
            Some(tls) => loop {
                match tls.read_tls(&mut self.sock) {
                    Ok(0) => {
                        self.closing = true;
                        return true;
                    }
                    Ok(_) => {
                        let Ok(state) = tls.process_new_packets() else {
                            return false;
                        };
                        if state.peer_has_closed() {
                            self.closing = true;
                        }
                        while matches!(tls.reader().read(&mut scratch), Ok(n) if n > 0) {}
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            },
        }
    }

    /// Adds one message to the wire (as TLS records, with TLS).
    fn encode(&mut self, message: &[u8]) -> io::Result<()> {
        match &mut self.tls {
            None => self.wire.extend_from_slice(message),
            Some(tls) => {
                tls.writer().write_all(message)?;
                while tls.wants_write() {
                    tls.write_tls(&mut self.wire)?;
                }
            }
        }
        self.encoded = self.written + (self.wire.len() - self.wire_pos) as u64;
        Ok(())
    }

    /// Writes what the socket takes without waiting; false once the connection failed.
    fn write_some(&mut self) -> bool {
        while self.wire_pos < self.wire.len() {
            match self.sock.write(&self.wire[self.wire_pos..]) {
                Ok(0) => return false,
                Ok(n) => {
                    self.wire_pos += n;
                    self.written += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        self.wire.clear();
        self.wire_pos = 0;
        true
    }

    /// Our half-close: TLS close_notify, then FIN.
    fn shut_down(&mut self) {
        if let Some(tls) = &mut self.tls {
            tls.send_close_notify();
            while tls.wants_write() {
                if tls.write_tls(&mut self.wire).is_err() {
                    break;
                }
            }
            self.write_some();
        }
        let _ = self.sock.shutdown(Shutdown::Write);
        self.shut = true;
    }

    fn acked(&self) -> u64 {
        bytes_acked(&self.sock)
            .unwrap_or(0)
            .saturating_sub(self.before)
            .min(self.written)
    }
}

/// A made connection, from the connector thread.
struct Connected {
    sock: TcpStream,
    tls: Option<Box<ClientConnection>>,
    before: u64,
}

/// One collector over TCP or TLS, as seen from one export thread.
pub struct StreamLink {
    target: StreamTarget,
    queue: VecDeque<Queued>,
    queued_bytes: usize,
    conn: Option<Conn>,
    /// A connection is up but waits for its first message (the templates).
    awaiting_start: bool,
    connected_rx: Receiver<Connected>,
    /// Asks the connector for a connection, after the given pause.
    reconnect_tx: SyncSender<Duration>,
    closed: Arc<AtomicBool>,
    /// Set by the connector while its attempts fail, cleared when one succeeds.
    connect_failing: Arc<AtomicBool>,
    /// Since when the link has had no connection (`None` while it has one).
    unconnected_since: Option<Instant>,
    acked: Acked,
    /// Connections made, and lost (or closed by the collector).
    pub connects: u64,
    pub disconnects: u64,
}

impl StreamLink {
    /// Starts connecting in the background; messages queue meanwhile.
    pub fn open(target: StreamTarget) -> io::Result<StreamLink> {
        let (connected_tx, connected_rx) = mpsc::sync_channel(1);
        let (reconnect_tx, reconnect_rx) = mpsc::sync_channel(1);
        let closed = Arc::new(AtomicBool::new(false));
        let connect_failing = Arc::new(AtomicBool::new(false));
        let t = target.clone();
        let c = Arc::clone(&closed);
        let f = Arc::clone(&connect_failing);
        thread::Builder::new()
            .name("export-connect".into())
            .spawn(move || connector(t, connected_tx, reconnect_rx, c, f))?;
        let _ = reconnect_tx.try_send(Duration::ZERO);
        Ok(StreamLink {
            target,
            queue: VecDeque::new(),
            queued_bytes: 0,
            conn: None,
            awaiting_start: false,
            connected_rx,
            reconnect_tx,
            closed,
            connect_failing,
            unconnected_since: Some(Instant::now()),
            acked: Acked::default(),
            connects: 0,
            disconnects: 0,
        })
    }

    pub fn to(&self) -> SocketAddr {
        self.target.to
    }

    pub fn is_tls(&self) -> bool {
        self.target.tls.is_some()
    }

    /// Queues a built message; false (and nothing queued) when the queue has no room.
    pub fn offer(&mut self, message: &[u8], packets: u64, records: u32) -> bool {
        if self.queued_bytes + message.len() > self.target.buffer {
            return false;
        }
        self.queued_bytes += message.len();
        self.queue.push_back(Queued {
            bytes: message.to_vec(),
            packets,
            records,
            end: None,
            went_out: false,
        });
        true
    }

    /// Down: no connection, and either the last attempt to connect failed or there has been
    /// none for [`DOWN_AFTER`]. A connection that stalls (the collector stops reading) is
    /// not down: its queue fills and the rest is counted over the buffer.
    pub fn is_down(&self) -> bool {
        self.conn.is_none()
            && (self.connect_failing.load(Ordering::Relaxed)
                || self
                    .unconnected_since
                    .is_some_and(|t| t.elapsed() >= DOWN_AFTER))
    }

    /// Takes back the queued messages that never went out on any connection (the queue's
    /// tail after the last one that did), oldest first, for other collectors. Only while
    /// there is no connection.
    pub fn take_unsent(&mut self) -> Vec<Unsent> {
        if self.conn.is_some() {
            return Vec::new();
        }
        let keep = self
            .queue
            .iter()
            .rposition(|q| q.went_out)
            .map_or(0, |i| i + 1);
        let taken: Vec<Unsent> = self
            .queue
            .drain(keep..)
            .map(|q| Unsent {
                bytes: q.bytes,
                packets: q.packets,
            })
            .collect();
        self.queued_bytes -= taken.iter().map(|u| u.bytes.len()).sum::<usize>();
        taken
    }

    /// Queued messages that never went out on any connection.
    pub fn has_unsent(&self) -> bool {
        self.queue.back().is_some_and(|q| !q.went_out)
    }

    /// Packets queued and not yet acknowledged.
    pub fn queued_packets(&self) -> u64 {
        self.queue.iter().map(|q| q.packets).sum()
    }

    pub fn queued_messages(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// When a new connection waits for its templates: the sequence number the templates
    /// message must carry (that of the first queued message), or `None` to use the link's.
    pub fn wants_start(&self) -> Option<Option<u32>> {
        self.awaiting_start.then(|| {
            self.queue
                .front()
                .and_then(|q| read_header(&q.bytes))
                .map(|h| h.sequence)
        })
    }

    /// Puts the templates message first on the new connection; the queued messages move up
    /// by its `records` data records, so the collector sees one unbroken sequence.
    pub fn start(&mut self, message: Vec<u8>, records: u32) {
        for q in &mut self.queue {
            if let Some(h) = read_header(&q.bytes) {
                set_sequence(&mut q.bytes, h.sequence.wrapping_add(records));
            }
        }
        self.queued_bytes += message.len();
        self.queue.push_front(Queued {
            bytes: message,
            packets: 0,
            records,
            end: None,
            went_out: false,
        });
        self.awaiting_start = false;
    }

    /// Takes a new connection, writes, reads the collector's close and counts what it
    /// acknowledged. Never waits.
    pub fn pump(&mut self) {
        if self.conn.is_none() && !self.closed.load(Ordering::Relaxed) {
            match self.connected_rx.try_recv() {
                Ok(c) => {
                    self.conn = Some(Conn {
                        sock: c.sock,
                        tls: c.tls,
                        before: c.before,
                        wire: Vec::new(),
                        wire_pos: 0,
                        written: 0,
                        encoded: 0,
                        next: 0,
                        closing: false,
                        shut: false,
                    });
                    self.awaiting_start = true;
                    self.unconnected_since = None;
                    self.connects += 1;
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            }
        }
        if self.awaiting_start {
            return;
        }
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let mut alive = conn.read_peer();
        while alive {
            if conn.wire_pos < conn.wire.len() {
                alive = conn.write_some();
                if conn.wire_pos < conn.wire.len() {
                    break;
                }
            } else if !conn.closing && conn.next < self.queue.len() {
                let before = conn.wire.len();
                while conn.next < self.queue.len() && conn.wire.len() - before < WIRE_CHUNK {
                    let q = &mut self.queue[conn.next];
                    if conn.encode(&q.bytes).is_err() {
                        alive = false;
                        break;
                    }
                    q.end = Some(conn.encoded);
                    q.went_out = true;
                    conn.next += 1;
                }
            } else {
                break;
            }
        }
        if alive && conn.closing && !conn.shut && conn.wire_pos >= conn.wire.len() {
            conn.shut_down();
        }
        let acked = conn.acked();
        let done = conn.shut && acked >= conn.written;
        self.release(acked);
        if !alive || done {
            self.lose_connection(alive);
        }
    }

    /// Drops the messages the collector acknowledged whole.
    fn release(&mut self, acked: u64) {
        let mut n = 0;
        while let Some(q) = self.queue.front() {
            if q.end.is_none_or(|e| e > acked) {
                break;
            }
            let q = self.queue.pop_front().expect("front");
            self.queued_bytes -= q.bytes.len();
            self.acked.messages += 1;
            self.acked.records += u64::from(q.records);
            self.acked.packets += q.packets;
            self.acked.bytes += q.bytes.len() as u64;
            n += 1;
        }
        if let Some(c) = self.conn.as_mut() {
            c.next = c.next.saturating_sub(n);
        }
    }

    /// The connection ended (failed, or closed at the collector's request): what it did
    /// not acknowledge goes again on the next one.
    fn lose_connection(&mut self, clean: bool) {
        if let Some(acked) = self.conn.as_ref().map(Conn::acked) {
            self.release(acked);
        }
        self.conn = None;
        self.unconnected_since = Some(Instant::now());
        for q in &mut self.queue {
            q.end = None;
        }
        self.awaiting_start = false;
        self.disconnects += 1;
        if clean {
            tracing::info!(
                "collector {}: closed the connection; reconnecting ({} messages queued)",
                self.target.to,
                self.queue.len()
            );
        } else {
            tracing::warn!(
                "collector {}: connection lost; reconnecting ({} messages queued, to be sent again)",
                self.target.to,
                self.queue.len()
            );
        }
        let pause = if clean {
            AFTER_CLEAN_CLOSE
        } else {
            Duration::ZERO
        };
        let _ = self.reconnect_tx.try_send(pause);
    }

    /// What the collector acknowledged since the last call.
    pub fn take_acked(&mut self) -> Acked {
        std::mem::take(&mut self.acked)
    }

    /// The last step at stop (after the wait for acknowledgements): half-closes the
    /// connection and makes no other.
    pub fn close(&mut self) {
        self.closed.store(true, Ordering::Relaxed);
        if let Some(c) = self.conn.as_mut() {
            if !c.shut {
                c.shut_down();
            }
        }
        if let Some(acked) = self.conn.as_ref().map(Conn::acked) {
            self.release(acked);
        }
        self.conn = None;
    }

    /// Waits (at most `timeout`) until the socket can take more or the collector sent
    /// something; for the drain at stop.
    pub fn wait(&self, timeout: Duration) {
        match &self.conn {
            Some(c) => {
                let mut pfd = libc::pollfd {
                    fd: c.sock.as_raw_fd(),
                    events: libc::POLLIN
                        | if c.wire_pos < c.wire.len() {
                            libc::POLLOUT
                        } else {
                            0
                        },
                    revents: 0,
                };
                // SAFETY: one pollfd, passed with its count.
                unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
            }
            None => thread::sleep(timeout),
        }
    }
}

impl Drop for StreamLink {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Relaxed);
        let _ = self.reconnect_tx.try_send(Duration::ZERO);
    }
}

/// Makes connections for a [`StreamLink`], one each time it asks, retrying with backoff.
fn connector(
    target: StreamTarget,
    connected: SyncSender<Connected>,
    asked: Receiver<Duration>,
    closed: Arc<AtomicBool>,
    failing_now: Arc<AtomicBool>,
) {
    let to = target.to;
    while let Ok(pause) = asked.recv() {
        let until = Instant::now() + pause;
        while Instant::now() < until && !closed.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(20));
        }
        let mut backoff = BACKOFF_FIRST;
        let mut failing = false;
        loop {
            if closed.load(Ordering::Relaxed) {
                return;
            }
            match connect(&target) {
                Ok(c) => {
                    tracing::info!(
                        "collector {to}: connected over {}",
                        if target.tls.is_some() { "TLS" } else { "TCP" }
                    );
                    failing_now.store(false, Ordering::Relaxed);
                    if connected.send(c).is_err() {
                        return;
                    }
                    break;
                }
                Err(e) => {
                    failing_now.store(true, Ordering::Relaxed);
                    if !failing {
                        failing = true;
                        tracing::warn!(
                            "collector {to}: cannot connect ({e}); retrying with backoff up to {} s, messages queue meanwhile",
                            BACKOFF_MAX.as_secs()
                        );
                    }
                    let until = Instant::now() + backoff;
                    while Instant::now() < until && !closed.load(Ordering::Relaxed) {
                        thread::sleep(Duration::from_millis(20));
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }
}

fn connect(target: &StreamTarget) -> io::Result<Connected> {
    let sock = TcpStream::connect_timeout(&target.to, CONNECT_TIMEOUT)?;
    sock.set_nodelay(true)?;
    let mut before = 0u64;
    let tls = match &target.tls {
        None => None,
        Some((config, name)) => {
            let mut tls = ClientConnection::new(Arc::clone(config), name.clone())
                .map_err(io::Error::other)?;
            sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
            sock.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
            let mut s = &sock;
            while tls.is_handshaking() {
                let (_, wrote) = tls
                    .complete_io(&mut s)
                    .map_err(|e| io::Error::new(e.kind(), format!("TLS handshake failed: {e}")))?;
                before += wrote as u64;
            }
            // Whatever is left to write of the handshake goes before the messages too.
            while tls.wants_write() {
                before += tls.write_tls(&mut s)? as u64;
            }
            // TLS 1.3: the collector judges our certificate after our Finished, so a
            // finished handshake does not mean it accepted us. Bytes sent now could be
            // acknowledged by its kernel and then thrown away with the connection: wait for
            // its first record after the handshake (rustls sends session tickets at once),
            // or its alert. A collector that sends nothing is taken as accepting.
            if tls.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3) {
                sock.set_read_timeout(Some(ACCEPT_WAIT))?;
                match tls.read_tls(&mut s) {
                    Ok(0) => return Err(io::Error::other("the collector closed the connection after the handshake (our certificate refused?)")),
                    Ok(_) => {
                        tls.process_new_packets().map_err(|e| {
                            io::Error::other(format!("the collector refused us: {e}"))
                        })?;
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) => {}
                    Err(e) => return Err(e),
                }
            }
            Some(Box::new(tls))
        }
    };
    sock.set_read_timeout(None)?;
    sock.set_write_timeout(None)?;
    sock.set_nonblocking(true)?;
    Ok(Connected { sock, tls, before })
}

/// A whole message and who sent it, from a connection to the collector source.
pub type StreamMessage = (SocketAddr, Vec<u8>);

/// The collector's listening side: accepts connections and reads messages until `stop`.
pub struct StreamListener {
    pub local: SocketAddr,
    pub messages: Receiver<StreamMessage>,
}

struct Shared {
    tls: Option<Arc<ServerConfig>>,
    allow: Vec<IpAddr>,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
    total: AtomicUsize,
    per_address: Mutex<std::collections::HashMap<IpAddr, usize>>,
}

impl StreamListener {
    /// Listens on `listen`; connections are read until `stop` is set, then closed by the
    /// handshake above. The channel disconnects when every connection has ended.
    pub fn open(
        listen: SocketAddr,
        tls: Option<Arc<ServerConfig>>,
        allow: &[IpAddr],
        ledger: &Arc<Mutex<Ledger>>,
        stop: Arc<AtomicBool>,
    ) -> io::Result<StreamListener> {
        let listener = TcpListener::bind(listen)?;
        let local = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let (tx, rx) = mpsc::sync_channel(CHANNEL_MESSAGES);
        let shared = Arc::new(Shared {
            tls,
            allow: allow.to_vec(),
            ledger: Arc::clone(ledger),
            stop,
            total: AtomicUsize::new(0),
            per_address: Mutex::new(Default::default()),
        });
        thread::Builder::new()
            .name("collect-accept".into())
            .spawn(move || accept_loop(listener, shared, tx))?;
        Ok(StreamListener {
            local,
            messages: rx,
        })
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, tx: SyncSender<StreamMessage>) {
    while !shared.stop.load(Ordering::Relaxed) {
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, passed with its count.
        if unsafe { libc::poll(&mut pfd, 1, READ_TICK.as_millis() as i32) } <= 0 {
            continue;
        }
        let (sock, peer) = match listener.accept() {
            Ok(x) => x,
            Err(_) => continue,
        };
        let ip = canonical(peer.ip());
        if !shared.allow.is_empty() && !shared.allow.contains(&ip) {
            if shared.ledger.lock().unwrap().not_allowed(ip) {
                tracing::warn!("collector: refusing a connection from {ip}, which is not in --allow (counted; logged once)");
            }
            continue;
        }
        {
            let mut per = shared.per_address.lock().unwrap();
            let mine = per.entry(ip).or_default();
            if *mine >= CONNECTIONS_PER_ADDRESS
                || shared.total.load(Ordering::Relaxed) >= CONNECTIONS_TOTAL
            {
                drop(per);
                if shared
                    .ledger
                    .lock()
                    .unwrap()
                    .refused(ip, Refusal::Connections)
                {
                    tracing::warn!("collector: refusing a connection from {ip}: {CONNECTIONS_PER_ADDRESS} per address or {CONNECTIONS_TOTAL} in all are open (counted; logged once)");
                }
                continue;
            }
            *mine += 1;
            shared.total.fetch_add(1, Ordering::Relaxed);
        }
        let s = Arc::clone(&shared);
        let tx = tx.clone();
        let spawned = thread::Builder::new()
            .name("collect-conn".into())
            .spawn(move || {
                serve_connection(sock, peer, &s, tx);
                let mut per = s.per_address.lock().unwrap();
                if let Some(n) = per.get_mut(&ip) {
                    *n -= 1;
                    if *n == 0 {
                        per.remove(&ip);
                    }
                }
                s.total.fetch_sub(1, Ordering::Relaxed);
            });
        if let Err(e) = spawned {
            tracing::warn!("collector: cannot start a connection thread for {peer}: {e}");
        }
    }
}

/// A connection's byte stream, plain or TLS.
enum Stream {
    Tcp(TcpStream),
    Tls(Box<rustls::StreamOwned<ServerConnection, TcpStream>>),
}

impl Stream {
    fn sock(&self) -> &TcpStream {
        match self {
            Stream::Tcp(s) => s,
            Stream::Tls(t) => &t.sock,
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }

    /// Our half-close: TLS close_notify, then FIN; reading goes on.
    fn half_close(&mut self) {
        if let Stream::Tls(t) = self {
            t.conn.send_close_notify();
            let _ = t.flush();
        }
        let _ = self.sock().shutdown(Shutdown::Write);
    }
}

/// One connection, on its own thread: the TLS handshake if any, then whole messages into
/// `tx` until the exporter closes, the stream stops being IPFIX, or our stop's half-close
/// is not answered in time.
fn serve_connection(
    sock: TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    tx: SyncSender<StreamMessage>,
) {
    let ip = canonical(peer.ip());
    let _ = sock.set_nodelay(true);
    let mut stream = match &shared.tls {
        None => Stream::Tcp(sock),
        Some(config) => match handshake(sock, peer, config, shared) {
            Some(s) => s,
            None => return,
        },
    };
    let _ = stream.sock().set_write_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = stream.sock().set_read_timeout(Some(READ_TICK));
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 17);
    let mut chunk = vec![0u8; 1 << 16];
    let mut closing_since: Option<Instant> = None;
    loop {
        if closing_since.is_none() && shared.stop.load(Ordering::Relaxed) {
            stream.half_close();
            closing_since = Some(Instant::now());
        }
        if closing_since.is_some_and(|t| t.elapsed() >= CLOSE_WAIT) {
            tracing::warn!(
                "collector: {peer} did not close within {} s of our close; dropping the connection",
                CLOSE_WAIT.as_secs()
            );
            return;
        }
        let n = match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                tracing::info!("collector: connection from {peer} ended: {e}");
                break;
            }
        };
        buf.extend_from_slice(&chunk[..n]);
        if !send_whole_messages(&mut buf, peer, shared, &tx) {
            return;
        }
    }
    if !buf.is_empty() && shared.ledger.lock().unwrap().malformed(ip, None) {
        tracing::warn!(
            "collector: {peer} closed in the middle of a message; its {} bytes are dropped (counted)",
            buf.len()
        );
    }
}

/// The server's side of the TLS handshake, within [`HANDSHAKE_TIMEOUT`]; a failed one is
/// counted as refused against the peer's address (logged once per address).
fn handshake(
    sock: TcpStream,
    peer: SocketAddr,
    config: &Arc<ServerConfig>,
    shared: &Shared,
) -> Option<Stream> {
    let _ = sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = sock.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
    let mut conn = match ServerConnection::new(Arc::clone(config)) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("collector: TLS for {peer}: {e}");
            return None;
        }
    };
    let mut s = &sock;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut s) {
            let ip = canonical(peer.ip());
            if shared
                .ledger
                .lock()
                .unwrap()
                .refused(ip, Refusal::Handshakes)
            {
                tracing::warn!("collector: TLS handshake with {peer} failed ({e}); refused (counted; logged once per address)");
            }
            return None;
        }
    }
    Some(Stream::Tls(Box::new(rustls::StreamOwned::new(conn, sock))))
}

/// Sends the whole messages at the front of `buf` into `tx`, framed by the length in each
/// header, and keeps the rest. False when the connection must close: the stream is not
/// IPFIX (the framing is lost, counted as malformed) or the receiver is gone.
fn send_whole_messages(
    buf: &mut Vec<u8>,
    peer: SocketAddr,
    shared: &Shared,
    tx: &SyncSender<StreamMessage>,
) -> bool {
    let mut at = 0;
    while buf.len() - at >= 4 {
        let version = u16::from_be_bytes([buf[at], buf[at + 1]]);
        let len = u16::from_be_bytes([buf[at + 2], buf[at + 3]]) as usize;
        if version != 10 || len < 16 {
            // The framing is lost: nothing after this can be found again.
            let ip = canonical(peer.ip());
            if shared.ledger.lock().unwrap().malformed(ip, None) {
                tracing::warn!("collector: {peer} sent a stream that is not IPFIX (version {version}, length {len}); connection closed (counted; logged once)");
            }
            return false;
        }
        if buf.len() - at < len {
            break;
        }
        if tx.send((peer, buf[at..at + len].to_vec())).is_err() {
            return false;
        }
        at += len;
    }
    buf.drain(..at);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(seq: u32, len: usize) -> Vec<u8> {
        let mut m = vec![0u8; len];
        m[0..2].copy_from_slice(&10u16.to_be_bytes());
        m[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        set_sequence(&mut m, seq);
        m
    }

    fn collect_until(
        rx: &Receiver<StreamMessage>,
        n: usize,
        deadline: Duration,
    ) -> Vec<StreamMessage> {
        let end = Instant::now() + deadline;
        let mut got = Vec::new();
        while got.len() < n && Instant::now() < end {
            if let Ok(m) = rx.recv_timeout(Duration::from_millis(50)) {
                got.push(m);
            }
        }
        got
    }

    fn pump_until(link: &mut StreamLink, done: impl Fn(&StreamLink) -> bool, what: &str) {
        let end = Instant::now() + Duration::from_secs(10);
        while !done(link) {
            assert!(Instant::now() < end, "timed out waiting for {what}");
            if let Some(seq) = link.wants_start() {
                link.start(message(seq.unwrap_or(0), 40), 0);
            }
            link.pump();
            link.wait(Duration::from_millis(10));
        }
    }

    /// Messages reach the collector whole and in order; the link counts them acknowledged
    /// only once TCP says so; a collector restart (stop, listen again on the same port)
    /// loses nothing and sends the unacknowledged again after the templates.
    #[test]
    fn messages_are_acknowledged_and_survive_a_collector_restart() {
        let ledger = Arc::new(Mutex::new(Ledger::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let l = StreamListener::open(
            "127.0.0.1:0".parse().unwrap(),
            None,
            &[],
            &ledger,
            Arc::clone(&stop),
        )
        .unwrap();
        let mut link = StreamLink::open(StreamTarget {
            to: l.local,
            tls: None,
            buffer: 1 << 20,
        })
        .unwrap();
        for i in 0..100u32 {
            assert!(link.offer(&message(1000 + i, 100 + i as usize), 2, 1));
        }
        pump_until(&mut link, |l| l.is_empty(), "the first 100 acknowledged");
        let a = link.take_acked();
        // The templates message (records 0) plus the 100.
        assert_eq!((a.messages, a.packets, a.records), (101, 200, 100));
        let got = collect_until(&l.messages, 101, Duration::from_secs(5));
        assert_eq!(got.len(), 101);
        for (i, (_, m)) in got[1..].iter().enumerate() {
            assert_eq!(m.len(), 100 + i);
            assert_eq!(read_header(m).unwrap().sequence, 1000 + i as u32);
        }
        // The collector stops: it half-closes; the link answers and reconnects later.
        stop.store(true, Ordering::Relaxed);
        pump_until(
            &mut link,
            |l| l.disconnects == 1,
            "the link to see the close",
        );
        let end = Instant::now() + Duration::from_secs(10);
        while l.messages.recv_timeout(Duration::from_millis(50))
            != Err(mpsc::RecvTimeoutError::Disconnected)
        {
            assert!(Instant::now() < end, "the listener's channel to end");
        }
        for i in 0..50u32 {
            assert!(link.offer(&message(2000 + i, 64), 1, 1));
        }
        for _ in 0..20 {
            link.pump();
        }
        assert_eq!(link.take_acked(), Acked::default(), "nobody listens");
        let stop2 = Arc::new(AtomicBool::new(false));
        let l2 = StreamListener::open(l.local, None, &[], &ledger, stop2).unwrap();
        pump_until(&mut link, |l| l.is_empty(), "the 50 after the restart");
        let a = link.take_acked();
        assert_eq!((a.messages, a.packets), (51, 50));
        let got = collect_until(&l2.messages, 51, Duration::from_secs(5));
        assert_eq!(got.len(), 51);
        assert_eq!(read_header(&got[1].1).unwrap().sequence, 2000);
    }

    /// Over the queue's cap, messages are refused (the caller counts them).
    #[test]
    fn the_queue_is_bounded() {
        let mut link = StreamLink::open(StreamTarget {
            to: "127.0.0.1:9".parse().unwrap(),
            tls: None,
            buffer: 1000,
        })
        .unwrap();
        assert!(link.offer(&message(0, 600), 1, 1));
        assert!(!link.offer(&message(1, 600), 1, 1));
        assert!(link.offer(&message(1, 400), 1, 1));
        assert_eq!(link.queued_packets(), 2);
    }

    #[test]
    fn a_stream_that_is_not_ipfix_is_closed_and_counted() {
        let ledger = Arc::new(Mutex::new(Ledger::new()));
        let l = StreamListener::open(
            "127.0.0.1:0".parse().unwrap(),
            None,
            &[],
            &ledger,
            Arc::new(AtomicBool::new(false)),
        )
        .unwrap();
        let mut s = TcpStream::connect(l.local).unwrap();
        s.write_all(&message(0, 20)).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let got = collect_until(&l.messages, 1, Duration::from_secs(5));
        assert_eq!(got.len(), 1);
        let mut rest = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.read_to_end(&mut rest);
        let snap = ledger.lock().unwrap().snapshot();
        assert_eq!(snap.unreadable["127.0.0.1"], 1);
    }
}
