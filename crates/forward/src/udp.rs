//! UDP sockets the way forwarding needs them: connected exporter sockets with path MTU
//! discovery, batched sends (`sendmmsg`) and receives (`recvmmsg`), and SO_REUSEPORT
//! collector sockets. Thin wrappers over libc; nothing here knows IPFIX.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

/// IPv4 (20) or IPv6 (40) header plus the UDP header (8).
pub fn ip_udp_overhead(to: &SocketAddr) -> usize {
    if to.is_ipv4() {
        28
    } else {
        48
    }
}

/// The largest UDP payload an IPv4 datagram holds.
pub const MAX_UDP_PAYLOAD: usize = 65_507;

fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a c_int and its exact size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn get_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `value`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(value)
    }
}

/// A UDP socket connected to `to`, with the Don't Fragment bit set (path MTU discovery):
/// a message sized to the path never travels as fragments, and a connected socket hears
/// the collector's ICMP errors (ECONNREFUSED on a later send). IP_RECVERR makes it hear
/// every ICMP error: without it Linux reports only "hard" ones (port unreachable), not the
/// host or network unreachable a router sends for a collector it cannot reach. (It also
/// keeps a copy of each error in the socket's error queue, never read: the kernel stops
/// queueing when the receive buffer is full, and still reports each error. Reading the
/// queue would clear the pending error.)
pub fn connect(to: SocketAddr) -> io::Result<UdpSocket> {
    let any: SocketAddr = if to.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(any)?;
    s.connect(to)?;
    let fd = s.as_raw_fd();
    if to.is_ipv4() {
        set_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?;
        set_int(fd, libc::IPPROTO_IP, libc::IP_RECVERR, 1)?;
    } else {
        set_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?;
        set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 1)?;
    }
    // A deep send queue absorbs a burst of batches; best effort (capped by wmem_max).
    let _ = set_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
    Ok(s)
}

/// The path MTU the kernel knows for a connected socket (the route's MTU until an ICMP
/// "fragmentation needed" lowers it).
pub fn path_mtu(s: &UdpSocket, to: &SocketAddr) -> io::Result<usize> {
    let mtu = if to.is_ipv4() {
        get_int(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU)?
    } else {
        get_int(s.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_MTU)?
    };
    Ok(mtu.max(0) as usize)
}

/// Linux's UDP_SEGMENT socket/cmsg option (UDP GSO, since 4.18; not in the libc crate for
/// glibc targets).
const UDP_SEGMENT: libc::c_int = 103;
/// Most segments the kernel takes in one GSO send (UDP_MAX_SEGMENTS).
const MAX_SEGMENTS: usize = 64;
/// Most bytes in one GSO send: one IP datagram's worth before segmentation.
const MAX_GSO_BYTES: usize = 65_000;

/// Runs of messages that can go as one GSO send: all of one length but the last, which may
/// be shorter (the kernel cuts the buffer into segments of the first's length). Returns
/// the length of each run.
fn gso_runs(messages: &[&[u8]]) -> Vec<usize> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        let seg = messages[i].len();
        let cap = MAX_SEGMENTS.min(MAX_GSO_BYTES / seg.max(1)).max(1);
        let mut n = 1;
        while n < cap && i + n < messages.len() && messages[i + n].len() <= seg {
            let last = messages[i + n].len() < seg;
            n += 1;
            if last {
                break;
            }
        }
        runs.push(n);
        i += n;
    }
    runs
}

