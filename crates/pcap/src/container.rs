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
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;

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
const INDEX_VERSION: u16 = 1;
/// zstd raw blocks hold at most 128 KiB each.
const ZSTD_MAX_BLOCK: usize = 128 * 1024;
/// LZ4 frames we write use 4 MiB blocks.
const LZ4_MAX_BLOCK: usize = 4 * 1024 * 1024;
/// Upper bound on any single frame we accept when reading (hostile input).
pub const MAX_FRAME_LEN: usize = 256 * 1024 * 1024;
const INDEX_ENTRY_LEN: usize = 48;

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
    type Err = String;
    fn from_str(s: &str) -> Result<Codec, String> {
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
                level.map(Codec::Zstd).ok_or_else(|| {
                    format!("unknown codec '{s}': use raw, lz4, zstd or zstd:LEVEL (LEVEL -7..22)")
                })
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

fn invalid(offset: u64, what: impl Into<String>) -> ContainerError {
    ContainerError::Invalid {
        offset,
        what: what.into(),
    }
}

/// Encodes chunks for one container; holds reusable compression state, so keep one per
/// compressor thread.
pub struct FrameEncoder {
    container: Container,
    zstd: Option<(i8, zstd::bulk::Compressor<'static>)>,
}

impl FrameEncoder {
    pub fn new(container: Container) -> FrameEncoder {
        FrameEncoder {
            container,
            zstd: None,
        }
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
                out.reserve(data.len() + 64 + data.len() / ZSTD_MAX_BLOCK * 3);
                raw_frame_pieces(self.container, data, |piece| out.extend_from_slice(piece));
            }
            (_, Codec::Lz4) => {
                let info = lz4_flex::frame::FrameInfo::new()
                    .block_size(lz4_flex::frame::BlockSize::Max4MB)
                    .content_size(Some(data.len() as u64))
                    .content_checksum(true);
                let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, &mut *out);
                enc.write_all(data)?;
                enc.finish().map_err(std::io::Error::other)?;
            }
            (_, Codec::Zstd(level)) => {
                let compressor = match &mut self.zstd {
                    Some((l, c)) if *l == level => c,
                    slot => {
                        let mut c = zstd::bulk::Compressor::new(i32::from(level))?;
                        c.include_checksum(true)?;
                        c.include_contentsize(true)?;
                        &mut slot.insert((level, c)).1
                    }
                };
                let start = out.len();
                out.reserve(zstd::zstd_safe::compress_bound(data.len()));
                let spare = out.spare_capacity_mut();
                // SAFETY: the compressor only writes into the buffer and reports how much;
                // exposing uninitialised capacity as &mut [u8] is what zstd's API expects.
                let spare = unsafe {
                    std::slice::from_raw_parts_mut(spare.as_mut_ptr() as *mut u8, spare.len())
                };
                let n = compressor.compress_to_buffer(data, spare)?;
                // SAFETY: `n` bytes past `start` were just initialised by the compressor.
                unsafe { out.set_len(start + n) };
            }
        }
        Ok(codec)
    }
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
            let mut header = [0u8; 15];
            header[..4].copy_from_slice(&LZ4_MAGIC.to_le_bytes());
            // FLG: version 01, independent blocks, content size present; BD: 4 MiB blocks.
            header[4] = 0x68;
            header[5] = 0x70;
            header[6..14].copy_from_slice(&(data.len() as u64).to_le_bytes());
            header[14] = (xxhash_rust::xxh32::xxh32(&header[4..14], 0) >> 8) as u8;
            emit(&header);
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
) -> Result<(), String> {
    if container == Container::Plain {
        out.extend_from_slice(frame);
        return Ok(());
    }
    if expected_len > MAX_FRAME_LEN {
        return Err(format!(
            "frame claims {expected_len} bytes of data, more than any chunk tapdeck writes"
        ));
    }
    let start = out.len();
    match frame
        .get(..4)
        .map(|m| u32::from_le_bytes(m.try_into().unwrap()))
    {
        Some(ZSTD_MAGIC) => {
            let mut dec =
                zstd::stream::read::Decoder::with_buffer(frame).map_err(|e| e.to_string())?;
            (&mut dec)
                .take(expected_len as u64 + 1)
                .read_to_end(out)
                .map_err(|e| format!("zstd frame does not decode: {e}"))?;
        }
        Some(LZ4_MAGIC) => {
            let dec = lz4_flex::frame::FrameDecoder::new(frame);
            dec.take(expected_len as u64 + 1)
                .read_to_end(out)
                .map_err(|e| format!("lz4 frame does not decode: {e}"))?;
        }
        Some(m) => return Err(format!("frame starts with unknown magic {m:#010x}")),
        None => return Err("frame shorter than its magic number".into()),
    }
    let got = out.len() - start;
    if got != expected_len {
        return Err(format!(
            "frame decodes to {got} bytes, the index says {expected_len}"
        ));
    }
    Ok(())
}

