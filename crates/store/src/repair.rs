//! Making damaged or unfinished files whole on disk (`tapdeck verify --repair`, and the
//! recorder at start): a partial file its writer left behind is finalized under its final
//! name ([`repair`]), a finished file cut short is cut back to its last whole chunk
//! ([`repair_truncated`]). Both keep what [`crate::salvage`] rebuilds from the file's bytes,
//! write a new index marked `repaired`, and never move a packet byte.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tapdeck_pcap::container::{self, ChunkIndex, Container};

use crate::finalize::{finalize, SalvagedEnd};
use crate::meta;
use crate::read::FileError;
use crate::salvage::{rebuild, salvaged_index, stored_name, Rebuilt};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::testutil::*;
    use crate::read::StoredFile;
    use crate::salvage::salvage;
    use crate::verify::verify_file;
    use tapdeck_pcap::container::{Codec, Container, FrameKind};
    use tapdeck_pcap::Format;

    /// Writes `spec`'s frames without a trailer under a partial name, cut at `keep` bytes,
    /// then `padding` zero bytes. zero bytes.
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
