//! `tapdeck convert`, `decrypt` and `keygen`: flags to options, a progress bar, the report.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use tapdeck_anon::KeyFile;
use tapdeck_dataset::{convert as conv, Anonymization, ConvertOptions};
use tapdeck_recorder::ladder::CodecLadder;
use tapdeck_recorder::merge::{self, MergeOptions};
use tapdeck_recorder::pipeline::Control;
use tapdeck_recorder::recorder::RecorderConfig;
use tapdeck_store::meta;

use crate::args::{AnalyzeArgs, ConvertArgs, DecryptArgs, KeygenArgs};
use crate::wording;

pub fn run(args: &ConvertArgs) -> anyhow::Result<i32> {
    let shard = args.shard.as_deref().map(parse_shard).transpose()?;
    let key = args
        .key
        .as_deref()
        .map(|k| KeyFile::load(k).map(Arc::new))
        .transpose()?;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let bar = (!args.quiet && std::io::stderr().is_terminal()).then(progress_bar);
    let opts = ConvertOptions {
        out: args.out.clone(),
        jobs,
        shard,
        anonymization: Anonymization {
            key,
            addresses: args.anonymize_ips,
        },
        packets: !args.no_packets,
        progress: bar.clone().map(|b| {
            Box::new(move |stage: &str, done: usize, total: usize| {
                b.set_prefix(stage.to_string());
                b.set_length(total as u64);
                b.set_position(done as u64);
            }) as tapdeck_dataset::convert::Progress
        }),
    };
    let mut inputs = if args.merge {
        vec![merged_inputs(args)?]
    } else {
        args.inputs.clone()
    };
    if args.filter.is_some() || args.start.is_some() || args.end.is_some() {
        inputs = vec![selected_input(args, &inputs)?];
    }
    let report =
        conv::convert(&inputs, &opts, &mut |w| tracing::warn!("{w}")).map_err(wording::dataset)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if args.json {
        print_json(args, &report);
    } else {
        print_report(args, &report)?;
    }
    Ok(0)
}

/// Files converted per stage, on a terminal.
fn progress_bar() -> ProgressBar {
    let b = ProgressBar::new(0);
    b.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} files, {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    b
}

/// `--json`: the report as one line.
fn print_json(args: &ConvertArgs, report: &conv::Report) {
    let j = serde_json::json!({
        "dataset": args.out,
        "sources": report.sources,
        "converted": report.converted,
        "skipped": report.skipped,
        "seconds": report.seconds,
        "counts": report.counts,
        "complete": report.missing_sources.is_empty(),
        "missing_sources": report.missing_sources,
    });
    println!("{j}");
}

/// The report for a person: sources, packets, RPC pairing, rows, and what did not decode.
fn print_report(args: &ConvertArgs, report: &conv::Report) -> anyhow::Result<()> {
    let c = |k: &str| report.counts.get(k).copied().unwrap_or(0);
    let mut out = std::io::stdout().lock();
    let secs = report.seconds.max(1e-9);
    writeln!(
        out,
        "tapdeck convert: {} sources ({} converted, {} unchanged) into {} in {:.2} s",
        report.sources,
        report.converted,
        report.skipped,
        args.out.display(),
        report.seconds
    )?;
    writeln!(
        out,
        "  packets: {} ({:.0} per second)",
        c("packets"),
        c("packets") as f64 / secs
    )?;
    writeln!(
        out,
        "  rpc: {} calls, {} replies; unmatched {} calls, {} replies (an estimate of capture loss)",
        c("rpc.calls"),
        c("rpc.replies"),
        c("rpc.unmatched_calls"),
        c("rpc.unmatched_replies")
    )?;
    writeln!(out, "  nfs operations: {}", c("rows.nfs_ops"))?;
    let rows: u64 = report
        .counts
        .iter()
        .filter(|(k, _)| k.starts_with("rows."))
        .map(|(_, v)| v)
        .sum();
    writeln!(out, "  rows: {rows} ({:.0} per second)", rows as f64 / secs)?;
    if let Some(first) = report.missing_sources.first() {
        writeln!(
            out,
            "  incomplete: {} of {} sources have no rows yet (e.g. {first}); run the other --shard parts, or convert again",
            report.missing_sources.len(),
            report.sources
        )?;
    }
    let failures: Vec<String> = report
        .counts
        .iter()
        .filter(|(k, v)| k.starts_with("failed.") && **v > 0)
        .map(|(k, v)| format!("{} {v}", &k["failed.".len()..]))
        .collect();
    if !failures.is_empty() {
        writeln!(out, "  not decoded: {}", failures.join(", "))?;
    }
    Ok(())
}

