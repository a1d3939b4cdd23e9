//! The writer of one stream: puts compressed chunks back in order and lays them down as
//! files — header frame, chunk frames, statistics frame, chunk index, seek table — written
//! under a hidden name and renamed when complete. Data directories are used round-robin;
//! one that fails is reported and skipped, and the chunk goes to the next.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::Receiver;
use tapdeck_pcap::container::{
    raw_frame_pieces, ChunkEntry, ChunkIndex, Codec, Container, FrameKind,
};
use tapdeck_pcap::{Format, Interface, InterfaceStats, SectionInfo};

use crate::chunk_filter::{self, ChunkFlows, FileSummary};
use crate::controller::{Reason, SharedController};
use crate::direct::DirectFile;
use crate::pipeline::{Chunk, CloseFile, Control, Done, Encoded, Job, OpenFile, Sequenced};
use crate::retention::Retention;
use crate::sequencer::{Next, Sequencer};
use crate::stats::{StatsHub, WriterCounts};
use tapdeck_store::catalog;
use tapdeck_store::finalize::finalize;
use tapdeck_store::meta::{self, DataName, FileMeta, InterfaceMeta};

/// How long a data directory that failed (a full disk, an I/O error, a directory that
/// went away) rests before a writer tries it again. Meanwhile its chunks go to another
/// directory, or are dropped and counted as write errors when none is usable.
pub const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(2);
/// A failed directory is probed with this much (about a chunk's write would need more,
/// but a directory that takes this takes writes again).
const PROBE_BYTES: usize = 64 * 1024;

/// The data directories of a store, shared by every stream's writer.
pub struct DataDirs {
    pub paths: Vec<PathBuf>,
    /// Per directory: `None` while healthy; when it failed, when (for the log) and when it
    /// may be tried again.
    failed: Vec<std::sync::Mutex<Option<Failure>>>,
    next: AtomicUsize,
}

#[derive(Clone, Copy)]
struct Failure {
    since: std::time::Instant,
    retry_at: std::time::Instant,
}

impl DataDirs {
    pub fn new(paths: Vec<PathBuf>) -> DataDirs {
        let failed = paths.iter().map(|_| Default::default()).collect();
        DataDirs {
            paths,
            failed,
            next: AtomicUsize::new(0),
        }
    }

    /// The next healthy directory in round-robin order, else one whose rest is over.
    fn pick(&self) -> Option<usize> {
        let n = self.paths.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let order = (0..n).map(|k| (start + k) % n);
        let now = std::time::Instant::now();
        let state = |i: usize| *self.failed[i].lock().unwrap();
        order.clone().find(|&i| state(i).is_none()).or_else(|| {
            order
                .into_iter()
                .find(|&i| state(i).is_some_and(|f| f.retry_at <= now))
        })
    }

    /// Marks a directory failed (logged once per episode) and sets its next try.
    fn fail(&self, i: usize, why: &str) {
        let now = std::time::Instant::now();
        let mut f = self.failed[i].lock().unwrap();
        if f.is_none() {
            tracing::error!(
                "data directory {}: {why}; trying it again every {} s (meanwhile packets go to another directory, or are dropped and counted as write errors)",
                self.paths[i].display(),
                RETRY_AFTER.as_secs()
            );
        }
        *f = Some(Failure {
            since: f.map_or(now, |f| f.since),
            retry_at: now + RETRY_AFTER,
        });
    }

    /// Per directory: is it in a failure episode now?
    pub fn failing(&self) -> Vec<bool> {
        self.failed
            .iter()
            .map(|f| f.lock().unwrap().is_some())
            .collect()
    }

    /// Tries every failed directory whose rest is over with a small probe file; true if
    /// one takes writes again (its episode ends, and is logged as such).
    pub fn probe_failed(&self, stream: u32) -> bool {
        let now = std::time::Instant::now();
        let mut recovered = false;
        for i in 0..self.paths.len() {
            let due = self.failed[i]
                .lock()
                .unwrap()
                .is_some_and(|f| f.retry_at <= now);
            if !due {
                continue;
            }
            let probe =
                self.paths[i].join(format!(".tapdeck-probe-{}-{stream}", std::process::id()));
            let wrote = std::fs::write(&probe, [0u8; PROBE_BYTES]);
            let _ = std::fs::remove_file(&probe);
            match wrote {
                Ok(()) => {
                    self.succeeded(i);
                    recovered = true;
                }
                Err(e) => self.fail(i, &format!("a probe write failed: {e}")),
            }
        }
        recovered
    }

    /// A write to the directory succeeded: ends its failure episode, if it had one.
    fn succeeded(&self, i: usize) {
        let mut f = self.failed[i].lock().unwrap();
        if let Some(failure) = f.take() {
            tracing::warn!(
                "data directory {} is writable again after {:.1} s",
                self.paths[i].display(),
                failure.since.elapsed().as_secs_f64()
            );
        }
    }
}

