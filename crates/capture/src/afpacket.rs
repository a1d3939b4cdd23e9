//! Live capture from Linux network interfaces: one AF_PACKET socket per interface, each
//! with a TPACKET_V3 memory-mapped receive ring. The kernel fills a block with packets and
//! hands it over; `poll` copies them out to the sink and hands the block straight back, so
//! the ring only ever holds what the recorder has not yet seen (principle 1).
//!
//! With `--threads N`, N sources share each interface through a PACKET_FANOUT group with
//! the kernel's symmetric flow hash: both directions of a connection land in one source.
//! A capture filter (tcpdump syntax, compiled by libpcap) and the snap length run in the
//! kernel, so unwanted packets and bytes never reach the ring.

mod bpf;
mod ring;
mod socket;

use std::cell::Cell;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tapdeck_pcap::{Interface, Packet, PacketFlags};

pub use bpf::DEFAULT_SNAPLEN;
use ring::Ring;

use crate::{PacketSink, PacketSource, Poll, SettingError, SourceCounters, SourceError};

/// How long `poll` waits for a packet before reporting `Idle`.
const POLL_WAIT_MS: i32 = 100;
/// Blocks taken from one ring per `poll`, so several interfaces take turns and the
/// recorder gets control back regularly even under full load.
const BLOCKS_PER_TURN: usize = 8;
/// How often an interface that went down is checked for coming back.
const DOWN_CHECK: Duration = Duration::from_secs(1);

/// How to open live capture sockets.
#[derive(Debug, Clone)]
pub struct AfPacketConfig {
    /// Interface names; each becomes one interface of the source, in this order.
    pub interfaces: Vec<String>,
    /// Bytes per ring block: a multiple of the page size, at least as large as the
    /// largest frame.
    pub block_size: u32,
    /// Blocks per ring (one ring per interface and thread).
    pub blocks: u32,
    /// TPACKET_V3 checks it against the block size but packs frames tightly regardless.
    pub frame_size: u32,
    /// Milliseconds after which the kernel hands over a partly filled block, so a quiet
    /// link's packets still arrive promptly.
    pub block_timeout_ms: u32,
    /// Capture filter in tcpdump syntax.
    pub filter: Option<String>,
    /// Bytes kept of each packet (the original length is still recorded).
    pub snaplen: Option<u32>,
    /// Receive frames addressed to other hosts too.
    pub promiscuous: bool,
    /// Stop after delivering this many packets in all (shared by a fanout group's sources).
    pub count: Option<u64>,
}

impl Default for AfPacketConfig {
    fn default() -> AfPacketConfig {
        AfPacketConfig {
            interfaces: Vec::new(),
            block_size: 4 << 20,
            blocks: 64,
            frame_size: 2048,
            block_timeout_ms: 10,
            filter: None,
            snaplen: None,
            promiscuous: true,
            count: None,
        }
    }
}

/// The kernel's PACKET_STATISTICS for one socket, accumulated over every read (a read
/// resets the kernel's counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// `tp_packets`: packets put into the ring *plus* those dropped for want of room
    /// (af_packet.c's `packet_getsockopt` adds `tp_drops` to it for TPACKET_V3).
    pub packets: u64,
    /// `tp_drops`: packets that passed the filter but found no room in the ring.
    pub drops: u64,
    /// `tp_freeze_q_cnt`: times the ring filled up and the kernel froze it until user
    /// space handed back a block.
    pub freezes: u64,
}

/// One interface's socket and ring.
struct Tap {
    name: String,
    ifindex: i32,
    socket: OwnedFd,
    ring: Ring,
    delivered: u64,
    kernel: Cell<KernelStats>,
    down: bool,
    /// Shared by the sockets of one interface (a fanout group), so that a link going down
    /// or up is announced once, not once per thread.
    announced_down: Arc<AtomicBool>,
    last_down_check: Instant,
    removed: bool,
}

