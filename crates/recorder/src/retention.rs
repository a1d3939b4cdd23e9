//! Retention inside the recorder: the oldest complete files go first, so capture never
//! stops for a full disk. Files being written are never candidates.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use crate::stats::StatsHub;
use tapdeck_store::meta;

#[derive(Debug, Clone, Copy, Default)]
pub struct RetentionPolicy {
    /// Keep the store's data files under this many bytes in total.
    pub max_bytes: Option<u64>,
    /// Keep this many bytes free on every data directory's filesystem.
    pub min_free: Option<u64>,
}

struct StoredFile {
    path: PathBuf,
    sidecar: Option<PathBuf>,
    bytes: u64,
    dir: usize,
}

/// The complete files of a store, oldest first (names start with their first timestamp).
pub struct Retention {
    policy: RetentionPolicy,
    dirs: Vec<PathBuf>,
    files: Mutex<(BTreeMap<String, StoredFile>, u64)>,
}

impl Retention {
    /// Lists the complete files already in `dirs`, from earlier runs too.
    pub fn new(policy: RetentionPolicy, dirs: &[PathBuf]) -> std::io::Result<Retention> {
        let r = Retention {
            policy,
            dirs: dirs.to_vec(),
            files: Mutex::new((BTreeMap::new(), 0)),
        };
        for (i, dir) in dirs.iter().enumerate() {
            for entry in std::fs::read_dir(dir)? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if meta::is_data_file(&name) {
                    r.add(i, &entry.path());
                }
            }
        }
        Ok(r)
    }

    pub fn policy(&self) -> RetentionPolicy {
        self.policy
    }

    /// Records a file that just became complete.
    pub fn add(&self, dir: usize, path: &Path) {
        let sidecar = path.with_file_name(meta::sidecar_name(
            &path.file_name().unwrap_or_default().to_string_lossy(),
        ));
        let sidecar = sidecar.exists().then_some(sidecar);
        let bytes = [Some(path), sidecar.as_deref()]
            .into_iter()
            .flatten()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
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
            },
        ) {
            files.1 -= old.bytes;
        }
    }

    /// Deletes oldest files until the policy holds; returns how many went.
    pub fn enforce(&self, stats: &StatsHub) -> usize {
        let mut deleted = 0;
        if let Some(max) = self.policy.max_bytes {
            while self.files.lock().unwrap().1 > max
                && self.delete_oldest(None, "the store is over --max-bytes", stats)
            {
                deleted += 1;
            }
        }
        if let Some(min) = self.policy.min_free {
            for (i, dir) in self.dirs.iter().enumerate() {
                while free_bytes(dir).is_some_and(|free| free < min)
                    && self.delete_oldest(Some(i), "free space is under --min-free", stats)
                {
                    deleted += 1;
                }
            }
        }
        deleted
    }

    /// Frees space after a write failed for lack of it: deletes the oldest file on `dir`.
    /// Only when a retention policy is set; without one the user asked to keep everything.
    pub fn make_room(&self, dir: usize, stats: &StatsHub) -> bool {
        (self.policy.max_bytes.is_some() || self.policy.min_free.is_some())
            && self.delete_oldest(Some(dir), "the disk is full", stats)
    }

    fn delete_oldest(&self, dir: Option<usize>, why: &str, stats: &StatsHub) -> bool {
        let victim = {
            let mut files = self.files.lock().unwrap();
            let Some(name) = files
                .0
                .iter()
                .find(|(_, f)| dir.is_none_or(|d| f.dir == d))
                .map(|(n, _)| n.clone())
            else {
                return false;
            };
            let f = files.0.remove(&name).expect("just found");
            files.1 -= f.bytes;
            f
        };
        for p in [Some(&victim.path), victim.sidecar.as_ref()]
            .into_iter()
            .flatten()
        {
            if let Err(e) = std::fs::remove_file(p) {
                tracing::warn!("retention could not delete {}: {e}", p.display());
            }
        }
        tracing::info!(
            "retention deleted {} ({} bytes): {why}",
            victim.path.display(),
            victim.bytes
        );
        stats.files_deleted.fetch_add(1, Ordering::Relaxed);
        stats
            .bytes_deleted
            .fetch_add(victim.bytes, Ordering::Relaxed);
        true
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

    #[test]
    fn deletes_oldest_first_until_under_max_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let names = [
            "20260101T000002.000000000Z-s00-000002.pcapng",
            "20260101T000001.000000000Z-s00-000001.pcapng",
        ];
        for n in names {
            std::fs::write(dir.path().join(n), vec![0u8; 1000]).unwrap();
        }
        std::fs::write(
            dir.path().join(meta::sidecar_name(names[1])),
            vec![0u8; 100],
        )
        .unwrap();
        std::fs::write(
            dir.path().join(".partial-is-not-counted.partial"),
            vec![0u8; 5000],
        )
        .unwrap();
        let r = Retention::new(
            RetentionPolicy {
                max_bytes: Some(1500),
                min_free: None,
            },
            &[dir.path().to_path_buf()],
        )
        .unwrap();
        let stats = StatsHub::new(1);
        assert_eq!(r.enforce(&stats), 1);
        assert!(!dir.path().join(names[1]).exists(), "the oldest goes first");
        assert!(
            !dir.path().join(meta::sidecar_name(names[1])).exists(),
            "with its index"
        );
        assert!(dir.path().join(names[0]).exists());
        assert_eq!(stats.files_deleted.load(Ordering::Relaxed), 1);
        assert_eq!(stats.bytes_deleted.load(Ordering::Relaxed), 1100);
        assert_eq!(r.enforce(&stats), 0);
    }

    #[test]
    fn make_room_only_with_a_policy() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path()
                .join("20260101T000001.000000000Z-s00-000001.pcap"),
            b"x",
        )
        .unwrap();
        let dirs = [dir.path().to_path_buf()];
        let stats = StatsHub::new(1);
        assert!(!Retention::new(RetentionPolicy::default(), &dirs)
            .unwrap()
            .make_room(0, &stats));
        let r = Retention::new(
            RetentionPolicy {
                max_bytes: Some(u64::MAX),
                min_free: None,
            },
            &dirs,
        )
        .unwrap();
        assert!(r.make_room(0, &stats));
        assert!(!r.make_room(0, &stats), "nothing left to delete");
    }
}
