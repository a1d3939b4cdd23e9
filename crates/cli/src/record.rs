//! `tapdeck record`: its flags are the record options (`tapdeck_recorder::options`, which
//! builds the recorder configuration); this installs signal handlers, shows progress, and
//! prints the final accounting.

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{bail, Context};
use tapdeck_capture::{
    parse_schedule, AfPacketSource, FileSource, PacketSource, SyntheticSource, UnknownProfile,
};
use tapdeck_recorder::error::OptionsError;
use tapdeck_recorder::options::RecordOptions;
use tapdeck_recorder::pipeline::Control;
use tapdeck_recorder::recorder::{
    RecorderConfig, Recording, Rotation, Running, StatsWriter, Summary,
};
use tapdeck_recorder::retention::RetentionPolicy;
use tapdeck_recorder::stats::StatsRecord;

use crate::exit::usage;
use signal_hook::consts::SIGHUP;

/// Says at start what a live recording will do about files and disk space.
fn print_live_defaults(rotation: &Rotation, retention: &RetentionPolicy) {
    eprintln!("tapdeck: {}", live_defaults(rotation, retention));
}

/// What a live recording will do about files and disk space, in one line.
pub(crate) fn live_defaults(rotation: &Rotation, retention: &RetentionPolicy) -> String {
    let cut = match (rotation.max_bytes, rotation.interval_ns) {
        (None, None) => "one file until stopped (no rotation)".to_string(),
        (Some(b), None) => format!("a new file every {}", human_bytes(b)),
        (None, Some(i)) => format!("a new file every {} s", i / 1_000_000_000),
        (Some(b), Some(i)) => format!(
            "a new file every {} s or {}",
            i / 1_000_000_000,
            human_bytes(b)
        ),
    };
    let keep = match (retention.max_bytes, retention.min_free) {
        (None, None) => {
            "no retention: a full disk drops packets (counted) until space returns".to_string()
        }
        (m, f) => {
            let mut parts = Vec::new();
            if let Some(m) = m {
                parts.push(format!("the store under {}", human_bytes(m)));
            }
            if let Some(f) = f {
                parts.push(format!("{} free", human_bytes(f)));
            }
            format!(
                "keeping {} by deleting the oldest files (never the 2 newest nor any younger than {} s)",
                parts.join(" and "),
                retention.min_keep.as_secs()
            )
        }
    };
    format!("{cut}; {keep} (see --rotate-size, --rotate-interval, --max-bytes, --min-free; 0 turns each off)")
}

/// The store directory and its data directories.
fn store_dirs(cfg: &RecorderConfig) -> Vec<std::path::PathBuf> {
    std::iter::once(cfg.store.clone())
        .chain(cfg.dirs.iter().cloned())
        .collect()
}

