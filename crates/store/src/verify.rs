//! Strict checks of stored files (`tapdeck verify`), and the repair of files whose writer
//! died before finishing them.
//!
//! A stored file is checked twice over: its index against its bytes (frames laid end to
//! end from offset 0, each decoding to the length the index gives, chunk counts and time
//! ranges equal to what the records say), and every record through [`TraceReader`] and
//! [`Validator`]. Records are read one chunk at a time after the header frame, exactly as
//! extraction reads them; since the chunks are contiguous and may declare no interfaces of
//! their own, that is the same stream `zstd -dc` gives, read more strictly. The first
//! defect ends the check with a [`FileError`] naming its byte offset.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::BufReader;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tapdeck_index::{FlowIndex, FlowIndexBuilder};
use tapdeck_pcap::container::{self, ChunkEntry, ChunkIndex, Codec, Container, FrameKind};
use tapdeck_pcap::validate::Validator;
use tapdeck_pcap::{Format, TraceReader};

use crate::finalize::{finalize, SalvagedEnd};
use crate::meta::{self, FileMeta, InterfaceMeta, STORE_VERSION};
use crate::read::{self, ChunkPackets, FileError, Header, StoredFile};

/// Chunk size for a repaired plain file, whose chunk boundaries died with its writer.
const REPAIR_CHUNK: u64 = 4 << 20;

/// What a successful check found in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSummary {
    pub path: PathBuf,
    pub format: Format,
    /// `None` for a capture file that is not part of a store (no index).
    pub container: Option<Container>,
    pub packets: u64,
    /// Frames holding packets (0 for a capture file without an index).
    pub chunks: u64,
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: Option<u64>,
    /// Packet chunks per codec.
    pub codecs: BTreeMap<String, u64>,
    pub stored_len: u64,
    pub repaired: bool,
    /// For a plain capture file with a sidecar (`FILE.tdx`) that matches it: its blocks.
    pub sidecar_blocks: Option<u64>,
    /// What the user should hear about although the file is fine (a stale sidecar).
    pub warnings: Vec<String>,
}

/// Is this the hidden name of a file still being written (or left behind by a crash)?
pub fn is_partial(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(meta::final_name_of_partial)
        .is_some()
}

/// Checks one file: a stored file (it has an index), or any pcap/pcapng file (checked
/// record by record). A partial file is an error pointing at `--repair`.
pub fn verify_file(path: &Path) -> Result<FileSummary, FileError> {
    if is_partial(path) {
        return Err(FileError::whole(
            path,
            "incomplete file (its writer did not finish it); run `tapdeck verify --repair` to keep its complete chunks",
        ));
    }
    if crate::index::is_stored(path) {
        return verify_stored(path);
    }
    let mut summary = verify_capture(path)?;
    // A sidecar (`tapdeck index FILE`) must be what the file gives now; a stale one (the
    // file changed) is ignored by readers, so it is only a warning.
    match crate::index::check_sidecar(path)? {
        None => {}
        Some(Ok(blocks)) => summary.sidecar_blocks = Some(blocks),
        Some(Err(stale)) => summary.warnings.push(stale),
    }
    Ok(summary)
}

/// Reads a capture file without an index from end to end, strictly.
pub fn verify_capture(path: &Path) -> Result<FileSummary, FileError> {
    let file = File::open(path).map_err(|e| FileError::whole(path, e.to_string()))?;
    let stored_len = file
        .metadata()
        .map_err(|e| FileError::whole(path, e.to_string()))?
        .len();
    // A compressed capture file is checked through its decompressor.
    let (compression, bytes, _) = crate::index::capture_bytes(path, &file)?;
    let defect = |e| crate::index::stream_defect(path, compression, e);
    let mut reader = TraceReader::new(bytes).map_err(defect)?;
    let mut validator = Validator::new();
    let (mut first, mut last) = (None, None);
    while let Some(c) = reader.next_packet_with_context().map_err(defect)? {
        validator
            .check(c.interfaces, &c.packet, c.offset)
            .map_err(defect)?;
        first.get_or_insert(c.packet.ts_ns);
        last = Some(last.map_or(c.packet.ts_ns, |l: u64| l.max(c.packet.ts_ns)));
    }
    Ok(FileSummary {
        path: path.to_path_buf(),
        format: reader.format(),
        container: None,
        packets: validator.packets(),
        chunks: 0,
        first_ts_ns: first,
        last_ts_ns: last,
        codecs: BTreeMap::new(),
        stored_len,
        repaired: false,
        sidecar_blocks: None,
        warnings: Vec::new(),
    })
}

/// Checks a stored file against its index, record by record.
pub fn verify_stored(path: &Path) -> Result<FileSummary, FileError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if Container::from_suffix(&name) != Container::Plain {
        explain_missing_trailer(path)?;
    }
    let f = StoredFile::open(path)?;
    check_layout(&f)?;
    let header = f.read_header()?;
    check_header(&f, &header)?;

    let mut validator = Validator::new();
    let mut scratch = Vec::new();
    let mut order = TimeOrder::default();
    let (mut packets, mut chunks) = (0u64, 0u64);
    let mut flows = FlowIndexBuilder::new();
    for (i, entry) in f.index.entries.iter().enumerate().skip(1) {
        let chunk = f.read_chunk(&header, entry, &mut scratch)?;
        for (k, r) in chunk.records.iter().enumerate() {
            let defect = |what: String| {
                f.record_error(
                    entry,
                    read::ChunkError {
                        offset: r.offset,
                        what,
                    },
                )
            };
            let p = chunk.packet(k);
            if let Some(prev) = order.step(p.ts_ns) {
                if f.meta.out_of_order == 0 {
                    return Err(defect(format!(
                        "timestamp goes backwards by {} ns (from {prev} to {} ns since 1970) in a file whose metadata says it is in time order",
                        prev - p.ts_ns,
                        p.ts_ns
                    )));
                }
            }
            // Time order is checked above, across interfaces and against the metadata; the
            // validator sees a clock that never runs back, so it checks lengths only.
            let clamped = tapdeck_pcap::Packet {
                ts_ns: order.max_ts.unwrap_or(p.ts_ns),
                ..p
            };
            validator
                .check(&header.interfaces, &clamped, entry.data_offset + r.offset)
                .map_err(|e| defect(e.kind.to_string()))?;
        }
        check_chunk_against_index(&f, i, entry, &chunk)?;
        check_flow_index(&f, i, &header, &chunk, &mut flows)?;
        packets += chunk.len() as u64;
        chunks += u64::from(entry.kind == FrameKind::Packets);
    }

    let m = &f.meta;
    let index_at = index_offset(&f);
    let fail = |what: String| {
        Err(FileError::at(
            path,
            index_at,
            format!("file metadata: {what}"),
        ))
    };
    if m.packets != packets {
        return fail(format!(
            "says {} packets, the chunks hold {packets}",
            m.packets
        ));
    }
    if m.out_of_order != order.backwards {
        return fail(format!(
            "says {} packets are out of time order, the records have {}",
            m.out_of_order, order.backwards
        ));
    }
    if let (Some(first), Some(min), Some(max)) = (order.first_ts, order.min_ts, order.max_ts) {
        // The recorder names a file after its first packet; a repaired file after its
        // earliest. Either is right, and they differ only in an out-of-order file.
        if !(min..=first).contains(&m.first_ts_ns) || m.last_ts_ns != max {
            return fail(format!(
                "says packets span {} to {} ns, the records span {min} to {max} ns (the first is at {first} ns)",
                m.first_ts_ns, m.last_ts_ns
            ));
        }
    }
    let (first_ts, last_ts) = (order.min_ts, order.max_ts);
    Ok(FileSummary {
        path: path.to_path_buf(),
        format: f.format,
        container: Some(f.container),
        packets,
        chunks,
        first_ts_ns: first_ts,
        last_ts_ns: last_ts,
        codecs: f.codec_mix(),
        stored_len: f.stored_len,
        repaired: m.repaired,
        sidecar_blocks: None,
        warnings: Vec::new(),
    })
}

