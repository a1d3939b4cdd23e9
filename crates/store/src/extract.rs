//! `tapdeck extract`: the packets of a time range (and a filter) as one standard file.
//!
//! Planning reads only trailers: a file whose chunks all miss the window is never decoded,
//! and within a file only the chunks whose time range meets the window are.
//!
//! Time order is the store's invariant for readers. A stream whose files have distinct
//! sequence numbers (what the recorder writes: each run continues the store's sequence)
//! is read in sequence order, the order it was captured in. An older store may hold
//! several runs whose sequence numbers each start at 1, and files of equal stream and
//! sequence: there a stream's files are ordered by the time range their index gives, and
//! laid into *lanes*: a file goes into the first lane of its stream whose last
//! file ends before it begins, else into a new one. Lanes are merged by timestamp (ties go
//! to the earlier input, the lower stream, then the earlier lane: a fixed key), one decoded
//! chunk per lane in memory at a time; one run after another is one lane.
//!
//! Plans are made by one builder ([`Plan::builder`]): the time window, what to do on
//! damage ([`OnDamage`]), and the predicate the chunk filters prune with. With a window,
//! a file is opened only when its name places it near the window ([`crate::time_prune`]):
//! the rest are counted, never read.
//!
//! Damage: with [`OnDamage::Skip`], a chunk that does not decode is reported
//! (file, offset, packets the index gives it) and reading goes on with the next chunk; a
//! file whose index is lost (cut short) is skipped unread when its name's time and its
//! stream's next file place it outside the window, else salvaged in memory up to its last
//! whole chunk. Without it, the first defect is an error, as `extract --strict` wants.
//!
//! The packet filter is a [`PacketFilter`], so this crate needs no libpcap: the CLI and
//! the service compile the BPF expression (`tapdeck_filter::bpf`) and hand in a filter.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::io::Write;
use std::path::PathBuf;

use tapdeck_filter::{ChunkFilter, Predicate};
use tapdeck_pcap::container::{ChunkEntry, FrameKind};
use tapdeck_pcap::{Format, Interface, Packet, SectionInfo};

use crate::catalog::{Entry, Known, Lookup};
use crate::meta::{self, days_from_civil};
use crate::read::{ChunkPackets, FileError, Header, Store, StoredFile};
use crate::time_prune::{NamedFile, TimePlan};
pub use crate::window::{corrected, TimeWindow};
use crate::{lock, salvage};

/// Decides which packets are written; `linktype` is the packet's interface's LINKTYPE_*.
pub trait PacketFilter {
    fn matches(&mut self, linktype: u16, packet: &Packet<'_>) -> bool;

    /// Asked before each packet: `Some(why)` ends the extract there (a query's time
    /// limit, which must hold also while nothing matches and nothing is written).
    fn stop(&mut self) -> Option<String> {
        None
    }
}

impl<F: FnMut(u16, &Packet<'_>) -> bool> PacketFilter for F {
    fn matches(&mut self, linktype: u16, packet: &Packet<'_>) -> bool {
        self(linktype, packet)
    }
}

/// Every packet passes.
pub fn no_filter(_: u16, _: &Packet<'_>) -> bool {
    true
}

#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("writing the output failed: {0}")]
    Output(std::io::Error),
    #[error("{0}")]
    Unsupported(String),
    #[error("stopped: {0}")]
    Stopped(String),
}

// Not `#[from]`: that would make the error its own source, and `{:#}` print it twice.
impl From<std::io::Error> for ExtractError {
    fn from(e: std::io::Error) -> Self {
        ExtractError::Output(e)
    }
}

/// One store to read, with the correction for its clock.
#[derive(Debug, Clone, Copy)]
pub struct StoreInput<'a> {
    pub store: &'a Store,
    /// Added to every timestamp of the store (a monitor whose clock ran behind gets a
    /// positive offset). The window and the merge see corrected times.
    pub offset_ns: i64,
}

/// An interface of the output file: one per distinct (input store, stream, interface).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputInterface {
    /// Which input store (in the order given) the packets come from.
    pub input: u32,
    pub stream: u32,
    pub interface: Interface,
}

/// One file to read, with the chunks to decode and where its interfaces go.
#[derive(Debug)]
struct PlannedFile {
    file: StoredFile,
    chunks: Vec<ChunkEntry>,
    /// File interface → output interface.
    iface_map: Vec<u32>,
}

/// One lane of one stream of one input store: files that follow one another in time.
#[derive(Debug)]
struct StreamPlan {
    input: u32,
    stream: u32,
    offset_ns: i64,
    files: Vec<PlannedFile>,
    /// Where the last file of the lane ends (corrected time).
    end_ns: u64,
}

/// Something an extraction could not read, and what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The defect: file, byte offset, what.
    pub error: String,
    /// Packets lost, as the index counts them (`None`: unknown, e.g. a lost tail).
    pub packets_lost: Option<u64>,
    /// What was done about it, e.g. `skipped its chunk`.
    pub action: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.packets_lost {
            Some(n) => write!(f, "{}; {}: {n} packets lost", self.error, self.action),
            None => write!(f, "{}; {}", self.error, self.action),
        }
    }
}

/// What an extraction will read, decided from the indexes alone.
#[derive(Debug)]
pub struct Plan {
    window: TimeWindow,
    /// Ordered by (input, stream).
    streams: Vec<StreamPlan>,
    pub interfaces: Vec<OutputInterface>,
    /// A short name per input store (its directory's name), for interface descriptions.
    pub labels: Vec<String>,
    /// The (first) store's own format: the default output format.
    pub store_format: Option<Format>,
    /// Described in the output when no packet is selected, so that it is still a file
    /// readers accept (tcpdump refuses a pcapng without interfaces).
    fallback_interface: Interface,
    pub files_total: u64,
    pub chunks_total: u64,
    pub files_selected: u64,
    pub chunks_selected: u64,
    /// Chunks in the window that the flow index ruled out for the filter.
    pub chunks_pruned: u64,
    /// Files never opened: their names place them outside the window (`chunks_total`
    /// counts the chunks of the files opened).
    pub files_skipped_by_time: u64,
    /// Files never opened, of those their names did not rule out: the store catalog shows
    /// their packets all outside the window, or none matching the filter (its summary).
    pub files_skipped_by_catalog: u64,
    /// Each file the catalog ruled out, and why (`extract --explain`).
    pub catalog_skips: Vec<(PathBuf, CatalogSkip)>,
    /// Entries of the store catalogs read (0: none, or `--no-index`).
    pub catalog_entries: u64,
    /// Groups of catalog entries consulted, and entries read whole (with their
    /// summaries): the rest were settled by their groups.
    pub catalog_groups: u64,
    pub catalog_records: u64,
    /// Files that hold packets outside the span their names give: their streams were read
    /// whole (see [`crate::time_prune`]).
    pub out_of_name_span: Vec<PathBuf>,
    /// Per file met by the window, what was chosen and why (`extract --explain`).
    pub choices: Vec<FileChoice>,
    /// Stop at damage, or go on past it (see the module comment).
    on_damage: OnDamage,
    /// Damage found while planning (files whose index is lost).
    damage: Vec<Damage>,
}

/// Why the store catalog ruled a file out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogSkip {
    /// Its packets all lie outside the window.
    OutsideWindow,
    /// Its summary shows that none of its packets can match the filter.
    NoMatch,
}

/// How the chunks of one file were chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChoice {
    pub path: PathBuf,
    /// Chunks with packets in the time window.
    pub in_window: u64,
    /// Of those, the chunks that will be read.
    pub chosen: u64,
    /// Whether the file has a flow index (older files do not: all of their chunks in the
    /// window are read).
    pub indexed: bool,
}

/// What an extraction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtractReport {
    pub packets_written: u64,
    /// Packets in the window that the filter left out.
    pub packets_filtered: u64,
    pub files_decoded: u64,
    pub files_total: u64,
    pub chunks_decoded: u64,
    pub chunks_total: u64,
    /// What could not be read, in the order it was met (only with [`OnDamage::Skip`]).
    pub damage: Vec<Damage>,
}

impl ExtractReport {
    /// Packets lost to damage, as the indexes count them (tails of cut files not known).
    pub fn packets_lost(&self) -> u64 {
        self.damage.iter().filter_map(|d| d.packets_lost).sum()
    }
}