/// `convert --merge`: the inputs merged into DATASET/_merged/store, which is reused while
/// its manifest still describes the inputs (same stores, offsets and packet counts), so a
/// rerun converts nothing new.
fn merged_inputs(args: &ConvertArgs) -> anyhow::Result<PathBuf> {
    let specs = crate::extract::input_specs(&args.inputs, &args.offsets)?;
    let (_, surveys) = merge::open_inputs(&specs).map_err(anyhow::Error::msg)?;
    let out = args.out.join("_merged").join("store");
    let wanted: Vec<(String, i64, u64)> = surveys
        .iter()
        .map(|s| {
            let abs = std::fs::canonicalize(&s.store)
                .map_or_else(|_| s.store.clone(), |p| p.display().to_string());
            (abs, s.offset_ns, s.packets)
        })
        .collect();
    let existing = std::fs::read(out.join(meta::MANIFEST))
        .ok()
        .and_then(|b| serde_json::from_slice::<meta::Manifest>(&b).ok())
        .and_then(|m| m.merge);
    if let Some(m) = existing {
        let had: Vec<(String, i64, u64)> = m
            .inputs
            .iter()
            .map(|i| (i.store.clone(), i.offset_ns, i.packets + i.duplicates))
            .collect();
        if m.complete && had == wanted {
            tracing::info!(
                "the inputs are unchanged: converting the merge in {}",
                out.display()
            );
            return Ok(out);
        }
    }
    if out.exists() {
        std::fs::remove_dir_all(&out)
            .with_context(|| format!("cannot remove the old merge {}", out.display()))?;
    }
    // One zstd:1 compressor and a small pool: the merge feeds a conversion, which is the
    // slow part; no stats worth reading.
    let cfg = RecorderConfig::builder(out.clone())
        .ladder(CodecLadder::parse("zstd:1")?)
        .staging_bytes(64 << 20)
        .compressors(1)
        .direct(false)
        .stats_interval(std::time::Duration::from_secs(3600))
        .options(serde_json::json!({ "source": "convert --merge" }))
        .build();
    let opts = MergeOptions {
        window: Default::default(),
        dedup_window_ns: None,
    };
    let report = merge::merge(&specs, &opts, cfg, Arc::new(Control::default()), |_, _| {})
        .map_err(anyhow::Error::msg)?;
    tracing::info!(
        "merged {} packets of {} stores into {}",
        report.packets_written,
        specs.len(),
        out.display()
    );
    Ok(out)
}

