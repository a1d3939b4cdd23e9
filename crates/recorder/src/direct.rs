//! A file written with large, aligned O_DIRECT writes (the storage study found them the
//! fastest way to a disk), falling back to buffered writes where the filesystem refuses
//! O_DIRECT (tmpfs, some ZFS).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use tapdeck_store::finalize::DataEnd;

/// O_DIRECT needs offsets, lengths and memory aligned to the logical block size; 4 KiB
/// covers every disk we meet.
pub const ALIGN: usize = 4096;

/// Page-aligned heap buffer.
struct AlignedBuf {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: the buffer is owned exclusively by its DirectFile.
unsafe impl Send for AlignedBuf {}

/// The buffer of the last file this thread dropped, for its next file: a writer's buffer
/// (9 MiB by default) fresh from the allocator is faulted in by its first writes, and on
/// our VMs (huge pages, memory compacted for them) that halved a new file's first writes.
struct Spare(Cell<Option<(*mut u8, usize)>>);

impl Drop for Spare {
    fn drop(&mut self) {
        if let Some((ptr, cap)) = self.0.take() {
            // SAFETY: allocated by `AlignedBuf::new` with this layout, and owned by nobody else
            // since its AlignedBuf was dropped.
            unsafe { dealloc(ptr, layout(cap)) };
        }
    }
}

thread_local! {
    static SPARE: Spare = const { Spare(Cell::new(None)) };
}

/// A file's buffer for `buffer` bytes: whole aligned blocks, at least one.
fn buffer_cap(buffer: usize) -> usize {
    buffer.div_ceil(ALIGN).max(1) * ALIGN
}

fn layout(cap: usize) -> Layout {
    Layout::from_size_align(cap, ALIGN).expect("aligned buffer layout")
}

impl AlignedBuf {
    fn new(cap: usize) -> AlignedBuf {
        assert!(cap > 0, "an aligned buffer needs a non-zero size");
        match SPARE.with(|s| s.0.take()) {
            Some((ptr, spare)) if spare == cap => return AlignedBuf { ptr, cap },
            // SAFETY: as in `Spare::drop`.
            Some((ptr, spare)) => unsafe { dealloc(ptr, layout(spare)) },
            None => {}
        }
        // SAFETY: the layout has a non-zero size (checked above); a null return is handled.
        let ptr = unsafe { alloc_zeroed(layout(cap)) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout(cap));
        }
        AlignedBuf { ptr, cap }
    }
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for cap bytes, initialised (zeroed by `alloc_zeroed`, or
        // written by an earlier file), and exclusively ours (`&mut self`).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.cap) }
    }
    fn as_ref(&self) -> &[u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(self.ptr, self.cap) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // At thread exit the spare may be gone already: then the buffer is freed.
        let mine = (self.ptr, self.cap);
        let free = SPARE
            .try_with(|s| s.0.replace(Some(mine)))
            .unwrap_or(Some(mine));
        if let Some((ptr, cap)) = free {
            // SAFETY: as in `Spare::drop`.
            unsafe { dealloc(ptr, layout(cap)) };
        }
    }
}

/// Makes this thread's spare buffer (see `Spare`) one of `buffer` bytes (as `create`
/// rounds it) with every page written: a writer's first file then takes no page faults.
pub fn prepare_buffer(buffer: usize) {
    let mut buf = AlignedBuf::new(buffer_cap(buffer));
    buf.as_mut().fill(0);
}

pub struct DirectFile {
    file: File,
    direct: bool,
    buf: AlignedBuf,
    /// Bytes of `buf` holding data.
    buf_len: usize,
    /// File offset of `buf[0]`; always aligned.
    buf_offset: u64,
    /// Bytes known to be written to the file (the kernel took them; not yet synced).
    on_disk: u64,
}

