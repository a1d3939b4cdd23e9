//! `tapdeck merge`: the stores of several monitors (behind a traffic split, or taps of the
//! two directions of a link) into one store, by time.
//!
//! The packets come out of the same streaming k-way merge `extract` uses ([`Merger`]), with
//! each store's clock offset applied, and go through the recorder as a source that waits
//! (like a file replay), so the output is an ordinary store: chunked, indexed, compressed,
//! with a manifest that names the inputs, their offsets and their clock state.
//! Memory is bounded: one decoded chunk per input stream, the staging pool, and (with
//! `--dedup`) the frames of the last dedup window.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tapdeck_capture::{PacketSink, PacketSource, Poll, SourceCounters, SourceError};
use tapdeck_pcap::{Interface, Packet};

use crate::error::{MergeError, OffsetProblem, TimeError};
use crate::pipeline::Control;
use crate::recorder::{self, RecorderConfig, Summary};
use crate::stats::StatsRecord;
use tapdeck_store::extract::{self, corrected, Merger, StoreInput, TimeWindow};
use tapdeck_store::meta::{self, ClockSync, InterfaceCounts, MergeManifest, MergedInput};
use tapdeck_store::read::{FileError, Store, StoredFile};

/// Packets handed to the recorder per poll.
const BATCH: usize = 512;

/// Inputs are told apart in a 64-bit mask (see [`Dedup`]).
pub const MAX_INPUTS: usize = 64;

/// Default `--dedup-window`: two monitors of one link stamp a frame within microseconds of
/// each other; NTP keeps LAN hosts within about a millisecond.
pub const DEFAULT_DEDUP_WINDOW_NS: u64 = 1_000_000;

/// Frames remembered for deduplication at most; beyond, the oldest are forgotten early
/// (and counted), so a huge window cannot exhaust memory.
const DEDUP_MAX_FRAMES: usize = 1 << 18;

/// One input store and its clock correction.
#[derive(Debug, Clone)]
pub struct InputSpec {
    pub root: PathBuf,
    pub offset_ns: i64,
}

pub struct MergeOptions {
    pub window: TimeWindow,
    /// `Some(ns)`: drop frames another input already delivered within `ns` (see [`Dedup`]).
    pub dedup_window_ns: Option<u64>,
}

/// What an input store says about itself, from its manifest and its files' trailers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StoreSurvey {
    pub store: String,
    pub label: String,
    pub host: Option<String>,
    pub offset_ns: i64,
    pub clock: Option<ClockSync>,
    pub files: u64,
    /// Files a recorder left incomplete (`.NAME.partial`): not read, named in a warning.
    pub incomplete_files: u64,
    /// First and last packet time as recorded (before the offset).
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: Option<u64>,
    /// Packets stored, by the files' metadata.
    pub packets: u64,
    /// Drops its recorder counted, by cause (summed over streams; restarts handled).
    pub dropped_kernel: u64,
    pub dropped_staging_full: u64,
    pub dropped_write_error: u64,
}

impl StoreSurvey {
    /// The span with the offset applied, if the store holds packets.
    pub fn corrected_span(&self) -> Option<(u64, u64)> {
        Some((
            corrected(self.first_ts_ns?, self.offset_ns),
            corrected(self.last_ts_ns?, self.offset_ns),
        ))
    }
}

/// Reads every file's trailer of `store`. A file whose trailer cannot be read is an error
/// naming it: the merge stops before writing anything.
pub fn survey(store: &Store, spec: &InputSpec, label: &str) -> Result<StoreSurvey, FileError> {
    let manifest = store.manifest.as_ref();
    let mut s = StoreSurvey {
        store: spec.root.display().to_string(),
        label: label.to_string(),
        host: manifest.map(|m| m.host.clone()),
        offset_ns: spec.offset_ns,
        clock: manifest.and_then(|m| m.clock),
        incomplete_files: store.partials.len() as u64,
        ..Default::default()
    };
    let mut metas = Vec::new();
    for path in &store.files {
        metas.push(StoredFile::open(path)?.meta);
    }
    // In time order: a store may hold several runs, whose sequence numbers each start at 1.
    metas.sort_by_key(|m| (m.stream, m.first_ts_ns, m.seq));
    // Counts are cumulative per stream since its recorder started; a smaller number than
    // the file before means the recorder restarted.
    let mut previous: HashMap<u32, InterfaceCounts> = HashMap::new();
    for m in &metas {
        s.files += 1;
        s.packets += m.packets;
        if m.packets > 0 {
            s.first_ts_ns = Some(
                s.first_ts_ns
                    .map_or(m.first_ts_ns, |t| t.min(m.first_ts_ns)),
            );
            s.last_ts_ns = Some(s.last_ts_ns.map_or(m.last_ts_ns, |t| t.max(m.last_ts_ns)));
        }
        if m.counts.is_empty() {
            continue;
        }
        let now = m
            .counts
            .iter()
            .fold(InterfaceCounts::default(), |a, c| InterfaceCounts {
                dropped_kernel: a.dropped_kernel + c.dropped_kernel,
                dropped_staging_full: a.dropped_staging_full + c.dropped_staging_full,
                dropped_write_error: a.dropped_write_error + c.dropped_write_error,
                ..a
            });
        let before = previous.insert(m.stream, now).unwrap_or_default();
        let step = |n: u64, b: u64| if n >= b { n - b } else { n };
        s.dropped_kernel += step(now.dropped_kernel, before.dropped_kernel);
        s.dropped_staging_full += step(now.dropped_staging_full, before.dropped_staging_full);
        s.dropped_write_error += step(now.dropped_write_error, before.dropped_write_error);
    }
    Ok(s)
}