pub struct AfPacketSource {
    taps: Vec<Tap>,
    interfaces: Vec<Interface>,
    pollfds: Vec<libc::pollfd>,
    /// Packets still to deliver, shared with the other sources of a fanout group.
    remaining: Option<Arc<AtomicU64>>,
    description: String,
    /// The ring's block timeout: the longest the kernel keeps packets it took in a block.
    block_timeout: Duration,
}

impl AfPacketSource {
    /// One source capturing every interface of `cfg`.
    pub fn open(cfg: &AfPacketConfig) -> Result<AfPacketSource, SourceError> {
        let mut sources = AfPacketSource::open_fanout(cfg, 1)?;
        Ok(sources.remove(0))
    }

    /// `threads` sources, each with one socket per interface; the sockets of an interface
    /// form a PACKET_FANOUT group hashing flows symmetrically, so every packet goes to
    /// exactly one source and both directions of a flow to the same one.
    pub fn open_fanout(
        cfg: &AfPacketConfig,
        threads: usize,
    ) -> Result<Vec<AfPacketSource>, SourceError> {
        if cfg.interfaces.is_empty() {
            return Err(SettingError::NoInterface.into());
        }
        if threads == 0 {
            return Err(SettingError::NoThreads.into());
        }
        let remaining = cfg.count.map(|n| Arc::new(AtomicU64::new(n)));
        let mut sources: Vec<AfPacketSource> = (0..threads)
            .map(|_| AfPacketSource {
                taps: Vec::new(),
                interfaces: Vec::new(),
                pollfds: Vec::new(),
                remaining: remaining.clone(),
                description: String::new(),
                block_timeout: Duration::from_millis(u64::from(cfg.block_timeout_ms)),
            })
            .collect();
        for name in &cfg.interfaces {
            if cfg.interfaces.iter().filter(|n| *n == name).count() > 1 {
                return Err(SourceError::Other(format!(
                    "interface {name} is named twice; name each interface once"
                )));
            }
            let mut group: Option<u16> = None;
            let announced_down = Arc::new(AtomicBool::new(false));
            for source in &mut sources {
                let (mut tap, interface) = open_tap(name, cfg)?;
                tap.announced_down = Arc::clone(&announced_down);
                if threads > 1 {
                    group = Some(join_fanout(&tap, group)?);
                }
                source.pollfds.push(libc::pollfd {
                    fd: tap.socket.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                source.taps.push(tap);
                source.interfaces.push(interface);
            }
        }
        for (k, source) in sources.iter_mut().enumerate() {
            source.description = format!(
                "live capture on {}{}{}",
                cfg.interfaces.join(", "),
                cfg.filter
                    .as_deref()
                    .map_or(String::new(), |f| format!(" (filter '{f}')")),
                if threads > 1 {
                    format!(", fanout {} of {threads}", k + 1)
                } else {
                    String::new()
                }
            );
        }
        Ok(sources)
    }

    /// The kernel's statistics per interface, accumulated (this reads them, like
    /// `counters`).
    pub fn kernel_stats(&self) -> Vec<KernelStats> {
        self.taps.iter().map(Tap::read_stats).collect()
    }

    fn exhausted(&self) -> bool {
        self.remaining
            .as_ref()
            .is_some_and(|r| r.load(Ordering::Relaxed) == 0)
    }

    /// Claims up to `n` packets of the shared budget.
    fn claim(&self, n: u64) -> u64 {
        match &self.remaining {
            None => n,
            Some(r) => match r.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                Some(left - left.min(n))
            }) {
                Ok(left) | Err(left) => left.min(n),
            },
        }
    }