/// With --user, the directories the recorder writes to are created (as root, before the
/// switch) and given to that user, so the store need not exist beforehand.
fn prepare_dirs_for(user: &str, dirs: &[std::path::PathBuf]) -> anyhow::Result<()> {
    let (uid, gid) = tapdeck_capture::lookup_user(user).map_err(crate::wording::capture)?;
    for dir in dirs {
        if dir.exists() {
            continue;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .with_context(|| format!("cannot give {} to user {user}", dir.display()))?;
    }
    Ok(())
}

/// After the switch: says which directory the user cannot write to, rather than failing
/// at the first file.
fn check_writable_by(user: &str, dirs: &[std::path::PathBuf]) -> anyhow::Result<()> {
    for dir in dirs {
        let probe = dir.join(format!(".tapdeck-write-test-{}", std::process::id()));
        match std::fs::File::create(&probe) {
            Ok(_) => {
                let _ = std::fs::remove_file(&probe);
            }
            Err(e) => bail!(
                "--user {user} cannot write to {} ({e}): give that user write access (chown {user} {}) or choose another store",
                dir.display(),
                dir.display()
            ),
        }
    }
    Ok(())
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn run(opts: &RecordOptions) -> anyhow::Result<i32> {
    let cfg = opts
        .builder()
        .map_err(|e| match e {
            // An option of another kind of source: a usage error, as clap's are.
            OptionsError::LiveOnly { .. } | OptionsError::SyntheticOnly { .. } => {
                usage(e.to_string())
            }
            e => e.into(),
        })?
        .build();
    let control = Arc::new(Control::default());
    install_signals(&control)?;
    let summary = match (&opts.read, &opts.synthetic) {
        (None, None) if opts.is_live() => {
            let sources = open_live(opts, &cfg)?;
            if !opts.quiet {
                print_live_defaults(&cfg.rotation, &cfg.retention);
            }
            {
                let stats = stats_sink(opts, &cfg)?;
                run_with(cfg, sources, control, stats, opts)?
            }
        }
        (Some(path), None) => {
            let source = FileSource::open(path)
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .with_limit(opts.count);
            {
                let stats = stats_sink(opts, &cfg)?;
                run_with(cfg, vec![source], control, stats, opts)?
            }
        }
        (None, Some(profile)) => {
            let profile = profile
                .parse()
                .map_err(|e: UnknownProfile| anyhow::anyhow!("--synthetic: {e}"))?;
            let mut source = SyntheticSource::new(profile, opts.count, 1).with_rate(opts.rate);
            if let Some(spec) = &opts.rate_schedule {
                let phases =
                    parse_schedule(spec).map_err(|e| anyhow::anyhow!("--rate-schedule: {e}"))?;
                source = source.with_schedule(phases);
            }
            let stats = stats_sink(opts, &cfg)?;
            run_with(cfg, vec![source], control, stats, opts)?
        }
        _ => {
            return Err(usage(
                "say where packets come from: -i IF, -r FILE or --synthetic PROFILE",
            ))
        }
    };
    print_summary(&summary);
    if let Some(fatal) = summary.fatal {
        bail!("{fatal}");
    }
    Ok(0)
}

/// Opens the capture sockets of live recording (`-i`, `serve`) and, with `user`, gives up
/// root for that user once they are open, with the store's directories made theirs.
pub(crate) fn open_live(
    opts: &RecordOptions,
    cfg: &RecorderConfig,
) -> anyhow::Result<Vec<AfPacketSource>> {
    let live = opts.capture_config()?;
    let sources =
        AfPacketSource::open_fanout(&live, opts.threads).map_err(crate::wording::capture)?;
    if let Some(user) = &opts.user {
        let dirs = store_dirs(cfg);
        prepare_dirs_for(user, &dirs)?;
        tapdeck_capture::drop_privileges(user).map_err(crate::wording::capture)?;
        check_writable_by(user, &dirs)?;
    }
    Ok(sources)
}

/// Where the JSON-lines stats records go: `--stats` (a file, or `-` for standard output),
/// by default STORE/stats.jsonl.
pub(crate) fn stats_sink(
    opts: &RecordOptions,
    cfg: &RecorderConfig,
) -> anyhow::Result<Box<dyn Write + Send>> {
    Ok(match opts.stats.as_deref() {
        Some("-") => Box::new(std::io::stdout()),
        Some(path) => Box::new(tapdeck_recorder::report::LineFile::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create stats file {path}"))?,
        )),
        None => {
            std::fs::create_dir_all(&cfg.store)
                .with_context(|| format!("cannot create store {}", cfg.store.display()))?;
            let path = cfg.store.join("stats.jsonl");
            Box::new(tapdeck_recorder::report::LineFile::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .with_context(|| format!("cannot open {}", path.display()))?,
            ))
        }
    })
}

/// Records `sources`, the stats records going to `stats_out`.
pub(crate) fn run_with<S: PacketSource + 'static>(
    cfg: RecorderConfig,
    sources: Vec<S>,
    control: Arc<Control>,
    stats_out: Box<dyn Write + Send>,
    opts: &RecordOptions,
) -> anyhow::Result<Summary> {
    finish(start(cfg, sources, control)?, stats_out, opts)
}

