//! Retention inside the recorder: the oldest complete files go first, so capture never
//! stops for a full disk. Files being written are never candidates, and neither are the
//! newest: the two newest complete files, and any completed less than `min_keep` ago. When
//! the limits can only be kept by deleting those, retention refuses writes instead (the
//! writer drops and counts the chunks) and says so, loudly, until room returns.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::stats::StatsHub;
use tapdeck_store::meta;

/// Complete files retention never deletes, however full the disk: the newest ones.
pub const KEEP_NEWEST: usize = 2;

/// `--min-keep`'s default: nothing younger than this is deleted.
pub const DEFAULT_MIN_KEEP: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy)]
pub struct RetentionPolicy {
    /// Keep the store's data files (the open ones too) under this many bytes in total.
    pub max_bytes: Option<u64>,
    /// Keep this many bytes free on every data directory's filesystem.
    pub min_free: Option<u64>,
    /// Never delete a file completed less than this long ago.
    pub min_keep: Duration,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy {
            max_bytes: None,
            min_free: None,
            min_keep: DEFAULT_MIN_KEEP,
        }
    }
}

impl RetentionPolicy {
    pub fn is_set(&self) -> bool {
        self.max_bytes.is_some() || self.min_free.is_some()
    }
}

struct StoredFile {
    path: PathBuf,
    sidecar: Option<PathBuf>,
    bytes: u64,
    dir: usize,
    completed: SystemTime,
    /// False for a file known to hold no packet (a rotation while writes were refused, a
    /// quiet link): such files are never among the protected newest.
    has_packets: bool,
}

/// The complete files of a store, oldest first (names start with their first timestamp).
pub struct Retention {
    /// Changed while recording by `set_policy` (the service's reload).
    policy: Mutex<RetentionPolicy>,
    dirs: Vec<PathBuf>,
    files: Mutex<(BTreeMap<String, StoredFile>, u64)>,
    /// Bytes written to files still open, counted against `max_bytes` too.
    open_bytes: AtomicU64,
    /// The store catalog's size (`tapdeck_store::catalog`), counted against `max_bytes` too.
    catalog_bytes: AtomicU64,
    /// Set while writes are refused because only protected files are left to delete.
    holding: Mutex<Option<&'static str>>,
}

