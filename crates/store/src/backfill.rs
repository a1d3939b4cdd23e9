//! `tapdeck index`: backfills chunk filters (the flow index) into files written without
//! them.
//!
//! - A stored file (a store written with `--no-flow-index`, or before the flow index or
//!   the file summary existed) gets a version 3 chunk index with one chunk filter per
//!   chunk and the file's summary, built from its decoded chunks by
//!   [`chunk_filter::index_chunk`], the function the recorder builds them
//!   with, so the result is byte for byte what the recorder would have written. A
//!   compressed file gets the new trailer *appended* after its old one: no packet byte
//!   moves, the old trailer stays valid until the new one is complete and synced, and a
//!   reader takes the last whole trailer (`ChunkIndex::locate_trailer`), so a kill at any
//!   moment leaves a file every reader reads whole. (Rewriting the trailer in place would
//!   leave a window with none; copying a file of gigabytes to rename it over the old one
//!   is too slow.) A plain file's index is its `NAME.idx` sidecar, replaced by a rename.
//! - A plain pcap or pcapng file, which other tools own, is never changed: it gets a
//!   sidecar `FILE.tdx` ([`crate::sidecar`]), written under a temporary name and renamed
//!   into place. A sidecar whose file changed since is stale and ignored. A compressed
//!   capture file gets one too, over its decompressed stream.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use tapdeck_pcap::container::{ChunkIndex, Container, FrameKind};

use crate::finalize::write_durably;
use crate::read::{self, file_name_of, FileError, StoredFile};
use crate::sidecar::{build_sidecar, identity_of, read_sidecar, sidecar_path, SidecarState};
use crate::{chunk_filter, lock, meta};

/// What indexing one file did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The file (or its sidecar) now holds a flow index for `chunks` chunks or blocks,
    /// `index_bytes` of flow indexes in all.
    Indexed {
        chunks: u64,
        index_bytes: u64,
        /// What was written: "appended a version 3 chunk index", "wrote FILE.tdx", ….
        how: String,
    },
    /// Nothing was changed, for this reason.
    Skipped(String),
    /// Nothing was changed: an incomplete file a crash left behind, to be repaired first.
    LeftByCrash,
}

/// Indexes one file: a stored file (a compressed container, or a plain one with its
/// `.idx`), or a plain pcap/pcapng file (a sidecar). Errors leave the file as it was.
pub fn index_file(path: &Path) -> Result<Outcome, FileError> {
    if meta::is_partial(path) {
        return Ok(match lock::writer_of(path) {
            Some(holder) => Outcome::Skipped(format!(
                "being written by {holder}; index it once the recorder has finished it"
            )),
            None => Outcome::LeftByCrash,
        });
    }
    if let Err(e) = std::fs::metadata(path) {
        return Err(FileError::whole(path, e.to_string()));
    }
    if read::is_stored(path) {
        index_stored(path)
    } else {
        index_capture(path)
    }
}

/// One `tapdeck index` at a time per file: a second one skips it (its trailer or
/// sidecar would be written twice, racing).
fn lock_file(file: &File, path: &Path) -> Result<bool, FileError> {
    lock::try_flock_exclusive(file).map_err(|e| FileError::whole(path, format!("cannot lock: {e}")))
}

const BEING_INDEXED: &str = "being indexed by another `tapdeck index`";