/// The name a store goes by in interface descriptions and reports: its directory's name,
/// made unique with `#N` (its position) when two inputs share one.
pub fn store_labels(roots: &[&std::path::Path]) -> Vec<String> {
    let names: Vec<String> = roots
        .iter()
        .map(|r| {
            r.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| r.display().to_string())
        })
        .collect();
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if names.iter().filter(|m| *m == n).count() > 1 {
                format!("{n}#{i}")
            } else {
                n.clone()
            }
        })
        .collect()
}

/// A file of the plan before it is laid into a lane, with its index time range.
struct Candidate {
    input: u32,
    offset_ns: i64,
    first_ns: u64,
    last_ns: u64,
    file: PlannedFile,
}

/// What to do about a damaged place (a chunk that does not decode, a file whose index is
/// lost): see the module comment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnDamage {
    /// The first defect is an error (`extract --strict`).
    #[default]
    Stop,
    /// It is reported, and reading goes on around it.
    Skip,
}

/// Builds the [`Plan`] of an extraction from the stores' indexes alone: the files and
/// chunks that meet the time window, less those the chunk filters rule out.
///
/// ```no_run
/// # use tapdeck_store::extract::{OnDamage, Plan, StoreInput, TimeWindow};
/// # use tapdeck_store::read::Store;
/// let store = Store::open(std::path::Path::new("store"))?;
/// let inputs = [StoreInput { store: &store, offset_ns: 0 }];
/// let plan = Plan::builder(&inputs)
///     .window(TimeWindow { start_ns: Some(1_000), end_ns: None })
///     .on_damage(OnDamage::Skip)
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct PlanBuilder<'a> {
    inputs: Vec<StoreInput<'a>>,
    window: TimeWindow,
    on_damage: OnDamage,
    prune: Option<&'a Predicate>,
    by_name_time: bool,
}

impl<'a> PlanBuilder<'a> {
    /// Packets in `window` only (default: all).
    pub fn window(mut self, window: TimeWindow) -> Self {
        self.window = window;
        self
    }

    /// Stop at the first defect (the default) or read around it.
    pub fn on_damage(mut self, on_damage: OnDamage) -> Self {
        self.on_damage = on_damage;
        self
    }

    /// Leaves out the chunks whose chunk filter shows that no packet of theirs can match
    /// `predicate` (the filter's index-answerable form). Files without chunk filters, and
    /// chunks whose filter does not decode, are read.
    pub fn prune(mut self, predicate: Option<&'a Predicate>) -> Self {
        self.prune = predicate;
        self
    }

    /// Opens only the files whose names place them near the window (the default), or
    /// every file (`false`: to compare, or for doubt).
    pub fn by_name_time(mut self, on: bool) -> Self {
        self.by_name_time = on;
        self
    }

    /// Reads the indexes of the files the window may need and picks the files and chunks
    /// to read.
    pub fn build(self) -> Result<Plan, ExtractError> {
        let mut planning = Planning::new(&self.inputs);
        for (n, input) in self.inputs.iter().enumerate() {
            planning.add_input(&self, n as u32, input)?;
        }
        Ok(planning.into_plan(self))
    }
}

impl Plan {
    /// A plan over `inputs`, whose packets are merged by corrected time: every packet, the
    /// first defect an error, no pruning, until the builder is told otherwise.
    pub fn builder<'a>(inputs: &[StoreInput<'a>]) -> PlanBuilder<'a> {
        PlanBuilder {
            inputs: inputs.to_vec(),
            window: TimeWindow::default(),
            on_damage: OnDamage::Stop,
            prune: None,
            by_name_time: true,
        }
    }

    /// A plan over one store, as it is (no clock offset).
    pub fn of_store(store: &Store) -> PlanBuilder<'_> {
        Plan::builder(&[StoreInput {
            store,
            offset_ns: 0,
        }])
    }
}

/// What [`PlanBuilder::build`] has gathered so far.
struct Planning {
    interfaces: Vec<OutputInterface>,
    store_format: Option<Format>,
    fallback_interface: Option<Interface>,
    files_total: u64,
    chunks_total: u64,
    chunks_selected: u64,
    chunks_pruned: u64,
    files_skipped_by_time: u64,
    files_skipped_by_catalog: u64,
    catalog_skips: Vec<(PathBuf, CatalogSkip)>,
    catalog_entries: u64,
    catalog_groups: u64,
    catalog_records: u64,
    out_of_name_span: Vec<PathBuf>,
    choices: Vec<FileChoice>,
    damage: Vec<Damage>,
    candidates: Vec<Candidate>,
}

/// What a plan reads: a complete file, or one a recorder is writing (`.NAME.partial`).
#[derive(Debug, Clone, Copy)]
enum Source<'a> {
    Stored(&'a PathBuf),
    Live(&'a PathBuf),
    /// A plain capture file given as an input, read by its sidecar's blocks.
    Capture(&'a PathBuf),
}

impl Source<'_> {
    fn path(&self) -> &PathBuf {
        match self {
            Source::Stored(p) | Source::Live(p) | Source::Capture(p) => p,
        }
    }

    /// Opens the file: a complete one by its index, a live one up to its last flush (see
    /// [`salvage::open_live`]).
    fn open(&self) -> Result<StoredFile, FileError> {
        match self {
            Source::Stored(p) => StoredFile::open(p),
            Source::Live(p) => salvage::open_live(p),
            Source::Capture(p) => crate::sidecar::open_capture(p),
        }
    }
}

/// One input's files and what became of each: opened (or failed to), or not yet.
struct InputFiles<'a> {
    sources: Vec<Source<'a>>,
    names: Vec<Option<NamedFile>>,
    opened: Vec<Option<Result<StoredFile, FileError>>>,
    /// Ruled out by the store catalog: never opened. Holds the catalog's time range (for
    /// the name-span guard) and why.
    ruled_out: Vec<Option<(u64, u64, CatalogSkip)>>,
}

