//! Reading a trace store: its files, their chunk indexes, and the packets of chosen chunks.
//!
//! A stored file is opened from its trailer alone (for a plain file, from its sidecar), so
//! listing a store or planning an extraction decodes no packet data. Packets are read one
//! chunk at a time: a chunk holds whole records, so the file's header frame followed by any
//! one chunk is a valid capture file of its own, and [`TraceReader`] parses it strictly.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tapdeck_pcap::container::{
    self, ChunkEntry, ChunkIndex, Codec, Container, ContainerError, FrameKind, TrailerPlace,
};
use tapdeck_pcap::{
    Format, FormatError, Interface, InterfaceStats, Packet, PacketFlags, TraceReader,
};

use crate::meta::{self, FileMeta, Manifest};

/// A defect or failure tied to one file, displayed as the one line a user sees:
/// `PATH: at byte offset N: what`.
#[derive(Debug, thiserror::Error)]
pub struct FileError {
    pub path: PathBuf,
    /// Where in the file the defect is, when it has a place.
    pub offset: Option<u64>,
    pub what: String,
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.offset {
            Some(at) => write!(
                f,
                "{}: at byte offset {at}: {}",
                self.path.display(),
                self.what
            ),
            None => write!(f, "{}: {}", self.path.display(), self.what),
        }
    }
}

impl FileError {
    pub fn at(path: &Path, offset: u64, what: impl Into<String>) -> FileError {
        FileError {
            path: path.to_path_buf(),
            offset: Some(offset),
            what: what.into(),
        }
    }

    pub fn whole(path: &Path, what: impl Into<String>) -> FileError {
        FileError {
            path: path.to_path_buf(),
            offset: None,
            what: what.into(),
        }
    }

    fn io(path: &Path, e: std::io::Error) -> FileError {
        FileError::whole(path, e.to_string())
    }

    fn container(path: &Path, e: ContainerError) -> FileError {
        match e {
            ContainerError::Invalid { offset, what } => FileError::at(path, offset, what),
            ContainerError::Truncated(offset) => {
                FileError::at(path, offset, "file ends inside a frame")
            }
            ContainerError::Io(e) => FileError::io(path, e),
        }
    }
}

/// One complete stored file, opened from its trailer: nothing is decoded until asked.
#[derive(Debug)]
pub struct StoredFile {
    pub path: PathBuf,
    pub container: Container,
    pub format: Format,
    pub index: ChunkIndex,
    pub meta: FileMeta,
    /// Size of the data file, plus its sidecar for a plain container.
    pub stored_len: u64,
    /// Size of the data file alone.
    pub data_len: u64,
    /// Where the trailer lies (in the sidecar, for a plain container).
    pub trailer: TrailerPlace,
    file: File,
    /// A capture file read as one block from its start (see
    /// [`crate::sidecar::open_capture`]): its header frame is empty, and the block
    /// declares the file's interfaces itself.
    whole: bool,
}

impl StoredFile {
    pub fn open(path: &Path) -> Result<StoredFile, FileError> {
        let name = file_name_of(path);
        let (format, container) = meta::kind_of_name(&name).ok_or_else(|| {
            FileError::whole(
                path,
                "not a capture file name (.pcap or .pcapng, then .zst or .lz4)",
            )
        })?;
        let file = File::open(path).map_err(|e| FileError::io(path, e))?;
        let data_len = file.metadata().map_err(|e| FileError::io(path, e))?.len();
        let (index, trailer, stored_len) = if container == Container::Plain {
            let sidecar_path = path.with_file_name(meta::sidecar_name(&name));
            let sidecar = File::open(&sidecar_path).map_err(|e| {
                FileError::whole(
                    path,
                    format!("cannot open its index {}: {e}", sidecar_path.display()),
                )
            })?;
            let sidecar_len = sidecar
                .metadata()
                .map_err(|e| FileError::io(&sidecar_path, e))?
                .len();
            let (index, trailer) = ChunkIndex::locate_trailer(&sidecar)
                .map_err(|e| FileError::container(&sidecar_path, e))?;
            (index, trailer, data_len + sidecar_len)
        } else {
            let (index, trailer) =
                ChunkIndex::locate_trailer(&file).map_err(|e| FileError::container(path, e))?;
            (index, trailer, data_len)
        };
        let meta: FileMeta = serde_json::from_str(&index.meta).map_err(|e| {
            FileError::whole(path, format!("chunk index metadata is not valid: {e}"))
        })?;
        Ok(StoredFile {
            path: path.to_path_buf(),
            container,
            format,
            index,
            meta,
            stored_len,
            data_len,
            trailer,
            file,
            whole: false,
        })
    }

    /// A file whose index was rebuilt from its frames (see [`crate::salvage`]): its
    /// data ends at `data_len`, after the last whole frame.
    pub(crate) fn from_salvage(
        path: &Path,
        name: meta::DataName,
        index: ChunkIndex,
        meta: FileMeta,
        file: File,
        data_len: u64,
    ) -> StoredFile {
        let kind = (name.container, name.format);
        StoredFile::without_trailer(path, kind, index, meta, file, data_len, false)
    }

