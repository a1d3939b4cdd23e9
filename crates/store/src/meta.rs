//! What a stored file and a store say about themselves: the JSON metadata inside each
//! file's chunk index, the store manifest, and how files are named.

use serde::{Deserialize, Serialize};
use tapdeck_pcap::container::Container;
use tapdeck_pcap::{Format, Interface};

/// Version of the store layout and of [`FileMeta`]; bumped on incompatible change.
pub const STORE_VERSION: u32 = 1;
pub const MANIFEST: &str = "manifest.json";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct InterfaceMeta {
    pub name: Option<String>,
    pub description: Option<String>,
    pub linktype: u16,
    pub snaplen: u32,
}

impl From<&Interface> for InterfaceMeta {
    fn from(i: &Interface) -> Self {
        InterfaceMeta {
            name: i.name.clone(),
            description: i.description.clone(),
            linktype: i.linktype,
            snaplen: i.snaplen,
        }
    }
}

impl From<&InterfaceMeta> for Interface {
    fn from(i: &InterfaceMeta) -> Self {
        Interface {
            name: i.name.clone(),
            description: i.description.clone(),
            linktype: i.linktype,
            snaplen: i.snaplen,
        }
    }
}

/// Counts for one interface of a stream, cumulative since the recorder started. The same
/// numbers go into the file's interface statistics block.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct InterfaceCounts {
    /// Packets the source saw (for a socket: what the kernel counted, drops included).
    pub seen: u64,
    /// Dropped by the source before delivery (kernel ring full).
    pub dropped_kernel: u64,
    /// Delivered by the source to the recorder.
    pub received: u64,
    /// Dropped because the staging pool was full.
    pub dropped_staging_full: u64,
    /// Lost because writing their chunk failed on every data directory.
    pub dropped_write_error: u64,
    /// Written to complete chunks.
    pub stored: u64,
}

impl InterfaceCounts {
    /// Packets lost, all causes.
    pub fn dropped(&self) -> u64 {
        self.dropped_kernel + self.dropped_staging_full + self.dropped_write_error
    }

    /// Packets seen but neither stored nor dropped yet: seen = stored + dropped + in flight.
    pub fn in_flight(&self) -> u64 {
        self.seen.saturating_sub(self.stored + self.dropped())
    }
}

/// Metadata of one stored file, kept as JSON in its chunk index.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileMeta {
    pub store_version: u32,
    pub stream: u32,
    pub seq: u64,
    pub format: String,
    pub container: String,
    pub first_ts_ns: u64,
    pub last_ts_ns: u64,
    pub packets: u64,
    pub interfaces: Vec<InterfaceMeta>,
    /// Counters at the moment the file was closed, one per interface.
    pub counts: Vec<InterfaceCounts>,
    /// Packets whose timestamp is earlier than the packet before them in this file (a
    /// replayed trace may be out of order; a live capture is not). `verify` checks it.
    #[serde(default)]
    pub out_of_order: u64,
    /// Set by `tapdeck verify --repair`: the file was finalized after its writer died, so
    /// it has no statistics block and `counts` is empty.
    #[serde(default)]
    pub repaired: bool,
    /// When the run that wrote the file started (ns since the epoch): `counts` are
    /// cumulative within a run, so readers tell runs apart by it. Absent in older files
    /// and in repaired ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_started_ns: Option<u64>,
}

/// The store manifest: what a reader needs to know before opening any file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub store_version: u32,
    pub tapdeck_version: String,
    pub host: String,
    pub format: String,
    pub container: String,
    /// Directories holding data files, in round-robin order: relative to the store when
    /// inside it (`.` for the store itself), else absolute. Older stores hold absolute paths
    /// only, and no ids; readers still follow them (see `read::Store::open_with`).
    pub dirs: Vec<String>,
    /// Random id of the store, also written into each data directory's [`DIR_MARK`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_id: Option<String>,
    /// Id of each entry of `dirs` (same order), as its [`DIR_MARK`] holds it: how a moved
    /// data directory is recognized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dir_ids: Vec<String>,
    pub streams: u32,
    pub interfaces: Vec<InterfaceMeta>,
    pub linktypes: Vec<u16>,
    pub snaplen: u32,
    /// The recorder options as given, for the record.
    pub options: serde_json::Value,
    pub started_ns: u64,
    #[serde(default)]
    pub finished_ns: Option<u64>,
    /// The recording host's clock discipline when the recording started (absent in stores
    /// written before it was kept, and in merged stores: see `merge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockSync>,
    /// Set when the store was made by `tapdeck merge`: where its packets came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<MergeManifest>,
}

