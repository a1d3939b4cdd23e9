//! The IPFIX message layout (RFC 7011 §3): a 16-octet message header, then sets, each with a
//! 4-octet set header.

pub const VERSION: u16 = 10;
pub const HEADER_LEN: usize = 16;
pub const SET_HEADER_LEN: usize = 4;
pub const TEMPLATE_SET_ID: u16 = 2;
pub const OPTIONS_TEMPLATE_SET_ID: u16 = 3;
/// Set ids from here on are data sets (their template's id).
pub const MIN_DATA_SET_ID: u16 = 256;
/// The message length field is 16 bits.
pub const MAX_MESSAGE_LEN: usize = 65535;

/// Byte ranges of the message header.
pub(crate) mod field {
    use std::ops::Range;
    pub const VERSION: Range<usize> = 0..2;
    pub const LENGTH: Range<usize> = 2..4;
    pub const EXPORT_TIME: Range<usize> = 4..8;
    pub const SEQUENCE: Range<usize> = 8..12;
    pub const DOMAIN: Range<usize> = 12..16;
}

/// The message header's meaning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageHeader {
    /// Length of the whole message in octets (set by the builder).
    pub length: u16,
    /// Export time, seconds since 1970 (UTC).
    pub export_time: u32,
    /// Data records sent before this message in this transport session and observation domain,
    /// modulo 2^32.
    pub sequence: u32,
    pub domain: u32,
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// An unsigned integer of 1 to 8 octets (reduced-size encoding, RFC 7011 §6.2).
pub(crate) fn uint(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |v, &x| (v << 8) | x as u64)
}

pub(crate) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Reads the header of a message (no check beyond its 16 octets being there).
pub fn read_header(message: &[u8]) -> Option<MessageHeader> {
    let h = message.get(..HEADER_LEN)?;
    Some(MessageHeader {
        length: u16_at(h, field::LENGTH.start),
        export_time: u32_at(h, field::EXPORT_TIME.start),
        sequence: u32_at(h, field::SEQUENCE.start),
        domain: u32_at(h, field::DOMAIN.start),
    })
}

/// Rewrites the sequence number of a built message. An exporter that builds a batch of
/// messages before sending them (sendmmsg) and learns only then which ones went out can number
/// them at send time, so that records never sent do not look like loss to the collector.
/// Returns false (and changes nothing) if `message` is shorter than a header.
pub fn set_sequence(message: &mut [u8], sequence: u32) -> bool {
    if message.len() < HEADER_LEN {
        return false;
    }
    put_u32(message, field::SEQUENCE.start, sequence);
    true
}