/// What the merge took from one input.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct InputTally {
    /// Packets written to the output.
    pub packets: u64,
    /// Their bytes on the wire, and as captured.
    pub wire_bytes: u64,
    pub captured_bytes: u64,
    /// Frames dropped as duplicates of another input's.
    pub duplicates: u64,
}

/// How two inputs' (corrected) time spans relate.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SpanRelation {
    pub a: String,
    pub b: String,
    /// Nanoseconds both cover, or between the end of one and the start of the other.
    pub overlap_ns: Option<u64>,
    pub gap_ns: Option<u64>,
}

/// Pairwise overlaps and gaps of the inputs' corrected spans (inputs without packets are
/// left out).
pub fn span_relations(surveys: &[StoreSurvey]) -> Vec<SpanRelation> {
    let mut out = Vec::new();
    for (i, a) in surveys.iter().enumerate() {
        for b in &surveys[i + 1..] {
            let (Some((a0, a1)), Some((b0, b1))) = (a.corrected_span(), b.corrected_span()) else {
                continue;
            };
            let (start, end) = (a0.max(b0), a1.min(b1));
            out.push(SpanRelation {
                a: a.label.clone(),
                b: b.label.clone(),
                overlap_ns: (start <= end).then(|| end - start),
                gap_ns: (start > end).then(|| start - end),
            });
        }
    }
    out
}

/// Frames seen by two monitors: a packet is a duplicate when an earlier packet of a
/// *different* input has the same link type, the same original length and identical
/// captured bytes, at most `window_ns` before it (after offsets), and that earlier packet
/// has not already matched a packet of this input. Identical frames within one input are
/// never duplicates (a link can carry the same frame twice).
pub struct Dedup {
    window_ns: u64,
    by_hash: HashMap<u64, VecDeque<Remembered>>,
    /// (time, hash) of every remembered frame, oldest first.
    order: VecDeque<(u64, u64)>,
    /// Frames forgotten before their window passed because of the memory bound.
    pub forgotten_early: u64,
}

struct Remembered {
    ts_ns: u64,
    input: u32,
    linktype: u16,
    orig_len: u32,
    data: Vec<u8>,
    /// Inputs (bit per input) one of whose packets this frame already matched.
    matched: u64,
}

impl Dedup {
    pub fn new(window_ns: u64) -> Dedup {
        Dedup {
            window_ns,
            by_hash: HashMap::new(),
            order: VecDeque::new(),
            forgotten_early: 0,
        }
    }

    /// Whether `p` (from `input`, in merge order) duplicates a frame of another input;
    /// if not, it is remembered.
    pub fn is_duplicate(&mut self, input: u32, linktype: u16, p: &Packet<'_>) -> bool {
        while let Some(&(ts, _)) = self.order.front() {
            if ts.saturating_add(self.window_ns) >= p.ts_ns {
                break;
            }
            self.forget_oldest();
        }
        let hash = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            p.data.hash(&mut h);
            h.finish()
        };
        let bit = 1u64 << input;
        if let Some(same) = self.by_hash.get_mut(&hash) {
            let hit = same.iter_mut().find(|r| {
                r.input != input
                    && r.matched & bit == 0
                    && r.linktype == linktype
                    && r.orig_len == p.orig_len
                    && r.data == p.data
                    && p.ts_ns.abs_diff(r.ts_ns) <= self.window_ns
            });
            if let Some(r) = hit {
                r.matched |= bit;
                return true;
            }
        }
        self.by_hash.entry(hash).or_default().push_back(Remembered {
            ts_ns: p.ts_ns,
            input,
            linktype,
            orig_len: p.orig_len,
            data: p.data.to_vec(),
            matched: 0,
        });
        self.order.push_back((p.ts_ns, hash));
        if self.order.len() > DEDUP_MAX_FRAMES {
            self.forget_oldest();
            self.forgotten_early += 1;
        }
        false
    }

    fn forget_oldest(&mut self) {
        let Some((_, hash)) = self.order.pop_front() else {
            return;
        };
        if let Some(q) = self.by_hash.get_mut(&hash) {
            q.pop_front();
            if q.is_empty() {
                self.by_hash.remove(&hash);
            }
        }
    }
}

