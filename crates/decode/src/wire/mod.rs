//! Typed zero-copy views over the headers [`dissect`](crate::dissect) walks, one file per
//! protocol, each in the same three parts (the smoltcp shape):
//!
//! 1. a private `mod field` of byte ranges that reads like the RFC's header diagram;
//! 2. a view `Xxx<T: AsRef<[u8]>>` over a borrowed buffer, made by `new_checked`, which
//!    checks once that every fixed field is captured, so each accessor is one line over a
//!    field range and cannot go out of bounds;
//! 3. where a header announces its own length (TCP's data offset, an IPv6 extension
//!    header's length) `new_checked` checks that length too. IPv4 is the exception: its
//!    fixed fields are worth having even when the IHL is impossible or cut by the snap
//!    length, so `new_checked` checks the fixed 20 bytes and the accessors that reach past
//!    them ([`Ipv4Packet::options`], [`Ipv4Packet::payload`]) return a [`Result`].
//!
//! The views never copy and never allocate. Errors are [`Error`]: which layer, and whether
//! the bytes were cut short by the capture ([`Error::Truncated`]) or say something
//! impossible ([`Error::Malformed`]).

pub mod ethernet;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod null;
pub mod sll;
pub mod tcp;
pub mod udp;
pub mod vlan;

pub use ethernet::{EtherType, EthernetFrame};
pub use icmp::IcmpPacket;
pub use ipv4::Ipv4Packet;
pub use ipv6::{ExtensionChain, Ipv6ExtHeader, Ipv6FragmentHeader, Ipv6Packet};
pub use null::NullHeader;
pub use sll::{Sll2Header, SllHeader};
pub use tcp::TcpPacket;
pub use udp::UdpPacket;
pub use vlan::VlanTag;

use std::fmt;
use std::ops::Range;

/// Bytes `start..end` of a header.
pub type Field = Range<usize>;

/// The header a view error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Ethernet,
    Vlan,
    Sll,
    Sll2,
    Null,
    Ipv4,
    Ipv6,
    Ipv6Extension,
    Ipv6Fragment,
    Tcp,
    Udp,
    Icmp,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Ethernet => "Ethernet",
            Layer::Vlan => "VLAN tag",
            Layer::Sll => "Linux cooked (SLL)",
            Layer::Sll2 => "Linux cooked v2 (SLL2)",
            Layer::Null => "BSD loopback",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Ipv6Extension => "IPv6 extension header",
            Layer::Ipv6Fragment => "IPv6 fragment header",
            Layer::Tcp => "TCP",
            Layer::Udp => "UDP",
            Layer::Icmp => "ICMP",
        })
    }
}

/// Why a view could not be made, or a variable part of it could not be reached. `Copy` and
/// without heap data: these are made per packet on the recorder's hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The header runs past the captured bytes (snap length, or a cut frame).
    #[error("{layer} header truncated: {need} bytes needed, {have} captured")]
    Truncated {
        layer: Layer,
        need: usize,
        have: usize,
    },
    /// A field says something the protocol does not allow (a version that is not this
    /// header's, a header length under the minimum, …).
    #[error("{layer} header malformed: {field} is {value}")]
    Malformed {
        layer: Layer,
        field: &'static str,
        value: u32,
    },
    /// More stacked headers (VLAN tags, IPv6 extension headers) than any real packet has.
    #[error("{layer}: more than {limit} in a row")]
    TooManyHeaders { layer: Layer, limit: usize },
}

/// Result of the views.
pub type Result<T> = std::result::Result<T, Error>;

/// `Ok` if `buf` holds at least `need` bytes.
#[inline]
fn check_len(layer: Layer, buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(Error::Truncated {
            layer,
            need,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

// Readers over a field range the view has already checked: indexing cannot fail.

#[inline]
fn be16(b: &[u8], f: Field) -> u16 {
    let s = &b[f];
    u16::from_be_bytes([s[0], s[1]])
}

#[inline]
fn be32(b: &[u8], f: Field) -> u32 {
    let s = &b[f];
    u32::from_be_bytes([s[0], s[1], s[2], s[3]])
}

#[inline]
fn array<const N: usize>(b: &[u8], f: Field) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[f]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_layer_and_the_numbers() {
        let e = Error::Truncated {
            layer: Layer::Tcp,
            need: 32,
            have: 20,
        };
        assert_eq!(
            e.to_string(),
            "TCP header truncated: 32 bytes needed, 20 captured"
        );
        let e = Error::Malformed {
            layer: Layer::Ipv4,
            field: "header length",
            value: 16,
        };
        assert_eq!(e.to_string(), "IPv4 header malformed: header length is 16");
        let e = Error::TooManyHeaders {
            layer: Layer::Ipv6Extension,
            limit: 16,
        };
        assert_eq!(
            e.to_string(),
            "IPv6 extension header: more than 16 in a row"
        );
    }
}