impl<'a> InputFiles<'a> {
    fn new(store: &'a Store) -> InputFiles<'a> {
        let sources = sources(store);
        InputFiles {
            names: sources
                .iter()
                .map(|s| NamedFile::of_path(s.path()))
                .collect(),
            opened: sources.iter().map(|_| None).collect(),
            ruled_out: sources.iter().map(|_| None).collect(),
            sources,
        }
    }

    /// Rules out, before opening them, the finished files whose catalog entry shows that
    /// none of their packets is in the window, or can match `prune`.
    fn rule_out_by_catalog(
        &mut self,
        catalog: &Lookup,
        outside: &dyn Fn(&Entry) -> bool,
        prune: Option<&Predicate>,
    ) {
        for (i, source) in self.sources.iter().enumerate() {
            let Source::Stored(path) = source else {
                continue;
            };
            let Some(Known { entry, no_match }) = catalog.get(path) else {
                continue;
            };
            let unmatched = || {
                *no_match
                    || prune.is_some_and(|p| entry.summary().is_some_and(|s| !p.may_match(&s)))
            };
            let why = if outside(entry) {
                Some(CatalogSkip::OutsideWindow)
            } else if unmatched() {
                Some(CatalogSkip::NoMatch)
            } else {
                None
            };
            self.ruled_out[i] = why.map(|why| (entry.first_ns, entry.last_ns, why));
        }
    }

    /// Opens the files `time` wants that are not open yet (nor ruled out by the catalog).
    fn open_wanted(&mut self, time: &TimePlan) {
        for (i, source) in self.sources.iter().enumerate() {
            if time.wanted[i] && self.opened[i].is_none() && self.ruled_out[i].is_none() {
                self.opened[i] = Some(source.open());
            }
        }
    }

    /// The opened files holding packets outside their name span (guard 3 of
    /// [`crate::time_prune`]), with their streams.
    fn out_of_name_span(&self, time: &TimePlan) -> Vec<(u32, PathBuf)> {
        let mut out = Vec::new();
        for (i, opened) in self.opened.iter().enumerate() {
            let (Some(span), Some(name)) = (time.spans[i], self.names[i]) else {
                continue;
            };
            // The true time range: from the file's index, or the catalog's for a file it
            // ruled out.
            let (first, last) = match (opened, self.ruled_out[i]) {
                (Some(Ok(file)), _) if file.packet_chunks().any(|e| e.packets > 0) => {
                    index_span(file)
                }
                (None, Some((first, last, _))) => (first, last),
                _ => continue,
            };
            if !span.holds(first, last) {
                out.push((name.stream, self.sources[i].path().clone()));
            }
        }
        out
    }
}

impl Planning {
    /// The default output format and interface come from the first manifest that has them
    /// (else from the first file read).
    fn new(inputs: &[StoreInput<'_>]) -> Planning {
        let manifests = || inputs.iter().filter_map(|i| i.store.manifest.as_ref());
        Planning {
            interfaces: Vec::new(),
            store_format: manifests().find_map(|m| meta::parse_format(&m.format)),
            fallback_interface: manifests().find_map(|m| m.interfaces.first().map(Interface::from)),
            files_total: 0,
            chunks_total: 0,
            chunks_selected: 0,
            chunks_pruned: 0,
            files_skipped_by_time: 0,
            files_skipped_by_catalog: 0,
            catalog_skips: Vec::new(),
            catalog_entries: 0,
            catalog_groups: 0,
            catalog_records: 0,
            out_of_name_span: Vec::new(),
            choices: Vec::new(),
            damage: Vec::new(),
            candidates: Vec::new(),
        }
    }

    /// Opens the files of input `n` (finished or being written) the window may need, and
    /// keeps those with chunks to read.
    fn add_input(
        &mut self,
        how: &PlanBuilder<'_>,
        n: u32,
        input: &StoreInput<'_>,
    ) -> Result<(), ExtractError> {
        let mut files = InputFiles::new(input.store);
        let mut time = match how.by_name_time {
            true => TimePlan::new(&files.names, &how.window, input.offset_ns),
            false => TimePlan::read_all(&files.names),
        };
        // The catalog is consulted with the other indexes: not under `--no-index`.
        let windowed = how.window != TimeWindow::default();
        let stored = input.store.captures.is_empty();
        if stored && how.by_name_time && (how.prune.is_some() || windowed) {
            let outside = |e: &Entry| {
                e.packets == 0
                    || !how.window.meets(
                        corrected(e.first_ns, input.offset_ns),
                        corrected(e.last_ns, input.offset_ns),
                    )
            };
            let catalog = Lookup::read(&input.store.root, &outside, how.prune);
            self.catalog_entries += catalog.consulted;
            self.catalog_groups += catalog.groups;
            self.catalog_records += catalog.records;
            files.rule_out_by_catalog(&catalog, &outside, how.prune);
        }
        files.open_wanted(&time);
        let broken = files.out_of_name_span(&time);
        for (stream, path) in broken {
            time.widen(stream);
            self.out_of_name_span.push(path);
        }
        files.open_wanted(&time);
        self.files_skipped_by_time += time.skipped();
        // Of the files their names did not rule out.
        for ((source, ruled_out), wanted) in
            (files.sources.iter().zip(&files.ruled_out)).zip(&time.wanted)
        {
            if let (Some((_, _, why)), true) = (ruled_out, wanted) {
                self.files_skipped_by_catalog += 1;
                self.catalog_skips.push((source.path().clone(), *why));
            }
        }
        let named: Vec<(u32, u64)> = input
            .store
            .files
            .iter()
            .filter_map(|p| name_time(p))
            .collect();
        for (source, opened) in files.sources.iter().zip(files.opened) {
            // As before pruning: a live file that does not open holds nothing yet.
            if let (Source::Live(_), Some(Err(_))) = (source, &opened) {
                continue;
            }
            self.files_total += 1;
            let file = match opened {
                // Left unopened by its name's time or the catalog: counted, never read.
                None => continue,
                Some(Ok(file)) => file,
                // Another tool's file has no index of ours to lose: nothing to salvage.
                Some(Err(e)) if matches!(source, Source::Capture(_)) => return Err(e.into()),
                Some(Err(e)) if how.on_damage == OnDamage::Skip => {
                    let lost = LostIndex {
                        path: source.path(),
                        named: &named,
                        offset_ns: input.offset_ns,
                    };
                    match self.salvage(&lost, &how.window, e) {
                        Some(file) => file,
                        None => continue,
                    }
                }
                Some(Err(e)) => return Err(e.into()),
            };
            self.add_file(how, n, input.offset_ns, file);
        }
        Ok(())
    }

    /// A file whose index is lost, read up to its last whole chunk; `None` when it lies
    /// outside the window by its name's time and its stream's next file, or nothing in it
    /// is whole (said in the damage).
    fn salvage(
        &mut self,
        lost: &LostIndex<'_>,
        window: &TimeWindow,
        e: FileError,
    ) -> Option<StoredFile> {
        if lost
            .span()
            .is_some_and(|(first, last)| !window.meets(first, last))
        {
            return None;
        }
        match salvage::salvage(lost.path) {
            Ok((file, lost_bytes)) => {
                self.damage.push(Damage {
                    error: e.to_string(),
                    packets_lost: None,
                    action: format!(
                        "read up to its last whole chunk ({} packets; the {lost_bytes} bytes after it are lost, `tapdeck verify --repair` keeps what is whole)",
                        file.meta.packets
                    ),
                });
                Some(file)
            }
            Err(_) => {
                self.damage.push(Damage {
                    error: e.to_string(),
                    packets_lost: None,
                    action: "skipped the file: nothing in it is whole".into(),
                });
                None
            }
        }
    }

    /// Chooses a file's chunks and keeps it as a candidate when any is chosen.
    fn add_file(&mut self, how: &PlanBuilder<'_>, input: u32, offset_ns: i64, file: StoredFile) {
        self.store_format.get_or_insert(file.format);
        if let Some(i) = file.meta.interfaces.first() {
            self.fallback_interface.get_or_insert_with(|| i.into());
        }
        self.chunks_total += file.packet_chunks().count() as u64;
        let (in_window, chunks) = choose_chunks(&file, &how.window, offset_ns, how.prune);
        if in_window > 0 {
            self.choices.push(FileChoice {
                path: file.path.clone(),
                in_window,
                chosen: chunks.len() as u64,
                indexed: !file.index.flows.is_empty(),
            });
        }
        self.chunks_pruned += in_window - chunks.len() as u64;
        if chunks.is_empty() {
            return;
        }
        self.chunks_selected += chunks.len() as u64;
        let (first, last) = index_span(&file);
        self.candidates.push(Candidate {
            input,
            offset_ns,
            first_ns: corrected(first, offset_ns),
            last_ns: corrected(last, offset_ns),
            file: PlannedFile {
                file,
                chunks,
                iface_map: Vec::new(),
            },
        });
    }

    /// Lays the candidates into lanes, numbers the output interfaces, and makes the plan.
    fn into_plan(mut self, how: PlanBuilder<'_>) -> Plan {
        let by_sequence = read_in_sequence(&self.candidates);
        let mut candidates = std::mem::take(&mut self.candidates);
        sort_candidates(&mut candidates, &by_sequence);
        let streams = lay_into_lanes(candidates, &by_sequence, &mut self.interfaces);
        // Lanes were opened in (input, stream, time) order: the merge's tie-break.
        let files_selected = streams.iter().map(|s| s.files.len() as u64).sum();
        let roots: Vec<&std::path::Path> =
            how.inputs.iter().map(|i| i.store.root.as_path()).collect();
        Plan {
            window: how.window,
            streams,
            interfaces: self.interfaces,
            labels: store_labels(&roots),
            store_format: self.store_format,
            fallback_interface: self.fallback_interface.unwrap_or(Interface {
                linktype: 1,
                snaplen: 0,
                name: None,
                description: None,
            }),
            files_total: self.files_total,
            chunks_total: self.chunks_total,
            files_selected,
            chunks_selected: self.chunks_selected,
            chunks_pruned: self.chunks_pruned,
            files_skipped_by_time: self.files_skipped_by_time,
            files_skipped_by_catalog: self.files_skipped_by_catalog,
            catalog_skips: self.catalog_skips,
            catalog_entries: self.catalog_entries,
            catalog_groups: self.catalog_groups,
            catalog_records: self.catalog_records,
            out_of_name_span: self.out_of_name_span,
            choices: self.choices,
            on_damage: how.on_damage,
            damage: self.damage,
        }
    }
}

/// A store's files: the complete ones, then those a recorder is writing (a partial whose
/// writer is gone is not read).
fn sources(store: &Store) -> Vec<Source<'_>> {
    let live = (store.partials.iter()).filter(|p| lock::writer_of(p).is_some());
    (store.files.iter().map(Source::Stored))
        .chain(live.map(Source::Live))
        .chain(store.captures.iter().map(Source::Capture))
        .collect()
}

/// A stored file whose index is lost, and the names of its store's files.
struct LostIndex<'a> {
    path: &'a PathBuf,
    /// Every stored file's (stream, first packet time) by its name.
    named: &'a [(u32, u64)],
    offset_ns: i64,
}