/// Time order of a file's packets, in file order.
#[derive(Debug, Default)]
struct TimeOrder {
    first_ts: Option<u64>,
    last_ts: Option<u64>,
    min_ts: Option<u64>,
    max_ts: Option<u64>,
    /// Packets earlier than the packet before them (what the recorder counts).
    backwards: u64,
}

impl TimeOrder {
    /// Records one packet; returns the previous timestamp if this one is earlier.
    fn step(&mut self, ts: u64) -> Option<u64> {
        let prev = self.last_ts.filter(|&prev| ts < prev);
        self.backwards += u64::from(prev.is_some());
        self.first_ts.get_or_insert(ts);
        self.last_ts = Some(ts);
        self.min_ts = Some(self.min_ts.map_or(ts, |m| m.min(ts)));
        self.max_ts = Some(self.max_ts.map_or(ts, |m| m.max(ts)));
        prev
    }
}

/// Where the chunk index is: the end of the frames (or the start of a sidecar).
fn index_offset(f: &StoredFile) -> u64 {
    if f.container == Container::Plain {
        0
    } else {
        f.index.entries.iter().map(|e| u64::from(e.frame_len)).sum()
    }
}

/// A container without a readable trailer is, in practice, cut short: say where its
/// intact part ends rather than only that the trailer is missing.
pub(crate) fn explain_missing_trailer(path: &Path) -> Result<(), FileError> {
    let file = File::open(path).map_err(|e| FileError::whole(path, e.to_string()))?;
    let Err(e) = ChunkIndex::read_trailer(&file) else {
        return Ok(());
    };
    let size = file
        .metadata()
        .map_err(|e| FileError::whole(path, e.to_string()))?
        .len();
    let (frames, end) =
        container::scan_frames(&file).map_err(|e| FileError::whole(path, e.to_string()))?;
    if frames.is_empty() && end == 0 {
        return Err(FileError::at(
            path,
            0,
            format!("not a tapdeck stored file: no frame at its start ({e})"),
        ));
    }
    Err(FileError::at(
        path,
        end,
        format!(
            "file is truncated: {} bytes follow the last complete frame but no valid chunk index does ({e})",
            size - end
        ),
    ))
}

/// Frames laid end to end from offset 0, data contiguous, kinds in order, nothing after
/// the trailer.
fn check_layout(f: &StoredFile) -> Result<(), FileError> {
    let path = &f.path;
    let entries = &f.index.entries;
    let Some(first) = entries.first() else {
        return Err(FileError::at(path, 0, "the chunk index lists no frames"));
    };
    if first.kind != FrameKind::Header {
        return Err(FileError::at(
            path,
            0,
            "the first frame is not a header frame",
        ));
    }
    let (mut frame_at, mut data_at) = (0u64, 0u64);
    for (i, e) in entries.iter().enumerate() {
        if e.frame_offset != frame_at {
            return Err(FileError::at(
                path,
                frame_at,
                format!("chunk index entry {i} places its frame at {}, but the previous frame ends here", e.frame_offset),
            ));
        }
        if e.data_offset != data_at {
            return Err(FileError::at(
                path,
                e.frame_offset,
                format!("chunk index entry {i} says its data starts at {}, the data before it ends at {data_at}", e.data_offset),
            ));
        }
        if f.container == Container::Plain && e.frame_len != e.data_len {
            return Err(FileError::at(
                path,
                e.frame_offset,
                format!(
                    "chunk index entry {i} of a plain file has frame and data lengths that differ"
                ),
            ));
        }
        let misplaced = match e.kind {
            FrameKind::Header => i != 0,
            FrameKind::Packets => false,
            FrameKind::Stats => i != entries.len() - 1 || f.format == Format::Pcap,
        };
        if misplaced {
            return Err(FileError::at(
                path,
                e.frame_offset,
                format!("chunk index entry {i}: a {:?} frame cannot be here", e.kind),
            ));
        }
        if e.kind != FrameKind::Packets && e.packets != 0 {
            return Err(FileError::at(
                path,
                e.frame_offset,
                format!(
                    "chunk index entry {i}: a {:?} frame with {} packets",
                    e.kind, e.packets
                ),
            ));
        }
        frame_at += u64::from(e.frame_len);
        data_at += u64::from(e.data_len);
    }
    // The trailer follows the frames (after the ones an index added later replaced:
    // `ChunkIndex::locate_trailer` checked what lies between).
    let frames_end_should_be = if f.container == Container::Plain {
        f.data_len
    } else {
        f.trailer.frames_end
    };
    if frame_at != frames_end_should_be {
        return Err(FileError::at(
            path,
            frame_at.min(frames_end_should_be),
            format!("the frames end at byte offset {frame_at} but the file's data ends at {frames_end_should_be}"),
        ));
    }
    Ok(())
}