pub struct WriterConfig {
    pub stream: u32,
    pub format: Format,
    pub container: Container,
    pub direct: bool,
    /// Index the flows of raw chunks the compressors did not see (`crate::flows`).
    pub flow_index: bool,
    pub write_buffer: usize,
    pub section: SectionInfo,
    /// Write nothing: every chunk is counted as if stored, no file is created. Isolates
    /// the pipeline from the disk in benchmarks (the papers' "drop all" runs).
    pub discard: bool,
    /// Benchmarks only: write at most this many bytes per second, as a slower disk would
    /// (our machines have no cgroup io.max).
    pub disk_limit: Option<u64>,
    /// Sync the open file's data (`fdatasync`) at most this often while it holds packets
    /// not yet synced, so they are counted `durable` without waiting for the file to be
    /// finished (which syncs it). `None`: only finished files are synced.
    pub sync_interval: Option<std::time::Duration>,
    /// Sequence number of this stream's first file: one past the store's highest, so a
    /// second run into a store never reuses a name.
    pub first_seq: u64,
    /// When this run started: written into each file's metadata (see `FileMeta`).
    pub run_started_ns: u64,
    /// The store's root, whose catalog gets an entry for each file finished
    /// (`tapdeck_store::catalog`); `None`: no catalog (benchmarks that discard).
    pub catalog_root: Option<PathBuf>,
}

/// Bytes a store catalog may grow by past twice its compacted size before it is compacted.
const COMPACT_CATALOG_SLACK: u64 = 64 << 10;

/// A benchmark's slow disk: after each chunk the writer sleeps until the disk would have
/// taken its bytes at the set rate. The time the real write took counts towards it, up to
/// `THROTTLE_CREDIT`: charging the rate's time after the write's own (as this did before)
/// held a 400 MB/s limit on a 1.5 GB/s disk to 310 MB/s, and passed on every stall of the
/// real disk and every late wake-up, so that runs of one choice differed by 10 %.
///
/// Time the writer spent idle (waiting for a chunk) earns no credit: a slow disk takes each
/// write at its speed however long it idled before. With credit for idling, the first 40 MB
/// of a recording, and any write while the writer had less to write than the rate, went at
/// the real disk's 10 GB/s, and the ladder's controller, measuring the disk on them, sent a
/// full pool's worth of raw copies to a disk that compressed data alone kept busy.
struct DiskThrottle {
    bytes_per_s: f64,
    free_at: std::time::Instant,
    /// When the last write's sleep ended: a write that starts later than `BACK_TO_BACK`
    /// after it follows an idle spell.
    done_at: std::time::Instant,
}

/// The most time a throttled disk may be owed (the bucket's depth): a write that started
/// late, or took long, is made up for within this.
const THROTTLE_CREDIT: std::time::Duration = std::time::Duration::from_millis(50);
/// A write that starts within this of the last one's end is the next of a run of writes
/// (the writer's own work between two chunks), not one after an idle spell.
const BACK_TO_BACK: std::time::Duration = std::time::Duration::from_millis(2);

impl DiskThrottle {
    fn new(bytes_per_s: f64, now: std::time::Instant) -> DiskThrottle {
        DiskThrottle {
            bytes_per_s,
            free_at: now,
            done_at: now,
        }
    }

    /// After writing `bytes` in a write that began at `started`.
    fn take(&mut self, started: std::time::Instant, bytes: usize) {
        let wait = self.wait(started, std::time::Instant::now(), bytes);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }

    /// How long to sleep at `now` after writing `bytes` in a write that began at `started`.
    fn wait(
        &mut self,
        started: std::time::Instant,
        now: std::time::Instant,
        bytes: usize,
    ) -> std::time::Duration {
        let start = if started > self.done_at + BACK_TO_BACK {
            started.max(self.free_at)
        } else {
            let earliest = now.checked_sub(THROTTLE_CREDIT).unwrap_or(now);
            self.free_at.max(earliest)
        };
        self.free_at = start + std::time::Duration::from_secs_f64(bytes as f64 / self.bytes_per_s);
        let wait = self.free_at.saturating_duration_since(now);
        self.done_at = now + wait;
        wait
    }
}

/// What a frame holds, for its chunk index entry: what kind of frame, its codec, the
/// capture bytes it decodes to, and its packets and their time range.
#[derive(Clone, Copy)]
struct FrameContent {
    kind: FrameKind,
    codec: Codec,
    data_len: usize,
    packets: u32,
    min_ts_ns: u64,
    max_ts_ns: u64,
}

impl FrameContent {
    /// A raw frame of no packets (a file's header, its statistics blocks).
    fn no_packets(kind: FrameKind, data_len: usize) -> FrameContent {
        FrameContent {
            kind,
            codec: Codec::Raw,
            data_len,
            packets: 0,
            min_ts_ns: 0,
            max_ts_ns: 0,
        }
    }
}

struct CurrentFile {
    dir: usize,
    partial: PathBuf,
    name: String,
    out: DirectFile,
    entries: Vec<ChunkEntry>,
    /// The flow index of each entry (empty for header and statistics frames).
    flows: Vec<Vec<u8>>,
    /// The file's summary, gathered from its chunks' flow indexes as they are written.
    summary: FileSummary,
    data_len: u64,
    first_ts_ns: u64,
    min_ts_ns: u64,
    max_ts_ns: u64,
    packets: u64,
    /// Chunks counted as stored whose frames the kernel has not taken yet (still in the
    /// write buffer), with where each frame ends. They keep their staging segments until
    /// then: if the file must be abandoned, they are written again elsewhere.
    unconfirmed: std::collections::VecDeque<(u64, Chunk, Encoded)>,
    /// Packet frame bytes appended, as retention counts the open file (`open_grew`).
    counted_bytes: u64,
    /// Chunks stored in this file and not yet synced: where each frame ends, and its
    /// packets per interface (counted `durable` once synced).
    unsynced: std::collections::VecDeque<(u64, Vec<u32>)>,
    /// The directory has been synced since the file was created (its name survives).
    dir_synced: bool,
}

