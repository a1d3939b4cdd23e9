//! Strict checks of stored files and capture files (`tapdeck verify`). Checks only: making
//! a damaged or unfinished file whole is [`crate::repair`]'s.
//!
//! A stored file is checked twice over: its index against its bytes (frames laid end to
//! end from offset 0, each decoding to the length the index gives, chunk counts and time
//! ranges equal to what the records say), and every record through [`TraceReader`] and
//! [`Validator`]. Records are read one chunk at a time after the header frame, exactly as
//! extraction reads them; since the chunks are contiguous and may declare no interfaces of
//! their own, that is the same stream `zstd -dc` gives, read more strictly. The first
//! defect ends the check with a [`FileError`] naming its byte offset.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use tapdeck_filter::{ChunkFilter, ChunkFilterBuilder, SummaryBuilder};
use tapdeck_pcap::container::{ChunkEntry, Container, FrameKind};
use tapdeck_pcap::validate::Validator;
use tapdeck_pcap::{Format, TraceReader};

use crate::meta::{self, InterfaceMeta};
use crate::read::{self, ChunkPackets, FileError, Header, StoredFile, TimeOrder};
use crate::sidecar::{self, SidecarCheck};

/// What a successful check found in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedFile {
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

/// Why a file did not verify. Each kind tells the caller what a user can do about it
/// (the binary words that: this crate names no command-line flag).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A `.NAME.partial` its writer did not finish: repairing it keeps its complete chunks.
    #[error("{0}")]
    Partial(FileError),
    /// A chunk filter that is not the one its packets give (stale or damaged): verify
    /// cannot repair it, and reading without chunk filters reads around it.
    #[error("{0}")]
    StaleChunkFilter(FileError),
    #[error("{0}")]
    File(#[from] FileError),
}

/// Checks one file: a stored file (it has an index), or any pcap/pcapng file (checked
/// record by record). A partial file is refused ([`VerifyError::Partial`]).
pub fn verify_file(path: &Path) -> Result<VerifiedFile, VerifyError> {
    if meta::is_partial(path) {
        return Err(VerifyError::Partial(FileError::whole(
            path,
            "incomplete file (its writer did not finish it)",
        )));
    }
    if read::is_stored(path) {
        return verify_stored(path);
    }
    let mut summary = verify_capture(path)?;
    // A sidecar (`tapdeck index FILE`) must be what the file gives now; a stale one (the
    // file changed) is ignored by readers, so it is only a warning.
    match sidecar::check_sidecar(path)? {
        SidecarCheck::Missing => {}
        SidecarCheck::Matches { blocks } => summary.sidecar_blocks = Some(blocks),
        SidecarCheck::Stale(warning) => summary.warnings.push(warning),
    }
    Ok(summary)
}

