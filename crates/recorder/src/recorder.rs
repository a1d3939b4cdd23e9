//! The recorder: wires sources, capture loops, the staging pool, compressors and writers
//! together, and reports what they count.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use tapdeck_capture::{PacketSink, PacketSource, Poll, SourceCounters};
use tapdeck_decode::headers_len;
pub use tapdeck_decode::HeaderDepth;
use tapdeck_pcap::container::{Codec, FrameEncoder};
use tapdeck_pcap::{Format, Interface, Packet, SectionInfo};

use crate::affinity::{cpu_for, pin, set_nice, Pinning};
use crate::chunk_filter;
use crate::controller::{Decision, LadderController, Reason, SharedController};
use crate::error::RecordError;
use crate::ladder::CodecLadder;
use crate::live::LiveView;
use crate::pipeline::{
    Chunk, CloseFile, Control, Done, Encoded, FrameBuffers, OpenFile, Sequenced,
};
use crate::retention::{Retention, RetentionPolicy};
use crate::staging::{Segment, StagingPool};
use crate::stats::{CaptureCounts, StatsHub, StatsRecord};
use crate::writer::{DataDirs, StreamWriter, WriterConfig};
use tapdeck_store::lock::StoreLock;
use tapdeck_store::meta::{self, InterfaceMeta, Manifest, MergeManifest};
use tapdeck_store::repair::{self, Repaired};

/// Capture and writer threads outrank everything else; compressors run at idle priority
/// (the HP authors saw compression starve capture during bursts). Raising priority needs
/// root; without it the threads keep the default.
const CAPTURE_NICE: i32 = -5;

/// Classic pcap stores seconds in 32 bits.
const PCAP_TIME_LIMIT_NS: u64 = (u32::MAX as u64 + 1) * 1_000_000_000;

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
    fn boundary_after(&self, ts: u64) -> u64 {
        match self.interval_ns {
            Some(i) if i > 0 => (ts / i).saturating_add(1).saturating_mul(i),
            _ => u64::MAX,
        }
    }
}

pub struct RecorderConfig {
    pub store: PathBuf,
    /// Data directories; empty means the store directory itself.
    pub dirs: Vec<PathBuf>,
    pub format: Format,
    pub ladder: CodecLadder,
    pub chunk_size: usize,
    /// Staging bytes per stream.
    pub staging_bytes: usize,
    pub rotation: Rotation,
    pub retention: RetentionPolicy,
    pub compressors: usize,
    /// CPUs per thread role.
    pub pinning: Pinning,
    pub direct: bool,
    /// Index each chunk's flows (`crate::flows`).
    pub flow_index: bool,
    /// Write nothing (benchmarks): see `WriterConfig::discard`.
    pub discard: bool,
    /// Benchmarks only: see `WriterConfig::disk_limit`.
    pub disk_limit: Option<u64>,
    /// See `WriterConfig::sync_interval`.
    pub sync_interval: Option<Duration>,
    /// Benchmarks only: the first rung for every chunk, no controller.
    pub fixed_codec: bool,
    pub flush_interval: Duration,
    pub stats_interval: Duration,
    pub duration: Option<Duration>,
    /// Header-only capture: each packet is cut to `headers_len` of its interface's link
    /// type before it is staged, and keeps its original length. Interfaces keep the snap
    /// length of their source (the upper bound in force); pcapng and pcap both allow a
    /// packet to have fewer captured bytes than that.
    pub headers: Option<HeaderDepth>,
    /// The options as the user gave them, kept in the manifest.
    pub options: serde_json::Value,
    /// Set by `merge`: the inputs, kept in the manifest.
    pub merge: Option<MergeManifest>,
}

/// What a finished recording reports.
pub struct Summary {
    pub stats: StatsRecord,
    pub fatal: Option<String>,
    pub staging_locked: bool,
    pub direct: bool,
    pub discard: bool,
    pub headers: Option<HeaderDepth>,
}

