//! What flows between the recorder's threads: capture loop → compressors → writer.
//!
//! Every item of a stream carries a sequence number. File opens and closes, and chunks to
//! be stored raw, go from the capture loop straight to the stream's writer; chunks to be
//! compressed go through the compressor pool, which finishes them out of order. The writer
//! puts everything back in sequence before acting on it (`crate::sequencer`).
//!
//! A chunk goes to the compressors as a [`Job`], and its writer gets a ticket to the same
//! job ([`Done::Queued`]). When the compressors are late (starved of CPU by other
//! processes), the writer takes the chunk and stores it raw rather than idle; a compressor
//! that gets to it after skips it, or its frame is thrown away.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tapdeck_pcap::container::Codec;
use tapdeck_pcap::Interface;

use crate::controller::{Decision, SharedController};
use crate::staging::{Segment, StagingPool};
use crate::stats::CaptureCounts;

/// How files are cut.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rotation {
    /// Capture bytes (before compression) after which a new file starts.
    pub max_bytes: Option<u64>,
    /// Interval in nanoseconds; files are cut at multiples of it since the epoch.
    pub interval_ns: Option<u64>,
}

impl Rotation {
    /// The next interval boundary strictly after `ts`, or never.
    pub fn boundary_after(&self, ts: u64) -> u64 {
        match self.interval_ns {
            Some(i) if i > 0 => (ts / i).saturating_add(1).saturating_mul(i),
            _ => u64::MAX,
        }
    }
}

/// One stream's staging pool and the ladder controller that picks its chunks' codecs:
/// shared by its capture loop, the compressors, its writer and the live view.
#[derive(Clone)]
pub struct StreamStaging {
    pub pool: Arc<StagingPool>,
    pub controller: Arc<SharedController>,
}

pub struct Sequenced<T> {
    pub stream: u32,
    pub seq: u64,
    pub item: T,
}

/// Start a new file whose first packet has this timestamp.
pub struct OpenFile {
    pub first_ts_ns: u64,
    pub interfaces: Vec<Interface>,
}

/// A filled segment: whole records, ready to compress.
pub struct Chunk {
    /// Shared by a compressor and the writer's ticket while the chunk is with the
    /// compressors; back to the pool when both let go.
    pub segment: Arc<Segment>,
    pub min_ts_ns: u64,
    pub max_ts_ns: u64,
    pub packets: u32,
    /// Packets per interface, for counting them as stored or lost.
    pub per_iface: Vec<u32>,
    /// The source waits for the recorder (a file), so there is no backlog to shed: use
    /// the strongest codec of the ladder rather than the one the pool's fill calls for.
    pub source_waits: bool,
    /// The codec chosen for it and why (a compressor may still choose a cheaper one).
    pub decision: Decision,
    /// Link type of each interface of the stream, for the flow index.
    pub linktypes: Arc<[u16]>,
    /// The chunk's flow index (`crate::chunk_filter`), once built; empty before.
    pub flows: Box<crate::chunk_filter::ChunkFlows>,
}

impl Chunk {
    /// A copy sharing the segment, without flows (see [`Job`]).
    fn ticket(&self) -> Chunk {
        Chunk {
            segment: Arc::clone(&self.segment),
            min_ts_ns: self.min_ts_ns,
            max_ts_ns: self.max_ts_ns,
            packets: self.packets,
            per_iface: self.per_iface.clone(),
            source_waits: self.source_waits,
            decision: self.decision,
            linktypes: Arc::clone(&self.linktypes),
            flows: Default::default(),
        }
    }
}

/// A chunk on its way to the compressors. Its writer holds a ticket to it (the same
/// `Arc`), and whichever comes first has it: a compressor, or the writer, raw, when the
/// compressors are late. A chunk the writer takes before any compressor starts it is the
/// writer's alone (its segment goes back to the pool once written, whatever the
/// compressors' queue holds); one a compressor has started is shared, and the compressor's
/// frame is thrown away when it comes.
pub struct Job {
    /// The chunk's bytes, the codec planned for it and whether its source waits: what the
    /// writer needs to judge whether the compressors are late.
    pub bytes: usize,
    pub decision: Decision,
    pub source_waits: bool,
    slot: Mutex<Slot>,
}

enum Slot {
    /// No compressor has started: the chunk itself.
    Queued(Chunk),
    /// A compressor works on it: a copy sharing its segment, for the writer.
    Compressing(Chunk),
    Taken,
}

impl Job {
    pub fn new(chunk: Chunk) -> Arc<Job> {
        Arc::new(Job {
            bytes: chunk.segment.data().len(),
            decision: chunk.decision,
            source_waits: chunk.source_waits,
            slot: Mutex::new(Slot::Queued(chunk)),
        })
    }