    /// Takes every block the kernel has handed over (up to a turn's worth per ring);
    /// returns how many blocks were taken.
    fn drain<K: PacketSink>(&mut self, sink: &mut K) -> usize {
        let mut taken = 0;
        for index in 0..self.taps.len() {
            for _ in 0..BLOCKS_PER_TURN {
                let Some(count) = self.taps[index].ring.ready_packets() else {
                    break;
                };
                // Claim the block's own count, not more: a thread that finds the budget
                // at 0 stops, and must not see it there while another holds a claim it
                // will give back (that ended a thread whose link was down).
                let budget = self.claim(u64::from(count));
                let tap = &mut self.taps[index];
                let iface = index as u32;
                let mut delivered = 0u64;
                tap.ring.take_block(budget, |f| {
                    sink.packet(&Packet {
                        ts_ns: f.ts_ns,
                        iface,
                        orig_len: f.orig_len,
                        flags: PacketFlags::from_pkttype(f.pkttype),
                        data: f.data,
                    });
                    delivered += 1;
                });
                if let Some(r) = &self.remaining {
                    r.fetch_add(budget - delivered, Ordering::Relaxed);
                }
                let tap = &mut self.taps[index];
                tap.delivered += delivered;
                // Packets show the link is back only if it is up: going down retires
                // the block being filled, with packets from before it went down.
                if tap.down && socket::is_up(tap.socket.as_fd(), &tap.name) {
                    tap.came_back();
                }
                taken += 1;
            }
        }
        taken
    }

    /// Waits for any socket to become readable (or report an error).
    fn wait(&mut self) -> Result<(), SourceError> {
        // SAFETY: the array and its length match; the descriptors are owned by `taps`.
        let n = unsafe {
            libc::poll(
                self.pollfds.as_mut_ptr(),
                self.pollfds.len() as libc::nfds_t,
                POLL_WAIT_MS,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(SourceError::Other(format!(
                "poll on the capture sockets: {e}"
            )));
        }
        for (tap, pfd) in self.taps.iter_mut().zip(&self.pollfds) {
            if pfd.revents & libc::POLLERR != 0 {
                tap.socket_error();
            }
        }
        Ok(())
    }
}

impl Tap {
    fn read_stats(&self) -> KernelStats {
        let mut total = self.kernel.get();
        match socket::get_option::<libc::tpacket_stats_v3>(
            self.socket.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            libc::tpacket_stats_v3 {
                tp_packets: 0,
                tp_drops: 0,
                tp_freeze_q_cnt: 0,
            },
        ) {
            Ok(s) => {
                total.packets += u64::from(s.tp_packets);
                total.drops += u64::from(s.tp_drops);
                total.freezes += u64::from(s.tp_freeze_q_cnt);
                self.kernel.set(total);
            }
            Err(e) => tracing::warn!("{}: cannot read PACKET_STATISTICS: {e}", self.name),
        }
        total
    }

    /// Reads and clears the socket's pending error. An interface going down (or away)
    /// sets ENETDOWN; capture goes on and resumes when it comes back.
    fn socket_error(&mut self) {
        let err = socket::get_option::<libc::c_int>(
            self.socket.as_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            0,
        )
        .unwrap_or(0);
        match err {
            0 => {}
            libc::ENETDOWN => {
                if !self.down {
                    // Another fanout thread may have seen this down and up already: an
                    // error read late, on a link that is up again, is not a new episode.
                    if socket::is_up(self.socket.as_fd(), &self.name) {
                        tracing::debug!("{}: a stale ENETDOWN on a link that is up", self.name);
                        return;
                    }
                    if !self.announced_down.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "interface {} went down; capture continues and resumes when it is up again",
                            self.name
                        );
                    }
                    self.down = true;
                    self.last_down_check = Instant::now();
                }
            }
            e => tracing::warn!(
                "capture socket on {}: {}",
                self.name,
                io::Error::from_raw_os_error(e)
            ),
        }
    }

    fn came_back(&mut self) {
        if self.announced_down.swap(false, Ordering::Relaxed) {
            tracing::info!("interface {} is up again; capturing", self.name);
        }
        self.down = false;
    }

    /// While down, looks every second whether the interface is back (or gone for good).
    fn check_down(&mut self) {
        if !self.down || self.last_down_check.elapsed() < DOWN_CHECK {
            return;
        }
        self.last_down_check = Instant::now();
        let same_device = socket::ifindex(&self.name).is_ok_and(|i| i == self.ifindex);
        if same_device {
            if socket::is_up(self.socket.as_fd(), &self.name) {
                self.came_back();
            }
        } else if !self.removed {
            // The kernel unbinds a socket whose device is unregistered; a new device of
            // the same name is another device.
            tracing::warn!(
                "interface {} was removed; its capture stays idle (restart tapdeck to capture a new {})",
                self.name,
                self.name
            );
            self.removed = true;
        }
    }
}

