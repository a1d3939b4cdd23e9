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

use std::io::{self, BufReader, Read};
use std::ops::Range;

use crate::pcapng::{self, pad4};
use crate::{Format, FormatError, FormatErrorKind, Interface, InterfaceStats, Packet};

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

/// Byte order of a pcap file or pcapng section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    /// Callers pass ranges from the field modules over slices already checked to be long
    /// enough, so the conversions cannot fail.
    fn u16(self, b: &[u8], r: Range<usize>) -> u16 {
        let a: [u8; 2] = b[r].try_into().expect("2-byte field");
        match self {
            Endian::Little => u16::from_le_bytes(a),
            Endian::Big => u16::from_be_bytes(a),
        }
    }
    fn u32(self, b: &[u8], r: Range<usize>) -> u32 {
        let a: [u8; 4] = b[r].try_into().expect("4-byte field");
        match self {
            Endian::Little => u32::from_le_bytes(a),
            Endian::Big => u32::from_be_bytes(a),
        }
    }
    fn u64(self, b: &[u8]) -> u64 {
        let a: [u8; 8] = b[..8].try_into().expect("8-byte field");
        match self {
            Endian::Little => u64::from_le_bytes(a),
            Endian::Big => u64::from_be_bytes(a),
        }
    }
    /// pcapng timestamps are two 32-bit words, high first, each in section byte order.
    fn ts(self, b: &[u8], high: Range<usize>, low: Range<usize>) -> u64 {
        (u64::from(self.u32(b, high)) << 32) | u64::from(self.u32(b, low))
    }
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
    fn ns(&self, raw: u64) -> Result<u64, String> {
        let ns =
            self.resolution.to_ns(raw) as i128 + i128::from(self.offset_s) * i128::from(NS_PER_S);
        u64::try_from(ns).map_err(|_| {
            format!(
                "timestamp {raw} (resolution {:?}, offset {} s) is outside the range of 64-bit nanoseconds since 1970",
                self.resolution, self.offset_s
            )
        })
    }
}