impl DirectFile {
    /// Creates `path` (failing if it exists). With `direct`, tries O_DIRECT first; the
    /// returned flag says whether it is in use.
    pub fn create(path: &Path, direct: bool, buffer: usize) -> io::Result<DirectFile> {
        let open = |flags: i32| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                // Packets are private: owner and group read them, others do not.
                .mode(0o640)
                .custom_flags(flags)
                .open(path)
        };
        let (file, direct) = match direct {
            true => match open(libc::O_DIRECT) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(0)?, false),
                Err(e) => return Err(e),
            },
            false => (open(0)?, false),
        };
        let cap = buffer_cap(buffer);
        Ok(DirectFile {
            file,
            direct,
            buf: AlignedBuf::new(cap),
            buf_len: 0,
            buf_offset: 0,
            on_disk: 0,
        })
    }

    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Logical length: everything appended so far.
    pub fn len(&self) -> u64 {
        self.buf_offset + self.buf_len as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How much of what was appended the kernel has taken (the rest waits in the buffer):
    /// a frame ending beyond it is lost if the file must be abandoned.
    pub fn on_disk(&self) -> u64 {
        self.on_disk
    }

    /// Appends bytes; writes whenever the buffer fills.
    pub fn append(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let n = (self.buf.cap - self.buf_len).min(bytes.len());
            self.buf.as_mut()[self.buf_len..self.buf_len + n].copy_from_slice(&bytes[..n]);
            self.buf_len += n;
            bytes = &bytes[n..];
            if self.buf_len == self.buf.cap {
                self.write_at(self.buf_offset, self.buf.cap)?;
                self.buf_offset += self.buf.cap as u64;
                self.on_disk = self.buf_offset;
                self.buf_len = 0;
            }
        }
        Ok(())
    }

    /// Puts everything appended so far on disk. With O_DIRECT the last partial block is
    /// written zero-padded and kept in the buffer, to be rewritten when it fills: the file
    /// may end in padding until `finish`, which a reader of an interrupted file must
    /// expect (`scan_frames` stops there).
    pub fn flush(&mut self) -> io::Result<()> {
        if self.buf_len == 0 {
            return Ok(());
        }
        let whole = self.buf_len / ALIGN * ALIGN;
        let len = if self.direct {
            self.buf_len.div_ceil(ALIGN) * ALIGN
        } else {
            self.buf_len
        };
        let buf_len = self.buf_len;
        self.buf.as_mut()[buf_len..len].fill(0);
        self.write_at(self.buf_offset, len)?;
        self.on_disk = self.len();
        if whole > 0 {
            self.buf.as_mut().copy_within(whole..self.buf_len, 0);
            self.buf_offset += whole as u64;
            self.buf_len -= whole;
        }
        Ok(())
    }

    /// Cuts the file where what the kernel took ends: a failed write may have put part of
    /// the buffer in the file, and those frames are written again elsewhere (or counted
    /// lost), so they must not also survive here.
    pub fn cut_to_on_disk(&self) -> io::Result<()> {
        self.file.set_len(self.on_disk)
    }

    /// Forgets everything appended after the first `len` bytes (a frame whose write
    /// failed), so the next frame starts where the last good one ended.
    pub fn rollback(&mut self, len: u64) -> io::Result<()> {
        self.on_disk = self.on_disk.min(len);
        if len >= self.buf_offset {
            self.buf_len = (len - self.buf_offset) as usize;
            return Ok(());
        }
        // Part of what stays is already on disk: read its last partial block back.
        let block = len / ALIGN as u64 * ALIGN as u64;
        let keep = (len - block) as usize;
        let mut got = 0;
        while got < keep {
            match self
                .file
                .read_at(&mut self.buf.as_mut()[got..ALIGN], block + got as u64)?
            {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "file shorter than its written frames",
                    ))
                }
                n => got += n,
            }
        }
        self.buf_offset = block;
        self.buf_len = keep;
        Ok(())
    }

    /// Syncs what the kernel has taken ([`DirectFile::on_disk`]) to the device
    /// (`fdatasync`); returns how much that is.
    pub fn sync_data(&self) -> io::Result<u64> {
        let on_disk = self.on_disk;
        self.file.sync_data()?;
        Ok(on_disk)
    }

    /// Flushes, cuts the padding off, and syncs the data and the file size.
    pub fn finish(mut self) -> io::Result<u64> {
        self.flush()?;
        let len = self.len();
        self.file.set_len(len)?;
        self.file.sync_data()?;
        Ok(len)
    }

    fn write_at(&mut self, offset: u64, len: usize) -> io::Result<()> {
        match self.file.write_all_at(&self.buf.as_ref()[..len], offset) {
            // Some filesystems accept O_DIRECT at open and refuse it at the first write.
            Err(e) if self.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                self.set_buffered()?;
                tracing::warn!("O_DIRECT refused by the filesystem; writing buffered instead");
                self.file.write_all_at(&self.buf.as_ref()[..len], offset)
            }
            other => other,
        }
    }

    fn set_buffered(&mut self) -> io::Result<()> {
        let fd = self.file.as_raw_fd();
        // SAFETY: fcntl on a descriptor we own; no memory is passed.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        let set =
            flags >= 0 && unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT) } >= 0;
        if !set {
            return Err(io::Error::last_os_error());
        }
        self.direct = false;
        Ok(())
    }
}