/// Opens, sets up and binds one interface's socket.
fn open_tap(name: &str, cfg: &AfPacketConfig) -> Result<(Tap, Interface), SourceError> {
    let ifindex = socket::ifindex(name)?;
    let fd = socket::packet_socket()?;
    let sock = fd.as_fd();
    let arphrd = socket::hardware_type(sock, name)?;
    let linktype = socket::linktype(name, arphrd)?;
    let snaplen = cfg.snaplen.unwrap_or(DEFAULT_SNAPLEN);
    if snaplen == 0 {
        return Err(SettingError::ZeroSnaplen.into());
    }
    let hw = set_up_socket(name, sock, cfg.filter.as_deref(), linktype, snaplen)?;
    let ring = open_ring(name, sock, cfg, snaplen)?;
    bind(name, sock, ifindex)?;
    if cfg.promiscuous {
        join_promiscuous(name, sock, ifindex)?;
    }
    if arphrd != libc::ARPHRD_LOOPBACK {
        warn_merging_offloads(name, sock);
    }

    let timestamps = if hw.enabled {
        "hardware timestamps (the NIC's clock)"
    } else {
        "software timestamps (the kernel's clock)"
    };
    let interface = Interface {
        linktype,
        snaplen,
        name: Some(name.to_string()),
        description: Some(format!("AF_PACKET TPACKET_V3 on {name}, {timestamps}")),
    };
    let tap = Tap {
        name: name.to_string(),
        ifindex,
        socket: fd,
        ring,
        delivered: 0,
        kernel: Cell::new(KernelStats::default()),
        down: false,
        announced_down: Arc::new(AtomicBool::new(false)),
        last_down_check: Instant::now(),
        removed: false,
    };
    Ok((tap, interface))
}

/// A socket option of `name`'s socket that must take, or an error naming it.
fn setup(name: &str, what: &str, r: io::Result<()>) -> Result<(), SourceError> {
    r.map_err(|e| SourceError::Other(format!("{name}: cannot set {what}: {e}")))
}

/// What the ring needs before it is mapped: TPACKET_V3, room for a VLAN tag before each
/// frame, hardware timestamps where the NIC offers them, and the capture filter.
fn set_up_socket(
    name: &str,
    sock: BorrowedFd<'_>,
    filter: Option<&str>,
    linktype: u16,
    snaplen: u32,
) -> Result<socket::HardwareTimestamps, SourceError> {
    setup(
        name,
        "TPACKET_V3",
        socket::set_option(
            sock,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &(libc::tpacket_versions::TPACKET_V3 as libc::c_int),
        ),
    )?;
    setup(
        name,
        "PACKET_RESERVE",
        socket::set_option(
            sock,
            libc::SOL_PACKET,
            libc::PACKET_RESERVE,
            &ring::VLAN_RESERVE,
        ),
    )?;
    let hw = socket::hardware_timestamps(sock, name);
    if hw.offered {
        // Best effort: the kernel falls back to its own clock for any packet the NIC did
        // not stamp.
        if let Err(e) = socket::set_option(
            sock,
            libc::SOL_PACKET,
            libc::PACKET_TIMESTAMP,
            &(libc::SOF_TIMESTAMPING_RAW_HARDWARE as libc::c_int),
        ) {
            tracing::warn!("{name}: hardware timestamps refused ({e}); using the kernel's clock");
        }
    }
    if let Some(filter) = bpf::build(filter, linktype, snaplen)? {
        let prog = libc::sock_fprog {
            len: filter.insns.len() as u16,
            filter: filter.insns.as_ptr() as *mut libc::sock_filter,
        };
        // The kernel copies the program during the call; `filter` outlives it.
        setup(
            name,
            "the capture filter",
            socket::set_option(sock, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog),
        )?;
    }
    Ok(hw)
}