/// The merged packets as a recorder source that waits for the recorder (nothing is
/// dropped), one output interface per (input, stream, interface).
pub struct MergeSource {
    merger: Merger,
    interfaces: Vec<Interface>,
    linktypes: Vec<u16>,
    inputs: usize,
    dedup: Option<Dedup>,
    delivered: Vec<u64>,
    tally: Arc<Mutex<Vec<InputTally>>>,
    /// Every input was read to its end (not stopped by a signal or an error).
    ended: bool,
}

impl PacketSource for MergeSource {
    fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    fn poll<K: PacketSink>(&mut self, sink: &mut K) -> Result<Poll, SourceError> {
        let mut tally = self.tally.lock().unwrap();
        for _ in 0..BATCH {
            let m = match self.merger.next() {
                Ok(Some(m)) => m,
                Ok(None) => {
                    self.ended = true;
                    return Ok(Poll::End);
                }
                Err(e) => return Err(SourceError::Other(e.to_string())),
            };
            let t = &mut tally[m.input as usize];
            let p = m.packet;
            let linktype = self.linktypes[p.iface as usize];
            if let Some(d) = &mut self.dedup {
                if d.is_duplicate(m.input, linktype, &p) {
                    t.duplicates += 1;
                    continue;
                }
            }
            t.packets += 1;
            t.wire_bytes += u64::from(p.orig_len);
            t.captured_bytes += p.data.len() as u64;
            self.delivered[p.iface as usize] += 1;
            sink.packet(&p);
        }
        Ok(Poll::Delivered)
    }

    fn counters(&self) -> Vec<SourceCounters> {
        self.delivered
            .iter()
            .map(|&n| SourceCounters {
                seen: n,
                ..Default::default()
            })
            .collect()
    }

    fn describe(&self) -> String {
        format!("merge of {} stores", self.inputs)
    }

    fn live(&self) -> bool {
        false
    }
}

/// What a merge did.
#[derive(Serialize)]
pub struct MergeReport {
    pub out: String,
    pub inputs: Vec<InputReport>,
    pub spans: Vec<SpanRelation>,
    pub packets_written: u64,
    pub duplicates: u64,
    pub dedup_window_ns: Option<u64>,
    /// Dedup memory bound reached: frames forgotten before their window passed.
    pub dedup_forgotten_early: u64,
    pub files_decoded: u64,
    pub chunks_decoded: u64,
    #[serde(skip)]
    pub summary: Option<Summary>,
}

#[derive(Debug, Serialize)]
pub struct InputReport {
    #[serde(flatten)]
    pub survey: StoreSurvey,
    pub merged: InputTally,
    /// Of the merged packets and wire bytes, this input's share (0..1).
    pub packet_share: f64,
    pub byte_share: f64,
}

/// Opens and surveys the inputs; errors are one line naming the store or file.
pub fn open_inputs(inputs: &[InputSpec]) -> Result<(Vec<Store>, Vec<StoreSurvey>), MergeError> {
    if inputs.is_empty() {
        return Err(MergeError::NoInputs);
    }
    if inputs.len() > MAX_INPUTS {
        return Err(MergeError::TooManyInputs {
            given: inputs.len(),
            max: MAX_INPUTS,
        });
    }
    let mut stores = Vec::new();
    for spec in inputs {
        if !spec.root.is_dir() {
            return Err(MergeError::NotAStore {
                root: spec.root.clone(),
            });
        }
        stores.push(Store::open(&spec.root)?);
    }
    let roots: Vec<&Path> = inputs.iter().map(|s| s.root.as_path()).collect();
    let labels = extract::store_labels(&roots);
    let mut surveys = Vec::new();
    for ((store, spec), label) in stores.iter().zip(inputs).zip(&labels) {
        surveys.push(
            survey(store, spec, label).map_err(|cause| MergeError::Survey {
                root: spec.root.clone(),
                cause,
            })?,
        );
    }
    Ok((stores, surveys))
}

