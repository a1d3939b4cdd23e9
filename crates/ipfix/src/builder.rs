//! The exporter side: [`MessageBuilder`] writes one IPFIX message into a caller-provided
//! buffer, never past a size limit (the path MTU minus the IP and UDP headers), without
//! allocating.

use crate::ie::{self, TemplateDef};
use crate::wire::{
    field, put_u16, put_u32, put_u64, MessageHeader, HEADER_LEN, MAX_MESSAGE_LEN,
    OPTIONS_TEMPLATE_SET_ID, SET_HEADER_LEN, TEMPLATE_SET_ID, VERSION,
};
use crate::{time, ExporterStats, InterfaceInfo, PacketReport};

/// Why a record was not added. The message is unchanged either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// No room left: finish this message and start another.
    #[error("the message is full")]
    Full,
    /// The record would not fit even in an empty message of this size limit (cut the frame
    /// section to [`max_section_len`]).
    #[error("record larger than a message of {0} octets can hold")]
    TooLarge(usize),
    #[error("{0} does not fit its field")]
    OutOfRange(&'static str),
}

/// The longest frame section one packet report can carry in a message of `limit` octets.
pub const fn max_section_len(limit: usize) -> usize {
    let limit = if limit > MAX_MESSAGE_LEN {
        MAX_MESSAGE_LEN
    } else {
        limit
    };
    // Header, set header, the fixed fields and a 3-octet variable-length prefix.
    let overhead = HEADER_LEN + SET_HEADER_LEN + ie::LARGE_PACKET_REPORT.fixed_len() + 3;
    limit.saturating_sub(overhead)
}

/// What [`MessageBuilder::finish`] produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Built {
    /// Octets of the message, from the start of the buffer.
    pub len: usize,
    /// Data records in it: what the exporter adds to its sequence number once it is sent.
    pub data_records: u32,
}

/// One IPFIX message being written. Sets are opened and closed as records of another kind
/// arrive, so adding records grouped by kind gives the fewest set headers.
///
/// Packet reports come last, in one data set: once a message holds a packet report, a record
/// of any other set (templates, options records, a report of the other packet template) gets
/// [`BuildError::Full`] and goes into the next message. Wireshark (4.0) looks templates up by
/// the packet's addresses, which its dissection of a dataLinkFrameSection as an Ethernet frame
/// overwrites with the inner frame's, so it finds no template for any set after one of packet
/// reports.
///
/// ```
/// use tapdeck_ipfix::{MessageBuilder, MessageHeader, PacketReport};
/// let mut buf = [0u8; 1472];
/// let header = MessageHeader { export_time: 1_795_392_000, sequence: 0, domain: 1, ..Default::default() };
/// let mut b = MessageBuilder::new(&mut buf, 1472, header).unwrap();
/// b.add_templates().unwrap();
/// let frame = [0u8; 60];
/// b.add_packet_report(&PacketReport { time_ns: 1, interface: 1, selector: 1, frame_size: 60, frame_section: &frame }).unwrap();
/// let built = b.finish();
/// assert_eq!(built.data_records, 1);
/// ```
pub struct MessageBuilder<'a> {
    buf: &'a mut [u8],
    len: usize,
    /// Start offset and id of the open set.
    set: Option<(usize, u16)>,
    /// A packet report set is open: it must stay the last set.
    reports: bool,
    data_records: u32,
}

impl<'a> MessageBuilder<'a> {
    /// Starts a message in `buf`, which it will not fill past `limit` octets (nor past 65535,
    /// the largest IPFIX message). `header.length` is ignored; `finish` writes it.
    pub fn new(buf: &'a mut [u8], limit: usize, header: MessageHeader) -> Result<Self, BuildError> {
        let cap = limit.min(buf.len()).min(MAX_MESSAGE_LEN);
        if cap < HEADER_LEN {
            return Err(BuildError::TooLarge(cap));
        }
        let buf = &mut buf[..cap];
        put_u16(buf, field::VERSION.start, VERSION);
        put_u16(buf, field::LENGTH.start, HEADER_LEN as u16);
        put_u32(buf, field::EXPORT_TIME.start, header.export_time);
        put_u32(buf, field::SEQUENCE.start, header.sequence);
        put_u32(buf, field::DOMAIN.start, header.domain);
        Ok(MessageBuilder {
            buf,
            len: HEADER_LEN,
            set: None,
            reports: false,
            data_records: 0,
        })
    }