/// Sends `messages` as one datagram each with `sendmmsg`, as many per call as the kernel
/// takes. With `gso`, runs of equal-length messages go as one buffer that the kernel cuts
/// into datagrams (UDP GSO): one trip down the stack for up to 64 datagrams instead of one
/// each, which is most of an exporter's CPU. The receiver sees the same datagrams either
/// way. Returns how many messages went out, and the error that stopped the rest (if any).
pub fn send_batch(s: &UdpSocket, messages: &[&[u8]], gso: bool) -> (usize, Option<io::Error>) {
    let mut iovs: Vec<libc::iovec> = messages
        .iter()
        .map(|m| libc::iovec {
            iov_base: m.as_ptr() as *mut libc::c_void,
            iov_len: m.len(),
        })
        .collect();
    let runs = if gso {
        gso_runs(messages)
    } else {
        vec![1; messages.len()]
    };
    // One control buffer per run: a cmsghdr and the u16 segment size, 8-aligned.
    let mut controls: Vec<[u64; 4]> = vec![[0; 4]; runs.len()];
    let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(runs.len());
    let mut at = 0;
    for (run, control) in runs.iter().zip(controls.iter_mut()) {
        // SAFETY: an all-zero mmsghdr is a valid empty header.
        let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
        h.msg_hdr.msg_iov = iovs[at..].as_mut_ptr();
        h.msg_hdr.msg_iovlen = *run;
        if *run > 1 {
            let seg = messages[at].len() as u16;
            // SAFETY: CMSG_SPACE(2) is 24 bytes, within the 32-byte buffer; the macros
            // compute offsets inside it.
            unsafe {
                let space = libc::CMSG_SPACE(2) as usize;
                h.msg_hdr.msg_control = control.as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = space;
                let c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
            }
        }
        hdrs.push(h);
        at += run;
    }
    let mut sent_hdrs = 0;
    let mut sent = 0;
    while sent_hdrs < hdrs.len() {
        // SAFETY: the headers point at iovecs, control buffers and message buffers that
        // outlive the call.
        let r = unsafe {
            libc::sendmmsg(
                s.as_raw_fd(),
                hdrs[sent_hdrs..].as_mut_ptr(),
                (hdrs.len() - sent_hdrs) as libc::c_uint,
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return (sent, Some(e));
        }
        if r == 0 {
            return (sent, Some(io::Error::other("sendmmsg sent nothing")));
        }
        sent += runs[sent_hdrs..sent_hdrs + r as usize]
            .iter()
            .sum::<usize>();
        sent_hdrs += r as usize;
    }
    (sent, None)
}

/// Whether this kernel and route take UDP GSO sends: a zero-length probe is not possible,
/// so it asks for the socket option, which kernels without UDP GSO refuse.
pub fn gso_supported(s: &UdpSocket) -> bool {
    get_int(s.as_raw_fd(), libc::SOL_UDP, UDP_SEGMENT).is_ok()
}

/// Binds a UDP socket with SO_REUSEPORT, so several sockets share `addr` and the kernel
/// spreads exporters over them by their addresses and ports (one exporter session always
/// reaches the same socket).
pub fn bind_reuseport(addr: SocketAddr) -> io::Result<UdpSocket> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket creation; the descriptor is owned by the UdpSocket below.
    let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket nobody else owns.
    let s = unsafe { UdpSocket::from_raw_fd(fd) };
    set_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    // Room for bursts while the capture loop is busy; FORCE (root) passes rmem_max.
    if set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 16 << 20).is_err() {
        let _ = set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 16 << 20);
    }
    let (ss, len) = to_sockaddr(&addr);
    // SAFETY: `ss` holds a sockaddr of the family and length given.
    let r = unsafe { libc::bind(fd, (&ss as *const libc::sockaddr_storage).cast(), len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(s)
}

fn to_sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn from_sockaddr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            // An IPv4 exporter reaching a dual-stack socket is named by its IPv4 address.
            let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
            Some(SocketAddr::new(ip, u16::from_be(sin6.sin6_port)))
        }
        _ => None,
    }
}

/// Waits up to `timeout_ms` for `s` to be readable; false on timeout (or a signal).
pub fn wait_readable(s: &UdpSocket, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, passed with its count.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    n > 0
}

/// Buffers for one `recvmmsg` call: the datagrams, their lengths and senders.
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    addrs: Vec<libc::sockaddr_storage>,
    lens: Vec<usize>,
    truncated: Vec<bool>,
    peers: Vec<Option<SocketAddr>>,
}

/// One datagram of a [`RecvBatch`].
pub struct Datagram<'a> {
    pub peer: Option<SocketAddr>,
    pub bytes: &'a [u8],
    /// Longer than the buffer: the kernel cut it.
    pub truncated: bool,
}