/// Binds the socket to the interface, all protocols.
fn bind(name: &str, sock: BorrowedFd<'_>, ifindex: i32) -> Result<(), SourceError> {
    let addr = libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as u16,
        sll_protocol: (libc::ETH_P_ALL as u16).to_be(),
        sll_ifindex: ifindex,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    };
    // SAFETY: passes a sockaddr_ll and its exact size.
    let r = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(SourceError::Other(format!("cannot bind to {name}: {e}")));
    }
    Ok(())
}

fn join_promiscuous(name: &str, sock: BorrowedFd<'_>, ifindex: i32) -> Result<(), SourceError> {
    let mreq = libc::packet_mreq {
        mr_ifindex: ifindex,
        mr_type: libc::PACKET_MR_PROMISC as u16,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    setup(
        name,
        "promiscuous mode",
        socket::set_option(sock, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq),
    )
}

/// GRO/LRO on a capture interface: the kernel merges received segments, so the stored
/// frames never crossed the wire as such. Said once, with the command that turns them off.
fn warn_merging_offloads(name: &str, sock: BorrowedFd<'_>) {
    let on = socket::merging_offloads(sock, name);
    if !on.is_empty() {
        tracing::warn!(
            "{name} has {} on: the kernel merges received segments, so stored frames may \
             never have crossed the wire; turn it off with `ethtool -K {name} {}`",
            on.join(" and "),
            on.iter()
                .map(|o| format!("{o} off"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}

/// Sets up and maps the receive ring, or says which option to change.
fn open_ring(
    name: &str,
    sock: BorrowedFd<'_>,
    cfg: &AfPacketConfig,
    snaplen: u32,
) -> Result<Ring, SourceError> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u32;
    let (block, blocks, frame) = (cfg.block_size, cfg.blocks, cfg.frame_size);
    if block == 0 || block % page != 0 || frame == 0 || block % frame != 0 || blocks == 0 {
        return Err(SettingError::RingGeometry { block, page, frame }.into());
    }
    let frames_per_block = block / frame;
    let Some(frame_nr) = frames_per_block.checked_mul(blocks) else {
        return Err(SettingError::RingTooLarge { blocks, block }.into());
    };
    let total = u64::from(block) * u64::from(blocks);
    // The kernel grants what it can, up to all of memory: refuse a likely typo instead.
    // SAFETY: sysconf has no preconditions.
    let ram = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) }.max(0) as u64 * u64::from(page);
    if total > ram / 2 {
        return Err(SettingError::RingOverHalfMemory {
            iface: name.to_string(),
            blocks,
            block,
            bytes: total,
        }
        .into());
    }
    let req = libc::tpacket_req3 {
        tp_block_size: block,
        tp_block_nr: blocks,
        tp_frame_size: frame,
        tp_frame_nr: frame_nr,
        tp_retire_blk_tov: cfg.block_timeout_ms,
        tp_sizeof_priv: 0,
        tp_feature_req_word: 0,
    };
    let too_big = |cause: io::Error| -> SourceError {
        SettingError::RingAlloc {
            iface: name.to_string(),
            blocks,
            block,
            bytes: total,
            cause,
        }
        .into()
    };
    socket::set_option(sock, libc::SOL_PACKET, libc::PACKET_RX_RING, &req).map_err(|e| match e
        .raw_os_error()
    {
        Some(libc::ENOMEM | libc::ENOBUFS) => too_big(e),
        _ => SettingError::RingRefused {
            iface: name.to_string(),
            blocks,
            block,
            cause: e,
        }
        .into(),
    })?;
    Ring::map(sock, block as usize, blocks as usize, snaplen).map_err(too_big)
}

/// Joins the fanout group of this interface (creating it, with an id the kernel picks so
/// no other process's group is joined by accident, when `group` is `None`).
fn join_fanout(tap: &Tap, group: Option<u16>) -> Result<u16, SourceError> {
    let mode = libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_DEFRAG;
    let (id, flags) = match group {
        Some(id) => (id, mode),
        None => (0, mode | libc::PACKET_FANOUT_FLAG_UNIQUEID),
    };
    let arg: u32 = u32::from(id) | (flags << 16);
    let sock = tap.socket.as_fd();
    socket::set_option(sock, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg).map_err(|cause| {
        SettingError::Fanout {
            iface: tap.name.clone(),
            cause,
        }
    })?;
    // Reading the option back gives the group's id in the low 16 bits.
    let got = socket::get_option(sock, libc::SOL_PACKET, libc::PACKET_FANOUT, 0u32)
        .map_err(|e| SourceError::Other(format!("{}: PACKET_FANOUT: {e}", tap.name)))?;
    Ok(got as u16)
}

impl PacketSource for AfPacketSource {
    fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    fn poll<K: PacketSink>(&mut self, sink: &mut K) -> Result<Poll, SourceError> {
        if self.exhausted() {
            return Ok(Poll::End);
        }
        let mut taken = self.drain(sink);
        if taken == 0 {
            self.wait()?;
            taken = self.drain(sink);
        }
        for tap in &mut self.taps {
            tap.check_down();
        }
        Ok(if self.exhausted() {
            Poll::End
        } else if taken > 0 {
            Poll::Delivered
        } else {
            Poll::Idle
        })
    }

    /// `seen` = packets delivered + `tp_drops`. The kernel's `tp_packets` also counts
    /// packets already in the ring but not yet read; those are counted once they are
    /// delivered, so that seen = delivered + dropped holds exactly at every call, and
    /// equals `tp_packets` whenever the ring is empty.
    fn counters(&self) -> Vec<SourceCounters> {
        self.taps
            .iter()
            .map(|tap| {
                let k = tap.read_stats();
                SourceCounters {
                    seen: tap.delivered + k.drops,
                    dropped: k.drops,
                    freezes: k.freezes,
                }
            })
            .collect()
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    /// The ring; a block's timeout, and time for the kernel's timer and the poll to see it.
    fn buffers_unread(&self) -> Option<Duration> {
        Some(self.block_timeout + Duration::from_millis(50))
    }
}

/// The user id and group id of `user` (from the password database).
pub fn lookup_user(user: &str) -> Result<(u32, u32), SourceError> {
    let c = CString::new(user).map_err(|_| SettingError::NotAUserName {
        user: user.to_string(),
    })?;
    // SAFETY: passwd is plain old data (integers and pointers): all zeros is a valid value.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0u8; 16 << 10];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwnam_r writes into `pwd` and `buf` (of the given length) only; `found`
    // points at `pwd` or is null.
    let r = unsafe {
        libc::getpwnam_r(
            c.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if found.is_null() {
        let why = if r == 0 {
            "no such user (see /etc/passwd)".to_string()
        } else {
            io::Error::from_raw_os_error(r).to_string()
        };
        return Err(SettingError::NoSuchUser {
            user: user.to_string(),
            why,
        }
        .into());
    }
    Ok((pwd.pw_uid, pwd.pw_gid))
}

/// Drops root privileges for good: switches to `user`'s uid, gid and only group. Call it
/// once every socket is open and every ring mapped; the descriptors stay usable.
pub fn drop_privileges(user: &str) -> Result<(), SourceError> {
    let (uid, gid) = lookup_user(user)?;
    let fail = |what: &'static str| -> SourceError {
        SettingError::SwitchUser {
            user: user.to_string(),
            what,
            cause: io::Error::last_os_error(),
        }
        .into()
    };
    // SAFETY: plain credential calls; glibc applies them to every thread of the process.
    unsafe {
        if libc::setgroups(1, &gid) != 0 {
            return Err(fail("set the supplementary groups"));
        }
        if libc::setgid(gid) != 0 {
            return Err(fail("set the group id"));
        }
        if libc::setuid(uid) != 0 {
            return Err(fail("set the user id"));
        }
        if uid != 0 && libc::setuid(0) == 0 {
            return Err(SettingError::RootRegainable {
                user: user.to_string(),
            }
            .into());
        }
    }
    tracing::info!("now running as {user} (uid {uid}, gid {gid})");
    Ok(())
}
