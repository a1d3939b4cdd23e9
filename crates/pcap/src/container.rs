//! The chunked container tapdeck stores capture files in.
//!
//! A stored file is a sequence of independently decodable *frames*, each holding a run of
//! whole pcap/pcapng records (a *chunk*), followed by a trailer:
//!
//! ```text
//! [header frame: SHB + IDBs] [chunk frame]* [stats frame: ISBs] [index frame] [seek table]
//! ```
//!
//! * In a `Zstd` container every frame is a zstd frame (compressed, or stored with raw
//!   blocks for the cheapest rung) or an LZ4 frame; `zstd -dc` decodes both kinds in one
//!   stream, so decompressing the whole file gives a valid capture file.
//! * In an `Lz4` container every frame is an LZ4 frame (compressed or stored blocks), for
//!   `lz4 -dc`.
//! * In a `Plain` container the chunks are the capture bytes themselves and the trailer
//!   lives in a sidecar file (`NAME.idx`), so the capture file is usable as it is.
//!
//! The trailer is two skippable frames, which `zstd -dc` and `lz4 -dc` both ignore:
//! our chunk index (time range, packet count and codec per frame) and, last, a seek table
//! in the zstd seekable format, so other seekable-zstd readers can seek in our files too.
//! Everything is little-endian.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;

use crate::bytes::{Cursor, ShortInput};
pub use crate::error::UnknownCodec;

const ZSTD_MAGIC: u32 = 0xFD2F_B528;
const LZ4_MAGIC: u32 = 0x184D_2204;
const SKIPPABLE_MASK: u32 = 0xFFFF_FFF0;
const SKIPPABLE_BASE: u32 = 0x184D_2A50;
/// Skippable frame holding our chunk index.
const INDEX_MAGIC: u32 = 0x184D_2A5B;
/// Skippable frame of the zstd seekable format (its seek table).
const SEEK_TABLE_MAGIC: u32 = 0x184D_2A5E;
const SEEKABLE_FOOTER_MAGIC: u32 = 0x8F92_EAB1;
const INDEX_TAG: &[u8; 4] = b"TDCI";
/// Version 1: metadata and entries. Version 2 adds extensions after the entries (a tag,
/// a length and a body each): the flow indexes. Version 3: the flow indexes and the
/// file's summary.
const INDEX_VERSION: u16 = 3;
/// Extension holding the per-entry flow indexes: for each entry, a u32 length and bytes.
const FLOWS_TAG: &[u8; 4] = b"FLOW";
/// Extension holding the file's summary (one encoded `tapdeck_filter::ChunkFilter` of all
/// its packets).
const SUMMARY_TAG: &[u8; 4] = b"SUMM";
/// zstd raw blocks hold at most 128 KiB each.
const ZSTD_MAX_BLOCK: usize = 128 * 1024;
/// LZ4 frames we write use 4 MiB blocks.
const LZ4_MAX_BLOCK: usize = 4 * 1024 * 1024;
/// Upper bound on any single frame we accept when reading (hostile input).
pub const MAX_FRAME_LEN: usize = 256 * 1024 * 1024;
const INDEX_ENTRY_LEN: usize = 48;
/// A skippable frame's header: magic and body length.
const SKIPPABLE_HEADER_LEN: u64 = 8;
/// One seek table entry: compressed and decompressed size (we write no checksums).
const SEEK_ENTRY_LEN: u64 = 8;
/// The seekable format's footer: frame count, descriptor, magic.
const SEEKABLE_FOOTER_LEN: u64 = 9;

/// How a whole file is framed, and so which stock tool decompresses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    Plain,
    Zstd,
    Lz4,
}

impl Container {
    /// File name suffix after the capture format's (`.pcapng` + this).
    pub fn suffix(self) -> &'static str {
        match self {
            Container::Plain => "",
            Container::Zstd => ".zst",
            Container::Lz4 => ".lz4",
        }
    }

    pub fn from_suffix(name: &str) -> Container {
        if name.ends_with(".zst") {
            Container::Zstd
        } else if name.ends_with(".lz4") {
            Container::Lz4
        } else {
            Container::Plain
        }
    }
}

/// How one chunk was encoded: one rung of the codec ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// Stored as is (inside a zstd or LZ4 frame, unless the container is plain).
    Raw,
    Lz4,
    Zstd(i8),
}

impl Codec {
    fn to_bytes(self) -> [u8; 2] {
        match self {
            Codec::Raw => [0, 0],
            Codec::Zstd(level) => [1, level as u8],
            Codec::Lz4 => [2, 0],
        }
    }

    fn from_bytes(b: [u8; 2]) -> Option<Codec> {
        match b[0] {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Zstd(b[1] as i8)),
            2 => Some(Codec::Lz4),
            _ => None,
        }
    }
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Codec::Raw => write!(f, "raw"),
            Codec::Lz4 => write!(f, "lz4"),
            Codec::Zstd(level) => write!(f, "zstd:{level}"),
        }
    }
}

impl std::str::FromStr for Codec {
    type Err = UnknownCodec;
    fn from_str(s: &str) -> Result<Codec, UnknownCodec> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "raw" | "none" => Ok(Codec::Raw),
            "lz4" => Ok(Codec::Lz4),
            "zstd" => Ok(Codec::Zstd(3)),
            _ => {
                let level = s
                    .strip_prefix("zstd")
                    .map(|l| l.strip_prefix(':').unwrap_or(l))
                    .and_then(|l| l.parse::<i8>().ok())
                    .filter(|l| (-7..=22).contains(l));
                level.map(Codec::Zstd).ok_or(UnknownCodec { given: s })
            }
        }
    }
}

/// What a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    Header,
    Packets,
    Stats,
}

/// One frame of a file, as the chunk index records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkEntry {
    /// Offset of the frame in the stored file.
    pub frame_offset: u64,
    pub frame_len: u32,
    /// Offset of the chunk in the decompressed capture stream.
    pub data_offset: u64,
    pub data_len: u32,
    pub first_ts_ns: u64,
    pub last_ts_ns: u64,
    pub packets: u32,
    pub kind: FrameKind,
    pub codec: Codec,
}

/// The chunk index of one file, plus free-form metadata (JSON, owned by the store).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkIndex {
    pub meta: String,
    pub entries: Vec<ChunkEntry>,
    /// Per entry, the flows its packets hold (an encoded `tapdeck_filter::ChunkFilter`; empty
    /// for frames without packets or when unknown). Empty when the file has no flow index
    /// (files written before it existed): then the index is written as version 1, byte
    /// for byte as before.
    pub flows: Vec<Vec<u8>>,
    /// The file's summary: one encoded `tapdeck_filter::ChunkFilter` of all its packets
    /// (version 3); empty when the file has none (then written as version 2 or 1).
    pub summary: Vec<u8>,
}

/// Errors reading a container.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("at byte offset {offset}: {what}")]
    Invalid { offset: u64, what: String },
    #[error("at byte offset {0}: file ends inside a frame")]
    Truncated(u64),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What is wrong with one compressed frame (as the index locates it).
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame claims {0} bytes of data, more than any chunk tapdeck writes")]
    ClaimsTooMuch(usize),
    #[error("{0}")]
    ZstdInit(std::io::Error),
    #[error("zstd frame does not decode: {0}")]
    Zstd(std::io::Error),
    #[error("lz4 frame does not decode: {0}")]
    Lz4(std::io::Error),
    #[error("frame starts with unknown magic {0:#010x}")]
    StartsWithUnknownMagic(u32),
    #[error("frame shorter than its magic number")]
    NoMagic,
    #[error("frame decodes to {got} bytes, the index says {expected}")]
    DecodedLength { got: usize, expected: usize },
    #[error("unknown frame magic {0:#010x}")]
    UnknownMagic(u32),
    #[error("zstd frame header has its reserved bit set")]
    ZstdReservedBit,
    #[error("zstd block of reserved type")]
    ZstdReservedBlock,
    #[error("zstd frame longer than any tapdeck writes")]
    ZstdTooLong,
    #[error("lz4 frame of an unknown version")]
    Lz4Version,
    #[error("lz4 frame longer than any tapdeck writes")]
    Lz4TooLong,
}

