//! Plain capture files (pcap or pcapng that other tools own, perhaps compressed) and their
//! sidecar `FILE.tdx` ([`tapdeck_filter::sidecar`]): its blocks' places, time ranges and
//! chunk filters, and what the file was when it was written, so a stale one is recognised
//! and ignored. A compressed capture file (`trace.pcap.gz`, `.bz2`, `.xz`, or a
//! `.zst`/`.lz4` that a stock tool wrote) is read through its decompressor, and its
//! sidecar's blocks lie in the decompressed stream.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tapdeck_filter::sidecar::{Block, FileIdentity, Sidecar, IDENTITY_SPAN};
use tapdeck_filter::ChunkFilterBuilder;
use tapdeck_pcap::compression::{self, Compression};
use tapdeck_pcap::{Format, TraceReader};

use tapdeck_pcap::container::{ChunkEntry, ChunkIndex, Codec, FrameKind};

use crate::meta::{FileMeta, InterfaceMeta};
use crate::read::{file_name_of, FileError, Header, StoredFile};

/// A sidecar block closes at the first record boundary past this many bytes: the size of
/// a recorder's chunk, so a block costs about what a chunk does to read.
pub const SIDECAR_BLOCK: u64 = 4 << 20;

/// Where a plain capture file's sidecar is: `FILE.tdx` beside it.
pub fn sidecar_path(path: &Path) -> PathBuf {
    path.with_file_name(format!("{}.tdx", file_name_of(path)))
}

/// What a plain capture file's sidecar says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SidecarState {
    Missing,
    /// The file changed since the sidecar was written (or the sidecar does not decode):
    /// the one-line reason.
    Stale(String),
    Fresh(Sidecar),
}

/// Reads `FILE.tdx` and compares it with what `file` is now.
pub fn read_sidecar(path: &Path, file: &File) -> Result<SidecarState, FileError> {
    let sidecar = sidecar_path(path);
    let bytes = match std::fs::read(&sidecar) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(SidecarState::Missing),
        Err(e) => return Err(FileError::whole(&sidecar, e.to_string())),
    };
    let s = match Sidecar::decode(&bytes) {
        Ok(s) => s,
        Err(e) => {
            return Ok(SidecarState::Stale(format!(
                "{}: does not decode ({e}); ignored",
                sidecar.display()
            )))
        }
    };
    let now = identity_of(path, file)?;
    if s.identity != now {
        let what = if s.identity.size != now.size {
            format!("{} bytes when indexed, {} now", s.identity.size, now.size)
        } else {
            "its contents changed".to_string()
        };
        return Ok(SidecarState::Stale(format!(
            "{}: stale ({} changed since it was indexed: {what}); ignored, run `tapdeck index` again",
            sidecar.display(),
            path.display()
        )));
    }
    Ok(SidecarState::Fresh(s))
}

/// The file's size and hashes of its first and last bytes.
pub(crate) fn identity_of(path: &Path, file: &File) -> Result<FileIdentity, FileError> {
    let io = |e: std::io::Error| FileError::whole(path, e.to_string());
    let size = file.metadata().map_err(io)?.len();
    let span = size.min(IDENTITY_SPAN) as usize;
    let mut head = vec![0u8; span];
    let mut tail = vec![0u8; span];
    file.read_exact_at(&mut head, 0).map_err(io)?;
    file.read_exact_at(&mut tail, size - span as u64)
        .map_err(io)?;
    Ok(FileIdentity::of(size, &head, &tail))
}