/// Merges `inputs` into the store `cfg.store` (which must not hold data files yet).
/// `report` receives the recorder's stats records.
pub fn merge(
    inputs: &[InputSpec],
    opts: &MergeOptions,
    mut cfg: RecorderConfig,
    control: Arc<Control>,
    report: impl FnMut(&StatsRecord, bool),
) -> Result<MergeReport, MergeError> {
    let (stores, surveys) = open_inputs(inputs)?;
    check_output(&cfg.store, inputs)?;
    let store_inputs: Vec<StoreInput<'_>> = stores
        .iter()
        .zip(inputs)
        .map(|(store, spec)| StoreInput {
            store,
            offset_ns: spec.offset_ns,
        })
        .collect();
    let plan = extract::Plan::builder(&store_inputs)
        .window(opts.window)
        .build()?;
    let interfaces = plan.output_interfaces();
    let linktypes = interfaces.iter().map(|i| i.linktype).collect();
    let mut manifest = merge_manifest(&surveys, &plan, opts);
    cfg.merge = Some(manifest.clone());
    let tally = Arc::new(Mutex::new(vec![InputTally::default(); inputs.len()]));
    let end = Arc::new(Mutex::new(SourceEnd::default()));
    let source = MergeSource {
        delivered: vec![0; interfaces.len()],
        interfaces,
        linktypes,
        inputs: inputs.len(),
        dedup: opts.dedup_window_ns.map(Dedup::new),
        merger: plan.merger(),
        tally: Arc::clone(&tally),
        ended: false,
    };
    let source = Reporting {
        inner: source,
        end: Arc::clone(&end),
    };
    let store_dir = cfg.store.clone();
    let summary =
        recorder::record(cfg, vec![source], control, report).map_err(|e| MergeError::Stopped {
            store: store_dir.clone(),
            cause: e,
        })?;
    let tally = tally.lock().unwrap().clone();
    let end = *end.lock().unwrap();
    for (m, t) in manifest.inputs.iter_mut().zip(&tally) {
        m.packets = t.packets;
        m.duplicates = t.duplicates;
    }
    manifest.complete = end.ended && summary.fatal.is_none();
    update_manifest(&store_dir, manifest)?;
    if !end.ended && summary.fatal.is_none() {
        return Err(MergeError::Interrupted { store: store_dir });
    }
    Ok(MergeReport {
        out: store_dir.display().to_string(),
        spans: span_relations(&surveys),
        inputs: input_reports(surveys, &tally),
        packets_written: tally.iter().map(|t| t.packets).sum(),
        duplicates: tally.iter().map(|t| t.duplicates).sum(),
        dedup_window_ns: opts.dedup_window_ns,
        dedup_forgotten_early: end.forgotten_early,
        files_decoded: end.files_decoded,
        chunks_decoded: end.chunks_decoded,
        summary: Some(summary),
    })
}

/// The manifest's merge section, before any packet is merged: the inputs, and which of
/// the output's interfaces each one's are.
fn merge_manifest(
    surveys: &[StoreSurvey],
    plan: &extract::Plan,
    opts: &MergeOptions,
) -> MergeManifest {
    MergeManifest {
        inputs: surveys
            .iter()
            .enumerate()
            .map(|(n, s)| MergedInput {
                store: std::fs::canonicalize(&s.store)
                    .map_or_else(|_| s.store.clone(), |p| p.display().to_string()),
                label: s.label.clone(),
                host: s.host.clone(),
                offset_ns: s.offset_ns,
                clock: s.clock,
                interfaces: plan
                    .interfaces
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| o.input as usize == n)
                    .map(|(i, _)| i as u32)
                    .collect(),
                packets: 0,
                duplicates: 0,
            })
            .collect(),
        dedup_window_ns: opts.dedup_window_ns,
        complete: false,
    }
}

/// Each input's survey with what it gave the merge, and its share of the merged packets
/// and wire bytes.
fn input_reports(surveys: Vec<StoreSurvey>, tally: &[InputTally]) -> Vec<InputReport> {
    let packets: u64 = tally.iter().map(|t| t.packets).sum();
    let bytes: u64 = tally.iter().map(|t| t.wire_bytes).sum();
    let share = |n: u64, of: u64| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    surveys
        .into_iter()
        .zip(tally)
        .map(|(survey, t)| InputReport {
            survey,
            merged: *t,
            packet_share: share(t.packets, packets),
            byte_share: share(t.wire_bytes, bytes),
        })
        .collect()
}

/// The output must be a new (or empty) store, and none of the inputs.
pub fn check_output(out: &Path, inputs: &[InputSpec]) -> Result<(), MergeError> {
    if let Ok(out_abs) = std::fs::canonicalize(out) {
        for spec in inputs {
            if std::fs::canonicalize(&spec.root).is_ok_and(|r| r == out_abs) {
                return Err(MergeError::OutIsInput { out: out.into() });
            }
        }
        let existing = Store::open(out)?;
        if !existing.files.is_empty()
            || !existing.partials.is_empty()
            || existing.manifest.is_some()
        {
            return Err(MergeError::OutHoldsStore { out: out.into() });
        }
    }
    Ok(())
}

