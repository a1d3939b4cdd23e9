//! Streaming reader for classic pcap (all magics, both byte orders) and pcapng (every
//! section, both byte orders).
//!
//! The reader is strict: a structural defect (a length that does not add up, an interface
//! that does not exist, an option running out of its block, a file ending mid-record) is a
//! [`FormatError`] naming the byte offset of the record or block it was found in. A clean
//! end of input exactly at a record boundary is `Ok(None)`. It never panics on hostile
//! input, never trusts a length before checking it, and grows its one buffer only as data
//! actually arrives, so a lying length field cannot make it allocate more than the input
//! holds (and never more than [`MAX_BLOCK`]).
//!
//! Layout: [`TraceReader`] does the I/O and the bookkeeping (offsets, interfaces, sections);
//! the `parse_*` functions below each decode one structure from a byte slice whose length
//! the caller has already checked against the structure's minimum, and return its meaning
//! or a message saying what is wrong.

use std::io::{self, BufRead, BufReader, Read};
use std::ops::Range;

use crate::bytes::{ByteOrder, Cursor, ShortInput};
use crate::pcapng::{self, pad4};
use crate::{
    BlockError, Format, FormatError, FormatErrorKind, Interface, InterfaceStats, Packet,
    PacketFlags,
};

/// The largest pcapng block or pcap record we accept. Real captures stay far below it
/// (the largest snaplen in use is 256 KiB); anything bigger is a corrupt length field.
pub const MAX_BLOCK: usize = 128 << 20;

/// Bytes requested from the input per `read` call. Raw files and stdin are slow with small
/// reads, so the reader sits on a buffer of this size.
const READ_BUFFER: usize = 256 << 10;

/// How much the block buffer may grow in one step before data has arrived to fill it.
const GROW_STEP: usize = 64 << 10;

const NS_PER_S: u64 = 1_000_000_000;

/// Classic pcap magics as read little-endian from the first four bytes of the file.
mod magic {
    pub const PCAP_US: u32 = 0xA1B2_C3D4;
    pub const PCAP_NS: u32 = 0xA1B2_3C4D;
    /// Alexey Kuznetsov's patched libpcap: 24-byte record headers, microseconds.
    pub const PCAP_MODIFIED: u32 = 0xA1B2_CD34;
}

/// Classic pcap file header (24 bytes) and record header fields.
mod pcap_field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION_MAJOR: Range<usize> = 4..6;
    pub const VERSION_MINOR: Range<usize> = 6..8;
    // 8..12 thiszone and 12..16 sigfigs: always 0 in practice, ignored as libpcap does.
    pub const SNAPLEN: Range<usize> = 16..20;
    pub const LINKTYPE: Range<usize> = 20..24;
    pub const FILE_HEADER_LEN: usize = 24;

    pub const TS_SEC: Range<usize> = 0..4;
    pub const TS_FRAC: Range<usize> = 4..8;
    pub const CAPLEN: Range<usize> = 8..12;
    pub const ORIG_LEN: Range<usize> = 12..16;
    pub const RECORD_LEN: usize = 16;
    /// The modified format adds ifindex (4), protocol (2), pkt_type (1) and a pad byte.
    pub const MODIFIED_RECORD_LEN: usize = 24;
}

/// pcapng block bodies: offsets are relative to the first byte after the 8-byte block
/// header (type, length), and the body excludes the trailing length copy.
mod ng_field {
    use std::ops::Range;
    pub const BLOCK_HEADER_LEN: usize = 8;
    /// Header plus trailing length: the smallest possible block.
    pub const BLOCK_OVERHEAD: usize = 12;

    // 0..4 byte-order magic: read by `next_block` before the length can be decoded.
    pub const SHB_MAJOR: Range<usize> = 4..6;
    pub const SHB_MINOR: Range<usize> = 6..8;
    // 8..16 section length: often -1 and never needed by a streaming reader.
    pub const SHB_OPTIONS: usize = 16;

    pub const IDB_LINKTYPE: Range<usize> = 0..2;
    pub const IDB_SNAPLEN: Range<usize> = 4..8;
    pub const IDB_OPTIONS: usize = 8;

    pub const EPB_IFACE: Range<usize> = 0..4;
    pub const EPB_TS_HIGH: Range<usize> = 4..8;
    pub const EPB_TS_LOW: Range<usize> = 8..12;
    pub const EPB_CAPLEN: Range<usize> = 12..16;
    pub const EPB_ORIG_LEN: Range<usize> = 16..20;
    pub const EPB_DATA: usize = 20;

    /// The obsolete packet block has the EPB layout except for a 16-bit interface id
    /// followed by a 16-bit drop count.
    pub const OPB_IFACE: Range<usize> = 0..2;

    pub const SPB_ORIG_LEN: Range<usize> = 0..4;
    pub const SPB_DATA: usize = 4;

    pub const ISB_IFACE: Range<usize> = 0..4;
    pub const ISB_TS_HIGH: Range<usize> = 4..8;
    pub const ISB_TS_LOW: Range<usize> = 8..12;
    pub const ISB_OPTIONS: usize = 12;

    pub const OPT_HEADER_LEN: usize = 4;
}

/// A pcapng timestamp: two 32-bit words, high first, each in the section's byte order.
#[inline]
fn ts(
    b: &Cursor<'_>,
    high: Range<usize>,
    low: Range<usize>,
    field: &'static str,
) -> Result<u64, ShortInput> {
    Ok((u64::from(b.u32_at(high, field)?) << 32) | u64::from(b.u32_at(low, field)?))
}

/// Units of a pcapng interface's timestamps (`if_tsresol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolution {
    /// 10^-n seconds.
    Pow10(u8),
    /// 2^-n seconds.
    Pow2(u8),
}

impl Resolution {
    /// The pcapng default when an IDB has no `if_tsresol`: microseconds.
    const DEFAULT: Resolution = Resolution::Pow10(6);

    fn from_option(v: u8) -> Self {
        if v & 0x80 == 0 {
            Resolution::Pow10(v)
        } else {
            Resolution::Pow2(v & 0x7f)
        }
    }

    /// Converts a raw timestamp to nanoseconds, truncating sub-nanosecond parts. Done in
    /// 128 bits: a raw u64 in seconds (10^0) times 10^9 does not fit in 64.
    fn to_ns(self, raw: u64) -> u128 {
        let raw = u128::from(raw);
        match self {
            Resolution::Pow10(n) if n <= 9 => raw * 10u128.pow(9 - u32::from(n)),
            // Finer than a nanosecond; past 10^-47 every u64 count is below 1 ns.
            Resolution::Pow10(n) => 10u128.checked_pow(u32::from(n) - 9).map_or(0, |d| raw / d),
            // raw < 2^64 and 10^9 < 2^30, so the product fits; n <= 127 keeps the shift legal.
            Resolution::Pow2(n) => (raw * u128::from(NS_PER_S)) >> n,
        }
    }
}

/// What the reader keeps per interface beyond the public [`Interface`].
#[derive(Debug, Clone, Copy)]
struct Clock {
    resolution: Resolution,
    /// `if_tsoffset`: seconds added to every timestamp of the interface.
    offset_s: i64,
    /// Last packet timestamp seen, which simple packet blocks (having none) reuse.
    last_ns: u64,
}

impl Clock {
    fn ns(&self, raw: u64) -> Result<u64, BlockError> {
        let ns =
            self.resolution.to_ns(raw) as i128 + i128::from(self.offset_s) * i128::from(NS_PER_S);
        u64::try_from(ns).map_err(|_| BlockError::TimestampRange {
            raw,
            resolution: format!("{:?}", self.resolution),
            offset_s: self.offset_s,
        })
    }
}

#[derive(Debug, Clone, Copy)]
enum Layout {
    Pcap {
        endian: ByteOrder,
        nanos: bool,
        record_len: usize,
    },
    Pcapng {
        endian: ByteOrder,
        /// Global index of the section's interface 0: pcapng numbers interfaces per section.
        first_iface: usize,
    },
}

/// What one pcapng block turned out to be.
enum Step {
    Packet {
        ts_ns: u64,
        iface: u32,
        orig_len: u32,
        flags: Option<PacketFlags>,
        data: Range<usize>,
    },
    Other,
    Eof,
}

/// A packet together with the reader state that describes it.
#[derive(Debug, Clone, Copy)]
pub struct PacketContext<'a> {
    pub packet: Packet<'a>,
    /// Every interface seen so far; `packet.iface` indexes it.
    pub interfaces: &'a [Interface],
    /// Byte offset of the record or block that holds the packet.
    pub offset: u64,
}