pub struct StreamWriter {
    cfg: WriterConfig,
    dirs: Arc<DataDirs>,
    retention: Arc<Retention>,
    stats: Arc<StatsHub>,
    control: Arc<Control>,
    interfaces: Vec<Interface>,
    current: Option<CurrentFile>,
    /// Sequence number of the next file of this stream.
    file_seq: u64,
    counts: Vec<WriterCounts>,
    warned_buffered: bool,
    warned_catalog: bool,
    /// The store catalog's size when this writer last compacted it.
    catalog_compacted: u64,
    /// Told how long each chunk took to write: the disk's speed as the ladder sees it.
    controller: Option<Arc<SharedController>>,
    throttle: Option<DiskThrottle>,
    /// Partial files given up when their directory failed, with their directory: finalized
    /// when it takes writes again.
    abandoned: Vec<(usize, PathBuf)>,
    /// Chunks of the file just abandoned that never reached it, for `rewrite_lost`.
    lost: Vec<(Chunk, Encoded)>,
    /// When the open file was last synced (see `WriterConfig::sync_interval`).
    last_sync: std::time::Instant,
}

impl StreamWriter {
    pub fn new(
        cfg: WriterConfig,
        dirs: Arc<DataDirs>,
        retention: Arc<Retention>,
        stats: Arc<StatsHub>,
        control: Arc<Control>,
    ) -> StreamWriter {
        let throttle = cfg
            .disk_limit
            .map(|rate| DiskThrottle::new(rate.max(1) as f64, std::time::Instant::now()));
        StreamWriter {
            throttle,
            file_seq: cfg.first_seq,
            cfg,
            dirs,
            retention,
            stats,
            control,
            interfaces: Vec::new(),
            current: None,
            counts: Vec::new(),
            warned_buffered: false,
            warned_catalog: false,
            catalog_compacted: 0,
            controller: None,
            abandoned: Vec::new(),
            lost: Vec::new(),
            last_sync: std::time::Instant::now(),
        }
    }

    pub fn with_controller(mut self, controller: Arc<SharedController>) -> StreamWriter {
        self.controller = Some(controller);
        self
    }

