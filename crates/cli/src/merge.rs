//! `tapdeck merge`: flags to a merge of stores, the stats file, and the report.

use std::sync::Arc;

use anyhow::{bail, Context};
use tapdeck_recorder::error::OptionsError;
use tapdeck_recorder::ladder::CodecLadder;
use tapdeck_recorder::merge::{self, MergeOptions, MergeReport};
use tapdeck_recorder::options::{parse_size, DEFAULT_CHUNK_SIZE};
use tapdeck_recorder::pipeline::Control;
use tapdeck_recorder::recorder::{RecorderConfig, Rotation, StatsWriter};
use tapdeck_store::meta::ClockSync;
use tapdeck_store::read::format_time;

use crate::args::MergeArgs;
use crate::extract::{input_specs, window};
use crate::record::install_signals;

pub fn run(args: &MergeArgs) -> anyhow::Result<i32> {
    let window = window(&args.start, &args.end)?;
    let inputs = input_specs(&args.stores, &args.offsets)?;
    let dedup_window_ns = if args.dedup {
        let ns = merge::parse_nanos(&args.dedup_window)
            .map_err(|e| anyhow::anyhow!("--dedup-window {}: {e}", args.dedup_window))?;
        if ns < 0 {
            bail!("--dedup-window must not be negative");
        }
        Some(ns as u64)
    } else {
        None
    };
    let ladder = CodecLadder::parse(&args.codec).map_err(|cause| OptionsError::Invalid {
        flag: "--codec",
        cause,
    })?;
    let staging_bytes = parse_size("--staging", &args.staging)? as usize;
    if staging_bytes < 2 * DEFAULT_CHUNK_SIZE {
        bail!(
            "--staging must hold at least two chunks ({} bytes)",
            2 * DEFAULT_CHUNK_SIZE
        );
    }
    let rotate_size = args
        .rotate_size
        .as_deref()
        .map(|s| parse_size("--rotate-size", s))
        .transpose()?;
    let options = serde_json::json!({
        "source": format!("merge {}", args.stores.iter().map(|s| s.display().to_string()).collect::<Vec<_>>().join(" ")),
        "format": "pcapng",
        "codec": ladder.describe(),
        "chunk_size": DEFAULT_CHUNK_SIZE,
        "staging_bytes": staging_bytes,
        "rotate_size": rotate_size,
        "direct": !args.no_direct,
        "dedup_window_ns": dedup_window_ns,
        "start": args.start,
        "end": args.end,
    });
    // The recorder's defaults otherwise: pcapng, 4 MiB chunks, no retention.
    let cfg = RecorderConfig::builder(args.out.clone())
        .ladder(ladder)
        .staging_bytes(staging_bytes)
        .rotation(Rotation {
            max_bytes: rotate_size,
            interval_ns: None,
        })
        .direct(!args.no_direct)
        .options(options)
        .build();
    let control = Arc::new(Control::default());
    install_signals(&control)?;
    // Refuse bad inputs before anything is created.
    merge::open_inputs(&inputs).map_err(anyhow::Error::msg)?;
    merge::check_output(&args.out, &inputs).map_err(anyhow::Error::msg)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let stats_path = args.out.join("stats.jsonl");
    let stats_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&stats_path)
        .with_context(|| format!("cannot open {}", stats_path.display()))?;
    let mut stats = StatsWriter::new(Box::new(stats_file));
    let opts = MergeOptions {
        window,
        dedup_window_ns,
    };
    let report = merge::merge(&inputs, &opts, cfg, control, |r, done| stats.write(r, done))
        .map_err(anyhow::Error::msg)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    if let Some(fatal) = report.summary.as_ref().and_then(|s| s.fatal.clone()) {
        bail!("{fatal}");
    }
    Ok(0)
}

fn clock(c: &Option<ClockSync>) -> String {
    match c {
        Some(c) if c.synchronized => format!("synced (max error {} us)", c.max_error_us),
        Some(_) => "not synced".into(),
        None => "unknown".into(),
    }
}

fn seconds(ns: u64) -> String {
    format!("{:.6} s", ns as f64 / 1e9)
}

fn print_report(r: &MergeReport) {
    println!(
        "tapdeck merge: {} stores into {}: {} packets written, {} duplicates dropped{}",
        r.inputs.len(),
        r.out,
        r.packets_written,
        r.duplicates,
        r.dedup_window_ns
            .map_or(String::new(), |w| format!(" (window {w} ns)"))
    );
    println!(
        "  {:<16} {:<32} {:<32} {:>10} {:>22} {:>10} {:>8} {:>8} {:>14}  CLOCK",
        "STORE",
        "FIRST",
        "LAST",
        "STORED",
        "DROPS kernel/full/wr",
        "MERGED",
        "PKTS %",
        "BYTES %",
        "OFFSET ns"
    );
    for i in &r.inputs {
        let s = &i.survey;
        println!(
            "  {:<16} {:<32} {:<32} {:>10} {:>22} {:>10} {:>8.2} {:>8.2} {:>14}  {}",
            s.label,
            s.first_ts_ns.map_or("-".into(), format_time),
            s.last_ts_ns.map_or("-".into(), format_time),
            s.packets,
            format!(
                "{}/{}/{}",
                s.dropped_kernel, s.dropped_staging_full, s.dropped_write_error
            ),
            i.merged.packets,
            100.0 * i.packet_share,
            100.0 * i.byte_share,
            s.offset_ns,
            clock(&s.clock)
        );
        if i.merged.duplicates > 0 {
            println!("  {:<16} {} duplicates dropped", "", i.merged.duplicates);
        }
        if s.incomplete_files > 0 {
            println!(
                "  {:<16} {} incomplete files not read (`tapdeck verify --repair {}` finishes them)",
                "", s.incomplete_files, s.store
            );
        }
    }
    for rel in &r.spans {
        match (rel.overlap_ns, rel.gap_ns) {
            (Some(o), _) => println!(
                "  spans: {} and {} overlap for {}",
                rel.a,
                rel.b,
                seconds(o)
            ),
            (_, Some(g)) => println!(
                "  spans: {} and {} leave a gap of {} between them",
                rel.a,
                rel.b,
                seconds(g)
            ),
            _ => {}
        }
    }
    let merged_plus_dups: u64 = r
        .inputs
        .iter()
        .map(|i| i.merged.packets + i.merged.duplicates)
        .sum();
    let stored: u64 = r.inputs.iter().map(|i| i.survey.packets).sum();
    println!(
        "  accounting: merged {} + duplicates {} = {merged_plus_dups} of {stored} packets in the inputs{}",
        r.packets_written,
        r.duplicates,
        if merged_plus_dups == stored {
            String::new()
        } else {
            " (the rest fell outside --start/--end)".into()
        }
    );
    if let Some(s) = &r.summary {
        let t = &s.stats.totals;
        println!(
            "  output: {} files, {} packets stored, {} bytes written",
            s.stats.files_written, t.stored, s.stats.bytes_written
        );
    }
    if r.dedup_forgotten_early > 0 {
        println!(
            "  dedup: {} frames were forgotten before their window passed (memory bound); \
             copies of them may remain",
            r.dedup_forgotten_early
        );
    }
}