/// Reads packets from a pcap or pcapng stream, strictly: every structural defect is an
/// error naming its byte offset; nothing panics on hostile input.
///
/// Simple packet blocks carry no timestamp; they get the timestamp of the previous packet
/// of the same interface (0 if there was none), so that time never runs backwards within
/// an interface and merges by time keep them near their neighbours.
pub struct TraceReader<R: Read> {
    input: Input<R>,
    /// Bytes consumed from `input` so far.
    offset: u64,
    /// Start of the record or block that held the last packet returned.
    packet_offset: u64,
    format: Format,
    layout: Layout,
    ifaces: Vec<Interface>,
    clocks: Vec<Clock>,
    stats: Vec<InterfaceStats>,
    /// Reused for every record and block body that is not whole in `input`'s buffer.
    buf: Vec<u8>,
    /// The last body lies in `input`'s buffer (see [`Self::read_body`]), not in `buf`.
    body_in_input: bool,
    /// Bytes of `input`'s buffer the last body borrowed, consumed when the next record
    /// or block is read.
    borrowed: usize,
    /// Set after the first error: the stream position is then meaningless, so every later
    /// call fails too instead of decoding garbage.
    failed: Option<u64>,
}

impl<R: Read> TraceReader<R> {
    /// Reads the file header (pcap header, or the first pcapng section header).
    pub fn new(inner: R) -> Result<Self, FormatError> {
        Self::start(Input::Stream(BufReader::with_capacity(READ_BUFFER, inner)))
    }

    /// Reads a trace held whole in memory (a mapped file): packets are read in place,
    /// never copied.
    pub fn from_bytes(bytes: Box<dyn TraceBytes>) -> Result<Self, FormatError> {
        Self::start(Input::Bytes {
            bytes,
            pos: 0,
            released: 0,
        })
    }

    fn start(mut input: Input<R>) -> Result<Self, FormatError> {
        let mut head = [0u8; 4];
        let n = read_full(&mut input, &mut head).map_err(|e| FormatError::new(0, e.into()))?;
        if n < head.len() {
            return Err(truncated(0, "the file header"));
        }
        let mut r = TraceReader {
            input,
            offset: 4,
            packet_offset: 0,
            format: Format::Pcap,
            layout: Layout::Pcapng {
                endian: ByteOrder::Little,
                first_iface: 0,
            },
            ifaces: Vec::new(),
            clocks: Vec::new(),
            stats: Vec::new(),
            buf: Vec::new(),
            body_in_input: false,
            borrowed: 0,
            failed: None,
        };
        if u32::from_le_bytes(head) == pcapng::SHB {
            r.format = Format::Pcapng;
            r.next_block(Some(head))?;
        } else {
            r.read_pcap_header(head)?;
        }
        Ok(r)
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Every interface seen so far, numbered across sections (the `iface` of a packet).
    pub fn interfaces(&self) -> &[Interface] {
        &self.ifaces
    }

    /// Interface statistics blocks seen so far, `iface` numbered as for packets.
    pub fn stats(&self) -> &[InterfaceStats] {
        &self.stats
    }

    /// Byte offset of the next unread byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Byte offset of the record or block that held the packet last returned by
    /// [`next_packet`](Self::next_packet): what a semantic check should report.
    pub fn packet_offset(&self) -> u64 {
        self.packet_offset
    }

    /// Continues at `offset`, a record or block boundary at or after the current position
    /// that an earlier read of the same bytes reported ([`PacketContext::offset`]), so that
    /// a reader that wants only a trace's end need not walk the rest. Interfaces declared
    /// in between are not seen: use it only where the earlier read found none there. Only
    /// for a trace read from bytes; false (and nothing changes) for a stream, or an offset
    /// behind the position or past the end.
    pub fn skip_to(&mut self, offset: u64) -> bool {
        let len = match &self.input {
            Input::Bytes { bytes, .. } => (**bytes).as_ref().len() as u64,
            Input::Stream(_) => return false,
        };
        if self.failed.is_some() || offset < self.offset || offset > len {
            return false;
        }
        self.release();
        self.input.consume((offset - self.offset) as usize);
        self.offset = offset;
        true
    }

    /// Continues at the first record (pcap) or block (pcapng) boundary at or after `offset`
    /// from which [`RESYNC_CHAIN`] well-formed records or blocks follow one another (or
    /// end exactly at the end of the trace): how a reader that wants only a trace's tail
    /// finds a boundary without walking the rest. Returns where it continues. Only for a
    /// trace read from bytes; None (and nothing changes) for a stream, or where no
    /// boundary is found. A crafted trace can mislead it (a chain of fake records inside
    /// packet data): the tail read from there is then wrong, never unsafe.
    pub fn resync_from(&mut self, offset: u64) -> Option<u64> {
        let bytes: &[u8] = match &self.input {
            Input::Bytes { bytes, .. } => (**bytes).as_ref(),
            Input::Stream(_) => return None,
        };
        if self.failed.is_some() || offset < self.offset {
            return None;
        }
        let from = usize::try_from(offset).ok()?;
        let found = match self.layout {
            Layout::Pcap {
                endian,
                nanos,
                record_len,
            } => (from..bytes.len()).find(|&p| pcap_chain(bytes, p, endian, nanos, record_len)),
            Layout::Pcapng { endian, .. } => (from.next_multiple_of(4)..bytes.len())
                .step_by(4)
                .find(|&p| pcapng_chain(bytes, p, endian)),
        }?;
        self.skip_to(found as u64).then_some(found as u64)
    }

    /// The next packet, or `None` at a clean end of input.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, FormatError> {
        Ok(self.next_packet_with_context()?.map(|c| c.packet))
    }

