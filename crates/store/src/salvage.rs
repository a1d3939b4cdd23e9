//! Reading stored files whose index is missing or lost, by rebuilding it from their bytes:
//! a file a recorder is still writing (read as far as its last flush, [`open_live`]) and a
//! finished file cut short ([`salvage`]). Nothing here changes a file; [`crate::repair`]
//! writes what is rebuilt here to disk.
//!
//! A compressed container is rebuilt from its complete frames; a plain file from its
//! complete, valid records, cut into chunks of about [`REPAIR_CHUNK`] bytes.

use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::FileExt;
use std::path::Path;

use tapdeck_pcap::container::{self, ChunkEntry, ChunkIndex, Codec, Container, FrameKind};
use tapdeck_pcap::validate::Validator;
use tapdeck_pcap::TraceReader;

use crate::meta::{self, FileMeta, InterfaceMeta, STORE_VERSION};
use crate::read::{ChunkPackets, FileError, Header, StoredFile, TimeOrder};

/// Chunk size for a repaired plain file, whose chunk boundaries died with its writer.
const REPAIR_CHUNK: u64 = 4 << 20;

/// The index of a salvaged file: its surviving entries and metadata marked `repaired`.
pub(crate) fn salvaged_index(
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
        summary: Vec::new(),
    };
    (index, meta)
}

/// The parsed name of a complete stored file, or an error saying it is not one.
pub(crate) fn stored_name(path: &Path) -> Result<meta::DataName, FileError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    meta::DataName::parse(&name)
        .ok_or_else(|| FileError::whole(path, "not the name of a stored file"))
}

/// A complete-named stored file whose index is lost (a cut file), read in memory up to
/// its last whole chunk, without changing it; also the number of bytes after that chunk.
/// `extract` reads such a file this way; [`repair_truncated`](crate::repair::repair_truncated) makes it whole on disk.
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
/// [`repair`](crate::repair::repair) would without touching it. A frame being written as we read ends the scan.
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

pub(crate) fn rebuild(
    path: &Path,
    file: &File,
    container: Container,
) -> Result<Rebuilt, FileError> {
    match container {
        Container::Plain => rebuild_plain(path, file),
        _ => rebuild_frames(path, file, container),
    }
}