/// For callers that keep a frame's defect as text beside their own context (the store's
/// `FileError::at`).
impl From<FrameError> for String {
    fn from(e: FrameError) -> String {
        e.to_string()
    }
}

/// A field cut short is a defect at the field's offset, named in the message.
impl From<ShortInput> for ContainerError {
    fn from(e: ShortInput) -> ContainerError {
        invalid(
            e.offset,
            format!(
                "{} needs {} bytes but only {} remain (the trailer is damaged)",
                e.field, e.need, e.have
            ),
        )
    }
}

fn invalid(offset: u64, what: impl Into<String>) -> ContainerError {
    ContainerError::Invalid {
        offset,
        what: what.into(),
    }
}

/// Encodes chunks for one container; holds reusable compression state, so keep one per
/// compressor thread.
///
/// The state is kept warm for every codec the ladder uses: a zstd context per level and
/// one LZ4 block buffer. Rebuilding them per chunk (a context when the level changed, a
/// fresh 8 MiB of encoder buffers for each LZ4 frame) cost as much as compressing a rarely
/// used rung's chunk, and the ladder measures each rung by its chunks.
pub struct FrameEncoder {
    container: Container,
    zstd: Vec<(i8, zstd::bulk::Compressor<'static>)>,
    lz4_block: Vec<u8>,
}

impl FrameEncoder {
    pub fn new(container: Container) -> FrameEncoder {
        FrameEncoder {
            container,
            zstd: Vec::new(),
            lz4_block: Vec::new(),
        }
    }

    /// Whether `codec` has been used by this encoder before, so that its context and buffers
    /// exist: a codec's first frame costs several times what the next ones do.
    pub fn is_warm(&self, codec: Codec) -> bool {
        match (self.container, codec) {
            (Container::Plain, _) | (_, Codec::Raw) => true,
            (Container::Lz4, Codec::Zstd(_)) | (_, Codec::Lz4) => self.lz4_block.capacity() > 0,
            (_, Codec::Zstd(level)) => self.zstd.iter().any(|(l, _)| *l == level),
        }
    }

    /// The most bytes `encode` reserves in `out` for `len` bytes of data, whatever the codec:
    /// an output buffer this large never grows.
    pub fn frame_bound(len: usize) -> usize {
        raw_frame_bound(len)
            .max(zstd::zstd_safe::compress_bound(len))
            .max(lz4_frame_bound(len))
    }

    /// Appends `data` to `out` as one frame encoded with `codec`; returns the codec that was
    /// really used (a compressing codec the container cannot hold falls back to raw).
    pub fn encode(
        &mut self,
        codec: Codec,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> std::io::Result<Codec> {
        let codec = match (self.container, codec) {
            (Container::Plain, _) => Codec::Raw,
            (Container::Lz4, Codec::Zstd(_)) => Codec::Lz4,
            (_, c) => c,
        };
        match (self.container, codec) {
            (_, Codec::Raw) | (Container::Plain, _) => {
                out.reserve(raw_frame_bound(data.len()));
                raw_frame_pieces(self.container, data, |piece| out.extend_from_slice(piece));
            }
            (_, Codec::Lz4) => lz4_frame(data, &mut self.lz4_block, out),
            (_, Codec::Zstd(level)) => {
                let at = match self.zstd.iter().position(|(l, _)| *l == level) {
                    Some(at) => at,
                    None => {
                        let mut c = zstd::bulk::Compressor::new(i32::from(level))?;
                        c.include_checksum(true)?;
                        c.include_contentsize(true)?;
                        self.zstd.push((level, c));
                        self.zstd.len() - 1
                    }
                };
                let compressor = &mut self.zstd[at].1;
                // Appends in place through zstd's safe buffer API: the frame goes straight
                // into `out` after what it holds, and `out` grows by what zstd reports it
                // wrote. Ending the frame in the first call with room for the compress bound
                // makes the same frame `compress` would (content size pledged from the
                // input), in one pass.
                out.reserve(zstd::zstd_safe::compress_bound(data.len()));
                let mut input = zstd::zstd_safe::InBuffer::around(data);
                let ctx = compressor.context_mut();
                loop {
                    let mut output = zstd::zstd_safe::OutBuffer::around_pos(out, out.len());
                    let left = ctx
                        .compress_stream2(
                            &mut output,
                            &mut input,
                            zstd::zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_end,
                        )
                        .map_err(|code| {
                            // Leave the context ready for the next frame.
                            let _ = ctx.reset(zstd::zstd_safe::ResetDirective::SessionOnly);
                            std::io::Error::other(zstd::zstd_safe::get_error_name(code))
                        })?;
                    if left == 0 {
                        break;
                    }
                    // Only reached if the bound was not enough: make room and go on.
                    out.reserve(left.max(ZSTD_MAX_BLOCK));
                }
            }
        }
        Ok(codec)
    }
}

/// LZ4 frame header: magic, FLG (version 01, independent blocks, content size and content
/// checksum present) or `flags`, BD (4 MiB blocks), the content size and the header checksum.
fn lz4_header(flags: u8, len: usize) -> [u8; 15] {
    let mut header = [0u8; 15];
    header[..4].copy_from_slice(&LZ4_MAGIC.to_le_bytes());
    header[4] = flags;
    header[5] = 0x70;
    header[6..14].copy_from_slice(&(len as u64).to_le_bytes());
    header[14] = (xxhash_rust::xxh32::xxh32(&header[4..14], 0) >> 8) as u8;
    header
}

/// The most bytes a raw frame of `len` bytes of data takes (its header and block headers
/// included).
fn raw_frame_bound(len: usize) -> usize {
    len + 64 + len / ZSTD_MAX_BLOCK * 3
}

/// An LZ4 frame of `len` bytes at its largest (every block stored): header, block sizes,
/// end mark and checksum.
fn lz4_frame_bound(len: usize) -> usize {
    15 + len + len.div_ceil(LZ4_MAX_BLOCK).max(1) * 4 + 8
}

/// Appends `data` to `out` as one LZ4 frame (the documented format, lz4_Frame_format.md) of
/// independent 4 MiB blocks, each compressed by lz4_flex into the reusable `block` buffer,
/// or stored as it is where compressing does not shrink it; with the content checksum.
fn lz4_frame(data: &[u8], block: &mut Vec<u8>, out: &mut Vec<u8>) {
    // Room for the frame at its largest (every block stored), so `out` never regrows and
    // copies what it holds.
    out.reserve(lz4_frame_bound(data.len()));
    out.extend_from_slice(&lz4_header(0x6C, data.len()));
    for piece in data.chunks(LZ4_MAX_BLOCK) {
        let bound = lz4_flex::block::get_maximum_output_size(piece.len());
        if block.len() < bound {
            block.resize(bound, 0);
        }
        match lz4_flex::block::compress_into(piece, block) {
            Ok(n) if n < piece.len() => {
                out.extend_from_slice(&(n as u32).to_le_bytes());
                out.extend_from_slice(&block[..n]);
            }
            // Incompressible (or, never with a bound-sized buffer, too big): stored.
            _ => {
                out.extend_from_slice(&(piece.len() as u32 | 0x8000_0000).to_le_bytes());
                out.extend_from_slice(piece);
            }
        }
    }
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&xxhash_rust::xxh32::xxh32(data, 0).to_le_bytes());
}

/// Emits, piece by piece, the frame that stores `data` uncompressed in `container`: a zstd
/// frame of raw blocks, an LZ4 frame of uncompressed blocks, or the bytes as they are. The
/// pieces let a writer copy the data once, straight into its I/O buffer.
pub fn raw_frame_pieces(container: Container, data: &[u8], mut emit: impl FnMut(&[u8])) {
    match container {
        Container::Plain => emit(data),
        Container::Zstd => {
            let mut header = [0u8; 13];
            header[..4].copy_from_slice(&ZSTD_MAGIC.to_le_bytes());
            // Single segment, 8-byte content size, no checksum, no dictionary.
            header[4] = 0xE0;
            header[5..].copy_from_slice(&(data.len() as u64).to_le_bytes());
            emit(&header);
            if data.is_empty() {
                emit(&[1, 0, 0]); // one empty last raw block
            }
            let mut blocks = data.chunks(ZSTD_MAX_BLOCK).peekable();
            while let Some(block) = blocks.next() {
                let last = u32::from(blocks.peek().is_none());
                let block_header = last | ((block.len() as u32) << 3);
                emit(&block_header.to_le_bytes()[..3]);
                emit(block);
            }
        }
        Container::Lz4 => {
            // FLG: version 01, independent blocks, content size present (no checksum).
            emit(&lz4_header(0x68, data.len()));
            for block in data.chunks(LZ4_MAX_BLOCK) {
                emit(&(block.len() as u32 | 0x8000_0000).to_le_bytes());
                emit(block);
            }
            emit(&0u32.to_le_bytes());
        }
    }
}

/// Decodes one frame (as the index locates it) back into capture bytes, appending to `out`.
pub fn decode_frame(
    container: Container,
    frame: &[u8],
    expected_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), FrameError> {
    if container == Container::Plain {
        out.extend_from_slice(frame);
        return Ok(());
    }
    if expected_len > MAX_FRAME_LEN {
        return Err(FrameError::ClaimsTooMuch(expected_len));
    }
    let start = out.len();
    match Cursor::new(frame).u32_at(0, "frame magic").ok() {
        Some(ZSTD_MAGIC) => {
            let mut dec =
                zstd::stream::read::Decoder::with_buffer(frame).map_err(FrameError::ZstdInit)?;
            (&mut dec)
                .take(expected_len as u64 + 1)
                .read_to_end(out)
                .map_err(FrameError::Zstd)?;
        }
        Some(LZ4_MAGIC) => {
            let dec = lz4_flex::frame::FrameDecoder::new(frame);
            dec.take(expected_len as u64 + 1)
                .read_to_end(out)
                .map_err(FrameError::Lz4)?;
        }
        Some(m) => return Err(FrameError::StartsWithUnknownMagic(m)),
        None => return Err(FrameError::NoMagic),
    }
    let got = out.len() - start;
    if got != expected_len {
        return Err(FrameError::DecodedLength {
            got,
            expected: expected_len,
        });
    }
    Ok(())
}

/// Length of the frame at the start of `buf` (zstd, LZ4 or skippable), found by walking its
/// block headers without decoding. `Ok(None)` means `buf` ends before the frame does.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    let c = Cursor::new(buf);
    let Ok(magic) = c.u32_at(0, "frame magic") else {
        return Ok(None);
    };
    let len = match magic {
        ZSTD_MAGIC => zstd_frame_len(c)?,
        LZ4_MAGIC => lz4_frame_len(c)?,
        m if m & SKIPPABLE_MASK == SKIPPABLE_BASE => c
            .u32_at(4, "skippable frame length")
            .ok()
            .map(|n| 8 + n as usize),
        m => return Err(FrameError::UnknownMagic(m)),
    };
    Ok(len.filter(|&n| n <= buf.len()))
}

