//! The staging pool: one large, preallocated, page-aligned region, locked in memory where
//! the system allows, cut into fixed-size segments. The capture loop fills a segment with
//! encoded records and hands it on; the segment comes back to the free list only when its
//! chunk is in the writer's hands, so the pool's fill level is the whole pipeline's backlog.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};

/// Bytes faulted in per step of the prefault thread: one huge page. The kernel holds the
/// process's memory-map lock through a step, and a thread that maps memory (a new thread's
/// stack, a large allocation) waits for it; a step must stay short even when the nice-19
/// prefault thread is preempted inside it on a busy machine.
const PREFAULT_STEP: usize = 2 << 20;

/// The pool's memory as the prefault thread sees it.
struct Region(*mut u8, usize);
// SAFETY: the prefault thread only passes the address to madvise (and mlock).
unsafe impl Send for Region {}

impl Region {
    // Taking `self` whole makes a closure capture the Region, not its raw pointer field.
    fn into_parts(self) -> (*mut u8, usize) {
        (self.0, self.1)
    }
}

/// Segments are page-aligned so that O_DIRECT could write them as they are.
const ALIGN: usize = 4096;

pub struct StagingPool {
    base: *mut u8,
    len: usize,
    segment_size: usize,
    segments: usize,
    free_tx: Sender<u32>,
    free_rx: Receiver<u32>,
    in_use: AtomicUsize,
    awaiting_compression: AtomicUsize,
    /// Bytes of the segments returned so far (see [`StagingPool::drained_bytes`]).
    drained: AtomicU64,
    locked: Arc<AtomicBool>,
    prefault_stop: Arc<AtomicBool>,
    prefault: Mutex<Option<std::thread::JoinHandle<()>>>,
}

// SAFETY: the raw `base` is the only non-thread-safe field. The region behind it is only
// reached through `Segment`, which owns its index exclusively, so moving the pool to another
// thread moves no access with it...
unsafe impl Send for StagingPool {}
// SAFETY: ...and sharing the pool shares only the free list and counters (channels and
// atomics); no two threads ever hold the same segment.
unsafe impl Sync for StagingPool {}

impl StagingPool {
    /// Maps `total` bytes (rounded down to whole segments, at least two). The region is
    /// backed by huge pages where the kernel allows, and locked in memory page by page as it
    /// is first touched; [`StagingPool::start_prefault`] then faults it in from a background
    /// thread, so that startup does not wait for gigabytes of page zeroing and the capture
    /// loop rarely takes a page fault.
    pub fn new(total: usize, segment_size: usize) -> std::io::Result<Arc<StagingPool>> {
        let segment_size = segment_size.div_ceil(ALIGN) * ALIGN;
        let segments = (total / segment_size).max(2);
        let len = segments * segment_size;
        // SAFETY: anonymous private mapping; checked for MAP_FAILED below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: advice on the range just mapped; refusal only costs speed.
        unsafe { libc::madvise(base, len, libc::MADV_HUGEPAGE) };
        // Locked on fault: one quick call that faults nothing in. It may be refused
        // (RLIMIT_MEMLOCK): the pool still works, only without the guarantee that it is
        // never swapped out. Where mlock2 is missing (valgrind), the prefault thread locks.
        // SAFETY: the range just mapped.
        let locked = unsafe { libc::mlock2(base, len, libc::MLOCK_ONFAULT) } == 0;
        let (free_tx, free_rx) = crossbeam_channel::bounded(segments);
        for i in 0..segments as u32 {
            free_tx.send(i).expect("free list sized for every segment");
        }
        Ok(Arc::new(StagingPool {
            base: base as *mut u8,
            len,
            segment_size,
            segments,
            free_tx,
            free_rx,
            in_use: AtomicUsize::new(0),
            awaiting_compression: AtomicUsize::new(0),
            drained: AtomicU64::new(0),
            locked: Arc::new(AtomicBool::new(locked)),
            prefault_stop: Arc::new(AtomicBool::new(false)),
            prefault: Mutex::new(None),
        }))
    }