/// A sensible staging pool: a thirty-second of the machine's memory (768 MiB of 24 GiB:
/// about a second of a fast link), between 64 MiB and 2 GiB. Larger pools cost seconds of
/// page zeroing at start on small machines; `--staging` sets any size.
pub fn default_staging_bytes() -> usize {
    // SAFETY: sysconf has no preconditions (an unknown name returns -1, clamped below).
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let ram = (pages.max(0) as u64).saturating_mul(page.max(0) as u64);
    (ram / 32).clamp(64 << 20, 2 << 30) as usize
}

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Records from `sources` (one stream each) until they end, `control.stop` is set, or the
/// duration passes. `report` receives each periodic stats record (and the final one).
pub fn record<S: PacketSource + 'static>(
    cfg: RecorderConfig,
    sources: Vec<S>,
    control: Arc<Control>,
    mut report: impl FnMut(&StatsRecord, bool),
) -> Result<Summary, RecordError> {
    let dirs = if cfg.dirs.is_empty() {
        vec![cfg.store.clone()]
    } else {
        cfg.dirs.clone()
    };
    std::fs::create_dir_all(&cfg.store).map_err(|source| RecordError::CreateStore {
        path: cfg.store.clone(),
        source,
    })?;
    let resolve = |path: &std::path::Path| {
        std::fs::canonicalize(path).map_err(|source| RecordError::Resolve {
            path: path.to_path_buf(),
            source,
        })
    };
    let mut abs_dirs = Vec::new();
    for d in &dirs {
        std::fs::create_dir_all(d).map_err(|source| RecordError::CreateDir {
            path: d.clone(),
            source,
        })?;
        abs_dirs.push(resolve(d)?);
    }
    let root = resolve(&cfg.store)?;
    let mut lock_dirs = vec![root.clone()];
    lock_dirs.extend(abs_dirs.iter().filter(|d| **d != root).cloned());
    let command = std::env::args().take(2).collect::<Vec<_>>().join(" ");
    let _lock = StoreLock::acquire(&lock_dirs, &command)?;
    finalize_leftovers(&abs_dirs);
    let next_seq = next_sequence_numbers(&abs_dirs);
    let max_record = cfg.format.max_record_len(256 * 1024);
    if cfg.chunk_size < max_record {
        return Err(RecordError::ChunkTooSmall { min: max_record });
    }
    let retention =
        Arc::new(Retention::new(cfg.retention, &abs_dirs).map_err(RecordError::ListFiles)?);
    let streams = sources.len();
    let stats = Arc::new(StatsHub::new(streams));
    retention.enforce(&stats);
    if let Some(limit) = retention.holding() {
        return Err(RecordError::RetentionHolds { limit });
    }
    let pools: Vec<Arc<StagingPool>> = (0..streams)
        .map(|_| StagingPool::new(cfg.staging_bytes, cfg.chunk_size))
        .collect::<Result<_, _>>()
        .map_err(|source| RecordError::Staging {
            bytes: cfg.staging_bytes,
            source,
        })?;

    let controllers: Vec<Arc<SharedController>> = pools
        .iter()
        .map(|p| {
            Arc::new(SharedController::new(
                LadderController::new(cfg.ladder.clone(), cfg.compressors.max(1), p.segments())
                    .fixed(cfg.fixed_codec),
            ))
        })
        .collect();
    let container = cfg.ladder.container();
    let data_dirs = Arc::new(DataDirs::new(abs_dirs.clone()));
    let started_ns = now_ns();
    // Relative paths and ids keep the store readable after a move or a copy.
    let marked = meta::DataDirs::mark(&root, &abs_dirs).map_err(manifest_error)?;
    let mut manifest = Manifest {
        store_version: meta::STORE_VERSION,
        tapdeck_version: env!("CARGO_PKG_VERSION").into(),
        host: hostname(),
        format: meta::format_name(cfg.format).into(),
        container: meta::container_name(container).into(),
        dirs: marked.dirs,
        store_id: Some(marked.store_id),
        dir_ids: marked.dir_ids,
        streams: streams as u32,
        interfaces: Vec::new(),
        linktypes: Vec::new(),
        snaplen: 0,
        options: cfg.options.clone(),
        started_ns,
        finished_ns: None,
        // A merge's times come from its inputs' clocks (kept per input), not this host's.
        clock: cfg
            .merge
            .is_none()
            .then(|| read_clock_sync(started_ns))
            .flatten(),
        merge: cfg.merge.clone(),
    };
    write_manifest(&cfg, &manifest)?;

    let section = SectionInfo {
        hardware: None,
        os: Some(format!("{} {}", std::env::consts::OS, kernel_release())),
        application: Some(format!("tapdeck {}", env!("CARGO_PKG_VERSION"))),
    };
    let (work_tx, work_rx) = crossbeam_channel::unbounded::<Sequenced<Chunk>>();
    let mut writer_txs = Vec::new();
    let mut threads = Vec::new();
    for (stream, _) in pools.iter().enumerate() {
        let (tx, rx) = crossbeam_channel::unbounded();
        writer_txs.push(tx);
        let writer = StreamWriter::new(
            WriterConfig {
                stream: stream as u32,
                format: cfg.format,
                container,
                direct: cfg.direct,
                flow_index: cfg.flow_index,
                // Room for a whole chunk frame, so each chunk goes out in one large write.
                write_buffer: 2 * cfg.chunk_size + (1 << 20),
                section: section.clone(),
                discard: cfg.discard,
                disk_limit: cfg.disk_limit,
                sync_interval: cfg.sync_interval,
                first_seq: next_seq.get(&(stream as u32)).copied().unwrap_or(1),
                run_started_ns: started_ns,
            },
            Arc::clone(&data_dirs),
            Arc::clone(&retention),
            Arc::clone(&stats),
            Arc::clone(&control),
        )
        .with_controller(Arc::clone(&controllers[stream]));
        let cpus = cpu_for(&cfg.pinning.writers, stream);
        threads.push(spawn(format!("writer-{stream}"), &stats, move || {
            // The writer frees staging segments; it must keep pace with capture.
            set_nice(CAPTURE_NICE);
            pin(&cpus);
            writer.run(rx)
        }));
    }
    // Replaying files, no packet can be lost: the reader waits for the compressors. Nice
    // 19 would then only make a replay crawl on a busy machine (24,000 packets took 18 s
    // under a load of 9), so compressors yield to capture only when capture is live.
    let compress_nice = if sources.iter().any(|s| s.live()) {
        19
    } else {
        0
    };
    // One buffer per chunk that can be in flight, and one per compressor at work.
    let frame_buffers = FrameBuffers::new(
        pools.iter().map(|p| p.segments()).sum::<usize>() + cfg.compressors.max(1),
        FrameEncoder::frame_bound(pools.iter().map(|p| p.segment_size()).max().unwrap_or(0)),
    );
    let (ready_tx, ready_rx) = crossbeam_channel::bounded::<()>(cfg.compressors.max(1));
    for i in 0..cfg.compressors.max(1) {
        let rx = work_rx.clone();
        let ready = ready_tx.clone();
        let txs = writer_txs.clone();
        let pools = pools.clone();
        let ladder = cfg.ladder.clone();
        let controllers = controllers.clone();
        let buffers = Arc::clone(&frame_buffers);
        let hub = Arc::clone(&stats);
        let format = cfg.flow_index.then_some(cfg.format);
        let cpus = cfg.pinning.compressors.clone();
        threads.push(spawn(format!("compress-{i}"), &stats, move || {
            // Compression yields to live capture: a burst must never starve the capture loop.
            set_nice(compress_nice);
            pin(&cpus);
            compress_loop(
                rx,
                ready,
                txs,
                (pools, controllers, buffers),
                (ladder, format),
                hub,
            )
        }));
    }
    drop((work_rx, ready_tx));
    // Capture starts once the compressors are warm (`warm_up`): a compressor still building
    // its contexts when the first chunks arrive holds up the writer, which takes chunks in
    // order, and on a disk-bound link the disk's idle time is never made up (98 ms of it
    // cost the ladder 2 % of a 4 s benchmark run). Bounded: a recording never waits long
    // for a warm-up. Not for a capture ring, which the kernel fills meanwhile: on a busy
    // machine the warm-up, at nice 19, can take seconds, and a ring not read for that long
    // runs out of blocks and drops.
    if sources.iter().all(|s| s.buffers_unread().is_none()) {
        let warm_by = Instant::now() + WARM_UP_WAIT;
        for _ in 0..cfg.compressors.max(1) {
            if ready_rx.recv_deadline(warm_by).is_err() {
                break;
            }
        }
    }

    let deadline = cfg.duration.map(|d| Instant::now() + d);
    let mut capture_threads = Vec::new();
    for (stream, source) in sources.into_iter().enumerate() {
        let capture = CaptureLoop::new(
            stream as u32,
            &cfg,
            (Arc::clone(&pools[stream]), Arc::clone(&controllers[stream])),
            (work_tx.clone(), writer_txs[stream].clone()),
            Arc::clone(&control),
            Arc::clone(&stats),
        );
        let cpus = cpu_for(&cfg.pinning.capture, stream);
        capture_threads.push(spawn(format!("capture-{stream}"), &stats, move || {
            set_nice(CAPTURE_NICE);
            pin(&cpus);
            capture.run(source, deadline)
        }));
    }
    drop((work_tx, writer_txs));
    // Only now: every thread of the recorder has its stack (see `start_prefault`).
    for pool in &pools {
        if let Err(e) = pool.start_prefault() {
            tracing::warn!("cannot start the staging pool's prefault thread: {e}");
        }
    }

    let start = Instant::now();
    *control.live.lock().unwrap() = Some(Arc::new(LiveView::new(
        Arc::clone(&stats),
        Arc::clone(&retention),
        (pools.clone(), controllers.clone()),
        Arc::clone(&data_dirs),
        start,
        started_ns,
    )));
    let fill = || pools.iter().map(|p| p.fill()).fold(0.0, f64::max);
    let snapshot = || {
        let mut record = stats.snapshot(now_ns(), start.elapsed().as_secs_f64(), fill());
        record.controller = controllers.iter().map(|c| c.view()).collect();
        record
    };
    let mut next_report = start + cfg.stats_interval;
    let mut drops = DropWarnings::default();
    let mut deletions = RetentionLog::new(&stats);
    let mut errors = Vec::new();
    while capture_threads.iter().any(|t| !t.is_finished()) {
        thread::sleep(Duration::from_millis(50));
        if Instant::now() >= next_report {
            report(&snapshot(), false);
            next_report += cfg.stats_interval;
        }
        drops.check(&stats);
        deletions.check(&stats, &retention, false);
    }
    drops.check_now(&stats);
    deletions.check(&stats, &retention, true);
    for t in capture_threads {
        match t.join() {
            Ok(Ok(ifaces)) => merge_interfaces(&mut manifest, &ifaces),
            Ok(Err(e)) => errors.push(RecordError::Capture(e)),
            Err(_) => errors.push(RecordError::Panicked("capture")),
        }
    }
    for t in threads {
        if t.join().is_err() {
            errors.push(RecordError::Panicked("writer or compressor"));
        }
    }
    let last = snapshot();
    report(&last, true);
    control.live.lock().unwrap().take();
    manifest.finished_ns = Some(now_ns());
    if let Err(e) = write_manifest(&cfg, &manifest) {
        // The files carry everything a reader needs; the manifest only adds the summary.
        tracing::warn!("{e}");
    }
    let mut fatal = control.fatal.lock().unwrap().clone();
    if fatal.is_none() && last.totals.stored == 0 && last.totals.dropped.write_error > 0 {
        // Losses are counted and the run goes on while any data directory might come back;
        // a run that could not store a single packet is a failure all the same.
        fatal =
            Some(format!(
            "no packet could be written to {}: every data directory failed (see the errors above)",
            abs_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    let staging_locked = pools.iter().all(|p| p.locked());
    if !staging_locked {
        tracing::warn!(
            "the staging pool was not locked in memory (raise RLIMIT_MEMLOCK, or run as root): it could be swapped out"
        );
    }
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    Ok(Summary {
        stats: last,
        fatal,
        staging_locked,
        direct: cfg.direct,
        discard: cfg.discard,
        headers: cfg.headers,
    })
}

/// Alerts without a metrics system: every drop is logged (WARN) within a second of
/// happening, one line per cause per second at most, with the count since the last line
/// and the run's total.
#[derive(Default)]
struct DropWarnings {
    last: Option<(Instant, [u64; 3])>,
}

impl DropWarnings {
    const INTERVAL: Duration = Duration::from_secs(1);
    const CAUSES: [&'static str; 3] = ["kernel", "staging_full", "write_error"];

    fn check(&mut self, stats: &StatsHub) {
        if self
            .last
            .is_none_or(|(at, _)| at.elapsed() >= Self::INTERVAL)
        {
            self.check_now(stats);
        }
    }

    fn check_now(&mut self, stats: &StatsHub) {
        let mut now = [0u64; 3];
        for s in &stats.streams {
            for c in s.interface_counts() {
                now[0] += c.dropped_kernel;
                now[1] += c.dropped_staging_full;
                now[2] += c.dropped_write_error;
            }
        }
        let before = self.last.map_or([0; 3], |(_, b)| b);
        for (i, cause) in Self::CAUSES.iter().enumerate() {
            if now[i] > before[i] {
                tracing::warn!(
                    "dropped {} packets ({cause}) in the last {:.1} s; {} in this run",
                    now[i] - before[i],
                    self.last.map_or(0.0, |(at, _)| at.elapsed().as_secs_f64()),
                    now[i]
                );
            }
        }
        self.last = Some((Instant::now(), now));
    }
}

/// What retention deleted, in one line a minute (and at the end) rather than a line per
/// file.
struct RetentionLog {
    since: Instant,
    files: u64,
    bytes: u64,
}

impl RetentionLog {
    const INTERVAL: Duration = Duration::from_secs(60);

    fn new(stats: &StatsHub) -> RetentionLog {
        RetentionLog {
            since: Instant::now(),
            files: stats.files_deleted.load(Ordering::Relaxed),
            bytes: stats.bytes_deleted.load(Ordering::Relaxed),
        }
    }

    fn check(&mut self, stats: &StatsHub, retention: &Retention, last: bool) {
        if !last && self.since.elapsed() < Self::INTERVAL {
            return;
        }
        let now = RetentionLog::new(stats);
        if now.files > self.files {
            let horizon = retention
                .horizon_ns()
                .map(|h| {
                    format!(
                        "; the oldest packet stored is {:.0} s old",
                        now_ns().saturating_sub(h) as f64 / 1e9
                    )
                })
                .unwrap_or_default();
            tracing::info!(
                "retention deleted {} files ({} bytes) in the last {:.0} s{horizon}",
                now.files - self.files,
                now.bytes - self.bytes,
                self.since.elapsed().as_secs_f64()
            );
        }
        *self = now;
    }
}

/// Files an earlier run left incomplete (killed, or its disk failed) are finalized before
/// this one writes, as `verify --repair` would: every complete frame kept, the rest cut
/// off. Under the store lock, so no live file is touched.
fn finalize_leftovers(dirs: &[PathBuf]) {
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut partials: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| meta::DataName::of_partial(&e.file_name().to_string_lossy()).is_some())
            .map(|e| e.path())
            .collect();
        partials.sort();
        for partial in partials {
            match repair::repair(&partial) {
                Ok(Repaired::As(done)) => tracing::warn!(
                    "{} was left incomplete by an earlier run; finalized as {}",
                    partial.display(),
                    done.display()
                ),
                Ok(Repaired::RemovedEmpty) => tracing::warn!(
                    "{} was left empty by an earlier run; removed",
                    partial.display()
                ),
                Err(e) => tracing::warn!(
                    "{} was left incomplete by an earlier run and cannot be finalized ({e}); left as it is",
                    partial.display()
                ),
            }
        }
    }
}

/// The sequence number each stream's next file takes: one past the highest in the store,
/// so that a store's names never repeat across runs (readers order by time regardless).
fn next_sequence_numbers(dirs: &[PathBuf]) -> std::collections::HashMap<u32, u64> {
    let mut next = std::collections::HashMap::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            let parsed =
                meta::DataName::parse(&name).or(meta::DataName::of_partial(&name).map(|(n, _)| n));
            if let Some(n) = parsed {
                let seq = next.entry(n.stream).or_insert(1u64);
                *seq = (*seq).max(n.seq + 1);
            }
        }
    }
    next
}

