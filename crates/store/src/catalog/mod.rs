//! The store catalog (`catalog.tdc` at the store's root): the top level of the store's
//! index (chunk filter, file summary, store catalog). One entry per finished data file: its
//! name, size, true time range, packets and summary (the file's `SUMM`, see
//! [`crate::chunk_filter::FileSummary`]), so that a query rules files out without opening
//! them, and a reader of a store elsewhere (object storage, later) plans from one object.
//!
//! Append-only and crash-safe. The recorder appends an entry as it finishes each file;
//! `tapdeck index` and `verify --repair` append the entries of files they change; a later
//! entry for a name replaces an earlier one. Each record is framed by a magic and sealed by
//! a checksum, and is written with one `write` on a descriptor opened for appending, so
//! writers of several streams do not interleave. A record cut short (a kill, a full disk)
//! is skipped by readers, which look for the next magic.
//!
//! The catalog is a cache, never the truth: a file it does not name (written by an older
//! recorder, a record lost) is opened and read as if there were no catalog; entries of
//! files retention deleted are never matched (readers look entries up by the names they
//! list, without a stat per file; [`Catalog::get`] can also check a known size). A file's packets never change
//! after it is finished, so an entry can only be older than a file's summary, never wrong
//! about its packets. [`rewrite`] compacts it (`tapdeck index` does, from the trailers).
//!
//! ```text
//! header   "TDCT", u8 version (1), 3 bytes 0
//! record   "TDCR", u32 body length, body, u32 XXH32 of the body (seed 0)
//! body     u8 kind (1: a file), u16 name length, name (UTF-8, the file's name without
//!          its directory), u64 size, u64 first packet ns, u64 last packet ns,
//!          u64 packets, u32 summary length, summary (a TDFI encoding; empty: none)
//! ```
//! Integers little-endian.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use tapdeck_filter::ChunkFilter;

use crate::finalize::write_durably;

pub mod groups;
pub mod lookup;

use crate::meta;
use crate::read::{Store, StoredFile};
pub use lookup::{Known, Lookup};

/// The catalog's file name under a store's root.
pub const CATALOG: &str = "catalog.tdc";
const HEADER: [u8; 8] = *b"TDCT\x01\0\0\0";
const RECORD_MAGIC: [u8; 4] = *b"TDCR";
const KIND_FILE: u8 = 1;
/// A record longer than this is damage (a summary is at most a few MiB).
const MAX_RECORD: usize = 64 << 20;

/// What the catalog says of one finished file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The file's name (no directory): unique in a store, and unchanged by a move.
    pub name: String,
    pub size: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub packets: u64,
    /// The file's summary, encoded (`tapdeck_filter::ChunkFilter`); empty: none.
    pub summary: Vec<u8>,
}

impl Entry {
    /// The summary decoded, or `None` when there is none or it does not decode (then the
    /// file must be opened).
    pub fn summary(&self) -> Option<ChunkFilter> {
        (!self.summary.is_empty())
            .then(|| ChunkFilter::decode(&self.summary).ok())
            .flatten()
    }

    fn encode(&self) -> Vec<u8> {
        let name = self.name.as_bytes();
        let mut body = Vec::with_capacity(43 + name.len() + self.summary.len());
        body.push(KIND_FILE);
        body.extend((name.len() as u16).to_le_bytes());
        body.extend(name);
        for v in [self.size, self.first_ns, self.last_ns, self.packets] {
            body.extend(v.to_le_bytes());
        }
        body.extend((self.summary.len() as u32).to_le_bytes());
        body.extend(&self.summary);
        let mut out = Vec::with_capacity(body.len() + 12);
        out.extend(RECORD_MAGIC);
        out.extend((body.len() as u32).to_le_bytes());
        out.extend(&body);
        out.extend(xxhash_rust::xxh32::xxh32(&body, 0).to_le_bytes());
        out
    }