/// `--filter`/`--start`/`--end`: the stores' selected packets in one file, read through
/// the flow index exactly as `tapdeck extract` reads them, kept in DATASET/_selected with
/// a note of what it holds, and made again only when the stores or the selection change.
fn selected_input(args: &ConvertArgs, stores: &[PathBuf]) -> anyhow::Result<PathBuf> {
    if let Some(s) = (stores.iter()).find(|s| !s.is_file() && !s.join(meta::MANIFEST).is_file()) {
        bail!(
            "{}: --filter, --start and --end select from tapdeck stores and capture files, and this is neither",
            s.display()
        );
    }
    let window = crate::extract::window(&args.start, &args.end)?;
    let expr = args.filter.clone().unwrap_or_default();
    let dir = args.out.join("_selected");
    let out = dir.join("selection.pcapng");
    let note_path = dir.join("selection.json");
    // What the selection is made of: each store's files with their sizes (a store that
    // grew or lost files to retention is read again), the filter and the window.
    let opened = stores
        .iter()
        .map(|s| crate::extract::open_input(s, &[]))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut files = Vec::new();
    for store in &opened {
        for f in (store.files.iter().chain(&store.partials)).chain(&store.captures) {
            let size = std::fs::metadata(f).map(|m| m.len()).unwrap_or(0);
            files.push(serde_json::json!([f, size]));
        }
    }
    let note = serde_json::json!({
        "stores": stores.iter().map(|s| std::fs::canonicalize(s).unwrap_or_else(|_| s.clone())).collect::<Vec<_>>(),
        "files": files,
        "filter": expr,
        "start": args.start,
        "end": args.end,
    });
    let had = std::fs::read(&note_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    if had.as_ref() == Some(&note) && out.is_file() {
        tracing::info!("the selection is unchanged: converting {}", out.display());
        return Ok(out);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let offsets = vec![0; opened.len()];
    let selection = crate::extract::select(
        &opened,
        &offsets,
        window,
        &expr,
        true,
        tapdeck_store::extract::OnDamage::Skip,
    )?;
    let (read, skipped) = (selection.plan.chunks_selected, selection.plan.chunks_pruned);
    let programs = selection.programs;
    let mut filter = |lt: u16, p: &tapdeck_pcap::Packet<'_>| programs.matches(lt, p.data);
    // Written beside, then renamed: an interrupted selection is never taken for a whole one.
    let tmp = dir.join(".selection.pcapng.tmp");
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?,
    );
    let report = selection
        .plan
        .write(tapdeck_pcap::Format::Pcapng, &mut filter, &mut file)?;
    file.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    for d in &report.damage {
        eprintln!("tapdeck: damaged: {d}");
    }
    std::fs::rename(&tmp, &out).with_context(|| format!("cannot write {}", out.display()))?;
    std::fs::write(&note_path, serde_json::to_vec_pretty(&note)?)
        .with_context(|| format!("cannot write {}", note_path.display()))?;
    eprintln!(
        "tapdeck: selected {} packets ({} left out by the filter) from {read} of {} chunks ({skipped} skipped by the flow index) into {}",
        report.packets_written,
        report.packets_filtered,
        read + skipped,
        out.display()
    );
    Ok(out)
}

fn parse_shard(s: &str) -> anyhow::Result<(usize, usize)> {
    let parsed = s
        .split_once('/')
        .and_then(|(i, n)| Some((i.trim().parse().ok()?, n.trim().parse().ok()?)));
    match parsed {
        Some((i, n)) if n > 0 && i < n => Ok((i, n)),
        _ => bail!("--shard {s:?}: write I/N with 0 <= I < N, e.g. --shard 0/4"),
    }
}

pub fn decrypt(args: &DecryptArgs) -> anyhow::Result<i32> {
    let key = KeyFile::load(&args.key)?;
    let cipher = key.name_cipher();
    let mut out = std::io::stdout().lock();
    let mut one = |name: &str| -> anyhow::Result<()> {
        let plain = cipher.decrypt_path(name.trim())?;
        out.write_all(&plain)?;
        out.write_all(b"\n")?;
        Ok(())
    };
    if args.names.is_empty() {
        for line in std::io::stdin().lock().lines() {
            let line = line.context("reading standard input")?;
            if !line.trim().is_empty() {
                one(&line)?;
            }
        }
    } else {
        for n in &args.names {
            one(n)?;
        }
    }
    Ok(0)
}

pub fn keygen(args: &KeygenArgs) -> anyhow::Result<i32> {
    let key = KeyFile::generate(&args.path)?;
    println!(
        "wrote key {} to {}: keep it safe, without it encrypted names cannot be read",
        key.key_id(),
        args.path.display()
    );
    Ok(0)
}

/// `tapdeck analyze …` runs `tapdeck-analyze …`: the analyses live in the Python package,
/// which meets the Rust side only at the dataset's files.
pub fn analyze(args: &AnalyzeArgs) -> anyhow::Result<i32> {
    let status = match std::process::Command::new("tapdeck-analyze")
        .args(&args.args)
        .status()
    {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "tapdeck-analyze is not installed: install the analysis package with `python3 -m pip install -e python` (scripts/setup.sh does)"
        ),
        Err(e) => bail!("cannot run tapdeck-analyze: {e}"),
    };
    Ok(status.code().unwrap_or(1))
}
