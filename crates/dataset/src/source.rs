//! Finding the trace files behind the inputs a user names, and reading their packets.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tapdeck_capture::open_trace;
use tapdeck_pcap::TraceReader;
use tapdeck_store::read::Store;

use crate::error::{DatasetError, Result};

/// A trace file as the catalog identifies it: re-running `convert` skips a file whose path,
/// size and modification time are unchanged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceFile {
    pub path: String,
    pub size: u64,
    pub mtime_ns: i64,
}

impl SourceFile {
    pub fn stat(path: &Path) -> Result<SourceFile> {
        let input = |source| DatasetError::Input {
            path: path.to_path_buf(),
            source,
        };
        let m = std::fs::metadata(path).map_err(input)?;
        let abs = std::fs::canonicalize(path).map_err(input)?;
        Ok(SourceFile {
            path: abs.to_string_lossy().into_owned(),
            size: m.len(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        })
    }
}

/// Name endings of trace files found when walking a directory, each alone or followed by
/// one of [`COMPRESSED_SUFFIXES`]. (Only the walk goes by name: a file is read by its
/// content, so a file named on the command line may be called anything.)
const TRACE_SUFFIXES: &[&str] = &[".pcap", ".pcapng", ".cap"];

/// Name endings of compressed files (what `gzip`, `bzip2`, `xz`, `zstd` and `lz4` add).
const COMPRESSED_SUFFIXES: &[&str] = &[".gz", ".bz2", ".xz", ".zst", ".lz4"];

fn is_trace_name(name: &str) -> bool {
    let name = COMPRESSED_SUFFIXES
        .iter()
        .find_map(|c| name.strip_suffix(c))
        .unwrap_or(name);
    TRACE_SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// Bound on directory depth, so a symlink loop cannot walk forever.
const MAX_DEPTH: usize = 16;

/// The trace files of every input: a file is itself; a tapdeck store gives its complete
/// data files; any other directory gives the trace files found under it. Sorted, without
/// duplicates. Warnings (incomplete files left by a writer that died) go to `warn`.
pub fn discover(inputs: &[PathBuf], warn: &mut impl FnMut(String)) -> Result<Vec<SourceFile>> {
    let mut paths = Vec::new();
    for input in inputs {
        let meta = std::fs::metadata(input).map_err(|source| DatasetError::MissingInput {
            path: input.clone(),
            source,
        })?;
        if meta.is_file() {
            paths.push(input.clone());
        } else if input.join(tapdeck_store::meta::MANIFEST).exists() {
            let store = Store::open(input)?;
            for p in &store.partials {
                warn(match tapdeck_store::lock::writer_of(p) {
                    Some(holder) => format!(
                        "{}: skipped, being written by {holder}; convert again once it is complete (`tapdeck extract` reads it live)",
                        p.display()
                    ),
                    None => format!(
                        "{}: skipped, left incomplete by a recorder that stopped; `tapdeck verify --repair {}` finishes it",
                        p.display(),
                        input.display()
                    ),
                });
            }
            paths.extend(store.files);
        } else {
            walk(input, 0, &mut paths)?;
        }
    }
    let mut files = paths
        .iter()
        .map(|p| SourceFile::stat(p))
        .collect::<Result<Vec<_>, _>>()?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files.dedup_by(|a, b| a.path == b.path);
    if files.is_empty() {
        return Err(DatasetError::NoTraceFiles);
    }
    Ok(files)
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<()> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let entries = std::fs::read_dir(dir).map_err(|source| DatasetError::Input {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = e.path();
        if path.is_dir() {
            walk(&path, depth + 1, out)?;
        } else if is_trace_name(&name) {
            out.push(path);
        }
    }
    Ok(())
}

/// Opens a trace for reading packets, whatever its compression or container.
pub fn open(path: &str) -> Result<TraceReader<Box<dyn std::io::Read + Send>>> {
    Ok(open_trace(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_takes_traces_plain_or_compressed_by_name() {
        for name in [
            "a.pcap",
            "a.pcapng",
            "a.cap",
            "a.pcap.gz",
            "a.pcapng.bz2",
            "a.cap.xz",
            "a.pcap.zst",
            "a.pcapng.lz4",
        ] {
            assert!(is_trace_name(name), "{name}");
        }
        for name in [
            "a.gz",
            "a.tar.gz",
            "a.pcap.idx",
            "a.pcap.gz.partial",
            "a.txt.xz",
            "pcap",
        ] {
            assert!(!is_trace_name(name), "{name}");
        }
    }
}