/// Length of the frame at the start of `buf` (zstd, LZ4 or skippable), found by walking its
/// block headers without decoding. `Ok(None)` means `buf` ends before the frame does.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, String> {
    let Some(magic) = read_u32(buf, 0) else {
        return Ok(None);
    };
    let len = match magic {
        ZSTD_MAGIC => zstd_frame_len(buf)?,
        LZ4_MAGIC => lz4_frame_len(buf)?,
        m if m & SKIPPABLE_MASK == SKIPPABLE_BASE => read_u32(buf, 4).map(|n| 8 + n as usize),
        m => return Err(format!("unknown frame magic {m:#010x}")),
    };
    Ok(len.filter(|&n| n <= buf.len()))
}

fn zstd_frame_len(buf: &[u8]) -> Result<Option<usize>, String> {
    let Some(&fhd) = buf.get(4) else {
        return Ok(None);
    };
    if fhd & 0x08 != 0 {
        return Err("zstd frame header has its reserved bit set".into());
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
        let Some(header) = buf.get(pos..pos + 3) else {
            return Ok(None);
        };
        let header = u32::from(header[0]) | u32::from(header[1]) << 8 | u32::from(header[2]) << 16;
        let size = (header >> 3) as usize;
        pos += 3 + match (header >> 1) & 3 {
            0 | 2 => size,
            1 => 1,
            _ => return Err("zstd block of reserved type".into()),
        };
        if pos > MAX_FRAME_LEN {
            return Err("zstd frame longer than any tapdeck writes".into());
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

fn lz4_frame_len(buf: &[u8]) -> Result<Option<usize>, String> {
    let Some(&flg) = buf.get(4) else {
        return Ok(None);
    };
    if flg >> 6 != 1 {
        return Err("lz4 frame of an unknown version".into());
    }
    let block_checksum = flg & 0x10 != 0;
    let mut pos = 7 + if flg & 0x08 != 0 { 8 } else { 0 } + if flg & 0x01 != 0 { 4 } else { 0 };
    loop {
        let Some(size) = read_u32(buf, pos) else {
            return Ok(None);
        };
        pos += 4;
        if size == 0 {
            break;
        }
        pos += (size & 0x7FFF_FFFF) as usize + if block_checksum { 4 } else { 0 };
        if pos > MAX_FRAME_LEN {
            return Err("lz4 frame longer than any tapdeck writes".into());
        }
    }
    if flg & 0x04 != 0 {
        pos += 4;
    }
    Ok(Some(pos))
}

fn read_u32(buf: &[u8], at: usize) -> Option<u32> {
    buf.get(at..at.checked_add(4)?)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
}

fn read_u64(buf: &[u8], at: usize) -> Option<u64> {
    buf.get(at..at.checked_add(8)?)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
}

impl ChunkIndex {
    /// The trailer: our index frame, then the seek table (zstd seekable format).
    pub fn encode_trailer(&self) -> Vec<u8> {
        let mut body =
            Vec::with_capacity(16 + self.meta.len() + self.entries.len() * INDEX_ENTRY_LEN);
        body.extend_from_slice(INDEX_TAG);
        body.extend_from_slice(&INDEX_VERSION.to_le_bytes());
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
    /// sidecar, which holds the trailer alone).
    pub fn read_trailer(file: &(impl ReadAt + ?Sized)) -> Result<ChunkIndex, ContainerError> {
        let size = file.size()?;
        let mut footer = [0u8; 9];
        if size < 9 {
            return Err(ContainerError::Truncated(0));
        }
        file.read_at_offset(&mut footer, size - 9)?;
        if read_u32(&footer, 5) != Some(SEEKABLE_FOOTER_MAGIC) {
            return Err(invalid(
                size - 9,
                "no seek table at the end of the file (incomplete file? run `tapdeck verify --repair`)",
            ));
        }
        let frames = u64::from(read_u32(&footer, 0).unwrap());
        let table_len = 8 + frames * 8 + 9;
        if table_len > size || table_len > MAX_FRAME_LEN as u64 {
            return Err(invalid(
                size - 9,
                format!("seek table claims {frames} frames, more than the file can hold"),
            ));
        }
        let table_start = size - table_len;
        let mut table = vec![0u8; table_len as usize];
        file.read_at_offset(&mut table, table_start)?;
        if read_u32(&table, 0) != Some(SEEK_TABLE_MAGIC)
            || u64::from(read_u32(&table, 4).unwrap()) != table_len - 8
        {
            return Err(invalid(
                table_start,
                "seek table header does not match its footer",
            ));
        }
        let data_end: u64 = (0..frames as usize)
            .map(|i| u64::from(read_u32(&table, 8 + i * 8).unwrap()))
            .sum();
        // A container file has every data frame before its index; a sidecar has none.
        let mut head = [0u8; 8];
        let mut index_start = 0;
        for start in [data_end, 0] {
            if start < table_start {
                file.read_at_offset(&mut head, start)?;
                if read_u32(&head, 0) == Some(INDEX_MAGIC) {
                    index_start = start;
                    break;
                }
            }
        }
        if read_u32(&head, 0) != Some(INDEX_MAGIC) {
            return Err(invalid(
                data_end.min(table_start),
                "chunk index frame missing before the seek table",
            ));
        }
        let body_len = u64::from(read_u32(&head, 4).unwrap());
        if index_start + 8 + body_len != table_start {
            return Err(invalid(
                index_start,
                "chunk index frame length does not reach the seek table",
            ));
        }
        let mut body = vec![0u8; body_len as usize];
        file.read_at_offset(&mut body, index_start + 8)?;
        let index = ChunkIndex::decode_body(&body)
            .map_err(|(at, what)| invalid(index_start + 8 + at as u64, what))?;
        if index.entries.len() as u64 != frames {
            return Err(invalid(
                index_start,
                "chunk index and seek table disagree on the number of frames",
            ));
        }
        for (i, e) in index.entries.iter().enumerate() {
            if read_u32(&table, 8 + i * 8) != Some(e.frame_len)
                || read_u32(&table, 12 + i * 8) != Some(e.data_len)
            {
                return Err(invalid(
                    table_start,
                    format!("seek table entry {i} disagrees with the chunk index"),
                ));
            }
        }
        Ok(index)
    }

    fn decode_body(body: &[u8]) -> Result<ChunkIndex, (usize, String)> {
        if body.get(..4) != Some(INDEX_TAG) {
            return Err((0, "chunk index has the wrong tag".into()));
        }
        let version = u16::from_le_bytes([body[4], body[5]]);
        if version != INDEX_VERSION {
            return Err((
                4,
                format!("chunk index version {version}, this tapdeck reads {INDEX_VERSION}"),
            ));
        }
        let meta_len = read_u32(body, 8).ok_or((8, "chunk index truncated".to_string()))? as usize;
        let meta = body
            .get(12..12 + meta_len)
            .ok_or((12, "chunk index metadata truncated".to_string()))?;
        let meta = String::from_utf8(meta.to_vec())
            .map_err(|_| (12, "chunk index metadata is not UTF-8".to_string()))?;
        let at = 12 + meta_len;
        let count = read_u32(body, at).ok_or((at, "chunk index truncated".to_string()))? as usize;
        let entries_at = at + 4;
        if body.len() != entries_at + count * INDEX_ENTRY_LEN {
            return Err((
                at,
                format!(
                    "chunk index says {count} entries but holds {} bytes of them",
                    body.len() - entries_at
                ),
            ));
        }
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            let e = entries_at + i * INDEX_ENTRY_LEN;
            let kind = match body[e + 44] {
                0 => FrameKind::Header,
                1 => FrameKind::Packets,
                2 => FrameKind::Stats,
                k => {
                    return Err((
                        e + 44,
                        format!("chunk index entry {i} has unknown kind {k}"),
                    ))
                }
            };
            let codec = Codec::from_bytes([body[e + 46], body[e + 47]]).ok_or((
                e + 46,
                format!("chunk index entry {i} has an unknown codec"),
            ))?;
            entries.push(ChunkEntry {
                frame_offset: read_u64(body, e).unwrap(),
                frame_len: read_u32(body, e + 8).unwrap(),
                data_offset: read_u64(body, e + 12).unwrap(),
                data_len: read_u32(body, e + 20).unwrap(),
                first_ts_ns: read_u64(body, e + 24).unwrap(),
                last_ts_ns: read_u64(body, e + 32).unwrap(),
                packets: read_u32(body, e + 40).unwrap(),
                kind,
                codec,
            });
        }
        Ok(ChunkIndex { meta, entries })
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
                let magic = read_u32(&buf, 0).unwrap();
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
        let index = ChunkIndex {
            meta: r#"{"stream":0}"#.into(),
            entries: (0..5).map(entry).collect(),
        };
        let mut file = tempfile_with(&[vec![0xAB; 500], index.encode_trailer()].concat());
        assert_eq!(ChunkIndex::read_trailer(file.as_file_mut()).unwrap(), index);

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

    fn tempfile_with(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        f
    }
}