/// Starts recording `sources` (see [`finish`]).
pub(crate) fn start<S: PacketSource + 'static>(
    cfg: RecorderConfig,
    sources: Vec<S>,
    control: Arc<Control>,
) -> anyhow::Result<Running> {
    tracing::info!(
        "recording {} into {}",
        sources
            .iter()
            .map(|s| s.describe())
            .collect::<Vec<_>>()
            .join("; "),
        cfg.store.display()
    );
    Recording::start(cfg, sources, control).map_err(|e| anyhow::anyhow!(e))
}

/// Waits for a recording to end: its stats records go to `stats_out`, and to a progress
/// line on a terminal unless `opts.quiet`.
pub(crate) fn finish(
    running: Running,
    stats_out: Box<dyn Write + Send>,
    opts: &RecordOptions,
) -> anyhow::Result<Summary> {
    let mut stats = StatsWriter::new(stats_out);
    let progress = !opts.quiet && std::io::stderr().is_terminal();
    let mut last: Option<StatsRecord> = None;
    let summary = running
        .join(|record, done| {
            stats.write(record, done);
            if progress {
                show_progress(record, last.as_ref());
                if done {
                    eprintln!();
                }
            }
            last = Some(record.clone());
        })
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(summary)
}

/// One line, rewritten in place: rates since the previous record and the running totals.
fn show_progress(r: &StatsRecord, prev: Option<&StatsRecord>) {
    let dt = prev
        .map_or(r.elapsed_s, |p| r.elapsed_s - p.elapsed_s)
        .max(1e-9);
    let (p0, b0) = prev.map_or((0, 0), |p| (p.totals.stored, p.totals.staged_bytes));
    let t = &r.totals;
    eprint!(
        "\r{:>8.1} s  stored {:>12}  {:>8.3} Mpps  {:>8.1} MB/s in  {:>8.1} MB written  dropped {}  staging {:>3.0} %\x1b[K",
        r.elapsed_s,
        t.stored,
        (t.stored - p0) as f64 / dt / 1e6,
        (t.staged_bytes - b0) as f64 / dt / 1e6,
        r.bytes_written as f64 / 1e6,
        t.dropped.total(),
        r.staging_fill * 100.0
    );
}