/// Rewrites the output manifest with the final merge section.
fn update_manifest(store: &Path, merge: MergeManifest) -> Result<(), MergeError> {
    let path = store.join(meta::MANIFEST);
    let bytes = std::fs::read(&path).map_err(|cause| MergeError::ManifestRead {
        path: path.clone(),
        cause,
    })?;
    let mut manifest: meta::Manifest =
        serde_json::from_slice(&bytes).map_err(|cause| MergeError::ManifestParse {
            path: path.clone(),
            cause,
        })?;
    manifest.merge = Some(merge);
    // Its message names the file already.
    meta::write_manifest(store, &manifest).map_err(MergeError::ManifestWrite)
}

/// What only the merge source knows when the recorder is done with it.
#[derive(Debug, Clone, Copy, Default)]
struct SourceEnd {
    files_decoded: u64,
    chunks_decoded: u64,
    forgotten_early: u64,
    ended: bool,
}

/// Passes the merge source through and, when the recorder drops it at the end, hands
/// back its [`SourceEnd`].
struct Reporting {
    inner: MergeSource,
    end: Arc<Mutex<SourceEnd>>,
}

impl Drop for Reporting {
    fn drop(&mut self) {
        *self.end.lock().unwrap() = SourceEnd {
            files_decoded: self.inner.merger.report.files_decoded,
            chunks_decoded: self.inner.merger.report.chunks_decoded,
            forgotten_early: self.inner.dedup.as_ref().map_or(0, |d| d.forgotten_early),
            ended: self.inner.ended,
        };
    }
}