impl Retention {
    /// Lists the complete files already in `dirs`, from earlier runs too.
    pub fn new(policy: RetentionPolicy, dirs: &[PathBuf]) -> std::io::Result<Retention> {
        let r = Retention {
            policy: Mutex::new(policy),
            dirs: dirs.to_vec(),
            files: Mutex::new((BTreeMap::new(), 0)),
            open_bytes: AtomicU64::new(0),
            catalog_bytes: AtomicU64::new(0),
            holding: Mutex::new(None),
        };
        for (i, dir) in dirs.iter().enumerate() {
            for entry in std::fs::read_dir(dir)? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if meta::is_data_file(&name) {
                    r.add(i, &entry.path(), None);
                }
            }
        }
        Ok(r)
    }

    pub fn policy(&self) -> RetentionPolicy {
        *self.policy.lock().unwrap()
    }

    /// New limits, applied at once: files the new limits no longer allow are deleted now
    /// (within the same protections), and a hold the old limits caused is re-examined.
    pub fn set_policy(&self, policy: RetentionPolicy, stats: &StatsHub) {
        *self.policy.lock().unwrap() = policy;
        if !policy.is_set() {
            self.set_holding(None, stats);
        }
        self.enforce(stats);
    }

    /// The first packet time of the oldest complete file still stored (names start with
    /// it), if any.
    pub fn horizon_ns(&self) -> Option<u64> {
        let files = self.files.lock().unwrap();
        files.0.keys().find_map(|name| meta::time_of_name(name))
    }

    /// Records a file that just became complete, holding `packets` (None: unknown).
    pub fn add(&self, dir: usize, path: &Path, packets: Option<u64>) {
        let sidecar = path.with_file_name(meta::sidecar_name(
            &path.file_name().unwrap_or_default().to_string_lossy(),
        ));
        let sidecar = sidecar.exists().then_some(sidecar);
        let metas: Vec<_> = [Some(path), sidecar.as_deref()]
            .into_iter()
            .flatten()
            .filter_map(|p| std::fs::metadata(p).ok())
            .collect();
        let bytes = metas.iter().map(|m| m.len()).sum();
        let completed = metas
            .first()
            .and_then(|m| m.modified().ok())
            .unwrap_or_else(SystemTime::now);
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let mut files = self.files.lock().unwrap();
        files.1 += bytes;
        if let Some(old) = files.0.insert(
            name,
            StoredFile {
                path: path.to_path_buf(),
                sidecar,
                bytes,
                dir,
                completed,
                has_packets: packets != Some(0),
            },
        ) {
            files.1 -= old.bytes;
        }
    }

    /// Bytes were appended to an open file (`grew`) or an open file's bytes left the open
    /// count (`shrank`: it was completed, and `add` counts it now, or abandoned).
    pub fn open_grew(&self, bytes: u64) {
        self.open_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn open_shrank(&self, bytes: u64) {
        let _ = self
            .open_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(b.saturating_sub(bytes))
            });
    }

    /// May `bytes` more be written to `dir`? Deletes the oldest unprotected files until the
    /// limits hold with them written; false (and a loud warning, once per episode) when
    /// only protected files are left, true again once there is room.
    pub fn admit(&self, dir: usize, bytes: u64, stats: &StatsHub) -> bool {
        let policy = self.policy();
        if !policy.is_set() {
            return true;
        }
        // Once holding, writing resumes only with room for a few chunks, so that a small
        // chunk squeezing in does not end the episode and the log does not flap.
        let bytes = if self.holding().is_some() {
            bytes.saturating_mul(4).max(bytes + (4 << 20))
        } else {
            bytes
        };
        let over_max = |r: &Retention| {
            policy.max_bytes.is_some_and(|max| {
                r.files.lock().unwrap().1
                    + r.open_bytes.load(Ordering::Relaxed)
                    + r.catalog_bytes.load(Ordering::Relaxed)
                    + bytes
                    > max
            })
        };
        let under_free = |r: &Retention| {
            policy
                .min_free
                .is_some_and(|min| free_bytes(&r.dirs[dir]).is_some_and(|f| f < min + bytes))
        };
        let mut blocked = None;
        while over_max(self) {
            if !self.delete_oldest(None, "the store is over --max-bytes", stats) {
                blocked = Some("--max-bytes");
                break;
            }
        }
        while blocked.is_none() && under_free(self) {
            if !self.delete_oldest(Some(dir), "free space is under --min-free", stats) {
                blocked = Some("--min-free");
            }
        }
        self.set_holding(blocked, stats);
        blocked.is_none()
    }

    /// The store catalog's size now (the writers say it after each change of it).
    pub fn set_catalog_bytes(&self, bytes: u64) {
        self.catalog_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Deletes oldest unprotected files until the limits hold (after a file completes,
    /// and at start); returns how many went.
    pub fn enforce(&self, stats: &StatsHub) -> usize {
        let before = stats.files_deleted.load(Ordering::Relaxed);
        for dir in 0..self.dirs.len() {
            self.admit(dir, 0, stats);
        }
        (stats.files_deleted.load(Ordering::Relaxed) - before) as usize
    }

    /// Is the policy breached now with nothing left that may be deleted? (At start: a
    /// disk already below `--min-free` is an error, not a recording that stores nothing.)
    pub fn holding(&self) -> Option<&'static str> {
        *self.holding.lock().unwrap()
    }

    fn set_holding(&self, now: Option<&'static str>, stats: &StatsHub) {
        let mut holding = self.holding.lock().unwrap();
        match (*holding, now) {
            (None, Some(limit)) => {
                stats.retention_holds.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    "retention cannot keep {limit} without deleting the {KEEP_NEWEST} newest files or files younger than --min-keep ({} s): writing stops, packets are dropped and counted as write errors until there is room (free space, or raise the limit)",
                    self.policy().min_keep.as_secs()
                );
            }
            (Some(limit), None) => {
                tracing::warn!("retention: {limit} holds again; writing resumes");
            }
            _ => {}
        }
        *holding = now;
    }

    /// Frees space after a write failed for lack of it: deletes the oldest unprotected file
    /// on `dir`. Only when a retention policy is set; without one the user asked to keep
    /// everything.
    pub fn make_room(&self, dir: usize, stats: &StatsHub) -> bool {
        self.policy().is_set() && self.delete_oldest(Some(dir), "the disk is full", stats)
    }

    fn delete_oldest(&self, dir: Option<usize>, why: &str, stats: &StatsHub) -> bool {
        let victim = {
            let mut files = self.files.lock().unwrap();
            let now = SystemTime::now();
            let min_keep = self.policy().min_keep;
            let newest: Vec<String> = files
                .0
                .iter()
                .rev()
                .filter(|(_, f)| f.has_packets)
                .take(KEEP_NEWEST)
                .map(|(n, _)| n.clone())
                .collect();
            let Some(name) = files
                .0
                .iter()
                .find(|(name, f)| {
                    dir.is_none_or(|d| f.dir == d)
                        && !newest.contains(name)
                        && now
                            .duration_since(f.completed)
                            .is_ok_and(|age| age >= min_keep)
                })
                .map(|(n, _)| n.clone())
            else {
                return false;
            };
            let f = files.0.remove(&name).expect("just found");
            files.1 -= f.bytes;
            f
        };
        // Each file at debug level: a service deleting a file a second would flood its
        // journal; the recorder logs a summary a minute (see `recorder::RetentionLog`).
        // Logged before the unlink, so a log read after a kill names every file gone.
        tracing::debug!(
            "retention deletes {} ({} bytes): {why}",
            victim.path.display(),
            victim.bytes
        );
        for p in [Some(&victim.path), victim.sidecar.as_ref()]
            .into_iter()
            .flatten()
        {
            if let Err(e) = std::fs::remove_file(p) {
                tracing::warn!("retention could not delete {}: {e}", p.display());
            }
        }
        stats.files_deleted.fetch_add(1, Ordering::Relaxed);
        stats
            .bytes_deleted
            .fetch_add(victim.bytes, Ordering::Relaxed);
        true
    }
}