pub(crate) fn print_summary(s: &Summary) {
    let t = &s.stats.totals;
    let elapsed = s.stats.elapsed_s.max(1e-9);
    if s.discard {
        eprintln!("tapdeck: --discard: nothing was written; \"stored\" counts the packets the writer discarded");
    }
    eprintln!(
        "tapdeck: {:.2} s, {} files written, {} deleted by retention",
        elapsed, s.stats.files_written, s.stats.files_deleted
    );
    eprintln!(
        "  packets: seen {}  stored {}  dropped {} (kernel {}, staging full {}, write error {})",
        t.seen,
        t.stored,
        t.dropped.total(),
        t.dropped.kernel,
        t.dropped.staging_full,
        t.dropped.write_error
    );
    if t.dropped.write_error > 0 {
        eprintln!(
            "  lost to the disk: {} packets could not be written (full or failing data directories; counted as write errors, see the log)",
            t.dropped.write_error
        );
    }
    if s.stats.retention_holds > 0 {
        eprintln!(
            "  retention held writing {} time(s), refusing {} chunks: the limit could only be kept by deleting the newest files (see the log)",
            s.stats.retention_holds, s.stats.retention_refused
        );
    }
    let balance = t.unaccounted();
    eprintln!(
        "  accounting: seen = stored + dropped {}",
        if balance == 0 {
            "holds".to_string()
        } else {
            format!("is off by {balance} (please report this)")
        }
    );
    eprintln!(
        "  rate: {:.3} Mpps, {:.1} MB/s of capture data; {} bytes written{}",
        t.stored as f64 / elapsed / 1e6,
        t.staged_bytes as f64 / elapsed / 1e6,
        s.stats.bytes_written,
        if s.stats.bytes_written > 0 {
            format!(
                " ({:.2}:1)",
                t.staged_bytes as f64 / s.stats.bytes_written as f64
            )
        } else {
            String::new()
        }
    );
    for (codec, c) in &s.stats.codecs {
        eprintln!(
            "  codec {codec:<8} {:>6} chunks  {:>14} bytes in  {:>14} out  ({:.2}:1)",
            c.chunks,
            c.bytes_in,
            c.bytes_out,
            c.bytes_in as f64 / c.bytes_out.max(1) as f64
        );
    }
    print_ladder(s, elapsed);
    if !s.stats.cpu_seconds.is_empty() && t.stored > 0 {
        let per_million = |cpu: f64| cpu / (t.stored.max(1) as f64 / 1e6);
        let roles: Vec<String> = s
            .stats
            .cpu_seconds
            .iter()
            .map(|(role, cpu)| {
                format!(
                    "{role} {cpu:.2} s ({:.3} s per million stored)",
                    per_million(*cpu)
                )
            })
            .collect();
        eprintln!("  cpu: {}", roles.join(", "));
    }
    // Two cuts, each against what it was given: the snap length (of the source, or
    // --snaplen) against the wire, then --headers against what the source captured.
    if t.wire_bytes > t.captured_bytes {
        eprintln!(
            "{}",
            cut_line(
                "snap length",
                t.captured_bytes,
                t.wire_bytes,
                "the bytes on the wire"
            )
        );
    }
    if s.headers.is_some() && t.captured_bytes > 0 {
        eprintln!(
            "{}",
            cut_line("headers", t.kept_bytes, t.captured_bytes, "captured bytes")
        );
    }
}

/// `  headers: kept 6.2 % of captured bytes (saved 1.23 GB)`.
fn cut_line(cut: &str, kept: u64, of: u64, what: &str) -> String {
    format!(
        "  {cut}: kept {:.1} % of {what} (saved {})",
        100.0 * kept as f64 / of.max(1) as f64,
        decimal_bytes(of.saturating_sub(kept))
    )
}

/// Bytes in decimal units, three significant digits from 1 kB on.
fn decimal_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if n < 1000 {
        return format!("{n} B");
    }
    let (mut v, mut unit) = (n as f64 / 1000.0, 0);
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    let digits = if v < 10.0 {
        2
    } else if v < 100.0 {
        1
    } else {
        0
    };
    format!("{v:.digits$} {}", UNITS[unit])
}

/// SIGINT/SIGTERM: drain and finish every file; a second one exits at once. SIGHUP: rotate.
pub(crate) fn install_signals(control: &Arc<Control>) -> anyhow::Result<()> {
    install_stop_signals(control)?;
    on_rotate_signal(control)
}

/// SIGINT/SIGTERM: drain and finish every file; a second one exits at once.
pub(crate) fn install_stop_signals(control: &Arc<Control>) -> anyhow::Result<()> {
    let c = Arc::clone(control);
    on_stop_signals(move || c.stop.store(true, Ordering::SeqCst))
}

/// SIGINT/SIGTERM call `on_stop`; a second one exits at once (status 130). `on_stop` runs in
/// the signal handler, so it must only store to atomics (async-signal-safe).
pub(crate) fn on_stop_signals(
    on_stop: impl Fn() + Clone + Send + Sync + 'static,
) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let signalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        // Registered first, the shutdown runs only if an earlier signal already set the flag.
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&signalled))
            .context("cannot install signal handlers")?;
        signal_hook::flag::register(sig, Arc::clone(&signalled))
            .context("cannot install signal handlers")?;
        let f = on_stop.clone();
        // SAFETY: `on_stop` only stores to atomics (this function's contract), which is
        // async-signal-safe.
        unsafe { signal_hook::low_level::register(sig, f) }
            .context("cannot install signal handlers")?;
    }
    Ok(())
}