/// Reads a whole capture file strictly and builds its sidecar. A file that is not a
/// capture file, or is cut short or damaged, is an error naming the offset. A compressed
/// file (told by its first bytes) is read through its decompressor, and its blocks lie in
/// the decompressed stream.
pub fn build_sidecar(path: &Path, file: &File) -> Result<Sidecar, FileError> {
    let identity = identity_of(path, file)?;
    let (compression, input, stream_len) = capture_bytes(path, file)?;
    let defect = |e| stream_defect(path, compression, e);
    let mut reader = TraceReader::new(input).map_err(defect)?;
    let mut blocks = Vec::new();
    let mut builder = ChunkFilterBuilder::new();
    let mut open: Option<Block> = None;
    // Interfaces declared before the first packet: all a block is parsed after.
    let mut first_interfaces = None;
    while let Some(c) = reader.next_packet_with_context().map_err(defect)? {
        first_interfaces.get_or_insert(c.interfaces.len());
        if let Some(b) = open
            .as_mut()
            .filter(|b| c.offset - b.offset >= SIDECAR_BLOCK)
        {
            b.len = c.offset - b.offset;
            b.flows = builder.finish().encode();
            blocks.extend(open.take());
        }
        let p = &c.packet;
        let b = open.get_or_insert_with(|| Block {
            offset: c.offset,
            len: 0,
            packets: 0,
            first_ts_ns: p.ts_ns,
            last_ts_ns: p.ts_ns,
            flows: Vec::new(),
        });
        b.packets += 1;
        b.first_ts_ns = b.first_ts_ns.min(p.ts_ns);
        b.last_ts_ns = b.last_ts_ns.max(p.ts_ns);
        let linktype = c
            .interfaces
            .get(p.iface as usize)
            .map_or(u32::MAX, |i| u32::from(i.linktype));
        builder.add(linktype, p.data);
    }
    // The reader has taken the whole stream: its end is the stream's length.
    let stream_size = stream_len.load(Ordering::Relaxed);
    if let Some(mut b) = open {
        // The last block runs to the end of the file (statistics blocks after the last
        // packet included).
        b.len = stream_size - b.offset;
        b.flows = builder.finish().encode();
        blocks.push(b);
    }
    Ok(Sidecar {
        format: match reader.format() {
            Format::Pcap => 0,
            Format::Pcapng => 1,
        },
        compression: compression.map_or(0, |c| c.code()),
        identity,
        stream_size,
        whole_only: first_interfaces.is_some_and(|n| n != reader.interfaces().len()),
        blocks,
    })
}

/// Opens a plain capture file for reading by blocks: each block of its sidecar becomes a
/// chunk of an index held in memory, the bytes before the first packet its header. Without
/// a fresh sidecar the file is read once to index it in memory (logged, with how to keep
/// one). A compressed file has no blocks to read alone: the error says to decompress it.
pub fn open_capture(path: &Path) -> Result<StoredFile, FileError> {
    let io = |e: std::io::Error| FileError::whole(path, e.to_string());
    let file = File::open(path).map_err(io)?;
    let data_len = file.metadata().map_err(io)?.len();
    let mut magic = [0u8; compression::MAGIC_LEN];
    let head = (data_len as usize).min(magic.len());
    file.read_exact_at(&mut magic[..head], 0).map_err(io)?;
    if let Some(c) = Compression::detect(&magic[..head]) {
        return Err(FileError::whole(
            path,
            format!("{c}-compressed: its packets cannot be read a block at a time; decompress it first (the sidecar of the compressed file still serves `tapdeck verify`)"),
        ));
    }
    // Its first header says whether it is a capture file at all, before any indexing (read
    // through a handle of its own: a clone would share, and move, the file's offset).
    TraceReader::new(File::open(path).map_err(io)?)
        .map_err(|e| FileError::at(path, e.offset, e.kind.to_string()))?;
    let sidecar = match read_sidecar(path, &file)? {
        SidecarState::Fresh(s) => s,
        state => {
            let why = match state {
                SidecarState::Stale(why) => why,
                _ => format!(
                    "{}: no sidecar index (`tapdeck index {}` writes one)",
                    path.display(),
                    path.display()
                ),
            };
            tracing::info!("{why}; indexing it in memory for this run");
            build_sidecar(path, &file)?
        }
    };
    let header_len = sidecar.blocks.first().map_or(data_len, |b| b.offset);
    let mut header = vec![0u8; usize::try_from(header_len).map_err(|_| too_long(path))?];
    file.read_exact_at(&mut header, 0).map_err(io)?;
    // A file whose blocks cannot be parsed after its header alone (interfaces or sections
    // declared later, statistics before the first packet) is read as one whole block.
    let header = match Header::parse(header) {
        Ok(h) if !sidecar.whole_only => h,
        _ => return open_whole(path, file, data_len),
    };
    let index = capture_index(path, &sidecar, header_len)?;
    let blocks = &sidecar.blocks;
    let meta = capture_meta(
        header.format,
        &header.interfaces,
        blocks
            .iter()
            .map(|b| (b.first_ts_ns, b.last_ts_ns, u64::from(b.packets))),
    );
    Ok(StoredFile::from_capture(
        path,
        header.format,
        index,
        meta,
        file,
        data_len,
        false,
    ))
}