fn index_stored(path: &Path) -> Result<Outcome, FileError> {
    let container = Container::from_suffix(&file_name_of(path));
    // Opened for writing first: a file that may not be changed is refused before any work.
    let data = if container == Container::Plain {
        File::open(path)
    } else {
        OpenOptions::new().read(true).write(true).open(path)
    }
    .map_err(|e| {
        FileError::whole(
            path,
            format!("cannot open it for writing: {e}; nothing changed"),
        )
    })?;
    if !lock_file(&data, path)? {
        return Ok(Outcome::Skipped(BEING_INDEXED.into()));
    }
    if container != Container::Plain {
        // A file cut short: the message names where its whole frames end.
        read::explain_missing_trailer(path).map_err(|e| refused(e, "nothing changed"))?;
    }
    let f = StoredFile::open(path).map_err(|e| refused(e, "nothing changed"))?;
    // A file indexed before summaries existed is indexed again: its chunks get Bloom
    // filters where their address lists overflowed, and the file its summary. So is one
    // whose summary or chunk filters do not decode (recorders before 2026-12-07 listed more
    // addresses than a reader accepts, for a busy file or a chunk of a scan): nothing could
    // be ruled out with them. So is one whose summary's filter the catalog's groups
    // cannot lay out (written before 2026-12-07, of any size): its file would never be
    // ruled out by its group.
    let decodes = |b: &Vec<u8>| tapdeck_filter::ChunkFilter::decode(b).is_ok();
    let summary_fits =
        tapdeck_filter::ChunkFilter::decode(&f.index.summary).is_ok_and(|s| s.fits_signatures());
    let reads = summary_fits && (f.index.flows.iter()).all(|b| b.is_empty() || decodes(b));
    if !f.index.flows.is_empty() && !f.index.summary.is_empty() && reads {
        return Ok(Outcome::Skipped("already has a flow index".into()));
    }
    let header = f.read_header().map_err(|e| refused(e, "nothing changed"))?;
    let linktypes: Vec<u16> = header.interfaces.iter().map(|i| i.linktype).collect();
    let mut chunk_flows = Vec::with_capacity(f.index.entries.len());
    let mut summary = chunk_filter::FileSummary::default();
    let mut scratch = Vec::new();
    for e in &f.index.entries {
        // As the writer does: a flow index for every chunk with packets, none elsewhere.
        if e.kind == FrameKind::Packets && e.packets > 0 {
            f.read_frame(e, &mut scratch)
                .map_err(|e| refused(e, "a damaged chunk; nothing changed"))?;
            let flows = chunk_filter::index_chunk(f.format, &scratch, &linktypes);
            summary.add(e.packets, &flows);
            chunk_flows.push(flows.encoded);
        } else {
            chunk_flows.push(Vec::new());
        }
    }
    let chunks = chunk_flows.iter().filter(|f| !f.is_empty()).count() as u64;
    if chunks == 0 {
        return Ok(Outcome::Skipped(
            "holds no packets: nothing to index".into(),
        ));
    }
    let index_bytes = chunk_flows.iter().map(|f| f.len() as u64).sum();
    let index = ChunkIndex {
        flows: chunk_flows,
        summary: summary.finish(),
        ..f.index.clone()
    };
    let trailer = index.encode_trailer();
    let how = if container == Container::Plain {
        let name = file_name_of(path);
        let sidecar = path.with_file_name(meta::sidecar_name(&name));
        let tmp = path.with_file_name(meta::partial_name(&meta::sidecar_name(&name)));
        replace_durably(&tmp, &trailer, &sidecar)?;
        format!("rewrote {}", meta::sidecar_name(&name))
    } else {
        append_trailer(path, &data, f.trailer.end, &trailer)?;
        "appended a version 3 chunk index".into()
    };
    Ok(Outcome::Indexed {
        chunks,
        index_bytes,
        how,
    })
}

/// Appends `trailer` at `end` (the end of the file's last whole trailer) and syncs. A
/// failed write is cut off again: the file is left as it was.
fn append_trailer(path: &Path, data: &File, end: u64, trailer: &[u8]) -> Result<(), FileError> {
    let undo = |e: std::io::Error| {
        let _ = data.set_len(end).and_then(|_| data.sync_data());
        FileError::whole(
            path,
            format!("cannot write its new index: {e}; the file is as it was"),
        )
    };
    let size = data.metadata().map_err(undo)?.len();
    if size > end {
        // The part of an index an earlier run appended before it was killed.
        data.set_len(end).map_err(undo)?;
    }
    data.write_all_at(trailer, end).map_err(undo)?;
    data.sync_data().map_err(undo)
}