/// SIGHUP: rotate.
pub(crate) fn on_rotate_signal(control: &Arc<Control>) -> anyhow::Result<()> {
    let c = Arc::clone(control);
    // SAFETY: the handler only adds to an atomic, which is async-signal-safe.
    unsafe {
        signal_hook::low_level::register(SIGHUP, move || {
            c.rotate.fetch_add(1, Ordering::SeqCst);
        })
    }
    .context("cannot install signal handlers")?;
    Ok(())
}

/// Which rung (or raw) took how many bytes per second, and why the controller chose it;
/// then what the controller believed at the end (see `tapdeck_recorder::controller`).
fn print_ladder(s: &Summary, elapsed: f64) {
    let mb_s = |bytes: u64| bytes as f64 / elapsed / 1e6;
    for (codec, reasons) in &s.stats.ladder {
        let total: u64 = reasons.values().sum();
        let why: Vec<String> = reasons
            .iter()
            .map(|(reason, &b)| format!("{reason} {:.1}", mb_s(b)))
            .collect();
        eprintln!(
            "  ladder {codec:<8} {:>8.1} MB/s of capture data ({})",
            mb_s(total),
            why.join(", ")
        );
    }
    for (i, c) in s.stats.controller.iter().enumerate() {
        let rungs: Vec<String> = c
            .rungs
            .iter()
            .filter_map(|r| {
                Some(format!(
                    "{} {:.0} MB/s {:.2}:1",
                    r.codec,
                    r.bytes_per_s? / 1e6,
                    1.0 / r.ratio?.max(1e-9)
                ))
            })
            .collect();
        eprintln!(
            "  controller[{i}]: offered {:.1} MB/s, disk {} (busy {:.0} %), plan {}; per compressor: {}",
            c.offered_bytes_per_s / 1e6,
            c.disk_bytes_per_s
                .map_or("unmeasured".to_string(), |d| format!("{:.0} MB/s", d / 1e6)),
            c.disk_busy * 100.0,
            c.plan,
            if rungs.is_empty() {
                "unmeasured".to_string()
            } else {
                rungs.join(", ")
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    use crate::args::{Cli, Command};

    /// A config file (issue 16) and the flags fill the same `RecordOptions`: every `record`
    /// flag must be one of its keys, with the same default.
    #[test]
    fn every_record_flag_is_a_record_option_key_with_the_same_default() {
        let cli = Cli::command();
        let record = cli.find_subcommand("record").unwrap();
        let mut flags: Vec<String> = record
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| !["log", "help"].contains(l))
            .map(str::to_string)
            .collect();
        flags.sort();
        let json = serde_json::to_value(RecordOptions::default()).unwrap();
        let mut keys: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(flags, keys);

        let Command::Record(args) = Cli::parse_from(["tapdeck", "record", "--store", "s"]).command
        else {
            unreachable!()
        };
        let from_file: RecordOptions =
            serde_json::from_value(serde_json::json!({"store": "s"})).unwrap();
        assert_eq!(*args, from_file);
    }

    #[test]
    fn bytes_in_decimal_units() {
        let cases = [
            (0, "0 B"),
            (999, "999 B"),
            (1000, "1.00 kB"),
            (2_346, "2.35 kB"),
            (12_345, "12.3 kB"),
            (123_456, "123 kB"),
            (1_234_567_890, "1.23 GB"),
            (5_000_000_000_000_000, "5000 TB"),
        ];
        for (n, want) in cases {
            assert_eq!(decimal_bytes(n), want, "{n}");
        }
        assert_eq!(
            cut_line("headers", 62, 1000, "captured bytes"),
            "  headers: kept 6.2 % of captured bytes (saved 938 B)"
        );
    }
}
