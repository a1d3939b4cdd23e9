//! A test network: veth pairs whose inside ends sit in a network namespace this helper
//! creates (and removes when dropped), and raw packet sockets that send exact frames from
//! either end. Addresses come from the benchmarking range 198.18.0.0/15 only.
//!
//! Shared by the capture crate's tests and the CLI's (through `#[path]`).
#![allow(dead_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// Why a test cannot run here, or `None` if it can.
pub fn cannot_run() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces, veth pairs, raw sockets)".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("needs the `ip` command (iproute2)".into());
    }
    None
}

/// Skips the calling test (returns from it) with a message when it cannot run here.
#[macro_export]
macro_rules! require_root {
    () => {
        if let Some(why) = netns::cannot_run() {
            eprintln!("skipping: {why}");
            return;
        }
    };
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub struct TestNet {
    pub ns: String,
    /// (outside end in our namespace, inside end in `ns`) per pair.
    pub pairs: Vec<(String, String)>,
}

impl TestNet {
    /// Creates a namespace and `pairs` veth pairs, all up, with IPv6 off (so nothing but
    /// the test's own frames crosses them) and GRO off on the outside ends.
    pub fn new(pairs: usize) -> TestNet {
        let tag = format!(
            "{:06x}",
            (SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
                ^ std::process::id().rotate_left(20))
                & 0xff_ffff
        );
        let ns = format!("tdtest-{tag}");
        ip(&["netns", "add", &ns]);
        let mut net = TestNet {
            ns: ns.clone(),
            pairs: Vec::new(),
        };
        for p in 0..pairs {
            let outside = format!("td{tag}{p}o");
            let inside = format!("td{tag}{p}i");
            ip(&[
                "link", "add", &outside, "type", "veth", "peer", "name", &inside, "netns", &ns,
            ]);
            net.pairs.push((outside.clone(), inside.clone()));
            let _ = std::fs::write(
                format!("/proc/sys/net/ipv6/conf/{outside}/disable_ipv6"),
                "1",
            );
            let _ = Command::new("ip")
                .args(["netns", "exec", &ns, "sysctl", "-qw"])
                .arg(format!("net.ipv6.conf.{inside}.disable_ipv6=1"))
                .output();
            set_gro(&outside, false).expect("turn GRO off");
            ip(&["link", "set", &outside, "up"]);
            ip(&["-n", &ns, "link", "set", &inside, "up"]);
        }
        for (outside, _) in &net.pairs {
            wait_up(outside);
        }
        net
    }

    pub fn outside(&self, pair: usize) -> &str {
        &self.pairs[pair].0
    }

    /// A raw socket sending out of the inside end: its frames arrive on the outside end.
    pub fn sender_inside(&self, pair: usize) -> RawSender {
        let ns = self.ns.clone();
        let inside = self.pairs[pair].1.clone();
        std::thread::spawn(move || {
            let f = std::fs::File::open(format!("/run/netns/{ns}")).expect("open netns");
            // SAFETY: moves only this short-lived thread into the namespace.
            let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", io::Error::last_os_error());
            RawSender::open(&inside)
        })
        .join()
        .unwrap()
    }

    /// A raw socket sending out of the outside end: captured there as outgoing frames.
    pub fn sender_outside(&self, pair: usize) -> RawSender {
        RawSender::open(&self.pairs[pair].0)
    }

    pub fn set_link(&self, pair: usize, up: bool) {
        ip(&[
            "link",
            "set",
            &self.pairs[pair].0,
            if up { "up" } else { "down" },
        ]);
        if up {
            wait_up(&self.pairs[pair].0);
        }
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        for (outside, _) in &self.pairs {
            let _ = Command::new("ip").args(["link", "del", outside]).output();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

fn wait_up(name: &str) {
    for _ in 0..200 {
        let state =
            std::fs::read_to_string(format!("/sys/class/net/{name}/operstate")).unwrap_or_default();
        if state.trim() == "up" {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{name} did not come up");
}

/// `ethtool -K IF gro on|off`, without needing ethtool installed.
pub fn set_gro(name: &str, on: bool) -> io::Result<()> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_SGRO: u32 = 0x2c;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let mut value = EthtoolValue {
        cmd: ETHTOOL_SGRO,
        data: u32::from(on),
    };
    // SAFETY: a datagram socket for the ioctl, owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL with a live ethtool_value.
    if unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A raw AF_PACKET socket bound to one interface, sending frames exactly as given.
pub struct RawSender {
    fd: OwnedFd,
}

impl RawSender {
    fn open(name: &str) -> RawSender {
        // SAFETY: plain socket(2), owned below; protocol 0 receives nothing.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
        // SAFETY: fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let cname = std::ffi::CString::new(name).unwrap();
        // SAFETY: NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) } as i32;
        assert!(ifindex > 0, "no interface {name}");
        // SAFETY: all-zero sockaddr_ll, then filled in.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = ifindex;
        // SAFETY: a sockaddr_ll and its size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(r, 0, "bind: {}", io::Error::last_os_error());
        RawSender { fd }
    }

    pub fn send(&self, frame: &[u8]) {
        loop {
            // SAFETY: sends from a live slice.
            let r =
                unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
            if r == frame.len() as isize {
                return;
            }
            let e = io::Error::last_os_error();
            // A full device queue: wait a little and try again.
            if e.raw_os_error() == Some(libc::ENOBUFS) || e.kind() == io::ErrorKind::WouldBlock {
                std::thread::sleep(std::time::Duration::from_micros(50));
                continue;
            }
            panic!("send {} bytes: {e}", frame.len());
        }
    }

    /// Sends every frame from one thread pinned to one CPU, so the receiving side's
    /// per-CPU backlog sees them in order.
    pub fn send_all(&self, frames: &[Vec<u8>]) {
        std::thread::scope(|s| {
            s.spawn(|| {
                pin_to_cpu0();
                for f in frames {
                    self.send(f);
                }
            });
        });
    }
}

pub fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t with one CPU set, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Frames for tests: Ethernet from 02:..:01 to 02:..:02.
pub mod frames {
    const ETH: [u8; 12] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];

    fn checksum(b: &[u8]) -> u16 {
        let mut sum: u32 = b
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    /// An IPv4 frame of `len` bytes (at least 14 + 20 + 20) carrying `proto` (17 UDP, 6 TCP)
    /// between 198.18.0.`a` port `sport` and 198.19.0.`b` port `dport`; `seq` makes it unique.
    pub fn ipv4(proto: u8, a: u8, sport: u16, b: u8, dport: u16, len: usize, seq: u32) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[..12].copy_from_slice(&ETH);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip_len = (len - 14) as u16;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&ip_len.to_be_bytes());
        f[18..20].copy_from_slice(&(seq as u16).to_be_bytes());
        f[22] = 64;
        f[23] = proto;
        f[26..30].copy_from_slice(&[198, 18, 0, a]);
        f[30..34].copy_from_slice(&[198, 19, 0, b]);
        let c = checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        match proto {
            17 => f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes()),
            6 => {
                f[38..42].copy_from_slice(&seq.to_be_bytes());
                f[46] = 0x50; // data offset 5 words
                f[47] = if seq % 3 == 0 { 0x02 } else { 0x10 }; // SYN or ACK
                f[48..50].copy_from_slice(&1024u16.to_be_bytes());
            }
            _ => {}
        }
        let tail = if proto == 6 { 54 } else { 42 };
        for (i, b) in f[tail..].iter_mut().enumerate() {
            *b = (seq as usize * 31 + i * 7) as u8;
        }
        if len >= tail + 4 {
            f[tail..tail + 4].copy_from_slice(&seq.to_be_bytes());
        }
        f
    }

    /// The same frame with the reply's addresses and ports swapped.
    pub fn reversed(f: &[u8]) -> Vec<u8> {
        let mut r = f.to_vec();
        r[..6].copy_from_slice(&f[6..12]);
        r[6..12].copy_from_slice(&f[..6]);
        r[26..30].copy_from_slice(&f[30..34]);
        r[30..34].copy_from_slice(&f[26..30]);
        r[34..36].copy_from_slice(&f[36..38]);
        r[36..38].copy_from_slice(&f[34..36]);
        r
    }

    /// An ARP request for 198.19.0.`b`, padded to 60 bytes.
    pub fn arp(b: u8, seq: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].fill(0xff);
        f[6..12].copy_from_slice(&ETH[6..]);
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        f[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f[22..28].copy_from_slice(&ETH[6..]);
        f[28..32].copy_from_slice(&[198, 18, 0, seq]);
        f[38..42].copy_from_slice(&[198, 19, 0, b]);
        f
    }

    /// `f` with an 802.1Q tag (VLAN `vid`) after the MAC addresses.
    pub fn vlan(f: &[u8], vid: u16) -> Vec<u8> {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00]);
        t.extend_from_slice(&vid.to_be_bytes());
        t.extend_from_slice(&f[12..]);
        t
    }
}