/// What the kernel said about its clock (adjtimex, read only).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClockSync {
    /// The clock is disciplined (NTP or PTP via the kernel): STA_UNSYNC clear and the
    /// state not TIME_ERROR.
    pub synchronized: bool,
    /// The kernel's maximum and estimated error, microseconds.
    pub max_error_us: i64,
    pub est_error_us: i64,
    /// When it was read, nanoseconds since the epoch.
    pub read_ns: u64,
}

/// Provenance of a merged store: its inputs, in the order they were given.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MergeManifest {
    pub inputs: Vec<MergedInput>,
    /// With `--dedup`: frames of different inputs were dropped as duplicates within this
    /// many nanoseconds (see docs/merge.md).
    #[serde(default)]
    pub dedup_window_ns: Option<u64>,
    /// False until the merge finished; the per-input counts are filled in then.
    #[serde(default)]
    pub complete: bool,
}

/// One input store of a merge.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MergedInput {
    /// The store's directory, absolute.
    pub store: String,
    /// The short name its interfaces' descriptions use (`mon0 stream 1`).
    pub label: String,
    /// The recording host (from its manifest).
    #[serde(default)]
    pub host: Option<String>,
    /// Added to each of its timestamps (`--offset STORE=±NS`).
    pub offset_ns: i64,
    /// Its recorder's clock state, if its manifest kept one.
    #[serde(default)]
    pub clock: Option<ClockSync>,
    /// Output interfaces that hold its packets.
    pub interfaces: Vec<u32>,
    /// Packets taken from it, and frames of it dropped as duplicates (once complete).
    #[serde(default)]
    pub packets: u64,
    #[serde(default)]
    pub duplicates: u64,
}

/// The small file in each data directory that says whose it is.
pub const DIR_MARK: &str = ".tapdeck-dir";

/// What a data directory's [`DIR_MARK`] holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DirMark {
    pub store_id: String,
    pub dir_id: String,
}

impl DirMark {
    /// The mark in `dir`, if it has a readable one.
    pub fn read(dir: &std::path::Path) -> Option<DirMark> {
        serde_json::from_slice(&std::fs::read(dir.join(DIR_MARK)).ok()?).ok()
    }
}

/// A store's metadata file (its manifest, a directory's mark) could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct WriteError {
    pub path: std::path::PathBuf,
    pub source: std::io::Error,
}

/// The data directories of a store as its manifest records them, with their ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDirs {
    pub store_id: String,
    /// [`Manifest::dirs`].
    pub dirs: Vec<String>,
    /// [`Manifest::dir_ids`].
    pub dir_ids: Vec<String>,
}

impl DataDirs {
    /// Marks each of `dirs` (absolute, existing) as a data directory of the store at
    /// `store` (absolute): the store keeps its id across runs (from its manifest, if it
    /// has one) and a directory keeps its id while its mark names this store.
    pub fn mark(
        store: &std::path::Path,
        dirs: &[std::path::PathBuf],
    ) -> Result<DataDirs, WriteError> {
        let store_id = std::fs::read(store.join(MANIFEST))
            .ok()
            .and_then(|b| serde_json::from_slice::<Manifest>(&b).ok())
            .and_then(|m| m.store_id)
            .unwrap_or_else(new_id);
        let mut out = DataDirs {
            store_id: store_id.clone(),
            dirs: Vec::new(),
            dir_ids: Vec::new(),
        };
        for dir in dirs {
            let mark = match DirMark::read(dir) {
                Some(m) if m.store_id == store_id => m,
                _ => {
                    let m = DirMark {
                        store_id: store_id.clone(),
                        dir_id: new_id(),
                    };
                    let json = serde_json::to_vec(&m).expect("mark serializes");
                    let tmp = dir.join(format!("{DIR_MARK}.partial"));
                    std::fs::write(&tmp, json)
                        .and_then(|_| std::fs::rename(&tmp, dir.join(DIR_MARK)))
                        .map_err(|source| WriteError {
                            path: dir.join(DIR_MARK),
                            source,
                        })?;
                    m
                }
            };
            out.dirs.push(match dir.strip_prefix(store) {
                Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
                Ok(rel) => rel.display().to_string(),
                Err(_) => dir.display().to_string(),
            });
            out.dir_ids.push(mark.dir_id);
        }
        Ok(out)
    }
}