    /// Octets written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True while nothing but the header is written.
    pub fn is_empty(&self) -> bool {
        self.len == HEADER_LEN
    }

    /// Octets still free, before any set header a new record may need.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.len
    }

    pub fn data_records(&self) -> u32 {
        self.data_records
    }

    /// Room for a record of `record_len` octets in set `set_id`: opens that set if needed and
    /// returns where the record starts.
    fn reserve(&mut self, set_id: u16, record_len: usize) -> Result<usize, BuildError> {
        let same_set = matches!(self.set, Some((_, id)) if id == set_id);
        if self.reports && !same_set {
            return Err(BuildError::Full);
        }
        let need = record_len + if same_set { 0 } else { SET_HEADER_LEN };
        if self.len + need > self.buf.len() {
            return Err(
                if HEADER_LEN + SET_HEADER_LEN + record_len > self.buf.len() {
                    BuildError::TooLarge(self.buf.len())
                } else {
                    BuildError::Full
                },
            );
        }
        if !same_set {
            self.close_set();
            put_u16(self.buf, self.len, set_id);
            self.set = Some((self.len, set_id));
            self.len += SET_HEADER_LEN;
        }
        let at = self.len;
        self.len += record_len;
        Ok(at)
    }

    fn close_set(&mut self) {
        if let Some((start, _)) = self.set.take() {
            put_u16(self.buf, start + 2, (self.len - start) as u16);
        }
    }

    /// Adds one template (or options template) record.
    pub fn add_template(&mut self, def: &TemplateDef) -> Result<(), BuildError> {
        let (set_id, head) = if def.scope == 0 {
            (TEMPLATE_SET_ID, 4)
        } else {
            (OPTIONS_TEMPLATE_SET_ID, 6)
        };
        let at = self.reserve(set_id, head + 4 * def.fields.len())?;
        put_u16(self.buf, at, def.id);
        put_u16(self.buf, at + 2, def.fields.len() as u16);
        if def.scope != 0 {
            put_u16(self.buf, at + 4, def.scope);
        }
        for (i, f) in def.fields.iter().enumerate() {
            put_u16(self.buf, at + head + 4 * i, f.ie);
            put_u16(self.buf, at + head + 4 * i + 2, f.len);
        }
        Ok(())
    }

    /// Adds all four tapdeck templates (two template records in one template set, two options
    /// template records in one options template set), or none of them.
    pub fn add_templates(&mut self) -> Result<(), BuildError> {
        const ALL: [&TemplateDef; 4] = [
            &ie::PACKET_REPORT,
            &ie::LARGE_PACKET_REPORT,
            &ie::EXPORTER_STATS,
            &ie::INTERFACE,
        ];
        if self.reports {
            return Err(BuildError::Full);
        }
        let need: usize = 2 * SET_HEADER_LEN
            + ALL
                .iter()
                .map(|d| if d.scope == 0 { 4 } else { 6 } + 4 * d.fields.len())
                .sum::<usize>();
        if self.len + need > self.buf.len() {
            return Err(if HEADER_LEN + need > self.buf.len() {
                BuildError::TooLarge(self.buf.len())
            } else {
                BuildError::Full
            });
        }
        for def in ALL {
            self.add_template(def)?;
        }
        Ok(())
    }

    /// Adds a packet report (template 256, or 257 for a frame longer than 65535 octets).
    pub fn add_packet_report(&mut self, r: &PacketReport<'_>) -> Result<(), BuildError> {
        let section = r.frame_section;
        if section.len() > MAX_MESSAGE_LEN {
            return Err(BuildError::TooLarge(self.buf.len()));
        }
        let selector =
            u32::try_from(r.selector).map_err(|_| BuildError::OutOfRange("selector id"))?;
        let frame_size =
            u32::try_from(r.frame_size).map_err(|_| BuildError::OutOfRange("frame size"))?;
        let def = if frame_size <= u16::MAX as u32 {
            &ie::PACKET_REPORT
        } else {
            &ie::LARGE_PACKET_REPORT
        };
        let prefix = varlen_prefix_len(section.len());
        let fixed = def.fixed_len();
        let at = self.reserve(def.id, fixed + prefix + section.len())?;
        self.reports = true;
        let b = &mut *self.buf;
        put_u64(b, at, time::unix_ns_to_ntp(r.time_ns));
        put_u32(b, at + 8, r.interface);
        put_u32(b, at + 12, selector);
        let mut p = at + 16;
        if def.id == ie::PACKET_REPORT_TEMPLATE {
            put_u16(b, p, frame_size as u16);
            p += 2;
        } else {
            put_u32(b, p, frame_size);
            p += 4;
        }
        p = put_varlen(b, p, section);
        debug_assert_eq!(p, self.len);
        self.data_records += 1;
        Ok(())
    }

    /// Adds the exporter's counts (options template 258).
    pub fn add_exporter_stats(&mut self, s: &ExporterStats) -> Result<(), BuildError> {
        let selector =
            u32::try_from(s.selector).map_err(|_| BuildError::OutOfRange("selector id"))?;
        let def = &ie::EXPORTER_STATS;
        let at = self.reserve(def.id, def.fixed_len())?;
        let b = &mut *self.buf;
        put_u32(b, at, s.exporting_process);
        put_u32(b, at + 4, selector);
        let counts = [
            s.start_time_ms,
            s.messages,
            s.records,
            s.ignored_packets,
            s.not_sent_packets,
            s.observed_packets,
            s.selected_packets,
        ];
        for (i, v) in counts.into_iter().enumerate() {
            put_u64(b, at + 8 + 8 * i, v);
        }
        self.data_records += 1;
        Ok(())
    }

    /// Adds an interface description (options template 259).
    pub fn add_interface(&mut self, i: &InterfaceInfo<'_>) -> Result<(), BuildError> {
        let (name, descr) = (i.name.as_bytes(), i.description.as_bytes());
        if name.len() > MAX_MESSAGE_LEN || descr.len() > MAX_MESSAGE_LEN {
            return Err(BuildError::TooLarge(self.buf.len()));
        }
        let def = &ie::INTERFACE;
        let len = def.fixed_len()
            + varlen_prefix_len(name.len())
            + name.len()
            + varlen_prefix_len(descr.len())
            + descr.len();
        let at = self.reserve(def.id, len)?;
        let b = &mut *self.buf;
        put_u32(b, at, i.id);
        let p = put_varlen(b, at + 4, name);
        let p = put_varlen(b, p, descr);
        put_u16(b, p, i.frame_type);
        debug_assert_eq!(p + 2, self.len);
        self.data_records += 1;
        Ok(())
    }

    /// Closes the open set and writes the message length.
    pub fn finish(mut self) -> Built {
        self.close_set();
        put_u16(self.buf, field::LENGTH.start, self.len as u16);
        Built {
            len: self.len,
            data_records: self.data_records,
        }
    }
}

/// Octets of the length prefix of a variable-length field (RFC 7011 §7): one below 255, else
/// three (255 and a 16-bit length).
pub(crate) const fn varlen_prefix_len(len: usize) -> usize {
    if len < 255 {
        1
    } else {
        3
    }
}

fn put_varlen(b: &mut [u8], at: usize, value: &[u8]) -> usize {
    let p = if value.len() < 255 {
        b[at] = value.len() as u8;
        at + 1
    } else {
        b[at] = 255;
        put_u16(b, at + 1, value.len() as u16);
        at + 3
    };
    b[p..p + value.len()].copy_from_slice(value);
    p + value.len()
}