/// The header against the file's name and metadata.
fn check_header(f: &StoredFile, header: &Header) -> Result<(), FileError> {
    let path = &f.path;
    let m = &f.meta;
    if header.format != f.format || m.format != meta::format_name(f.format) {
        return Err(FileError::at(
            path,
            0,
            format!(
                "the name says {}, the metadata {}, the header frame {}",
                f.format.extension(),
                m.format,
                header.format.extension()
            ),
        ));
    }
    if m.container != meta::container_name(f.container) {
        return Err(FileError::whole(
            path,
            format!(
                "the name says a {} container, the metadata {}",
                meta::container_name(f.container),
                m.container
            ),
        ));
    }
    let declared: Vec<InterfaceMeta> = header.interfaces.iter().map(InterfaceMeta::from).collect();
    // Classic pcap has nowhere to keep an interface's name: compare what it can hold.
    let same = |a: &InterfaceMeta, b: &InterfaceMeta| {
        a.linktype == b.linktype
            && a.snaplen == b.snaplen
            && (f.format == Format::Pcap || a.name == b.name)
    };
    let snap_ok = |a: &InterfaceMeta, b: &InterfaceMeta| {
        f.format == Format::Pcap && b.snaplen == 0 && a.snaplen == 262_144
    };
    if declared.len() != m.interfaces.len()
        || !declared
            .iter()
            .zip(&m.interfaces)
            .all(|(a, b)| same(a, b) || (snap_ok(a, b) && a.linktype == b.linktype))
    {
        return Err(FileError::at(
            path,
            0,
            "the header frame's interfaces differ from those the metadata lists",
        ));
    }
    let name = f.name();
    if let Some(meta::DataName { stream, seq, .. }) = meta::DataName::parse(&name) {
        if (stream, seq) != (m.stream, m.seq) {
            return Err(FileError::whole(
                path,
                format!("the name says stream {stream} sequence {seq}, the metadata stream {} sequence {}", m.stream, m.seq),
            ));
        }
    }
    Ok(())
}

/// A chunk's flow index, if the file has them, must be exactly the one its packets give:
/// a stale or damaged index would make a filtered extract skip packets it should return.
fn check_flow_index(
    f: &StoredFile,
    i: usize,
    header: &Header,
    chunk: &ChunkPackets,
    builder: &mut FlowIndexBuilder,
) -> Result<(), FileError> {
    let Some(stored) = f.index.flows.get(i) else {
        return Ok(());
    };
    let e = &f.index.entries[i];
    let fail = |what: String| {
        Err(FileError::at(
            &f.path,
            e.frame_offset,
            format!("chunk index entry {i}: flow index {what}"),
        ))
    };
    if e.kind != FrameKind::Packets || e.packets == 0 {
        if !stored.is_empty() {
            return fail(format!("present on a {:?} frame without packets", e.kind));
        }
        return Ok(());
    }
    if stored.is_empty() {
        // A chunk the recorder did not index (none of this file's, or a salvaged one).
        return Ok(());
    }
    if let Err(err) = FlowIndex::decode(stored) {
        return fail(format!("does not decode: {err}"));
    }
    for k in 0..chunk.len() {
        let p = chunk.packet(k);
        let linktype = header
            .interfaces
            .get(p.iface as usize)
            .map_or(u32::MAX, |l| u32::from(l.linktype));
        builder.add(linktype, p.data);
    }
    if builder.finish().encode() != *stored {
        return fail("differs from the one its packets give (stale or damaged: `tapdeck verify` cannot repair it; extract with --no-index reads around it)".into());
    }
    Ok(())
}

fn check_chunk_against_index(
    f: &StoredFile,
    i: usize,
    e: &ChunkEntry,
    chunk: &ChunkPackets,
) -> Result<(), FileError> {
    let at = e.frame_offset;
    let fail = |what: String| {
        Err(FileError::at(
            &f.path,
            at,
            format!("chunk index entry {i}: {what}"),
        ))
    };
    match e.kind {
        FrameKind::Stats if !chunk.is_empty() || chunk.stats.is_empty() => {
            return fail(format!(
                "a statistics frame must hold statistics blocks only; it holds {} packets and {} statistics blocks",
                chunk.len(),
                chunk.stats.len()
            ))
        }
        _ => {}
    }
    if e.packets as usize != chunk.len() {
        return fail(format!(
            "says {} packets, the chunk holds {}",
            e.packets,
            chunk.len()
        ));
    }
    let min = chunk.records.iter().map(|r| r.ts_ns).min();
    let max = chunk.records.iter().map(|r| r.ts_ns).max();
    if let (Some(min), Some(max)) = (min, max) {
        if (e.first_ts_ns, e.last_ts_ns) != (min, max) {
            return fail(format!(
                "says packets span {} to {} ns, the chunk's span {min} to {max} ns",
                e.first_ts_ns, e.last_ts_ns
            ));
        }
    }
    Ok(())
}

/// What [`repair`] did with an incomplete file.
#[derive(Debug, PartialEq, Eq)]
pub enum Repaired {
    /// Finalized under this name, holding every complete frame or record.
    As(PathBuf),
    /// Removed: its writer was killed before any byte of it reached the disk (the file is
    /// empty or all zeros, as a preallocated or padded O_DIRECT file is), so it held no
    /// packet.
    RemovedEmpty,
}