impl LostIndex<'_> {
    /// Where the file's packets may lie (corrected time): from its name's time to just
    /// before its stream's next file; `None` when its name does not say.
    fn span(&self) -> Option<(u64, u64)> {
        let (stream, t) = name_time(self.path)?;
        let next = (self.named.iter())
            .filter(|&&(s, u)| s == stream && u > t)
            .map(|&(_, u)| u - 1)
            .min();
        let off = self.offset_ns;
        Some((
            corrected(t, off),
            next.map_or(u64::MAX, |u| corrected(u, off)),
        ))
    }
}

/// A file's chunks with packets in the window (how many), and of those the ones `prune`
/// does not rule out.
fn choose_chunks(
    file: &StoredFile,
    window: &TimeWindow,
    offset_ns: i64,
    prune: Option<&Predicate>,
) -> (u64, Vec<ChunkEntry>) {
    let in_window: Vec<(usize, &ChunkEntry)> = (file.index.entries.iter().enumerate())
        .filter(|(_, e)| {
            e.kind == FrameKind::Packets
                && e.packets > 0
                && window.meets(
                    corrected(e.first_ts_ns, offset_ns),
                    corrected(e.last_ts_ns, offset_ns),
                )
        })
        .collect();
    let chosen = (in_window.iter())
        .filter(|(i, _)| prune.is_none_or(|p| may_hold(p, file.index.flows.get(*i))))
        .map(|(_, e)| **e)
        .collect();
    (in_window.len() as u64, chosen)
}

/// The (input, stream) pairs read in sequence order, in one lane. A stream whose sequence
/// numbers are all distinct (every store a recorder of now writes: runs continue the
/// sequence) is read in sequence order, which is the order it was captured in. Only older
/// stores, whose runs each restarted at 1, need the files' times to tell runs apart.
fn read_in_sequence(candidates: &[Candidate]) -> HashSet<(u32, u32)> {
    let mut seqs: HashMap<(u32, u32), Vec<u64>> = HashMap::new();
    for c in candidates {
        let m = &c.file.file.meta;
        seqs.entry((c.input, m.stream)).or_default().push(m.seq);
    }
    seqs.into_iter()
        .filter_map(|(k, mut v)| {
            let n = v.len();
            v.sort_unstable();
            v.dedup();
            (v.len() == n).then_some(k)
        })
        .collect()
}

/// The fixed order files are laid into lanes in, and output interfaces numbered in.
fn sort_candidates(candidates: &mut [Candidate], by_sequence: &HashSet<(u32, u32)>) {
    let key = |c: &Candidate| {
        let m = &c.file.file.meta;
        let in_sequence = by_sequence.contains(&(c.input, m.stream));
        (
            c.input,
            m.stream,
            if in_sequence { m.seq } else { 0 },
            c.first_ns,
            c.last_ns,
            m.seq,
        )
    };
    candidates.sort_by(|a, b| {
        key(a)
            .cmp(&key(b))
            .then_with(|| a.file.file.path.cmp(&b.file.file.path))
    });
}

/// Lays sorted candidates into lanes (see the module comment), mapping each file's
/// interfaces to output interfaces.
fn lay_into_lanes(
    candidates: Vec<Candidate>,
    by_sequence: &HashSet<(u32, u32)>,
    interfaces: &mut Vec<OutputInterface>,
) -> Vec<StreamPlan> {
    let mut streams: Vec<StreamPlan> = Vec::new();
    for mut c in candidates {
        let stream = c.file.file.meta.stream;
        c.file.iface_map = output_interfaces_of(&c.file.file, c.input, stream, interfaces);
        let in_sequence = by_sequence.contains(&(c.input, stream));
        let lane = streams.iter().position(|s| {
            s.input == c.input && s.stream == stream && (in_sequence || s.end_ns <= c.first_ns)
        });
        let lane = lane.unwrap_or_else(|| {
            streams.push(StreamPlan {
                input: c.input,
                stream,
                offset_ns: c.offset_ns,
                files: Vec::new(),
                end_ns: 0,
            });
            streams.len() - 1
        });
        streams[lane].end_ns = c.last_ns;
        streams[lane].files.push(c.file);
    }
    streams
}

/// A file's interfaces as output interfaces (added to `interfaces` when new).
fn output_interfaces_of(
    file: &StoredFile,
    input: u32,
    stream: u32,
    interfaces: &mut Vec<OutputInterface>,
) -> Vec<u32> {
    (file.interfaces().into_iter())
        .map(|interface| {
            let out = OutputInterface {
                input,
                stream,
                interface,
            };
            let at = interfaces
                .iter()
                .position(|i| *i == out)
                .unwrap_or_else(|| {
                    interfaces.push(out);
                    interfaces.len() - 1
                });
            at as u32
        })
        .collect()
}

/// Can a chunk with this flow index hold a packet `p` matches? Yes unless its index
/// proves otherwise (no index, or one that does not decode, proves nothing).
fn may_hold(p: &Predicate, flows: Option<&Vec<u8>>) -> bool {
    match flows
        .filter(|f| !f.is_empty())
        .map(|f| ChunkFilter::decode(f))
    {
        Some(Ok(index)) => p.may_match(&index),
        _ => true,
    }
}

/// A file's packet time range by its index (its chunks'), else by its metadata.
fn index_span(file: &StoredFile) -> (u64, u64) {
    let with_packets = || file.packet_chunks().filter(|e| e.packets > 0);
    (
        with_packets()
            .map(|e| e.first_ts_ns)
            .min()
            .unwrap_or(file.meta.first_ts_ns),
        with_packets()
            .map(|e| e.last_ts_ns)
            .max()
            .unwrap_or(file.meta.last_ts_ns),
    )
}

/// A stored file's stream and first packet time, from its name alone.
fn name_time(path: &std::path::Path) -> Option<(u32, u64)> {
    let name = path.file_name()?.to_str()?;
    let n = meta::DataName::parse(name)?;
    Some((n.stream, meta::time_of_name(name)?))
}

impl Plan {
    /// Link types of the packets that may be written: compile a filter once for each.
    pub fn linktypes(&self) -> Vec<u16> {
        let mut l: Vec<u16> = self
            .interfaces
            .iter()
            .map(|i| i.interface.linktype)
            .collect();
        l.sort_unstable();
        l.dedup();
        l
    }

    /// The interfaces as a pcapng output declares them. Each keeps its name; its
    /// description says where its packets come from: `mon0 stream 1` when several stores
    /// are merged, else the interface's own description or `tapdeck stream 1`.
    pub fn output_interfaces(&self) -> Vec<Interface> {
        let several = self.labels.len() > 1;
        self.interfaces
            .iter()
            .map(|o| {
                let description = if several {
                    Some(format!(
                        "{} stream {}",
                        self.labels[o.input as usize], o.stream
                    ))
                } else {
                    o.interface
                        .description
                        .clone()
                        .or_else(|| Some(format!("tapdeck stream {}", o.stream)))
                };
                Interface {
                    description,
                    ..o.interface.clone()
                }
            })
            .collect()
    }

    /// The output file's header: pcapng keeps every (store, stream, interface) apart,
    /// classic pcap needs them all to share one link type.
    fn output_header(&self, format: Format) -> Result<Vec<u8>, ExtractError> {
        let section = SectionInfo {
            application: Some(format!("tapdeck {} extract", env!("CARGO_PKG_VERSION"))),
            ..Default::default()
        };
        let mut interfaces: Vec<Interface> = match format {
            Format::Pcapng => self.output_interfaces(),
            Format::Pcap => Vec::new(),
        };
        if interfaces.is_empty() {
            interfaces.push(self.fallback_interface.clone());
        }
        if format == Format::Pcap {
            let linktypes = self.linktypes();
            if linktypes.len() > 1 {
                return Err(ExtractError::Unsupported(format!(
                        "the packets have {} link types ({}) but a pcap file holds one; use --format pcapng",
                        linktypes.len(),
                        linktypes.iter().map(u16::to_string).collect::<Vec<_>>().join(", ")
                    )));
            }
            let snaps = self.interfaces.iter().map(|o| o.interface.snaplen);
            let snaplen = if snaps.clone().any(|s| s == 0) {
                0
            } else {
                snaps.max().unwrap_or(0)
            };
            if let Some(&linktype) = linktypes.first() {
                interfaces = vec![Interface {
                    linktype,
                    snaplen,
                    name: None,
                    description: None,
                }];
            }
        }
        format
            .file_header(&interfaces, &section)
            .map_err(|e| ExtractError::Unsupported(e.to_string()))
    }