    /// Like [`next_packet`](Self::next_packet), and also lends what the packet borrow
    /// otherwise keeps a caller from asking for: the interface list as of this packet, and
    /// the offset of the packet's record (what [`crate::validate::Validator`] needs).
    pub fn next_packet_with_context(&mut self) -> Result<Option<PacketContext<'_>>, FormatError> {
        if let Some(at) = self.failed {
            return Err(invalid(
                at,
                "the reader already failed at this offset; it cannot resynchronise",
            ));
        }
        let step = match self.layout {
            Layout::Pcap {
                endian,
                nanos,
                record_len,
            } => self.next_record(endian, nanos, record_len),
            // Each block consumes at least 12 bytes, so this loop ends with the input.
            Layout::Pcapng { .. } => loop {
                match self.next_block(None) {
                    Ok(Step::Other) => continue,
                    other => break other,
                }
            },
        };
        match step {
            Ok(Step::Packet {
                ts_ns,
                iface,
                orig_len,
                flags,
                data,
            }) => Ok(Some(PacketContext {
                packet: Packet {
                    ts_ns,
                    iface,
                    orig_len,
                    flags,
                    data: &body_of(&self.input, &self.buf, self.body_in_input)[data],
                },
                interfaces: &self.ifaces,
                offset: self.packet_offset,
            })),
            Ok(Step::Eof) | Ok(Step::Other) => Ok(None),
            Err(e) => {
                self.failed = Some(e.offset);
                Err(e)
            }
        }
    }

    fn read_pcap_header(&mut self, head: [u8; 4]) -> Result<(), FormatError> {
        let le = u32::from_le_bytes(head);
        let be = u32::from_be_bytes(head);
        let (endian, m) = match (le, be) {
            (magic::PCAP_US | magic::PCAP_NS | magic::PCAP_MODIFIED, _) => (ByteOrder::Little, le),
            (_, magic::PCAP_US | magic::PCAP_NS | magic::PCAP_MODIFIED) => (ByteOrder::Big, be),
            _ => return Err(FormatError::new(0, FormatErrorKind::UnknownMagic(le))),
        };
        let mut h = [0u8; pcap_field::FILE_HEADER_LEN];
        h[pcap_field::MAGIC].copy_from_slice(&head);
        let n =
            read_full(&mut self.input, &mut h[4..]).map_err(|e| FormatError::new(0, e.into()))?;
        self.offset += n as u64;
        if n < h.len() - 4 {
            return Err(truncated(0, "the pcap file header"));
        }
        let h = Cursor::new(&h).with_order(endian);
        let major = h.u16_at(pcap_field::VERSION_MAJOR, "the pcap version")?;
        let minor = h.u16_at(pcap_field::VERSION_MINOR, "the pcap version")?;
        // libpcap reads every 2.x file (2.2 and 2.3 differ from 2.4 only in details it
        // ignores); 1.x and anything newer have other layouts.
        if major != 2 {
            return Err(invalid(
                0,
                format!("pcap file version {major}.{minor}; only version 2.x exists"),
            ));
        }
        // The link type field's upper 16 bits hold the FCS length and reserved bits.
        let linktype = h.u32_at(pcap_field::LINKTYPE, "the pcap link type")? as u16;
        let snaplen = h.u32_at(pcap_field::SNAPLEN, "the pcap snap length")?;
        self.layout = Layout::Pcap {
            endian,
            nanos: m == magic::PCAP_NS,
            record_len: if m == magic::PCAP_MODIFIED {
                pcap_field::MODIFIED_RECORD_LEN
            } else {
                pcap_field::RECORD_LEN
            },
        };
        self.ifaces.push(Interface {
            linktype,
            snaplen,
            name: None,
            description: None,
        });
        Ok(())
    }

    fn next_record(
        &mut self,
        endian: ByteOrder,
        nanos: bool,
        record_len: usize,
    ) -> Result<Step, FormatError> {
        self.release();
        let start = self.offset;
        let mut h = [0u8; pcap_field::MODIFIED_RECORD_LEN];
        let h = &mut h[..record_len];
        let n = read_full(&mut self.input, h).map_err(|e| FormatError::new(start, e.into()))?;
        self.offset += n as u64;
        if n == 0 {
            return Ok(Step::Eof);
        }
        if n < record_len {
            return Err(truncated(start, "a packet record header"));
        }
        let h = Cursor::new(h).with_order(endian).based_at(start);
        let caplen = h.u32_at(pcap_field::CAPLEN, "a record's captured length")?;
        let orig_len = h.u32_at(pcap_field::ORIG_LEN, "a record's original length")?;
        if caplen as usize > MAX_BLOCK {
            return Err(invalid(
                start,
                format!("packet record says captured length {caplen}, more than the {MAX_BLOCK} bytes a record may hold"),
            ));
        }
        let sec = u64::from(h.u32_at(pcap_field::TS_SEC, "a record's timestamp")?);
        let frac = u64::from(h.u32_at(pcap_field::TS_FRAC, "a record's timestamp")?);
        // No overflow: 2^32 s is 4.3e18 ns, and the fraction adds at most 4.3e12.
        let ts_ns = sec * NS_PER_S + if nanos { frac } else { frac * 1000 };
        let got = self.read_body(0, caplen as usize, start)?;
        if got < caplen as usize {
            return Err(truncated(start, "the data of a packet record"));
        }
        self.packet_offset = start;
        Ok(Step::Packet {
            ts_ns,
            iface: 0,
            orig_len,
            flags: None,
            data: 0..caplen as usize,
        })
    }

    /// Reads one pcapng block. `head` holds the block type when the caller has already
    /// consumed it (the first section header, whose type doubles as the file magic).
    fn next_block(&mut self, head: Option<[u8; 4]>) -> Result<Step, FormatError> {
        self.release();
        let start = self.offset - if head.is_some() { 4 } else { 0 };
        let io_err = |e: io::Error| FormatError::new(start, e.into());
        let mut h = [0u8; ng_field::BLOCK_HEADER_LEN + 4];
        let mut have = 0;
        if let Some(t) = head {
            h[..4].copy_from_slice(&t);
            have = 4;
        }
        let n =
            read_full(&mut self.input, &mut h[have..ng_field::BLOCK_HEADER_LEN]).map_err(io_err)?;
        self.offset += n as u64;
        if have + n == 0 {
            return Ok(Step::Eof);
        }
        if have + n < ng_field::BLOCK_HEADER_LEN {
            return Err(truncated(start, "a block header"));
        }
        let Layout::Pcapng {
            endian: section_endian,
            ..
        } = self.layout
        else {
            unreachable!("next_block is only called on pcapng input");
        };
        // The type 0x0A0D0D0A reads the same in both byte orders. A section header's byte
        // order comes from the magic after its length field, which we must read first.
        let block_type = Cursor::new(&h)
            .with_order(section_endian)
            .u32_at(0..4, "a block type")?;
        let mut body_start = 0;
        let endian = if block_type == pcapng::SHB {
            let n = read_full(&mut self.input, &mut h[8..12]).map_err(io_err)?;
            self.offset += n as u64;
            if n < 4 {
                return Err(truncated(start, "a section header block"));
            }
            body_start = 4;
            match Cursor::new(&h).u32_at(8..12, "the byte-order magic")? {
                pcapng::BYTE_ORDER_MAGIC => ByteOrder::Little,
                m if m.swap_bytes() == pcapng::BYTE_ORDER_MAGIC => ByteOrder::Big,
                m => {
                    return Err(invalid(
                        start,
                        format!("section header byte-order magic is {m:#010x}, not 0x1a2b3c4d in either byte order"),
                    ))
                }
            }
        } else {
            section_endian
        };
        let len = Cursor::new(&h)
            .with_order(endian)
            .u32_at(4..8, "a block length")? as usize;
        let name = block_name(block_type);
        let min = min_block_len(block_type);
        if len < min || len & 3 != 0 || len > MAX_BLOCK {
            return Err(invalid(
                start,
                format!(
                    "{name} says its length is {len} bytes; a block must be a multiple of 4 between {min} and {MAX_BLOCK}"
                ),
            ));
        }
        // Read body and trailing length together.
        let want = len - ng_field::BLOCK_HEADER_LEN;
        if body_start > 0 {
            if self.buf.len() < body_start {
                self.buf.resize(body_start, 0);
            }
            self.buf[..body_start].copy_from_slice(&h[8..12]);
        }
        let got = self.read_body(body_start, want, start)?;
        if got < want {
            return Err(truncated(start, name));
        }
        let body_len = want - 4;
        let body = body_of(&self.input, &self.buf, self.body_in_input);
        let trailer = Cursor::new(body)
            .with_order(endian)
            .based_at(start + ng_field::BLOCK_HEADER_LEN as u64)
            .u32_at(body_len..want, "a block's trailing length")? as usize;
        if trailer != len {
            return Err(invalid(
                start,
                format!("{name} length is {len} at its start but {trailer} at its end"),
            ));
        }
        self.handle_block(block_type, endian, body_len, start)
            .map_err(|e| FormatError::new(start, e.into()))
    }

    /// Interprets a block body that is complete and has consistent lengths.
    fn handle_block(
        &mut self,
        block_type: u32,
        endian: ByteOrder,
        body_len: usize,
        start: u64,
    ) -> Result<Step, BlockError> {
        // The body's bytes are in the file after the block header.
        let body = Cursor::new(body_of(&self.input, &self.buf, self.body_in_input))
            .with_order(endian)
            .based_at(start + ng_field::BLOCK_HEADER_LEN as u64)
            .sub(0, body_len, "a block body")?;
        let Layout::Pcapng { first_iface, .. } = self.layout else {
            unreachable!("handle_block is only called on pcapng input");
        };
        match block_type {
            pcapng::SHB => {
                parse_shb(body)?;
                self.layout = Layout::Pcapng {
                    endian,
                    first_iface: self.ifaces.len(),
                };
                Ok(Step::Other)
            }
            pcapng::IDB => {
                if self.ifaces.len() >= u32::MAX as usize {
                    return Err(BlockError::TooManyInterfaces);
                }
                let (iface, clock) = parse_idb(body)?;
                self.ifaces.push(iface);
                self.clocks.push(clock);
                Ok(Step::Other)
            }
            pcapng::EPB | pcapng::OPB => {
                let p = parse_epb(block_type, body)?;
                let iface = self.global_iface(first_iface, p.iface, block_type)?;
                let clock = &mut self.clocks[iface];
                let ts_ns = clock.ns(p.ts)?;
                clock.last_ns = ts_ns;
                self.packet_offset = start;
                Ok(Step::Packet {
                    ts_ns,
                    iface: iface as u32,
                    orig_len: p.orig_len,
                    flags: p.flags,
                    data: p.data,
                })
            }
            pcapng::SPB => {
                let iface = self.global_iface(first_iface, 0, block_type)?;
                let (orig_len, data) = parse_spb(body, self.ifaces[iface].snaplen)?;
                self.packet_offset = start;
                Ok(Step::Packet {
                    ts_ns: self.clocks[iface].last_ns,
                    iface: iface as u32,
                    orig_len,
                    flags: None,
                    data,
                })
            }
            pcapng::ISB => {
                let raw = parse_isb(body)?;
                let iface = self.global_iface(first_iface, raw.iface, block_type)?;
                // Prefer isb_endtime (when the counts were taken) over the block's own time.
                let ts_ns = self.clocks[iface].ns(raw.endtime.unwrap_or(raw.ts))?;
                self.stats.push(raw.resolve(iface as u32, ts_ns));
                Ok(Step::Other)
            }
            // Name resolution, decryption secrets, custom and unknown blocks carry nothing
            // a packet reader needs; their lengths were checked like any other block's.
            _ => Ok(Step::Other),
        }
    }

    /// Consumes the body the last packet borrowed from `input`'s buffer.
    fn release(&mut self) {
        self.input.consume(std::mem::take(&mut self.borrowed));
        self.body_in_input = false;
    }

    /// Maps a section-local interface id to the global index.
    fn global_iface(&self, first: usize, local: u32, block_type: u32) -> Result<usize, BlockError> {
        let in_section = self.ifaces.len() - first;
        if (local as usize) < in_section {
            Ok(first + local as usize)
        } else {
            Err(BlockError::NoSuchInterface {
                block: block_name(block_type),
                local,
                in_section,
            })
        }
    }

    /// Reads `n - from` bytes into `buf[from..n]`, returning how many of `n` are there.
    /// The buffer grows at most [`GROW_STEP`] or by doubling what has arrived, so a
    /// forged length on a short input cannot trigger a large allocation.
    ///
    /// A body that starts at 0 and lies whole in `input`'s buffer is not copied: it is
    /// read in place (see [`body_of`]) and consumed with the next record. That is nearly
    /// every packet, and saves copying every byte of a trace once more.
    fn read_body(&mut self, from: usize, n: usize, start: u64) -> Result<usize, FormatError> {
        self.body_in_input = false;
        if from == 0 {
            let there = self
                .input
                .fill_buf()
                .map_err(|e| FormatError::new(start, e.into()))?
                .len();
            if there >= n {
                self.body_in_input = true;
                self.borrowed = n;
                self.offset += n as u64;
                return Ok(n);
            }
        }
        let mut got = from;
        while got < n {
            let end = n.min(got + got.max(GROW_STEP));
            if self.buf.len() < end {
                self.buf.resize(end, 0);
            }
            let k = read_full(&mut self.input, &mut self.buf[got..end])
                .map_err(|e| FormatError::new(start, e.into()))?;
            self.offset += k as u64;
            got += k;
            if got < end {
                break;
            }
        }
        Ok(got)
    }
}

