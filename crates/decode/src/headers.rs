//! How much of a frame header-only capture keeps ([`headers_len`]).
//!
//! Rules, in order:
//! 1. A TCP, UDP or ICMP header was parsed: keep through the end of it (IPv4 options, IPv6
//!    extension headers and TCP options included). ICMP counts 8 bytes of header, so the
//!    quoted packet inside an ICMP error is cut.
//! 2. With [`HeaderDepth::Rpc`], when that transport payload starts like an ONC RPC
//!    message (UDP: at byte 0; TCP: after a 4-byte record mark), also keep the RPC header:
//!    for a call through the credentials and verifier, for a reply through the verifier and
//!    the accept status (or the reject details). A header that runs past the frame keeps
//!    the whole frame.
//! 3. IP without a parsed transport header (non-first fragments, other protocols such as
//!    GRE or ESP): keep through the end of the IP header chain, but never less than
//!    [`MIN_KEEP`] bytes (so a tunnel's inner headers partly survive).
//! 4. No IP layer (ARP, STP, unknown link types) or a header cut short by the capture:
//!    keep `min(frame length, NON_IP_KEEP)`.
//!
//! The result never exceeds the frame length. No allocation: the recorder calls this per
//! packet.

use crate::packet::{dissect, Transport};
use crate::rpc_framing::{probe_rpc_header, Probe, Strictness};

/// Floor for IP packets without a transport header we parse.
pub const MIN_KEEP: usize = 64;
/// What is kept of frames that have no IP layer we understand.
pub const NON_IP_KEEP: usize = 128;
/// A TCP payload whose first word is a larger record length is not taken for RPC.
const MAX_PLAUSIBLE_RECORD: u32 = 16 << 20;

/// How deep header-only capture cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderDepth {
    /// Through the TCP/UDP/ICMP header.
    Transport,
    /// Through the ONC RPC header when the payload is RPC, else like `Transport`.
    Rpc,
}

/// Number of leading bytes of `frame` to keep (see the module docs for the rules).
pub fn headers_len(linktype: u32, frame: &[u8], depth: HeaderDepth) -> usize {
    let h = dissect(linktype, frame);
    let len = frame.len();
    if h.truncated || h.ip.is_none() {
        return len.min(NON_IP_KEEP);
    }
    let end = h.transport_end as usize;
    match h.transport {
        Transport::None => (h.network_end as usize).max(MIN_KEEP).min(len),
        Transport::Icmp(_) => end.min(len),
        Transport::Udp(_) | Transport::Tcp(_) if depth == HeaderDepth::Transport => end,
        Transport::Udp(_) => end + rpc_len(h.payload, len - end),
        Transport::Tcp(_) => {
            let p = h.payload;
            let Some(m) = p.get(..4) else {
                return end;
            };
            let l = u32::from_be_bytes([m[0], m[1], m[2], m[3]]) & 0x7fff_ffff;
            if !(12..=MAX_PLAUSIBLE_RECORD).contains(&l) {
                return end;
            }
            match rpc_len(&p[4..], len - end - 4) {
                0 => end,
                r => end + 4 + r,
            }
        }
    }
}

/// Bytes of RPC header at the start of `msg` to keep (0 if it does not look like RPC),
/// clipped to `avail`.
fn rpc_len(msg: &[u8], avail: usize) -> usize {
    match probe_rpc_header(msg, Strictness::Lenient) {
        Probe::Header(hdr) => hdr.header_len.min(avail),
        Probe::Incomplete => avail,
        Probe::NotRpc => 0,
    }
}