    /// Consumes the stream's items until the compressors hang up.
    pub fn run(mut self, rx: Receiver<Sequenced<Done>>) {
        if !self.cfg.discard {
            crate::direct::prepare_buffer(self.cfg.write_buffer);
        }
        let mut order = Sequencer::default();
        let clock = std::time::Instant::now();
        let now = || clock.elapsed().as_secs_f64();
        let controller = self.controller.clone();
        // A source that waits for the recorder (a file) has no backlog to shed.
        let late_after = |job: &Job| match &controller {
            Some(ctl) if !job.source_waits => ctl.late_after(job.bytes, job.decision.codec),
            _ => f64::INFINITY,
        };
        loop {
            let wait = order
                .late_in(now(), late_after)
                .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
                .map_or(self.idle_wait(), |late| self.idle_wait().min(late));
            let mut busy = false;
            match rx.recv_timeout(wait) {
                Ok(done) => {
                    busy = true;
                    order.insert(now(), done.seq, done.item);
                    // Everything already here first: a frame that has come is not late.
                    while let Ok(done) = rx.try_recv() {
                        order.insert(now(), done.seq, done.item);
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    // A quiet link writes nothing that would find a failed directory
                    // writable again: probe it, so that health and metrics recover.
                    if self.dirs.probe_failed(self.cfg.stream) {
                        self.salvage_abandoned();
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
            while let Some(next) = order.next(now(), late_after) {
                busy = true;
                match next {
                    Next::Item(Done::Open(open)) => self.open(open),
                    Next::Item(Done::Chunk(chunk, encoded)) => self.chunk(chunk, encoded),
                    Next::Item(Done::Close(close)) => self.close(close),
                    Next::Item(Done::Queued(_)) => unreachable!("tickets wait in the sequencer"),
                    Next::Late { mut chunk, waited } => {
                        if let Some(ctl) = &self.controller {
                            ctl.taken_late(
                                chunk.decision.codec,
                                chunk.segment.data().len(),
                                waited,
                            );
                        }
                        chunk.decision.reason = Reason::Late;
                        self.chunk(chunk, Encoded::Raw);
                    }
                }
            }
            if busy && rx.is_empty() {
                self.flush_when_idle();
            }
            self.sync_when_due();
        }
        debug_assert!(order.is_empty(), "sequence gap at {}", order.next_seq());
        if self.current.is_some() {
            // Only when a capture loop died without closing: keep what was written.
            self.close(CloseFile {
                capture: Vec::new(),
                out_of_order: 0,
            });
        }
        self.salvage_abandoned();
        for (_, partial) in &self.abandoned {
            tracing::warn!(
                "{} keeps its complete chunks; the next run into this store (or `tapdeck verify --repair`) finalizes it",
                partial.display()
            );
        }
    }

    fn open(&mut self, open: OpenFile) {
        self.interfaces = open.interfaces;
        if !self.cfg.discard {
            self.start_file(open.first_ts_ns);
        }
    }

    /// Opens a file on the next healthy directory and writes its header frame.
    fn start_file(&mut self, first_ts_ns: u64) -> bool {
        let header = match self
            .cfg
            .format
            .file_header(&self.interfaces, &self.cfg.section)
        {
            Ok(h) => h,
            Err(e) => {
                self.control
                    .fail(format!("stream {}: {e}", self.cfg.stream));
                return false;
            }
        };
        let dirs = Arc::clone(&self.dirs);
        for dir in (0..dirs.paths.len()).filter_map(|_| dirs.pick()) {
            let name = loop {
                let name = meta::file_name(
                    first_ts_ns,
                    self.cfg.stream,
                    self.file_seq,
                    self.cfg.format,
                    self.cfg.container,
                );
                self.file_seq += 1;
                // A second run into the same store may reach the same name: never clobber.
                if !self.dirs.paths[dir].join(&name).exists() {
                    break name;
                }
            };
            let partial = self.dirs.paths[dir].join(meta::partial_name(&name));
            let out = match DirectFile::create(&partial, self.cfg.direct, self.cfg.write_buffer) {
                Ok(out) => out,
                Err(e) => {
                    self.dirs
                        .fail(dir, &format!("cannot create {}: {e}", partial.display()));
                    continue;
                }
            };
            if self.cfg.direct && !out.is_direct() && !self.warned_buffered {
                tracing::warn!(
                    "{} refuses O_DIRECT (tmpfs? ZFS?): writing buffered, through the page cache",
                    self.dirs.paths[dir].display()
                );
                self.warned_buffered = true;
            }
            self.current = Some(CurrentFile {
                dir,
                partial,
                name,
                out,
                entries: Vec::new(),
                flows: Vec::new(),
                summary: FileSummary::default(),
                data_len: 0,
                first_ts_ns,
                min_ts_ns: u64::MAX,
                max_ts_ns: 0,
                packets: 0,
                unconfirmed: Default::default(),
                counted_bytes: 0,
                unsynced: Default::default(),
                dir_synced: false,
            });
            match self.append_raw(
                &header,
                FrameContent::no_packets(FrameKind::Header, header.len()),
            ) {
                Ok(_) => {
                    self.dirs.succeeded(dir);
                    self.salvage_abandoned();
                    return true;
                }
                Err(e) => self.abandon_current(&e.to_string()),
            }
        }
        // Every directory failed and rests: this chunk is dropped and counted; a later
        // one tries again.
        false
    }

    fn chunk(&mut self, chunk: Chunk, encoded: Encoded) {
        self.write_chunk(chunk, encoded, false);
    }

    /// Writes one chunk to the current file (opening one if needed); `again` for a chunk
    /// rescued from an abandoned file, whose codec and ladder bytes were counted already.
    fn write_chunk(&mut self, mut chunk: Chunk, encoded: Encoded, again: bool) {
        let unindexed = chunk.flows.encoded.is_empty();
        let index_here = self.cfg.flow_index && unindexed && chunk.packets > 0;
        if index_here && (self.cfg.discard || !matches!(encoded, Encoded::Raw)) {
            chunk.flows = Box::new(chunk_filter::index_chunk(
                self.cfg.format,
                chunk.segment.data(),
                &chunk.linktypes,
            ));
        }
        let codec = match &encoded {
            Encoded::Frame { codec, .. } => *codec,
            Encoded::Raw => Codec::Raw,
        };
        if self.cfg.discard {
            return self.discard_chunk(&chunk, &encoded, codec);
        }
        let started = std::time::Instant::now();
        // Stored raw without a compressor's visit: indexed here, as it is copied.
        let mut flows = None;
        let index = (index_here && matches!(encoded, Encoded::Raw)).then_some(&mut flows);
        let written = self.append_chunk(&chunk, &encoded, codec, index);
        if let Some(flows) = flows {
            chunk.flows = Box::new(flows);
        }
        self.grow_counts(chunk.per_iface.len());
        let Some(bytes_out) = written else {
            self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
            for (c, &n) in self.counts.iter_mut().zip(&chunk.per_iface) {
                c.dropped_write_error += u64::from(n);
            }
            self.publish();
            // The segment returns to the staging pool: the chunk is lost, and counted.
            return;
        };
        self.retention.open_grew(bytes_out as u64);
        if let Some(cur) = self.current.as_mut() {
            cur.counted_bytes += bytes_out as u64;
        }
        if let Some(t) = &mut self.throttle {
            t.take(started, bytes_out);
        }
        if !again {
            if let Some(c) = &self.controller {
                c.written(bytes_out, started.elapsed().as_secs_f64());
            }
            let data_len = chunk.segment.data().len();
            self.stats.add_codec(codec, data_len, bytes_out);
            self.stats
                .add_decision(codec, chunk.decision.reason, data_len);
        }
        for (c, &n) in self.counts.iter_mut().zip(&chunk.per_iface) {
            c.stored += u64::from(n);
        }
        self.publish();
        self.hold_until_on_disk(chunk, encoded);
    }

    /// `--discard`: the chunk counts as stored (and durable) without a write.
    fn discard_chunk(&mut self, chunk: &Chunk, encoded: &Encoded, codec: Codec) {
        let data_len = chunk.segment.data().len();
        let out = match encoded {
            Encoded::Frame { bytes, .. } if !bytes.is_empty() => bytes.len(),
            _ => data_len,
        };
        // A disk that takes everything at once: the controller must know it is there
        // (it sends nothing raw to a disk it has not measured).
        if let Some(c) = &self.controller {
            c.written(out, 0.0);
        }
        self.stats.add_codec(codec, data_len, out);
        self.stats
            .add_decision(codec, chunk.decision.reason, data_len);
        self.grow_counts(chunk.per_iface.len());
        for (c, &n) in self.counts.iter_mut().zip(&chunk.per_iface) {
            // Nothing to lose: what is discarded is as durable as it will ever be.
            c.stored += u64::from(n);
            c.durable += u64::from(n);
        }
        self.publish();
    }

    /// Appends the chunk's frame to the current file, opening one if needed. A full disk
    /// first asks retention for room; a failing directory is abandoned for the next one
    /// (with the chunks its file lost). Returns the frame's bytes, or `None` when no
    /// directory took it (or retention holds writing).
    /// Appends a chunk (to the current file, or a new one); with `index`, a raw chunk's
    /// flows are built as it is copied and left there.
    fn append_chunk(
        &mut self,
        chunk: &Chunk,
        encoded: &Encoded,
        codec: Codec,
        mut index: Option<&mut Option<ChunkFlows>>,
    ) -> Option<usize> {
        let data_len = chunk.segment.data().len();
        let frame_len = match encoded {
            Encoded::Frame { bytes, .. } => bytes.len(),
            Encoded::Raw => 0,
        };
        let out_len = if frame_len > 0 { frame_len } else { data_len } as u64;
        let content = FrameContent {
            kind: FrameKind::Packets,
            codec,
            data_len,
            packets: chunk.packets,
            min_ts_ns: chunk.min_ts_ns,
            max_ts_ns: chunk.max_ts_ns,
        };
        loop {
            if self.current.is_none() && !self.start_file(chunk.min_ts_ns) {
                return None;
            }
            let dir = self.current.as_ref().map_or(0, |c| c.dir);
            if !self.retention.admit(dir, out_len, &self.stats) {
                self.stats.retention_refused.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            let result = match encoded {
                Encoded::Frame { bytes, .. } => {
                    self.append(|out| out.append(bytes), frame_len, content)
                }
                Encoded::Raw => {
                    let indexer = index.as_ref().map(|_| {
                        chunk_filter::ChunkIndexer::new(self.cfg.format, &chunk.linktypes)
                    });
                    let (result, flows) =
                        self.append_raw_indexing(chunk.segment.data(), content, indexer);
                    if let (Some(slot), Some(flows)) = (index.as_mut(), flows) {
                        **slot = Some(flows);
                    }
                    result
                }
            };
            match result {
                Ok(n) => return Some(n),
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    if self.retention.make_room(dir, &self.stats) {
                        continue;
                    }
                    self.abandon_current(&format!(
                        "disk full (set --max-bytes or --min-free to delete the oldest files instead): {e}"
                    ));
                    self.rewrite_lost();
                }
                Err(e) => {
                    self.abandon_current(&e.to_string());
                    self.rewrite_lost();
                }
            }
        }
    }

    /// A chunk just written keeps its staging segment until the kernel has its frame (it
    /// may have to be written again elsewhere); those the kernel has taken let theirs go.
    fn hold_until_on_disk(&mut self, mut chunk: Chunk, encoded: Encoded) {
        let cur = self
            .current
            .as_mut()
            .expect("a chunk was just written to it");
        if let Some(last) = cur.flows.last_mut() {
            // Moved, not copied: a chunk written again elsewhere is indexed again.
            let flows = std::mem::take(&mut chunk.flows);
            cur.summary.add(chunk.packets, &flows);
            *last = flows.encoded;
        }
        cur.unsynced
            .push_back((cur.out.len(), chunk.per_iface.clone()));
        cur.unconfirmed.push_back((cur.out.len(), chunk, encoded));
        let on_disk = cur.out.on_disk();
        while cur
            .unconfirmed
            .front()
            .is_some_and(|(end, ..)| *end <= on_disk)
        {
            cur.unconfirmed.pop_front();
        }
    }

    /// Appends `data` as a raw frame (framed as the container frames stored bytes).
    /// Appends bytes stored raw (a frame of one raw block, or the bytes themselves).
    fn append_raw(&mut self, data: &[u8], content: FrameContent) -> std::io::Result<usize> {
        self.append_raw_indexing(data, content, None).0
    }

    /// [`append_raw`](Self::append_raw) of a chunk; with an indexer, indexes it piece by
    /// piece just after copying each piece (see [`chunk_filter::ChunkIndexer`]), and
    /// returns its flows when the append succeeded.
    fn append_raw_indexing(
        &mut self,
        data: &[u8],
        content: FrameContent,
        mut indexer: Option<chunk_filter::ChunkIndexer>,
    ) -> (std::io::Result<usize>, Option<ChunkFlows>) {
        /// A piece small enough to be in the cache still when it is indexed.
        const PIECE: usize = 128 << 10;
        let container = self.cfg.container;
        let mut frame_len = 0;
        raw_frame_pieces(container, data, |p| frame_len += p.len());
        let start = data.as_ptr() as usize;
        let write = |out: &mut DirectFile| {
            let mut result = Ok(());
            raw_frame_pieces(container, data, |p| {
                // Where `p` lies in `data` (a container's headers lie elsewhere).
                let at = (p.as_ptr() as usize).wrapping_sub(start);
                let of_data = at <= data.len() && p.len() <= data.len() - at;
                for piece in p.chunks(PIECE) {
                    if result.is_ok() {
                        result = out.append(piece);
                    }
                    if let (Some(ix), true, true) = (indexer.as_mut(), of_data, result.is_ok()) {
                        let end = (piece.as_ptr() as usize - start) + piece.len();
                        ix.advance(&data[..end]);
                    }
                }
            });
            result
        };
        let result = self.append(write, frame_len, content);
        let flows = match (&result, indexer) {
            (Ok(_), Some(ix)) => Some(ix.finish(data.len())),
            _ => None,
        };
        (result, flows)
    }

    /// Appends one frame of `frame_len` bytes (written when the buffer fills) and its index
    /// entry; on failure the file is left as it was.
    fn append(
        &mut self,
        write: impl FnOnce(&mut DirectFile) -> std::io::Result<()>,
        frame_len: usize,
        content: FrameContent,
    ) -> std::io::Result<usize> {
        let cur = self.current.as_mut().expect("a file is open");
        let frame_offset = cur.out.len();
        // Under load the buffer goes out only when full (the largest writes, no block
        // written twice); whatever is left goes as soon as the writer is idle.
        let result = write(&mut cur.out);
        if let Err(e) = result {
            cur.out.rollback(frame_offset)?;
            return Err(e);
        }
        debug_assert_eq!(cur.out.len() - frame_offset, frame_len as u64);
        let FrameContent {
            kind,
            codec,
            data_len,
            packets,
            min_ts_ns,
            max_ts_ns,
        } = content;
        cur.entries.push(ChunkEntry {
            frame_offset,
            frame_len: frame_len as u32,
            data_offset: cur.data_len,
            data_len: data_len as u32,
            first_ts_ns: if packets > 0 { min_ts_ns } else { 0 },
            last_ts_ns: if packets > 0 { max_ts_ns } else { 0 },
            packets,
            kind,
            codec,
        });
        cur.flows.push(Vec::new());
        cur.data_len += data_len as u64;
        if packets > 0 {
            cur.packets += u64::from(packets);
            cur.min_ts_ns = cur.min_ts_ns.min(min_ts_ns);
            cur.max_ts_ns = cur.max_ts_ns.max(max_ts_ns);
        }
        self.stats
            .bytes_written
            .fetch_add(frame_len as u64, Ordering::Relaxed);
        Ok(frame_len)
    }

    /// Nothing waiting: put the current file's last partial block on disk too, so a quiet
    /// link's packets are readable (and survive a crash) without waiting for more.
    fn flush_when_idle(&mut self) {
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        match cur.out.flush() {
            // Everything is with the kernel: the chunks' segments go back to the pool.
            Ok(()) => cur.unconfirmed.clear(),
            Err(e) => {
                self.abandon_current(&format!("flushing failed: {e}"));
                self.rewrite_lost();
            }
        }
    }

    /// Gives up on the current file and rests its directory: the file keeps its complete
    /// chunks and is finalized as soon as a directory takes writes again (or by the next
    /// run); one that holds no chunk is removed.
    fn abandon_current(&mut self, why: &str) {
        if let Some(cur) = self.current.take() {
            self.dirs.fail(
                cur.dir,
                &format!("writing {} failed: {why}", cur.partial.display()),
            );
            // Chunks still in the write buffer never reached the file: not stored after all,
            // they are written again elsewhere (`rewrite_lost`), or dropped and counted.
            // Those it holds stay stored, and durable if a sync still succeeds.
            let on_disk = cur.out.on_disk();
            if cur.out.sync_data().is_ok() {
                let synced = cur.unsynced.iter().filter(|(end, _)| *end <= on_disk);
                Self::count_durable(&mut self.counts, synced.map(|(_, p)| p));
            }
            self.retention.open_shrank(cur.counted_bytes);
            for (end, chunk, encoded) in cur.unconfirmed {
                if end > on_disk {
                    for (c, &n) in self.counts.iter_mut().zip(&chunk.per_iface) {
                        c.stored -= u64::from(n);
                    }
                    self.lost.push((chunk, encoded));
                }
            }
            self.publish();
            if let Err(e) = cur.out.cut_to_on_disk() {
                tracing::warn!(
                    "cannot cut {} after its last written frame: {e}",
                    cur.partial.display()
                );
            }
            drop(cur.out);
            if cur.entries.iter().all(|e| {
                e.kind != FrameKind::Packets || e.frame_offset + u64::from(e.frame_len) > on_disk
            }) {
                let _ = std::fs::remove_file(&cur.partial);
            } else {
                self.abandoned.push((cur.dir, cur.partial));
            }
        }
    }

    /// Writes the chunks an abandoned file lost (in their order) to a new file, on another
    /// directory if one is usable.
    fn rewrite_lost(&mut self) {
        for (chunk, encoded) in std::mem::take(&mut self.lost) {
            self.write_chunk(chunk, encoded, true);
        }
    }

    /// Finalizes the files abandoned on directories that take writes again, keeping their
    /// complete chunks (as `verify --repair` would, which refuses to while we record).
    fn salvage_abandoned(&mut self) {
        let dirs = &self.dirs;
        self.abandoned.retain(|(dir, partial)| {
            if dirs.failed[*dir].lock().unwrap().is_some() {
                return true;
            }
            match tapdeck_store::repair::repair(partial) {
                Ok(tapdeck_store::repair::Repaired::As(done)) => {
                    tracing::warn!(
                        "{} (abandoned when its directory failed) finalized as {}",
                        partial.display(),
                        done.display()
                    );
                    false
                }
                Ok(tapdeck_store::repair::Repaired::RemovedEmpty) => false,
                Err(e) => {
                    tracing::warn!("{e}; trying again later");
                    true
                }
            }
        });
    }

    /// Finishes the current file: its statistics blocks, then its index, and the rename
    /// to its final name.
    fn close(&mut self, close: CloseFile) {
        // Every chunk on disk first, so the counts the file keeps are what it holds.
        if let Some(Err(e)) = self.current.as_mut().map(|c| c.out.flush()) {
            self.abandon_current(&format!("flushing failed: {e}"));
            self.rewrite_lost();
        }
        if self.current.is_none() {
            return;
        }
        let mut counts = self.interface_counts(&close);
        // Interfaces the source declared after this file began belong to the next file.
        counts.truncate(self.interfaces.len());
        if self.cfg.format == Format::Pcapng && !counts.is_empty() {
            if let Err(e) = self.append_stats_blocks(&counts) {
                return self.abandon_current(&e.to_string());
            }
        }
        let cur = self.current.take().expect("still open");
        let meta = self.file_meta(&cur, counts, close.out_of_order);
        self.finish_file(cur, meta);
    }

    /// A pcapng interface statistics block per interface, with what tapdeck counted in its
    /// comment.
    fn append_stats_blocks(&mut self, counts: &[meta::InterfaceCounts]) -> std::io::Result<usize> {
        let cur = self.current.as_ref().expect("a file is open");
        let ts = if cur.max_ts_ns > 0 {
            cur.max_ts_ns
        } else {
            cur.first_ts_ns
        };
        let mut isbs = Vec::new();
        for (i, c) in counts.iter().enumerate() {
            let stats = InterfaceStats {
                iface: i as u32,
                ts_ns: ts,
                received: Some(c.seen),
                os_dropped: Some(c.dropped_kernel),
                if_dropped: Some(c.dropped_staging_full + c.dropped_write_error),
                delivered: Some(c.received),
            };
            let comment = format!(
                "tapdeck: stored={} dropped_kernel={} dropped_staging_full={} dropped_write_error={}",
                c.stored, c.dropped_kernel, c.dropped_staging_full, c.dropped_write_error
            );
            isbs.extend_from_slice(
                &self
                    .cfg
                    .format
                    .stats_block(&stats, cur.first_ts_ns, &comment),
            );
        }
        self.append_raw(
            &isbs,
            FrameContent::no_packets(FrameKind::Stats, isbs.len()),
        )
    }

    /// What the file's index says about it.
    fn file_meta(
        &self,
        cur: &CurrentFile,
        counts: Vec<meta::InterfaceCounts>,
        out_of_order: u64,
    ) -> FileMeta {
        FileMeta {
            store_version: meta::STORE_VERSION,
            stream: self.cfg.stream,
            seq: DataName::parse(&cur.name).map_or(0, |n| n.seq),
            format: meta::format_name(self.cfg.format).into(),
            container: meta::container_name(self.cfg.container).into(),
            // Its first packet: chunks refused at its start (retention holding) are not in it.
            first_ts_ns: if cur.packets > 0 {
                cur.min_ts_ns
            } else {
                cur.first_ts_ns
            },
            last_ts_ns: if cur.packets > 0 {
                cur.max_ts_ns
            } else {
                cur.first_ts_ns
            },
            packets: cur.packets,
            interfaces: self.interfaces.iter().map(InterfaceMeta::from).collect(),
            counts,
            out_of_order,
            repaired: false,
            run_started_ns: Some(self.cfg.run_started_ns),
        }
    }

    /// Writes the index and renames the file to its final name (`finalize`, which syncs
    /// both); its packets are then durable, and retention counts it as a complete file.
    fn finish_file(&mut self, mut cur: CurrentFile, meta: FileMeta) {
        let index = ChunkIndex {
            meta: serde_json::to_string(&meta).expect("meta serializes"),
            entries: cur.entries,
            // Files of a recorder without any indexed chunk keep the old index format.
            flows: if cur.flows.iter().any(|f| !f.is_empty()) {
                cur.flows
            } else {
                Vec::new()
            },
            summary: cur.summary.finish(),
        };
        let final_path = self.dirs.paths[cur.dir].join(&cur.name);
        let (counted_bytes, packets) = (cur.counted_bytes, cur.packets);
        let unsynced = std::mem::take(&mut cur.unsynced);
        self.retention.open_shrank(counted_bytes);
        let result = finalize(
            cur.out,
            &cur.partial,
            &final_path,
            self.cfg.container,
            &index,
        );
        if let Err(e) = result {
            self.dirs.fail(
                cur.dir,
                &format!("finishing {} failed: {e}", cur.partial.display()),
            );
            self.abandoned.push((cur.dir, cur.partial));
            return;
        }
        // `finalize` synced the file and its directory.
        Self::count_durable(&mut self.counts, unsynced.iter().map(|(_, p)| p));
        self.publish();
        self.stats.files_written.fetch_add(1, Ordering::Relaxed);
        self.stats
            .last_file_completed_ns
            .store(crate::os::now_ns(), Ordering::Relaxed);
        tracing::debug!("completed {}", final_path.display());
        self.catalog(&final_path, &meta, &index.summary);
        self.retention.add(cur.dir, &final_path, Some(packets));
        self.retention.enforce(&self.stats);
    }

    /// Adds a finished file to the store's catalog. The catalog only saves readers work (a
    /// file it lacks is opened and read), so a failure is logged once and recording goes on.
    fn catalog(&mut self, path: &std::path::Path, meta: &FileMeta, summary: &[u8]) {
        let Some(root) = &self.cfg.catalog_root else {
            return;
        };
        let size = std::fs::metadata(path).map(|m| m.len());
        let result = size.and_then(|size| {
            let entry = catalog::entry_of(path, size, meta, summary);
            catalog::append(root, &[entry])
        });
        // The entries of files retention deleted go (see `catalog::compact`) once the
        // catalog has doubled since it was last compacted: its size stays within twice
        // that of the live files' entries, at a constant cost per entry.
        let result = result.and_then(|()| {
            let mut size = std::fs::metadata(catalog::path(root))?.len();
            if size > 2 * self.catalog_compacted + COMPACT_CATALOG_SLACK {
                catalog::compact(root, &self.dirs.paths)?;
                size = std::fs::metadata(catalog::path(root))?.len();
                self.catalog_compacted = size;
            }
            // Counted against --max-bytes with the data files, with its groups.
            let groups = [
                catalog::groups::path(root),
                catalog::groups::slices_path(root),
            ]
            .iter()
            .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
            .sum::<u64>();
            self.retention.set_catalog_bytes(size + groups);
            Ok(())
        });
        if let Err(e) = result {
            if !self.warned_catalog {
                tracing::warn!(
                    "cannot add {} to the store catalog ({e}); readers open files it lacks",
                    path.display()
                );
                self.warned_catalog = true;
            }
        }
    }

    /// How long the writer may wait for the next item: until a sync is due, if the open
    /// file holds packets not yet synced.
    fn idle_wait(&self) -> std::time::Duration {
        let pending = self.current.as_ref().is_some_and(|c| {
            c.unsynced
                .front()
                .is_some_and(|(end, _)| *end <= c.out.on_disk())
        });
        match self.cfg.sync_interval {
            Some(every) if pending => {
                let due =
                    (self.last_sync + every).saturating_duration_since(std::time::Instant::now());
                due.clamp(std::time::Duration::from_millis(10), RETRY_AFTER)
            }
            _ => RETRY_AFTER,
        }
    }

    /// Syncs the open file when `sync_interval` has passed and packets the kernel holds are
    /// waiting for it; they are then counted durable. The file's directory is synced once
    /// too, so a file created since survives a power loss under its name.
    fn sync_when_due(&mut self) {
        let Some(every) = self.cfg.sync_interval else {
            return;
        };
        if self.last_sync.elapsed() < every {
            return;
        }
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let on_disk = cur.out.on_disk();
        // Nothing the kernel holds is waiting for a sync.
        if cur.unsynced.front().is_none_or(|(end, _)| *end > on_disk) {
            return;
        }
        self.last_sync = std::time::Instant::now();
        let synced = cur.out.sync_data().and_then(|synced| {
            if !cur.dir_synced {
                std::fs::File::open(&self.dirs.paths[cur.dir])?.sync_all()?;
                cur.dir_synced = true;
            }
            Ok(synced)
        });
        match synced {
            Ok(synced) => {
                let n = cur.unsynced.partition_point(|(end, _)| *end <= synced);
                let done: Vec<_> = cur.unsynced.drain(..n).collect();
                Self::count_durable(&mut self.counts, done.iter().map(|(_, p)| p));
                self.publish();
            }
            Err(e) => {
                self.abandon_current(&format!("syncing failed: {e}"));
                self.rewrite_lost();
            }
        }
    }

    fn count_durable<'a>(counts: &mut [WriterCounts], chunks: impl Iterator<Item = &'a Vec<u32>>) {
        for per_iface in chunks {
            for (c, &n) in counts.iter_mut().zip(per_iface) {
                c.durable += u64::from(n);
            }
        }
    }

    fn interface_counts(&mut self, close: &CloseFile) -> Vec<meta::InterfaceCounts> {
        self.grow_counts(close.capture.len().max(self.interfaces.len()));
        crate::stats::combine(&close.capture, &self.counts)
    }

    fn grow_counts(&mut self, n: usize) {
        if self.counts.len() < n {
            self.counts.resize(n, WriterCounts::default());
        }
    }

    fn publish(&self) {
        *self.stats.streams[self.cfg.stream as usize]
            .writer
            .lock()
            .unwrap() = self.counts.clone();
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// Writes `n` chunks of `bytes` back to back, each taking `write(i)` of the real disk's
    /// time, on a simulated clock from `start`; returns when the last sleep ends.
    fn run(
        t: &mut DiskThrottle,
        start: Instant,
        n: u32,
        bytes: usize,
        write: impl Fn(u32) -> Duration,
    ) -> Instant {
        let mut now = start;
        for i in 0..n {
            let started = now;
            now += write(i);
            now += t.wait(started, now, bytes);
        }
        now
    }

    #[test]
    fn a_throttled_disk_takes_its_rate_whatever_the_real_writes_take() {
        // 100 MB/s, 1 MB chunks: 10 ms each at the rate.
        let start = Instant::now();
        let mut t = DiskThrottle::new(100e6, start);
        // Real writes of 3 ms each overlap the rate's time: 100 chunks in 1 s, not 1.3 s
        // (what charging the rate after each write gave).
        let end = run(&mut t, start, 100, 1_000_000, |_| Duration::from_millis(3));
        let took = (end - start).as_secs_f64();
        assert!((took - 1.0).abs() < 0.005, "{took} s");
        // A stall of 40 ms (a late wake-up, a slow write) is made up within the credit.
        let end2 = run(&mut t, end, 100, 1_000_000, |i| {
            Duration::from_millis(if i == 50 { 40 } else { 3 })
        });
        let took = (end2 - end).as_secs_f64();
        assert!((took - 1.0).abs() < 0.005, "{took} s");
        // After an idle second the disk is owed nothing: 10 chunks of 0.1 ms real writes
        // take the rate's 100 ms, as on a slow disk (the credit once let the first 50 ms
        // through at the real disk's speed, and the ladder measured it).
        let idle = end2 + Duration::from_secs(1);
        let end3 = run(&mut t, idle, 10, 1_000_000, |_| Duration::from_micros(100));
        let took = (end3 - idle).as_secs_f64();
        assert!((took - 0.1).abs() < 0.001, "{took} s");
        // So is a writer that has less to write than the rate: a chunk every 20 ms, each
        // taking 10 ms of the disk's time, written 0.1 ms fast.
        let mut now = end3;
        for _ in 0..10 {
            now += Duration::from_millis(20);
            let wait = t.wait(now, now + Duration::from_micros(100), 1_000_000);
            assert_eq!(wait, Duration::from_micros(9900));
        }
    }
}