/// Reads a capture file without an index from end to end, strictly.
pub fn verify_capture(path: &Path) -> Result<VerifiedFile, FileError> {
    let file = File::open(path).map_err(|e| FileError::whole(path, e.to_string()))?;
    let stored_len = file
        .metadata()
        .map_err(|e| FileError::whole(path, e.to_string()))?
        .len();
    // A compressed capture file is checked through its decompressor.
    let (compression, bytes, _) = sidecar::capture_bytes(path, &file)?;
    let defect = |e| sidecar::stream_defect(path, compression, e);
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
    Ok(VerifiedFile {
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
pub fn verify_stored(path: &Path) -> Result<VerifiedFile, VerifyError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if Container::from_suffix(&name) != Container::Plain {
        read::explain_missing_trailer(path)?;
    }
    let f = StoredFile::open(path)?;
    check_layout(&f)?;
    let header = f.read_header()?;
    check_header(&f, &header)?;

    let mut validator = Validator::new();
    let mut scratch = Vec::new();
    let mut order = TimeOrder::default();
    let (mut packets, mut chunks) = (0u64, 0u64);
    let mut flows = ChunkFilterBuilder::new();
    let mut summary = SummaryBuilder::new();
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
                    return Err(VerifyError::File(defect(format!(
                        "timestamp goes backwards by {} ns (from {prev} to {} ns since 1970) in a file whose metadata says it is in time order",
                        prev - p.ts_ns,
                        p.ts_ns
                    ))));
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
        check_chunk_filter(&f, i, &header, &chunk, (&mut flows, &mut summary))?;
        packets += chunk.len() as u64;
        chunks += u64::from(entry.kind == FrameKind::Packets);
    }

    check_metadata(&f, packets, &order)?;
    check_summary(&f, summary)?;
    let (first_ts, last_ts) = (order.min_ts, order.max_ts);
    Ok(VerifiedFile {
        path: path.to_path_buf(),
        format: f.format,
        container: Some(f.container),
        packets,
        chunks,
        first_ts_ns: first_ts,
        last_ts_ns: last_ts,
        codecs: f.codec_mix(),
        stored_len: f.stored_len,
        repaired: f.meta.repaired,
        sidecar_blocks: None,
        warnings: Vec::new(),
    })
}

/// The file's summary (version 3 trailers) against the one its chunks give: a stale one
/// would make the store catalog rule out a file that holds a match.
fn check_summary(f: &StoredFile, mut summary: SummaryBuilder) -> Result<(), VerifyError> {
    if f.index.summary.is_empty() {
        return Ok(());
    }
    if let Err(e) = ChunkFilter::decode(&f.index.summary) {
        return Err(VerifyError::StaleChunkFilter(FileError::whole(
            &f.path,
            format!("the file summary does not decode ({e}); `tapdeck index` writes it again"),
        )));
    }
    if summary.finish().encode() != f.index.summary {
        return Err(VerifyError::StaleChunkFilter(FileError::whole(
            &f.path,
            "the file summary differs from the one its chunks give",
        )));
    }
    Ok(())
}

/// The file's metadata against what its records hold: packets, how many are out of time
/// order, and their time span.
fn check_metadata(f: &StoredFile, packets: u64, order: &TimeOrder) -> Result<(), FileError> {
    let m = &f.meta;
    let index_at = index_offset(f);
    let fail = |what: String| {
        Err(FileError::at(
            &f.path,
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
    Ok(())
}

/// Where the chunk index is: the end of the frames (or the start of a sidecar).
fn index_offset(f: &StoredFile) -> u64 {
    if f.container == Container::Plain {
        0
    } else {
        f.index.entries.iter().map(|e| u64::from(e.frame_len)).sum()
    }
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
fn check_chunk_filter(
    f: &StoredFile,
    i: usize,
    header: &Header,
    chunk: &ChunkPackets,
    (builder, summary): (&mut ChunkFilterBuilder, &mut SummaryBuilder),
) -> Result<(), VerifyError> {
    let Some(stored) = f.index.flows.get(i) else {
        return Ok(());
    };
    let e = &f.index.entries[i];
    let fail = |what: String| {
        Err(VerifyError::File(FileError::at(
            &f.path,
            e.frame_offset,
            format!("chunk index entry {i}: flow index {what}"),
        )))
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
    if let Err(err) = ChunkFilter::decode(stored) {
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
    let (filter, values) = builder.finish_with_values();
    summary.add(&filter, &values);
    if filter.encode() != *stored {
        return Err(VerifyError::StaleChunkFilter(FileError::at(
            &f.path,
            e.frame_offset,
            format!("chunk index entry {i}: flow index differs from the one its packets give"),
        )));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::FileMeta;
    use crate::read::testutil::*;
    use tapdeck_pcap::container::ChunkIndex;

    fn message(r: Result<VerifiedFile, VerifyError>) -> String {
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
        let mut b = ChunkFilterBuilder::new();
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

    /// A file whose summary (version 3) does not say what its chunks hold is refused: the
    /// store catalog, built from summaries, would rule the file out of queries it answers.
    #[test]
    fn a_stale_file_summary_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(dir.path(), &two_chunk_spec(Format::Pcapng, Container::Zstd));
        crate::backfill::index_file(&path).unwrap();
        assert!(
            verify_file(&path).is_ok(),
            "indexed by `tapdeck index`, it verifies"
        );
        let mut index = StoredFile::open(&path).unwrap().index;
        assert!(!index.summary.is_empty());
        // The summary of a packet the file does not hold, in a trailer appended after the
        // last, as `tapdeck index` appends one.
        let mut b = ChunkFilterBuilder::new();
        b.add(1, &[0u8; 60]);
        let mut other = SummaryBuilder::new();
        let (filter, values) = b.finish_with_values();
        other.add(&filter, &values);
        index.summary = other.finish().encode();
        append_trailer(&path, &index);
        assert_eq!(
            StoredFile::open(&path).unwrap().index.summary,
            index.summary
        );
        let msg = message(verify_file(&path));
        assert!(
            msg.contains("the file summary differs from the one its chunks give"),
            "{msg}"
        );
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
        let e = verify_file(&path).unwrap_err();
        assert!(matches!(e, VerifyError::Partial(_)), "{e}");
        assert!(e.to_string().contains("incomplete file"), "{e}");
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
}