    fn decode(body: &[u8]) -> Option<Entry> {
        let mut at = 0usize;
        let mut take = |n: usize| -> Option<&[u8]> {
            let b = body.get(at..at + n)?;
            at += n;
            Some(b)
        };
        let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
        if take(1)? != [KIND_FILE] {
            return None;
        }
        let name_len = u16::from_le_bytes(take(2)?.try_into().ok()?) as usize;
        let name = std::str::from_utf8(take(name_len)?).ok()?.to_string();
        let size = u64_of(take(8)?);
        let first_ns = u64_of(take(8)?);
        let last_ns = u64_of(take(8)?);
        let packets = u64_of(take(8)?);
        let summary_len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let summary = take(summary_len)?.to_vec();
        (at == body.len() && meta::is_data_file(&name)).then_some(Entry {
            name,
            size,
            first_ns,
            last_ns,
            packets,
            summary,
        })
    }
}

/// A catalog as read: the latest entry of each name.
#[derive(Debug, Default)]
pub struct Catalog {
    pub entries: HashMap<String, Entry>,
    /// Bytes that were not a whole record (a record cut short, damage), skipped.
    pub skipped_bytes: u64,
}

impl Catalog {
    /// Reads the catalog of the store at `root`; an empty one when there is none (or it
    /// cannot be read: the catalog only ever saves work).
    pub fn read(root: &Path) -> Catalog {
        match std::fs::read(root.join(CATALOG)) {
            Ok(bytes) => Catalog::parse(&bytes),
            Err(_) => Catalog::default(),
        }
    }

    /// Parses a catalog's bytes; see the module docs for what is skipped.
    pub fn parse(bytes: &[u8]) -> Catalog {
        let mut catalog = Catalog::default();
        if bytes.get(..HEADER.len()) != Some(&HEADER[..]) {
            catalog.skipped_bytes = bytes.len() as u64;
            return catalog;
        }
        let mut at = HEADER.len();
        while at < bytes.len() {
            match record_at(bytes, at) {
                Some((entry, len)) => {
                    catalog.entries.insert(entry.name.clone(), entry);
                    at += len;
                }
                None => {
                    // Damage or a record cut short: on to the next magic.
                    let next = find_magic(bytes, at + 1).unwrap_or(bytes.len());
                    catalog.skipped_bytes += (next - at) as u64;
                    at = next;
                }
            }
        }
        catalog
    }

    /// The entry of the file at `path` if the catalog has one that fits it: its name, and
    /// its size when `size` is known.
    pub fn get(&self, path: &Path, size: Option<u64>) -> Option<&Entry> {
        let name = path.file_name()?.to_str()?;
        self.entries
            .get(name)
            .filter(|e| size.is_none_or(|s| s == e.size))
    }
}

/// The whole record at `at` and its length, if one is there.
fn record_at(bytes: &[u8], at: usize) -> Option<(Entry, usize)> {
    if bytes.get(at..at + 4)? != RECORD_MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(bytes.get(at + 4..at + 8)?.try_into().ok()?) as usize;
    if len > MAX_RECORD {
        return None;
    }
    let body = bytes.get(at + 8..at + 8 + len)?;
    let sum = u32::from_le_bytes(bytes.get(at + 8 + len..at + 12 + len)?.try_into().ok()?);
    if xxhash_rust::xxh32::xxh32(body, 0) != sum {
        return None;
    }
    Some((Entry::decode(body)?, len + 12))
}

fn find_magic(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = bytes.get(from..)?;
    rest.windows(RECORD_MAGIC.len())
        .position(|w| w == RECORD_MAGIC)
        .map(|p| from + p)
}

/// Appends `entries` to the catalog of the store at `root` (creating it), in one write,
/// then groups the records past the last group when there are enough of them (see
/// [`groups`]). A failure to group is logged, never returned: the entries are in.
pub fn append(root: &Path, entries: &[Entry]) -> io::Result<()> {
    let bytes: Vec<u8> = entries.iter().flat_map(Entry::encode).collect();
    let mut f = open_appending(&root.join(CATALOG), &HEADER)?;
    f.write_all(&bytes)?;
    // One appender at a time groups (the lock goes with the descriptor).
    let grouped =
        crate::lock::flock_exclusive(&f).and_then(|()| groups::group_tail(root, &f, false));
    if let Err(e) = grouped {
        tracing::warn!(
            "cannot group the catalog's entries in {}: {e}",
            groups::path(root).display()
        );
    }
    Ok(())
}

