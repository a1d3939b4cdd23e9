//! `tapdeck convert`: the two passes over the source files, and what ties them together.
//!
//! Pass one decodes every source (in parallel) and counts its RPC messages; the sources are
//! ordered by first packet time, and a prefix sum of the counts gives each its id offset.
//! A stitch over the files' leftovers pairs replies with calls from earlier files. Pass two
//! (in parallel, in any order, on any subset) writes each source's rows. Results of both
//! passes are kept in `_state/`, so a rerun converts only what changed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::anonymize::{Anonymization, Anonymizer};
use crate::error::{DatasetError, Result};
use crate::packets::{headers, packet_row};
use crate::rpc_sinks::RpcSinks;
use crate::rpcx::RpcEngine;
use crate::sink::{part_name, write_whole, TableSink};
use crate::source::{self, SourceFile};
pub use crate::span::Span;
use crate::span::{MAX_WARM_UP_FILES, WARM_UP_BYTES, WARM_UP_NS};
use tapdeck_store::read::StoredFile;

use crate::state::{PassOne, PassTwo, PassTwoInput, RemoteCall, RowGroupRowState, StateDir};
use crate::tables::{CaptureStatsRow, PacketRow, RowGroupRow, SourceRow, SCHEMA_VERSION};

/// How long a call waits for its reply across file boundaries.
const STITCH_WINDOW_NS: i64 = 300 * 1_000_000_000;

/// Receives (stage, done, total) as work completes.
pub type Progress = Box<dyn Fn(&str, usize, usize) + Sync>;

pub struct ConvertOptions {
    pub out: PathBuf,
    /// Worker threads.
    pub jobs: usize,
    /// Convert only the sources whose index in the plan is `i` modulo `n`.
    pub shard: Option<(usize, usize)>,
    pub anonymization: Anonymization,
    /// Write the packets table (on by default; NFS-only datasets can skip it).
    pub packets: bool,
    /// Called with (stage, done, total) as work completes.
    pub progress: Option<Progress>,
}

/// What a conversion did.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub sources: usize,
    pub converted: usize,
    pub skipped: usize,
    pub pass_one_cached: usize,
    /// Counters summed over the converted sources: packets, rpc calls/replies, unmatched,
    /// nfs operations, parse failures per reason, rows per table.
    pub counts: BTreeMap<String, u64>,
    pub seconds: f64,
    /// Sources of the dataset without converted rows yet (other shards still to run, or
    /// interrupted): the dataset is incomplete while any are.
    pub missing_sources: Vec<String>,
}

/// An exclusive lock on a dataset directory (`flock` on `DATASET/.lock`), held while the
/// catalog and `dataset.json` are written, so that shards running at the same time on one
/// machine (or on several, over a filesystem with working locks) do not interleave.
struct DatasetLock {
    _file: std::fs::File,
}