/// Finalizes a file its writer left incomplete (`.NAME.partial`): keeps every complete
/// frame (for a plain file, every complete record), truncates after them, writes a new
/// index and renames the file to its final name. A partial with no byte written is
/// removed; one with bytes but no complete header is refused and left untouched.
pub fn repair(partial: &Path) -> Result<Repaired, FileError> {
    let name = partial
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (
        meta::DataName {
            stream,
            seq,
            format,
            container,
        },
        final_name,
    ) = meta::DataName::of_partial(&name).ok_or_else(|| {
        FileError::whole(
            partial,
            "not the name of an incomplete data file (.NAME.partial)",
        )
    })?;
    let final_path = partial.with_file_name(final_name);
    if final_path.exists() {
        return Err(FileError::whole(
            partial,
            format!(
                "{} exists already; not overwriting it",
                final_path.display()
            ),
        ));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(partial)
        .map_err(|e| FileError::whole(partial, e.to_string()))?;
    let Rebuilt {
        header,
        entries,
        end,
        out_of_order,
    } = match rebuild(partial, &file, container) {
        Ok(r) => r,
        // Nothing reached the disk: there is nothing to keep, and nothing is lost.
        Err(_) if all_zero(&file).unwrap_or(false) => {
            std::fs::remove_file(partial)
                .map_err(|e| FileError::whole(partial, format!("cannot remove it: {e}")))?;
            return Ok(Repaired::RemovedEmpty);
        }
        Err(e) => return Err(e),
    };
    if header.format != format {
        return Err(FileError::at(
            partial,
            0,
            format!(
                "the name says {}, the header {}",
                format.extension(),
                header.format.extension()
            ),
        ));
    }
    let name = meta::DataName {
        stream,
        seq,
        format,
        container,
    };
    let (index, _) = salvaged_index(name, &header, entries, out_of_order);
    let end = SalvagedEnd { file: &file, end };
    finalize(end, partial, &final_path, container, &index)
        .map_err(|e| FileError::whole(partial, format!("cannot finalize: {e}")))?;
    Ok(Repaired::As(final_path))
}

/// The index of a salvaged file: its surviving entries and metadata marked `repaired`.
fn salvaged_index(
    name: meta::DataName,
    header: &Header,
    entries: Vec<ChunkEntry>,
    out_of_order: u64,
) -> (ChunkIndex, FileMeta) {
    let with_packets = || entries.iter().filter(|e| e.packets > 0);
    let meta = FileMeta {
        store_version: STORE_VERSION,
        stream: name.stream,
        seq: name.seq,
        format: meta::format_name(name.format).into(),
        container: meta::container_name(name.container).into(),
        first_ts_ns: with_packets().map(|e| e.first_ts_ns).min().unwrap_or(0),
        last_ts_ns: with_packets().map(|e| e.last_ts_ns).max().unwrap_or(0),
        packets: entries.iter().map(|e| u64::from(e.packets)).sum(),
        interfaces: header.interfaces.iter().map(InterfaceMeta::from).collect(),
        counts: Vec::new(),
        out_of_order,
        repaired: true,
        run_started_ns: None,
    };
    let index = ChunkIndex {
        meta: serde_json::to_string(&meta).expect("metadata serializes"),
        entries,
        flows: Vec::new(),
    };
    (index, meta)
}

/// The parsed name of a complete stored file, or an error saying it is not one.
fn stored_name(path: &Path) -> Result<meta::DataName, FileError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    meta::DataName::parse(&name)
        .ok_or_else(|| FileError::whole(path, "not the name of a stored file"))
}

/// A complete-named stored file whose index is lost (a cut file), read in memory up to
/// its last whole chunk, without changing it; also the number of bytes after that chunk.
/// `extract` reads such a file this way; `repair_truncated` makes it whole on disk.
pub fn salvage(path: &Path) -> Result<(StoredFile, u64), FileError> {
    let data_name = stored_name(path)?;
    let file = File::open(path).map_err(|e| FileError::whole(path, e.to_string()))?;
    let len = file
        .metadata()
        .map_err(|e| FileError::whole(path, e.to_string()))?
        .len();
    let Rebuilt {
        header,
        entries,
        end,
        out_of_order,
    } = rebuild(path, &file, data_name.container)?;
    if header.format != data_name.format {
        return Err(FileError::at(
            path,
            0,
            format!(
                "the name says {}, the header {}",
                data_name.format.extension(),
                header.format.extension()
            ),
        ));
    }
    let (index, meta) = salvaged_index(data_name, &header, entries, out_of_order);
    let stored = StoredFile::from_salvage(path, data_name, index, meta, file, end);
    Ok((stored, len.saturating_sub(end)))
}

/// Opens a file a recorder is writing, as far as its complete frames go (its last flush,
/// at most `--flush-interval` ago): the index is rebuilt by scanning it, read-only, as
/// `repair` would without touching it. A frame being written as we read ends the scan.
pub fn open_live(partial: &Path) -> Result<StoredFile, FileError> {
    let name = partial
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (data_name, _) = meta::DataName::of_partial(&name).ok_or_else(|| {
        FileError::whole(
            partial,
            "not the name of a file being written (.NAME.partial)",
        )
    })?;
    let file = File::open(partial).map_err(|e| FileError::whole(partial, e.to_string()))?;
    let Rebuilt {
        header,
        entries,
        end,
        out_of_order,
    } = rebuild(partial, &file, data_name.container)?;
    let (index, meta) = salvaged_index(data_name, &header, entries, out_of_order);
    Ok(StoredFile::from_salvage(
        partial, data_name, index, meta, file, end,
    ))
}

/// Is this a complete-named compressed stored file whose index cannot be read (a file
/// cut short after it was finished, e.g. by a copy that stopped)? `repair_truncated`
/// salvages such a file.
pub fn is_truncated(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stored = meta::DataName::parse(&name).is_some_and(|n| n.container != Container::Plain);
    stored
        && File::open(path)
            .map(|f| ChunkIndex::read_trailer(&f).is_err())
            .unwrap_or(false)
}

/// Makes a cut stored file (see [`is_truncated`]) whole again in place: keeps every whole
/// chunk, cuts the file after the last one, and writes a new index (metadata marked
/// `repaired`). Refused when a whole frame in the middle does not decode: cutting there
/// would throw away the whole chunks after it, which `extract` still reads.
pub fn repair_truncated(path: &Path) -> Result<u64, FileError> {
    let data_name = stored_name(path)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| FileError::whole(path, e.to_string()))?;
    let (frames, _) =
        container::scan_frames(&file).map_err(|e| FileError::whole(path, e.to_string()))?;
    let rebuilt = rebuild(path, &file, data_name.container)?;
    if let Some(&(at, _)) = frames.get(rebuilt.entries.len()) {
        return Err(FileError::at(
            path,
            at,
            "this frame does not decode, and whole frames follow it; not cutting them off (extract reads around it)",
        ));
    }
    let (index, meta) = salvaged_index(
        data_name,
        &rebuilt.header,
        rebuilt.entries,
        rebuilt.out_of_order,
    );
    let end = SalvagedEnd {
        file: &file,
        end: rebuilt.end,
    };
    finalize(end, path, path, data_name.container, &index)
        .map_err(|e| FileError::whole(path, format!("cannot finalize: {e}")))?;
    Ok(meta.packets)
}