#[derive(Debug, Clone, Copy)]
enum Layout {
    Pcap {
        endian: Endian,
        nanos: bool,
        record_len: usize,
    },
    Pcapng {
        endian: Endian,
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
    input: BufReader<R>,
    /// Bytes consumed from `input` so far.
    offset: u64,
    /// Start of the record or block that held the last packet returned.
    packet_offset: u64,
    format: Format,
    layout: Layout,
    ifaces: Vec<Interface>,
    clocks: Vec<Clock>,
    stats: Vec<InterfaceStats>,
    /// Reused for every record and block body; packets borrow from it.
    buf: Vec<u8>,
    /// Set after the first error: the stream position is then meaningless, so every later
    /// call fails too instead of decoding garbage.
    failed: Option<u64>,
}

impl<R: Read> TraceReader<R> {
    /// Reads the file header (pcap header, or the first pcapng section header).
    pub fn new(inner: R) -> Result<Self, FormatError> {
        let mut input = BufReader::with_capacity(READ_BUFFER, inner);
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
                endian: Endian::Little,
                first_iface: 0,
            },
            ifaces: Vec::new(),
            clocks: Vec::new(),
            stats: Vec::new(),
            buf: Vec::new(),
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
                data,
            }) => Ok(Some(PacketContext {
                packet: Packet {
                    ts_ns,
                    iface,
                    orig_len,
                    data: &self.buf[data],
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
            (magic::PCAP_US | magic::PCAP_NS | magic::PCAP_MODIFIED, _) => (Endian::Little, le),
            (_, magic::PCAP_US | magic::PCAP_NS | magic::PCAP_MODIFIED) => (Endian::Big, be),
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
        let major = endian.u16(&h, pcap_field::VERSION_MAJOR);
        let minor = endian.u16(&h, pcap_field::VERSION_MINOR);
        // libpcap reads every 2.x file (2.2 and 2.3 differ from 2.4 only in details it
        // ignores); 1.x and anything newer have other layouts.
        if major != 2 {
            return Err(invalid(
                0,
                format!("pcap file version {major}.{minor}; only version 2.x exists"),
            ));
        }
        // The link type field's upper 16 bits hold the FCS length and reserved bits.
        let linktype = endian.u32(&h, pcap_field::LINKTYPE) as u16;
        let snaplen = endian.u32(&h, pcap_field::SNAPLEN);
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
        endian: Endian,
        nanos: bool,
        record_len: usize,
    ) -> Result<Step, FormatError> {
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
        let caplen = endian.u32(h, pcap_field::CAPLEN);
        let orig_len = endian.u32(h, pcap_field::ORIG_LEN);
        if caplen as usize > MAX_BLOCK {
            return Err(invalid(
                start,
                format!("packet record says captured length {caplen}, more than the {MAX_BLOCK} bytes a record may hold"),
            ));
        }
        let sec = u64::from(endian.u32(h, pcap_field::TS_SEC));
        let frac = u64::from(endian.u32(h, pcap_field::TS_FRAC));
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
            data: 0..caplen as usize,
        })
    }

    /// Reads one pcapng block. `head` holds the block type when the caller has already
    /// consumed it (the first section header, whose type doubles as the file magic).
    fn next_block(&mut self, head: Option<[u8; 4]>) -> Result<Step, FormatError> {
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
        let block_type = section_endian.u32(&h, 0..4);
        let mut body_start = 0;
        let endian = if block_type == pcapng::SHB {
            let n = read_full(&mut self.input, &mut h[8..12]).map_err(io_err)?;
            self.offset += n as u64;
            if n < 4 {
                return Err(truncated(start, "a section header block"));
            }
            body_start = 4;
            match u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")) {
                pcapng::BYTE_ORDER_MAGIC => Endian::Little,
                m if m.swap_bytes() == pcapng::BYTE_ORDER_MAGIC => Endian::Big,
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
        let len = endian.u32(&h, 4..8) as usize;
        let name = block_name(block_type);
        let min = min_block_len(block_type);
        if len < min || len % 4 != 0 || len > MAX_BLOCK {
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
        let trailer = endian.u32(&self.buf, body_len..want) as usize;
        if trailer != len {
            return Err(invalid(
                start,
                format!("{name} length is {len} at its start but {trailer} at its end"),
            ));
        }
        self.handle_block(block_type, endian, body_len, start)
            .map_err(|msg| invalid(start, msg))
    }

    /// Interprets a block body that is complete and has consistent lengths.
    fn handle_block(
        &mut self,
        block_type: u32,
        endian: Endian,
        body_len: usize,
        start: u64,
    ) -> Result<Step, String> {
        let body = &self.buf[..body_len];
        let Layout::Pcapng { first_iface, .. } = self.layout else {
            unreachable!("handle_block is only called on pcapng input");
        };
        match block_type {
            pcapng::SHB => {
                parse_shb(endian, body)?;
                self.layout = Layout::Pcapng {
                    endian,
                    first_iface: self.ifaces.len(),
                };
                Ok(Step::Other)
            }
            pcapng::IDB => {
                if self.ifaces.len() >= u32::MAX as usize {
                    return Err("more interfaces than 32-bit interface numbers can name".into());
                }
                let (iface, clock) = parse_idb(endian, body)?;
                self.ifaces.push(iface);
                self.clocks.push(clock);
                Ok(Step::Other)
            }
            pcapng::EPB | pcapng::OPB => {
                let p = parse_epb(endian, block_type, body)?;
                let iface = self.global_iface(first_iface, p.iface, block_type)?;
                let clock = &mut self.clocks[iface];
                let ts_ns = clock.ns(p.ts)?;
                clock.last_ns = ts_ns;
                self.packet_offset = start;
                Ok(Step::Packet {
                    ts_ns,
                    iface: iface as u32,
                    orig_len: p.orig_len,
                    data: p.data,
                })
            }
            pcapng::SPB => {
                let iface = self.global_iface(first_iface, 0, block_type)?;
                let (orig_len, data) = parse_spb(endian, body, self.ifaces[iface].snaplen);
                self.packet_offset = start;
                Ok(Step::Packet {
                    ts_ns: self.clocks[iface].last_ns,
                    iface: iface as u32,
                    orig_len,
                    data,
                })
            }
            pcapng::ISB => {
                let raw = parse_isb(endian, body)?;
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

    /// Maps a section-local interface id to the global index.
    fn global_iface(&self, first: usize, local: u32, block_type: u32) -> Result<usize, String> {
        let in_section = self.ifaces.len() - first;
        if (local as usize) < in_section {
            Ok(first + local as usize)
        } else {
            Err(format!(
                "{} names interface {local} but its section has {in_section} interface(s) so far",
                block_name(block_type)
            ))
        }
    }

    /// Reads `n - from` bytes into `buf[from..n]`, returning how many of `n` are there.
    /// The buffer grows at most [`GROW_STEP`] or by doubling what has arrived, so a
    /// forged length on a short input cannot trigger a large allocation.
    fn read_body(&mut self, from: usize, n: usize, start: u64) -> Result<usize, FormatError> {
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
    endian: Endian,
    mut opts: &[u8],
    mut f: impl FnMut(u16, &[u8]) -> Result<(), String>,
) -> Result<(), String> {
    while !opts.is_empty() {
        if opts.len() < ng_field::OPT_HEADER_LEN {
            return Err(format!(
                "an option header needs 4 bytes but only {} remain in the block",
                opts.len()
            ));
        }
        let code = endian.u16(opts, 0..2);
        let len = endian.u16(opts, 2..4) as usize;
        if code == pcapng::OPT_END {
            return Ok(());
        }
        // Option areas start 4-aligned in blocks whose lengths are multiples of 4, so a
        // value that fits also has room for its padding.
        let end = ng_field::OPT_HEADER_LEN + pad4(len);
        if end > opts.len() {
            return Err(format!(
                "option {code} says its value is {len} bytes but only {} remain in the block",
                opts.len() - ng_field::OPT_HEADER_LEN
            ));
        }
        f(
            code,
            &opts[ng_field::OPT_HEADER_LEN..ng_field::OPT_HEADER_LEN + len],
        )?;
        opts = &opts[end..];
    }
    Ok(())
}

/// Checks a section header body (`body.len() >= 16`); its byte order is already known.
fn parse_shb(endian: Endian, body: &[u8]) -> Result<(), String> {
    let major = endian.u16(body, ng_field::SHB_MAJOR);
    let minor = endian.u16(body, ng_field::SHB_MINOR);
    // The specification tells readers to skip sections of another major version; we
    // cannot skip to the next section without trusting the section length, so we stop.
    if major != 1 {
        return Err(format!(
            "section header version {major}.{minor}; this reader knows version 1"
        ));
    }
    for_each_option(endian, &body[ng_field::SHB_OPTIONS..], |_, _| Ok(()))
}

/// Decodes an interface description body (`body.len() >= 8`).
fn parse_idb(endian: Endian, body: &[u8]) -> Result<(Interface, Clock), String> {
    let mut iface = Interface {
        linktype: endian.u16(body, ng_field::IDB_LINKTYPE),
        snaplen: endian.u32(body, ng_field::IDB_SNAPLEN),
        name: None,
        description: None,
    };
    let mut clock = Clock {
        resolution: Resolution::DEFAULT,
        offset_s: 0,
        last_ns: 0,
    };
    for_each_option(endian, &body[ng_field::IDB_OPTIONS..], |code, v| {
        match code {
            pcapng::IF_NAME => iface.name = Some(String::from_utf8_lossy(v).into_owned()),
            pcapng::IF_DESCRIPTION => {
                iface.description = Some(String::from_utf8_lossy(v).into_owned())
            }
            pcapng::IF_TSRESOL => match v {
                [r] => clock.resolution = Resolution::from_option(*r),
                _ => return Err(format!("if_tsresol option is {} bytes, not 1", v.len())),
            },
            pcapng::IF_TSOFFSET => match v.len() {
                8 => clock.offset_s = endian.u64(v) as i64,
                n => return Err(format!("if_tsoffset option is {n} bytes, not 8")),
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
    data: Range<usize>,
}

/// Decodes an enhanced or obsolete packet block body (`body.len() >= 20`).
fn parse_epb(endian: Endian, block_type: u32, body: &[u8]) -> Result<EpbFields, String> {
    let iface = if block_type == pcapng::OPB {
        u32::from(endian.u16(body, ng_field::OPB_IFACE))
    } else {
        endian.u32(body, ng_field::EPB_IFACE)
    };
    let caplen = endian.u32(body, ng_field::EPB_CAPLEN) as usize;
    let room = body.len() - ng_field::EPB_DATA;
    if caplen > room {
        let kind = if block_type == pcapng::OPB {
            "obsolete"
        } else {
            "enhanced"
        };
        return Err(format!(
            "{kind} packet block says captured length {caplen} but the block holds {room} bytes"
        ));
    }
    let data = ng_field::EPB_DATA..ng_field::EPB_DATA + caplen;
    let opts = &body[ng_field::EPB_DATA + pad4(caplen)..];
    // Packet options (flags, hashes, comments) are not returned, but a block whose
    // options do not fit is corrupt all the same.
    if !opts.is_empty() {
        for_each_option(endian, opts, |_, _| Ok(()))?;
    }
    Ok(EpbFields {
        iface,
        ts: endian.ts(body, ng_field::EPB_TS_HIGH, ng_field::EPB_TS_LOW),
        orig_len: endian.u32(body, ng_field::EPB_ORIG_LEN),
        data,
    })
}

/// Decodes a simple packet block body (`body.len() >= 4`). It has no captured length:
/// that is the original length cut to the interface's snaplen, and to what the block holds.
fn parse_spb(endian: Endian, body: &[u8], snaplen: u32) -> (u32, Range<usize>) {
    let orig_len = endian.u32(body, ng_field::SPB_ORIG_LEN);
    let room = body.len() - ng_field::SPB_DATA;
    let mut caplen = (orig_len as usize).min(room);
    if snaplen != 0 {
        caplen = caplen.min(snaplen as usize);
    }
    (orig_len, ng_field::SPB_DATA..ng_field::SPB_DATA + caplen)
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

/// Decodes an interface statistics body (`body.len() >= 12`).
fn parse_isb(endian: Endian, body: &[u8]) -> Result<RawStats, String> {
    let mut s = RawStats {
        iface: endian.u32(body, ng_field::ISB_IFACE),
        ts: endian.ts(body, ng_field::ISB_TS_HIGH, ng_field::ISB_TS_LOW),
        endtime: None,
        received: None,
        os_dropped: None,
        if_dropped: None,
        delivered: None,
    };
    for_each_option(endian, &body[ng_field::ISB_OPTIONS..], |code, v| {
        let slot = match code {
            pcapng::ISB_ENDTIME => &mut s.endtime,
            pcapng::ISB_IFRECV => &mut s.received,
            pcapng::ISB_IFDROP => &mut s.if_dropped,
            pcapng::ISB_OSDROP => &mut s.os_dropped,
            pcapng::ISB_USRDELIV => &mut s.delivered,
            _ => return Ok(()),
        };
        if v.len() != 8 {
            return Err(format!(
                "interface statistics option {code} is {} bytes, not 8",
                v.len()
            ));
        }
        *slot = Some(if code == pcapng::ISB_ENDTIME {
            endian.ts(v, 0..4, 4..8)
        } else {
            endian.u64(v)
        });
        Ok(())
    })?;
    Ok(s)
}