/// Walks a zstd frame's block headers. A short read means the frame goes on past `c`.
fn zstd_frame_len(c: Cursor<'_>) -> Result<Option<usize>, FrameError> {
    let Ok(fhd) = c.u8_at(4, "zstd frame header descriptor") else {
        return Ok(None);
    };
    if fhd & 0x08 != 0 {
        return Err(FrameError::ZstdReservedBit);
    }
    let single_segment = fhd & 0x20 != 0;
    let dict_len = [0, 1, 2, 4][usize::from(fhd & 3)];
    let fcs_len = match fhd >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let mut pos = 5 + usize::from(!single_segment) + dict_len + fcs_len;
    loop {
        let Ok(header) = c.bytes_at(pos, 3, "zstd block header") else {
            return Ok(None);
        };
        let header = u32::from(header[0]) | u32::from(header[1]) << 8 | u32::from(header[2]) << 16;
        let size = (header >> 3) as usize;
        pos += 3 + match (header >> 1) & 3 {
            0 | 2 => size,
            1 => 1,
            _ => return Err(FrameError::ZstdReservedBlock),
        };
        if pos > MAX_FRAME_LEN {
            return Err(FrameError::ZstdTooLong);
        }
        if header & 1 == 1 {
            break;
        }
    }
    if fhd & 0x04 != 0 {
        pos += 4;
    }
    Ok(Some(pos))
}

/// Walks an LZ4 frame's block sizes. A short read means the frame goes on past `c`.
fn lz4_frame_len(c: Cursor<'_>) -> Result<Option<usize>, FrameError> {
    let Ok(flg) = c.u8_at(4, "lz4 frame flags") else {
        return Ok(None);
    };
    if flg >> 6 != 1 {
        return Err(FrameError::Lz4Version);
    }
    let block_checksum = flg & 0x10 != 0;
    let mut pos = 7 + if flg & 0x08 != 0 { 8 } else { 0 } + if flg & 0x01 != 0 { 4 } else { 0 };
    loop {
        let Ok(size) = c.u32_at(pos, "lz4 block size") else {
            return Ok(None);
        };
        pos += 4;
        if size == 0 {
            break;
        }
        pos += (size & 0x7FFF_FFFF) as usize + if block_checksum { 4 } else { 0 };
        if pos > MAX_FRAME_LEN {
            return Err(FrameError::Lz4TooLong);
        }
    }
    if flg & 0x04 != 0 {
        pos += 4;
    }
    Ok(Some(pos))
}

/// Where a file's (last valid) trailer lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrailerPlace {
    /// Where the data frames end (the sum of their lengths); for a sidecar, as its entries
    /// say, though the sidecar holds no frame.
    pub frames_end: u64,
    /// Where the chunk index frame starts: `frames_end`, or later when trailers an index
    /// added after the fact replaced lie between (0 in a sidecar).
    pub index_at: u64,
    /// Where the seek table ends: the file's size, unless an append was cut short after it.
    pub end: u64,
}

/// At most this many replaced trailers (index and seek table each) between a file's frames
/// and its index: `tapdeck index` adds one to a file without a flow index, and none after.
const MAX_REPLACED_TRAILERS: usize = 8;

/// How far from the end of a file the trailer before an interrupted append is looked for;
/// an index of a few thousand chunks with their flow indexes is far smaller.
const TORN_TAIL_SEARCH: u64 = 64 << 20;
/// Read this much at a time while looking.
const TORN_TAIL_WINDOW: u64 = 1 << 20;

/// The index frame (offset and skippable header) whose body ends where the seek table
/// starts: right after the data frames, after replaced trailers, or at 0 in a sidecar.
fn find_index_frame(
    file: &(impl ReadAt + ?Sized),
    data_end: u64,
    table_start: u64,
) -> Result<Option<(u64, [u8; SKIPPABLE_HEADER_LEN as usize])>, ContainerError> {
    type Head = [u8; SKIPPABLE_HEADER_LEN as usize];
    // A skippable frame's header at `at`: (magic, where the frame ends, the header).
    let read_head = |at: u64| -> Result<Option<(u32, u64, Head)>, ContainerError> {
        if at.saturating_add(SKIPPABLE_HEADER_LEN) > table_start {
            return Ok(None);
        }
        let mut head = [0u8; SKIPPABLE_HEADER_LEN as usize];
        file.read_at_offset(&mut head, at)?;
        let c = Cursor::new(&head).based_at(at);
        let magic = c.u32_at(0, "chunk index magic")?;
        let len = u64::from(c.u32_at(4, "chunk index length")?);
        Ok(Some((magic, at + SKIPPABLE_HEADER_LEN + len, head)))
    };
    // The index right after the frames (the first one found there is kept for the error
    // message when no later one fits), or after the trailers it replaced.
    let mut first = None;
    let mut at = data_end;
    for _ in 0..2 * MAX_REPLACED_TRAILERS + 1 {
        let Some((magic, end, head)) = read_head(at)? else {
            break;
        };
        if magic == INDEX_MAGIC {
            let found = (at, head);
            if end == table_start {
                return Ok(Some(found));
            }
            first.get_or_insert(found);
        } else if magic != SEEK_TABLE_MAGIC {
            break;
        }
        if end >= table_start {
            break;
        }
        at = end;
    }
    if first.is_some() {
        return Ok(first);
    }
    // A sidecar holds the trailer alone.
    match read_head(0)? {
        Some((INDEX_MAGIC, _, head)) => Ok(Some((0, head))),
        _ => Ok(None),
    }
}

