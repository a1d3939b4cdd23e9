//! The system calls that set up one AF_PACKET socket, each failure turned into a one-line
//! message saying what is wrong and what to do.

use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::SourceError;

/// linux/sockios.h: not all of these are in the `libc` crate.
const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
const SIOCGIFHWADDR: libc::c_ulong = 0x8927;
const SIOCETHTOOL: libc::c_ulong = 0x8946;
const SIOCGHWTSTAMP: libc::c_ulong = 0x89b1;
/// linux/ethtool.h commands.
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_GET_TS_INFO: u32 = 0x41;
const ETH_FLAG_LRO: u32 = 1 << 15;
/// linux/net_tstamp.h: `hwtstamp_config.rx_filter` value for "no receive timestamps".
const HWTSTAMP_FILTER_NONE: i32 = 0;

/// linux/ethtool.h `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// linux/ethtool.h `struct ethtool_ts_info`.
#[repr(C)]
#[derive(Default)]
struct EthtoolTsInfo {
    cmd: u32,
    so_timestamping: u32,
    phc_index: i32,
    tx_types: u32,
    tx_reserved: [u32; 3],
    rx_filters: u32,
    rx_reserved: [u32; 3],
}

/// linux/net_tstamp.h `struct hwtstamp_config`.
#[repr(C)]
#[derive(Default)]
struct HwtstampConfig {
    flags: i32,
    tx_type: i32,
    rx_filter: i32,
}

pub const NEEDS_CAP_NET_RAW: &str = "capturing needs CAP_NET_RAW: run as root or \
`setcap cap_net_raw,cap_net_admin=eip $(which tapdeck)`";

fn io_err(what: String, e: io::Error) -> SourceError {
    SourceError::Other(format!("{what}: {e}"))
}

/// The interface's index, or the message for a missing one.
pub fn ifindex(name: &str) -> Result<i32, SourceError> {
    let missing = || SourceError::Other(format!("no interface named {name} (see `ip link`)"));
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(missing());
    }
    let c = CString::new(name).map_err(|_| missing())?;
    // SAFETY: a NUL-terminated string that outlives the call.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(missing()),
        i => Ok(i as i32),
    }
}

/// A packet socket that receives nothing until it is bound, so that the ring and the filter
/// are in place before the first packet arrives.
pub fn packet_socket() -> Result<OwnedFd, SourceError> {
    // SAFETY: plain socket(2); the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => SourceError::Other(NEEDS_CAP_NET_RAW.into()),
            _ => io_err("cannot open an AF_PACKET socket".into(), e),
        });
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// setsockopt(2) with a value of type `T`.
pub fn set_option<T>(fd: BorrowedFd<'_>, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: passes a pointer to `value` and its exact size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// getsockopt(2) into `value` (plain old data the kernel overwrites), returned.
pub fn get_option<T: Copy>(
    fd: BorrowedFd<'_>,
    level: i32,
    name: i32,
    mut value: T,
) -> io::Result<T> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `value`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut T).cast(),
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(value)
    }
}

/// An `ifreq` naming `name`, with `data` pointing at an ioctl's argument if given.
fn ifreq(name: &str, data: *mut libc::c_char) -> libc::ifreq {
    // SAFETY: ifreq is plain old data; all zeros is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_data = data;
    req
}

fn ioctl(fd: BorrowedFd<'_>, request: libc::c_ulong, req: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: every request used here takes a `struct ifreq *`, whose data pointer (if any)
    // points at a live, correctly sized struct owned by the caller.
    if unsafe { libc::ioctl(fd.as_raw_fd(), request as _, req as *mut libc::ifreq) } < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The interface's ARPHRD_* hardware type.
pub fn hardware_type(fd: BorrowedFd<'_>, name: &str) -> Result<u16, SourceError> {
    let mut req = ifreq(name, std::ptr::null_mut());
    ioctl(fd, SIOCGIFHWADDR, &mut req)
        .map_err(|e| io_err(format!("cannot read the link type of {name}"), e))?;
    // SAFETY: SIOCGIFHWADDR fills the hwaddr member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_hwaddr.sa_family })
}

/// The pcap LINKTYPE for an ARPHRD_* type, as libpcap maps the ones we support.
pub fn linktype(name: &str, arphrd: u16) -> Result<u16, SourceError> {
    match arphrd {
        // The kernel gives loopback frames an Ethernet header (zero addresses).
        libc::ARPHRD_ETHER | libc::ARPHRD_LOOPBACK => Ok(1),
        // Tunnels without a link header (tun, wireguard): raw IP.
        libc::ARPHRD_NONE => Ok(101),
        other => Err(SourceError::Other(format!(
            "{name} has link type ARPHRD {other}, which tapdeck cannot capture yet \
             (Ethernet, loopback and raw-IP tunnels are supported)"
        ))),
    }
}

/// Whether the interface is administratively up.
pub fn is_up(fd: BorrowedFd<'_>, name: &str) -> bool {
    let mut req = ifreq(name, std::ptr::null_mut());
    // SAFETY: SIOCGIFFLAGS fills the flags member of the union.
    ioctl(fd, SIOCGIFFLAGS, &mut req).is_ok()
        && unsafe { req.ifr_ifru.ifru_flags } & libc::IFF_UP as libc::c_short != 0
}

fn ethtool_value(fd: BorrowedFd<'_>, name: &str, cmd: u32) -> Option<u32> {
    let mut value = EthtoolValue { cmd, data: 0 };
    let mut req = ifreq(name, (&mut value as *mut EthtoolValue).cast());
    ioctl(fd, SIOCETHTOOL, &mut req).ok()?;
    Some(value.data)
}

/// Receive offloads that merge segments, named as `ethtool -k` names them.
pub fn merging_offloads(fd: BorrowedFd<'_>, name: &str) -> Vec<&'static str> {
    let mut on = Vec::new();
    if ethtool_value(fd, name, ETHTOOL_GGRO).is_some_and(|v| v != 0) {
        on.push("gro");
    }
    if ethtool_value(fd, name, ETHTOOL_GFLAGS).is_some_and(|v| v & ETH_FLAG_LRO != 0) {
        on.push("lro");
    }
    on
}

/// What the driver can do with receive timestamps.
pub struct HardwareTimestamps {
    /// The driver can stamp packets with the NIC's clock (so PACKET_TIMESTAMP should ask).
    pub offered: bool,
    /// The NIC is stamping received packets now.
    pub enabled: bool,
}

/// Asks the driver about hardware receive timestamps. tapdeck does not switch them on
/// itself (SIOCSHWTSTAMP): that reconfigures the NIC for every other user; whoever runs
/// PTP on the host (`hwstamp_ctl`, ptp4l) does.
pub fn hardware_timestamps(fd: BorrowedFd<'_>, name: &str) -> HardwareTimestamps {
    let mut info = EthtoolTsInfo {
        cmd: ETHTOOL_GET_TS_INFO,
        ..Default::default()
    };
    let mut req = ifreq(name, (&mut info as *mut EthtoolTsInfo).cast());
    let offered = ioctl(fd, SIOCETHTOOL, &mut req).is_ok()
        && info.so_timestamping & libc::SOF_TIMESTAMPING_RAW_HARDWARE != 0;
    let mut config = HwtstampConfig::default();
    let mut req = ifreq(name, (&mut config as *mut HwtstampConfig).cast());
    let enabled = offered
        && ioctl(fd, SIOCGHWTSTAMP, &mut req).is_ok()
        && config.rx_filter != HWTSTAMP_FILTER_NONE;
    HardwareTimestamps { offered, enabled }
}