/// Size of the filesystem holding `path`.
pub fn filesystem_bytes(path: &Path) -> Option<u64> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the struct we pass; we read it only on success.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut s) == 0).then(|| s.f_blocks as u64 * s.f_frsize as u64)
    }
}

/// Bytes available to unprivileged users on the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let c = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the struct we pass; we read it only on success.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut s) == 0).then(|| s.f_bavail as u64 * s.f_frsize as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(i: u32) -> String {
        format!("20260101T0000{i:02}.000000000Z-s00-{i:06}.pcapng")
    }

    /// A store directory with files 1..=n of 1000 bytes each (file 1 the oldest).
    fn store(n: u32) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for i in 1..=n {
            std::fs::write(dir.path().join(name(i)), vec![0u8; 1000]).unwrap();
        }
        dir
    }

    fn policy(max_bytes: u64, min_keep: Duration) -> RetentionPolicy {
        RetentionPolicy {
            max_bytes: Some(max_bytes),
            min_free: None,
            min_keep,
        }
    }

    #[test]
    fn deletes_oldest_first_until_under_max_bytes() {
        let dir = store(3);
        std::fs::write(
            dir.path().join(meta::sidecar_name(&name(1))),
            vec![0u8; 100],
        )
        .unwrap();
        std::fs::write(
            dir.path().join(".partial-is-not-counted.partial"),
            vec![0u8; 5000],
        )
        .unwrap();
        let r = Retention::new(policy(2500, Duration::ZERO), &[dir.path().to_path_buf()]).unwrap();
        let stats = StatsHub::new(1);
        assert_eq!(r.enforce(&stats), 1);
        assert!(!dir.path().join(name(1)).exists(), "the oldest goes first");
        assert!(
            !dir.path().join(meta::sidecar_name(&name(1))).exists(),
            "with its index"
        );
        assert!(dir.path().join(name(2)).exists());
        assert_eq!(stats.files_deleted.load(Ordering::Relaxed), 1);
        assert_eq!(stats.bytes_deleted.load(Ordering::Relaxed), 1100);
        assert_eq!(r.enforce(&stats), 0);
        assert_eq!(r.holding(), None);
    }

    #[test]
    fn the_two_newest_files_with_packets_are_never_deleted() {
        let dir = store(3);
        let r = Retention::new(policy(0, Duration::ZERO), &[dir.path().to_path_buf()]).unwrap();
        // A newer file without packets (a rotation while writes were refused).
        std::fs::write(dir.path().join(name(4)), vec![0u8; 1000]).unwrap();
        r.add(0, &dir.path().join(name(4)), Some(0));
        let stats = StatsHub::new(1);
        assert_eq!(r.enforce(&stats), 2, "file 1, then the empty file 4");
        assert!(dir.path().join(name(2)).exists() && dir.path().join(name(3)).exists());
        assert_eq!(r.holding(), Some("--max-bytes"));
        assert!(
            !r.admit(0, 1, &stats),
            "writing is refused while only protected files are left"
        );
        assert_eq!(
            stats.retention_holds.load(Ordering::Relaxed),
            1,
            "one episode"
        );
    }

    #[test]
    fn files_younger_than_min_keep_are_never_deleted_and_room_ends_the_hold() {
        let dir = store(4);
        let r = Retention::new(
            policy(3000, Duration::from_secs(3600)),
            &[dir.path().to_path_buf()],
        )
        .unwrap();
        let stats = StatsHub::new(1);
        assert_eq!(r.enforce(&stats), 0, "every file was just written");
        assert_eq!(r.holding(), Some("--max-bytes"));
        // Open files count against the limit too.
        r.open_grew(500);
        assert!(!r.admit(0, 1, &stats));
        std::fs::remove_file(dir.path().join(name(1))).unwrap();
        std::fs::remove_file(dir.path().join(name(2))).unwrap();
        let r = Retention::new(
            policy(3000 + (8 << 20), Duration::from_secs(3600)),
            &[dir.path().to_path_buf()],
        )
        .unwrap();
        assert!(r.admit(0, 1 << 20, &stats), "room for it: no hold");
        assert_eq!(r.holding(), None);
    }

    #[test]
    fn make_room_only_with_a_policy() {
        let dir = store(3);
        let dirs = [dir.path().to_path_buf()];
        let stats = StatsHub::new(1);
        assert!(!Retention::new(RetentionPolicy::default(), &dirs)
            .unwrap()
            .make_room(0, &stats));
        let r = Retention::new(policy(u64::MAX, Duration::ZERO), &dirs).unwrap();
        assert!(r.make_room(0, &stats));
        assert!(!r.make_room(0, &stats), "only the two newest are left");
    }
}