impl DatasetLock {
    fn take(out: &Path) -> Result<DatasetLock> {
        let path = out.join(".lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(DatasetError::io("open", &path))?;
        // SAFETY: flock on a descriptor this function owns; no memory is involved.
        if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX) } != 0 {
            return Err(DatasetError::Io {
                action: "lock",
                path,
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(DatasetLock { _file: f })
    }
}

/// Converts `inputs` into the dataset at `opts.out`: pass one over the sources that changed,
/// ids and stitching over all of them, pass two over this run's (or this shard's) share, then
/// the catalog and `dataset.json`. Warnings (skipped files, damaged sources, an idle shard) go
/// to `warn`.
pub fn convert(
    inputs: &[PathBuf],
    opts: &ConvertOptions,
    warn: &mut impl FnMut(String),
) -> Result<Report> {
    let started = Instant::now();
    let sources = source::discover(inputs, warn)?;
    std::fs::create_dir_all(&opts.out).map_err(DatasetError::io("create", &opts.out))?;
    check_dataset_json(&opts.out, &opts.anonymization)?;
    let state = StateDir::new(&opts.out);
    let mut report = Report::default();

    let (known, chains) = known_sources(&sources, &state, opts.jobs)?;
    let (plan, single) = pass_one_all(&known, &chains, opts, &state, &mut report, warn)?;

    // Ids and stitch, then pass two.
    let anon = &opts.anonymization;
    let inputs2 = stitch(&plan, anon.key_id(), anon.addresses);
    report.sources = plan.len();
    let work = pass_two_work(&plan, &inputs2, single.as_ref(), opts, &state, &mut report)?;
    if let Some((k, n)) = opts.shard.filter(|&(k, _)| k >= plan.len()) {
        warn(format!(
            "shard {k}/{n} has no source to convert: --shard splits the work by file, and there are {} files; shards 0 to {} convert them",
            plan.len(),
            plan.len().saturating_sub(1).min(n - 1)
        ));
    }
    if !work.is_empty() {
        let missing: Vec<String> = work.iter().map(|(s, _)| s.path.clone()).collect();
        mark_incomplete(opts, &missing)?;
    }
    let written = parallel(
        &work,
        opts.jobs,
        |(s, input)| pass_two(s, input, &opts.out, anon, opts.packets, &chains).map(|(two, _)| two),
        |d, t| {
            if let Some(p) = &opts.progress {
                p("pass 2", d, t)
            }
        },
    )?;
    let written: Vec<PassTwo> = single.into_iter().chain(written).collect();
    for w in &written {
        state.save_pass_two(w)?;
        for (k, v) in &w.counts {
            *report.counts.entry(k.clone()).or_default() += v;
        }
    }
    report.converted = written.len();

    // Shards running at the same time each write the catalog from every shard's results
    // so far, one at a time: the last to finish sees them all.
    let _lock = DatasetLock::take(&opts.out)?;
    let missing = write_catalog(&opts.out, &plan, &inputs2, &state)?;
    write_dataset_json(&opts.out, &opts.anonymization, &missing)?;
    report.missing_sources = missing;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Pass one's result for every known source, cached where a file and its neighbours are
/// unchanged, in time order; and pass two's result when a single new source was converted
/// in one pass.
fn pass_one_all(
    known: &[SourceFile],
    chains: &Chains,
    opts: &ConvertOptions,
    state: &StateDir,
    report: &mut Report,
    warn: &mut impl FnMut(String),
) -> Result<(Vec<PassOne>, Option<PassTwo>)> {
    // Pass one again where a file or its neighbours changed (a new file next to an
    // earlier one changes what the earlier one's end pairs with).
    let mut plan: BTreeMap<String, PassOne> = BTreeMap::new();
    let mut todo = Vec::new();
    for s in known {
        match state
            .pass_one(s)
            .filter(|p| p.neighbours == chains.neighbours(&s.path))
        {
            Some(p) => {
                report.pass_one_cached += 1;
                plan.insert(s.path.clone(), p);
            }
            None => todo.push(s.clone()),
        }
    }
    // One source and nothing else in the dataset: its ids start at 0 and no other file holds
    // its calls or replies, so a single pass writes its rows, and pass one's record comes
    // out of that pass.
    let (single, counted) = if plan.is_empty() && todo.len() == 1 && opts.shard.is_none() {
        let (two, one) = convert_single(&todo[0], chains, opts)?;
        (Some(two), vec![one])
    } else {
        let counted = parallel(
            &todo,
            opts.jobs,
            |s| pass_one(s, &opts.anonymization, chains),
            |d, t| {
                if let Some(p) = &opts.progress {
                    p("pass 1", d, t)
                }
            },
        )?;
        (None, counted)
    };
    for p in counted {
        if let Some(d) = &p.defect {
            warn(d.clone());
        }
        state.save_pass_one(&p)?;
        plan.insert(p.source.path.clone(), p);
    }
    let mut plan: Vec<PassOne> = plan.into_values().collect();
    plan.sort_by(|a, b| {
        (a.first_time_ns.unwrap_or(i64::MAX), &a.source.path)
            .cmp(&(b.first_time_ns.unwrap_or(i64::MAX), &b.source.path))
    });
    Ok((plan, single))
}

/// The single source of a new dataset, converted in one pass with file id 0.
fn convert_single(
    s: &SourceFile,
    chains: &Chains,
    opts: &ConvertOptions,
) -> Result<(PassTwo, PassOne)> {
    let anon = &opts.anonymization;
    let mut input = base_input(0, anon.key_id(), anon.addresses);
    input.neighbours = chains.neighbours(&s.path);
    mark_incomplete(opts, std::slice::from_ref(&s.path))?;
    remove_parts(&opts.out, 0)?;
    let r = pass_two(s, &input, &opts.out, anon, opts.packets, chains)?;
    if let Some(p) = &opts.progress {
        p("convert", 1, 1);
    }
    Ok(r)
}

/// Before any rows are written: until the last are written and checked the dataset is
/// incomplete, and an interrupted run leaves it marked so.
fn mark_incomplete(opts: &ConvertOptions, missing: &[String]) -> Result<()> {
    let _lock = DatasetLock::take(&opts.out)?;
    write_dataset_json(&opts.out, &opts.anonymization, missing)
}

/// Every source of the dataset: this run's and (as they are now on disk) earlier runs', and
/// which of them continue one another.
fn known_sources(
    sources: &[SourceFile],
    state: &StateDir,
    jobs: usize,
) -> Result<(Vec<SourceFile>, Chains)> {
    let mut known: Vec<SourceFile> = sources.to_vec();
    for p in state.all_pass_one() {
        if let Ok(now) = SourceFile::stat(Path::new(&p.source.path)) {
            known.push(now);
        }
    }
    known.sort_by(|a, b| a.path.cmp(&b.path));
    known.dedup_by(|a, b| a.path == b.path);
    let spans = plain_spans(&known, state, jobs)?;
    let paths: Vec<String> = known.iter().map(|s| s.path.clone()).collect();
    Ok((known, Chains::new(&paths, &spans)))
}

/// The sources pass two converts in this run (this shard's, whose inputs changed or that
/// were never converted), their stale parts removed.
fn pass_two_work(
    plan: &[PassOne],
    inputs: &[PassTwoInput],
    single: Option<&PassTwo>,
    opts: &ConvertOptions,
    state: &StateDir,
    report: &mut Report,
) -> Result<Vec<(SourceFile, PassTwoInput)>> {
    let mut work = Vec::new();
    for (i, (p, input)) in plan.iter().zip(inputs).enumerate() {
        if single.is_some_and(|w| w.source == p.source) {
            debug_assert!(single.is_some_and(|w| w.input == *input));
            continue;
        }
        if opts.shard.is_some_and(|(k, n)| i % n != k) {
            continue;
        }
        let done = state.pass_two(&p.source);
        if done.as_ref().is_some_and(|d| {
            d.input == *input
                && d.capture_stats_version == crate::capture::VERSION
                && parts_exist(&opts.out, d)
        }) {
            report.skipped += 1;
            continue;
        }
        // Each id's parts are removed only by the shard that converts the source now
        // holding that id (before it writes them), so shards running at the same time never
        // delete each other's rows when a new source renumbers the others.
        if let Some(d) = done.filter(|d| d.input.file_id as usize >= plan.len()) {
            remove_parts(&opts.out, d.input.file_id)?;
        }
        remove_parts(&opts.out, input.file_id)?;
        work.push((p.source.clone(), input.clone()));
    }
    Ok(work)
}

/// The spans of the plain (not stored) trace files among `sources`, when there are at
/// least two, so that files of one capture can be chained; cached in the state directory.
fn plain_spans(sources: &[SourceFile], state: &StateDir, jobs: usize) -> Result<Vec<Span>> {
    let plain: Vec<SourceFile> = sources
        .iter()
        .filter(|s| chain_key(&s.path).is_none())
        .cloned()
        .collect();
    if plain.len() < 2 {
        return Ok(Vec::new());
    }
    let (mut spans, mut todo) = (Vec::new(), Vec::new());
    for s in plain {
        match state.span(&s) {
            Some(span) => spans.push(span),
            None => todo.push(s),
        }
    }
    for span in parallel(&todo, jobs, Span::scan, |_, _| {})? {
        state.save_span(&span)?;
        spans.push(span);
    }
    Ok(spans)
}

/// Runs `f` over `items` on `jobs` threads; results in input order; the first error wins.
fn parallel<I: Sync, O: Send>(
    items: &[I],
    jobs: usize,
    f: impl Fn(&I) -> Result<O> + Sync,
    progress: impl Fn(usize, usize) + Sync,
) -> Result<Vec<O>> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<O>>>> =
        Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1).min(items.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= items.len() {
                    break;
                }
                let r = f(&items[i]);
                let failed = r.is_err();
                results.lock().unwrap()[i] = Some(r);
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, items.len());
                if failed {
                    // Stop handing out work; the others finish what they hold.
                    next.store(items.len(), Ordering::Relaxed);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap()
        .into_iter()
        .flatten()
        .collect()
}

/// Pass one: count packets and RPC messages, note leftovers.
fn pass_one(s: &SourceFile, anon: &Anonymization, chains: &Chains) -> Result<PassOne> {
    let mut reader = source::open(&s.path)?;
    let mut engine = RpcEngine::new(0, None);
    let mut anonymizer = anon.worker();
    chains.warm_up(&s.path, &mut engine, &mut anonymizer)?;
    let scan = scan(s, &mut reader, |h, p, t, record| {
        engine.packet(h, p.data, t, record, &mut anonymizer, None)
    })?;
    let r = engine.finish(&mut anonymizer, None)?;
    Ok(scan.pass_one(s, r, chains.neighbours(&s.path)))
}

/// What reading one source through gives, whichever pass reads it.
struct Scan {
    format: String,
    packets: u64,
    first_time_ns: Option<i64>,
    last_time_ns: Option<i64>,
    /// Where a damaged file stopped being readable.
    defect: Option<String>,
}

impl Scan {
    fn pass_one(
        self,
        s: &SourceFile,
        rpc: crate::rpcx::RpcResult,
        neighbours: (Vec<String>, Option<String>),
    ) -> PassOne {
        PassOne {
            source: s.clone(),
            format: self.format,
            packets: self.packets,
            first_time_ns: self.first_time_ns,
            last_time_ns: self.last_time_ns,
            messages: rpc.messages,
            open_calls: rpc.open_calls,
            answered_warm: rpc.answered_warm,
            orphan_replies: rpc.orphan_replies,
            defect: self.defect,
            neighbours,
        }
    }
}

/// Reads every packet of a source, dissects it and hands it to `each` with its time and
/// 1-based record number. A damaged file is read up to its defect, which is reported in the
/// result rather than as an error: its packets before the defect are converted.
fn scan<R: std::io::Read>(
    s: &SourceFile,
    reader: &mut tapdeck_pcap::TraceReader<R>,
    mut each: impl FnMut(
        &tapdeck_decode::Headers<'_>,
        &tapdeck_pcap::Packet<'_>,
        i64,
        i64,
    ) -> Result<()>,
) -> Result<Scan> {
    let format = tapdeck_store::meta::format_name(reader.format()).to_string();
    let (mut packets, mut first, mut last) = (0u64, None, None);
    let mut defect = None;
    loop {
        let ctx = match reader.next_packet_with_context() {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                defect = Some(format!(
                    "{}: {e}; converted the {packets} packets before it",
                    s.path
                ));
                break;
            }
        };
        packets += 1;
        let p = ctx.packet;
        let t = p.ts_ns as i64;
        first.get_or_insert(t);
        last = Some(t);
        let linktype = ctx
            .interfaces
            .get(p.iface as usize)
            .map_or(1, |i| i.linktype);
        each(&headers(linktype, p.data), &p, t, packets as i64)?;
    }
    Ok(Scan {
        format,
        packets,
        first_time_ns: first,
        last_time_ns: last,
        defect,
    })
}

/// Gives each file its id, and pairs replies with calls from earlier files: those a file's
/// warm-up over its predecessor's end already paired, then replies left without a call
/// with the latest open call on their connection and xid that came before them.
fn stitch(plan: &[PassOne], key_id: Option<String>, addresses: bool) -> Vec<PassTwoInput> {
    let mut inputs: Vec<PassTwoInput> = Vec::with_capacity(plan.len());
    for (i, p) in plan.iter().enumerate() {
        let mut input = base_input(i as i32, key_id.clone(), addresses);
        input.neighbours = p.neighbours.clone();
        inputs.push(input);
    }
    // Open calls of earlier files, by conversation and xid: (file index, call).
    let mut open: HashMap<(String, u32), (usize, crate::state::OpenCall)> = HashMap::new();
    let mut open_ids: HashMap<i64, (String, u32)> = HashMap::new();
    for (i, p) in plan.iter().enumerate() {
        for id in &p.answered_warm {
            let Some(key) = open_ids.remove(id) else {
                continue;
            };
            if open.get(&key).is_some_and(|(_, c)| c.id == *id) {
                let (file, call) = open.remove(&key).expect("checked above");
                inputs[file].answered_later.push(call.id);
            }
        }
        for r in &p.orphan_replies {
            let key = (r.conv.clone(), r.xid);
            let fresh = open.get(&key).is_some_and(|(_, c)| {
                c.time_ns <= r.time_ns && r.time_ns - c.time_ns <= STITCH_WINDOW_NS
            });
            if fresh {
                let (file, call) = open.remove(&key).expect("checked above");
                open_ids.remove(&call.id);
                inputs[i].remote_replies.insert(
                    r.id,
                    RemoteCall {
                        transaction_id: call.id,
                        program: call.program,
                        version: call.version,
                        procedure: call.procedure,
                        time_ns: call.time_ns,
                    },
                );
                inputs[file].answered_later.push(call.id);
            }
        }
        for c in &p.open_calls {
            let key = (c.conv.clone(), c.xid);
            if let Some((_, old)) = open.insert(key.clone(), (i, c.clone())) {
                open_ids.remove(&old.id);
            }
            open_ids.insert(c.id, key);
        }
    }
    for input in &mut inputs {
        input.answered_later.sort_unstable();
    }
    inputs
}

/// A file's pass-two input before the stitch adds what other files tell about it.
fn base_input(file_id: i32, key_id: Option<String>, addresses: bool) -> PassTwoInput {
    PassTwoInput {
        file_id,
        remote_replies: BTreeMap::new(),
        answered_later: Vec::new(),
        anonymization: key_id.map(|k| format!("{k}{}", if addresses { "+ips" } else { "" })),
        converter: format!("tapdeck {}", env!("CARGO_PKG_VERSION")),
        neighbours: (Vec::new(), None),
    }
}

/// Pass two: every table's rows for one source.
fn pass_two(
    s: &SourceFile,
    input: &PassTwoInput,
    out: &Path,
    anon: &Anonymization,
    with_packets: bool,
    chains: &Chains,
) -> Result<(PassTwo, PassOne)> {
    let mut reader = source::open(&s.path)?;
    let file_id = input.file_id;
    let mut packets_sink = with_packets.then(|| TableSink::<PacketRow>::new(out, file_id, &s.path));
    let mut sinks = RpcSinks::new(out, file_id, &s.path);
    let mut engine = RpcEngine::new(file_id, Some(input));
    let mut anonymizer: Anonymizer = anon.worker();
    chains.warm_up(&s.path, &mut engine, &mut anonymizer)?;
    // Packets, first and last time per interface (indexed by interface).
    let mut per_iface: Vec<(u64, i64, i64)> = Vec::new();
    let scan = scan(s, &mut reader, |h, p, t, record| {
        let i = p.iface as usize;
        if per_iface.len() <= i {
            per_iface.resize(i + 1, (0, i64::MAX, i64::MIN));
        }
        let e = &mut per_iface[i];
        e.0 += 1;
        e.1 = e.1.min(t);
        e.2 = e.2.max(t);
        if let Some(sink) = &mut packets_sink {
            sink.push(packet_row(h, p, file_id, record, &mut anonymizer))?;
        }
        engine.packet(h, p.data, t, record, &mut anonymizer, Some(&mut sinks))
    })?;
    let mut rpc = engine.finish(&mut anonymizer, Some(&mut sinks))?;
    let (packets, damaged) = (scan.packets, scan.defect.is_some());
    let mut counts = std::mem::take(&mut rpc.counts);
    let one = scan.pass_one(s, rpc, input.neighbours.clone());
    counts.insert("packets".into(), packets);
    if damaged {
        counts.insert("failed.damaged_source".into(), 1);
    }
    let mut row_groups: Vec<RowGroupRow> = Vec::new();
    // The packets table finishes while the RPC tables do.
    let packets_closing = match packets_sink {
        Some(sink) => {
            counts.insert("rows.packets".into(), sink.rows());
            Some(sink.close()?)
        }
        None => None,
    };
    let rpc_groups = sinks.finish(&mut counts);
    if let Some(c) = packets_closing {
        row_groups.extend(c.join()?);
    }
    row_groups.extend(rpc_groups?);

    // What the file says about its own capture (its statistics blocks, or its chunk index).
    let capture_stats = crate::capture::capture_stats(
        &s.path,
        reader.interfaces(),
        reader.stats(),
        &per_iface,
        crate::capture::Neighbours {
            previous: chains.prev.get(&s.path).map(String::as_str),
            last: !chains.next.contains_key(&s.path),
        },
    );
    let rows: Vec<CaptureStatsRow> = capture_stats.iter().map(|c| c.row(file_id)).collect();
    write_whole(
        &out.join("capture_stats").join(part_name(file_id)),
        "capture_stats",
        &CaptureStatsRow::batch(&rows),
    )?;
    let two = PassTwo {
        source: s.clone(),
        input: input.clone(),
        row_groups: row_groups.iter().map(RowGroupRowState::from).collect(),
        capture_stats,
        counts,
        capture_stats_version: crate::capture::VERSION,
    };
    Ok((two, one))
}

/// Every table directory of the dataset (for removing a source's parts).
const TABLE_DIRS: &[&str] = &[
    "packets",
    "rpc",
    "nfs_ops",
    "nfs_rw",
    "nfs_attrs",
    "nfs_names",
    "mount",
    "nlm_ops",
    "capture_stats",
];

fn parts_exist(out: &Path, d: &PassTwo) -> bool {
    d.row_groups.iter().all(|r| out.join(&r.path).exists())
}

/// Deletes every data file a source id owns, in every table and partition.
fn remove_parts(out: &Path, file_id: i32) -> Result<()> {
    let name = part_name(file_id);
    for table in TABLE_DIRS {
        let dir = out.join(table);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut dirs = vec![dir.clone()];
        dirs.extend(
            entries
                .flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.path()),
        );
        for d in dirs {
            let p = d.join(&name);
            if p.exists() {
                std::fs::remove_file(&p).map_err(DatasetError::io("remove", &p))?;
            }
        }
    }
    Ok(())
}