/// 128 random bits in hex (from the kernel; the time and process id if that fails).
pub fn new_id() -> String {
    use std::io::Read;
    let mut b = [0u8; 16];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if random.is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b = (t ^ (u128::from(std::process::id()) << 96)).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Writes `STORE/manifest.json` atomically (a hidden file, then a rename).
pub fn write_manifest(store: &std::path::Path, manifest: &Manifest) -> Result<(), WriteError> {
    let path = store.join(MANIFEST);
    let tmp = store.join(format!(".{MANIFEST}.partial"));
    let json = serde_json::to_vec_pretty(manifest).expect("manifest serializes");
    std::fs::write(&tmp, json)
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            WriteError { path, source }
        })
}

pub fn format_name(f: Format) -> &'static str {
    f.extension()
}

pub fn parse_format(s: &str) -> Option<Format> {
    match s {
        "pcapng" => Some(Format::Pcapng),
        "pcap" => Some(Format::Pcap),
        _ => None,
    }
}

pub fn container_name(c: Container) -> &'static str {
    match c {
        Container::Plain => "plain",
        Container::Zstd => "zstd",
        Container::Lz4 => "lz4",
    }
}

/// Name of a data file: first timestamp (UTC, to the nanosecond), stream and sequence, so
/// that names sort by time and never collide between streams.
pub fn file_name(
    first_ts_ns: u64,
    stream: u32,
    seq: u64,
    format: Format,
    container: Container,
) -> String {
    format!(
        "{}-s{stream:02}-{seq:06}.{}{}",
        compact_utc(first_ts_ns),
        format.extension(),
        container.suffix()
    )
}

/// Name a file has while it is written; hidden, and renamed to `final_name` when complete.
pub fn partial_name(final_name: &str) -> String {
    format!(".{final_name}.partial")
}

/// The final name a partial file will get, if `name` is one.
pub fn final_name_of_partial(name: &str) -> Option<&str> {
    name.strip_prefix('.')?.strip_suffix(".partial")
}

/// Is this the hidden name of a file still being written (or left behind by a crash)?
pub fn is_partial(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(final_name_of_partial)
        .is_some()
}

/// Sidecar holding the chunk index of a plain (uncompressed) file.
pub fn sidecar_name(data_name: &str) -> String {
    format!("{data_name}.idx")
}

/// Is `name` a complete data file of a store?
pub fn is_data_file(name: &str) -> bool {
    DataName::parse(name).is_some()
}

/// Format and container of a capture file from its extension alone (`.pcap`, `.pcapng`,
/// then `.zst` or `.lz4` or nothing), whatever the rest of its name.
pub fn kind_of_name(name: &str) -> Option<(Format, Container)> {
    let container = Container::from_suffix(name);
    let base = name.strip_suffix(container.suffix())?;
    let format = if base.ends_with(".pcapng") {
        Format::Pcapng
    } else if base.ends_with(".pcap") {
        Format::Pcap
    } else {
        return None;
    };
    Some((format, container))
}

/// A complete data file's name as `file_name` writes it, parsed: the one place that reads
/// stored file names (`FIRST-TIME-sSS-SEQUENCE.FORMAT[.CONTAINER]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataName {
    pub stream: u32,
    pub seq: u64,
    pub format: Format,
    pub container: Container,
}

