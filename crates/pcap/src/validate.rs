//! Semantic checks that `tapdeck verify` applies on top of the reader's structural ones.
//!
//! The reader accepts anything the format can express; a file can still be wrong in
//! ways that only show across records: a packet longer than it was on the wire, longer
//! than its interface's snap length, or timestamps running backwards. [`Validator`]
//! reports the first such defect. It keeps one timestamp per interface and allocates
//! only when a new interface appears.
//!
//! ```no_run
//! # fn main() -> Result<(), tapdeck_pcap::FormatError> {
//! use tapdeck_pcap::{validate::Validator, TraceReader};
//! let mut reader = TraceReader::new(std::io::stdin().lock())?;
//! let mut validator = Validator::new();
//! while let Some(c) = reader.next_packet_with_context()? {
//!     validator.check(c.interfaces, &c.packet, c.offset)?;
//! }
//! # Ok(()) }
//! ```

use crate::{FormatError, FormatErrorKind, Interface, Packet};

/// Checks packets one by one, in file order, for semantic defects.
#[derive(Debug, Default, Clone)]
pub struct Validator {
    /// Last timestamp per interface; `None` until the interface's first packet.
    last_ts: Vec<Option<u64>>,
    packets: u64,
}

impl Validator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Packets checked so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Checks one packet. `ifaces` is the interface list as the reader knows it when the
    /// packet is returned, and `offset` where the packet's record starts (both lent by
    /// [`crate::TraceReader::next_packet_with_context`]); the offset goes into the error.
    pub fn check(
        &mut self,
        ifaces: &[Interface],
        p: &Packet<'_>,
        offset: u64,
    ) -> Result<(), FormatError> {
        let fail = |msg: String| Err(FormatError::new(offset, FormatErrorKind::Invalid(msg)));
        let i = p.iface as usize;
        let Some(iface) = ifaces.get(i) else {
            return fail(format!(
                "packet names interface {i} but the file describes {}",
                ifaces.len()
            ));
        };
        let caplen = p.data.len();
        if caplen > p.orig_len as usize {
            return fail(format!(
                "packet has {caplen} captured bytes but was only {} bytes long on the wire",
                p.orig_len
            ));
        }
        if iface.snaplen != 0 && caplen > iface.snaplen as usize {
            return fail(format!(
                "packet has {caplen} captured bytes but interface {i} has snap length {}",
                iface.snaplen
            ));
        }
        if self.last_ts.len() <= i {
            // Bounded by the interface list, which the reader checked.
            self.last_ts.resize(i + 1, None);
        }
        if let Some(last) = self.last_ts[i] {
            if p.ts_ns < last {
                return fail(format!(
                    "timestamp on interface {i} goes backwards by {} ns (from {last} to {} ns since 1970)",
                    last - p.ts_ns,
                    p.ts_ns
                ));
            }
        }
        self.last_ts[i] = Some(p.ts_ns);
        self.packets += 1;
        Ok(())
    }
}