    /// A plain capture file read by the blocks of its sidecar (see
    /// [`crate::sidecar::open_capture`]): `index` places them, and there is no trailer.
    pub(crate) fn from_capture(
        path: &Path,
        format: Format,
        index: ChunkIndex,
        meta: FileMeta,
        file: File,
        data_len: u64,
        whole: bool,
    ) -> StoredFile {
        let kind = (Container::Plain, format);
        StoredFile::without_trailer(path, kind, index, meta, file, data_len, whole)
    }

    /// A file opened from an index built here (a salvaged file's, a capture file's): its
    /// data runs to `data_len`, and no trailer of its own lies after it.
    fn without_trailer(
        path: &Path,
        (container, format): (Container, Format),
        index: ChunkIndex,
        meta: FileMeta,
        file: File,
        data_len: u64,
        whole: bool,
    ) -> StoredFile {
        StoredFile {
            path: path.to_path_buf(),
            container,
            format,
            index,
            meta,
            stored_len: data_len,
            data_len,
            trailer: TrailerPlace {
                frames_end: data_len,
                index_at: data_len,
                end: data_len,
            },
            file,
            whole,
        }
    }

    pub fn name(&self) -> String {
        file_name_of(&self.path)
    }

    /// The interfaces packets of this file refer to, as its metadata records them.
    pub fn interfaces(&self) -> Vec<Interface> {
        self.meta.interfaces.iter().map(Interface::from).collect()
    }

    /// The header frame (SHB and IDBs, or the pcap file header), if the index has one.
    pub fn header_entry(&self) -> Option<&ChunkEntry> {
        self.index
            .entries
            .first()
            .filter(|e| e.kind == FrameKind::Header)
    }

    /// Entries of frames holding packets.
    pub fn packet_chunks(&self) -> impl Iterator<Item = &ChunkEntry> {
        self.index
            .entries
            .iter()
            .filter(|e| e.kind == FrameKind::Packets)
    }

    /// Decodes one frame into `out` (cleared first). Errors name the frame's file offset.
    pub fn read_frame(&self, entry: &ChunkEntry, out: &mut Vec<u8>) -> Result<(), FileError> {
        out.clear();
        let at = entry.frame_offset;
        let end = at.checked_add(u64::from(entry.frame_len));
        if end.is_none_or(|end| end > self.data_len) {
            return Err(FileError::at(
                &self.path,
                at,
                format!(
                    "the index places a {}-byte frame here, past the end of the file",
                    entry.frame_len
                ),
            ));
        }
        if entry.frame_len as usize > container::MAX_FRAME_LEN {
            return Err(FileError::at(
                &self.path,
                at,
                "the index claims a frame larger than any tapdeck writes",
            ));
        }
        if self.container == Container::Plain {
            out.resize(entry.frame_len as usize, 0);
            return self
                .file
                .read_exact_at(out, at)
                .map_err(|e| FileError::io(&self.path, e));
        }
        let mut frame = vec![0; entry.frame_len as usize];
        self.file
            .read_exact_at(&mut frame, at)
            .map_err(|e| FileError::io(&self.path, e))?;
        match container::frame_len(&frame) {
            Ok(Some(n)) if n == frame.len() => {}
            Ok(Some(n)) => {
                return Err(FileError::at(
                    &self.path,
                    at,
                    format!(
                        "frame is {n} bytes long, the index says {}",
                        entry.frame_len
                    ),
                ))
            }
            Ok(None) => {
                return Err(FileError::at(
                    &self.path,
                    at,
                    format!(
                        "frame runs past the {} bytes the index gives it",
                        entry.frame_len
                    ),
                ))
            }
            Err(what) => return Err(FileError::at(&self.path, at, what)),
        }
        container::decode_frame(self.container, &frame, entry.data_len as usize, out)
            .map_err(|what| FileError::at(&self.path, at, what))
    }

    /// Decodes and parses the header frame: what every chunk of the file is read after.
    pub fn read_header(&self) -> Result<Header, FileError> {
        if self.whole {
            return Ok(Header {
                bytes: Vec::new(),
                format: self.format,
                interfaces: self.interfaces(),
            });
        }
        let entry = self.header_entry().ok_or_else(|| {
            FileError::at(
                &self.path,
                0,
                "the chunk index does not start with a header frame",
            )
        })?;
        let mut bytes = Vec::new();
        self.read_frame(entry, &mut bytes)?;
        Header::parse(bytes).map_err(|e| FileError::at(&self.path, e.offset, e.kind.to_string()))
    }

    /// Decodes and parses one chunk. `scratch` holds the decoded bytes between calls.
    pub fn read_chunk(
        &self,
        header: &Header,
        entry: &ChunkEntry,
        scratch: &mut Vec<u8>,
    ) -> Result<ChunkPackets, FileError> {
        self.read_frame(entry, scratch)?;
        ChunkPackets::parse(header, scratch).map_err(|e| self.record_error(entry, e))
    }

    /// Places a defect found `e.offset` bytes into a chunk: in the decompressed stream,
    /// which for a plain file is the file itself.
    pub fn record_error(&self, entry: &ChunkEntry, e: ChunkError) -> FileError {
        let at = entry.data_offset + e.offset;
        if self.container == Container::Plain {
            FileError::at(&self.path, at, e.what)
        } else {
            FileError::at(
                &self.path,
                at,
                format!(
                    "{} (offset in the decompressed stream; frame at file offset {})",
                    e.what, entry.frame_offset
                ),
            )
        }
    }