/// Where the bytes come from: a stream, through our buffer, or memory that holds them all.
enum Input<R: Read> {
    Stream(BufReader<R>),
    Bytes {
        bytes: Box<dyn TraceBytes>,
        pos: usize,
        /// Bytes before this were handed back with [`TraceBytes::release`].
        released: usize,
    },
}

/// A whole trace in memory, for [`TraceReader::from_bytes`].
pub trait TraceBytes: AsRef<[u8]> + Send {
    /// The reader is done with the bytes before `upto` and will not look at them again
    /// (a mapping can drop those pages, so a long read does not hold the whole file).
    fn release(&self, _upto: usize) {}
}

impl TraceBytes for Vec<u8> {}

/// How far the reader gets past the last release before it releases again.
const RELEASE_STEP: usize = 64 << 20;

impl<R: Read> Input<R> {
    /// The unread bytes at hand (for a stream, its buffer).
    fn buffer(&self) -> &[u8] {
        match self {
            Input::Stream(b) => b.buffer(),
            Input::Bytes { bytes, pos, .. } => &(**bytes).as_ref()[*pos..],
        }
    }

    /// Refills an empty stream buffer; returns the unread bytes at hand.
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match self {
            Input::Stream(b) => b.fill_buf(),
            Input::Bytes { .. } => Ok(self.buffer()),
        }
    }

    fn consume(&mut self, n: usize) {
        match self {
            Input::Stream(b) => b.consume(n),
            Input::Bytes {
                bytes,
                pos,
                released,
            } => {
                *pos += n;
                if *pos - *released >= RELEASE_STEP {
                    bytes.release(*pos);
                    *released = *pos;
                }
            }
        }
    }
}

impl<R: Read> Read for Input<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match self {
            Input::Stream(b) => b.read(out),
            Input::Bytes { .. } => {
                let n = out.len().min(self.buffer().len());
                out[..n].copy_from_slice(&self.buffer()[..n]);
                self.consume(n);
                Ok(n)
            }
        }
    }
}

/// Records or blocks that must chain for [`TraceReader::resync_from`] to take a boundary.
pub const RESYNC_CHAIN: usize = 8;

/// Whether well-formed pcap records chain from `p`: plausible lengths and timestamps no
/// more than a day apart, for `RESYNC_CHAIN` records or exactly to the end.
fn pcap_chain(b: &[u8], mut p: usize, endian: ByteOrder, nanos: bool, record_len: usize) -> bool {
    let frac_limit = if nanos { 1_000_000_000 } else { 1_000_000 };
    let mut prev_sec: Option<u32> = None;
    for _ in 0..RESYNC_CHAIN {
        if p == b.len() {
            return prev_sec.is_some();
        }
        let Some(h) = b.get(p..p + record_len) else {
            return false;
        };
        let h = Cursor::new(h).with_order(endian);
        let field = |r| h.u32_at(r, "").unwrap_or(u32::MAX);
        let (sec, frac) = (field(pcap_field::TS_SEC), field(pcap_field::TS_FRAC));
        let (caplen, orig) = (field(pcap_field::CAPLEN), field(pcap_field::ORIG_LEN));
        if frac >= frac_limit
            || caplen as usize > MAX_BLOCK
            || caplen > orig
            || prev_sec.is_some_and(|s| s.abs_diff(sec) > 86_400)
        {
            return false;
        }
        prev_sec = Some(sec);
        p += record_len + caplen as usize;
        if p > b.len() {
            return false;
        }
    }
    true
}

/// Whether well-formed pcapng blocks chain from `p`: a known type, a length that is a
/// multiple of 4 and repeated at the block's end, for `RESYNC_CHAIN` blocks or exactly to
/// the end.
fn pcapng_chain(b: &[u8], mut p: usize, endian: ByteOrder) -> bool {
    const KNOWN: [u32; 10] = [
        pcapng::SHB,
        pcapng::IDB,
        pcapng::OPB,
        pcapng::SPB,
        0x0000_0004, // name resolution
        pcapng::ISB,
        pcapng::EPB,
        0x0000_000A, // decryption secrets
        0x0000_0BAD, // custom
        0x4000_0BAD, // custom, not to be copied
    ];
    for n in 0..RESYNC_CHAIN {
        if p == b.len() {
            return n > 0;
        }
        let Some(h) = b.get(p..p + 8) else {
            return false;
        };
        let h = Cursor::new(h).with_order(endian);
        let (kind, len) = (
            h.u32_at(0..4, "").unwrap_or(0),
            h.u32_at(4..8, "").unwrap_or(0) as usize,
        );
        if !KNOWN.contains(&kind) || len < 12 || len % 4 != 0 || len > MAX_BLOCK {
            return false;
        }
        let Some(tail) = b.get(p + len - 4..p + len) else {
            return false;
        };
        if Cursor::new(tail).with_order(endian).u32_at(0..4, "").ok() != Some(len as u32) {
            return false;
        }
        p += len;
    }
    true
}

/// Where the last body is: in the input's buffer or in our own (`read_body` decides).
fn body_of<'a, R: Read>(input: &'a Input<R>, buf: &'a [u8], in_input: bool) -> &'a [u8] {
    if in_input {
        input.buffer()
    } else {
        buf
    }
}

