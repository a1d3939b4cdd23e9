//! `tapdeck extract`: wires the store's extraction to libpcap's filter compiler.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use tapdeck_filter::bpf::LinkPrograms;
use tapdeck_filter::Predicate;
use tapdeck_pcap::{Format, Packet};
use tapdeck_recorder::merge::{parse_offset, InputSpec};
use tapdeck_store::extract::{
    self, CatalogSkip, ExtractError, ExtractReport, OnDamage, Plan, StoreInput, TimeWindow,
};
use tapdeck_store::meta;
use tapdeck_store::read::Store;

use crate::args::ExtractArgs;

/// `--start`/`--end` as a window; an empty range is refused.
pub fn window(start: &Option<String>, end: &Option<String>) -> anyhow::Result<TimeWindow> {
    let time = |flag: &str, v: &Option<String>| -> anyhow::Result<Option<u64>> {
        v.as_deref()
            .map(extract::parse_time)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
    };
    let window = TimeWindow {
        start_ns: time("start", start)?,
        end_ns: time("end", end)?,
    };
    if let (Some(s), Some(e)) = (window.start_ns, window.end_ns) {
        anyhow::ensure!(
            s < e,
            "--start must be before --end: the range [start, end) is empty"
        );
    }
    Ok(window)
}

/// The stores to merge, each with its `--offset` (see [`offsets`]).
pub fn input_specs(stores: &[PathBuf], given: &[String]) -> anyhow::Result<Vec<InputSpec>> {
    Ok(stores
        .iter()
        .zip(offsets(stores, given)?)
        .map(|(root, offset_ns)| InputSpec {
            root: root.clone(),
            offset_ns,
        })
        .collect())
}

/// Each store's `--offset STORE=NS` (0 if none); an offset naming no given store is refused.
pub fn offsets(stores: &[PathBuf], given: &[String]) -> anyhow::Result<Vec<i64>> {
    let mut out = vec![0i64; stores.len()];
    for g in given {
        let (store, ns) = parse_offset(g).map_err(anyhow::Error::msg)?;
        let same = |a: &Path| {
            a == store
                || std::fs::canonicalize(a)
                    .ok()
                    .zip(std::fs::canonicalize(&store).ok())
                    .is_some_and(|(a, b)| a == b)
        };
        let at = stores
            .iter()
            .position(|s| same(s.as_path()))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--offset {g}: {} is not one of the stores given",
                    store.display()
                )
            })?;
        out[at] = ns;
    }
    Ok(out)
}