/// A file the writer finishes goes through the store's one finalizer.
impl DataEnd for DirectFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        DirectFile::append(self, bytes)
    }

    fn sync(self) -> io::Result<()> {
        self.finish().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn appends_flushes_and_finishes_to_the_exact_bytes() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [true, false] {
            let path = dir.path().join(format!("f{direct}"));
            let mut f = DirectFile::create(&path, direct, 3 * ALIGN).unwrap();
            let data = pattern(50_000);
            let mut expected = Vec::new();
            for piece in data.chunks(3001) {
                f.append(piece).unwrap();
                expected.extend_from_slice(piece);
                f.flush().unwrap();
                // After a flush everything appended is in the file (padding may follow).
                let on_disk = std::fs::read(&path).unwrap();
                assert_eq!(&on_disk[..expected.len()], &expected[..]);
                assert!(on_disk[expected.len()..].iter().all(|&b| b == 0));
            }
            assert_eq!(f.finish().unwrap(), data.len() as u64);
            assert_eq!(std::fs::read(&path).unwrap(), data);
        }
    }

    #[test]
    fn rollback_restores_the_tail_already_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [true, false] {
            let path = dir.path().join(format!("r{direct}"));
            let mut f = DirectFile::create(&path, direct, 2 * ALIGN).unwrap();
            let data = pattern(30_000);
            f.append(&data[..5000]).unwrap();
            f.flush().unwrap();
            f.append(&data[5000..20_000]).unwrap(); // spills several buffers to disk
            f.rollback(5000).unwrap();
            assert_eq!(f.len(), 5000);
            f.append(&data[5000..]).unwrap();
            assert_eq!(f.finish().unwrap(), 30_000);
            assert_eq!(std::fs::read(&path).unwrap(), data);
        }
    }

    #[test]
    fn refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, b"keep").unwrap();
        assert!(DirectFile::create(&path, true, ALIGN).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"keep");
    }

    /// A thread's next file takes the buffer its last one dropped (no fresh memory to fault
    /// in), and none of the old file's bytes reach the new one, padding included.
    #[test]
    fn the_next_file_reuses_the_buffer_and_none_of_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        prepare_buffer(3 * ALIGN - 5);
        let mut first = DirectFile::create(&dir.path().join("a"), true, 3 * ALIGN).unwrap();
        let prepared = first.buf.ptr;
        first.append(&[0xAA; 3 * ALIGN - 10]).unwrap();
        let used = first.buf.ptr;
        assert_eq!(first.finish().unwrap(), 3 * ALIGN as u64 - 10);
        for direct in [true, false] {
            let path = dir.path().join(format!("b{direct}"));
            let mut next = DirectFile::create(&path, direct, 3 * ALIGN).unwrap();
            assert_eq!(prepared, used);
            assert_eq!(next.buf.ptr, used);
            next.append(b"ten bytes!").unwrap();
            next.flush().unwrap();
            let on_disk = std::fs::read(&path).unwrap();
            assert_eq!(&on_disk[..10], b"ten bytes!");
            assert!(on_disk[10..].iter().all(|&b| b == 0), "padding is zeros");
            assert_eq!(next.finish().unwrap(), 10);
            assert_eq!(std::fs::read(&path).unwrap(), b"ten bytes!");
        }
        // Another size frees the spare and allocates afresh.
        let other = DirectFile::create(&dir.path().join("c"), true, ALIGN).unwrap();
        assert_eq!(other.buf.cap, ALIGN);
    }
}