/// Opens the append-only file at `path` for reading and appending, creating it with
/// `header`: written exactly once, by whoever creates the file.
fn open_appending(path: &Path, header: &[u8]) -> io::Result<std::fs::File> {
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(mut f) => f.write_all(header)?,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    OpenOptions::new().read(true).append(true).open(path)
}

/// Replaces the catalog of the store at `root` with `entries` (sorted by name), durably:
/// a new file renamed over the old one, and its groups, all of them, likewise.
pub fn rewrite(root: &Path, entries: &[Entry]) -> io::Result<()> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut bytes = HEADER.to_vec();
    for e in sorted {
        bytes.extend(e.encode());
    }
    let (groups, slices) = groups::encode_all(&bytes);
    let tmp = root.join(meta::partial_name(CATALOG));
    write_durably(&tmp, &bytes, &root.join(CATALOG))?;
    // The slices before the heads that name them.
    let tmp = root.join(meta::partial_name(groups::SLICES));
    write_durably(&tmp, &slices, &groups::slices_path(root))?;
    let tmp = root.join(meta::partial_name(groups::GROUPS));
    write_durably(&tmp, &groups, &groups::path(root))
}

/// The entry of a finished file from its trailer's facts.
pub fn entry_of(path: &Path, size: u64, fm: &meta::FileMeta, summary: &[u8]) -> Entry {
    Entry {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        size,
        first_ns: fm.first_ts_ns,
        last_ns: fm.last_ts_ns,
        packets: fm.packets,
        summary: summary.to_vec(),
    }
}

/// Rebuilds the catalog of `store` from its finished files' trailers (what `tapdeck
/// index` does after indexing them): every file that opens gets its entry, and entries of
/// files no longer there are dropped. Returns the entries written and the files that did
/// not open (left out: readers open them).
pub fn rebuild(store: &Store) -> io::Result<(usize, usize)> {
    let mut entries = Vec::with_capacity(store.files.len());
    let mut failed = 0;
    for path in &store.files {
        match (StoredFile::open(path), std::fs::metadata(path)) {
            (Ok(f), Ok(m)) => entries.push(entry_of(path, m.len(), &f.meta, &f.index.summary)),
            _ => failed += 1,
        }
    }
    rewrite(&store.root, &entries)?;
    Ok((entries.len(), failed))
}

/// Drops the entries of files no longer in any of `dirs` (retention deleted them): a
/// recorder that runs for months appends an entry per file, and readers would read the
/// dead ones on every query. Returns the entries kept. An entry another writer appends
/// meanwhile may be lost with the old file: that file is then opened by readers, as
/// any file the catalog lacks.
pub fn compact(root: &Path, dirs: &[PathBuf]) -> io::Result<usize> {
    let catalog = Catalog::read(root);
    let live: Vec<Entry> = (catalog.entries.into_values())
        .filter(|e| dirs.iter().any(|d| d.join(&e.name).exists()))
        .collect();
    rewrite(root, &live)?;
    Ok(live.len())
}