/// The last complete trailer of a file whose end is part of an index frame: an append of
/// a new trailer (`tapdeck index`) that was cut short. The tail after it must begin like
/// an index frame; any other bytes after the last trailer leave the file damaged.
///
/// Appending, rather than rewriting the trailer in place, is what keeps such a file
/// readable at every moment: the old trailer is never touched, and no packet byte moves.
fn find_trailer_before_torn_tail(
    file: &(impl ReadAt + ?Sized),
    size: u64,
) -> Result<Option<(ChunkIndex, TrailerPlace)>, ContainerError> {
    let footer_magic = SEEKABLE_FOOTER_MAGIC.to_le_bytes();
    let lowest = size.saturating_sub(TORN_TAIL_SEARCH);
    // The bytes after a candidate must begin as an index frame does.
    let mut after = [0u8; 4];
    let mut buf = vec![0u8; TORN_TAIL_WINDOW.min(size) as usize];
    // Windows from the end backwards, overlapping by 3 bytes so no magic is cut in two.
    let mut window_end = size;
    while window_end > lowest {
        let from = window_end.saturating_sub(TORN_TAIL_WINDOW).max(lowest);
        let w = &mut buf[..(window_end - from) as usize];
        file.read_at_offset(w, from)?;
        // Candidate ends of a trailer: right after a seek table footer's magic.
        for end in (4..=w.len()).rev() {
            if w[end - 4..end] != footer_magic {
                continue;
            }
            let candidate = from + end as u64;
            let n = (size - candidate).min(4) as usize;
            if n == 0 {
                continue; // the end of the file: already tried
            }
            file.read_at_offset(&mut after[..n], candidate)?;
            if after[..n] == INDEX_MAGIC.to_le_bytes()[..n] {
                if let Ok(found) = ChunkIndex::read_trailer_ending_at(file, candidate) {
                    return Ok(Some(found));
                }
            }
        }
        if from == lowest {
            break;
        }
        window_end = from + 3;
    }
    Ok(None)
}