    /// The planned packets, merged by corrected time.
    pub fn merger(self) -> Merger {
        let cursors = self
            .streams
            .into_iter()
            .map(|s| StreamCursor {
                input: s.input,
                stream: s.stream,
                offset_ns: s.offset_ns,
                files: s.files.into(),
                header: None,
                chunk: ChunkPackets::default(),
                pos: 0,
            })
            .collect();
        Merger {
            window: self.window,
            cursors,
            heap: BinaryHeap::new(),
            scratch: Vec::new(),
            current: None,
            started: false,
            on_damage: self.on_damage,
            report: ExtractReport {
                files_total: self.files_total,
                chunks_total: self.chunks_total,
                damage: self.damage,
                ..Default::default()
            },
        }
    }

    /// Decodes the chosen chunks, merges the streams by time and writes the packets in the
    /// window that pass `filter` to `out` as one `format` file.
    pub fn write(
        self,
        format: Format,
        filter: &mut dyn PacketFilter,
        out: &mut dyn Write,
    ) -> Result<ExtractReport, ExtractError> {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
        out.write_all(&self.output_header(format)?)?;
        let linktypes: Vec<u16> = self
            .interfaces
            .iter()
            .map(|o| o.interface.linktype)
            .collect();
        let mut merger = self.merger();
        let (mut written, mut filtered) = (0, 0);
        let mut record = Vec::new();
        while let Some(m) = merger.next()? {
            if let Some(why) = filter.stop() {
                return Err(ExtractError::Stopped(why));
            }
            let p = m.packet;
            if filter.matches(linktypes[p.iface as usize], &p) {
                record.resize(format.record_len(&p), 0);
                let n = format.write_record(&p, &mut record);
                out.write_all(&record[..n])?;
                written += 1;
            } else {
                filtered += 1;
            }
        }
        out.flush()?;
        Ok(ExtractReport {
            packets_written: written,
            packets_filtered: filtered,
            ..std::mem::take(&mut merger.report)
        })
    }
}

/// One packet out of a [`Merger`].
#[derive(Debug)]
pub struct MergedPacket<'a> {
    /// The input store it came from (position in the plan's inputs).
    pub input: u32,
    pub stream: u32,
    /// `ts_ns` is corrected by the store's offset; `iface` is the output interface.
    pub packet: Packet<'a>,
}

/// A streaming k-way merge of every planned stream by corrected timestamp. Ties go to the
/// earlier input store, then the lower stream; within a stream, packets keep their stored
/// order. Memory: one decoded chunk per stream.
pub struct Merger {
    window: TimeWindow,
    cursors: Vec<StreamCursor>,
    /// Min-heap of each stream's next packet: (time, input, stream, cursor).
    heap: BinaryHeap<Reverse<(u64, u32, u32, usize)>>,
    scratch: Vec<u8>,
    /// The cursor whose packet `next` returned last; it moves on at the next call.
    current: Option<usize>,
    started: bool,
    on_damage: OnDamage,
    /// Files and chunks decoded so far (packet counts are the caller's to keep).
    pub report: ExtractReport,
}

impl Merger {
    /// The next packet in time order, or `None` when every stream is done. A defect in a
    /// chunk is an error naming the file and place; the packets before it were returned.
    #[allow(clippy::should_implement_trait)] // a lending iterator: packets borrow the merger
    pub fn next(&mut self) -> Result<Option<MergedPacket<'_>>, FileError> {
        let skip = self.on_damage;
        if !self.started {
            self.started = true;
            for (i, c) in self.cursors.iter_mut().enumerate() {
                if let Some(ts) = c.seek(&self.window, &mut self.scratch, &mut self.report, skip)? {
                    self.heap.push(Reverse((ts, c.input, c.stream, i)));
                }
            }
        }
        if let Some(i) = self.current.take() {
            let c = &mut self.cursors[i];
            c.pos += 1;
            if let Some(ts) = c.seek(&self.window, &mut self.scratch, &mut self.report, skip)? {
                self.heap.push(Reverse((ts, c.input, c.stream, i)));
            }
        }
        let Some(Reverse((ts, input, stream, i))) = self.heap.pop() else {
            return Ok(None);
        };
        self.current = Some(i);
        let c = &self.cursors[i];
        let file = c.files.front().expect("a cursor with a packet has a file");
        let p = c.chunk.packet(c.pos);
        let Some(&iface) = file.iface_map.get(p.iface as usize) else {
            return Err(FileError::whole(
                &file.file.path,
                format!(
                    "a packet names interface {} but the metadata lists {}",
                    p.iface,
                    file.iface_map.len()
                ),
            ));
        };
        Ok(Some(MergedPacket {
            input,
            stream,
            packet: Packet {
                ts_ns: ts,
                iface,
                ..p
            },
        }))
    }
}

/// Where one stream's merge input stands: its remaining files, the current file's header
/// and the current decoded chunk.
struct StreamCursor {
    input: u32,
    stream: u32,
    offset_ns: i64,
    files: VecDeque<PlannedFile>,
    header: Option<Header>,
    chunk: ChunkPackets,
    pos: usize,
}

