//! The one way a stored file becomes complete: the recorder's writer closing a file and
//! `verify --repair` salvaging one both end here, with one durability policy.
//!
//! Order matters for a reader that may look at any moment (and for a crash at any moment):
//! the index goes down first (appended to the data, or as the sidecar of a plain file), then
//! the data is synced, and only then does the file get its final name, whose directory
//! entry is synced last. A file under its final name is therefore always complete; a crash
//! before the rename leaves a partial file that `verify --repair` finalizes again.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use tapdeck_pcap::container::{ChunkIndex, Container};

use crate::meta;

/// The open end of a data file, as whoever wrote it holds it.
pub trait DataEnd {
    /// Appends bytes after the last complete frame.
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Cuts the file after the last appended byte and puts it on disk (fdatasync or
    /// stronger).
    fn sync(self) -> io::Result<()>;
}

/// A partial file being salvaged: bytes go after its last complete frame (`end`),
/// replacing whatever incomplete tail it had.
pub struct SalvagedEnd<'a> {
    pub file: &'a File,
    pub end: u64,
}

impl DataEnd for SalvagedEnd<'_> {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, self.end)?;
        self.end += bytes.len() as u64;
        Ok(())
    }

    fn sync(self) -> io::Result<()> {
        self.file.set_len(self.end)?;
        self.file.sync_all()
    }
}

/// Writes `index` for the data behind `data` (in a plain file's sidecar, else appended),
/// syncs, and renames `partial` to `final_path` (then syncs the directory).
pub fn finalize(
    mut data: impl DataEnd,
    partial: &Path,
    final_path: &Path,
    container: Container,
    index: &ChunkIndex,
) -> io::Result<()> {
    let trailer = index.encode_trailer();
    if container == Container::Plain {
        // The sidecar goes first: a data file must never be visible without its index.
        let final_name = final_path.file_name().unwrap_or_default().to_string_lossy();
        let sidecar = final_path.with_file_name(meta::sidecar_name(&final_name));
        let tmp = final_path.with_file_name(meta::partial_name(&meta::sidecar_name(&final_name)));
        write_durably(&tmp, &trailer, &sidecar)?;
    } else {
        data.append(&trailer)?;
    }
    data.sync()?;
    std::fs::rename(partial, final_path)?;
    if let Some(dir) = final_path.parent() {
        // Makes the rename durable; failing here loses nothing already written.
        let _ = File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// Writes a small file under a temporary name, syncs it and renames it into place.
pub fn write_durably(tmp: &Path, bytes: &[u8], dest: &Path) -> io::Result<()> {
    std::fs::write(tmp, bytes)?;
    File::open(tmp)?.sync_all()?;
    std::fs::rename(tmp, dest)
}