fn rebuild(path: &Path, file: &File, container: Container) -> Result<Rebuilt, FileError> {
    match container {
        Container::Plain => rebuild_plain(path, file),
        _ => rebuild_frames(path, file, container),
    }
}

/// True if the file is empty or holds only zero bytes.
fn all_zero(file: &File) -> std::io::Result<bool> {
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    loop {
        let n = file.read_at(&mut buf, at)?;
        if n == 0 {
            return Ok(true);
        }
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        at += n as u64;
    }
}

/// What survives of a partial file: its header, the entries of its complete frames, and
/// where they end.
struct Rebuilt {
    header: Header,
    entries: Vec<ChunkEntry>,
    end: u64,
    out_of_order: u64,
}

/// Rebuilds the index of a compressed container from its complete frames.
fn rebuild_frames(path: &Path, file: &File, container: Container) -> Result<Rebuilt, FileError> {
    let (frames, _) =
        container::scan_frames(file).map_err(|e| FileError::whole(path, e.to_string()))?;
    let mut entries: Vec<ChunkEntry> = Vec::new();
    let mut header: Option<Header> = None;
    let mut frame = Vec::new();
    let mut data = Vec::new();
    let mut data_offset = 0u64;
    let mut order = TimeOrder::default();
    for (frame_offset, frame_len) in frames {
        frame.resize(frame_len, 0);
        file.read_exact_at(&mut frame, frame_offset)
            .map_err(|e| FileError::whole(path, e.to_string()))?;
        data.clear();
        let Some(size) = content_size(&frame) else {
            break;
        };
        if container::decode_frame(container, &frame, size, &mut data).is_err() {
            break;
        }
        let (kind, first, last, packets) = match &header {
            None => match Header::parse(data.clone()) {
                Ok(h) => {
                    header = Some(h);
                    (FrameKind::Header, 0, 0, 0)
                }
                Err(e) => {
                    return Err(FileError::at(
                        path,
                        frame_offset,
                        format!("the header frame does not parse ({e}); nothing can be kept"),
                    ))
                }
            },
            Some(h) => match ChunkPackets::parse(h, &data) {
                Ok(c) if c.is_empty() && !c.stats.is_empty() => (FrameKind::Stats, 0, 0, 0),
                Ok(c) => {
                    c.records.iter().for_each(|r| _ = order.step(r.ts_ns));
                    let min = c.records.iter().map(|r| r.ts_ns).min().unwrap_or(0);
                    let max = c.records.iter().map(|r| r.ts_ns).max().unwrap_or(0);
                    (FrameKind::Packets, min, max, c.len() as u32)
                }
                Err(_) => break,
            },
        };
        entries.push(ChunkEntry {
            frame_offset,
            frame_len: frame_len as u32,
            data_offset,
            data_len: data.len() as u32,
            first_ts_ns: first,
            last_ts_ns: last,
            packets,
            kind,
            codec: codec_of_frame(&frame, data.len()),
        });
        data_offset += data.len() as u64;
        if kind == FrameKind::Stats {
            break; // the writer's last frame
        }
    }
    let Some(header) = header else {
        return Err(FileError::at(
            path,
            0,
            "not even the header frame is complete; nothing can be kept",
        ));
    };
    let end = entries
        .last()
        .map_or(0, |e| e.frame_offset + u64::from(e.frame_len));
    Ok(Rebuilt {
        header,
        entries,
        end,
        out_of_order: order.backwards,
    })
}

/// Decompressed size a frame's header declares; tapdeck's frames always declare it.
fn content_size(frame: &[u8]) -> Option<usize> {
    let magic = u32::from_le_bytes(frame.get(..4)?.try_into().ok()?);
    let le = |b: &[u8]| b.iter().rev().fold(0u64, |acc, &x| acc << 8 | u64::from(x));
    let size = match magic {
        0xFD2F_B528 => {
            let fhd = *frame.get(4)?;
            let single_segment = fhd & 0x20 != 0;
            let dict_len = [0, 1, 2, 4][usize::from(fhd & 3)];
            let at = 5 + usize::from(!single_segment) + dict_len;
            match (fhd >> 6, single_segment) {
                (0, false) => return None,
                (0, true) => le(frame.get(at..at + 1)?),
                (1, _) => le(frame.get(at..at + 2)?) + 256,
                (2, _) => le(frame.get(at..at + 4)?),
                _ => le(frame.get(at..at + 8)?),
            }
        }
        0x184D_2204 => {
            let flg = *frame.get(4)?;
            if flg & 0x08 == 0 {
                return None;
            }
            le(frame.get(6..14)?)
        }
        _ => return None,
    };
    usize::try_from(size)
        .ok()
        .filter(|&n| n <= container::MAX_FRAME_LEN)
}

/// The codec a frame was written with, as far as the frame shows it: a frame no smaller
/// than its data is stored (raw); a zstd frame does not record its level, so repaired
/// entries say level 0.
fn codec_of_frame(frame: &[u8], data_len: usize) -> Codec {
    if frame.len() >= data_len {
        Codec::Raw
    } else if frame.starts_with(&0x184D_2204u32.to_le_bytes()) {
        Codec::Lz4
    } else {
        Codec::Zstd(0)
    }
}