impl PacketSource for Reporting {
    fn interfaces(&self) -> &[Interface] {
        self.inner.interfaces()
    }
    fn poll<K: PacketSink>(&mut self, sink: &mut K) -> Result<Poll, SourceError> {
        self.inner.poll(sink)
    }
    fn counters(&self) -> Vec<SourceCounters> {
        self.inner.counters()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn live(&self) -> bool {
        false
    }
}

/// Parses `STORE=±NS` (an offset in nanoseconds, or with a unit: `STORE=-1.5ms`, `s`, `ms`,
/// `us`, `ns`).
pub fn parse_offset(s: &str) -> Result<(PathBuf, i64), MergeError> {
    let bad = |problem: OffsetProblem| MergeError::Offset {
        given: s.into(),
        problem,
    };
    let (store, value) = s
        .rsplit_once('=')
        .ok_or_else(|| bad(OffsetProblem::NoEquals))?;
    if store.is_empty() {
        return Err(bad(OffsetProblem::NoStore));
    }
    Ok((
        PathBuf::from(store),
        parse_nanos(value).map_err(|e| bad(e.into()))?,
    ))
}

/// A signed time in nanoseconds: a whole number, or a number with a unit (`s`, `ms`, `us`,
/// `ns`): `-1500`, `+2.5ms`, `50us`.
pub fn parse_nanos(value: &str) -> Result<i64, TimeError> {
    let value = value.trim();
    let (number, scale) = [("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)]
        .iter()
        .find_map(|(unit, scale)| value.strip_suffix(unit).map(|n| (n, *scale)))
        .unwrap_or((value, 1.0));
    let number = number.trim();
    if scale == 1.0 {
        return number.parse::<i64>().map_err(|_| TimeError::NotWholeNanos);
    }
    let v: f64 = number.parse().map_err(|_| TimeError::NotANumber)?;
    let ns = (v * scale).round();
    if !ns.is_finite() || ns.abs() > 9.0e18 {
        return Err(TimeError::TooLarge);
    }
    Ok(ns as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapdeck_pcap::container::{Codec, Container};
    use tapdeck_pcap::Format;
    use tapdeck_store::read::testutil::*;

    #[test]
    fn offsets_parse_with_and_without_units() {
        assert_eq!(parse_offset("a=1500").ok(), Some(("a".into(), 1500)));
        assert_eq!(parse_offset("a=+1500").ok(), Some(("a".into(), 1500)));
        assert_eq!(
            parse_offset("/x/mon1=-1.5ms").ok(),
            Some(("/x/mon1".into(), -1_500_000))
        );
        assert_eq!(parse_offset("b=2s").ok(), Some(("b".into(), 2_000_000_000)));
        assert_eq!(parse_offset("b=-3us").ok(), Some(("b".into(), -3000)));
        assert_eq!(parse_offset("b=7ns").ok(), Some(("b".into(), 7)));
        for bad in ["a", "=5", "a=", "a=x", "a=1.5", "a=1e30s"] {
            assert!(parse_offset(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_offset("a=1.5").unwrap_err().to_string(),
            "--offset \"a=1.5\": not a whole number of nanoseconds; write STORE=±NANOSECONDS or \
             with a unit, e.g. mon1=+1500 or mon1=-1.5ms"
        );
    }

    fn packet(ts: u64, data: &[u8]) -> Packet<'_> {
        Packet {
            ts_ns: ts,
            iface: 0,
            orig_len: data.len() as u32,
            flags: None,
            data,
        }
    }

    #[test]
    fn dedup_drops_the_same_frame_from_another_input_within_the_window() {
        let mut d = Dedup::new(100);
        assert!(!d.is_duplicate(0, 1, &packet(1000, b"abc")));
        // Same frame, other input, within the window: a duplicate.
        assert!(d.is_duplicate(1, 1, &packet(1050, b"abc")));
        // A second copy from input 1 has nothing left to match: kept.
        assert!(!d.is_duplicate(1, 1, &packet(1060, b"abc")));
        // ...and that one absorbs input 0's next copy.
        assert!(d.is_duplicate(0, 1, &packet(1070, b"abc")));
        // Same input twice: never a duplicate.
        assert!(!d.is_duplicate(2, 1, &packet(1080, b"xyz")));
        assert!(!d.is_duplicate(2, 1, &packet(1081, b"xyz")));
        // Different bytes, length or link type: not a duplicate.
        assert!(!d.is_duplicate(3, 1, &packet(1090, b"xyy")));
        let mut longer = packet(1091, b"xyz");
        longer.orig_len = 9;
        assert!(!d.is_duplicate(3, 1, &longer));
        assert!(!d.is_duplicate(3, 101, &packet(1092, b"xyz")));
        // Exactly at the window's edge still matches; beyond it, it does not.
        assert!(d.is_duplicate(3, 1, &packet(1180, b"xyz")));
        assert!(!d.is_duplicate(4, 1, &packet(1182, b"xyz")));
        assert_eq!(d.forgotten_early, 0);
    }

    /// Two monitor stores: mon0 has packets at 10, 30, 30, 50; mon1 at 20, 30, 40.
    /// Fill bytes: 10 + ts/10 for mon0, 100 + ts/10 for mon1.
    fn monitors(dir: &Path) -> Vec<InputSpec> {
        let mk = |name: &str, base: u8, times: &[u64]| {
            let root = dir.join(name);
            std::fs::create_dir_all(&root).unwrap();
            let mut s = FileSpec::new(0, 0, Format::Pcapng, Container::Zstd);
            s.chunks = vec![(
                Codec::Zstd(1),
                times
                    .iter()
                    .map(|&t| pkt(t, base + (t / 10) as u8))
                    .collect(),
            )];
            s.stats = true;
            write_file(&root, &s);
            InputSpec { root, offset_ns: 0 }
        };
        vec![
            mk("mon0", 10, &[10, 30, 30, 50]),
            mk("mon1", 100, &[20, 30, 40]),
        ]
    }

    fn merged(inputs: &[InputSpec], dedup: Option<u64>) -> Vec<(u64, u32, u8)> {
        let stores: Vec<Store> = inputs
            .iter()
            .map(|i| Store::open(&i.root).unwrap())
            .collect();
        let si: Vec<StoreInput<'_>> = stores
            .iter()
            .zip(inputs)
            .map(|(store, i)| StoreInput {
                store,
                offset_ns: i.offset_ns,
            })
            .collect();
        let plan = extract::Plan::builder(&si).build().unwrap();
        let mut m = plan.merger();
        let mut dd = dedup.map(Dedup::new);
        let mut out = Vec::new();
        while let Some(p) = m.next().unwrap() {
            if let Some(d) = &mut dd {
                if d.is_duplicate(p.input, 1, &p.packet) {
                    continue;
                }
            }
            out.push((p.packet.ts_ns, p.input, p.packet.data[40]));
        }
        out
    }

    #[test]
    fn merge_orders_by_time_and_ties_go_to_the_earlier_store() {
        let dir = tempfile::tempdir().unwrap();
        let inputs = monitors(dir.path());
        assert_eq!(
            merged(&inputs, None),
            [
                (10, 0, 11),
                (20, 1, 102),
                (30, 0, 13),
                (30, 0, 13),
                (30, 1, 103),
                (40, 1, 104),
                (50, 0, 15)
            ]
        );
        // Given the other way round, the tie at 30 goes to mon1 first.
        let swapped = [inputs[1].clone(), inputs[0].clone()];
        let at30: Vec<u32> = merged(&swapped, None)
            .into_iter()
            .filter(|p| p.0 == 30)
            .map(|p| p.1)
            .collect();
        assert_eq!(at30, [0, 1, 1]);
    }

    #[test]
    fn offsets_move_a_store_in_time_before_merging() {
        let dir = tempfile::tempdir().unwrap();
        let mut inputs = monitors(dir.path());
        inputs[1].offset_ns = 25;
        inputs[0].offset_ns = -10;
        let got: Vec<(u64, u32)> = merged(&inputs, None).iter().map(|p| (p.0, p.1)).collect();
        assert_eq!(
            got,
            [(0, 0), (20, 0), (20, 0), (40, 0), (45, 1), (55, 1), (65, 1)]
        );
        // A negative offset never wraps below the epoch.
        assert_eq!(corrected(5, -10), 0);
        assert_eq!(corrected(u64::MAX - 1, 5), u64::MAX);
    }

    #[test]
    fn dedup_in_the_merge_counts_cross_store_copies_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = |n: &str| dir.path().join(n);
        let mut specs = Vec::new();
        // Both monitors saw frames 1 and 2 (mon1's clock 3 ns later); mon0 alone saw frame
        // 3 twice (a genuine repeat on its link).
        for (name, times) in [
            ("a", [(100, 1), (200, 2), (300, 3), (301, 3)]),
            ("b", [(103, 1), (203, 2), (500, 9), (501, 8)]),
        ] {
            std::fs::create_dir_all(root(name)).unwrap();
            let mut s = FileSpec::new(0, 0, Format::Pcapng, Container::Lz4);
            s.chunks = vec![(Codec::Lz4, times.iter().map(|&(t, f)| pkt(t, f)).collect())];
            write_file(&root(name), &s);
            specs.push(InputSpec {
                root: root(name),
                offset_ns: 0,
            });
        }
        let got: Vec<(u64, u8)> = merged(&specs, Some(5)).iter().map(|p| (p.0, p.2)).collect();
        assert_eq!(
            got,
            [(100, 1), (200, 2), (300, 3), (301, 3), (500, 9), (501, 8)]
        );
        // A window too narrow for the clocks' difference keeps both copies.
        assert_eq!(merged(&specs, Some(2)).len(), 8);
    }

    #[test]
    fn survey_sums_drops_and_spans_relate() {
        let dir = tempfile::tempdir().unwrap();
        let inputs = monitors(dir.path());
        let (_, surveys) = open_inputs(&inputs).unwrap();
        assert_eq!(
            (
                surveys[0].packets,
                surveys[0].first_ts_ns,
                surveys[0].last_ts_ns
            ),
            (4, Some(10), Some(50))
        );
        // testutil files count 2 kernel drops per interface.
        assert_eq!(surveys[1].dropped_kernel, 2);
        assert_eq!(
            (surveys[0].label.as_str(), surveys[1].label.as_str()),
            ("mon0", "mon1")
        );
        let rel = span_relations(&surveys);
        assert_eq!(rel[0].overlap_ns, Some(20));
        let mut far = surveys.clone();
        far[1].offset_ns = 100;
        assert_eq!(span_relations(&far)[0].gap_ns, Some(70));
    }

    #[test]
    fn a_damaged_store_is_named_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let inputs = monitors(dir.path());
        // Cut the trailer off mon1's file: its index is gone.
        let store = Store::open(&inputs[1].root).unwrap();
        let f = &store.files[0];
        let len = std::fs::metadata(f).unwrap().len();
        let bytes = std::fs::read(f).unwrap();
        std::fs::write(f, &bytes[..len as usize - 30]).unwrap();
        let err = open_inputs(&inputs).unwrap_err().to_string();
        assert!(!err.contains('\n'), "{err}");
        assert!(err.contains(&f.display().to_string()), "{err}");
        assert!(err.contains("tapdeck verify"), "{err}");
        // A missing store is one line too.
        let missing = [InputSpec {
            root: dir.path().join("nope"),
            offset_ns: 0,
        }];
        let err = open_inputs(&missing).unwrap_err().to_string();
        assert!(err.contains("not a store directory"), "{err}");
    }

    fn recorder_cfg(out: &Path) -> RecorderConfig {
        RecorderConfig::builder(out.to_path_buf())
            .ladder(crate::ladder::CodecLadder::parse("zstd:1").unwrap())
            .chunk_size(1 << 20)
            .staging_bytes(4 << 20)
            .compressors(1)
            .direct(false)
            .flush_interval(std::time::Duration::from_secs(1))
            .stats_interval(std::time::Duration::from_secs(60))
            .build()
    }

    fn read_back(store: &Path) -> Vec<(u64, u8)> {
        let store = Store::open(store).unwrap();
        let mut m = extract::Plan::of_store(&store).build().unwrap().merger();
        let mut out = Vec::new();
        while let Some(p) = m.next().unwrap() {
            out.push((p.packet.ts_ns, p.packet.data[40]));
        }
        out
    }

    #[test]
    fn merge_writes_a_store_that_reads_back_with_its_provenance() {
        let dir = tempfile::tempdir().unwrap();
        let mut inputs = monitors(dir.path());
        inputs[1].offset_ns = 1;
        let out = dir.path().join("out");
        let opts = MergeOptions {
            window: TimeWindow::default(),
            dedup_window_ns: None,
        };
        let report = merge(
            &inputs,
            &opts,
            recorder_cfg(&out),
            Arc::new(Control::default()),
            |_, _| {},
        )
        .unwrap();
        assert_eq!(report.packets_written, 7);
        assert_eq!(
            (
                report.inputs[0].merged.packets,
                report.inputs[1].merged.packets
            ),
            (4, 3)
        );
        assert_eq!(
            report.inputs[0].merged.wire_bytes + report.inputs[1].merged.wire_bytes,
            7 * 200
        );
        let want: Vec<(u64, u8)> = merged(&inputs, None).iter().map(|p| (p.0, p.2)).collect();
        assert_eq!(read_back(&out), want);
        assert_eq!(want[1], (21, 102));
        let store = Store::open(&out).unwrap();
        let manifest = store.manifest.as_ref().unwrap();
        assert!(manifest.clock.is_none());
        let m = manifest.merge.as_ref().unwrap();
        assert!(m.complete);
        let labels: Vec<_> = m
            .inputs
            .iter()
            .map(|i| (i.label.as_str(), i.offset_ns, i.packets))
            .collect();
        assert_eq!(labels, [("mon0", 0, 4), ("mon1", 1, 3)]);
        assert_eq!(
            (
                m.inputs[0].interfaces.clone(),
                m.inputs[1].interfaces.clone()
            ),
            (vec![0], vec![1])
        );
        let descriptions: Vec<_> = extract::Plan::of_store(&store)
            .build()
            .unwrap()
            .output_interfaces()
            .into_iter()
            .map(|i| i.description.unwrap())
            .collect();
        assert_eq!(descriptions, ["mon0 stream 0", "mon1 stream 0"]);
        // The output is not merged into again.
        let err = merge(
            &inputs,
            &opts,
            recorder_cfg(&out),
            Arc::new(Control::default()),
            |_, _| {},
        )
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("already holds a store"), "{err}");
    }

    #[test]
    fn a_merge_stopped_early_says_so_and_is_not_marked_complete() {
        let dir = tempfile::tempdir().unwrap();
        let inputs = monitors(dir.path());
        let out = dir.path().join("out");
        let opts = MergeOptions {
            window: TimeWindow::default(),
            dedup_window_ns: None,
        };
        // As SIGINT does: the recorder stops before the source has delivered anything.
        let control = Arc::new(Control::default());
        control
            .stop
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let err = merge(&inputs, &opts, recorder_cfg(&out), control, |_, _| {})
            .err()
            .unwrap()
            .to_string();
        assert!(err.starts_with("merge interrupted: "), "{err}");
        let store = Store::open(&out).unwrap();
        assert!(store.partials.is_empty());
        assert!(!store.manifest.unwrap().merge.unwrap().complete);
    }

    #[test]
    fn a_chunk_damaged_behind_an_intact_index_stops_the_merge_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let root = |n: &str| dir.path().join(n);
        std::fs::create_dir_all(root("a")).unwrap();
        std::fs::create_dir_all(root("b")).unwrap();
        let mut s = FileSpec::new(0, 0, Format::Pcapng, Container::Zstd);
        s.chunks = vec![
            (Codec::Zstd(1), vec![pkt(10, 1), pkt(20, 2)]),
            (Codec::Zstd(1), vec![pkt(30, 3), pkt(40, 4)]),
        ];
        let victim = write_file(&root("a"), &s);
        let mut s = FileSpec::new(0, 0, Format::Pcapng, Container::Zstd);
        s.chunks = vec![(Codec::Raw, vec![pkt(15, 9), pkt(25, 8)])];
        write_file(&root("b"), &s);
        // Wreck the second chunk's frame; the index still points at it.
        let f = StoredFile::open(&victim).unwrap();
        let e = f.packet_chunks().nth(1).copied().unwrap();
        let mut bytes = std::fs::read(&victim).unwrap();
        bytes[e.frame_offset as usize..(e.frame_offset + u64::from(e.frame_len)) as usize]
            .fill(0xEE);
        std::fs::write(&victim, bytes).unwrap();
        let inputs = [
            InputSpec {
                root: root("a"),
                offset_ns: 0,
            },
            InputSpec {
                root: root("b"),
                offset_ns: 0,
            },
        ];
        let out = root("out");
        let opts = MergeOptions {
            window: TimeWindow::default(),
            dedup_window_ns: None,
        };
        let err = merge(
            &inputs,
            &opts,
            recorder_cfg(&out),
            Arc::new(Control::default()),
            |_, _| {},
        )
        .err()
        .unwrap()
        .to_string();
        assert!(!err.contains('\n'), "{err}");
        assert!(err.starts_with("merge stopped: "), "{err}");
        assert!(err.contains(&victim.display().to_string()), "{err}");
        // What was merged before the damage is stored, in complete files.
        assert_eq!(read_back(&out), [(10, 1), (15, 9), (20, 2)]);
        let store = Store::open(&out).unwrap();
        assert!(store.partials.is_empty());
        assert!(!store.manifest.unwrap().merge.unwrap().complete);
    }
}