impl DataName {
    /// `None` for anything else: hidden (partial) names, sidecars, other files.
    pub fn parse(name: &str) -> Option<DataName> {
        if name.starts_with('.') {
            return None;
        }
        let (format, container) = kind_of_name(name)?;
        let stem = name
            .strip_suffix(container.suffix())?
            .strip_suffix(format.extension())?
            .strip_suffix('.')?;
        let mut parts = stem.rsplitn(3, '-');
        let seq = parts.next()?.parse().ok()?;
        let stream = parts.next()?.strip_prefix('s')?.parse().ok()?;
        parts.next()?;
        Some(DataName {
            stream,
            seq,
            format,
            container,
        })
    }

    /// The name of a partial file (`.NAME.partial`) and what it will be called when final.
    pub fn of_partial(name: &str) -> Option<(DataName, &str)> {
        let final_name = final_name_of_partial(name)?;
        Some((DataName::parse(final_name)?, final_name))
    }
}

/// `YYYYMMDDTHHMMSS.nnnnnnnnnZ` for nanoseconds since the epoch.
pub fn compact_utc(ts_ns: u64) -> String {
    let secs = ts_ns / 1_000_000_000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}.{:09}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ts_ns % 1_000_000_000
    )
}

/// `YYYY-MM-DDTHH:MM:SSZ` (RFC 3339, whole seconds) for nanoseconds since the epoch.
pub fn rfc3339_utc(ts_ns: u64) -> String {
    let c = compact_utc(ts_ns);
    format!(
        "{}-{}-{}T{}:{}:{}Z",
        &c[0..4],
        &c[4..6],
        &c[6..8],
        &c[9..11],
        &c[11..13],
        &c[13..15]
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The first packet time a stored file's name gives (`file_name`'s first part), for a
/// file whose index is lost.
pub fn time_of_name(name: &str) -> Option<u64> {
    let t = name.get(..26)?;
    let b = t.as_bytes();
    if b[8] != b'T' || b[15] != b'.' || b[25] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let f = t.get(r)?;
        f.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| f.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, s) = (num(9..11)?, num(11..13)?, num(13..15)?);
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s;
    let ns = u64::try_from(num(16..25)?).ok()?;
    u64::try_from(secs)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(ns)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_time_and_round_trip_through_partial() {
        // 2026-11-23T05:57:34.000000123Z
        let ts = 1_795_413_454_000_000_123;
        let name = file_name(ts, 1, 7, Format::Pcapng, Container::Zstd);
        assert_eq!(name, "20261123T055734.000000123Z-s01-000007.pcapng.zst");
        assert!(is_data_file(&name));
        assert_eq!(
            DataName::parse(&name),
            Some(DataName {
                stream: 1,
                seq: 7,
                format: Format::Pcapng,
                container: Container::Zstd
            })
        );
        assert_eq!(
            DataName::of_partial(&partial_name(&name)).map(|(_, n)| n),
            Some(name.as_str())
        );
        for other in [
            "capture.pcap",
            "x-s01.pcap",
            "a-sx-000001.pcap",
            "a-s01-000001.txt",
            "a-s01-000001.pcap.idx",
        ] {
            assert!(DataName::parse(other).is_none(), "{other}");
        }
        let partial = partial_name(&name);
        assert!(!is_data_file(&partial));
        assert_eq!(final_name_of_partial(&partial), Some(name.as_str()));
        assert_eq!(compact_utc(0), "19700101T000000.000000000Z");
        assert_eq!(
            compact_utc(951_782_400_000_000_000),
            "20000229T000000.000000000Z"
        );
        assert_eq!(rfc3339_utc(951_782_400_999_000_000), "2000-02-29T00:00:00Z");
        assert_eq!(time_of_name(&name), Some(ts));
        assert_eq!(time_of_name("capture.pcap"), None);
        assert!(
            file_name(ts, 0, 1, Format::Pcap, Container::Plain)
                < file_name(ts + 1, 0, 0, Format::Pcap, Container::Plain)
        );
    }
}