    /// Chunks holding packets per codec, e.g. `{"zstd:6": 3, "lz4": 1}`. A repaired
    /// file's zstd chunks say `zstd`: a zstd frame does not record its level.
    pub fn codec_mix(&self) -> BTreeMap<String, u64> {
        let mut mix = BTreeMap::new();
        for e in self.packet_chunks().filter(|e| e.packets > 0) {
            let codec = match e.codec {
                Codec::Zstd(0) => "zstd".to_string(),
                c => c.to_string(),
            };
            *mix.entry(codec).or_insert(0) += 1;
        }
        mix
    }
}

pub(crate) fn file_name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A stored file: a compressed container named as a store names its files or ending in a
/// chunk index, or a plain one with its `.idx`. A `.zst` or `.lz4` that a stock tool wrote
/// (`zstd trace.pcap`) is a compressed capture file instead, as `verify` and `index` treat
/// it; one named as a store's file is always stored, so a damaged one is reported as such.
pub fn is_stored(path: &Path) -> bool {
    let name = file_name_of(path);
    if Container::from_suffix(&name) == Container::Plain {
        return path.with_file_name(meta::sidecar_name(&name)).exists();
    }
    meta::DataName::parse(&name).is_some()
        || File::open(path)
            .is_ok_and(|f| ChunkIndex::read_trailer(&f).is_ok() || has_tapdeck_frames(&f))
}