impl ChunkIndex {
    /// The trailer: our index frame, then the seek table (zstd seekable format).
    pub fn encode_trailer(&self) -> Vec<u8> {
        let mut body =
            Vec::with_capacity(16 + self.meta.len() + self.entries.len() * INDEX_ENTRY_LEN);
        body.extend_from_slice(INDEX_TAG);
        // Flow indexes only as one per entry (anything else would not read back).
        let with_flows = !self.entries.is_empty() && self.flows.len() == self.entries.len();
        // A summary only beside the flow indexes it sums up.
        let with_summary = with_flows && !self.summary.is_empty();
        let version: u16 = match (with_flows, with_summary) {
            (true, true) => 3,
            (true, false) => 2,
            _ => 1,
        };
        body.extend_from_slice(&version.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&(self.meta.len() as u32).to_le_bytes());
        body.extend_from_slice(self.meta.as_bytes());
        body.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for e in &self.entries {
            body.extend_from_slice(&e.frame_offset.to_le_bytes());
            body.extend_from_slice(&e.frame_len.to_le_bytes());
            body.extend_from_slice(&e.data_offset.to_le_bytes());
            body.extend_from_slice(&e.data_len.to_le_bytes());
            body.extend_from_slice(&e.first_ts_ns.to_le_bytes());
            body.extend_from_slice(&e.last_ts_ns.to_le_bytes());
            body.extend_from_slice(&e.packets.to_le_bytes());
            body.push(match e.kind {
                FrameKind::Header => 0,
                FrameKind::Packets => 1,
                FrameKind::Stats => 2,
            });
            body.push(0);
            body.extend_from_slice(&e.codec.to_bytes());
        }
        if with_flows {
            let extensions: u32 = if with_summary { 2 } else { 1 };
            body.extend_from_slice(&extensions.to_le_bytes());
            body.extend_from_slice(FLOWS_TAG);
            let len: usize = self.flows.iter().map(|f| 4 + f.len()).sum();
            body.extend_from_slice(&(len as u32).to_le_bytes());
            for f in &self.flows {
                body.extend_from_slice(&(f.len() as u32).to_le_bytes());
                body.extend_from_slice(f);
            }
            if with_summary {
                body.extend_from_slice(SUMMARY_TAG);
                body.extend_from_slice(&(self.summary.len() as u32).to_le_bytes());
                body.extend_from_slice(&self.summary);
            }
        }
        let mut out = Vec::with_capacity(body.len() + 32 + self.entries.len() * 8);
        out.extend_from_slice(&INDEX_MAGIC.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);

        // Seek table: one (compressed, decompressed) size pair per data frame, no checksums.
        let n = self.entries.len() as u32;
        out.extend_from_slice(&SEEK_TABLE_MAGIC.to_le_bytes());
        out.extend_from_slice(&(n * 8 + 9).to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.frame_len.to_le_bytes());
            out.extend_from_slice(&e.data_len.to_le_bytes());
        }
        out.extend_from_slice(&n.to_le_bytes());
        out.push(0);
        out.extend_from_slice(&SEEKABLE_FOOTER_MAGIC.to_le_bytes());
        out
    }

    /// Reads the index from the end of a stored file (for a plain container, from its
    /// sidecar, which holds the trailer alone). Every field comes through a [`Cursor`]
    /// and every length is checked against the file before it is used, so a damaged or
    /// hostile trailer is an error naming the offset and field, never a panic.
    pub fn read_trailer(file: &(impl ReadAt + ?Sized)) -> Result<ChunkIndex, ContainerError> {
        ChunkIndex::locate_trailer(file).map(|(index, _)| index)
    }

    /// As [`read_trailer`](Self::read_trailer), and where the trailer lies in the file.
    ///
    /// A file indexed after the fact (`tapdeck index`) has its newer trailer appended
    /// after the one it replaces, which stays valid until the new one is complete: the
    /// trailers before the last are skipped (skippable frames, as for `zstd -dc`). If the
    /// append was cut short (the process killed), the file ends in part of an index frame:
    /// then the last complete trailer before it is the file's (see
    /// [`find_trailer_before_torn_tail`]).
    pub fn locate_trailer(
        file: &(impl ReadAt + ?Sized),
    ) -> Result<(ChunkIndex, TrailerPlace), ContainerError> {
        let size = file.size()?;
        match ChunkIndex::read_trailer_ending_at(file, size) {
            Ok(found) => Ok(found),
            Err(ContainerError::Io(e)) => Err(ContainerError::Io(e)),
            Err(e) => find_trailer_before_torn_tail(file, size)?.ok_or(e),
        }
    }

    /// Reads the trailer that ends at `size` (the file's end, or where an interrupted
    /// append began).
    fn read_trailer_ending_at(
        file: &(impl ReadAt + ?Sized),
        size: u64,
    ) -> Result<(ChunkIndex, TrailerPlace), ContainerError> {
        if size < SEEKABLE_FOOTER_LEN {
            return Err(ContainerError::Truncated(0));
        }
        let footer_at = size - SEEKABLE_FOOTER_LEN;
        let mut footer = [0u8; SEEKABLE_FOOTER_LEN as usize];
        file.read_at_offset(&mut footer, footer_at)?;
        let footer = Cursor::new(&footer).based_at(footer_at);
        if footer.u32_at(5, "seek table footer magic")? != SEEKABLE_FOOTER_MAGIC {
            return Err(invalid(
                footer_at,
                "no seek table at the end of the file (incomplete file? run `tapdeck verify --repair`)",
            ));
        }
        let frames = u64::from(footer.u32_at(0, "seek table frame count")?);
        let table_len = SKIPPABLE_HEADER_LEN + frames * SEEK_ENTRY_LEN + SEEKABLE_FOOTER_LEN;
        if table_len > size || table_len > MAX_FRAME_LEN as u64 {
            return Err(invalid(
                footer_at,
                format!("seek table claims {frames} frames, more than the file can hold"),
            ));
        }
        let table_start = size - table_len;
        let mut table = vec![0u8; table_len as usize];
        file.read_at_offset(&mut table, table_start)?;
        let mut t = Cursor::new(&table).based_at(table_start);
        if t.u32("seek table magic")? != SEEK_TABLE_MAGIC
            || u64::from(t.u32("seek table length")?) != table_len - SKIPPABLE_HEADER_LEN
        {
            return Err(invalid(
                table_start,
                "seek table header does not match its footer",
            ));
        }
        // (compressed, decompressed) size of each frame; `frames` fit in the table read.
        let sizes = (0..frames)
            .map(|_| {
                Ok((
                    t.u32("seek table frame size")?,
                    t.u32("seek table data size")?,
                ))
            })
            .collect::<Result<Vec<(u32, u32)>, ShortInput>>()?;
        // At most 2^25 frames of at most 2^32 bytes each: the sum fits.
        let data_end: u64 = sizes.iter().map(|&(f, _)| u64::from(f)).sum();

        let Some((index_start, head)) = find_index_frame(file, data_end, table_start)? else {
            return Err(invalid(
                data_end.min(table_start),
                "chunk index frame missing before the seek table",
            ));
        };
        let body_at = index_start + SKIPPABLE_HEADER_LEN;
        let body_len = u64::from(
            Cursor::new(&head)
                .based_at(index_start)
                .u32_at(4, "chunk index length")?,
        );
        if body_at + body_len != table_start {
            return Err(invalid(
                index_start,
                format!(
                    "chunk index frame says it is {body_len} bytes long but the seek table starts {} bytes after its header",
                    table_start - body_at
                ),
            ));
        }
        if body_len > MAX_FRAME_LEN as u64 {
            return Err(invalid(
                index_start,
                format!("chunk index frame of {body_len} bytes, more than any tapdeck writes"),
            ));
        }
        let mut body = vec![0u8; body_len as usize];
        file.read_at_offset(&mut body, body_at)?;
        let index = ChunkIndex::decode_body(Cursor::new(&body).based_at(body_at))?;
        if index.entries.len() as u64 != frames {
            return Err(invalid(
                index_start,
                format!(
                    "chunk index lists {} frames but the seek table {frames}",
                    index.entries.len()
                ),
            ));
        }
        for (i, (e, &(frame_len, data_len))) in index.entries.iter().zip(&sizes).enumerate() {
            if (e.frame_len, e.data_len) != (frame_len, data_len) {
                return Err(invalid(
                    table_start + SKIPPABLE_HEADER_LEN + i as u64 * SEEK_ENTRY_LEN,
                    format!("seek table entry {i} disagrees with the chunk index"),
                ));
            }
        }
        let place = TrailerPlace {
            frames_end: data_end,
            index_at: index_start,
            end: size,
        };
        Ok((index, place))
    }

    /// Decodes the chunk index frame's body (after its 8-byte skippable header).
    fn decode_body(mut b: Cursor<'_>) -> Result<ChunkIndex, ContainerError> {
        let tag_at = b.offset();
        if b.bytes(4, "chunk index tag")? != INDEX_TAG {
            return Err(invalid(tag_at, "chunk index has the wrong tag"));
        }
        let version_at = b.offset();
        let version = b.u16("chunk index version")?;
        if !(1..=INDEX_VERSION).contains(&version) {
            return Err(invalid(
                version_at,
                format!("chunk index version {version}, this tapdeck reads {INDEX_VERSION}"),
            ));
        }
        b.skip(2, "chunk index reserved field")?;
        let meta_len = b.u32("chunk index metadata length")? as usize;
        let meta_at = b.offset();
        let meta = b.bytes(meta_len, "chunk index metadata")?;
        let meta = String::from_utf8(meta.to_vec())
            .map_err(|_| invalid(meta_at, "chunk index metadata is not UTF-8"))?;
        let count_at = b.offset();
        let count = b.u32("chunk index entry count")? as usize;
        let fits = match count.checked_mul(INDEX_ENTRY_LEN) {
            Some(n) if version == 1 => n == b.remaining(),
            Some(n) => n <= b.remaining(),
            None => false,
        };
        if !fits {
            return Err(invalid(
                count_at,
                format!(
                    "chunk index says {count} entries but holds {} bytes of them ({INDEX_ENTRY_LEN} each)",
                    b.remaining()
                ),
            ));
        }
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            entries.push(ChunkEntry::decode(&mut b, i)?);
        }
        let mut flows = Vec::new();
        let mut summary = Vec::new();
        if version >= 2 {
            // Version 2 has exactly the flow extension, version 3 the flow extension then
            // the summary, for a file with entries (a reader accepts only what the writer
            // writes: see `fuzzing::check_read`).
            let ext_at = b.offset();
            let want: u32 = if version == 3 { 2 } else { 1 };
            if b.u32("chunk index extension count")? != want || count == 0 {
                return Err(invalid(
                    ext_at,
                    format!("chunk index version {version} without its extensions"),
                ));
            }
            let tag_at = b.offset();
            if b.bytes(4, "chunk index extension tag")? != FLOWS_TAG {
                return Err(invalid(tag_at, "chunk index extension is not a flow index"));
            }
            let len = b.u32("chunk index extension length")? as usize;
            let body = Cursor::new(b.bytes(len, "chunk index extension")?).based_at(tag_at + 8);
            flows = decode_flows(body, count)?;
            if version == 3 {
                let tag_at = b.offset();
                if b.bytes(4, "chunk index extension tag")? != SUMMARY_TAG {
                    return Err(invalid(tag_at, "chunk index extension is not a summary"));
                }
                let len = b.u32("file summary length")? as usize;
                summary = b.bytes(len, "file summary")?.to_vec();
                if summary.is_empty() {
                    return Err(invalid(tag_at, "chunk index holds an empty file summary"));
                }
            }
            if b.remaining() != 0 {
                return Err(invalid(
                    b.offset(),
                    format!("{} bytes after the chunk index's extensions", b.remaining()),
                ));
            }
        }
        Ok(ChunkIndex {
            meta,
            entries,
            flows,
            summary,
        })
    }
}

/// The FLOW extension: one length-prefixed flow index per entry.
fn decode_flows(mut b: Cursor<'_>, count: usize) -> Result<Vec<Vec<u8>>, ContainerError> {
    // Each entry takes at least its 4-byte length: a count beyond that is a lie.
    let mut flows = Vec::with_capacity(count.min(b.remaining() / 4));
    for i in 0..count {
        let len = b.u32("flow index length")? as usize;
        let at = b.offset();
        let bytes = b.bytes(len, "flow index").map_err(|_| {
            invalid(
                at,
                format!("flow index of entry {i} runs past its extension"),
            )
        })?;
        flows.push(bytes.to_vec());
    }
    if b.remaining() != 0 {
        return Err(invalid(
            b.offset(),
            "flow index extension longer than its entries",
        ));
    }
    Ok(flows)
}

impl ChunkEntry {
    /// One 48-byte index entry: frame offset and length, data offset and length, first and
    /// last timestamp, packets, kind, a pad byte, codec (2 bytes).
    fn decode(b: &mut Cursor<'_>, i: usize) -> Result<ChunkEntry, ContainerError> {
        let frame_offset = b.u64("chunk index entry frame offset")?;
        let frame_len = b.u32("chunk index entry frame length")?;
        let data_offset = b.u64("chunk index entry data offset")?;
        let data_len = b.u32("chunk index entry data length")?;
        let first_ts_ns = b.u64("chunk index entry first timestamp")?;
        let last_ts_ns = b.u64("chunk index entry last timestamp")?;
        let packets = b.u32("chunk index entry packet count")?;
        let kind_at = b.offset();
        let kind = match b.u8("chunk index entry kind")? {
            0 => FrameKind::Header,
            1 => FrameKind::Packets,
            2 => FrameKind::Stats,
            k => {
                return Err(invalid(
                    kind_at,
                    format!("chunk index entry {i} has unknown kind {k}"),
                ))
            }
        };
        b.skip(1, "chunk index entry pad byte")?;
        let codec_at = b.offset();
        let codec = Codec::from_bytes([
            b.u8("chunk index entry codec")?,
            b.u8("chunk index entry codec level")?,
        ])
        .ok_or_else(|| {
            invalid(
                codec_at,
                format!("chunk index entry {i} has an unknown codec"),
            )
        })?;
        Ok(ChunkEntry {
            frame_offset,
            frame_len,
            data_offset,
            data_len,
            first_ts_ns,
            last_ts_ns,
            packets,
            kind,
            codec,
        })
    }
}