/// Writes `bytes` under `tmp`, syncs, renames over `dest` and syncs the directory.
fn replace_durably(tmp: &Path, bytes: &[u8], dest: &Path) -> Result<(), FileError> {
    write_durably(tmp, bytes, dest).map_err(|e| {
        let _ = std::fs::remove_file(tmp);
        FileError::whole(dest, format!("cannot write it: {e}; nothing changed"))
    })?;
    if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// The same defect, with what that means for indexing.
fn refused(e: FileError, consequence: &str) -> FileError {
    FileError {
        what: format!("{}; {consequence}", e.what),
        ..e
    }
}

fn index_capture(path: &Path) -> Result<Outcome, FileError> {
    let file = File::open(path).map_err(|e| FileError::whole(path, e.to_string()))?;
    if !lock_file(&file, path)? {
        return Ok(Outcome::Skipped(BEING_INDEXED.into()));
    }
    let replaced = match read_sidecar(path, &file)? {
        SidecarState::Fresh(_) => {
            return Ok(Outcome::Skipped(format!(
                "already indexed ({} is up to date)",
                sidecar_path(path).display()
            )))
        }
        SidecarState::Stale(_) => " (replacing a stale one)",
        SidecarState::Missing => "",
    };
    let sidecar = build_sidecar(path, &file).map_err(|e| refused(e, "not indexed"))?;
    if identity_of(path, &file)? != sidecar.identity {
        return Err(FileError::whole(
            path,
            "changed while it was being indexed; not indexed (run again once it is complete)",
        ));
    }
    let dest = sidecar_path(path);
    let tmp = path.with_file_name(meta::partial_name(&file_name_of(&dest)));
    replace_durably(&tmp, &sidecar.encode(), &dest)?;
    Ok(Outcome::Indexed {
        chunks: sidecar.blocks.len() as u64,
        index_bytes: sidecar.blocks.iter().map(|b| b.flows.len() as u64).sum(),
        how: format!("wrote {}{replaced}", file_name_of(&dest)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::is_stored;
    use crate::read::testutil::{build, pkt, record_bytes, write_file, FileSpec, Pkt};
    use crate::sidecar::{check_sidecar, SidecarCheck};
    use crate::verify;
    use std::path::PathBuf;
    use tapdeck_filter::sidecar::Sidecar;
    use tapdeck_pcap::container::Codec;
    use tapdeck_pcap::Format;

    const T0: u64 = 1_795_413_430_000_000_000;

    fn spec(format: Format, container: Container) -> FileSpec<'static> {
        let mut s = FileSpec::new(0, 1, format, container);
        s.stats = true;
        s.chunks = (0..4u8)
            .map(|c| {
                let codec = [Codec::Raw, Codec::Zstd(3), Codec::Lz4, Codec::Raw][usize::from(c)];
                let pkts = (0..20u8)
                    .map(|i| pkt(T0 + u64::from(c) * 1000 + u64::from(i), c * 20 + i))
                    .collect();
                (codec, pkts)
            })
            .collect();
        s
    }

    /// What the recorder writes for each frame of `spec`'s file, and its summary.
    fn recorder_flows(spec: &FileSpec) -> (Vec<Vec<u8>>, Vec<u8>) {
        let (_, index) = build(spec);
        let mut chunks = spec.chunks.iter();
        let mut summary = chunk_filter::FileSummary::default();
        let flows = (index.entries.iter())
            .map(|e| match e.kind {
                FrameKind::Packets => {
                    let (_, pkts) = chunks.next().unwrap();
                    let data: Vec<u8> = pkts
                        .iter()
                        .flat_map(|p| record_bytes(spec.format, p))
                        .collect();
                    let flows = chunk_filter::index_chunk(spec.format, &data, &[1]);
                    summary.add(e.packets, &flows);
                    flows.encoded
                }
                _ => Vec::new(),
            })
            .collect();
        (flows, summary.finish())
    }

    fn kinds() -> Vec<(Format, Container)> {
        let mut out = Vec::new();
        for format in [Format::Pcap, Format::Pcapng] {
            for container in [Container::Zstd, Container::Lz4, Container::Plain] {
                out.push((format, container));
            }
        }
        out
    }

    #[test]
    fn an_indexed_stored_file_holds_what_the_recorder_would_have_written() {
        for (format, container) in kinds() {
            let dir = tempfile::tempdir().unwrap();
            let spec = spec(format, container);
            let path = write_file(dir.path(), &spec);
            let before = std::fs::read(&path).unwrap();
            let Outcome::Indexed { chunks, .. } = index_file(&path).unwrap() else {
                panic!("{format:?} {container:?}: not indexed");
            };
            assert_eq!(chunks, 4);
            let f = StoredFile::open(&path).unwrap();
            let (frames, index) = build(&spec);
            let (flows, summary) = recorder_flows(&spec);
            let want = ChunkIndex {
                flows,
                summary,
                ..index
            };
            assert_eq!(f.index, want, "{format:?} {container:?}");
            if container != Container::Plain {
                // The old file, unchanged, then the new trailer.
                let after = std::fs::read(&path).unwrap();
                assert_eq!(after, [before, want.encode_trailer()].concat());
                assert_eq!(f.trailer.frames_end, frames.len() as u64);
            } else {
                assert_eq!(std::fs::read(&path).unwrap(), before);
            }
            let summary = verify::verify_file(&path).unwrap();
            assert_eq!(summary.packets, 80);
            assert_eq!(
                index_file(&path).unwrap(),
                Outcome::Skipped("already has a flow index".into())
            );
        }
    }

    /// A file whose summary or one chunk filter does not decode (what recorders wrote for
    /// busy files before lists were capped) is indexed again, and then verifies.
    #[test]
    fn an_index_that_does_not_decode_is_written_again() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec(Format::Pcapng, Container::Zstd);
        let path = write_file(dir.path(), &spec);
        index_file(&path).unwrap();
        let good = StoredFile::open(&path).unwrap().index;
        // A summary as recorders wrote it before summaries' filters were powers of two:
        // a chunk's filter of 300 addresses (15 blocks).
        let mut b = tapdeck_filter::ChunkFilterBuilder::new();
        for i in 0..150u32 {
            let mut f = vec![0u8; 12];
            f.extend([0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
            f.extend((2 * i).wrapping_mul(2_654_435_761).to_be_bytes());
            f.extend((2 * i + 1).wrapping_mul(2_654_435_761).to_be_bytes());
            f.extend([0, 53, 0, 53, 0, 8, 0, 0]);
            b.add(1, &f);
        }
        let old_summary = b.finish();
        assert!(!old_summary.fits_signatures());
        for broken in ["summary", "chunk filter", "old summary"] {
            let mut index = good.clone();
            match broken {
                "summary" => index.summary = vec![1, 2, 3],
                "old summary" => index.summary = old_summary.encode(),
                _ => index.flows[1] = vec![1, 2, 3],
            }
            crate::read::testutil::append_trailer(&path, &index);
            assert!(
                broken == "old summary" || verify::verify_file(&path).is_err(),
                "{broken}: verify refuses it"
            );
            assert!(
                matches!(index_file(&path).unwrap(), Outcome::Indexed { .. }),
                "{broken}: indexed again"
            );
            assert_eq!(StoredFile::open(&path).unwrap().index, good, "{broken}");
            assert_eq!(verify::verify_file(&path).unwrap().packets, 80, "{broken}");
        }
    }

    /// A kill while the new trailer is being appended leaves the file ending anywhere in
    /// it: the file still reads and verifies (by its old trailer), and a second run
    /// completes it to exactly what one uninterrupted run gives.
    #[test]
    fn an_append_cut_short_leaves_a_readable_file_and_a_rerun_completes_it() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec(Format::Pcapng, Container::Zstd);
        let path = write_file(dir.path(), &spec);
        let before = std::fs::read(&path).unwrap();
        index_file(&path).unwrap();
        let done = std::fs::read(&path).unwrap();
        for cut in (before.len()..done.len()).step_by(7) {
            std::fs::write(&path, &done[..cut]).unwrap();
            let f = StoredFile::open(&path).unwrap();
            assert!(f.index.flows.is_empty(), "cut at {cut}");
            assert_eq!(verify::verify_file(&path).unwrap().packets, 80);
            assert!(matches!(
                index_file(&path).unwrap(),
                Outcome::Indexed { .. }
            ));
            assert_eq!(std::fs::read(&path).unwrap(), done, "cut at {cut}");
        }
    }

    #[test]
    fn a_cut_short_stored_file_is_refused_and_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(dir.path(), &spec(Format::Pcapng, Container::Zstd));
        let bytes = std::fs::read(&path).unwrap();
        let cut = &bytes[..bytes.len() / 2];
        std::fs::write(&path, cut).unwrap();
        let e = index_file(&path).unwrap_err();
        assert!(e.offset.is_some(), "{e}");
        assert!(e.to_string().contains("truncated"), "{e}");
        assert!(e.to_string().contains("nothing changed"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), cut);
    }

    #[test]
    fn partial_and_missing_files_are_not_indexed() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(dir.path(), &spec(Format::Pcap, Container::Zstd));
        let partial = dir.path().join(meta::partial_name(&file_name_of(&path)));
        std::fs::rename(&path, &partial).unwrap();
        assert_eq!(index_file(&partial).unwrap(), Outcome::LeftByCrash);
        assert!(index_file(&path).is_err());
    }

    /// A plain capture file of `n` packets in `format` (not a store's name).
    fn capture(dir: &Path, format: Format, n: u32) -> PathBuf {
        let header = format
            .file_header(&[crate::read::testutil::eth("eth0")], &Default::default())
            .unwrap();
        let mut bytes = header;
        for i in 0..n {
            let p = Pkt {
                len: 300,
                ..pkt(T0 + u64::from(i) * 10, (i % 200) as u8)
            };
            bytes.extend(record_bytes(format, &p));
        }
        let path = dir.join(format!("trace.{}", format.extension()));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn a_compressed_capture_file_gets_the_plain_files_blocks_over_its_stream() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        // About 6 MiB: two blocks.
        let plain = capture(dir.path(), Format::Pcapng, 20_000);
        let bytes = std::fs::read(&plain).unwrap();
        index_file(&plain).unwrap();
        let want = Sidecar::decode(&std::fs::read(sidecar_path(&plain)).unwrap()).unwrap();
        assert_eq!(want.blocks.len(), 2);
        // gzip in two members (as `cat a.gz b.gz` makes), and zstd as the stock tool writes
        // it (a `.zst` without a chunk index: a capture file, not a stored one).
        let mut gz = Vec::new();
        for half in bytes.chunks(bytes.len() / 2 + 1) {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(half).unwrap();
            gz.extend(e.finish().unwrap());
        }
        let zst = zstd::encode_all(&bytes[..], 1).unwrap();
        for (name, packed, code) in [("t.pcapng.gz", gz, 1), ("t.pcapng.zst", zst, 4)] {
            let path = dir.path().join(name);
            std::fs::write(&path, &packed).unwrap();
            assert!(!is_stored(&path), "{name}");
            let Outcome::Indexed { chunks, how, .. } = index_file(&path).unwrap() else {
                panic!("{name} not indexed");
            };
            assert_eq!(chunks, 2, "{how}");
            let got = Sidecar::decode(&std::fs::read(sidecar_path(&path)).unwrap()).unwrap();
            assert_eq!(got.blocks, want.blocks, "{name}: the plain file's blocks");
            assert_eq!(
                (got.compression, got.stream_size),
                (code, bytes.len() as u64)
            );
            assert_eq!(got.identity.size, packed.len() as u64);
            let summary = verify::verify_file(&path).unwrap();
            assert_eq!((summary.packets, summary.sidecar_blocks), (20_000, Some(2)));

            // Cut short: refused in one line naming the stream and the archive's end, and
            // the sidecar of the whole file is stale, not trusted.
            std::fs::write(&path, &packed[..packed.len() * 2 / 3]).unwrap();
            let e = index_file(&path).unwrap_err().to_string();
            assert!(e.contains("decompressed") && !e.contains('\n'), "{e}");
            assert!(verify::verify_file(&path).is_err());
            assert!(matches!(
                check_sidecar(&path),
                Ok(SidecarCheck::Stale(_)) | Err(_)
            ));
        }
    }

    #[test]
    fn a_capture_file_gets_a_sidecar_that_verify_checks_and_a_change_makes_stale() {
        for format in [Format::Pcap, Format::Pcapng] {
            let dir = tempfile::tempdir().unwrap();
            // About 9 MiB: three blocks.
            let path = capture(dir.path(), format, 30_000);
            let before = std::fs::read(&path).unwrap();
            let Outcome::Indexed { chunks, .. } = index_file(&path).unwrap() else {
                panic!("not indexed");
            };
            assert_eq!(chunks, 3, "{format:?}");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                before,
                "the file is untouched"
            );
            let SidecarCheck::Matches { blocks } = check_sidecar(&path).unwrap() else {
                panic!("the sidecar does not match");
            };
            assert_eq!(blocks, 3);
            let s = Sidecar::decode(&std::fs::read(sidecar_path(&path)).unwrap()).unwrap();
            assert_eq!(s.blocks.iter().map(|b| b.packets).sum::<u32>(), 30_000);
            assert_eq!(
                s.blocks[0].offset,
                format
                    .file_header(&[crate::read::testutil::eth("eth0")], &Default::default())
                    .unwrap()
                    .len() as u64
            );
            assert_eq!(
                s.blocks.last().map(|b| b.offset + b.len),
                Some(before.len() as u64)
            );
            let summary = verify::verify_file(&path).unwrap();
            assert_eq!(
                (summary.sidecar_blocks, summary.warnings.len()),
                (Some(3), 0)
            );
            assert!(matches!(index_file(&path).unwrap(), Outcome::Skipped(_)));

            // The file changes: the sidecar is stale, a warning, and indexing replaces it.
            let mut more = before.clone();
            more.extend(record_bytes(format, &pkt(T0 + 1_000_000, 1)));
            std::fs::write(&path, &more).unwrap();
            let summary = verify::verify_file(&path).unwrap();
            assert_eq!(summary.sidecar_blocks, None);
            assert!(
                summary.warnings[0].contains("stale"),
                "{:?}",
                summary.warnings
            );
            let Outcome::Indexed { how, .. } = index_file(&path).unwrap() else {
                panic!("a stale sidecar was kept");
            };
            assert!(how.contains("stale"), "{how}");
            assert_eq!(
                check_sidecar(&path).unwrap(),
                SidecarCheck::Matches { blocks: 3 }
            );

            // A sidecar that lies (a block's flows of another block) fails verify.
            let mut s = Sidecar::decode(&std::fs::read(sidecar_path(&path)).unwrap()).unwrap();
            s.blocks[0].flows = s.blocks[2].flows.clone();
            std::fs::write(sidecar_path(&path), s.encode()).unwrap();
            let e = verify::verify_file(&path).unwrap_err();
            assert!(e.to_string().contains("block 0"), "{e}");
        }
    }

    #[test]
    fn a_cut_short_or_foreign_capture_file_gets_no_sidecar() {
        let dir = tempfile::tempdir().unwrap();
        let path = capture(dir.path(), Format::Pcapng, 100);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        let e = index_file(&path).unwrap_err();
        assert!(
            e.offset.is_some() && e.to_string().contains("not indexed"),
            "{e}"
        );
        assert!(!sidecar_path(&path).exists());
        std::fs::write(&path, b"hello, this is not a capture file at all").unwrap();
        let e = index_file(&path).unwrap_err();
        assert!(e.to_string().contains("not a pcap or pcapng file"), "{e}");
        assert!(!sidecar_path(&path).exists());
    }
}