/// Rebuilds the index of a plain file: every complete, valid record is kept, cut into
/// chunks of about [`REPAIR_CHUNK`] bytes. Zero padding left by an interrupted O_DIRECT
/// writer ends the file: in pcapng it is not a block; in pcap it reads as empty records
/// at time 0, where we stop.
fn rebuild_plain(path: &Path, file: &File) -> Result<Rebuilt, FileError> {
    let mut reader = TraceReader::new(BufReader::new(file)).map_err(|e| {
        FileError::at(
            path,
            e.offset,
            format!("the file header does not parse ({e}); nothing can be kept"),
        )
    })?;
    let mut validator = Validator::new();
    let mut order = TimeOrder::default();
    let mut header_end: Option<u64> = None;
    let mut spans: Vec<ChunkEntry> = Vec::new();
    let mut kept_end = reader.offset();
    loop {
        let (ts, offset) = match reader.next_packet_with_context() {
            Ok(Some(c)) => {
                let p = c.packet;
                let zero_record = p.ts_ns == 0 && p.orig_len == 0 && p.data.is_empty();
                // Lengths only: a replayed trace may be out of order, and that is kept.
                let clamped = tapdeck_pcap::Packet {
                    ts_ns: order.max_ts.unwrap_or(0).max(p.ts_ns),
                    ..p
                };
                if zero_record || validator.check(c.interfaces, &clamped, c.offset).is_err() {
                    break;
                }
                order.step(p.ts_ns);
                header_end.get_or_insert(c.offset);
                (p.ts_ns, c.offset)
            }
            Ok(None) => {
                kept_end = reader.offset();
                break;
            }
            // Every block before the one that failed is whole.
            Err(e) => {
                kept_end = kept_end.max(e.offset);
                break;
            }
        };
        let end = reader.offset();
        let start_new = spans
            .last()
            .is_none_or(|s| s.data_len as u64 >= REPAIR_CHUNK);
        if start_new {
            let start = spans
                .last()
                .map_or(offset, |s| s.data_offset + u64::from(s.data_len));
            spans.push(ChunkEntry {
                frame_offset: start,
                frame_len: 0,
                data_offset: start,
                data_len: 0,
                first_ts_ns: ts,
                last_ts_ns: ts,
                packets: 0,
                kind: FrameKind::Packets,
                codec: Codec::Raw,
            });
        }
        let s = spans.last_mut().expect("a span was just ensured");
        s.data_len = (end - s.data_offset) as u32;
        s.frame_len = s.data_len;
        s.first_ts_ns = s.first_ts_ns.min(ts);
        s.last_ts_ns = s.last_ts_ns.max(ts);
        s.packets += 1;
        kept_end = end;
    }
    // Without a packet, the header is everything that parsed.
    let header_len = header_end.unwrap_or(kept_end);
    let mut header_bytes = vec![0; header_len as usize];
    file.read_exact_at(&mut header_bytes, 0)
        .map_err(|e| FileError::whole(path, e.to_string()))?;
    let header = Header::parse(header_bytes).map_err(|e| {
        FileError::at(
            path,
            e.offset,
            format!("the header does not parse ({e}); nothing can be kept"),
        )
    })?;
    let mut entries = vec![ChunkEntry {
        frame_offset: 0,
        frame_len: header_len as u32,
        data_offset: 0,
        data_len: header_len as u32,
        first_ts_ns: 0,
        last_ts_ns: 0,
        packets: 0,
        kind: FrameKind::Header,
        codec: Codec::Raw,
    }];
    let packets_end = spans
        .last()
        .map_or(header_len, |s| s.data_offset + u64::from(s.data_len));
    entries.extend(spans);
    // Whole blocks after the last packet (interface statistics) make a last frame.
    if kept_end > packets_end {
        let len = (kept_end - packets_end) as u32;
        let mut tail = vec![0; len as usize];
        file.read_exact_at(&mut tail, packets_end)
            .map_err(|e| FileError::whole(path, e.to_string()))?;
        let kind = match ChunkPackets::parse(&header, &tail) {
            Ok(c) if c.is_empty() && !c.stats.is_empty() => FrameKind::Stats,
            _ => FrameKind::Packets,
        };
        entries.push(ChunkEntry {
            frame_offset: packets_end,
            frame_len: len,
            data_offset: packets_end,
            data_len: len,
            first_ts_ns: 0,
            last_ts_ns: 0,
            packets: 0,
            kind,
            codec: Codec::Raw,
        });
    }
    Ok(Rebuilt {
        header,
        entries,
        end: kept_end,
        out_of_order: order.backwards,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::testutil::*;

    fn two_chunk_spec(format: Format, container: Container) -> FileSpec<'static> {
        let mut s = FileSpec::new(1, 4, format, container);
        s.chunks = vec![
            (
                Codec::Zstd(3),
                vec![pkt(1_000, 1), pkt(2_000, 2), pkt(3_000, 3)],
            ),
            (Codec::Lz4, vec![pkt(4_000, 4), pkt(5_000, 5)]),
        ];
        s.stats = true;
        s
    }

    fn message(r: Result<FileSummary, FileError>) -> String {
        r.expect_err("verification should fail").to_string()
    }

    #[test]
    fn good_files_verify_in_every_container_and_format() {
        let dir = tempfile::tempdir().unwrap();
        for container in [Container::Zstd, Container::Lz4, Container::Plain] {
            for format in [Format::Pcapng, Format::Pcap] {
                let path = write_file(dir.path(), &two_chunk_spec(format, container));
                let s = verify_file(&path).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(
                    (s.packets, s.chunks, s.first_ts_ns, s.last_ts_ns),
                    (5, 2, Some(1_000), Some(5_000))
                );
                assert_eq!(s.container, Some(container));
            }
        }
    }

    #[test]
    fn a_plain_capture_without_index_is_read_fully() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("foreign.pcapng");
        let mut bytes = Format::Pcapng
            .file_header(&[eth("x")], &Default::default())
            .unwrap();
        let header_len = bytes.len() as u64;
        bytes.extend(record_bytes(Format::Pcapng, &pkt(5, 1)));
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(verify_file(&path).unwrap().packets, 1);
        let second = bytes.len() as u64;
        bytes.extend(record_bytes(Format::Pcapng, &pkt(4, 1)));
        std::fs::write(&path, &bytes).unwrap();
        let msg = message(verify_file(&path));
        assert!(
            msg.contains(&format!(
                "at byte offset {second}: timestamp on interface 0 goes backwards"
            )),
            "{msg}"
        );
        assert!(second > header_len);
    }

    #[test]
    fn a_flipped_byte_in_a_compressed_frame_names_the_frame() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(dir.path(), &two_chunk_spec(Format::Pcapng, Container::Zstd));
        let f = StoredFile::open(&path).unwrap();
        let chunk = f.index.entries[1];
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(chunk.frame_offset + u64::from(chunk.frame_len) / 2) as usize] ^= 0x10;
        std::fs::write(&path, &bytes).unwrap();
        let msg = message(verify_file(&path));
        assert!(
            msg.starts_with(&format!(
                "{}: at byte offset {}: ",
                path.display(),
                chunk.frame_offset
            )),
            "{msg}"
        );
    }

    #[test]
    fn a_flipped_length_in_a_plain_file_names_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(
            dir.path(),
            &two_chunk_spec(Format::Pcapng, Container::Plain),
        );
        let f = StoredFile::open(&path).unwrap();
        let second_chunk = f.index.entries[2].data_offset;
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[second_chunk as usize + 4] ^= 0x01; // the block length of the chunk's first EPB
        std::fs::write(&path, &bytes).unwrap();
        let msg = message(verify_file(&path));
        assert!(
            msg.contains(&format!("at byte offset {second_chunk}: ")),
            "{msg}"
        );
    }

    #[test]
    fn a_truncated_file_names_where_its_complete_frames_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(dir.path(), &two_chunk_spec(Format::Pcapng, Container::Zstd));
        let f = StoredFile::open(&path).unwrap();
        let second = f.index.entries[2];
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..(second.frame_offset + 5) as usize]).unwrap();
        let msg = message(verify_file(&path));
        assert!(
            msg.contains(&format!(
                "at byte offset {}: file is truncated",
                second.frame_offset
            )),
            "{msg}"
        );
    }

    #[test]
    fn a_flow_index_that_does_not_describe_its_chunk_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        // A valid flow index, but of a frame the chunk does not hold.
        let mut b = FlowIndexBuilder::new();
        b.add(1, &[0u8; 60]);
        let other = b.finish().encode();
        for (flows, want) in [
            (other, "differs from the one its packets give"),
            (vec![1, 2, 3], "does not decode"),
        ] {
            let mut spec = two_chunk_spec(Format::Pcapng, Container::Zstd);
            let bad = flows.clone();
            let tamper = move |index: &mut ChunkIndex| {
                index.flows = vec![Vec::new(); index.entries.len()];
                index.flows[1] = bad.clone();
            };
            spec.tamper = &tamper;
            let path = write_file(dir.path(), &spec);
            let at = StoredFile::open(&path).unwrap().index.entries[1].frame_offset;
            let msg = message(verify_file(&path));
            assert!(
                msg.contains(&format!(
                    "at byte offset {at}: chunk index entry 1: flow index {want}"
                )),
                "{msg}"
            );
            std::fs::remove_file(&path).unwrap();
        }
    }

    #[test]
    fn a_wrong_packet_count_in_the_index_names_the_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = two_chunk_spec(Format::Pcap, Container::Lz4);
        spec.tamper = &|index| index.entries[2].packets = 3;
        let path = write_file(dir.path(), &spec);
        let at = StoredFile::open(&path).unwrap().index.entries[2].frame_offset;
        let msg = message(verify_file(&path));
        assert!(
            msg.contains(&format!(
                "at byte offset {at}: chunk index entry 2: says 3 packets, the chunk holds 2"
            )),
            "{msg}"
        );
    }

    #[test]
    fn a_timestamp_going_backwards_names_the_record_in_the_decompressed_stream() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = two_chunk_spec(Format::Pcapng, Container::Zstd);
        spec.chunks[1].1[1].ts_ns = 3_500; // after 4_000 in the same chunk
        let path = write_file(dir.path(), &spec);
        let f = StoredFile::open(&path).unwrap();
        let chunk = f.index.entries[2];
        let record = chunk.data_offset + record_bytes(Format::Pcapng, &pkt(4_000, 4)).len() as u64;
        let msg = message(verify_file(&path));
        assert!(
            msg.contains(&format!(
                "at byte offset {record}: timestamp goes backwards by 500 ns"
            )),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("frame at file offset {}", chunk.frame_offset)),
            "{msg}"
        );
    }

    #[test]
    fn time_going_backwards_across_interfaces_is_a_defect_too() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = two_chunk_spec(Format::Pcapng, Container::Plain);
        spec.ifaces.push(eth("eth1"));
        spec.chunks[1].1[0] = Pkt {
            ts_ns: 2_500,
            iface: 1,
            fill: 9,
            len: 60,
        };
        let path = write_file(dir.path(), &spec);
        let at = StoredFile::open(&path).unwrap().index.entries[2].data_offset;
        let msg = message(verify_file(&path));
        assert!(
            msg.contains(&format!(
                "at byte offset {at}: timestamp goes backwards by 500 ns"
            )),
            "{msg}"
        );
    }

    #[test]
    fn a_partial_file_is_refused_without_repair() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir
            .path()
            .join(".20261123T055734.000000123Z-s01-000007.pcapng.zst.partial");
        std::fs::write(&path, b"").unwrap();
        assert!(message(verify_file(&path)).contains("run `tapdeck verify --repair`"));
    }

    /// Writes `spec`'s frames without a trailer under a partial name, cut at `keep` bytes,
    /// then `padding` zero bytes.
    fn write_partial(
        dir: &Path,
        spec: &FileSpec,
        keep: impl Fn(&[u8], &ChunkIndex) -> usize,
        padding: usize,
    ) -> PathBuf {
        let (bytes, index) = build(spec);
        let first = spec.chunks[0].1[0].ts_ns;
        let name = meta::file_name(first, spec.stream, spec.seq, spec.format, spec.container);
        let path = dir.join(meta::partial_name(&name));
        let mut partial = bytes[..keep(&bytes, &index)].to_vec();
        partial.resize(partial.len() + padding, 0);
        std::fs::write(&path, partial).unwrap();
        path
    }

    #[test]
    fn repair_keeps_every_complete_chunk_of_a_truncated_padded_partial() {
        for container in [Container::Zstd, Container::Lz4, Container::Plain] {
            for format in [Format::Pcapng, Format::Pcap] {
                let dir = tempfile::tempdir().unwrap();
                let mut spec = two_chunk_spec(format, container);
                spec.chunks
                    .push((Codec::Zstd(1), vec![pkt(6_000, 6), pkt(7_000, 7)]));
                spec.stats = false;
                // Cut in the middle of the last chunk, then O_DIRECT-style zero padding.
                let cut = |_: &[u8], index: &ChunkIndex| {
                    let last = index.entries[3];
                    (last.frame_offset + u64::from(last.frame_len) - 7) as usize
                };
                // Classic pcap records have no trailing length: a record cut short and
                // padded with zeros cannot be told from a whole one, so no padding there.
                let padding = if (container, format) == (Container::Plain, Format::Pcap) {
                    0
                } else {
                    4096
                };
                let partial = write_partial(dir.path(), &spec, cut, padding);
                let repaired = repaired_path(
                    repair(&partial).unwrap_or_else(|e| panic!("{container:?} {format:?}: {e}")),
                );
                assert!(!partial.exists());
                let s = verify_file(&repaired)
                    .unwrap_or_else(|e| panic!("{container:?} {format:?}: {e}"));
                // A plain file keeps every complete record; a container every complete frame.
                let expect = if container == Container::Plain { 6 } else { 5 };
                assert_eq!(
                    (s.packets, s.repaired),
                    (expect, true),
                    "{container:?} {format:?}"
                );
                let f = StoredFile::open(&repaired).unwrap();
                assert_eq!(
                    (f.meta.stream, f.meta.seq, f.meta.last_ts_ns),
                    (1, 4, expect * 1_000)
                );
                assert!(f.meta.counts.is_empty());
            }
        }
    }

    #[test]
    fn an_out_of_order_file_verifies_when_its_metadata_counts_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = two_chunk_spec(Format::Pcapng, Container::Zstd);
        spec.chunks[1].1[1].ts_ns = 3_500;
        spec.tamper = &|index| {
            let mut m: FileMeta = serde_json::from_str(&index.meta).unwrap();
            (m.out_of_order, m.last_ts_ns) = (1, 4_000);
            index.meta = serde_json::to_string(&m).unwrap();
            (index.entries[2].first_ts_ns, index.entries[2].last_ts_ns) = (3_500, 4_000);
        };
        let path = write_file(dir.path(), &spec);
        assert_eq!(verify_file(&path).unwrap().packets, 5);
    }

    #[test]
    fn repair_keeps_a_complete_statistics_frame() {
        let dir = tempfile::tempdir().unwrap();
        let spec = two_chunk_spec(Format::Pcapng, Container::Zstd);
        let partial = write_partial(dir.path(), &spec, |b, _| b.len(), 512);
        let repaired = repaired_path(repair(&partial).unwrap());
        let f = StoredFile::open(&repaired).unwrap();
        assert_eq!(f.index.entries.last().unwrap().kind, FrameKind::Stats);
        assert_eq!(verify_file(&repaired).unwrap().packets, 5);
    }

    #[test]
    fn repair_refuses_a_file_without_a_complete_header() {
        let dir = tempfile::tempdir().unwrap();
        let spec = two_chunk_spec(Format::Pcapng, Container::Zstd);
        let partial = write_partial(dir.path(), &spec, |_, _| 10, 0);
        assert!(repair(&partial)
            .unwrap_err()
            .to_string()
            .contains("nothing can be kept"));
        assert!(partial.exists());
    }

    #[test]
    fn repair_removes_a_partial_its_writer_never_wrote_to() {
        for (len, bytes) in [(0, 0u8), (1 << 21, 0)] {
            let dir = tempfile::tempdir().unwrap();
            let name = meta::file_name(1_000, 0, 3, Format::Pcapng, Container::Zstd);
            let partial = dir.path().join(meta::partial_name(&name));
            std::fs::write(&partial, vec![bytes; len]).unwrap();
            assert_eq!(
                repair(&partial).unwrap(),
                Repaired::RemovedEmpty,
                "{len} bytes"
            );
            assert!(!partial.exists());
            assert!(!dir.path().join(&name).exists());
        }
        // One byte that is not zero is something written: refused, kept for a person to see.
        let dir = tempfile::tempdir().unwrap();
        let name = meta::file_name(1_000, 0, 3, Format::Pcapng, Container::Zstd);
        let partial = dir.path().join(meta::partial_name(&name));
        let mut bytes = vec![0u8; 8192];
        bytes[5000] = 1;
        std::fs::write(&partial, bytes).unwrap();
        assert!(repair(&partial).is_err());
        assert!(partial.exists());
    }

    fn repaired_path(r: Repaired) -> PathBuf {
        match r {
            Repaired::As(p) => p,
            Repaired::RemovedEmpty => panic!("removed instead of repaired"),
        }
    }
}