impl StreamCursor {
    /// Moves to the next packet inside the window (the current one if it is), decoding
    /// further chunks as needed; returns its corrected timestamp, or `None` when the
    /// stream is done. With [`OnDamage::Skip`], a chunk (or a header) that does not decode is
    /// noted in the report and passed over.
    fn seek(
        &mut self,
        window: &TimeWindow,
        scratch: &mut Vec<u8>,
        report: &mut ExtractReport,
        on_damage: OnDamage,
    ) -> Result<Option<u64>, FileError> {
        loop {
            if let Some(r) = self.chunk.records.get(self.pos) {
                let ts = corrected(r.ts_ns, self.offset_ns);
                if window.contains(ts) {
                    return Ok(Some(ts));
                }
                self.pos += 1;
                continue;
            }
            let Some(file) = self.files.front_mut() else {
                return Ok(None);
            };
            let Some(entry) = (!file.chunks.is_empty()).then(|| file.chunks.remove(0)) else {
                self.files.pop_front();
                self.header = None;
                continue;
            };
            let header: &Header = match &self.header {
                Some(h) => h,
                None => {
                    report.files_decoded += 1;
                    match file.file.read_header() {
                        Ok(h) => self.header.insert(h),
                        Err(e) if on_damage == OnDamage::Skip => {
                            let lost = u64::from(entry.packets)
                                + file
                                    .chunks
                                    .iter()
                                    .map(|c| u64::from(c.packets))
                                    .sum::<u64>();
                            report.damage.push(Damage {
                                error: e.to_string(),
                                packets_lost: Some(lost),
                                action: "skipped the file (its header does not decode)".into(),
                            });
                            self.files.pop_front();
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            debug_assert_eq!(entry.kind, FrameKind::Packets);
            self.pos = 0;
            report.chunks_decoded += 1;
            match file.file.read_chunk(header, &entry, scratch) {
                Ok(chunk) => self.chunk = chunk,
                Err(e) if on_damage == OnDamage::Skip => {
                    self.chunk = ChunkPackets::default();
                    report.damage.push(Damage {
                        error: e.to_string(),
                        packets_lost: Some(u64::from(entry.packets)),
                        action: "skipped its chunk".into(),
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A time that does not parse: the text, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{text}' is not a time: {why}; use RFC 3339 (2026-11-23T05:57:34.5Z) or seconds since the epoch (1795413454.5)")]
pub struct TimeError {
    pub text: String,
    pub why: &'static str,
}

/// Parses a time given on the command line to nanoseconds since the epoch, exactly:
/// RFC 3339 (`2026-11-23T05:57:34.5Z`, `…+02:00`, up to nine fraction digits) or decimal
/// seconds since the epoch (`1795413454.5`).
pub fn parse_time(s: &str) -> Result<u64, TimeError> {
    let s = s.trim();
    let bad = |why: &'static str| TimeError {
        text: s.to_string(),
        why,
    };
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
        let secs: u64 = secs.parse().map_err(|_| bad("seconds are not a number"))?;
        let ns = fraction_ns(frac)
            .ok_or_else(|| bad("more than nine fraction digits, or not digits"))?;
        return secs
            .checked_mul(1_000_000_000)
            .and_then(|n| n.checked_add(ns))
            .ok_or_else(|| bad("too far in the future"));
    }
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Result<i64, TimeError> {
        let t = s.get(r).ok_or_else(|| bad("too short"))?;
        if t.bytes().all(|c| c.is_ascii_digit()) {
            t.parse().map_err(|_| bad("a field is not a number"))
        } else {
            Err(bad("a field is not a number"))
        }
    };
    let sep = |at: usize, ok: &[u8]| b.get(at).is_some_and(|c| ok.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return Err(bad("expected YYYY-MM-DDTHH:MM:SS"));
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(bad("no such date"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(bad("no such time of day"));
    }
    let mut rest = &s[19..];
    let mut frac_ns = 0;
    if let Some(r) = rest.strip_prefix('.') {
        let digits = r.bytes().take_while(u8::is_ascii_digit).count();
        frac_ns = fraction_ns(&r[..digits])
            .filter(|_| digits > 0)
            .ok_or_else(|| bad("one to nine fraction digits"))?;
        rest = &r[digits..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && &rest[3..4] == ":" =>
        {
            let parse = |t: &str| {
                t.parse::<i64>()
                    .ok()
                    .filter(|_| t.bytes().all(|c| c.is_ascii_digit()))
            };
            let (Some(h), Some(m)) = (parse(&rest[1..3]), parse(&rest[4..6])) else {
                return Err(bad("bad UTC offset"));
            };
            if h > 23 || m > 59 {
                return Err(bad("bad UTC offset"));
            }
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
        _ => return Err(bad("expected Z or a UTC offset (+HH:MM) after the time")),
    };
    let secs =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    let secs = u64::try_from(secs).map_err(|_| bad("before 1970"))?;
    Ok(secs * 1_000_000_000 + frac_ns)
}

/// Up to nine fraction digits as nanoseconds (`"5"` → 500 000 000).
fn fraction_ns(digits: &str) -> Option<u64> {
    if digits.len() > 9 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let padded = format!("{digits:0<9}");
    padded.parse().ok()
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::testutil::*;
    use tapdeck_pcap::container::{Codec, Container};
    use tapdeck_pcap::TraceReader;

    /// Two streams with interleaved times, mixed codecs and containers:
    /// stream 0: file 0 (zstd) chunks [10,20,30] [40,50]; file 1 (plain) chunk [90,100]
    /// stream 1: file 0 (lz4)  chunks [15,25] [45,55,65]; file 1 (zstd) chunk [95]
    /// Fill bytes identify packets: stream*100 + ts/5.
    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let p = |stream: u32, ts: u64| Pkt {
            ts_ns: ts,
            iface: 0,
            fill: (stream * 100 + (ts / 5) as u32) as u8,
            len: 200,
        };
        let chunks = |stream: u32, codecs: &[Codec], times: &[&[u64]]| -> Vec<(Codec, Vec<Pkt>)> {
            codecs
                .iter()
                .zip(times)
                .map(|(c, t)| (*c, t.iter().map(|&ts| p(stream, ts)).collect()))
                .collect()
        };
        let mut s = FileSpec::new(0, 0, Format::Pcapng, Container::Zstd);
        s.chunks = chunks(
            0,
            &[Codec::Zstd(3), Codec::Raw],
            &[&[10, 20, 30], &[40, 50]],
        );
        s.stats = true;
        write_file(dir.path(), &s);
        let mut s = FileSpec::new(0, 1, Format::Pcapng, Container::Plain);
        s.chunks = chunks(0, &[Codec::Raw], &[&[90, 100]]);
        write_file(dir.path(), &s);
        let mut s = FileSpec::new(1, 0, Format::Pcapng, Container::Lz4);
        s.ifaces = vec![eth("eth1")];
        s.chunks = chunks(1, &[Codec::Lz4, Codec::Raw], &[&[15, 25], &[45, 55, 65]]);
        write_file(dir.path(), &s);
        let mut s = FileSpec::new(1, 1, Format::Pcapng, Container::Zstd);
        s.ifaces = vec![eth("eth1")];
        s.chunks = chunks(1, &[Codec::Zstd(1)], &[&[95]]);
        write_file(dir.path(), &s);
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    fn window(start: Option<u64>, end: Option<u64>) -> TimeWindow {
        TimeWindow {
            start_ns: start,
            end_ns: end,
        }
    }

    /// (ts, output interface) of every packet written.
    fn run(
        store: &Store,
        w: TimeWindow,
        format: Format,
        filter: &mut dyn PacketFilter,
    ) -> (Vec<(u64, u32)>, ExtractReport, Vec<u8>) {
        let mut out = Vec::new();
        let report = Plan::of_store(store)
            .window(w)
            .build()
            .unwrap()
            .write(format, filter, &mut out)
            .unwrap();
        let mut reader = TraceReader::new(&out[..]).unwrap();
        let mut got = Vec::new();
        while let Some(p) = reader.next_packet().unwrap() {
            got.push((p.ts_ns, p.iface));
        }
        (got, report, out)
    }

    fn times(got: &[(u64, u32)]) -> Vec<u64> {
        got.iter().map(|g| g.0).collect()
    }

    #[test]
    fn merges_all_streams_in_time_order() {
        let (_dir, store) = store();
        let (got, report, _) = run(
            &store,
            TimeWindow::default(),
            Format::Pcapng,
            &mut no_filter,
        );
        assert_eq!(
            times(&got),
            [10, 15, 20, 25, 30, 40, 45, 50, 55, 65, 90, 95, 100]
        );
        assert!(got
            .iter()
            .all(|&(ts, iface)| iface == u32::from(matches!(ts, 15 | 25 | 45 | 55 | 65 | 95))));
        assert_eq!(
            (
                report.files_decoded,
                report.files_total,
                report.chunks_decoded,
                report.chunks_total
            ),
            (4, 4, 6, 6)
        );
        assert_eq!(report.packets_written, 13);
    }

    /// start, end, packet times expected, files and chunks decoded.
    type WindowCase = (Option<u64>, Option<u64>, &'static [u64], u64, u64);

    #[test]
    fn windows_inside_across_and_outside_chunks() {
        let (_dir, store) = store();
        let cases: &[WindowCase] = &[
            // inside one chunk of stream 0 and one of stream 1
            (Some(20), Some(30), &[20, 25], 2, 2),
            // across chunk and file boundaries; end is exclusive
            (Some(30), Some(95), &[30, 40, 45, 50, 55, 65, 90], 3, 4),
            // between chunks: overlaps no chunk's range, so nothing is decoded
            (Some(70), Some(85), &[], 0, 0),
            // after everything
            (Some(101), None, &[], 0, 0),
            (None, Some(16), &[10, 15], 2, 2),
            (Some(100), Some(101), &[100], 1, 1),
        ];
        for &(start, end, want, files, chunks) in cases {
            let (got, report, _) = run(&store, window(start, end), Format::Pcapng, &mut no_filter);
            assert_eq!(times(&got), want, "{start:?}..{end:?}");
            assert_eq!(
                (report.files_decoded, report.chunks_decoded),
                (files, chunks),
                "{start:?}..{end:?}"
            );
        }
    }

    #[test]
    fn chunks_outside_the_window_are_never_read() {
        let (_dir, store) = store();
        // Wreck every frame of every file (indexes stay intact) except the header and the
        // chunk [40, 50] of stream 0's first file: a window inside that chunk must not care.
        for (i, path) in store.files.iter().enumerate() {
            let f = StoredFile::open(path).unwrap();
            let keep = if i == 0 {
                vec![f.index.entries[0], f.index.entries[2]]
            } else {
                vec![]
            };
            let mut bytes = std::fs::read(path).unwrap();
            for e in f.index.entries.iter().filter(|e| !keep.contains(e)) {
                let at = e.frame_offset as usize;
                bytes[at..at + e.frame_len as usize].fill(0xEE);
            }
            std::fs::write(path, bytes).unwrap();
        }
        let (got, report, _) = run(
            &store,
            window(Some(40), Some(45)),
            Format::Pcapng,
            &mut no_filter,
        );
        assert_eq!(times(&got), [40]);
        assert_eq!(
            (
                report.files_decoded,
                report.chunks_decoded,
                report.chunks_total
            ),
            (1, 1, 6)
        );
        // The same wrecked store fails for a window that needs a wrecked chunk.
        let mut out = Vec::new();
        assert!(Plan::of_store(&store)
            .window(window(Some(50), Some(60)))
            .build()
            .unwrap()
            .write(Format::Pcapng, &mut no_filter, &mut out)
            .is_err());
    }

    /// Files of one stream from two runs (sequence numbers restart at 1; here even the
    /// names' sequence numbers collide) and a file overlapping another in time.
    fn two_runs() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let file = |seq: u64, times: &[&[u64]]| {
            let mut s = FileSpec::new(0, seq, Format::Pcapng, Container::Zstd);
            s.chunks = times
                .iter()
                .map(|t| (Codec::Zstd(1), t.iter().map(|&ts| pkt(ts, 1)).collect()))
                .collect();
            write_file(dir.path(), &s);
        };
        // run A: 1 [10, 20] [30], 2 [40] [50]; run B: 1 [60, 70], 2 [80] [90]
        file(1, &[&[10, 20], &[30]]);
        file(2, &[&[40], &[50]]);
        file(1, &[&[60, 70]]);
        file(2, &[&[80], &[90]]);
        // A file of the same stream overlapping run B's first (another recorder's).
        file(1, &[&[65, 75]]);
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    #[test]
    fn runs_extract_in_time_order_whatever_their_sequence_numbers() {
        let (_dir, store) = two_runs();
        let (got, report, _) = run(
            &store,
            TimeWindow::default(),
            Format::Pcapng,
            &mut no_filter,
        );
        assert_eq!(times(&got), [10, 20, 30, 40, 50, 60, 65, 70, 75, 80, 90]);
        assert_eq!(report.files_decoded, 5);
        // The same plan twice gives the same bytes: ties and lanes follow a fixed key.
        let (_, _, a) = run(
            &store,
            TimeWindow::default(),
            Format::Pcapng,
            &mut no_filter,
        );
        let (_, _, b) = run(
            &store,
            TimeWindow::default(),
            Format::Pcapng,
            &mut no_filter,
        );
        assert_eq!(a, b);
        let (got, _, _) = run(
            &store,
            window(Some(45), Some(66)),
            Format::Pcapng,
            &mut no_filter,
        );
        assert_eq!(times(&got), [50, 60, 65]);
    }

    /// Overwrites the frame of `store.files[file]`'s index entry `entry` with junk.
    fn wreck(store: &Store, file: usize, entry: usize) {
        let path = &store.files[file];
        let e = StoredFile::open(path).unwrap().index.entries[entry];
        let mut bytes = std::fs::read(path).unwrap();
        let at = e.frame_offset as usize;
        bytes[at..at + e.frame_len as usize].fill(0xEE);
        std::fs::write(path, bytes).unwrap();
    }

    fn tolerant(store: &Store, w: TimeWindow) -> (Vec<u64>, ExtractReport) {
        let inputs = [StoreInput {
            store,
            offset_ns: 0,
        }];
        let mut out = Vec::new();
        let report = Plan::builder(&inputs)
            .window(w)
            .on_damage(OnDamage::Skip)
            .build()
            .unwrap()
            .write(Format::Pcapng, &mut no_filter, &mut out)
            .unwrap();
        let mut reader = TraceReader::new(&out[..]).unwrap();
        let mut got = Vec::new();
        while let Some(p) = reader.next_packet().unwrap() {
            got.push(p.ts_ns);
        }
        (got, report)
    }

    #[test]
    fn a_corrupt_chunk_is_reported_and_skipped() {
        let (_dir, store) = two_runs();
        // Run A's first file (by name: ts 10), chunk [10, 20].
        wreck(&store, 0, 1);
        let (got, report) = tolerant(&store, TimeWindow::default());
        assert_eq!(got, [30, 40, 50, 60, 65, 70, 75, 80, 90]);
        assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
        assert_eq!(report.packets_lost(), 2);
        let line = report.damage[0].to_string();
        assert!(
            line.contains(&store.files[0].display().to_string())
                && line.contains("byte offset")
                && line.ends_with("skipped its chunk: 2 packets lost"),
            "{line}"
        );
        // Strict: the first defect stops the extraction, as before.
        let mut out = Vec::new();
        assert!(Plan::of_store(&store)
            .window(TimeWindow::default())
            .build()
            .unwrap()
            .write(Format::Pcapng, &mut no_filter, &mut out)
            .is_err());
        // A window that does not need the chunk reports nothing.
        let (got, report) = tolerant(&store, window(Some(60), None));
        assert_eq!(got, [60, 65, 70, 75, 80, 90]);
        assert!(report.damage.is_empty());
    }

    #[test]
    fn a_cut_file_is_read_up_to_its_last_whole_chunk_or_not_at_all() {
        let (_dir, store) = two_runs();
        // Run A's second file (ts 40): lose its index and half its last frame.
        let path = &store.files[1];
        let f = StoredFile::open(path).unwrap();
        let last = f.index.entries[2];
        let cut = last.frame_offset + u64::from(last.frame_len) / 2;
        drop(f);
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .set_len(cut)
            .unwrap();
        assert!(Plan::of_store(&store).build().is_err());
        // Its first chunk is whole and read; the cut one is lost, and said so.
        let (got, report) = tolerant(&store, TimeWindow::default());
        assert_eq!(got, [10, 20, 30, 40, 60, 65, 70, 75, 80, 90]);
        assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
        assert_eq!(report.damage[0].packets_lost, None);
        // Outside the window (it starts at 40, and its stream's next file at 60): not read.
        for w in [window(None, Some(40)), window(Some(60), None)] {
            let (_, report) = tolerant(&store, w);
            assert!(report.damage.is_empty(), "{w:?}: {:?}", report.damage);
        }
    }

    /// Three streams of eight files, two chunks each. Stream 0's file k holds 100k,
    /// 100k+30 | 100k+60, 100(k+1): its last packet has the next file's first time (a size
    /// rotation between two packets of the same time). Streams 1 and 2 are shifted by 7 and
    /// 13 and end before the next file begins.
    fn many_files() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        for stream in 0..3u32 {
            for k in 0..8u64 {
                let shift = [0, 7, 13][stream as usize];
                let base = 100 * k + shift;
                let last = if stream == 0 { base + 100 } else { base + 90 };
                let mut s = FileSpec::new(stream, k + 1, Format::Pcapng, Container::Zstd);
                s.chunks = vec![
                    (Codec::Zstd(1), vec![pkt(base, 1), pkt(base + 30, 2)]),
                    (Codec::Raw, vec![pkt(base + 60, 3), pkt(last, 4)]),
                ];
                write_file(dir.path(), &s);
            }
        }
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    /// The output's bytes and the plan's files (total, skipped by time), with or without
    /// pruning by names.
    fn extract_bytes(store: &Store, w: TimeWindow, by_name: bool) -> (Vec<u8>, u64, u64) {
        let plan = Plan::of_store(store)
            .window(w)
            .by_name_time(by_name)
            .build()
            .unwrap();
        let (total, skipped) = (plan.files_total, plan.files_skipped_by_time);
        let mut out = Vec::new();
        plan.write(Format::Pcapng, &mut no_filter, &mut out)
            .unwrap();
        (out, total, skipped)
    }

    /// The files whose packets (by their index) meet `w`, and those whose name span
    /// (their name's time to the next file's of their stream) does.
    fn overlapping(store: &Store, w: &TimeWindow) -> (u64, u64) {
        let mut by_index = 0;
        let mut by_name = 0;
        for p in &store.files {
            let (first, last) = index_span(&StoredFile::open(p).unwrap());
            by_index += u64::from(w.meets(first, last));
            let (stream, t) = name_time(p).unwrap();
            let next = (store.files.iter())
                .filter_map(|q| name_time(q))
                .filter(|&(s, u)| s == stream && u > t)
                .map(|(_, u)| u)
                .min();
            by_name += u64::from(w.meets(t, next.unwrap_or(u64::MAX)));
        }
        (by_index, by_name)
    }

    #[test]
    fn a_window_opens_only_the_files_near_it_and_reads_what_every_file_gives() {
        let (_dir, store) = many_files();
        let mut windows = vec![
            window(None, None),
            window(None, Some(5)),
            window(Some(900), None),
            window(Some(2_000), Some(3_000)),
            window(Some(250), Some(420)),
            window(None, Some(333)),
            window(Some(555), None),
        ];
        // Exactly at each name time, just before and after it, and between files.
        for t in (0..8).flat_map(|k| [100 * k, 100 * k + 7, 100 * k + 13]) {
            windows.push(window(Some(t), Some(t + 1)));
            windows.push(window(Some(t.saturating_sub(1)), Some(t)));
            windows.push(window(Some(t + 95), Some(t + 99)));
        }
        for w in windows {
            let (pruned, total, skipped) = extract_bytes(&store, w, true);
            let (all, _, none_skipped) = extract_bytes(&store, w, false);
            assert_eq!(pruned, all, "{w:?}");
            assert_eq!((total, none_skipped), (24, 0), "{w:?}");
            // Those whose name span meets it, and at most one more at each edge of each
            // stream; a file whose name span meets the window but whose packets end
            // before it is one of the first (streams 1 and 2 have such gaps).
            let opened = total - skipped;
            let (by_index, by_name) = overlapping(&store, &w);
            assert!(by_index <= by_name, "{w:?}");
            assert!(opened <= by_name + 6, "{w:?}: {opened} opened");
        }
        // A short window inside one file of each stream: 3 overlap, 9 at most are opened.
        let (_, total, skipped) = extract_bytes(&store, window(Some(440), Some(450)), true);
        assert_eq!(total - skipped, 9);
    }

    #[test]
    fn a_file_holding_packets_outside_its_name_span_gets_its_stream_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        // Stream 0: files at 100, 200, ..., 800; the one named 500 also holds a packet at
        // 150 (a replayed trace out of order), in its second chunk.
        for k in 1..=8u64 {
            let mut s = FileSpec::new(0, k, Format::Pcapng, Container::Zstd);
            let late = if k == 5 { 150 } else { 100 * k + 50 };
            s.chunks = vec![
                (Codec::Zstd(1), vec![pkt(100 * k, 1)]),
                (Codec::Raw, vec![pkt(late, 2)]),
            ];
            write_file(dir.path(), &s);
        }
        let store = Store::open(dir.path()).unwrap();
        // The window reaches the file named 500 only as the one more at its edge: its
        // index shows the packet at 150, so every file is read, and 150 is not lost.
        let w = window(Some(140), Some(410));
        let (pruned, _, skipped) = extract_bytes(&store, w, true);
        let (all, _, _) = extract_bytes(&store, w, false);
        assert_eq!(pruned, all);
        assert_eq!(skipped, 0);
        let plan = Plan::of_store(&store).window(w).build().unwrap();
        assert_eq!(plan.out_of_name_span, [store.files[4].clone()]);
        // Far from it, the names are trusted: the guards see only the files they open.
        let (_, _, skipped) = extract_bytes(&store, window(Some(760), Some(770)), true);
        assert_eq!(skipped, 5);
    }

    #[test]
    fn a_file_being_written_is_open_ended_and_opened_only_when_the_window_reaches_it() {
        let dir = tempfile::tempdir().unwrap();
        let spec = |seq: u64| {
            let mut s = FileSpec::new(0, seq, Format::Pcapng, Container::Zstd);
            let t = 100 * seq;
            s.chunks = vec![(Codec::Zstd(1), vec![pkt(t, 1), pkt(t + 50, 2)])];
            s
        };
        for seq in 1..=4 {
            write_file(dir.path(), &spec(seq));
        }
        // Sequence 5 is being written: its frames so far, under its hidden name, in a
        // store whose lock a recorder (here this test) holds.
        let (bytes, _) = build(&spec(5));
        let name = meta::file_name(500, 0, 5, Format::Pcapng, Container::Zstd);
        std::fs::write(dir.path().join(meta::partial_name(&name)), bytes).unwrap();
        let _lock = lock::StoreLock::acquire(&[dir.path().to_path_buf()], "test").unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!((store.files.len(), store.partials.len()), (4, 1));
        // Long after it began: the live file, and the one before it.
        let (got, total, skipped) = extract_bytes(&store, window(Some(900), None), true);
        assert_eq!((total, skipped), (5, 3));
        assert_eq!(got, extract_bytes(&store, window(Some(900), None), false).0);
        let (got, _, _) = extract_bytes(&store, window(Some(520), None), true);
        let mut reader = TraceReader::new(&got[..]).unwrap();
        assert_eq!(reader.next_packet().unwrap().map(|p| p.ts_ns), Some(550));
        // Inside the first file: the live one is not opened.
        let (got, total, skipped) = extract_bytes(&store, window(Some(110), Some(120)), true);
        assert_eq!((total, skipped), (5, 3));
        assert_eq!(
            got,
            extract_bytes(&store, window(Some(110), Some(120)), false).0
        );
    }

    #[test]
    fn stores_whose_names_disagree_with_their_sequence_are_not_pruned() {
        let (_dir, store) = two_runs();
        for w in [window(Some(45), Some(66)), window(Some(80), None)] {
            let (pruned, _, skipped) = extract_bytes(&store, w, true);
            assert_eq!(skipped, 0);
            assert_eq!(pruned, extract_bytes(&store, w, false).0);
        }
    }

    #[test]
    fn a_damaged_file_far_from_the_window_is_not_opened_even_when_strict() {
        let (_dir, store) = many_files();
        // Stream 0's first file loses its index.
        let path = &store.files[0];
        let len = std::fs::metadata(path).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .set_len(len - 4)
            .unwrap();
        let w = window(Some(600), Some(610));
        assert!(Plan::of_store(&store).window(w).build().is_ok());
        assert!(Plan::of_store(&store)
            .window(w)
            .by_name_time(false)
            .build()
            .is_err());
    }

    #[test]
    fn the_filter_sees_link_type_and_packet() {
        let (_dir, store) = store();
        // Keep stream 1's packets: fill bytes >= 100.
        let mut keep = |lt: u16, p: &Packet<'_>| lt == 1 && p.data[40] >= 100;
        let (got, report, _) = run(&store, TimeWindow::default(), Format::Pcapng, &mut keep);
        assert_eq!(times(&got), [15, 25, 45, 55, 65, 95]);
        assert_eq!((report.packets_written, report.packets_filtered), (6, 7));
    }

    #[test]
    fn pcap_output_has_one_interface_and_pcapng_names_each() {
        let (_dir, store) = store();
        let (got, _, out) = run(
            &store,
            window(Some(10), Some(30)),
            Format::Pcap,
            &mut no_filter,
        );
        assert_eq!(times(&got), [10, 15, 20, 25]);
        assert!(got.iter().all(|g| g.1 == 0));
        assert_eq!(out[..4], 0xA1B2_3C4Du32.to_le_bytes());
        let plan = Plan::of_store(&store).build().unwrap();
        let names: Vec<_> = plan
            .interfaces
            .iter()
            .map(|o| (o.stream, o.interface.name.clone().unwrap()))
            .collect();
        assert_eq!(names, [(0, "eth0".to_string()), (1, "eth1".to_string())]);
    }

    #[test]
    fn pcap_output_refuses_mixed_link_types() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = FileSpec::new(0, 0, Format::Pcapng, Container::Zstd);
        s.ifaces = vec![
            eth("a"),
            Interface {
                linktype: 101,
                ..eth("b")
            },
        ];
        s.chunks = vec![(Codec::Raw, vec![pkt(1, 1)])];
        write_file(dir.path(), &s);
        let store = Store::open(dir.path()).unwrap();
        let err = Plan::of_store(&store)
            .window(TimeWindow::default())
            .build()
            .unwrap()
            .write(Format::Pcap, &mut no_filter, &mut Vec::new())
            .unwrap_err();
        assert!(err.to_string().contains("use --format pcapng"), "{err}");
    }

    #[test]
    fn times_parse_exactly() {
        let t = 1_795_413_454_000_000_000;
        assert_eq!(parse_time("2026-11-23T05:57:34Z"), Ok(t));
        assert_eq!(parse_time("2026-11-23T05:57:34.5Z"), Ok(t + 500_000_000));
        assert_eq!(parse_time("2026-11-23t05:57:34.000000001z"), Ok(t + 1));
        assert_eq!(
            parse_time("2026-11-23T07:57:34.123456789+02:00"),
            Ok(t + 123_456_789)
        );
        assert_eq!(parse_time("2026-11-23T04:27:34-01:30"), Ok(t));
        assert_eq!(parse_time("1795413454"), Ok(t));
        assert_eq!(parse_time("1795413454.000000007"), Ok(t + 7));
        assert_eq!(parse_time("0.1"), Ok(100_000_000));
        assert_eq!(
            parse_time("2000-02-29T00:00:00Z"),
            Ok(951_782_400_000_000_000)
        );
        for bad in [
            "",
            "x",
            "2026-02-29T00:00:00Z",
            "2026-11-23T05:57:34",
            "2026-11-23T05:57:34.Z",
            "1.0000000001",
            "1969-12-31T23:59:59Z",
            "2026-11-23T24:00:00Z",
            "1.2.3",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}