    /// Faults the whole pool in from a background thread at nice 19, in segment order (the
    /// order the free list first hands segments out), one short step at a time, so that a
    /// short run is not kept waiting at exit. The recorder starts it once its own threads
    /// are running: each was given a stack by mapping memory, which waits for a step.
    pub fn start_prefault(&self) -> std::io::Result<()> {
        let mut slot = self.prefault.lock().unwrap();
        if slot.is_some() {
            return Ok(());
        }
        let region = Region(self.base, self.len);
        let stop = Arc::clone(&self.prefault_stop);
        let locked = Arc::clone(&self.locked);
        let lock_each_step = !self.locked();
        *slot = Some(
            std::thread::Builder::new()
                .name("staging-prefault".into())
                .spawn(move || {
                    let (base, len) = region.into_parts();
                    // Zeroing gigabytes is work for a spare core, never the capture thread's.
                    crate::os::set_nice(19);
                    let mut each_locked = lock_each_step;
                    for start in (0..len).step_by(PREFAULT_STEP) {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let n = PREFAULT_STEP.min(len - start);
                        // SAFETY: inside the mapping, which outlives this thread (Drop joins
                        // it). Neither call changes a page's contents, so segments in use are
                        // safe. mlock faults in and locks; MADV_POPULATE_WRITE (Linux 5.14)
                        // faults in, into a range locked on fault.
                        unsafe {
                            let at = base.add(start) as *mut libc::c_void;
                            let locked_here = lock_each_step && libc::mlock(at, n) == 0;
                            each_locked &= locked_here;
                            // mlock faulted it in; else populate (Linux 5.14), and on an
                            // older kernel fault in by mlock, unless it was just refused.
                            if !locked_here
                                && libc::madvise(at, n, libc::MADV_POPULATE_WRITE) != 0
                                && !lock_each_step
                            {
                                libc::mlock(at, n);
                            }
                        }
                    }
                    if lock_each_step {
                        locked.store(each_locked, Ordering::Relaxed);
                    }
                })?,
        );
        Ok(())
    }