/// Spawns a thread of the recorder; when it ends, its CPU time is added to its role's
/// (the part of the name before the dash: capture, compress, writer).
fn spawn<T: Send + 'static>(
    name: String,
    stats: &Arc<StatsHub>,
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let stats = Arc::clone(stats);
    let role = name.split('-').next().unwrap_or("other").to_string();
    thread::Builder::new()
        .name(name)
        .spawn(move || {
            let result = f();
            stats.add_cpu(&role, thread_cpu_seconds());
            result
        })
        .expect("spawn thread")
}

/// User plus system CPU seconds of the calling thread, to the nanosecond.
///
/// Not `getrusage(RUSAGE_THREAD)`: it reads the scheduler's runtime as of its last tick
/// (up to a few ms stale for a running thread), which for one chunk's compression (a few
/// ms) gave per-rung speeds off by 2–3× either way, and the ladder chose by them.
fn thread_cpu_seconds() -> f64 {
    // SAFETY: timespec is plain integers; clock_gettime only writes into the struct we pass
    // (and leaves it zero if it fails).
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
        ts
    };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Page faults this thread has taken (minor and major): counts, so the rusage clock's
/// staleness does not matter here.
fn thread_page_faults() -> i64 {
    // SAFETY: rusage is plain integers; getrusage only writes into the struct we pass (and
    // leaves it zero if it fails).
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage
    };
    usage.ru_minflt + usage.ru_majflt
}