impl RecvBatch {
    /// Room for `count` datagrams of up to `size` bytes each.
    pub fn new(count: usize, size: usize) -> RecvBatch {
        RecvBatch {
            bufs: (0..count).map(|_| vec![0u8; size]).collect(),
            // SAFETY: an all-zero sockaddr_storage is valid.
            addrs: (0..count).map(|_| unsafe { std::mem::zeroed() }).collect(),
            lens: vec![0; count],
            truncated: vec![false; count],
            peers: vec![None; count],
        }
    }

    /// Receives what is queued now (up to the batch size) without waiting; returns how
    /// many datagrams arrived.
    pub fn recv(&mut self, s: &UdpSocket) -> io::Result<usize> {
        let n = self.bufs.len();
        let mut iovs: Vec<libc::iovec> = self
            .bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(n);
        for (iov, addr) in iovs.iter_mut().zip(self.addrs.iter_mut()) {
            // SAFETY: an all-zero mmsghdr is a valid empty header.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_name = (addr as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            hdrs.push(h);
        }
        // SAFETY: every header points at a buffer and an address we own, of the sizes given.
        let r = unsafe {
            libc::recvmmsg(
                s.as_raw_fd(),
                hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                // A connected peer's ICMP error; a listening socket has none to act on.
                io::ErrorKind::ConnectionRefused => Ok(0),
                _ => Err(e),
            };
        }
        let got = r as usize;
        for (i, h) in hdrs.iter().enumerate().take(got) {
            self.lens[i] = h.msg_len as usize;
            self.truncated[i] = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            self.peers[i] = from_sockaddr(&self.addrs[i]);
        }
        Ok(got)
    }

    /// Datagram `i` of the last `recv`.
    pub fn get(&self, i: usize) -> Datagram<'_> {
        Datagram {
            peer: self.peers[i],
            bytes: &self.bufs[i][..self.lens[i].min(self.bufs[i].len())],
            truncated: self.truncated[i],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gso_runs_group_equal_lengths_and_end_on_a_shorter_one() {
        let m = |n: usize| vec![0u8; n];
        let msgs = [
            m(100),
            m(100),
            m(100),
            m(60),
            m(100),
            m(120),
            m(120),
            m(2000),
        ];
        let refs: Vec<&[u8]> = msgs.iter().map(|v| v.as_slice()).collect();
        // 100,100,100 then the shorter 60 closes the run; a longer one starts a new run.
        assert_eq!(gso_runs(&refs), [4, 1, 2, 1]);
        let big = vec![m(1472); 100];
        let refs: Vec<&[u8]> = big.iter().map(|v| v.as_slice()).collect();
        // 65 000 / 1472 = 44 segments per send at most.
        assert_eq!(gso_runs(&refs), [44, 44, 12]);
        assert_eq!(gso_runs(&[]), Vec::<usize>::new());
    }

    #[test]
    fn sockaddr_round_trip() {
        for a in [
            "198.18.0.1:4739".parse::<SocketAddr>().unwrap(),
            "[2001:db8::1]:4739".parse().unwrap(),
        ] {
            let (ss, _) = to_sockaddr(&a);
            assert_eq!(from_sockaddr(&ss), Some(a));
        }
    }

    #[test]
    fn batch_over_loopback() {
        let rx = bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = rx.local_addr().unwrap();
        let tx = connect(to).unwrap();
        assert!(path_mtu(&tx, &to).unwrap() >= 1280);
        // With GSO: a run of three 40s closed by a 25, then a 50 on its own.
        let lens = [40, 40, 40, 25, 50];
        let msgs: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; lens[i as usize]]).collect();
        let refs: Vec<&[u8]> = msgs.iter().map(|m| m.as_slice()).collect();
        assert_eq!(gso_runs(&refs), [4, 1]);
        let (sent, err) = send_batch(&tx, &refs, gso_supported(&tx));
        assert_eq!((sent, err.is_none()), (5, true));
        let mut batch = RecvBatch::new(8, 2048);
        let mut got = Vec::new();
        for _ in 0..50 {
            if got.len() == 5 {
                break;
            }
            wait_readable(&rx, 100);
            let n = batch.recv(&rx).unwrap();
            for i in 0..n {
                let d = batch.get(i);
                assert_eq!(d.peer, Some(tx.local_addr().unwrap()));
                assert!(!d.truncated);
                got.push(d.bytes.to_vec());
            }
        }
        assert_eq!(got, msgs);
    }
}