pub fn run(args: &ExtractArgs) -> anyhow::Result<i32> {
    let window = window(&args.window.start, &args.window.end)?;
    // Without -f the words after the store are the filter, as tcpdump takes it.
    let (stores, expr): (Vec<PathBuf>, String) = match &args.filter {
        Some(f) => (args.args.iter().map(PathBuf::from).collect(), f.clone()),
        None => {
            let is_store = |w: &&String| Path::new(w).join(meta::MANIFEST).is_file();
            if let Some(dir) = args.args[1..].iter().find(is_store) {
                anyhow::bail!(
                    "'{dir}' is a store, not a filter word: to extract from several stores give the filter with -f"
                );
            }
            (vec![PathBuf::from(&args.args[0])], args.args[1..].join(" "))
        }
    };
    let offsets = offsets(&stores, &args.offsets)?;
    let opened = stores
        .iter()
        .map(|s| open_input(s, &args.data_dirs))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let on_damage = if args.strict {
        OnDamage::Stop
    } else {
        OnDamage::Skip
    };
    let selection = select(&opened, &offsets, window, &expr, !args.no_index, on_damage)?;
    if args.explain {
        explain(
            &expr,
            args.no_index,
            selection.predicate.as_ref(),
            &selection.plan,
        );
    }
    let format = match args.window.format.as_deref() {
        Some("pcap") => Format::Pcap,
        Some(_) => Format::Pcapng,
        None => selection.plan.store_format.unwrap_or(Format::Pcapng),
    };
    let Selection { plan, programs, .. } = selection;
    let mut filter = |lt: u16, p: &Packet<'_>| programs.matches(lt, p.data);

    let (files_selected, chunks_selected) = (plan.files_selected, plan.chunks_selected);
    let pruned = skipped_note(&plan);
    let result = if args.window.write == "-" {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        plan.write(format, &mut filter, &mut out)
            .and_then(|r| out.flush().map(|_| r).map_err(ExtractError::from))
    } else {
        let mut out = std::fs::File::create(&args.window.write)
            .with_context(|| format!("cannot create {}", args.window.write))?;
        plan.write(format, &mut filter, &mut out)
    };
    let report = match result {
        Ok(r) => r,
        // The reader (e.g. `tcpdump -c N`) went away: what it wanted, it has.
        Err(ExtractError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
        Err(ExtractError::Output(e)) => anyhow::bail!("{}: writing failed: {e}", args.window.write),
        Err(e) => return Err(e.into()),
    };
    for d in &report.damage {
        eprintln!("tapdeck: damaged: {d}");
    }
    let lost = damage_note(&report);
    eprintln!(
        "tapdeck: wrote {} packets ({} left out by the filter); decoded {} of {} files, {} of {} chunks (selected {} files, {} chunks by the index){pruned}{lost}",
        report.packets_written,
        report.packets_filtered,
        report.files_decoded,
        report.files_total,
        report.chunks_decoded,
        report.chunks_total,
        files_selected,
        chunks_selected
    );
    // 3: the output holds everything but the damage reported (see `extract --help`).
    Ok(if report.damage.is_empty() { 0 } else { 3 })
}

/// The summary's note of what the plan left unread: files by their names' times or the
/// store catalog, chunks by the flow index.
fn skipped_note(plan: &Plan) -> String {
    let chunks = match plan.chunks_pruned {
        0 => String::new(),
        n => format!("; {n} chunks in the window skipped by the flow index"),
    };
    let catalog = match plan.files_skipped_by_catalog {
        0 => chunks,
        n => format!("{chunks}; {n} files skipped by the store catalog"),
    };
    match plan.files_skipped_by_time {
        0 => catalog,
        n => format!("{catalog}; {n} files outside the window skipped by their names' times"),
    }
}

/// The summary's note of the damage read around (empty when none).
fn damage_note(report: &ExtractReport) -> String {
    let cut = report
        .damage
        .iter()
        .filter(|d| d.packets_lost.is_none())
        .count();
    match (report.damage.len(), cut) {
        (0, _) => String::new(),
        (places, 0) => format!(
            "; DAMAGE: {places} place(s) could not be read, {} packets lost (by the index's count)",
            report.packets_lost()
        ),
        (places, cut) => format!(
            "; DAMAGE: {places} place(s) could not be read, {} packets lost (by the index's count) plus the cut-off tails of {cut} file(s), whose packets no index counts",
            report.packets_lost()
        ),
    }
}

/// What an extract reads: the plan (chunks in the window that the flow index does not
/// rule out) and libpcap's program per link type, which decides every packet.
pub struct Selection {
    pub plan: Plan,
    pub programs: LinkPrograms,
    pub predicate: Option<Predicate>,
}

/// Plans reading `stores` (with their clock offsets) in `window` through `expr`: the
/// files' names skip files outside the window and the filter's index-answerable form
/// skips chunks (unless `use_index` is false); libpcap still decides every packet.
pub fn select(
    stores: &[Store],
    offsets: &[i64],
    window: TimeWindow,
    expr: &str,
    use_index: bool,
    on_damage: OnDamage,
) -> anyhow::Result<Selection> {
    let inputs: Vec<StoreInput<'_>> = stores
        .iter()
        .zip(offsets)
        .map(|(store, &offset_ns)| StoreInput { store, offset_ns })
        .collect();
    let predicate = if use_index {
        Predicate::parse(expr)
    } else {
        None
    };
    let plan = Plan::builder(&inputs)
        .window(window)
        .on_damage(on_damage)
        .prune(predicate.as_ref())
        .by_name_time(use_index)
        .build()?;
    // Compiled once per link type, before any output is written.
    let programs = LinkPrograms::compile(expr, &plan.linktypes()).map_err(|e| {
        anyhow::anyhow!(
            "filter '{expr}' does not compile for link type {}: {}",
            e.linktype,
            e.error
        )
    })?;
    Ok(Selection {
        plan,
        programs,
        predicate,
    })
}

/// `--explain`: how the chunks to read were chosen.
fn explain(expr: &str, no_index: bool, predicate: Option<&Predicate>, plan: &Plan) {
    let how = match (expr.trim().is_empty(), no_index, predicate) {
        (true, _, _) => "no filter: every chunk in the window is read".to_string(),
        (false, true, _) => "--no-index: every chunk in the window is read".to_string(),
        (false, false, Some(p)) => format!(
            "the flow index answers `{}`: chunks it rules out are skipped, libpcap filters the rest",
            p.explain()
        ),
        (false, false, None) => format!(
            "the flow index cannot answer `{expr}` (only host/net/port/portrange/proto/tcp/udp/icmp/ip/ip6/vlan with and/or/not): every chunk in the window is read"
        ),
    };
    eprintln!("tapdeck: explain: {how}");
    explain_time(no_index, plan);
    for c in &plan.choices {
        eprintln!(
            "tapdeck: explain: {}: {} of {} chunks in the window read{}",
            c.path.display(),
            c.chosen,
            c.in_window,
            if c.indexed { "" } else { " (no flow index)" }
        );
    }
    eprintln!(
        "tapdeck: explain: {} of {} chunks in the window read, {} ruled out by the flow index",
        plan.chunks_selected,
        plan.chunks_selected + plan.chunks_pruned,
        plan.chunks_pruned
    );
}

/// `--explain`, files: how many the names' times left unopened, and the files whose
/// packets leave their names' span (their streams are read whole).
fn explain_time(no_index: bool, plan: &Plan) {
    if no_index {
        eprintln!("tapdeck: explain: --no-index: every file is opened");
        return;
    }
    for path in &plan.out_of_name_span {
        eprintln!(
            "tapdeck: explain: {}: holds packets outside the times its name and the next file's give: every file of its stream opened",
            path.display()
        );
    }
    eprintln!(
        "tapdeck: explain: skipped by time: {} of {} files (their names place them outside the window)",
        plan.files_skipped_by_time, plan.files_total
    );
    for (path, why) in &plan.catalog_skips {
        let why = match why {
            CatalogSkip::OutsideWindow => "its packets lie outside the window",
            CatalogSkip::NoMatch => "its summary shows no packet can match the filter",
        };
        eprintln!(
            "tapdeck: explain: {}: skipped by the store catalog: {why}",
            path.display()
        );
    }
    eprintln!(
        "tapdeck: explain: store catalog: {} entries consulted ({} read whole, the rest settled by the member lists and address slices of {} groups); {} more files skipped (their time range or summary rules them out)",
        plan.catalog_entries,
        plan.catalog_records,
        plan.catalog_groups,
        plan.files_skipped_by_catalog
    );
}

/// Opens an input: a store directory, or a plain capture file (read by its sidecar's
/// blocks, see `tapdeck index`).
pub fn open_input(path: &Path, moved: &[PathBuf]) -> anyhow::Result<Store> {
    if path.is_file() {
        return Ok(Store::of_capture(path));
    }
    if !path.is_dir() {
        anyhow::bail!(
            "{}: no such store directory or capture file",
            path.display()
        );
    }
    open_store(path, moved)
}

/// Opens a store for extraction: a directory with neither a manifest nor stored files is
/// not one.
pub fn open_store(dir: &Path, moved: &[PathBuf]) -> anyhow::Result<Store> {
    let store = Store::open_with(dir, moved)?;
    if store.manifest.is_none() && store.files.is_empty() && store.partials.is_empty() {
        anyhow::bail!(
            "{}: not a tapdeck store (no {} and no stored files in it); name the directory `tapdeck record --store` wrote",
            dir.display(),
            meta::MANIFEST
        );
    }
    Ok(store)
}