/// The kernel's view of its clock, or `None` where adjtimex is refused.
// c_long is i64 only on 64-bit targets: the conversion is needed elsewhere.
#[allow(clippy::useless_conversion)]
fn read_clock_sync(now_ns: u64) -> Option<meta::ClockSync> {
    // SAFETY: with modes = 0 adjtimex only fills the struct we pass.
    let (state, tx) = unsafe {
        let mut tx: libc::timex = std::mem::zeroed();
        (libc::adjtimex(&mut tx), tx)
    };
    (state >= 0).then_some(meta::ClockSync {
        synchronized: state != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0,
        max_error_us: i64::from(tx.maxerror),
        est_error_us: i64::from(tx.esterror),
        read_ns: now_ns,
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn merge_interfaces(manifest: &mut Manifest, ifaces: &[Interface]) {
    for i in ifaces {
        let m = InterfaceMeta::from(i);
        if !manifest.interfaces.contains(&m) {
            manifest.interfaces.push(m);
        }
        if !manifest.linktypes.contains(&i.linktype) {
            manifest.linktypes.push(i.linktype);
        }
        manifest.snaplen = manifest.snaplen.max(i.snaplen);
    }
}

fn write_manifest(cfg: &RecorderConfig, manifest: &Manifest) -> Result<(), RecordError> {
    meta::write_manifest(&cfg.store, manifest).map_err(manifest_error)
}

fn manifest_error(e: meta::WriteError) -> RecordError {
    RecordError::Manifest(e.to_string())
}

/// Frame buffers each compressor writes into every page of before its first chunk (see
/// `FrameBuffers`); more are made as chunks queue for the writer, and kept.
const TOUCHED_FRAME_BUFFERS: usize = 4;
/// The longest a stop waits for packets a source may hold back (a ring block's timeout,
/// `--block-timeout-ms`), and the longest it then reads on a source that keeps delivering
/// (see `CaptureLoop::read_what_is_held`).
const STOP_HOLD: Duration = Duration::from_secs(2);
const STOP_DRAIN: Duration = Duration::from_millis(500);
/// The longest capture waits for the compressors' warm-up (on our machines it takes
/// 10–100 ms).
const WARM_UP_WAIT: Duration = Duration::from_secs(2);

fn compress_loop(
    rx: Receiver<Sequenced<Chunk>>,
    ready: Sender<()>,
    txs: Vec<Sender<Sequenced<Done>>>,
    (pools, controllers, buffers): (
        Vec<Arc<StagingPool>>,
        Vec<Arc<SharedController>>,
        Arc<FrameBuffers>,
    ),
    (ladder, index_format): (CodecLadder, Option<Format>),
    stats: Arc<StatsHub>,
) {
    let mut encoder = FrameEncoder::new(ladder.container());
    if let Some(pool) = pools.first() {
        warm_up(&mut encoder, &ladder, pool.segment_size());
        for _ in 0..TOUCHED_FRAME_BUFFERS {
            buffers.add_touched();
        }
    }
    let _ = ready.send(());
    drop(ready);
    for Sequenced {
        stream,
        seq,
        item: mut chunk,
    } in rx
    {
        let controller = &controllers[stream as usize];
        // The backlog may have grown while this chunk waited: decide again.
        if !chunk.source_waits {
            let pool = &pools[stream as usize];
            chunk.decision = controller.at_compressor(
                chunk.decision,
                chunk.segment.data().len(),
                pool.compression_backlog(),
                pool.fill(),
            );
        }
        if let Some(format) = index_format {
            chunk.flows = chunk_filter::of_chunk(format, chunk.segment.data(), &chunk.linktypes);
        }
        let encoded = match chunk.decision.codec {
            Codec::Raw => Encoded::Raw,
            codec => {
                let mut bytes = buffers.take();
                // A codec's first chunk on this thread builds its context, and a chunk that
                // took a page fault measured the kernel: neither is a measure of its speed.
                let warm = encoder.is_warm(codec);
                let faults_before = thread_page_faults();
                let (started, cpu_before) = (Instant::now(), thread_cpu_seconds());
                match encoder.encode(codec, chunk.segment.data(), &mut bytes) {
                    Ok(codec) => {
                        let data = chunk.segment.data().len();
                        if warm && thread_page_faults() == faults_before {
                            controller.compressed(
                                codec,
                                (data, bytes.len()),
                                thread_cpu_seconds() - cpu_before,
                                started.elapsed().as_secs_f64(),
                            );
                        } else {
                            controller.compressed_cold(codec, (data, bytes.len()));
                        }
                        Encoded::Frame { bytes, codec }
                    }
                    Err(e) => {
                        tracing::warn!("{codec} failed on a chunk ({e}); storing it raw");
                        chunk.decision.reason = Reason::Fallback;
                        Encoded::Raw
                    }
                }
            }
        };
        pools[stream as usize].note_compression(false);
        let done = Done::Chunk(chunk, encoded);
        if txs[stream as usize]
            .send(Sequenced {
                stream,
                seq,
                item: done,
            })
            .is_err()
        {
            stats.write_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Builds each fast rung's context and buffers on a chunk-sized block of half-random bytes,
/// before the first packet's chunk: a codec's first frame costs several times the next
/// ones, which would delay the first chunks and, timed, mislead the controller. Slower
/// zstd levels would take too long here; their first chunk is left untimed instead.
fn warm_up(encoder: &mut FrameEncoder, ladder: &CodecLadder, chunk: usize) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let block: Vec<u8> = (0..chunk)
        .map(|i| {
            if (i / 512) % 2 == 0 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            } else {
                (i % 251) as u8
            }
        })
        .collect();
    let mut out = Vec::new();
    for codec in ladder.rungs() {
        let fast = matches!(codec, Codec::Lz4 | Codec::Zstd(..=3));
        // An LZ4 container holds zstd rungs as LZ4: one warm-up serves them all.
        if fast && !encoder.is_warm(codec) {
            out.clear();
            let _ = encoder.encode(codec, &block, &mut out);
        }
    }
}

/// The per-stream capture loop: copies packets into staging segments, cuts chunks and
/// files, and never waits for anything downstream.
struct CaptureLoop {
    stream: u32,
    format: Format,
    pool: Arc<StagingPool>,
    controller: Arc<SharedController>,
    to_compress: Sender<Sequenced<Chunk>>,
    to_writer: Sender<Sequenced<Done>>,
    ladder: CodecLadder,
    seq: u64,
    rotation: Rotation,
    flush_interval: Duration,

    segment: Option<Segment>,
    seg_min_ts: u64,
    seg_max_ts: u64,
    seg_packets: u32,
    seg_per_iface: Vec<u32>,
    seg_started: Instant,
    /// Bytes of packets the full pool refused since the last chunk: the controller counts
    /// them as offered.
    dropped_bytes: u64,

    file_open: bool,
    file_first_ts: u64,
    file_bytes: u64,
    file_out_of_order: u64,
    boundary: u64,
    last_ts: u64,
    rotate_pending: bool,
    interfaces: Vec<Interface>,
    /// The interfaces' link types, shared by every chunk (for the flow index).
    linktypes: Arc<[u16]>,
    counts: Vec<CaptureCounts>,
    /// See `PacketSource::live`.
    live: bool,
    control: Arc<Control>,
    hub: Arc<StatsHub>,
    /// Packets whose captured length exceeded their original length (bad input).
    length_fixups: u64,
    /// Why a packet could not be stored in the chosen format; stops the recording.
    unfit: Option<String>,
    /// See `RecorderConfig::headers`.
    headers: Option<HeaderDepth>,
}

impl CaptureLoop {
    fn new(
        stream: u32,
        cfg: &RecorderConfig,
        (pool, controller): (Arc<StagingPool>, Arc<SharedController>),
        (to_compress, to_writer): (Sender<Sequenced<Chunk>>, Sender<Sequenced<Done>>),
        control: Arc<Control>,
        hub: Arc<StatsHub>,
    ) -> CaptureLoop {
        CaptureLoop {
            stream,
            format: cfg.format,
            pool,
            controller,
            to_compress,
            to_writer,
            ladder: cfg.ladder.clone(),
            seq: 0,
            rotation: cfg.rotation,
            flush_interval: cfg.flush_interval,
            segment: None,
            seg_min_ts: u64::MAX,
            seg_max_ts: 0,
            seg_packets: 0,
            seg_per_iface: Vec::new(),
            seg_started: Instant::now(),
            dropped_bytes: 0,
            file_open: false,
            file_first_ts: 0,
            file_bytes: 0,
            file_out_of_order: 0,
            boundary: u64::MAX,
            last_ts: 0,
            rotate_pending: false,
            interfaces: Vec::new(),
            linktypes: Arc::from(Vec::new()),
            counts: Vec::new(),
            live: true,
            control,
            hub,
            length_fixups: 0,
            unfit: None,
            headers: cfg.headers,
        }
    }

    fn run<S: PacketSource>(
        mut self,
        mut source: S,
        deadline: Option<Instant>,
    ) -> Result<Vec<Interface>, String> {
        self.live = source.live();
        let control = Arc::clone(&self.control);
        let mut rotate_gen = control.rotate.load(Ordering::Relaxed);
        let mut config_gen = control.reconfigured.load(Ordering::Relaxed);
        let mut asked_to_rotate = Instant::now();
        let mut last_publish = Instant::now();
        let result = loop {
            // Before any packet: a file's header lists the interfaces its packets name.
            if let Err(e) = self.follow_interfaces(&source) {
                break Err(e);
            }
            if control.stopping() || deadline.is_some_and(|d| Instant::now() >= d) {
                break self.read_what_is_held(&mut source);
            }
            let gen = control.rotate.load(Ordering::Relaxed);
            if gen != rotate_gen {
                rotate_gen = gen;
                self.rotate_pending = self.file_open;
                asked_to_rotate = Instant::now();
            }
            let gen = control.reconfigured.load(Ordering::Relaxed);
            if gen != config_gen {
                config_gen = gen;
                if let Some(rotation) = *control.rotation.lock().unwrap() {
                    self.rotation = rotation;
                    // The open file is cut by the new limits too.
                    self.boundary = self.rotation.boundary_after(self.file_first_ts);
                }
            }
            let poll = source.poll(&mut self);
            if self.unfit.is_some() {
                break self.fits_format(&source);
            }
            let now = Instant::now();
            if self.segment.as_ref().is_some_and(|s| !s.is_empty())
                && now - self.seg_started >= self.flush_interval
            {
                self.submit_segment();
            }
            if now - last_publish >= Duration::from_millis(100) {
                self.publish(&source.counters());
                last_publish = now;
            }
            match poll {
                Ok(Poll::Delivered) => {}
                Ok(Poll::Idle) => {
                    // A quiet link still gets its files cut on time, and when asked to. A
                    // busy one rotates at its next packet (closing and opening at once);
                    // only a request no packet has come to carry out closes here, or a
                    // request arriving between this close and the next open would be lost.
                    let quiet_rotation = self.rotate_pending
                        && asked_to_rotate.elapsed() >= Duration::from_millis(200);
                    if self.live && self.file_open && (quiet_rotation || now_ns() >= self.boundary)
                    {
                        self.close_file(&source.counters());
                    }
                }
                Ok(Poll::End) => break Ok(()),
                Err(e) => break Err(e.to_string()),
            }
        };
        // A file's last interfaces may be declared after its last packet.
        let result = result.and_then(|()| self.fits_format(&source));
        let counters = source.counters();
        self.publish(&counters);
        if self.file_open {
            self.close_file(&counters);
        }
        if self.length_fixups > 0 {
            tracing::warn!(
                "{} packets had more captured bytes than their original length; each was \
                 stored with its captured length as the original one",
                self.length_fixups
            );
        }
        result.map(|_| self.interfaces)
    }

    /// Takes the source's interfaces when it has more than this loop knows (at the start,
    /// and when a file declares one late).
    fn follow_interfaces<S: PacketSource>(&mut self, source: &S) -> Result<(), String> {
        if source.interfaces().len() == self.interfaces.len() {
            return Ok(());
        }
        let mut fresh = source.interfaces().to_vec();
        // Keep the snap lengths this loop raised (see `raise_snaplen`).
        for (new, old) in fresh.iter_mut().zip(&self.interfaces) {
            new.snaplen = old.snaplen;
        }
        self.interfaces = fresh;
        self.linktypes = self.interfaces.iter().map(|f| f.linktype).collect();
        self.fits_format(source)?;
        self.grow(self.interfaces.len());
        *self.hub.streams[self.stream as usize]
            .interface_names
            .lock()
            .unwrap() = self
            .interfaces
            .iter()
            .enumerate()
            .map(|(i, f)| f.name.clone().unwrap_or_else(|| i.to_string()))
            .collect();
        // A file's header lists its interfaces: new ones start a new file.
        self.rotate_pending = self.file_open;
        Ok(())
    }

    /// At a stop, what the source took before it is recorded, not lost uncounted: it is read
    /// on for as long as it may hold packets back (at most `STOP_HOLD`), and then until a
    /// poll finds nothing, for at most `STOP_DRAIN` more (a busy link never runs dry).
    fn read_what_is_held<S: PacketSource>(&mut self, source: &mut S) -> Result<(), String> {
        let Some(held) = source.buffers_unread() else {
            return Ok(());
        };
        let held = held.min(STOP_HOLD);
        let stopped = Instant::now();
        loop {
            self.follow_interfaces(source)?;
            let poll = source.poll(self);
            if self.unfit.is_some() {
                return self.fits_format(source);
            }
            let elapsed = stopped.elapsed();
            match poll {
                Ok(Poll::Delivered) if elapsed < held + STOP_DRAIN => {}
                Ok(Poll::Idle) if elapsed < held => {}
                Ok(_) => return Ok(()),
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Classic pcap holds one interface and times before 2106: say so as soon as a source
    /// goes beyond.
    fn fits_format<S: PacketSource>(&self, source: &S) -> Result<(), String> {
        if let Some(why) = &self.unfit {
            return Err(why.clone());
        }
        let n = source.interfaces().len();
        if self.format == Format::Pcap && n > 1 {
            return Err(format!(
                "{} has {n} interfaces, and classic pcap holds one: use --format pcapng",
                source.describe()
            ));
        }
        Ok(())
    }

    fn grow(&mut self, n: usize) {
        if self.counts.len() < n {
            self.counts.resize(n, CaptureCounts::default());
            self.seg_per_iface.resize(n, 0);
        }
    }

    fn apply_source_counters(&mut self, counters: &[SourceCounters]) {
        self.grow(counters.len());
        for (c, s) in self.counts.iter_mut().zip(counters) {
            c.seen = s.seen;
            c.dropped_kernel = s.dropped;
        }
        self.raise_seen();
    }

    /// A socket's counters are read periodically and may lag what was delivered since;
    /// the source saw at least what it delivered plus what it dropped.
    fn raise_seen(&mut self) {
        for c in &mut self.counts {
            c.seen = c.seen.max(c.received + c.dropped_kernel);
        }
    }

    fn publish(&mut self, counters: &[SourceCounters]) {
        self.apply_source_counters(counters);
        self.publish_counts();
    }

    /// Publishes this loop's counters (the source's own are read less often).
    fn publish_counts(&mut self) {
        self.raise_seen();
        self.hub.streams[self.stream as usize]
            .progress_ns
            .store(now_ns(), Ordering::Relaxed);
        *self.hub.streams[self.stream as usize]
            .capture
            .lock()
            .unwrap() = self.counts.clone();
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    /// Hands an item to the writer directly. Writers outlive capture loops, so this only
    /// fails if a writer died, and then the item is lost either way.
    fn send_to_writer(&mut self, item: Done) {
        let seq = self.next_seq();
        let _ = self.to_writer.send(Sequenced {
            stream: self.stream,
            seq,
            item,
        });
    }

    fn submit_segment(&mut self) {
        let Some(segment) = self.segment.take() else {
            return;
        };
        if segment.is_empty() {
            return;
        }
        // Publish first, so no stats record ever shows a packet stored before received.
        self.publish_counts();
        let per_iface = std::mem::replace(&mut self.seg_per_iface, vec![0; self.counts.len()]);
        // When the controller calls for a raw copy, the compressors are skipped altogether:
        // at idle priority they may be the very thing that is behind.
        let decision = if self.live {
            self.controller.decide(
                (
                    segment.data().len(),
                    std::mem::take(&mut self.dropped_bytes),
                ),
                self.pool.fill(),
                self.pool.awaiting_compression(),
            )
        } else {
            Decision {
                codec: self.ladder.strongest(),
                reason: Reason::SourceWaits,
            }
        };
        let chunk = Chunk {
            segment,
            min_ts_ns: self.seg_min_ts,
            max_ts_ns: self.seg_max_ts,
            packets: self.seg_packets,
            per_iface,
            source_waits: !self.live,
            decision,
            linktypes: Arc::clone(&self.linktypes),
            flows: Vec::new(),
        };
        if decision.codec == Codec::Raw {
            self.send_to_writer(Done::Chunk(chunk, Encoded::Raw));
        } else {
            let seq = self.next_seq();
            self.pool.note_compression(true);
            let _ = self.to_compress.send(Sequenced {
                stream: self.stream,
                seq,
                item: chunk,
            });
        }
        self.seg_min_ts = u64::MAX;
        self.seg_max_ts = 0;
        self.seg_packets = 0;
    }

    fn close_file(&mut self, counters: &[SourceCounters]) {
        self.submit_segment();
        self.apply_source_counters(counters);
        let close = CloseFile {
            capture: self.counts.clone(),
            out_of_order: self.file_out_of_order,
        };
        self.send_to_writer(Done::Close(close));
        self.file_open = false;
    }

    fn open_file(&mut self, first_ts: u64) {
        self.send_to_writer(Done::Open(OpenFile {
            first_ts_ns: first_ts,
            interfaces: self.interfaces.clone(),
        }));
        self.file_open = true;
        self.file_first_ts = first_ts;
        self.file_bytes = 0;
        self.file_out_of_order = 0;
        self.rotate_pending = false;
        self.boundary = self.rotation.boundary_after(first_ts);
        self.last_ts = first_ts;
    }

    /// For a source that can wait: block until the writers free a segment, unless the
    /// recorder is stopping or a writer failed (then the packet is dropped and counted).
    #[cold]
    fn wait_for_segment(&self) -> Option<Segment> {
        loop {
            if let Some(s) = self.pool.take_waiting(Duration::from_millis(100)) {
                return Some(s);
            }
            if self.control.stopping() {
                return None;
            }
        }
    }

    /// Closes the current file (its last segment is already submitted); the packet being
    /// staged opens the next one.
    #[cold]
    fn close_for_rotation(&mut self) {
        // Counters in the statistics block are as of the last publish; exact at the end.
        let counters: Vec<SourceCounters> = self
            .counts
            .iter()
            .map(|c| SourceCounters {
                seen: c.seen,
                dropped: c.dropped_kernel,
                freezes: 0,
            })
            .collect();
        self.close_file(&counters);
    }

    #[cold]
    fn note_length_fixup(&mut self, caplen: usize, orig_len: u32) {
        self.length_fixups += 1;
        if self.length_fixups == 1 {
            tracing::warn!(
                "a packet has {caplen} captured bytes but an original length of {orig_len}; \
                 storing {caplen} as its original length (counted at the end)"
            );
        }
    }

    /// How many of the packet's bytes to stage: all, or up to where header-only capture
    /// cuts it.
    #[inline]
    fn kept_len(&self, p: &Packet<'_>) -> usize {
        match (self.headers, self.interfaces.get(p.iface as usize)) {
            (Some(depth), Some(f)) => headers_len(u32::from(f.linktype), p.data, depth),
            _ => p.data.len(),
        }
    }

    /// A packet longer than its interface's snap length (a malformed input file): declare
    /// a snap length that covers it, in a new file, rather than store a file that breaks
    /// its own header.
    #[cold]
    fn raise_snaplen(&mut self, iface: usize, caplen: usize) {
        let snaplen = (caplen as u32).max(262_144);
        tracing::warn!(
            "interface {iface} declares snap length {} but a packet has {caplen} bytes; \
             files from here on declare {snaplen}",
            self.interfaces[iface].snaplen
        );
        self.interfaces[iface].snaplen = snaplen;
        self.rotate_pending = self.file_open;
    }
}

impl PacketSink for CaptureLoop {
    fn backlog(&self) -> tapdeck_capture::Backlog {
        tapdeck_capture::Backlog {
            fill: self.pool.fill(),
            drained_bytes: self.pool.drained_bytes(),
        }
    }

    #[inline]
    fn packet(&mut self, p: &Packet<'_>) {
        let i = p.iface as usize;
        if i >= self.counts.len() {
            self.grow(i + 1);
        }
        self.counts[i].received += 1;
        let captured = p.data.len();
        if self.format == Format::Pcap && p.ts_ns >= PCAP_TIME_LIMIT_NS {
            self.counts[i].received -= 1;
            self.unfit.get_or_insert_with(|| {
                "a packet is timed after 2106-02-07, past what classic pcap's 32-bit seconds \
                 hold: use --format pcapng"
                    .to_string()
            });
            return;
        }
        // The cut comes first, so staging, compression and the disk see only kept bytes.
        let caplen = self.kept_len(p);
        if self
            .interfaces
            .get(i)
            .is_some_and(|f| f.snaplen != 0 && caplen > f.snaplen as usize)
        {
            self.raise_snaplen(i, caplen);
        }
        let mut fixed;
        let p = if caplen < captured || captured as u64 > u64::from(p.orig_len) {
            fixed = *p;
            if captured as u64 > u64::from(p.orig_len) {
                // A packet cannot have been shorter on the wire than what was captured of
                // it (bad input); store the captured length as the original one, and say so.
                self.note_length_fixup(captured, p.orig_len);
                fixed.orig_len = captured as u32;
            }
            fixed.data = &p.data[..caplen];
            &fixed
        } else {
            p
        };
        let len = self.format.record_len(p);
        let rotate = self.file_open
            && (self.rotate_pending
                || p.ts_ns >= self.boundary
                || self
                    .rotation
                    .max_bytes
                    .is_some_and(|max| self.file_bytes > 0 && self.file_bytes + len as u64 > max));
        if rotate || self.segment.as_ref().is_none_or(|s| s.room() < len) {
            self.submit_segment();
            // A cheap look before the free list, which is costly to poll per packet.
            let taken = if self.pool.has_free() {
                self.pool.try_take()
            } else if !self.live {
                self.wait_for_segment()
            } else {
                None
            };
            let Some(segment) = taken.filter(|s| s.room() >= len) else {
                // The current file stays open, so its statistics block counts this drop.
                self.counts[i].dropped_staging_full += 1;
                self.dropped_bytes += len as u64;
                return;
            };
            if rotate {
                // Only now that the packet has a place: a file is always named after a
                // packet it holds.
                self.close_for_rotation();
            }
            self.segment = Some(segment);
            self.seg_started = Instant::now();
        }
        if !self.file_open {
            self.open_file(p.ts_ns);
        }
        let segment = self.segment.as_mut().expect("segment taken above");
        let n = self.format.write_record(p, segment.spare_mut());
        segment.advance(n);
        self.seg_packets += 1;
        self.seg_per_iface[i] += 1;
        self.seg_min_ts = self.seg_min_ts.min(p.ts_ns);
        self.seg_max_ts = self.seg_max_ts.max(p.ts_ns);
        if p.ts_ns < self.last_ts {
            self.file_out_of_order += 1;
        }
        self.last_ts = p.ts_ns;
        self.file_bytes += n as u64;
        let c = &mut self.counts[i];
        c.staged_bytes += n as u64;
        c.captured_bytes += captured as u64;
        c.kept_bytes += caplen as u64;
        c.wire_bytes += u64::from(p.orig_len);
    }
}

/// Writes stats records as JSON lines.
pub struct StatsWriter {
    out: Box<dyn Write + Send>,
}

impl StatsWriter {
    pub fn new(out: Box<dyn Write + Send>) -> StatsWriter {
        StatsWriter { out }
    }

    pub fn write(&mut self, record: &StatsRecord, last: bool) {
        let mut line = serde_json::to_vec(record).expect("stats serialize");
        if last {
            // Mark the final record, so a consumer knows the numbers are settled.
            line.truncate(line.len() - 1);
            line.extend_from_slice(br#","final":true}"#);
        }
        line.push(b'\n');
        let _ = self.out.write_all(&line).and_then(|_| self.out.flush());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapdeck_capture::{SyntheticProfile, SyntheticSource};

    /// With a sync interval the writer counts packets durable while their file is still
    /// open (no rotation here), never more than it stored; at the end every stored packet
    /// is durable (the finished file was synced).
    #[test]
    fn stored_packets_become_durable_at_each_sync() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = RecorderConfig::builder(dir.path().join("store"))
            .ladder(CodecLadder::parse("zstd:1").unwrap())
            .chunk_size(1 << 20)
            .staging_bytes(4 << 20)
            .compressors(1)
            .direct(false)
            .flush_interval(Duration::from_millis(100))
            .stats_interval(Duration::from_millis(150))
            .sync_interval(Some(Duration::from_millis(300)))
            .duration(Some(Duration::from_millis(2500)))
            .build();
        let source = SyntheticSource::new(SyntheticProfile::Small, None, 7).with_rate(Some(2000.0));
        let mut seen = Vec::new();
        let summary = record(
            cfg,
            vec![source],
            Arc::new(Control::default()),
            |r, done| {
                seen.push((r.totals.stored, r.totals.durable, done));
            },
        )
        .unwrap();
        assert!(seen.iter().all(|&(s, d, _)| d <= s), "{seen:?}");
        assert!(
            seen.iter().any(|&(_, d, done)| d > 0 && !done),
            "packets became durable while the file was open: {seen:?}"
        );
        let t = summary.stats.totals;
        assert!(t.stored > 0 && t.durable == t.stored, "{t:?}");
    }
}