    /// Whether the pool is locked in memory (each page as it is faulted in; where that
    /// cannot be asked for, known once the prefault thread has finished).
    pub fn locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }

    pub fn segment_size(&self) -> usize {
        self.segment_size
    }

    pub fn segments(&self) -> usize {
        self.segments
    }

    pub fn bytes(&self) -> usize {
        self.len
    }

    /// Fraction of segments not free: filled, being compressed, or waiting for the disk.
    pub fn fill(&self) -> f64 {
        self.in_use.load(Ordering::Relaxed) as f64 / self.segments as f64
    }

    /// Filled bytes of every segment that came back to the free list (its chunk written,
    /// or dropped): the pool's drain as a counter, whose rate is what the pipeline behind
    /// it takes.
    pub fn drained_bytes(&self) -> u64 {
        self.drained.load(Ordering::Relaxed)
    }

    /// Fraction of segments waiting for (or in) a compressor: the backlog the codec ladder
    /// answers. A backlog at the disk is not counted: a cheaper codec would only make it
    /// worse, so while the compressors keep up they keep compressing.
    pub fn compression_backlog(&self) -> f64 {
        self.awaiting_compression.load(Ordering::Relaxed) as f64 / self.segments as f64
    }

    /// Segments waiting for (or in) a compressor.
    pub fn awaiting_compression(&self) -> usize {
        self.awaiting_compression.load(Ordering::Relaxed)
    }

    /// A segment was queued for compression (`true`) or left the compressor (`false`).
    pub fn note_compression(&self, queued: bool) {
        if queued {
            self.awaiting_compression.fetch_add(1, Ordering::Relaxed);
        } else {
            self.awaiting_compression.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether a segment is likely free (racy, but never wrong for long).
    #[inline]
    pub fn has_free(&self) -> bool {
        self.in_use.load(Ordering::Relaxed) < self.segments
    }

    /// A free segment, waiting up to `timeout` for one (for sources that can wait).
    pub fn take_waiting(self: &Arc<Self>, timeout: std::time::Duration) -> Option<Segment> {
        let index = self.free_rx.recv_timeout(timeout).ok()?;
        self.in_use.fetch_add(1, Ordering::Relaxed);
        Some(Segment {
            pool: Arc::clone(self),
            index,
            len: 0,
        })
    }

    /// A free segment, or `None` at once when there is none: the caller drops and counts.
    #[inline]
    pub fn try_take(self: &Arc<Self>) -> Option<Segment> {
        let index = self.free_rx.try_recv().ok()?;
        self.in_use.fetch_add(1, Ordering::Relaxed);
        Some(Segment {
            pool: Arc::clone(self),
            index,
            len: 0,
        })
    }
}

impl Drop for StagingPool {
    fn drop(&mut self) {
        self.prefault_stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.prefault.lock().unwrap().take() {
            let _ = h.join();
        }
        // SAFETY: every Segment holds an Arc to the pool, so none outlives this mapping.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Exclusive use of one segment of the pool; returns itself to the free list when dropped.
pub struct Segment {
    pool: Arc<StagingPool>,
    index: u32,
    /// Bytes filled so far.
    len: usize,
}

impl Segment {
    #[inline]
    fn region(&self) -> *mut u8 {
        // SAFETY: index < segments, so the offset stays inside the mapping.
        unsafe {
            self.pool
                .base
                .add(self.index as usize * self.pool.segment_size)
        }
    }

    pub fn capacity(&self) -> usize {
        self.pool.segment_size
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn room(&self) -> usize {
        self.pool.segment_size - self.len
    }

    /// The unfilled part, to encode the next record into; follow with [`Segment::advance`].
    #[inline]
    pub fn spare_mut(&mut self) -> &mut [u8] {
        // SAFETY: this Segment is the only holder of its index, so the range is ours; it lies
        // inside the mapping because `len <= segment_size` (`advance` enforces it); and every
        // byte is initialised, as the mapping is anonymous (zero-filled) and is only ever
        // written with bytes.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.region().add(self.len),
                self.pool.segment_size - self.len,
            )
        }
    }

    /// Marks `n` more bytes of [`Segment::spare_mut`] as filled. Checked in release builds
    /// too: `spare_mut` and `data` build slices from `len`, so it must never pass the segment.
    #[inline]
    pub fn advance(&mut self, n: usize) {
        assert!(
            n <= self.room(),
            "advance({n}) past the segment's {} free bytes",
            self.room()
        );
        self.len += n;
    }

    /// The filled part.
    pub fn data(&self) -> &[u8] {
        // SAFETY: as for `spare_mut`; the first `len` bytes were written by the filler.
        unsafe { std::slice::from_raw_parts(self.region(), self.len) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.pool
            .drained
            .fetch_add(self.len as u64, Ordering::Relaxed);
        self.pool.in_use.fetch_sub(1, Ordering::Relaxed);
        // The free list has room for every segment, so this never blocks.
        let _ = self.pool.free_tx.try_send(self.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `spare_mut` and `data` build slices from `len`: advancing past the segment must stop
    /// there (in release builds too), not hand out memory beyond the mapping. A reused
    /// segment starts empty, its earlier bytes still initialised.
    #[test]
    fn a_segment_cannot_be_advanced_past_its_end() {
        let pool = StagingPool::new(2 * 4096, 4096).unwrap();
        let mut a = pool.try_take().unwrap();
        a.spare_mut().fill(0xAB);
        a.advance(4096);
        assert_eq!(
            (a.room(), a.spare_mut().len(), a.data().len()),
            (0, 0, 4096)
        );
        let past = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.advance(1)));
        assert!(past.is_err(), "advance past the end must panic");
        assert_eq!(a.data().len(), 4096);
        drop(a);
        let (mut b, mut c) = (pool.try_take().unwrap(), pool.try_take().unwrap());
        assert!(b.is_empty() && c.is_empty());
        // One of them is the reused segment: its spare bytes are readable as they are.
        let sum = |s: &mut Segment| s.spare_mut().iter().map(|&x| u64::from(x)).sum::<u64>();
        assert_eq!(sum(&mut b) + sum(&mut c), 4096 * 0xAB);
    }

    #[test]
    fn segments_are_exclusive_aligned_and_come_back() {
        let pool = StagingPool::new(3 * 8192, 8000).unwrap();
        assert_eq!(pool.segment_size(), 8192);
        assert_eq!(pool.segments(), 3);
        let mut a = pool.try_take().unwrap();
        let b = pool.try_take().unwrap();
        let c = pool.try_take().unwrap();
        assert!(pool.try_take().is_none(), "a full pool refuses at once");
        assert_eq!(pool.fill(), 1.0);
        assert_eq!(a.data().as_ptr() as usize % ALIGN, 0);
        a.spare_mut()[..5].copy_from_slice(b"hello");
        a.advance(5);
        assert_eq!(a.data(), b"hello");
        assert_eq!(a.room(), 8192 - 5);
        drop(b);
        let d = pool.try_take().unwrap();
        assert!(d.is_empty());
        drop((a, c, d));
        assert_eq!(pool.fill(), 0.0);
        assert_eq!(pool.drained_bytes(), 5, "what came back filled");
    }

    /// The prefault thread faults every page in without changing what a segment in use
    /// holds (it populates; it never writes), and as root the pages are locked as they come.
    #[test]
    fn prefaulting_fills_the_pool_in_and_leaves_segments_in_use_as_they_are() {
        let len = 16 << 20;
        let pool = StagingPool::new(len, 1 << 20).unwrap();
        let mut a = pool.try_take().unwrap();
        a.spare_mut()[..5].copy_from_slice(b"hello");
        a.advance(5);
        let page = 4096;
        let resident = |pool: &StagingPool| {
            let mut map = vec![0u8; len / page];
            // SAFETY: the pool's own mapping, and a vector of one byte per page.
            let r = unsafe { libc::mincore(pool.base.cast(), len, map.as_mut_ptr()) };
            assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
            map.iter().filter(|&&b| b & 1 == 1).count() * page
        };
        assert!(
            resident(&pool) < len,
            "only what was written is in before the prefault"
        );
        pool.start_prefault().unwrap();
        pool.start_prefault().unwrap(); // a second call starts nothing more
        let handle = pool.prefault.lock().unwrap().take().unwrap();
        handle.join().unwrap();
        assert_eq!(resident(&pool), len, "every page faulted in");
        assert_eq!(a.data(), b"hello", "a segment in use keeps its bytes");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert!(pool.locked());
            // Every mapping over the pool's range carries the locked flag. Locking may split
            // the pool's mapping, and the kernel may merge it with a neighbour locked the
            // same way (another test's pool), so byte counts per mapping say nothing: the
            // flag does, and `mincore` above says the pages are in.
            let (lo, hi) = (pool.base as usize, pool.base as usize + len);
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let (mut covered, mut over) = (0usize, false);
            for line in smaps.lines() {
                let header = line
                    .split_whitespace()
                    .next()
                    .and_then(|r| r.split_once('-'));
                let range = header.and_then(|(a, b)| {
                    Some((
                        usize::from_str_radix(a, 16).ok()?,
                        usize::from_str_radix(b, 16).ok()?,
                    ))
                });
                if let Some((a, b)) = range {
                    over = a < hi && b > lo;
                    if over {
                        covered += b.min(hi) - a.max(lo);
                    }
                } else if let Some(flags) = line.strip_prefix("VmFlags:").filter(|_| over) {
                    assert!(
                        flags.split_whitespace().any(|f| f == "lo"),
                        "a mapping over the pool is not locked: {flags}"
                    );
                }
            }
            assert_eq!(covered, len, "the mappings found cover the pool");
        }
    }
}
