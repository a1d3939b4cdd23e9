//! `tapdeck verify`: checks files and stores; with --repair, finalizes incomplete files.

use std::path::Path;

use tapdeck_store::read::{format_time, Store};
use tapdeck_store::repair::{self, Repaired};
use tapdeck_store::verify::{self, VerifiedFile, VerifyError};
use tapdeck_store::{lock, meta};

use crate::args::VerifyArgs;

/// Totals over every file checked.
#[derive(Default)]
struct Totals {
    ok: u64,
    failed: u64,
    /// Partial files a running recorder is writing: neither ok nor failed.
    live: u64,
    packets: u64,
    chunks: u64,
    bytes: u64,
}

pub fn run(args: &VerifyArgs) -> anyhow::Result<i32> {
    let mut totals = Totals::default();
    for path in &args.paths {
        if args.repair {
            refuse_live(path)?;
        }
        if path.is_dir() {
            let store = Store::open_with(path, &args.data_dirs)?;
            for file in &store.files {
                check(file, args.repair, &mut totals);
            }
            for partial in &store.partials {
                check(partial, args.repair, &mut totals);
            }
        } else {
            check(path, args.repair, &mut totals);
        }
    }
    let live = if totals.live > 0 {
        format!(", {} being written", totals.live)
    } else {
        String::new()
    };
    println!(
        "{} file(s) ok, {} failed{live}: {} packets in {} chunks, {} bytes stored",
        totals.ok, totals.failed, totals.packets, totals.chunks, totals.bytes
    );
    Ok(if totals.failed > 0 { 1 } else { 0 })
}

/// `--repair` never touches a store a recorder holds: its partial files are live, and the
/// recorder finalizes them itself (at stop, or at its next start after a crash).
fn refuse_live(path: &Path) -> anyhow::Result<()> {
    let holder = if path.is_dir() {
        lock::holder(path)
    } else {
        lock::writer_of(path)
    };
    if let Some(holder) = holder {
        anyhow::bail!(
            "{} is being recorded by {holder}: not repairing live files (stop the recorder first; it finalizes its files when it stops, or when it starts again after a crash)",
            path.display()
        );
    }
    Ok(())
}

/// Verifies (or repairs, then verifies) one file, printing one line either way.
fn check(path: &Path, repair: bool, totals: &mut Totals) {
    if meta::is_partial(path) {
        if let Some(holder) = lock::writer_of(path) {
            println!(
                "{}: being written by {holder} (its chunks up to the last flush are readable)",
                path.display()
            );
            totals.live += 1;
            return;
        }
    }
    let result = if repair && meta::is_partial(path) {
        match repair::repair(path) {
            Ok(Repaired::As(done)) => {
                eprintln!("{}: repaired as {}", path.display(), done.display());
                verify::verify_file(&done)
            }
            Ok(Repaired::RemovedEmpty) => {
                eprintln!(
                    "{}: removed: its writer stopped before writing any byte of it, so it held no packets",
                    path.display()
                );
                return;
            }
            Err(e) => Err(e.into()),
        }
    } else if repair && repair::is_truncated(path) {
        match repair::repair_truncated(path) {
            Ok(packets) => {
                eprintln!(
                    "{}: repaired: its index was lost; kept its {packets} packets up to the last whole chunk",
                    path.display()
                );
                verify::verify_file(path)
            }
            Err(e) => Err(e.into()),
        }
    } else {
        verify::verify_file(path)
    };
    match result {
        Ok(s) => {
            for w in &s.warnings {
                eprintln!("tapdeck: warning: {w}");
            }
            println!("{}", describe(&s));
            totals.ok += 1;
            totals.packets += s.packets;
            totals.chunks += s.chunks;
            totals.bytes += s.stored_len;
        }
        Err(e) => {
            report_failure(&e);
            totals.failed += 1;
        }
    }
}

fn report_failure(e: &VerifyError) {
    eprintln!("{}", failure_line(e));
}

/// The one line a failed file gets, with what the user can do about it.
fn failure_line(e: &VerifyError) -> String {
    match e {
        VerifyError::Partial(e) => {
            format!("{e}; run `tapdeck verify --repair` to keep its complete chunks")
        }
        VerifyError::StaleChunkFilter(e) => format!(
            "{e} (stale or damaged: `tapdeck verify` cannot repair it; extract with --no-index reads around it)"
        ),
        VerifyError::File(e) => e.to_string(),
    }
}

fn describe(s: &VerifiedFile) -> String {
    let range = match (s.first_ts_ns, s.last_ts_ns) {
        (Some(a), Some(b)) => format!("{} .. {}", format_time(a), format_time(b)),
        _ => "empty".into(),
    };
    let codecs = if s.codecs.is_empty() {
        String::new()
    } else {
        let mix: Vec<String> = s.codecs.iter().map(|(c, n)| format!("{c}x{n}")).collect();
        format!(", codecs {}", mix.join(" "))
    };
    let what = match (s.container, s.sidecar_blocks) {
        (Some(_), _) => format!("{} chunks", s.chunks),
        (None, Some(blocks)) => format!(
            "{} file, its sidecar index of {blocks} blocks matches",
            s.format.extension()
        ),
        (None, None) => format!("{} file without index", s.format.extension()),
    };
    let repaired = if s.repaired { ", repaired" } else { "" };
    format!(
        "{}: ok: {} packets, {what}, {range}{codecs}{repaired}",
        s.path.display(),
        s.packets
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_file_is_refused_with_the_way_to_repair_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir
            .path()
            .join(".20261123T055734.000000123Z-s01-000007.pcapng.zst.partial");
        std::fs::write(&path, b"").unwrap();
        let line = failure_line(&verify::verify_file(&path).unwrap_err());
        assert!(line.contains("run `tapdeck verify --repair`"), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }
}