#[cfg(test)]
mod truncated_tests {
    use super::*;
    use crate::read::testutil::*;

    #[test]
    fn a_cut_stored_file_is_repaired_in_place_up_to_its_last_whole_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = FileSpec::new(0, 3, Format::Pcapng, Container::Zstd);
        s.chunks = vec![
            (Codec::Zstd(3), vec![pkt(1_000, 1), pkt(2_000, 2)]),
            (Codec::Lz4, vec![pkt(3_000, 3)]),
            (Codec::Zstd(1), vec![pkt(4_000, 4)]),
        ];
        let path = write_file(dir.path(), &s);
        let last = StoredFile::open(&path).unwrap().index.entries[3];
        let cut = last.frame_offset + 5;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut)
            .unwrap();
        assert!(is_truncated(&path));
        let (read, lost) = salvage(&path).unwrap();
        assert_eq!((read.meta.packets, lost), (3, 5));
        assert_eq!(repair_truncated(&path).unwrap(), 3);
        assert!(!is_truncated(&path));
        let summary = verify_file(&path).unwrap();
        assert_eq!((summary.packets, summary.chunks), (3, 2));
        assert!(summary.repaired);
        // Repaired zstd chunks do not know their level.
        assert_eq!(summary.codecs.keys().collect::<Vec<_>>(), ["lz4", "zstd"]);
    }

    #[test]
    fn a_corrupt_middle_chunk_is_not_cut_off_by_repair() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = FileSpec::new(0, 3, Format::Pcapng, Container::Zstd);
        s.chunks = vec![
            (Codec::Zstd(3), vec![pkt(1_000, 1)]),
            (Codec::Zstd(3), vec![pkt(2_000, 2)]),
            (Codec::Zstd(3), vec![pkt(3_000, 3)]),
        ];
        let path = write_file(dir.path(), &s);
        let f = StoredFile::open(&path).unwrap();
        let (mid, last) = (f.index.entries[2], f.index.entries[3]);
        let mut bytes = std::fs::read(&path).unwrap();
        // Junk inside the middle frame's compressed block (its header stays whole), and
        // the trailer lost.
        let at = mid.frame_offset as usize + mid.frame_len as usize - 6;
        bytes[at..at + 3].fill(0xEE);
        bytes.truncate((last.frame_offset + u64::from(last.frame_len)) as usize);
        std::fs::write(&path, &bytes).unwrap();
        assert!(is_truncated(&path));
        let err = repair_truncated(&path).unwrap_err().to_string();
        assert!(err.contains("not cutting them off"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "the file was changed");
    }
}
