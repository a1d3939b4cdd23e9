//! `tapdeck index`: backfills chunk filters (the flow index) into stores and files written
//! without them, and sidecars beside plain capture files.

use std::path::{Path, PathBuf};
use std::time::Instant;

use tapdeck_store::backfill::{self, Outcome};
use tapdeck_store::read::Store;
use tapdeck_store::{catalog, meta};

use crate::args::IndexArgs;

#[derive(Default)]
struct Totals {
    indexed: u64,
    skipped: u64,
    failed: u64,
    chunks: u64,
    index_bytes: u64,
}

pub fn run(args: &IndexArgs) -> anyhow::Result<i32> {
    let started = Instant::now();
    let mut totals = Totals::default();
    for path in &args.paths {
        for file in files_of(path, &args.data_dirs)? {
            one(&file, &mut totals);
        }
        if path.is_dir() {
            rebuild_catalog(path, &args.data_dirs)?;
        }
    }
    println!(
        "indexed {} file(s), skipped {}, failed {}: {} chunks, {} bytes of flow index, {:.1} s",
        totals.indexed,
        totals.skipped,
        totals.failed,
        totals.chunks,
        totals.index_bytes,
        started.elapsed().as_secs_f64()
    );
    Ok(if totals.failed > 0 { 1 } else { 0 })
}

/// A store's files (finished and partial), or the file itself.
fn files_of(path: &Path, moved: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let store = Store::open_with(path, moved)?;
    if store.manifest.is_none() && store.files.is_empty() && store.partials.is_empty() {
        anyhow::bail!(
            "{}: not a tapdeck store (no {} and no stored files in it); give a store directory or files",
            path.display(),
            meta::MANIFEST
        );
    }
    Ok(store.files.into_iter().chain(store.partials).collect())
}

/// Rewrites a store's catalog from its files' trailers (compacting it too: entries of
/// files retention deleted go).
fn rebuild_catalog(path: &Path, moved: &[PathBuf]) -> anyhow::Result<()> {
    let store = Store::open_with(path, moved)?;
    match catalog::rebuild(&store) {
        Ok((entries, 0)) => println!(
            "{}: rebuilt with {entries} entries",
            catalog::path(&store.root).display()
        ),
        Ok((entries, failed)) => println!(
            "{}: rebuilt with {entries} entries; {failed} file(s) that do not open left out (readers open them)",
            catalog::path(&store.root).display()
        ),
        // The catalog only saves readers work: a store without one reads the same.
        Err(e) => eprintln!(
            "tapdeck: {}: cannot rebuild the store catalog ({e}); readers open every file",
            catalog::path(&store.root).display()
        ),
    }
    Ok(())
}

/// Indexes one file, printing one line either way.
fn one(path: &Path, totals: &mut Totals) {
    match backfill::index_file(path) {
        Ok(Outcome::Indexed {
            chunks,
            index_bytes,
            how,
        }) => {
            println!(
                "{}: indexed: {chunks} chunks, {index_bytes} bytes of flow index ({how})",
                path.display()
            );
            totals.indexed += 1;
            totals.chunks += chunks;
            totals.index_bytes += index_bytes;
        }
        Ok(Outcome::Skipped(why)) => {
            println!("{}: skipped: {why}", path.display());
            totals.skipped += 1;
        }
        Ok(Outcome::LeftByCrash) => {
            println!(
                "{}: skipped: incomplete file left by a crash; run `tapdeck verify --repair` on it first",
                path.display()
            );
            totals.skipped += 1;
        }
        Err(e) => {
            eprintln!("tapdeck: {e}");
            totals.failed += 1;
        }
    }
}