/// The catalog's path under a store's root.
pub fn path(root: &Path) -> PathBuf {
    root.join(CATALOG)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapdeck_pcap::container::Container;
    use tapdeck_pcap::Format;

    fn entry(seq: u64, summary: &[u8]) -> Entry {
        Entry {
            name: meta::file_name(seq * 1_000_000_000, 0, seq, Format::Pcapng, Container::Zstd),
            size: 1000 + seq,
            first_ns: seq * 10,
            last_ns: seq * 10 + 9,
            packets: seq,
            summary: summary.to_vec(),
        }
    }

    #[test]
    fn appended_entries_read_back_and_the_latest_of_a_name_wins() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), &[entry(1, b""), entry(2, b"old")]).unwrap();
        append(dir.path(), &[entry(2, b"new"), entry(3, &[7; 300])]).unwrap();
        let c = Catalog::read(dir.path());
        assert_eq!(c.skipped_bytes, 0);
        assert_eq!(c.entries.len(), 3);
        let two = entry(2, b"new");
        assert_eq!(c.entries[&two.name], two);
        let at = |name: &str| Path::new("/elsewhere").join(name);
        assert_eq!(c.get(&at(&two.name), Some(1002)), Some(&two));
        assert_eq!(c.get(&at(&two.name), None), Some(&two));
        assert_eq!(
            c.get(&at(&two.name), Some(5)),
            None,
            "another size: not this file"
        );
        assert_eq!(c.get(&at("nothing"), None), None);
    }

    #[test]
    fn a_record_cut_short_or_damaged_costs_that_record_only() {
        let dir = tempfile::tempdir().unwrap();
        let all = [entry(1, b"a"), entry(2, &[2; 50]), entry(3, b"c")];
        append(dir.path(), &all).unwrap();
        let bytes = std::fs::read(path(dir.path())).unwrap();
        // Cut anywhere: the whole records before the cut, nothing else, no panic.
        let ends: Vec<usize> = {
            let mut at = HEADER.len();
            all.iter()
                .map(|e| {
                    at += e.encode().len();
                    at
                })
                .collect()
        };
        for cut in 0..bytes.len() {
            let c = Catalog::parse(&bytes[..cut]);
            let whole = ends.iter().filter(|&&end| end <= cut).count();
            assert_eq!(c.entries.len(), whole, "cut at {cut}");
        }
        // A torn record, then more appended (a recorder killed mid-write, then another):
        // the records after it are found again.
        let mut torn = bytes[..ends[0] + 10].to_vec();
        torn.extend(entry(4, b"d").encode());
        let c = Catalog::parse(&torn);
        assert_eq!(c.entries.len(), 2, "{:?}", c.entries.keys());
        assert!(c.entries.contains_key(&entry(4, b"").name));
        assert_eq!(c.skipped_bytes, 10);
        // A flipped byte inside the second record: the others stay.
        for i in ends[0]..ends[1] {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            let c = Catalog::parse(&b);
            assert_eq!(c.entries.len(), 2, "byte {i}");
            assert!(!c.entries.contains_key(&entry(2, b"").name) || i >= ends[1]);
        }
        // Not a catalog at all.
        assert!(Catalog::parse(b"garbage").entries.is_empty());
        assert!(Catalog::read(&dir.path().join("none")).entries.is_empty());
    }

    #[test]
    fn compaction_keeps_the_entries_of_files_still_there() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("d");
        std::fs::create_dir(&data).unwrap();
        let (a, b) = (entry(1, b"a"), entry(2, b"b"));
        std::fs::write(data.join(&b.name), b"x").unwrap();
        append(dir.path(), &[a, b.clone()]).unwrap();
        assert_eq!(compact(dir.path(), &[data]).unwrap(), 1);
        let c = Catalog::read(dir.path());
        assert_eq!(c.entries.values().collect::<Vec<_>>(), vec![&b]);
    }

    #[test]
    fn a_rewrite_keeps_only_what_it_is_given() {
        let dir = tempfile::tempdir().unwrap();
        append(
            dir.path(),
            &[entry(1, b"a"), entry(2, b"b"), entry(1, b"c")],
        )
        .unwrap();
        rewrite(dir.path(), &[entry(2, b"b")]).unwrap();
        let c = Catalog::read(dir.path());
        assert_eq!(c.entries.len(), 1);
        assert!(!dir.path().join(meta::partial_name(CATALOG)).exists());
        append(dir.path(), &[entry(5, b"")]).unwrap();
        assert_eq!(Catalog::read(dir.path()).entries.len(), 2);
    }
}