/// Writes the catalog; returns the sources that have no rows written with the current
/// plan's inputs yet.
fn write_catalog(
    out: &Path,
    plan: &[PassOne],
    inputs: &[PassTwoInput],
    state: &StateDir,
) -> Result<Vec<String>> {
    let mut sources = Vec::new();
    let mut groups = Vec::new();
    let mut missing = Vec::new();
    for (p, input) in plan.iter().zip(inputs) {
        sources.push(SourceRow {
            file_id: input.file_id,
            path: p.source.path.clone(),
            size: p.source.size as i64,
            mtime_ns: p.source.mtime_ns,
            format: p.format.clone(),
            packets: p.packets as i64,
            first_time_ns: p.first_time_ns,
            last_time_ns: p.last_time_ns,
            rpc_messages: p.messages as i64,
        });
        // Only files written with the current plan's inputs count; others are stale (a
        // shard not yet run) and are left out rather than listed wrongly.
        match state
            .pass_two(&p.source)
            .filter(|d| d.input == *input && parts_exist(out, d))
        {
            Some(done) => groups.extend(done.row_groups.iter().map(RowGroupRow::from)),
            None => missing.push(p.source.path.clone()),
        }
    }
    let dir = out.join("catalog");
    write_whole(
        &dir.join("sources.parquet"),
        "sources",
        &SourceRow::batch(&sources),
    )?;
    write_whole(
        &dir.join("row_groups.parquet"),
        "row_groups",
        &RowGroupRow::batch(&groups),
    )?;
    Ok(missing)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct DatasetJson {
    name: String,
    schema_version: u32,
    converter: String,
    key_id: Option<String>,
    addresses_anonymized: bool,
    /// False while sources of the catalog have no converted rows (a conversion running or
    /// interrupted, shards still to run); analyses refuse an incomplete dataset.
    #[serde(default = "yes")]
    complete: bool,
    #[serde(default)]
    missing_sources: Vec<String>,
}

fn yes() -> bool {
    true
}

/// A dataset made with one key (or none) must not silently mix in rows made with another.
fn check_dataset_json(out: &Path, anon: &Anonymization) -> Result<()> {
    let path = out.join("dataset.json");
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(());
    };
    let d: DatasetJson = serde_json::from_slice(&bytes)
        .map_err(|source| DatasetError::DatasetJson { path, source })?;
    if d.schema_version > SCHEMA_VERSION {
        return Err(DatasetError::NewerSchema {
            dir: out.to_path_buf(),
            schema_version: d.schema_version,
        });
    }
    if d.key_id != anon.key_id() || d.addresses_anonymized != anon.addresses {
        return Err(DatasetError::AnonymizationMismatch {
            dir: out.to_path_buf(),
            key_id: d.key_id,
            addresses_anonymized: d.addresses_anonymized,
        });
    }
    Ok(())
}

