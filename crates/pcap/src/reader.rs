//! Streaming reader for classic pcap (all magics, both byte orders) and pcapng (every
//! section, both byte orders). TO BE IMPLEMENTED — see the API below.

use std::io::Read;

use crate::{Format, FormatError, Interface, InterfaceStats, Packet};

/// Reads packets from a pcap or pcapng stream, strictly: every structural defect is an
/// error naming its byte offset; nothing panics on hostile input.
pub struct TraceReader<R: Read> {
    _inner: R,
    _format: Format,
    _ifaces: Vec<Interface>,
    _stats: Vec<InterfaceStats>,
}

impl<R: Read> TraceReader<R> {
    /// Reads the file header (pcap header, or the first pcapng section header).
    pub fn new(_inner: R) -> Result<Self, FormatError> {
        unimplemented!()
    }
    pub fn format(&self) -> Format {
        self._format
    }
    /// Every interface seen so far, numbered across sections (the `iface` of a packet).
    pub fn interfaces(&self) -> &[Interface] {
        &self._ifaces
    }
    /// Interface statistics blocks seen so far, `iface` numbered as for packets.
    pub fn stats(&self) -> &[InterfaceStats] {
        &self._stats
    }
    /// Byte offset of the next unread byte.
    pub fn offset(&self) -> u64 {
        0
    }
    /// The next packet, or `None` at a clean end of input.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, FormatError> {
        unimplemented!()
    }
}