/// Whether a compressed file begins with a skippable frame (a chunk index, or any frame in
/// the range zstd and LZ4 keep for other tools) or ends with a seek table's footer: stock
/// `zstd` and `lz4` write neither, so such a file is a stored one, damaged if its trailer
/// does not read.
fn has_tapdeck_frames(file: &File) -> bool {
    const SKIPPABLE: std::ops::RangeInclusive<u32> = 0x184D_2A50..=0x184D_2A5F;
    const SEEK_TABLE_FOOTER: u32 = 0x8F92_EAB1;
    let Ok(size) = file.metadata().map(|m| m.len()) else {
        return false;
    };
    let word = |at: u64| {
        let mut b = [0u8; 4];
        file.read_exact_at(&mut b, at)
            .ok()
            .map(|()| u32::from_le_bytes(b))
    };
    word(0).is_some_and(|w| SKIPPABLE.contains(&w))
        || (size >= 4 && word(size - 4) == Some(SEEK_TABLE_FOOTER))
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

/// Time order of a file's packets, in file order.
#[derive(Debug, Default)]
pub(crate) struct TimeOrder {
    pub first_ts: Option<u64>,
    last_ts: Option<u64>,
    pub min_ts: Option<u64>,
    pub max_ts: Option<u64>,
    /// Packets earlier than the packet before them (what the recorder counts).
    pub backwards: u64,
}

impl TimeOrder {
    /// Records one packet; returns the previous timestamp if this one is earlier.
    pub fn step(&mut self, ts: u64) -> Option<u64> {
        let prev = self.last_ts.filter(|&prev| ts < prev);
        self.backwards += u64::from(prev.is_some());
        self.first_ts.get_or_insert(ts);
        self.last_ts = Some(ts);
        self.min_ts = Some(self.min_ts.map_or(ts, |m| m.min(ts)));
        self.max_ts = Some(self.max_ts.map_or(ts, |m| m.max(ts)));
        prev
    }
}

/// A file's decoded header frame and the interfaces it declares.
#[derive(Debug, Clone)]
pub struct Header {
    pub bytes: Vec<u8>,
    pub format: Format,
    pub interfaces: Vec<Interface>,
}

impl Header {
    /// Parses header bytes; they must hold no packets and no statistics.
    pub fn parse(bytes: Vec<u8>) -> Result<Header, FormatError> {
        let mut reader = TraceReader::new(&bytes[..])?;
        if reader.next_packet()?.is_some() {
            return Err(format_error(
                reader.packet_offset(),
                "the header frame holds a packet",
            ));
        }
        if !reader.stats().is_empty() {
            return Err(format_error(
                0,
                "the header frame holds interface statistics",
            ));
        }
        let (format, interfaces) = (reader.format(), reader.interfaces().to_vec());
        Ok(Header {
            bytes,
            format,
            interfaces,
        })
    }
}

fn format_error(offset: u64, what: &str) -> FormatError {
    FormatError::new(offset, tapdeck_pcap::FormatErrorKind::Invalid(what.into()))
}

/// A defect inside one chunk, `offset` bytes from the chunk's start.
#[derive(Debug)]
pub struct ChunkError {
    pub offset: u64,
    pub what: String,
}

/// One packet of a decoded chunk; its bytes live in the [`ChunkPackets`] that holds it.
#[derive(Debug, Clone)]
pub struct PacketRecord {
    pub ts_ns: u64,
    pub iface: u32,
    pub orig_len: u32,
    pub flags: Option<PacketFlags>,
    /// Offset of the record within the chunk.
    pub offset: u64,
    data: Range<usize>,
}

/// The packets (and statistics blocks) of one chunk, owning their bytes, so that a merge
/// can hold one chunk per stream while it interleaves them.
#[derive(Debug, Default)]
pub struct ChunkPackets {
    data: Vec<u8>,
    pub records: Vec<PacketRecord>,
    pub stats: Vec<InterfaceStats>,
}

impl ChunkPackets {
    /// Parses `chunk` as the continuation of `header`. A chunk must consist of whole packet
    /// (or statistics) records and declare no interfaces of its own: each chunk is read
    /// after the header alone, so an interface declared in one would be unknown to the next.
    /// A header without bytes stands for a whole capture file read as one chunk: that
    /// chunk declares every interface itself.
    pub fn parse(header: &Header, chunk: &[u8]) -> Result<ChunkPackets, ChunkError> {
        let whole = header.bytes.is_empty();
        let skip = header.bytes.len() as u64;
        let in_chunk = |e: FormatError| ChunkError {
            offset: e.offset.saturating_sub(skip),
            what: e.kind.to_string(),
        };
        let mut reader =
            TraceReader::new(header.bytes.as_slice().chain(chunk)).map_err(in_chunk)?;
        let mut out = ChunkPackets {
            data: Vec::with_capacity(chunk.len()),
            ..Default::default()
        };
        while let Some(c) = reader.next_packet_with_context().map_err(in_chunk)? {
            if !whole && c.interfaces.len() != header.interfaces.len() {
                return Err(ChunkError {
                    offset: c.offset.saturating_sub(skip),
                    what: "chunk declares interfaces of its own; only the header frame may".into(),
                });
            }
            let start = out.data.len();
            out.data.extend_from_slice(c.packet.data);
            out.records.push(PacketRecord {
                ts_ns: c.packet.ts_ns,
                iface: c.packet.iface,
                orig_len: c.packet.orig_len,
                flags: c.packet.flags,
                offset: c.offset.saturating_sub(skip),
                data: start..out.data.len(),
            });
        }
        if !whole && reader.interfaces().len() != header.interfaces.len() {
            return Err(ChunkError {
                offset: 0,
                what: "chunk declares interfaces of its own; only the header frame may".into(),
            });
        }
        out.stats = reader.stats().to_vec();
        Ok(out)
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn packet(&self, i: usize) -> Packet<'_> {
        let r = &self.records[i];
        Packet {
            ts_ns: r.ts_ns,
            iface: r.iface,
            orig_len: r.orig_len,
            flags: r.flags,
            data: &self.data[r.data.clone()],
        }
    }
}

/// A trace store: its manifest (if any) and its data files across all data directories.
#[derive(Debug)]
pub struct Store {
    pub root: PathBuf,
    pub manifest: Option<Manifest>,
    /// Complete data files, sorted by name (first timestamp, then stream and sequence).
    pub files: Vec<PathBuf>,
    /// Files left incomplete by a writer that died (`.NAME.partial`).
    pub partials: Vec<PathBuf>,
    /// Plain capture files named as inputs (not a store's), read by their sidecars'
    /// blocks (see [`Store::of_capture`]).
    pub captures: Vec<PathBuf>,
}

impl Store {
    /// Opens a store directory. Without a manifest the directory itself is taken as the one
    /// data directory, so a directory of copied files works too.
    pub fn open(root: &Path) -> Result<Store, FileError> {
        Store::open_with(root, &[])
    }

    /// Like [`Store::open`]; `moved` are places where data directories that moved may be
    /// now (recognized by their ids, see [`Store::data_dirs`]).
    pub fn open_with(root: &Path, moved: &[PathBuf]) -> Result<Store, FileError> {
        let manifest_path = root.join(meta::MANIFEST);
        let manifest: Option<Manifest> = match std::fs::read(&manifest_path) {
            Ok(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| {
                FileError::whole(&manifest_path, format!("not a valid store manifest: {e}"))
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(FileError::io(&manifest_path, e)),
        };
        let mut dirs = match &manifest {
            Some(m) if !m.dirs.is_empty() => Store::data_dirs(root, m, moved)?,
            _ => vec![root.to_path_buf()],
        };
        dirs.dedup();
        let (mut files, mut partials) = (Vec::new(), Vec::new());
        for dir in &dirs {
            let entries = std::fs::read_dir(dir)
                .map_err(|e| FileError::whole(dir, format!("cannot list data directory: {e}")))?;
            for entry in entries {
                let entry = entry.map_err(|e| FileError::io(dir, e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if meta::is_data_file(&name) {
                    files.push(entry.path());
                } else if meta::DataName::of_partial(&name).is_some() {
                    partials.push(entry.path());
                }
            }
        }
        let by_name =
            |a: &PathBuf, b: &PathBuf| a.file_name().cmp(&b.file_name()).then_with(|| a.cmp(b));
        files.sort_by(by_name);
        partials.sort_by(by_name);
        Ok(Store {
            root: root.to_path_buf(),
            manifest,
            files,
            partials,
            captures: Vec::new(),
        })
    }

    /// A plain pcap or pcapng file that another tool wrote, as an input of its own: read by
    /// the blocks its sidecar `FILE.tdx` places, so a filter reads only the blocks that can
    /// match (without a fresh sidecar the file is indexed in memory first).
    pub fn of_capture(path: &Path) -> Store {
        Store {
            root: path.to_path_buf(),
            manifest: None,
            files: Vec::new(),
            partials: Vec::new(),
            captures: vec![path.to_path_buf()],
        }
    }

    /// Where the data directories of the store at `root` are now. A directory with an id
    /// is the one whose `.tapdeck-dir` mark holds that id and the store's: at its recorded
    /// place (relative to the store), else among `moved`, the store and the store's
    /// subdirectories; otherwise the error says which one is missing and how to name its
    /// new place. A manifest without ids (older stores: absolute paths) is followed as
    /// written, except that a path into the store's old place is taken relative to where
    /// the store is now, so a moved or copied store reads its own files.
    pub fn data_dirs(
        root: &Path,
        m: &Manifest,
        moved: &[PathBuf],
    ) -> Result<Vec<PathBuf>, FileError> {
        match m
            .store_id
            .as_deref()
            .filter(|_| m.dir_ids.len() == m.dirs.len())
        {
            Some(store_id) => data_dirs_by_id(root, m, store_id, moved),
            None => data_dirs_by_path(root, m, moved),
        }
    }
}

/// A manifest with ids: each directory is the one whose mark holds its id and the store's,
/// looked for at its recorded place, then among `moved`, the store and its subdirectories.
fn data_dirs_by_id(
    root: &Path,
    m: &Manifest,
    store_id: &str,
    moved: &[PathBuf],
) -> Result<Vec<PathBuf>, FileError> {
    // Listed only when a directory is not at its recorded place: a store's root may hold
    // thousands of data files, and telling subdirectories apart costs a stat each.
    let mut near: Option<Vec<PathBuf>> = None;
    let mut out = Vec::new();
    for (d, id) in m.dirs.iter().zip(&m.dir_ids) {
        let recorded = under(root, Path::new(d));
        let is_it = |p: &Path| {
            meta::DirMark::read(p).is_some_and(|k| k.store_id == store_id && &k.dir_id == id)
        };
        let found = if is_it(&recorded) {
            Some(&recorded)
        } else {
            (near.get_or_insert_with(|| near_places(root, moved)).iter()).find(|p| is_it(p))
        };
        let Some(p) = found else {
            let there = match meta::DirMark::read(&recorded) {
                Some(_) => "holds another data directory (its .tapdeck-dir names another id)",
                None if recorded.is_dir() => "has no .tapdeck-dir mark of this store",
                None => "does not exist",
            };
            return Err(FileError::whole(
                &root.join(meta::MANIFEST),
                format!(
                    "data directory {} (id {id}) is missing: {} {there}; if it moved, name its new place with --data-dir DIR",
                    d,
                    recorded.display()
                ),
            ));
        };
        out.push(p.clone());
    }
    Ok(out)
}

/// Where a moved data directory may be: `moved`, the store, the store's subdirectories.
fn near_places(root: &Path, moved: &[PathBuf]) -> Vec<PathBuf> {
    let mut near: Vec<PathBuf> = moved.to_vec();
    near.push(root.to_path_buf());
    if let Ok(entries) = std::fs::read_dir(root) {
        let mut subdirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        subdirs.sort();
        near.extend(subdirs);
    }
    near
}

/// An older manifest (absolute paths, no ids): each directory as written, or rebased when
/// the store was copied or moved.
fn data_dirs_by_path(
    root: &Path,
    m: &Manifest,
    moved: &[PathBuf],
) -> Result<Vec<PathBuf>, FileError> {
    let here = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mut out = Vec::new();
    for d in &m.dirs {
        let recorded = under(root, Path::new(d));
        if !recorded.is_absolute() || std::fs::canonicalize(&recorded).ok() == Some(here.clone()) {
            out.push(recorded);
            continue;
        }
        // The nearest directory above (or at) the recorded path that holds a manifest
        // was the store's place when it was recorded; if that is not here, the store
        // was copied or moved, and the path is taken relative to it.
        let old_root = recorded
            .ancestors()
            .find(|a| a.join(meta::MANIFEST).is_file());
        if let Some(old) = old_root {
            let rebased = under(root, recorded.strip_prefix(old).unwrap_or(Path::new("")));
            if rebased.is_dir() {
                out.push(rebased);
                continue;
            }
        }
        if recorded.is_dir() {
            out.push(recorded);
            continue;
        }
        let name = recorded.file_name();
        let guess = if m.dirs.len() == 1 {
            Some(root.to_path_buf())
        } else {
            moved
                .iter()
                .find(|p| p.file_name() == name)
                .cloned()
                .or_else(|| name.map(|n| root.join(n)).filter(|p| p.is_dir()))
        };
        let Some(p) = guess else {
            return Err(FileError::whole(
                &root.join(meta::MANIFEST),
                format!(
                    "data directory {} does not exist; if it moved, name its new place with --data-dir DIR",
                    recorded.display()
                ),
            ));
        };
        out.push(p);
    }
    Ok(out)
}

/// `dir` relative to `root` (an absolute `dir` stays itself), without `.` components, so
/// that `.` is the store itself and paths print as users expect.
fn under(root: &Path, dir: &Path) -> PathBuf {
    root.join(dir).components().collect()
}

/// RFC 3339 in UTC to the nanosecond: `2026-11-23T05:57:34.000000123Z`.
pub fn format_time(ts_ns: u64) -> String {
    // compact_utc is fixed-width (`YYYYMMDDTHHMMSS.nnnnnnnnnZ`) for the years we can name.
    let c = meta::compact_utc(ts_ns);
    format!(
        "{}-{}-{}T{}:{}:{}",
        &c[0..4],
        &c[4..6],
        &c[6..8],
        &c[9..11],
        &c[11..13],
        &c[13..]
    )
}

#[cfg(any(test, feature = "testutil"))]
pub mod testutil {
    //! Builds small stored files by hand, the way the recorder lays them out.

    use super::*;
    use crate::meta::{container_name, format_name, InterfaceCounts, InterfaceMeta, STORE_VERSION};
    use tapdeck_pcap::container::{Codec, FrameEncoder};
    use tapdeck_pcap::SectionInfo;

    /// A packet to store: (timestamp, interface, payload byte, length).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Pkt {
        pub ts_ns: u64,
        pub iface: u32,
        pub fill: u8,
        pub len: usize,
    }

    /// Packets are large enough that a plain test file is longer than its sidecar; see
    /// `tiny_plain_files_open_from_their_sidecar`.
    pub fn pkt(ts_ns: u64, fill: u8) -> Pkt {
        Pkt {
            ts_ns,
            iface: 0,
            fill,
            len: 200,
        }
    }

    pub struct FileSpec<'a> {
        pub stream: u32,
        pub seq: u64,
        pub format: Format,
        pub container: Container,
        pub ifaces: Vec<Interface>,
        /// Packets per chunk, with the codec of each chunk.
        pub chunks: Vec<(Codec, Vec<Pkt>)>,
        pub stats: bool,
        /// Lets a test damage the index before it is written.
        pub tamper: &'a dyn Fn(&mut ChunkIndex),
    }

    /// A file of stream 1, sequence 4: chunks of 3 and 2 packets (times 1 000 to 5 000 ns)
    /// and a statistics frame.
    pub fn two_chunk_spec(format: Format, container: Container) -> FileSpec<'static> {
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

    pub fn eth(name: &str) -> Interface {
        Interface {
            linktype: 1,
            snaplen: 0,
            name: Some(name.into()),
            description: None,
        }
    }

    impl FileSpec<'_> {
        pub fn new(
            stream: u32,
            seq: u64,
            format: Format,
            container: Container,
        ) -> FileSpec<'static> {
            FileSpec {
                stream,
                seq,
                format,
                container,
                ifaces: vec![eth("eth0")],
                chunks: vec![],
                stats: false,
                tamper: &|_| {},
            }
        }
    }

    pub fn record_bytes(format: Format, p: &Pkt) -> Vec<u8> {
        let data = ethernet_frame(p);
        let packet = Packet {
            ts_ns: p.ts_ns,
            iface: p.iface,
            orig_len: p.len as u32,
            flags: None,
            data: &data,
        };
        let mut out = vec![0; format.record_len(&packet)];
        let n = format.write_record(&packet, &mut out);
        out.truncate(n);
        out
    }

    /// An Ethernet/IPv4/UDP frame whose UDP destination port is `100 + fill`, so a BPF
    /// filter can pick packets out by their fill byte.
    pub fn ethernet_frame(p: &Pkt) -> Vec<u8> {
        let mut f = vec![p.fill; p.len];
        f[..12].fill(0x02);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((p.len - 14) as u16).to_be_bytes());
        f[20..22].fill(0);
        f[22] = 64;
        f[23] = 17;
        f[34..36].copy_from_slice(&1000u16.to_be_bytes());
        f[36..38].copy_from_slice(&(100 + u16::from(p.fill)).to_be_bytes());
        f
    }

    /// Appends `index` as a new trailer after the file's last, as `tapdeck index` appends
    /// one: readers then take it.
    pub fn append_trailer(path: &Path, index: &ChunkIndex) {
        let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        std::io::Write::write_all(&mut file, &index.encode_trailer()).unwrap();
    }

    /// Writes the file into `dir` under its final name; returns its path.
    pub fn write_file(dir: &Path, spec: &FileSpec) -> PathBuf {
        let (bytes, index) = build(spec);
        let all: Vec<&Pkt> = spec.chunks.iter().flat_map(|(_, p)| p).collect();
        let first = all.first().map_or(0, |p| p.ts_ns);
        let name = meta::file_name(first, spec.stream, spec.seq, spec.format, spec.container);
        let path = dir.join(&name);
        let trailer = index.encode_trailer();
        if spec.container == Container::Plain {
            std::fs::write(&path, &bytes).unwrap();
            std::fs::write(dir.join(meta::sidecar_name(&name)), trailer).unwrap();
        } else {
            std::fs::write(&path, [bytes, trailer].concat()).unwrap();
        }
        path
    }

    /// The frames of a file (without trailer) and its index.
    pub fn build(spec: &FileSpec) -> (Vec<u8>, ChunkIndex) {
        let mut enc = FrameEncoder::new(spec.container);
        let mut bytes = Vec::new();
        let mut entries = Vec::new();
        let mut data_offset = 0u64;
        let mut add = |bytes: &mut Vec<u8>, kind, codec, data: &[u8], pkts: &[Pkt]| {
            let frame_offset = bytes.len() as u64;
            let codec = enc.encode(codec, data, bytes).unwrap();
            entries.push(ChunkEntry {
                frame_offset,
                frame_len: (bytes.len() as u64 - frame_offset) as u32,
                data_offset,
                data_len: data.len() as u32,
                first_ts_ns: pkts.first().map_or(0, |p| p.ts_ns),
                last_ts_ns: pkts.last().map_or(0, |p| p.ts_ns),
                packets: pkts.len() as u32,
                kind,
                codec,
            });
            data_offset += data.len() as u64;
        };
        let header = spec
            .format
            .file_header(&spec.ifaces, &SectionInfo::default())
            .unwrap();
        add(&mut bytes, FrameKind::Header, Codec::Raw, &header, &[]);
        for (codec, pkts) in &spec.chunks {
            let data: Vec<u8> = pkts
                .iter()
                .flat_map(|p| record_bytes(spec.format, p))
                .collect();
            add(&mut bytes, FrameKind::Packets, *codec, &data, pkts);
        }
        let all: Vec<Pkt> = spec.chunks.iter().flat_map(|(_, p)| p.clone()).collect();
        let last = all.last().map_or(0, |p| p.ts_ns);
        if spec.stats && spec.format == Format::Pcapng {
            let data: Vec<u8> = (0..spec.ifaces.len() as u32)
                .flat_map(|iface| {
                    let s = InterfaceStats {
                        iface,
                        ts_ns: last,
                        received: Some(all.len() as u64 + 2),
                        os_dropped: Some(2),
                        if_dropped: Some(0),
                        delivered: Some(all.len() as u64),
                    };
                    spec.format.stats_block(&s, 0, "")
                })
                .collect();
            add(&mut bytes, FrameKind::Stats, Codec::Zstd(1), &data, &[]);
        }
        let meta = FileMeta {
            store_version: STORE_VERSION,
            stream: spec.stream,
            seq: spec.seq,
            format: format_name(spec.format).into(),
            container: container_name(spec.container).into(),
            first_ts_ns: all.first().map_or(0, |p| p.ts_ns),
            last_ts_ns: last,
            packets: all.len() as u64,
            interfaces: spec.ifaces.iter().map(InterfaceMeta::from).collect(),
            counts: spec
                .ifaces
                .iter()
                .map(|_| InterfaceCounts {
                    seen: all.len() as u64 + 2,
                    dropped_kernel: 2,
                    received: all.len() as u64,
                    stored: all.len() as u64,
                    ..Default::default()
                })
                .collect(),
            out_of_order: 0,
            repaired: false,
            run_started_ns: None,
        };
        let mut index = ChunkIndex {
            meta: serde_json::to_string(&meta).unwrap(),
            entries,
            flows: Vec::new(),
            summary: Vec::new(),
        };
        (spec.tamper)(&mut index);
        (bytes, index)
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use tapdeck_pcap::container::Codec;

    #[test]
    fn opens_a_file_from_its_trailer_and_reads_every_chunk() {
        let dir = tempfile::tempdir().unwrap();
        for container in [Container::Zstd, Container::Lz4, Container::Plain] {
            for format in [Format::Pcapng, Format::Pcap] {
                let mut spec = FileSpec::new(3, 9, format, container);
                spec.chunks = vec![
                    (Codec::Zstd(3), vec![pkt(10, 1), pkt(20, 2)]),
                    (Codec::Lz4, vec![pkt(30, 3)]),
                    (Codec::Raw, vec![pkt(40, 4), pkt(40, 5)]),
                ];
                spec.stats = true;
                let path = write_file(dir.path(), &spec);
                let f = StoredFile::open(&path).unwrap();
                assert_eq!(
                    (f.meta.stream, f.meta.seq, f.format, f.container),
                    (3, 9, format, container)
                );
                assert_eq!(
                    meta::DataName::parse(&f.name()).map(|n| (n.stream, n.seq)),
                    Some((3, 9))
                );
                let header = f.read_header().unwrap();
                assert_eq!(header.interfaces.len(), 1);
                let mut scratch = Vec::new();
                let mut fills = Vec::new();
                for e in f.packet_chunks() {
                    let c = f.read_chunk(&header, e, &mut scratch).unwrap();
                    fills.extend((0..c.len()).map(|i| c.packet(i).data[40]));
                }
                assert_eq!(fills, [1, 2, 3, 4, 5], "{container:?} {format:?}");
            }
        }
    }

    #[test]
    fn store_lists_files_across_data_directories_in_name_order() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let mut s = FileSpec::new(0, 0, Format::Pcapng, Container::Zstd);
        s.chunks = vec![(Codec::Raw, vec![pkt(2_000, 1)])];
        let p1 = write_file(&b, &s);
        s.seq = 1;
        s.chunks = vec![(Codec::Raw, vec![pkt(1_000, 1)])];
        let p0 = write_file(&a, &s);
        std::fs::write(a.join(".x-s00-000002.pcapng.zst.partial"), b"").unwrap();
        let manifest = serde_json::json!({
            "store_version": 1, "tapdeck_version": "0", "host": "h", "format": "pcapng",
            "container": "zstd", "dirs": [a, b], "streams": 1, "interfaces": [], "linktypes": [1],
            "snaplen": 0, "options": {}, "started_ns": 0
        });
        std::fs::write(root.path().join(meta::MANIFEST), manifest.to_string()).unwrap();
        let store = Store::open(root.path()).unwrap();
        assert_eq!(store.files, [p0, p1]);
        assert_eq!(store.partials.len(), 1);
    }

    fn manifest_json(dirs: serde_json::Value, ids: Option<(&str, Vec<String>)>) -> String {
        let mut m = serde_json::json!({
            "store_version": 1, "tapdeck_version": "0", "host": "h", "format": "pcapng",
            "container": "zstd", "dirs": dirs, "streams": 1, "interfaces": [], "linktypes": [1],
            "snaplen": 0, "options": {}, "started_ns": 0
        });
        if let Some((store_id, dir_ids)) = ids {
            m["store_id"] = store_id.into();
            m["dir_ids"] = dir_ids.into();
        }
        m.to_string()
    }

    fn one_file(dir: &Path, ts: u64) -> PathBuf {
        let mut s = FileSpec::new(0, 1, Format::Pcapng, Container::Zstd);
        s.chunks = vec![(Codec::Raw, vec![pkt(ts, 1)])];
        write_file(dir, &s)
    }

    #[test]
    fn moved_and_copied_stores_read_their_own_directories() {
        let top = tempfile::tempdir().unwrap();
        let (store, extra) = (top.path().join("good"), top.path().join("extra"));
        std::fs::create_dir_all(store.join("d1")).unwrap();
        std::fs::create_dir_all(&extra).unwrap();
        let dirs = [store.join("d1"), extra.clone()];
        let marked = meta::DataDirs::mark(&store, &dirs).unwrap();
        assert_eq!(marked.dirs[0], "d1");
        assert_eq!(marked.dirs[1], extra.display().to_string());
        let json = manifest_json(
            marked.dirs.clone().into(),
            Some((&marked.store_id, marked.dir_ids.clone())),
        );
        std::fs::write(store.join(meta::MANIFEST), json).unwrap();
        // Marking again (a second run, which finds the manifest) keeps the ids.
        assert_eq!(meta::DataDirs::mark(&store, &dirs).unwrap(), marked);
        let f1 = one_file(&store.join("d1"), 1_000);
        let f2 = one_file(&extra, 2_000);
        assert_eq!(Store::open(&store).unwrap().files, [f1, f2.clone()]);

        // A copy reads its own d1, and the extra directory where it is.
        let copy = top.path().join("copy");
        std::fs::create_dir_all(copy.join("d1")).unwrap();
        std::fs::copy(store.join(meta::MANIFEST), copy.join(meta::MANIFEST)).unwrap();
        for e in std::fs::read_dir(store.join("d1")).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), copy.join("d1").join(e.file_name())).unwrap();
        }
        let files = Store::open(&copy).unwrap().files;
        assert!(files[0].starts_with(&copy), "{files:?}");
        assert_eq!(files[1], f2);

        // The extra directory moved: the error names it and says how to point at it;
        // given its new place (or moved into the store), it is found by its id.
        let moved = top.path().join("elsewhere");
        std::fs::rename(&extra, &moved).unwrap();
        let err = Store::open(&store).unwrap_err().to_string();
        assert!(
            err.contains(&extra.display().to_string()) && err.contains("--data-dir"),
            "{err}"
        );
        let s = Store::open_with(&store, std::slice::from_ref(&moved)).unwrap();
        assert!(s.files[1].starts_with(&moved));
        std::fs::rename(&moved, store.join("disk2")).unwrap();
        assert!(Store::open(&store).unwrap().files[1].starts_with(store.join("disk2")));
    }

    #[test]
    fn old_manifests_with_absolute_paths_follow_a_moved_or_copied_store() {
        let top = tempfile::tempdir().unwrap();
        let good = top.path().join("good");
        std::fs::create_dir_all(&good).unwrap();
        let abs = good.canonicalize().unwrap();
        std::fs::write(
            good.join(meta::MANIFEST),
            manifest_json(serde_json::json!([abs]), None),
        )
        .unwrap();
        let f = one_file(&good, 1_000);
        assert_eq!(Store::open(&good).unwrap().files, [f]);
        // Copied: the copy reads itself, not `good`.
        let copy = top.path().join("copy");
        std::fs::create_dir_all(&copy).unwrap();
        for e in std::fs::read_dir(&good).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
        }
        assert!(Store::open(&copy).unwrap().files[0].starts_with(&copy));
        // Moved: the old place is gone.
        let other = top.path().join("other");
        std::fs::rename(&good, &other).unwrap();
        assert!(Store::open(&other).unwrap().files[0].starts_with(&other));
    }

    /// `ChunkIndex::read_trailer` looks for a sidecar's index frame at the offset where the
    /// data file's frames end, which lies inside the sidecar when the data file is shorter
    /// than the sidecar's index (a plain file of few packets). Fix in container.rs.
    #[test]
    fn tiny_plain_files_open_from_their_sidecar() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = FileSpec::new(0, 0, Format::Pcap, Container::Plain);
        spec.chunks = vec![(
            Codec::Raw,
            vec![Pkt {
                ts_ns: 1,
                iface: 0,
                fill: 1,
                len: 60,
            }],
        )];
        StoredFile::open(&write_file(dir.path(), &spec)).unwrap();
    }

    #[test]
    fn times_print_as_rfc3339() {
        assert_eq!(
            format_time(1_795_413_454_000_000_123),
            "2026-11-23T05:57:34.000000123Z"
        );
    }
}