fn write_dataset_json(out: &Path, anon: &Anonymization, missing: &[String]) -> Result<()> {
    let d = DatasetJson {
        name: out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        schema_version: SCHEMA_VERSION,
        converter: format!("tapdeck {}", env!("CARGO_PKG_VERSION")),
        key_id: anon.key_id(),
        addresses_anonymized: anon.addresses,
        complete: missing.is_empty(),
        missing_sources: missing.to_vec(),
    };
    let path = out.join("dataset.json");
    let body = serde_json::to_string_pretty(&d).expect("serializes");
    let tmp = out.join(format!(".dataset.json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, body + "\n")
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(DatasetError::io("write", path))
}

/// The files that continue one another, read as one capture: a tapdeck store's files of
/// one stream (same directory and stream, consecutive sequence numbers), and plain trace
/// files of the same interfaces whose times follow on without overlap (one capture cut
/// into files, as `editcap -c` or `tcpdump -C` do). A TCP message cut by a file boundary is
/// reassembled by the file it completes in, after a warm-up over the end of its
/// predecessor, which also lets replies there find their calls before the cut.
pub struct Chains {
    prev: HashMap<String, String>,
    next: HashMap<String, String>,
    /// Plain files' spans (stored files have a chunk index instead).
    spans: HashMap<String, Span>,
    /// Stored files' first and last packet times from their chunk index, read once per
    /// run however often a warm-up plan is asked for (None: unreadable, which ends a
    /// warm-up there).
    stored_spans: Mutex<HashMap<String, Option<TimeSpan>>>,
}

/// First and last packet time, where known.
type TimeSpan = (Option<u64>, Option<u64>);

impl Chains {
    /// `paths`: every source of the dataset; `spans`: those of its plain files.
    pub fn new(paths: &[String], spans: &[Span]) -> Chains {
        let (mut prev, mut next) = (HashMap::new(), HashMap::new());
        let mut by_key = HashMap::new();
        for p in paths {
            if let Some(k) = chain_key(p) {
                by_key.insert(k, p.clone());
            }
        }
        for ((dir, stream, seq), p) in &by_key {
            if let Some(n) = seq
                .checked_add(1)
                .and_then(|s| by_key.get(&(dir.clone(), *stream, s)))
            {
                next.insert(p.clone(), n.clone());
                prev.insert(n.clone(), p.clone());
            }
        }
        let mut plain: Vec<&Span> = spans
            .iter()
            .filter(|s| s.first_time_ns.is_some() && chain_key(&s.source.path).is_none())
            .collect();
        plain.sort_by(|a, b| {
            (&a.interfaces, a.first_time_ns, &a.source.path).cmp(&(
                &b.interfaces,
                b.first_time_ns,
                &b.source.path,
            ))
        });
        for w in plain.windows(2) {
            let (a, b) = (w[0], w[1]);
            if a.interfaces == b.interfaces && b.first_time_ns >= a.last_time_ns {
                next.insert(a.source.path.clone(), b.source.path.clone());
                prev.insert(b.source.path.clone(), a.source.path.clone());
            }
        }
        let spans = spans
            .iter()
            .map(|s| (s.source.path.clone(), s.clone()))
            .collect();
        Chains {
            prev,
            next,
            spans,
            stored_spans: Mutex::default(),
        }
    }

    /// What a file's rows depend on besides its own bytes: the earlier files its warm-up
    /// reads (latest first) and the file that continues it.
    pub fn neighbours(&self, path: &str) -> (Vec<String>, Option<String>) {
        (self.warm_plan(path).0, self.next.get(path).cloned())
    }

    /// Feeds the last `WARM_UP_NS` of the capture before `path` into `engine` (from as
    /// many earlier files as that spans), and tells it whether a next file continues this
    /// one. A predecessor that cannot be read ends the warm-up there.
    fn warm_up(&self, path: &str, engine: &mut RpcEngine, anon: &mut Anonymizer) -> Result<()> {
        engine.set_continued(self.next.contains_key(path));
        let (files, from) = self.warm_plan(path);
        for path in files.iter().rev() {
            match self.spans.get(path) {
                Some(span) => warm_up_plain(path, span.warm_offset, from, engine, anon)?,
                None => {
                    if let Ok(file) = StoredFile::open(Path::new(path)) {
                        warm_up_stored(&file, from, engine, anon)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A stored file's packet time span, from its chunk index (read once).
    fn stored_span(&self, path: &str) -> Option<TimeSpan> {
        let mut known = self.stored_spans.lock().expect("not poisoned");
        *known.entry(path.to_string()).or_insert_with(|| {
            let file = StoredFile::open(Path::new(path)).ok()?;
            let first = file.packet_chunks().map(|e| e.first_ts_ns).min();
            let last = file.packet_chunks().map(|e| e.last_ts_ns).max();
            Some((first, last))
        })
    }

    /// The files before `path` that cover the warm-up span (latest first), and the time
    /// the warm-up starts at.
    fn warm_plan(&self, path: &str) -> (Vec<String>, u64) {
        // Walk back until the files cover the warm-up span (bounded).
        let mut files: Vec<String> = Vec::new();
        let mut cursor = path.to_string();
        let mut end: Option<u64> = None;
        let mut plain_bytes = 0u64;
        while files.len() < MAX_WARM_UP_FILES {
            let Some(prev) = self.prev.get(&cursor).cloned() else {
                break;
            };
            let (first, last) = match self.spans.get(&prev) {
                Some(s) => (
                    s.first_time_ns.map(|t| t.max(0) as u64),
                    s.last_time_ns.map(|t| t.max(0) as u64),
                ),
                None => match self.stored_span(&prev) {
                    Some(span) => span,
                    None => break,
                },
            };
            let stream_end = *end.get_or_insert(last.unwrap_or(0));
            // Plain files: enough once they hold the byte bound.
            plain_bytes += self.spans.get(&prev).map_or(0, |s| s.source.size);
            files.push(prev.clone());
            if plain_bytes >= WARM_UP_BYTES
                || first.is_some_and(|f| f <= stream_end.saturating_sub(WARM_UP_NS))
            {
                break;
            }
            cursor = prev;
        }
        let from = end.unwrap_or(0).saturating_sub(WARM_UP_NS);
        (files, from)
    }
}

fn warm_up_stored(
    file: &StoredFile,
    from: u64,
    engine: &mut RpcEngine,
    anon: &mut Anonymizer,
) -> Result<()> {
    let Ok(header) = file.read_header() else {
        return Ok(());
    };
    let interfaces = file.interfaces();
    let mut scratch = Vec::new();
    for entry in file.packet_chunks().filter(|e| e.last_ts_ns >= from) {
        let Ok(chunk) = file.read_chunk(&header, entry, &mut scratch) else {
            return Ok(());
        };
        for i in 0..chunk.len() {
            let p = chunk.packet(i);
            if p.ts_ns < from {
                continue;
            }
            let linktype = interfaces.get(p.iface as usize).map_or(1, |i| i.linktype);
            engine.warm_up(&headers(linktype, p.data), p.data, p.ts_ns as i64, anon)?;
        }
    }
    Ok(())
}

/// Feeds a plain file's packets from `from` on, reading from `offset` (its span's warm
/// offset: nothing before it is that recent) where the file is mapped.
fn warm_up_plain(
    path: &str,
    offset: Option<u64>,
    from: u64,
    engine: &mut RpcEngine,
    anon: &mut Anonymizer,
) -> Result<()> {
    let Ok(mut reader) = source::open(path) else {
        return Ok(());
    };
    // The first packet, read to learn the interfaces declared before it; then on from
    // the warm offset (which is at or after it).
    let mut skip = offset;
    loop {
        let ctx = match reader.next_packet_with_context() {
            Ok(Some(c)) => c,
            _ => return Ok(()),
        };
        if let Some(o) = skip.take() {
            if ctx.offset < o {
                reader.skip_to(o);
                continue;
            }
        }
        let p = ctx.packet;
        if p.ts_ns < from {
            continue;
        }
        let linktype = ctx
            .interfaces
            .get(p.iface as usize)
            .map_or(1, |i| i.linktype);
        engine.warm_up(&headers(linktype, p.data), p.data, p.ts_ns as i64, anon)?;
    }
}

/// A stored file's place in its store: (store, stream, sequence). The store is known by the
/// id its data directories carry, so that a stream's files chain across the directories a
/// recorder spreads them over (by the directory itself for stores older than the ids).
fn chain_key(path: &str) -> Option<(String, u32, u64)> {
    let p = Path::new(path);
    let name = p.file_name()?.to_str()?;
    let name = tapdeck_store::meta::DataName::parse(name)?;
    let dir = p.parent()?;
    let store = tapdeck_store::meta::DirMark::read(dir)
        .map_or_else(|| dir.display().to_string(), |m| m.store_id);
    Some((store, name.stream, name.seq))
}