/// The largest capture file read as one whole block (see [`open_whole`]): it is held in
/// memory while it is read, as the largest frame a store holds.
pub const WHOLE_FILE_MAX: u64 = tapdeck_pcap::container::MAX_FRAME_LEN as u64;

/// Opens a capture file whose blocks cannot be read alone as one block: it is scanned
/// once for its interfaces and time range, then read whole (with no flow index).
fn open_whole(path: &Path, file: File, data_len: u64) -> Result<StoredFile, FileError> {
    if data_len > WHOLE_FILE_MAX {
        return Err(FileError::whole(
            path,
            format!("declares interfaces or sections after its first packet, so it can only be read whole, and at {data_len} bytes it is larger than the {WHOLE_FILE_MAX} read whole; rewrite it with all interfaces first (e.g. `editcap -F pcapng`)"),
        ));
    }
    let io = |e: std::io::Error| FileError::whole(path, e.to_string());
    let mut reader = TraceReader::new(std::io::BufReader::new(File::open(path).map_err(io)?))
        .map_err(|e| FileError::at(path, e.offset, e.kind.to_string()))?;
    let (mut first, mut last, mut packets) = (u64::MAX, 0, 0u64);
    while let Some(p) =
        (reader.next_packet()).map_err(|e| FileError::at(path, e.offset, e.kind.to_string()))?
    {
        (first, last, packets) = (first.min(p.ts_ns), last.max(p.ts_ns), packets + 1);
    }
    let format = reader.format();
    let len = u32::try_from(data_len).map_err(|_| too_long(path))?;
    let packets32 = u32::try_from(packets).map_err(|_| too_long(path))?;
    let mut entries = vec![ChunkEntry {
        frame_offset: 0,
        frame_len: 0,
        data_offset: 0,
        data_len: 0,
        first_ts_ns: 0,
        last_ts_ns: 0,
        packets: 0,
        kind: FrameKind::Header,
        codec: Codec::Raw,
    }];
    if packets > 0 {
        entries.push(ChunkEntry {
            frame_offset: 0,
            frame_len: len,
            data_offset: 0,
            data_len: len,
            first_ts_ns: first,
            last_ts_ns: last,
            packets: packets32,
            kind: FrameKind::Packets,
            codec: Codec::Raw,
        });
    }
    let index = ChunkIndex {
        meta: String::new(),
        entries,
        flows: Vec::new(),
        summary: Vec::new(),
    };
    let meta = capture_meta(format, reader.interfaces(), [(first, last, packets)]);
    Ok(StoredFile::from_capture(
        path, format, index, meta, file, data_len, true,
    ))
}

/// The metadata of a capture file read by blocks, from their (first, last, packets).
fn capture_meta(
    format: Format,
    interfaces: &[tapdeck_pcap::Interface],
    blocks: impl IntoIterator<Item = (u64, u64, u64)>,
) -> FileMeta {
    let (mut first, mut last, mut packets) = (u64::MAX, 0, 0);
    for (f, l, n) in blocks.into_iter().filter(|b| b.2 > 0) {
        (first, last, packets) = (first.min(f), last.max(l), packets + n);
    }
    FileMeta {
        store_version: 0,
        stream: 0,
        seq: 0,
        format: crate::meta::format_name(format).into(),
        container: "plain".into(),
        first_ts_ns: if packets == 0 { 0 } else { first },
        last_ts_ns: last,
        packets,
        interfaces: interfaces.iter().map(InterfaceMeta::from).collect(),
        counts: Vec::new(),
        out_of_order: 0,
        repaired: false,
        run_started_ns: None,
    }
}