/// Random-access input the trailer is read from: a file, or bytes in memory (fuzzing).
pub trait ReadAt {
    fn size(&self) -> std::io::Result<u64>;
    fn read_at_offset(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
}

impl ReadAt for File {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn read_at_offset(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

impl ReadAt for [u8] {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.len() as u64)
    }
    fn read_at_offset(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let src = start
            .checked_add(buf.len())
            .and_then(|end| self.get(start..end))
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// Walks the frames of a (possibly partial) container file from its start: returns each
/// complete frame's (offset, length) and the offset where the complete frames end. Used to
/// repair a file whose writer died: everything up to that offset is intact.
pub fn scan_frames(file: &File) -> Result<(Vec<(u64, usize)>, u64), ContainerError> {
    let size = file.metadata()?.len();
    let mut frames = Vec::new();
    let mut at = 0u64;
    let mut buf = Vec::new();
    while at < size {
        // Frames are at most MAX_FRAME_LEN; read the header first, then the whole frame.
        let want = (size - at).min(MAX_FRAME_LEN as u64) as usize;
        buf.resize(want.min(64), 0);
        file.read_exact_at(&mut buf, at)?;
        let mut len = frame_len(&buf);
        if matches!(len, Ok(None)) && want > buf.len() {
            buf.resize(want, 0);
            file.read_exact_at(&mut buf, at)?;
            len = frame_len(&buf);
        }
        match len {
            Ok(Some(n)) => {
                // frame_len found a whole frame, so its magic is there.
                let magic = Cursor::new(&buf).u32_at(0, "frame magic").unwrap_or(0);
                if magic & SKIPPABLE_MASK == SKIPPABLE_BASE {
                    break; // the trailer starts here
                }
                frames.push((at, n));
                at += n as u64;
            }
            Ok(None) | Err(_) => break,
        }
    }
    Ok((frames, at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn sample(len: usize) -> Vec<u8> {
        // Half pseudo-random, half zeros: compressible like real traffic.
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        (0..len)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if (i / 700) & 1 == 0 {
                    x as u8
                } else {
                    0
                }
            })
            .collect()
    }

    fn roundtrip(container: Container, codec: Codec, data: &[u8]) -> Vec<u8> {
        let mut enc = FrameEncoder::new(container);
        let mut frame = Vec::new();
        enc.encode(codec, data, &mut frame).unwrap();
        if container != Container::Plain {
            assert_eq!(
                frame_len(&frame).unwrap(),
                Some(frame.len()),
                "{container:?} {codec}"
            );
            assert_eq!(frame_len(&frame[..frame.len() - 1]).unwrap(), None);
        }
        let mut out = Vec::new();
        decode_frame(container, &frame, data.len(), &mut out).unwrap();
        assert_eq!(out, data);
        frame
    }

    #[test]
    fn every_codec_roundtrips_in_every_container() {
        for len in [
            0,
            1,
            1000,
            ZSTD_MAX_BLOCK,
            ZSTD_MAX_BLOCK + 1,
            4 * 1024 * 1024 + 17,
        ] {
            let data = sample(len);
            for container in [Container::Zstd, Container::Lz4, Container::Plain] {
                for codec in [Codec::Raw, Codec::Lz4, Codec::Zstd(1), Codec::Zstd(6)] {
                    roundtrip(container, codec, &data);
                }
            }
        }
    }

    /// The encoder appends zstd frames in place through zstd's safe buffer API; the frames
    /// are byte for byte those of zstd's one-shot `compress` (so stored files do not change),
    /// and what `out` already held is kept.
    #[test]
    fn zstd_frames_append_in_place_as_one_shot_compression_makes_them() {
        let mut enc = FrameEncoder::new(Container::Zstd);
        let mut out = b"kept".to_vec();
        // Levels come back after others: each keeps its own warm context.
        for (len, level) in [
            (0, 3),
            (1, 3),
            (300_000, 1),
            (300_000, 6),
            (5 << 20, -3),
            (300_000, 3),
            (300_000, 1),
        ] {
            let data = sample(len);
            let mut c = zstd::bulk::Compressor::new(i32::from(level)).unwrap();
            c.include_checksum(true).unwrap();
            c.include_contentsize(true).unwrap();
            let expected = c.compress(&data).unwrap();
            let start = out.len();
            enc.encode(Codec::Zstd(level), &data, &mut out).unwrap();
            assert_eq!(&out[start..], &expected[..], "{len} bytes at level {level}");
        }
        assert_eq!(&out[..4], b"kept");
    }

    /// The recorder times a rung only once its encoder is warm (see `is_warm`).
    #[test]
    fn an_encoder_is_warm_for_a_codec_once_it_has_used_it() {
        let mut e = FrameEncoder::new(Container::Zstd);
        let data = sample(100_000);
        assert!(e.is_warm(Codec::Raw));
        for codec in [Codec::Zstd(3), Codec::Zstd(1), Codec::Lz4] {
            assert!(!e.is_warm(codec), "{codec}");
            e.encode(codec, &data, &mut Vec::new()).unwrap();
            assert!(e.is_warm(codec), "{codec}");
        }
        assert!(!e.is_warm(Codec::Zstd(2)));
        // An LZ4 container stores zstd rungs as LZ4: warm together.
        let mut e = FrameEncoder::new(Container::Lz4);
        assert!(!e.is_warm(Codec::Zstd(3)));
        e.encode(Codec::Lz4, &data, &mut Vec::new()).unwrap();
        assert!(e.is_warm(Codec::Zstd(3)));
    }

    /// LZ4 frames are written around lz4_flex's block compressor with a reused buffer: a
    /// warm encoder makes the same bytes as a fresh one, lz4_flex's frame reader (the one
    /// `decode_frame` uses, and a second implementation of the format) reads them with their
    /// checksums, and a block that does not shrink is stored as it is.
    #[test]
    fn lz4_frames_from_a_warm_encoder_equal_a_fresh_ones_and_read_back() {
        let mut warm = FrameEncoder::new(Container::Lz4);
        let mut noise = vec![0u8; 300_000];
        let mut x = 0x9E37_79B9u32;
        for b in &mut noise {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        for data in [
            sample(9 << 20),
            sample(1000),
            noise.clone(),
            Vec::new(),
            sample(300_000),
        ] {
            let mut a = Vec::new();
            warm.encode(Codec::Lz4, &data, &mut a).unwrap();
            let mut b = Vec::new();
            FrameEncoder::new(Container::Lz4)
                .encode(Codec::Lz4, &data, &mut b)
                .unwrap();
            assert_eq!(a, b, "{} bytes", data.len());
            let mut back = Vec::new();
            lz4_flex::frame::FrameDecoder::new(&a[..])
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(back, data);
            // A flipped byte in the last block fails the content checksum (or the block).
            if data.len() > 100 {
                let mut bad = a.clone();
                let at = bad.len() - 12;
                bad[at] ^= 0x40;
                let mut out = Vec::new();
                assert!(
                    lz4_flex::frame::FrameDecoder::new(&bad[..])
                        .read_to_end(&mut out)
                        .is_err()
                        || out != data
                );
            }
        }
        // Noise does not shrink: one stored block (high bit set), 4 bytes of size.
        let mut frame = Vec::new();
        warm.encode(Codec::Lz4, &noise, &mut frame).unwrap();
        let size = u32::from_le_bytes(frame[15..19].try_into().unwrap());
        assert_eq!(size, noise.len() as u32 | 0x8000_0000);
    }

    #[test]
    fn compressing_codecs_halve_half_random_data() {
        let data = sample(1 << 20);
        for codec in [Codec::Lz4, Codec::Zstd(1)] {
            let frame = roundtrip(Container::Zstd, codec, &data);
            assert!(
                frame.len() < data.len() * 6 / 10,
                "{codec}: {}",
                frame.len()
            );
        }
    }

    #[test]
    fn zstd_library_decodes_raw_frames_and_mixed_streams() {
        // A whole zstd container is one stream: raw, compressed and lz4 frames, then the
        // trailer's skippable frames. zstd's own decoder must read the zstd parts.
        let data = sample(300_000);
        let mut enc = FrameEncoder::new(Container::Zstd);
        let mut stream = Vec::new();
        enc.encode(Codec::Raw, &data, &mut stream).unwrap();
        enc.encode(Codec::Zstd(3), &data, &mut stream).unwrap();
        let index = ChunkIndex::default();
        stream.extend_from_slice(&index.encode_trailer());
        let out = zstd::stream::decode_all(&stream[..]).unwrap();
        assert_eq!(out.len(), 2 * data.len());
        assert!(out[..data.len()] == data[..] && out[data.len()..] == data[..]);
    }

    #[test]
    fn codec_names_parse() {
        assert_eq!("zstd:6".parse::<Codec>().unwrap(), Codec::Zstd(6));
        assert_eq!("zstd:-1".parse::<Codec>().unwrap(), Codec::Zstd(-1));
        assert_eq!("LZ4".parse::<Codec>().unwrap(), Codec::Lz4);
        assert_eq!("raw".parse::<Codec>().unwrap(), Codec::Raw);
        assert!("zstd:99".parse::<Codec>().is_err());
        assert!("gzip".parse::<Codec>().is_err());
        for c in [Codec::Raw, Codec::Lz4, Codec::Zstd(6)] {
            assert_eq!(c.to_string().parse::<Codec>().unwrap(), c);
        }
    }

    fn entry(i: u64) -> ChunkEntry {
        ChunkEntry {
            frame_offset: i * 100,
            frame_len: 100,
            data_offset: i * 300,
            data_len: 300,
            first_ts_ns: i * 1_000,
            last_ts_ns: i * 1_000 + 999,
            packets: 3,
            kind: if i == 0 {
                FrameKind::Header
            } else {
                FrameKind::Packets
            },
            codec: if i % 2 == 0 {
                Codec::Zstd(-3)
            } else {
                Codec::Lz4
            },
        }
    }

    #[test]
    fn trailer_roundtrips_through_a_file_and_zeekstd_reads_its_seek_table() {
        let mut index = ChunkIndex {
            meta: r#"{"stream":0}"#.into(),
            entries: (0..5).map(entry).collect(),
            flows: Vec::new(),
            summary: Vec::new(),
        };
        // Without flow indexes: version 1, as files before them were written.
        let v1 = index.encode_trailer();
        assert_eq!(&v1[12..14], &1u16.to_le_bytes());
        index.flows = vec![vec![], vec![1, 2, 3], vec![], vec![4; 300], vec![5]];
        let v2 = index.encode_trailer();
        assert_eq!(&v2[12..14], &2u16.to_le_bytes());
        for (trailer, want) in [
            (
                v1,
                ChunkIndex {
                    flows: Vec::new(),
                    ..index.clone()
                },
            ),
            (v2, index.clone()),
        ] {
            let mut file = tempfile_with(&[vec![0xAB; 500], trailer].concat());
            assert_eq!(ChunkIndex::read_trailer(file.as_file_mut()).unwrap(), want);
        }
        let file = tempfile_with(&[vec![0xAB; 500], index.encode_trailer()].concat());
        let bytes = std::fs::read(file.path()).unwrap();
        let mut cursor = std::io::Cursor::new(bytes);
        let table = zeekstd::SeekTable::from_seekable(&mut cursor).unwrap();
        assert_eq!(table.num_frames(), 5);
        for i in 0..5 {
            assert_eq!(table.frame_start_comp(i).unwrap(), i as u64 * 100);
            assert_eq!(table.frame_start_decomp(i).unwrap(), i as u64 * 300);
        }
    }

    #[test]
    fn damaged_trailers_are_errors_not_panics() {
        let index = ChunkIndex {
            meta: "{}".into(),
            entries: (0..3).map(entry).collect(),
            flows: vec![vec![9; 20], vec![], vec![1]],
            summary: Vec::new(),
        };
        let whole = [vec![7u8; 300], index.encode_trailer()].concat();
        for cut in 0..whole.len() {
            let file = tempfile_with(&whole[..cut]);
            assert!(ChunkIndex::read_trailer(file.as_file()).is_err());
        }
        for flip in 300..whole.len() {
            let mut bad = whole.clone();
            bad[flip] ^= 0x41;
            let _ = ChunkIndex::read_trailer(tempfile_with(&bad).as_file());
        }
    }

    #[test]
    fn scan_stops_at_the_first_incomplete_frame() {
        let data = sample(200_000);
        let mut enc = FrameEncoder::new(Container::Zstd);
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for codec in [Codec::Raw, Codec::Zstd(1), Codec::Lz4] {
            enc.encode(codec, &data, &mut bytes).unwrap();
            ends.push(bytes.len() as u64);
        }
        let (frames, end) = scan_frames(tempfile_with(&bytes).as_file()).unwrap();
        assert_eq!((frames.len(), end), (3, ends[2]));
        let (frames, end) =
            scan_frames(tempfile_with(&bytes[..bytes.len() - 10]).as_file()).unwrap();
        assert_eq!((frames.len(), end), (2, ends[1]));
        // Zero padding left by an interrupted O_DIRECT writer is not a frame.
        let mut padded = bytes.clone();
        padded.extend_from_slice(&[0; 4096]);
        assert_eq!(
            scan_frames(tempfile_with(&padded).as_file()).unwrap().1,
            ends[2]
        );
    }

    /// A file without a flow index, then the same index with one appended after it (what
    /// `tapdeck index` does): the appended trailer is the file's, and zeekstd still seeks.
    fn indexed_after_the_fact() -> (ChunkIndex, ChunkIndex, Vec<u8>, usize) {
        let old = ChunkIndex {
            meta: r#"{"stream":0}"#.into(),
            entries: (0..5).map(entry).collect(),
            flows: Vec::new(),
            summary: Vec::new(),
        };
        let new = ChunkIndex {
            flows: vec![vec![], vec![1, 2, 3], vec![7; 5000], vec![4; 300], vec![]],
            ..old.clone()
        };
        let before = [vec![0xAB; 500], old.encode_trailer()].concat();
        let at = before.len();
        (
            old,
            new.clone(),
            [before, new.encode_trailer()].concat(),
            at,
        )
    }

    #[test]
    fn an_appended_trailer_replaces_the_one_before_it() {
        let (old, new, file, at) = indexed_after_the_fact();
        let (read, place) = ChunkIndex::locate_trailer(&file[..]).unwrap();
        assert_eq!(read, new);
        let place_want = TrailerPlace {
            frames_end: 500,
            index_at: at as u64,
            end: file.len() as u64,
        };
        assert_eq!(place, place_want);
        assert!(crate::fuzzing::check_read(&new, &file, true).is_none());
        let (read, place) = ChunkIndex::locate_trailer(&file[..at]).unwrap();
        assert_eq!((read, place.index_at), (old, 500));
        let mut cursor = std::io::Cursor::new(file);
        let table = zeekstd::SeekTable::from_seekable(&mut cursor).unwrap();
        assert_eq!(table.num_frames(), 5);
        assert_eq!(table.frame_start_comp(4).unwrap(), 400);
    }

    /// A kill at any moment of the append leaves the file ending anywhere in the new
    /// trailer: every such file reads as the old index, up to the old trailer's end.
    #[test]
    fn an_append_cut_short_anywhere_reads_as_the_trailer_before_it() {
        let (old, new, file, at) = indexed_after_the_fact();
        for cut in at..file.len() {
            let (read, place) = ChunkIndex::locate_trailer(&file[..cut])
                .unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
            assert_eq!(read, old, "cut at {cut}");
            assert_eq!(place.end, at as u64, "cut at {cut}");
        }
        assert_eq!(ChunkIndex::read_trailer(&file[..]).unwrap(), new);
    }

    /// An interrupted append longer than one read window (a big index) is looked behind.
    #[test]
    fn a_long_append_cut_short_reads_as_the_trailer_before_it() {
        let (old, _, file, at) = indexed_after_the_fact();
        let big = ChunkIndex {
            flows: vec![vec![], vec![9; 3 << 20], vec![], vec![], vec![1]],
            ..old.clone()
        };
        let trailer = big.encode_trailer();
        for cut in [(1 << 20) - 2, (5 << 19) + 1, trailer.len() - 1] {
            let torn = [&file[..at], &trailer[..cut]].concat();
            let (read, place) = ChunkIndex::locate_trailer(&torn[..]).unwrap();
            assert_eq!((read, place.end), (old.clone(), at as u64), "cut at {cut}");
        }
    }

    #[test]
    fn other_bytes_after_a_trailer_are_still_damage() {
        let (_, _, file, at) = indexed_after_the_fact();
        for junk in [&b"\x00"[..], b"garbage", &[0x5B, 0x2A, 0x4D, 0x19]] {
            let damaged = [&file[..at], junk].concat();
            assert!(
                ChunkIndex::read_trailer(&damaged[..]).is_err(),
                "{junk:?} after the trailer"
            );
        }
        // A replaced trailer must be whole skippable frames: one cut short is damage.
        let short = [&file[..at - 1], &file[at..]].concat();
        assert!(ChunkIndex::read_trailer(&short[..]).is_err());
    }

    fn tempfile_with(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        f
    }
}

/// Hostile trailers: the crash from issue 14, every field of real trailers damaged, and the
/// structure-aware generator the `trailer` fuzz target runs, here over seeded inputs.
#[cfg(test)]
mod hostile_trailers {
    use super::*;
    use crate::fuzzing::{check_read, check_trailer, draw_index, trailer_fields, Draw};
    use std::io::Write;

    /// Issue 14: an index frame whose 4-byte body is only the tag, then a valid empty seek
    /// table (the issue's command; it calls the file 34 bytes, the command makes 29).
    /// `decode_body` read the version at bytes 4..6 and panicked.
    #[test]
    fn an_index_body_of_only_its_tag_is_an_error() {
        let mut file = Vec::new();
        file.extend_from_slice(&INDEX_MAGIC.to_le_bytes());
        file.extend_from_slice(&4u32.to_le_bytes());
        file.extend_from_slice(b"TDCI");
        file.extend_from_slice(&SEEK_TABLE_MAGIC.to_le_bytes());
        file.extend_from_slice(&9u32.to_le_bytes());
        file.extend_from_slice(&0u32.to_le_bytes());
        file.push(0);
        file.extend_from_slice(&SEEKABLE_FOOTER_MAGIC.to_le_bytes());
        assert_eq!(file.len(), 29);
        let e = ChunkIndex::read_trailer(&file[..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "at byte offset 12: chunk index version needs 2 bytes but only 0 remain (the trailer is damaged)"
        );
        // The same through a real file.
        let f = tempfile_with(&file);
        assert!(matches!(
            ChunkIndex::read_trailer(f.as_file()),
            Err(ContainerError::Invalid { offset: 12, .. })
        ));
    }

    fn indexes() -> Vec<ChunkIndex> {
        let mut out = vec![ChunkIndex::default()];
        for seed in [1u8, 7, 42, 200] {
            let bytes: Vec<u8> = (0..400u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed)
                .collect();
            let mut index = draw_index(&mut Draw::new(&bytes));
            index.entries.truncate(3);
            index.flows.truncate(3);
            out.push(index);
        }
        out.push(ChunkIndex {
            meta: r#"{"stream":0}"#.into(),
            entries: vec![ChunkEntry {
                frame_offset: 0,
                frame_len: 40,
                data_offset: 0,
                data_len: 96,
                first_ts_ns: 0,
                last_ts_ns: 0,
                packets: 0,
                kind: FrameKind::Header,
                codec: Codec::Zstd(3),
            }],
            flows: Vec::new(),
            summary: Vec::new(),
        });
        out
    }

    /// Each index as a container (data frames, then the trailer) and as a sidecar.
    fn files(index: &ChunkIndex) -> Vec<(Vec<u8>, usize)> {
        let data: u64 = index.entries.iter().map(|e| u64::from(e.frame_len)).sum();
        let trailer = index.encode_trailer();
        vec![
            (
                [vec![0x5A; data as usize], trailer.clone()].concat(),
                data as usize,
            ),
            (trailer, 0),
        ]
    }

    #[test]
    fn every_field_set_to_edge_values_is_an_error_or_a_correct_read() {
        let (mut errors, mut reads) = (0, 0);
        for index in indexes() {
            for (file, prefix) in files(&index) {
                assert!(check_read(&index, &file, true).is_none());
                let lens: Vec<u64> = trailer_fields(&index)
                    .iter()
                    .map(|f| f.width as u64)
                    .collect();
                for f in trailer_fields(&index) {
                    let w = f.width.min(8);
                    if w == 0 {
                        continue;
                    }
                    let at = prefix + f.at;
                    let mut old = [0u8; 8];
                    old[..w].copy_from_slice(&file[at..at + w]);
                    let old = u64::from_le_bytes(old);
                    let mut values = vec![
                        0,
                        1,
                        u64::MAX,
                        u64::MAX >> 1,
                        old.wrapping_add(1),
                        old.wrapping_sub(1),
                        old.wrapping_add(48),
                        old ^ 0x80,
                        file.len() as u64,
                        prefix as u64,
                    ];
                    values.extend(&lens);
                    for v in values {
                        let mut bad = file.clone();
                        bad[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
                        match check_read(&index, &bad, bad == file) {
                            Some(_) => errors += 1,
                            None => reads += 1,
                        }
                    }
                }
            }
        }
        // Most damage is caught; some (a timestamp, a packet count) is a different but
        // correctly read index.
        assert!(
            errors > 1000 && reads > 100,
            "{errors} errors, {reads} reads"
        );
    }

    #[test]
    fn every_truncation_flip_and_lost_prefix_is_an_error_or_a_correct_read() {
        for index in indexes() {
            for (file, _) in files(&index) {
                for cut in 0..file.len() {
                    // Cut at the end, the trailer is gone; cut at the start, only frames
                    // before the index are lost, which the index then places wrongly.
                    assert!(check_read(&index, &file[..cut], false).is_some());
                    check_read(&index, &file[cut..], cut == 0);
                    for bit in [0x01, 0x10, 0x80] {
                        let mut bad = file.clone();
                        bad[cut] ^= bit;
                        check_read(&index, &bad, false);
                    }
                }
            }
        }
    }

    /// The `trailer` fuzz target's generator over a few thousand seeded inputs: damage
    /// reaches every layer (footer, seek table, index header, entries) and nothing panics.
    #[test]
    fn seeded_structure_aware_trailers() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut seen = std::collections::BTreeSet::new();
        let (mut errors, mut cases) = (0, 0);
        for _ in 0..5000 {
            let len = (next() % 160) as usize;
            let input: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            cases += 1;
            if let Some(e) = check_trailer(&input) {
                errors += 1;
                let what = e.to_string();
                for layer in [
                    "seek table claims",
                    "no seek table",
                    "seek table header",
                    "chunk index frame missing",
                    "chunk index frame says",
                    "wrong tag",
                    "chunk index version",
                    "metadata",
                    "entries but holds",
                    "unknown kind",
                    "unknown codec",
                    "seek table entry",
                    "chunk index lists",
                ] {
                    if what.contains(layer) {
                        seen.insert(layer);
                    }
                }
            }
        }
        assert!(errors > cases / 4, "{errors} errors in {cases} cases");
        assert!(seen.len() >= 11, "damage reached only: {seen:?}");
    }

    fn tempfile_with(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        f
    }
}