/// What survives of a partial file: its header, the entries of its complete frames, and
/// where they end.
pub(crate) struct Rebuilt {
    pub header: Header,
    pub entries: Vec<ChunkEntry>,
    pub end: u64,
    pub out_of_order: u64,
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
/// chunks of about [`REPAIR_CHUNK`] bytes, after a header entry for the file header and
/// before an entry for whole blocks after the last packet (interface statistics).
fn rebuild_plain(path: &Path, file: &File) -> Result<Rebuilt, FileError> {
    let records = scan_plain_records(path, file)?;
    // Without a packet, the header is everything that parsed.
    let header_len = records.first_record.unwrap_or(records.kept_end);
    let header = read_plain_header(path, file, header_len)?;
    let packets_end = records
        .spans
        .last()
        .map_or(header_len, |s| s.data_offset + u64::from(s.data_len));
    let mut entries = vec![raw_entry(FrameKind::Header, 0, header_len)];
    entries.extend(records.spans);
    if records.kept_end > packets_end {
        entries.push(plain_tail(
            path,
            file,
            &header,
            packets_end,
            records.kept_end,
        )?);
    }
    Ok(Rebuilt {
        header,
        entries,
        end: records.kept_end,
        out_of_order: records.order.backwards,
    })
}

/// What a scan of a plain file's records keeps.
struct PlainRecords {
    /// Where the first kept record starts (the end of the file header), if one was kept.
    first_record: Option<u64>,
    /// Where the whole blocks end: the kept records, and whole blocks after them.
    kept_end: u64,
    /// The kept records, in chunks of about [`REPAIR_CHUNK`] bytes.
    spans: Vec<ChunkEntry>,
    order: TimeOrder,
}

/// Reads a plain file's records until the first that is not whole and valid. Zero padding
/// left by an interrupted O_DIRECT writer ends the file: in pcapng it is not a block; in
/// pcap it reads as empty records at time 0, where we stop.
fn scan_plain_records(path: &Path, file: &File) -> Result<PlainRecords, FileError> {
    let mut reader = TraceReader::new(BufReader::new(file)).map_err(|e| {
        FileError::at(
            path,
            e.offset,
            format!("the file header does not parse ({e}); nothing can be kept"),
        )
    })?;
    let mut validator = Validator::new();
    let mut kept = PlainRecords {
        first_record: None,
        kept_end: reader.offset(),
        spans: Vec::new(),
        order: TimeOrder::default(),
    };
    loop {
        let c = match reader.next_packet_with_context() {
            Ok(Some(c)) => c,
            Ok(None) => {
                kept.kept_end = reader.offset();
                break;
            }
            // Every block before the one that failed is whole.
            Err(e) => {
                kept.kept_end = kept.kept_end.max(e.offset);
                break;
            }
        };
        let p = c.packet;
        let zero_record = p.ts_ns == 0 && p.orig_len == 0 && p.data.is_empty();
        // Lengths only: a replayed trace may be out of order, and that is kept.
        let clamped = tapdeck_pcap::Packet {
            ts_ns: kept.order.max_ts.unwrap_or(0).max(p.ts_ns),
            ..p
        };
        if zero_record || validator.check(c.interfaces, &clamped, c.offset).is_err() {
            break;
        }
        let (ts, offset) = (p.ts_ns, c.offset);
        kept.order.step(ts);
        kept.first_record.get_or_insert(offset);
        let end = reader.offset();
        add_to_spans(&mut kept.spans, offset..end, ts);
        kept.kept_end = end;
    }
    Ok(kept)
}

/// Adds the record at `record` to the last span, or to a new one when that span holds
/// [`REPAIR_CHUNK`] bytes already.
fn add_to_spans(spans: &mut Vec<ChunkEntry>, record: std::ops::Range<u64>, ts: u64) {
    let full = |s: &ChunkEntry| u64::from(s.data_len) >= REPAIR_CHUNK;
    if spans.last().is_none_or(full) {
        let start = spans
            .last()
            .map_or(record.start, |s| s.data_offset + u64::from(s.data_len));
        spans.push(ChunkEntry {
            first_ts_ns: ts,
            last_ts_ns: ts,
            ..raw_entry(FrameKind::Packets, start, 0)
        });
    }
    let s = spans.last_mut().expect("a span was just ensured");
    s.data_len = (record.end - s.data_offset) as u32;
    s.frame_len = s.data_len;
    s.first_ts_ns = s.first_ts_ns.min(ts);
    s.last_ts_ns = s.last_ts_ns.max(ts);
    s.packets += 1;
}

/// An entry of a plain file (frame and data are the same bytes) without packets yet.
fn raw_entry(kind: FrameKind, offset: u64, len: u64) -> ChunkEntry {
    ChunkEntry {
        frame_offset: offset,
        frame_len: len as u32,
        data_offset: offset,
        data_len: len as u32,
        first_ts_ns: 0,
        last_ts_ns: 0,
        packets: 0,
        kind,
        codec: Codec::Raw,
    }
}

/// The first `len` bytes of a plain file, parsed as its header.
fn read_plain_header(path: &Path, file: &File, len: u64) -> Result<Header, FileError> {
    let mut bytes = vec![0; len as usize];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| FileError::whole(path, e.to_string()))?;
    Header::parse(bytes).map_err(|e| {
        FileError::at(
            path,
            e.offset,
            format!("the header does not parse ({e}); nothing can be kept"),
        )
    })
}

/// Whole blocks after a plain file's last packet, as its last entry: a statistics frame
/// when they are interface statistics only.
fn plain_tail(
    path: &Path,
    file: &File,
    header: &Header,
    start: u64,
    end: u64,
) -> Result<ChunkEntry, FileError> {
    let mut tail = vec![0; (end - start) as usize];
    file.read_exact_at(&mut tail, start)
        .map_err(|e| FileError::whole(path, e.to_string()))?;
    let kind = match ChunkPackets::parse(header, &tail) {
        Ok(c) if c.is_empty() && !c.stats.is_empty() => FrameKind::Stats,
        _ => FrameKind::Packets,
    };
    Ok(raw_entry(kind, start, end - start))
}