/// The in-memory chunk index of a plain capture file: its header, then one entry per
/// sidecar block, with the block's flows.
fn capture_index(path: &Path, sidecar: &Sidecar, header_len: u64) -> Result<ChunkIndex, FileError> {
    let len = |n: u64| u32::try_from(n).map_err(|_| too_long(path));
    let mut entries = vec![ChunkEntry {
        frame_offset: 0,
        frame_len: len(header_len)?,
        data_offset: 0,
        data_len: len(header_len)?,
        first_ts_ns: 0,
        last_ts_ns: 0,
        packets: 0,
        kind: FrameKind::Header,
        codec: Codec::Raw,
    }];
    let mut flows = vec![Vec::new()];
    for b in &sidecar.blocks {
        entries.push(ChunkEntry {
            frame_offset: b.offset,
            frame_len: len(b.len)?,
            data_offset: b.offset,
            data_len: len(b.len)?,
            first_ts_ns: b.first_ts_ns,
            last_ts_ns: b.last_ts_ns,
            packets: b.packets,
            kind: FrameKind::Packets,
            codec: Codec::Raw,
        });
        flows.push(b.flows.clone());
    }
    Ok(ChunkIndex {
        meta: String::new(),
        entries,
        flows,
        summary: Vec::new(),
    })
}

fn too_long(path: &Path) -> FileError {
    FileError::whole(
        path,
        "a header or block longer than 4 GiB: not a capture file tapdeck can read by blocks",
    )
}

/// The capture bytes of a plain or compressed capture file, what compression they came in,
/// and a count of the bytes read from them so far.
pub(crate) fn capture_bytes(
    path: &Path,
    file: &File,
) -> Result<(Option<Compression>, CountedRead, Arc<AtomicU64>), FileError> {
    let io = |e: std::io::Error| FileError::whole(path, e.to_string());
    let input = file.try_clone().map_err(io)?;
    let (compression, bytes) = compression::decompress(Box::new(input)).map_err(io)?;
    let count = Arc::new(AtomicU64::new(0));
    Ok((
        compression,
        CountedRead {
            inner: bytes,
            count: Arc::clone(&count),
        },
        count,
    ))
}

/// A defect in a capture file's bytes: at its offset in the file, or for a compressed file
/// in the decompressed stream (an archive cut short or corrupt says so itself).
pub(crate) fn stream_defect(
    path: &Path,
    compression: Option<Compression>,
    e: tapdeck_pcap::FormatError,
) -> FileError {
    match compression {
        None => FileError::at(path, e.offset, e.kind.to_string()),
        Some(c) => FileError::whole(
            path,
            format!(
                "at byte {} of the decompressed {c} stream: {}",
                e.offset, e.kind
            ),
        ),
    }
}

/// A reader that counts what it delivers.
pub(crate) struct CountedRead {
    inner: Box<dyn Read + Send>,
    count: Arc<AtomicU64>,
}

impl Read for CountedRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// What [`check_sidecar`] found beside a plain capture file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SidecarCheck {
    Missing,
    /// Ignored by readers (the file changed since, or it does not decode): the one-line
    /// warning.
    Stale(String),
    /// It describes the file as it is now, in this many blocks.
    Matches {
        blocks: u64,
    },
}

/// Rebuilds a plain capture file's sidecar and compares. A fresh sidecar that differs
/// from what the file gives is damaged: an error.
pub fn check_sidecar(path: &Path) -> Result<SidecarCheck, FileError> {
    let file = File::open(path).map_err(|e| FileError::whole(path, e.to_string()))?;
    let stored = match read_sidecar(path, &file)? {
        SidecarState::Missing => return Ok(SidecarCheck::Missing),
        SidecarState::Stale(why) => return Ok(SidecarCheck::Stale(why)),
        SidecarState::Fresh(s) => s,
    };
    let rebuilt = build_sidecar(path, &file)?;
    let sidecar = sidecar_path(path);
    if rebuilt.format != stored.format || rebuilt.blocks.len() != stored.blocks.len() {
        return Err(FileError::whole(
            &sidecar,
            format!(
                "lists {} blocks, the file gives {} (damaged: run `tapdeck index` after removing it)",
                stored.blocks.len(),
                rebuilt.blocks.len()
            ),
        ));
    }
    if let Some((i, (s, _))) = stored
        .blocks
        .iter()
        .zip(&rebuilt.blocks)
        .enumerate()
        .find(|(_, (s, r))| s != r)
    {
        return Err(FileError::whole(
            &sidecar,
            format!(
                "block {i} (at byte offset {} of the file) differs from what the file gives (damaged: remove it and run `tapdeck index` again)",
                s.offset
            ),
        ));
    }
    Ok(SidecarCheck::Matches {
        blocks: stored.blocks.len() as u64,
    })
}