    /// A compressor starts on the chunk and gets it, leaving a copy for the writer; `None`
    /// when the writer has taken it.
    pub fn start(&self) -> Option<Chunk> {
        let mut slot = self.slot.lock().unwrap();
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Queued(chunk) => {
                *slot = Slot::Compressing(chunk.ticket());
                Some(chunk)
            }
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Whether a compressor has started on the chunk.
    pub fn started(&self) -> bool {
        matches!(*self.slot.lock().unwrap(), Slot::Compressing(_))
    }

    /// The writer takes the chunk, to store it raw: the chunk itself, or the copy a
    /// compressor left. `None` only if taken before.
    pub fn take(&self) -> Option<Chunk> {
        match std::mem::replace(&mut *self.slot.lock().unwrap(), Slot::Taken) {
            Slot::Queued(chunk) | Slot::Compressing(chunk) => Some(chunk),
            Slot::Taken => None,
        }
    }
}

/// Finish the current file; the counters go into its statistics block.
pub struct CloseFile {
    pub capture: Vec<CaptureCounts>,
    pub out_of_order: u64,
}

/// How a compressor left a chunk.
pub enum Encoded {
    Frame {
        bytes: FrameBuf,
        codec: Codec,
    },
    /// Store as is: the writer frames the segment's bytes while copying them out.
    Raw,
}

pub enum Done {
    Open(OpenFile),
    Chunk(Chunk, Encoded),
    Close(CloseFile),
    /// The writer's ticket to a chunk sent to the compressors, with its sequence number:
    /// the writer stores the chunk raw if they are late.
    Queued(Arc<Job>),
}

/// Shared controls: stop, rotate-now (SIGHUP), new rotation limits, the first fatal
/// error. Observers read a running recorder through its `LiveView` (`Running::live`).
#[derive(Default)]
pub struct Control {
    pub stop: AtomicBool,
    /// Bumped to ask every stream to start a new file.
    pub rotate: AtomicU64,
    /// New rotation limits for every stream (taken by each capture loop when
    /// `reconfigured` changes).
    pub rotation: Mutex<Option<Rotation>>,
    pub reconfigured: AtomicU64,
    pub fatal: Mutex<Option<String>>,
}

impl Control {
    /// Records the first fatal error (later ones are consequences) and stops recording.
    pub fn fail(&self, why: String) {
        let mut fatal = self.fatal.lock().unwrap();
        if fatal.is_none() {
            tracing::error!("{why}");
            *fatal = Some(why);
        }
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Asks every stream to cut files by these limits from now on (the current file too).
    pub fn set_rotation(&self, rotation: Rotation) {
        *self.rotation.lock().unwrap() = Some(rotation);
        self.reconfigured.fetch_add(1, Ordering::SeqCst);
    }
}

/// Output buffers for compressed frames, recycled from the writers back to the compressors.
/// A buffer fresh from the allocator costs page faults, and on our VMs a fault on a huge page
/// took up to 11 ms (the kernel compacting memory for it): three times the chunk's
/// compression. Recycled, a buffer faults once; the first few are touched before capture
/// starts.
pub struct FrameBuffers {
    free: Mutex<Vec<Vec<u8>>>,
    /// Buffers kept at most: one per chunk that can be in flight.
    keep: usize,
    /// Bytes each buffer holds: the largest frame of a chunk, so that none ever grows (a
    /// grown buffer is fresh memory again).
    capacity: usize,
}

impl FrameBuffers {
    pub fn new(keep: usize, capacity: usize) -> Arc<FrameBuffers> {
        Arc::new(FrameBuffers {
            free: Mutex::new(Vec::new()),
            keep,
            capacity,
        })
    }

    /// An empty buffer of the pool's capacity, recycled if one is free.
    pub fn take(self: &Arc<Self>) -> FrameBuf {
        let mut bytes = self.free.lock().unwrap().pop().unwrap_or_default();
        bytes.reserve_exact(self.capacity);
        FrameBuf {
            bytes,
            home: Some(Arc::clone(self)),
        }
    }

    /// Adds a buffer with every page written, so that it never faults.
    pub fn add_touched(&self) {
        self.put(vec![1u8; self.capacity]);
    }

    fn put(&self, mut bytes: Vec<u8>) {
        let mut free = self.free.lock().unwrap();
        if free.len() < self.keep {
            bytes.clear();
            free.push(bytes);
        }
    }

    /// Buffers free now.
    pub fn free(&self) -> usize {
        self.free.lock().unwrap().len()
    }
}

/// A compressed frame's bytes; back to its [`FrameBuffers`] when dropped.
pub struct FrameBuf {
    bytes: Vec<u8>,
    home: Option<Arc<FrameBuffers>>,
}

impl std::ops::Deref for FrameBuf {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.bytes
    }
}

impl std::ops::DerefMut for FrameBuf {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }
}

impl Drop for FrameBuf {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            home.put(std::mem::take(&mut self.bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dropped frame's buffer comes back, capacity and all, emptied; beyond `keep` it is
    /// freed instead.
    #[test]
    fn frame_buffers_come_back_when_frames_are_dropped() {
        let pool = FrameBuffers::new(2, 1 << 16);
        pool.add_touched();
        assert_eq!(pool.free(), 1);
        let mut a = pool.take();
        assert_eq!((a.len(), a.capacity() >= 1 << 16), (0, true));
        a.extend_from_slice(b"frame");
        let (b, c) = (pool.take(), pool.take());
        assert!(
            c.capacity() >= 1 << 16,
            "a new buffer is made as large as a recycled one"
        );
        assert_eq!(pool.free(), 0);
        drop(a);
        let again = pool.take();
        assert_eq!((again.len(), again.capacity() >= 1 << 16), (0, true));
        drop((again, b, c));
        assert_eq!(pool.free(), 2, "kept up to `keep`, the third one freed");
    }
}