/// Reads until `out` is full or the input ends; returns the bytes read.
fn read_full(r: &mut impl Read, out: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < out.len() {
        match r.read(&mut out[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn truncated(at: u64, what: &'static str) -> FormatError {
    FormatError::new(at, FormatErrorKind::Truncated(what))
}

fn invalid(at: u64, msg: impl Into<String>) -> FormatError {
    FormatError::new(at, FormatErrorKind::Invalid(msg.into()))
}

fn block_name(block_type: u32) -> &'static str {
    match block_type {
        pcapng::SHB => "a section header block",
        pcapng::IDB => "an interface description block",
        pcapng::EPB => "an enhanced packet block",
        pcapng::SPB => "a simple packet block",
        pcapng::OPB => "an obsolete packet block",
        pcapng::ISB => "an interface statistics block",
        _ => "a block",
    }
}

/// Smallest total length (header, fixed fields, trailer) of each block type.
fn min_block_len(block_type: u32) -> usize {
    ng_field::BLOCK_OVERHEAD
        + match block_type {
            pcapng::SHB => ng_field::SHB_OPTIONS,
            pcapng::IDB => ng_field::IDB_OPTIONS,
            pcapng::EPB | pcapng::OPB => ng_field::EPB_DATA,
            pcapng::SPB => ng_field::SPB_DATA,
            pcapng::ISB => ng_field::ISB_OPTIONS,
            _ => 0,
        }
}

/// Calls `f(code, value)` for each option up to `opt_endofopt` or the end of `opts`.
/// Options are optional, and so is the end marker when the block ends right after them.
fn for_each_option(
    mut opts: Cursor<'_>,
    mut f: impl FnMut(u16, Cursor<'_>) -> Result<(), BlockError>,
) -> Result<(), BlockError> {
    while !opts.is_empty() {
        if opts.remaining() < ng_field::OPT_HEADER_LEN {
            return Err(BlockError::OptionHeader {
                remaining: opts.remaining(),
            });
        }
        let code = opts.u16("an option code")?;
        let len = opts.u16("an option length")? as usize;
        if code == pcapng::OPT_END {
            return Ok(());
        }
        // Option areas start 4-aligned in blocks whose lengths are multiples of 4, so a
        // value that fits also has room for its padding.
        if pad4(len) > opts.remaining() {
            return Err(BlockError::OptionValue {
                code,
                len,
                remaining: opts.remaining(),
            });
        }
        let value = opts.sub(opts.position(), len, "an option value")?;
        opts.skip(pad4(len), "an option value")?;
        f(code, value)?;
    }
    Ok(())
}

/// Checks a section header body (at least 16 bytes); its byte order is already known.
fn parse_shb(body: Cursor<'_>) -> Result<(), BlockError> {
    let major = body.u16_at(ng_field::SHB_MAJOR, "the section header version")?;
    let minor = body.u16_at(ng_field::SHB_MINOR, "the section header version")?;
    // The specification tells readers to skip sections of another major version; we
    // cannot skip to the next section without trusting the section length, so we stop.
    if major != 1 {
        return Err(BlockError::SectionVersion { major, minor });
    }
    for_each_option(options(body, ng_field::SHB_OPTIONS)?, |_, _| Ok(()))
}

/// The option area of a block body: everything from `at` on.
#[inline]
fn options<'a>(body: Cursor<'a>, at: usize) -> Result<Cursor<'a>, ShortInput> {
    let len = body.remaining().saturating_sub(at);
    body.sub(at, len, "the options")
}

/// Decodes an interface description body (at least 8 bytes).
fn parse_idb(body: Cursor<'_>) -> Result<(Interface, Clock), BlockError> {
    let mut iface = Interface {
        linktype: body.u16_at(ng_field::IDB_LINKTYPE, "the interface link type")?,
        snaplen: body.u32_at(ng_field::IDB_SNAPLEN, "the interface snap length")?,
        name: None,
        description: None,
    };
    let mut clock = Clock {
        resolution: Resolution::DEFAULT,
        offset_s: 0,
        last_ns: 0,
    };
    for_each_option(options(body, ng_field::IDB_OPTIONS)?, |code, v| {
        match code {
            pcapng::IF_NAME => iface.name = Some(String::from_utf8_lossy(v.rest()).into_owned()),
            pcapng::IF_DESCRIPTION => {
                iface.description = Some(String::from_utf8_lossy(v.rest()).into_owned())
            }
            pcapng::IF_TSRESOL => match v.remaining() {
                1 => clock.resolution = Resolution::from_option(v.u8_at(0, "if_tsresol")?),
                len => {
                    return Err(BlockError::OptionWidth {
                        option: "if_tsresol",
                        len,
                        want: 1,
                    })
                }
            },
            pcapng::IF_TSOFFSET => match v.remaining() {
                8 => clock.offset_s = v.u64_at(0, "if_tsoffset")? as i64,
                len => {
                    return Err(BlockError::OptionWidth {
                        option: "if_tsoffset",
                        len,
                        want: 8,
                    })
                }
            },
            _ => {}
        }
        Ok(())
    })?;
    Ok((iface, clock))
}

/// The fields of an enhanced (or obsolete) packet block, `data` indexing the body.
struct EpbFields {
    iface: u32,
    ts: u64,
    orig_len: u32,
    flags: Option<PacketFlags>,
    data: Range<usize>,
}

/// Decodes an enhanced or obsolete packet block body (at least 20 bytes).
#[inline]
fn parse_epb(block_type: u32, body: Cursor<'_>) -> Result<EpbFields, BlockError> {
    // The fixed fields, checked once (this is the per-packet path).
    let head = body.sub(0, ng_field::EPB_DATA, "the packet block's fixed fields")?;
    let iface = if block_type == pcapng::OPB {
        u32::from(head.u16_at(ng_field::OPB_IFACE, "the interface id")?)
    } else {
        head.u32_at(ng_field::EPB_IFACE, "the interface id")?
    };
    let caplen = head.u32_at(ng_field::EPB_CAPLEN, "the captured length")? as usize;
    let room = body.remaining().saturating_sub(ng_field::EPB_DATA);
    if caplen > room {
        let kind = if block_type == pcapng::OPB {
            "obsolete"
        } else {
            "enhanced"
        };
        return Err(BlockError::CapturedLength { kind, caplen, room });
    }
    let data = ng_field::EPB_DATA..ng_field::EPB_DATA + caplen;
    let opts = options(body, ng_field::EPB_DATA + pad4(caplen))?;
    // Of the packet options only the flags (the obsolete block's `pack_flags`, same code and
    // meaning) are returned; hashes and comments are checked to fit and skipped.
    let mut flags = None;
    if !opts.is_empty() {
        for_each_option(opts, |code, v| {
            if code == pcapng::EPB_FLAGS {
                if v.remaining() != 4 {
                    return Err(BlockError::OptionWidth {
                        option: "epb_flags",
                        len: v.remaining(),
                        want: 4,
                    });
                }
                flags = Some(PacketFlags(v.u32_at(0, "epb_flags")?));
            }
            Ok(())
        })?;
    }
    Ok(EpbFields {
        iface,
        ts: ts(
            &head,
            ng_field::EPB_TS_HIGH,
            ng_field::EPB_TS_LOW,
            "the timestamp",
        )?,
        orig_len: head.u32_at(ng_field::EPB_ORIG_LEN, "the original length")?,
        flags,
        data,
    })
}

/// Decodes a simple packet block body (at least 4 bytes). It has no captured length:
/// that is the original length cut to the interface's snaplen, and to what the block holds.
fn parse_spb(body: Cursor<'_>, snaplen: u32) -> Result<(u32, Range<usize>), ShortInput> {
    let orig_len = body.u32_at(ng_field::SPB_ORIG_LEN, "the original length")?;
    let room = body.remaining().saturating_sub(ng_field::SPB_DATA);
    let mut caplen = (orig_len as usize).min(room);
    if snaplen != 0 {
        caplen = caplen.min(snaplen as usize);
    }
    Ok((orig_len, ng_field::SPB_DATA..ng_field::SPB_DATA + caplen))
}

/// Interface statistics as the block has them: section-local interface, raw timestamps.
struct RawStats {
    iface: u32,
    ts: u64,
    endtime: Option<u64>,
    received: Option<u64>,
    os_dropped: Option<u64>,
    if_dropped: Option<u64>,
    delivered: Option<u64>,
}

impl RawStats {
    fn resolve(self, iface: u32, ts_ns: u64) -> InterfaceStats {
        InterfaceStats {
            iface,
            ts_ns,
            received: self.received,
            os_dropped: self.os_dropped,
            if_dropped: self.if_dropped,
            delivered: self.delivered,
        }
    }
}

/// Decodes an interface statistics body (at least 12 bytes).
fn parse_isb(body: Cursor<'_>) -> Result<RawStats, BlockError> {
    let mut s = RawStats {
        iface: body.u32_at(ng_field::ISB_IFACE, "the interface id")?,
        ts: ts(
            &body,
            ng_field::ISB_TS_HIGH,
            ng_field::ISB_TS_LOW,
            "the timestamp",
        )?,
        endtime: None,
        received: None,
        os_dropped: None,
        if_dropped: None,
        delivered: None,
    };
    for_each_option(options(body, ng_field::ISB_OPTIONS)?, |code, v| {
        let slot = match code {
            pcapng::ISB_ENDTIME => &mut s.endtime,
            pcapng::ISB_IFRECV => &mut s.received,
            pcapng::ISB_IFDROP => &mut s.if_dropped,
            pcapng::ISB_OSDROP => &mut s.os_dropped,
            pcapng::ISB_USRDELIV => &mut s.delivered,
            _ => return Ok(()),
        };
        if v.remaining() != 8 {
            return Err(BlockError::StatisticsWidth {
                code,
                len: v.remaining(),
            });
        }
        *slot = Some(if code == pcapng::ISB_ENDTIME {
            ts(&v, 0..4, 4..8, "isb_endtime")?
        } else {
            v.u64_at(0, "an interface statistics counter")?
        });
        Ok(())
    })?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Classic pcap, little-endian, microseconds, Ethernet with an FCS-length field set
    /// in the upper bits of the link type; one 4-byte packet at 1.5 s.
    static PCAP_LE_US: [u8; 44] = [
        0xd4, 0xc3, 0xb2, 0xa1, // magic a1b2c3d4, little-endian
        0x02, 0x00, 0x04, 0x00, // version 2.4
        0x00, 0x00, 0x00, 0x00, // thiszone
        0x00, 0x00, 0x00, 0x00, // sigfigs
        0xff, 0xff, 0x00, 0x00, // snaplen 65535
        0x01, 0x00, 0x00,
        0x14, // linktype 1, FCS length 4 in bits 26..29 (0x10000000 = F bit)
        0x01, 0x00, 0x00, 0x00, // ts_sec 1
        0x20, 0xa1, 0x07, 0x00, // ts_usec 500000
        0x04, 0x00, 0x00, 0x00, // caplen 4
        0x3c, 0x00, 0x00, 0x00, // orig_len 60
        0xde, 0xad, 0xbe, 0xef, // data
    ];

    /// The same packet, big-endian with nanoseconds (1 s + 5 ns), link type 101 (raw IP).
    static PCAP_BE_NS: [u8; 44] = [
        0xa1, 0xb2, 0x3c, 0x4d, // magic a1b23c4d, big-endian
        0x00, 0x02, 0x00, 0x04, // version 2.4
        0x00, 0x00, 0x00, 0x00, // thiszone
        0x00, 0x00, 0x00, 0x00, // sigfigs
        0x00, 0x00, 0x00, 0x40, // snaplen 64
        0x00, 0x00, 0x00, 0x65, // linktype 101
        0x00, 0x00, 0x00, 0x01, // ts_sec 1
        0x00, 0x00, 0x00, 0x05, // ts_nsec 5
        0x00, 0x00, 0x00, 0x04, // caplen 4
        0x00, 0x00, 0x00, 0x04, // orig_len 4
        0x45, 0x00, 0x00, 0x04, // data
    ];

    /// Kuznetsov's modified format: 24-byte record headers (ifindex, protocol, pkt_type).
    static PCAP_MODIFIED: [u8; 54] = [
        0x34, 0xcd, 0xb2, 0xa1, // magic a1b2cd34, little-endian
        0x02, 0x00, 0x04, 0x00, // version 2.4
        0x00, 0x00, 0x00, 0x00, // thiszone
        0x00, 0x00, 0x00, 0x00, // sigfigs
        0x00, 0x00, 0x04, 0x00, // snaplen 262144
        0x01, 0x00, 0x00, 0x00, // linktype 1
        0x02, 0x00, 0x00, 0x00, // ts_sec 2
        0x01, 0x00, 0x00, 0x00, // ts_usec 1
        0x06, 0x00, 0x00, 0x00, // caplen 6
        0x06, 0x00, 0x00, 0x00, // orig_len 6
        0x03, 0x00, 0x00, 0x00, // ifindex 3
        0x00, 0x08, // protocol
        0x00, 0x00, // pkt_type, pad
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, // data
    ];

    /// pcapng, little-endian: SHB, IDB (Ethernet, snaplen 0, if_tsresol 9, if_name "eth0"),
    /// EPB with 5 bytes at 1.000000002 s, then a custom block that must be skipped.
    static PCAPNG_LE: [u8; 124] = [
        // SHB, 28 bytes
        0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0x00, 0x00, 0x00, //
        0x4d, 0x3c, 0x2b, 0x1a, 0x01, 0x00, 0x00, 0x00, // byte-order magic, version 1.0
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // section length -1
        0x1c, 0x00, 0x00, 0x00, //
        // IDB, 40 bytes
        0x01, 0x00, 0x00, 0x00, 0x28, 0x00, 0x00, 0x00, //
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // linktype 1, reserved, snaplen 0
        0x02, 0x00, 0x04, 0x00, b'e', b't', b'h', b'0', // if_name
        0x09, 0x00, 0x01, 0x00, 0x09, 0x00, 0x00, 0x00, // if_tsresol 9 (ns), padding
        0x00, 0x00, 0x00, 0x00, // opt_endofopt
        0x28, 0x00, 0x00, 0x00, //
        // EPB, 40 bytes
        0x06, 0x00, 0x00, 0x00, 0x28, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, // interface 0
        0x00, 0x00, 0x00, 0x00, 0x02, 0xca, 0x9a, 0x3b, // ts high 0, low 1_000_000_002
        0x05, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, // caplen 5, orig_len 5
        0x11, 0x22, 0x33, 0x44, 0x55, 0x00, 0x00, 0x00, // data, padding
        0x28, 0x00, 0x00, 0x00, //
        // custom block (0x00000BAD), 16 bytes
        0xad, 0x0b, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, //
        0x78, 0x56, 0x34, 0x12, // private enterprise number
        0x10, 0x00, 0x00, 0x00,
    ];

    /// (ts_ns, iface, orig_len, data) of one packet.
    type Pkt = (u64, u32, u32, Vec<u8>);

    /// Reads `bytes` three ways, which must agree: as a stream (bodies read in place from
    /// the stream buffer), one byte per read (every body copied), and from memory.
    fn read_all(bytes: &[u8]) -> Result<(Vec<Pkt>, Vec<Interface>), FormatError> {
        let stream = read_with(TraceReader::new(bytes), bytes.len());
        let trickle = read_with(TraceReader::new(Trickle(bytes)), bytes.len());
        let memory = read_with(
            TraceReader::<&[u8]>::from_bytes(Box::new(bytes.to_vec())),
            bytes.len(),
        );
        let show = |r: &Result<_, FormatError>| format!("{r:?}");
        assert_eq!(show(&stream), show(&trickle), "stream vs one byte per read");
        assert_eq!(show(&stream), show(&memory), "stream vs memory");
        stream
    }

    fn read_with<R: Read>(
        r: Result<TraceReader<R>, FormatError>,
        len: usize,
    ) -> Result<(Vec<Pkt>, Vec<Interface>), FormatError> {
        let mut r = r?;
        let mut out = Vec::new();
        while let Some(p) = r.next_packet()? {
            out.push((p.ts_ns, p.iface, p.orig_len, p.data.to_vec()));
        }
        assert_eq!(r.offset(), len as u64);
        Ok((out, r.interfaces().to_vec()))
    }

    #[test]
    fn skip_to_continues_at_a_reported_record_of_a_trace_in_memory() {
        // Three records of PCAP_LE_US's packet, each one second later.
        let mut bytes = PCAP_LE_US.to_vec();
        for s in 2..4u8 {
            let mut rec = PCAP_LE_US[24..].to_vec();
            rec[0] = s;
            bytes.extend_from_slice(&rec);
        }
        let mut r = TraceReader::<&[u8]>::from_bytes(Box::new(bytes.clone())).unwrap();
        let offsets: Vec<u64> =
            std::iter::from_fn(|| r.next_packet_with_context().unwrap().map(|c| c.offset))
                .collect();
        assert_eq!(offsets, [24, 44, 64]);
        let mut r = TraceReader::<&[u8]>::from_bytes(Box::new(bytes.clone())).unwrap();
        assert!(r.next_packet().unwrap().is_some());
        assert!(r.skip_to(64));
        assert_eq!(
            r.next_packet().unwrap().map(|p| p.ts_ns),
            Some(3_500_000_000)
        );
        assert!(r.next_packet().unwrap().is_none());
        // Backwards, past the end, or on a stream: refused, nothing changes.
        let mut r = TraceReader::<&[u8]>::from_bytes(Box::new(bytes.clone())).unwrap();
        assert!(!r.skip_to(10) && !r.skip_to(1000));
        assert_eq!(
            r.next_packet().unwrap().map(|p| p.ts_ns),
            Some(1_500_000_000)
        );
        let mut s = TraceReader::new(&bytes[..]).unwrap();
        assert!(!s.skip_to(64));
    }

    #[test]
    fn resync_finds_the_next_record_or_block_boundary() {
        // pcap: 200 records of 1 to 300 bytes whose data is itself record-like noise.
        let mut bytes = PCAP_LE_US[..24].to_vec();
        let mut starts = Vec::new();
        for i in 0..200u32 {
            starts.push(bytes.len());
            let len = 1 + (i * 37) % 300;
            for v in [1000 + i / 10, (i * 4999) % 1_000_000, len, len + 10] {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            bytes.extend((0..len).map(|k| (k * 13 + i) as u8));
        }
        for at in [24usize, 25, 100, 1000, 17_000, starts[199] - 5] {
            let want = *starts.iter().find(|&&s| s >= at).unwrap();
            let mut r = TraceReader::<&[u8]>::from_bytes(Box::new(bytes.clone())).unwrap();
            assert_eq!(r.resync_from(at as u64), Some(want as u64), "from {at}");
            let i = starts.iter().position(|&s| s == want).unwrap() as u32;
            let p = r.next_packet().unwrap().unwrap();
            assert_eq!(p.ts_ns / NS_PER_S, u64::from(1000 + i / 10));
        }
        // pcapng: SHB, IDB, then 100 EPBs.
        let mut ng = PCAPNG_LE[..68].to_vec();
        let epb = &PCAPNG_LE[68..108];
        let mut blocks = Vec::new();
        for _ in 0..100 {
            blocks.push(ng.len());
            ng.extend_from_slice(epb);
        }
        for at in [108usize, 109, 110, 2001, ng.len() - 41] {
            let want = *blocks.iter().find(|&&s| s >= at).unwrap();
            let mut r = TraceReader::<&[u8]>::from_bytes(Box::new(ng.clone())).unwrap();
            // The interface is declared before the first packet: read that far first.
            assert!(r.next_packet().unwrap().is_some());
            assert_eq!(r.resync_from(at as u64), Some(want as u64), "from {at}");
            assert_eq!(
                r.next_packet().unwrap().unwrap().data,
                [0x11, 0x22, 0x33, 0x44, 0x55]
            );
        }
        // Nothing after the last boundary; a stream cannot.
        let mut r = TraceReader::<&[u8]>::from_bytes(Box::new(ng.clone())).unwrap();
        assert_eq!(r.resync_from(ng.len() as u64 - 3), None);
        assert_eq!(TraceReader::new(&ng[..]).unwrap().resync_from(100), None);
    }

    /// A stream that hands out one byte per read.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            match (self.0.split_first(), out.first_mut()) {
                (Some((b, rest)), Some(o)) => {
                    *o = *b;
                    self.0 = rest;
                    Ok(1)
                }
                _ => Ok(0),
            }
        }
    }

    fn err(bytes: &[u8]) -> FormatError {
        match read_all(bytes) {
            Ok(x) => panic!("expected an error, read {x:?}"),
            Err(e) => e,
        }
    }

    fn invalid_msg(e: &FormatError) -> String {
        match &e.kind {
            FormatErrorKind::Invalid(m) => m.clone(),
            FormatErrorKind::Block(b) => b.to_string(),
            k => panic!("expected Invalid, got {k:?}"),
        }
    }

    /// A little-endian pcapng block around `body` (padded to 4 bytes).
    fn block(kind: u32, body: &[u8]) -> Vec<u8> {
        block_in(ByteOrder::Little, kind, body)
    }

    fn block_in(e: ByteOrder, kind: u32, body: &[u8]) -> Vec<u8> {
        let w = |v: u32| match e {
            ByteOrder::Little => v.to_le_bytes(),
            ByteOrder::Big => v.to_be_bytes(),
        };
        let len = (12 + pad4(body.len())) as u32;
        let mut out = w(kind).to_vec();
        out.extend_from_slice(&w(len));
        out.extend_from_slice(body);
        out.resize(8 + pad4(body.len()), 0);
        out.extend_from_slice(&w(len));
        out
    }

    fn shb_in(e: ByteOrder) -> Vec<u8> {
        let body: Vec<u8> = match e {
            ByteOrder::Little => [0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0].to_vec(),
            ByteOrder::Big => [0x1a, 0x2b, 0x3c, 0x4d, 0, 1, 0, 0].to_vec(),
        };
        block_in(e, pcapng::SHB, &[body, vec![0xff; 8]].concat())
    }

    fn le_fields(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// EPB body: iface, ts high/low, caplen, orig_len, then `data` and `extra` raw.
    fn epb(iface: u32, ts: u64, caplen: u32, orig: u32, data: &[u8]) -> Vec<u8> {
        let mut b = le_fields(&[iface, (ts >> 32) as u32, ts as u32, caplen, orig]);
        b.extend_from_slice(data);
        block(pcapng::EPB, &b)
    }

    fn idb(linktype: u16, snaplen: u32, opts: &[u8]) -> Vec<u8> {
        let mut b = linktype.to_le_bytes().to_vec();
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&snaplen.to_le_bytes());
        b.extend_from_slice(opts);
        block(pcapng::IDB, &b)
    }

    fn opt(code: u16, v: &[u8]) -> Vec<u8> {
        let mut b = code.to_le_bytes().to_vec();
        b.extend_from_slice(&(v.len() as u16).to_le_bytes());
        b.extend_from_slice(v);
        b.resize(pad4(b.len()), 0);
        b
    }

    #[test]
    fn classic_pcap_little_endian_microseconds() {
        let (pkts, ifaces) = read_all(&PCAP_LE_US).unwrap();
        assert_eq!(
            pkts,
            vec![(1_500_000_000, 0, 60, vec![0xde, 0xad, 0xbe, 0xef])]
        );
        // The FCS bits above the low 16 are not part of the link type.
        assert_eq!(
            ifaces,
            vec![Interface {
                linktype: 1,
                snaplen: 65535,
                name: None,
                description: None
            }]
        );
        assert_eq!(
            TraceReader::new(&PCAP_LE_US[..]).unwrap().format(),
            Format::Pcap
        );
    }

    #[test]
    fn classic_pcap_big_endian_nanoseconds() {
        let (pkts, ifaces) = read_all(&PCAP_BE_NS).unwrap();
        assert_eq!(pkts, vec![(1_000_000_005, 0, 4, vec![0x45, 0, 0, 4])]);
        assert_eq!((ifaces[0].linktype, ifaces[0].snaplen), (101, 64));
    }

    #[test]
    fn classic_pcap_modified_record_headers() {
        let (pkts, _) = read_all(&PCAP_MODIFIED).unwrap();
        assert_eq!(pkts, vec![(2_000_001_000, 0, 6, vec![1, 2, 3, 4, 5, 6])]);
    }

    #[test]
    fn classic_pcap_errors() {
        // Cut inside the record data: Truncated, at the record's start.
        let e = err(&PCAP_LE_US[..42]);
        assert!(
            matches!(e.kind, FormatErrorKind::Truncated(_)) && e.offset == 24,
            "{e}"
        );
        let e = err(&PCAP_LE_US[..30]);
        assert!(
            matches!(e.kind, FormatErrorKind::Truncated("a packet record header"))
                && e.offset == 24
        );
        // Cut inside the file header.
        let e = TraceReader::new(&PCAP_LE_US[..10]).err().unwrap();
        assert!(matches!(e.kind, FormatErrorKind::Truncated(_)) && e.offset == 0);
        // A clean end after the header: no packets.
        assert_eq!(read_all(&PCAP_LE_US[..24]).unwrap().0, vec![]);
        // A captured length beyond the cap is refused before anything is allocated.
        let mut b = PCAP_LE_US;
        b[32..36].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        assert!(invalid_msg(&err(&b)).contains("captured length 4294967280"));
        let mut b = PCAP_LE_US;
        b[4] = 1;
        assert!(invalid_msg(&err(&b)).contains("version 1.4"));
        let e = TraceReader::new(&b"\x00\x01\x02\x03rest"[..])
            .err()
            .unwrap();
        assert!(matches!(e.kind, FormatErrorKind::UnknownMagic(0x0302_0100)));
    }

    #[test]
    fn pcapng_little_endian() {
        let mut r = TraceReader::new(&PCAPNG_LE[..]).unwrap();
        assert_eq!(r.format(), Format::Pcapng);
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(
            (p.ts_ns, p.iface, p.orig_len, p.data),
            (1_000_000_002, 0, 5, &[0x11, 0x22, 0x33, 0x44, 0x55][..])
        );
        assert_eq!(r.packet_offset(), 68);
        assert!(r.next_packet().unwrap().is_none());
        assert_eq!(r.offset(), 124);
        assert_eq!(
            r.interfaces(),
            &[Interface {
                linktype: 1,
                snaplen: 0,
                name: Some("eth0".into()),
                description: None
            }]
        );
    }

    #[test]
    fn pcapng_sections_number_interfaces_globally() {
        let be = ByteOrder::Big;
        let mut f = PCAPNG_LE[..108].to_vec(); // SHB, IDB, EPB
        f.extend(shb_in(be));
        // Section 2, big-endian: IDB (linktype 101, default µs), EPB on its interface 0.
        f.extend(block_in(be, pcapng::IDB, &[0, 101, 0, 0, 0, 0, 0, 0]));
        let mut body = [0u32, 0, 7, 3, 3]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect::<Vec<_>>();
        body.extend_from_slice(&[9, 9, 9]);
        f.extend(block_in(be, pcapng::EPB, &body));
        let (pkts, ifaces) = read_all(&f).unwrap();
        assert_eq!(pkts[1], (7_000, 1, 3, vec![9, 9, 9]));
        assert_eq!(
            ifaces.iter().map(|i| i.linktype).collect::<Vec<_>>(),
            vec![1, 101]
        );
        // Section 2's interface 1 does not exist, even though the file has two interfaces.
        let mut g = f.clone();
        let n = g.len();
        g[n - 36 + 8..n - 36 + 12].copy_from_slice(&1u32.to_be_bytes());
        assert!(invalid_msg(&err(&g)).contains("names interface 1 but its section has 1 interface"));
    }

    #[test]
    fn pcapng_resolution_offset_spb_isb() {
        let mut f = shb_in(ByteOrder::Little);
        // 2^-10 s units, 100 s offset, snaplen 4.
        let opts = [
            opt(pcapng::IF_TSRESOL, &[0x8a]),
            opt(pcapng::IF_TSOFFSET, &100u64.to_le_bytes()),
        ]
        .concat();
        f.extend(idb(1, 4, &opts));
        f.extend(epb(0, 1024 + 512, 2, 2, &[1, 2]));
        // SPB: orig_len 6, cut to the snaplen 4; time taken from the previous packet.
        f.extend(block(pcapng::SPB, &[6, 0, 0, 0, 1, 2, 3, 4, 5, 6]));
        let isb = [
            le_fields(&[0, 0, 2048]),
            opt(pcapng::ISB_IFRECV, &10u64.to_le_bytes()),
            opt(pcapng::ISB_OSDROP, &3u64.to_le_bytes()),
            opt(pcapng::OPT_END, &[]),
        ]
        .concat();
        f.extend(block(pcapng::ISB, &isb));
        let mut r = TraceReader::new(&f[..]).unwrap();
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(p.ts_ns, 101_500_000_000);
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(
            (p.ts_ns, p.orig_len, p.data),
            (101_500_000_000, 6, &[1, 2, 3, 4][..])
        );
        assert!(r.next_packet().unwrap().is_none());
        assert_eq!(
            r.stats(),
            &[InterfaceStats {
                iface: 0,
                ts_ns: 102_000_000_000,
                received: Some(10),
                os_dropped: Some(3),
                if_dropped: None,
                delivered: None,
            }]
        );
    }

    #[test]
    fn pcapng_structural_errors_name_the_block() {
        let head = PCAPNG_LE[..68].to_vec(); // SHB + IDB
        let with = |b: Vec<u8>| [head.clone(), b].concat();

        let e = err(&with(epb(0, 0, 2000, 2000, &[0; 1500])));
        assert_eq!(e.offset, 68);
        assert_eq!(
            invalid_msg(&e),
            "enhanced packet block says captured length 2000 but the block holds 1500 bytes"
        );

        let e = err(&with(epb(3, 0, 1, 1, &[0])));
        assert!(invalid_msg(&e).contains("names interface 3"), "{e}");

        let mut b = epb(0, 0, 1, 1, &[0]);
        let n = b.len();
        b[n - 4] ^= 4; // trailing length differs
        assert_eq!(
            invalid_msg(&err(&with(b))),
            "an enhanced packet block length is 36 at its start but 32 at its end"
        );

        for bad_len in [0u32, 8, 13, 0x0800_0004, 0xffff_fffc] {
            let mut b = epb(0, 0, 1, 1, &[0]);
            b[4..8].copy_from_slice(&bad_len.to_le_bytes());
            let e = err(&with(b));
            assert_eq!(e.offset, 68);
            assert!(
                invalid_msg(&e).contains(&format!("length is {bad_len} bytes")),
                "{e}"
            );
        }

        // An option whose value runs past its block.
        let mut b = epb(0, 0, 1, 1, &[0, 0, 0, 0]);
        b.splice(32..32, [1, 0, 8, 0, b'x', b'y', b'z', 0]); // comment of 8 bytes, 4 present
        let len = (b.len() as u32).to_le_bytes();
        b[4..8].copy_from_slice(&len);
        let n = b.len();
        b[n - 4..].copy_from_slice(&len);
        assert_eq!(
            invalid_msg(&err(&with(b))),
            "option 1 says its value is 8 bytes but only 4 remain in the block"
        );

        // A simple packet block in a section without interfaces.
        let f = [
            shb_in(ByteOrder::Little),
            block(pcapng::SPB, &[1, 0, 0, 0, 0]),
        ]
        .concat();
        assert!(invalid_msg(&err(&f)).contains("simple packet block names interface 0"));

        let e = err(&with(idb(1, 0, &opt(pcapng::IF_TSRESOL, &[6, 6]))));
        assert_eq!(invalid_msg(&e), "if_tsresol option is 2 bytes, not 1");
    }

    #[test]
    fn pcapng_truncation_and_clean_end() {
        // Clean ends at every block boundary.
        for end in [28, 68, 108, 124] {
            assert!(read_all(&PCAPNG_LE[..end]).is_ok(), "end {end}");
        }
        // Any other cut is Truncated at the start of the block it falls in.
        for cut in 1..PCAPNG_LE.len() {
            let starts = [0u64, 28, 68, 108];
            if [28, 68, 108].contains(&cut) {
                continue;
            }
            let e = err(&PCAPNG_LE[..cut]);
            let want = *starts.iter().rfind(|&&s| s < cut as u64).unwrap();
            assert!(
                matches!(e.kind, FormatErrorKind::Truncated(_)),
                "cut {cut}: {e}"
            );
            assert_eq!(e.offset, want, "cut {cut}");
        }
    }

    #[test]
    fn errors_are_sticky() {
        let mut r = TraceReader::new(&PCAPNG_LE[..100]).unwrap();
        assert!(r.next_packet().is_err());
        let e = r.next_packet().err().unwrap();
        assert_eq!(e.offset, 68);
    }

    #[test]
    fn lying_length_does_not_allocate_it() {
        // A 128 MiB block with 64 bytes behind it: Truncated, and the buffer stays small.
        let mut f = PCAPNG_LE[..68].to_vec();
        f.extend(&[6, 0, 0, 0, 0, 0, 0, 8]);
        f.extend([0u8; 64]);
        let mut r = TraceReader::new(&f[..]).unwrap();
        let e = r.next_packet().err().unwrap();
        assert!(matches!(e.kind, FormatErrorKind::Truncated(_)) && e.offset == 68);
        assert!(r.buf.capacity() <= 2 * GROW_STEP, "{}", r.buf.capacity());
    }

    #[test]
    fn resolutions() {
        assert_eq!(Resolution::Pow10(6).to_ns(3), 3_000);
        assert_eq!(
            Resolution::Pow10(0).to_ns(u64::MAX),
            u128::from(u64::MAX) * 1_000_000_000
        );
        assert_eq!(Resolution::Pow10(12).to_ns(5_000), 5);
        assert_eq!(Resolution::Pow10(127).to_ns(u64::MAX), 0);
        assert_eq!(Resolution::Pow2(127).to_ns(u64::MAX), 0);
        assert_eq!(Resolution::Pow2(1).to_ns(3), 1_500_000_000);
        // Seconds resolution far in the future does not fit 64-bit nanoseconds.
        let c = Clock {
            resolution: Resolution::Pow10(0),
            offset_s: 0,
            last_ns: 0,
        };
        assert!(c.ns(u64::MAX).is_err());
        let c = Clock {
            resolution: Resolution::DEFAULT,
            offset_s: -10,
            last_ns: 0,
        };
        assert!(c.ns(1).is_err());
    }

    /// The packets of a one-interface file holding `epbs`, with their flags.
    fn flags_of(epbs: &[Vec<u8>]) -> Result<Vec<Option<PacketFlags>>, FormatError> {
        let mut f = PCAPNG_LE[..68].to_vec(); // SHB, IDB
        f.extend(epbs.concat());
        let mut r = TraceReader::new(&f[..])?;
        let mut out = Vec::new();
        while let Some(p) = r.next_packet()? {
            out.push(p.flags);
        }
        Ok(out)
    }

    #[test]
    fn epb_flags_are_read_with_the_packet() {
        let data = [0x11, 0x22, 0x33, 0x44, 0x55, 0, 0, 0];
        let with = |opts: &[u8]| epb(0, 1, 5, 5, &[&data[..], opts].concat());
        let comment = opt(pcapng::OPT_COMMENT, b"hi");
        let got = flags_of(&[
            with(&[]),
            with(&[opt(pcapng::EPB_FLAGS, &[0x02, 0, 0, 0]), opt(0, &[])].concat()),
            // Among other options, and with no end marker before the block ends.
            with(
                &[
                    comment.clone(),
                    opt(pcapng::EPB_FLAGS, &[0x05, 0, 0, 0]),
                    comment,
                ]
                .concat(),
            ),
        ])
        .unwrap();
        assert_eq!(got, vec![None, Some(PacketFlags(2)), Some(PacketFlags(5))]);
        assert_eq!(
            got[1].unwrap().direction(),
            Some(crate::Direction::Outbound)
        );
        assert_eq!(got[2].unwrap().direction(), Some(crate::Direction::Inbound));
    }

    #[test]
    fn epb_flags_follow_the_section_byte_order() {
        let be = ByteOrder::Big;
        let mut f = shb_in(be);
        let mut idb = 1u16.to_be_bytes().to_vec();
        idb.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        f.extend(block_in(be, pcapng::IDB, &idb));
        let mut body: Vec<u8> = [0u32, 0, 1, 4, 4]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        body.extend_from_slice(&[1, 2, 3, 4]);
        body.extend_from_slice(&pcapng::EPB_FLAGS.to_be_bytes());
        body.extend_from_slice(&4u16.to_be_bytes());
        body.extend_from_slice(&0x0001_0011u32.to_be_bytes());
        f.extend(block_in(be, pcapng::EPB, &body));
        let mut r = TraceReader::new(&f[..]).unwrap();
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(p.flags, Some(PacketFlags(0x0001_0011)));
    }

    #[test]
    fn an_epb_flags_option_of_another_length_is_an_error() {
        let data = [0x11, 0x22, 0x33, 0x44, 0x55, 0, 0, 0];
        for value in [&[][..], &[1, 0][..], &[1, 0, 0, 0, 0, 0, 0, 0][..]] {
            let bad = epb(
                0,
                1,
                5,
                5,
                &[&data[..], &opt(pcapng::EPB_FLAGS, value)].concat(),
            );
            let e = flags_of(&[bad]).unwrap_err();
            assert_eq!(e.offset, 68);
            assert_eq!(
                invalid_msg(&e),
                format!("epb_flags option is {} bytes, not 4", value.len())
            );
        }
        // A length running past the block is caught before the value is looked at.
        let mut over = opt(pcapng::EPB_FLAGS, &[1, 0, 0, 0]);
        over[2] = 0x40;
        let e = flags_of(&[epb(0, 1, 5, 5, &[&data[..], &over].concat())]).unwrap_err();
        assert!(
            invalid_msg(&e).contains("option 2 says its value is 64 bytes"),
            "{e}"
        );
    }
}
