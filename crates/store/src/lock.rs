//! The lock a recorder holds on its store while it records.
//!
//! A `.lock` file in the store directory and in each data directory, held with `flock`
//! (exclusive) for the whole run: the kernel drops it when the process ends however it
//! ends, so a crashed recorder never leaves a stale lock. While it is held, the hidden
//! partial files in those directories are being written, not damaged: readers say so, and
//! `verify --repair` leaves them alone. The file holds the holder's pid and command for the
//! messages; the lock itself is the flock, not the file's existence.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// The lock file's name in each directory of a store.
pub const LOCK_FILE: &str = ".lock";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{dir} is being recorded by {holder}; stop it first or choose another store")]
    Held { dir: PathBuf, holder: Holder },
    #[error("cannot lock {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Who holds a lock, as its file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// What the holder wrote: `pid 123 (tapdeck record)`; "another process" if unreadable.
    pub description: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.description)
    }
}

/// Held until dropped (or the process ends).
#[derive(Debug)]
pub struct StoreLock {
    _files: Vec<File>,
}

impl StoreLock {
    /// Locks every one of `dirs` (the store directory first) for `command`, or says who
    /// holds one of them. Nothing is left locked on failure.
    pub fn acquire(dirs: &[PathBuf], command: &str) -> Result<StoreLock, LockError> {
        let mut files = Vec::new();
        for dir in dirs {
            let path = dir.join(LOCK_FILE);
            let io = |source| LockError::Io {
                path: path.clone(),
                source,
            };
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(io)?;
            if !try_flock(&file, libc::LOCK_EX).map_err(io)? {
                return Err(LockError::Held {
                    dir: dir.clone(),
                    holder: read_holder(&mut file),
                });
            }
            let me = format!("pid {} ({command})\n", std::process::id());
            file.set_len(0)
                .and_then(|_| file.write_all(me.as_bytes()))
                .map_err(io)?;
            files.push(file);
        }
        Ok(StoreLock { _files: files })
    }
}

/// Who is recording into `dir` right now, if anyone (another process or this one).
pub fn holder(dir: &Path) -> Option<Holder> {
    let mut file = File::open(dir.join(LOCK_FILE)).ok()?;
    match try_flock(&file, libc::LOCK_SH) {
        Ok(true) => None,
        Ok(false) => Some(read_holder(&mut file)),
        // A filesystem without flock: nothing can be said; behave as unlocked.
        Err(_) => None,
    }
}

/// Who is writing this partial file right now (the holder of its directory's lock), if
/// anyone; `None` means it was left behind by a run that ended (repairable).
pub fn writer_of(partial: &Path) -> Option<Holder> {
    holder(
        partial
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )
}

/// Takes an exclusive lock on `file` without waiting (released when it is closed):
/// Ok(false) when someone else holds one.
pub(crate) fn try_flock_exclusive(file: &File) -> io::Result<bool> {
    try_flock(file, libc::LOCK_EX)
}

/// Takes an exclusive lock on `file`, waiting for it (released when it is closed).
pub(crate) fn flock_exclusive(file: &File) -> io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor we own; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Takes the lock without waiting: Ok(false) when someone else holds it.
fn try_flock(file: &File, how: libc::c_int) -> io::Result<bool> {
    // SAFETY: flock on a descriptor we own; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

fn read_holder(file: &mut File) -> Holder {
    let mut s = String::new();
    let _ = file.read_to_string(&mut s);
    let s = s.trim();
    Holder {
        description: if s.is_empty() {
            "another process".into()
        } else {
            s.to_string()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_and_names_the_holder_until_the_first_is_dropped() {
        let store = tempfile::tempdir().unwrap();
        let extra = tempfile::tempdir().unwrap();
        let dirs = [store.path().to_path_buf(), extra.path().to_path_buf()];
        assert_eq!(holder(store.path()), None, "no lock file yet");
        let lock = StoreLock::acquire(&dirs, "tapdeck record").unwrap();
        let me = format!("pid {} (tapdeck record)", std::process::id());
        assert_eq!(holder(extra.path()).unwrap().description, me);
        match StoreLock::acquire(&dirs[1..], "tapdeck serve") {
            Err(LockError::Held { dir, holder }) => {
                assert_eq!(dir, dirs[1]);
                assert_eq!(holder.description, me);
            }
            other => panic!("expected Held, got {other:?}"),
        }
        drop(lock);
        assert_eq!(holder(store.path()), None, "released with its files");
        StoreLock::acquire(&dirs, "tapdeck serve").unwrap();
    }
}
