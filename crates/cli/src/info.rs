//! `tapdeck info`: one row per stored file, totals, and the files left incomplete; or, given
//! one stored file, its row.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tapdeck_store::lock;
use tapdeck_store::meta::{self, InterfaceCounts};
use tapdeck_store::read::{format_time, Store, StoredFile};

use crate::args::InfoArgs;

pub fn run(args: &InfoArgs) -> anyhow::Result<i32> {
    let path = &args.store;
    if path.is_dir() {
        return describe_store(&Store::open_with(path, &args.data_dirs)?, args.json);
    }
    if !path.is_file() {
        anyhow::bail!(
            "{}: no such file or directory: `tapdeck info` wants a store directory or a stored file",
            path.display()
        );
    }
    describe_file(path, args.json)
}

/// Rows for `files` in order, the errors of those that did not open, and the totals.
struct Listing {
    rows: Vec<Value>,
    errors: Vec<String>,
    packets: u64,
    bytes: u64,
    drops: u64,
}

fn list(files: &[PathBuf]) -> Listing {
    let mut l = Listing {
        rows: Vec::new(),
        errors: Vec::new(),
        packets: 0,
        bytes: 0,
        drops: 0,
    };
    // Counts in a file are cumulative since its recorder started: a file's own drops are
    // the difference from the previous file of its stream.
    let mut previous: HashMap<u32, (Option<u64>, Vec<InterfaceCounts>)> = HashMap::new();
    for path in files {
        let f = match StoredFile::open(path) {
            Ok(f) => f,
            Err(e) => {
                l.errors.push(e.to_string());
                continue;
            }
        };
        let m = &f.meta;
        let file_drops = (!m.counts.is_empty()).then(|| {
            let prev = previous.get(&m.stream);
            let total = InterfaceCounts::dropped;
            let now: u64 = m.counts.iter().map(total).sum();
            let before: u64 = prev.map_or(0, |(_, p)| p.iter().map(total).sum());
            // Another run started its counters from zero: files say which run wrote them
            // (older files do not; there a smaller total is the sign of a restart).
            let other_run = prev.is_some_and(|(run, _)| {
                run.is_some() && m.run_started_ns.is_some() && *run != m.run_started_ns
            });
            if other_run || now < before {
                now
            } else {
                now - before
            }
        });
        if !m.counts.is_empty() {
            previous.insert(m.stream, (m.run_started_ns, m.counts.clone()));
        }
        l.packets += m.packets;
        l.bytes += f.stored_len;
        l.drops += file_drops.unwrap_or(0);
        l.rows.push(row(&f, file_drops));
    }
    l
}

fn row(f: &StoredFile, drops: Option<u64>) -> Value {
    let m = &f.meta;
    let empty = m.packets == 0;
    let codecs: Vec<String> = f
        .codec_mix()
        .iter()
        .map(|(c, n)| format!("{c}x{n}"))
        .collect();
    json!({
        "name": f.name(),
        "path": f.path,
        "stream": m.stream,
        "seq": m.seq,
        // A file without packets (a repaired one, cut before its first chunk) has no times.
        "first": if empty { "empty".to_string() } else { format_time(m.first_ts_ns) },
        "last": if empty { "empty".to_string() } else { format_time(m.last_ts_ns) },
        "first_ts_ns": (!empty).then_some(m.first_ts_ns),
        "last_ts_ns": (!empty).then_some(m.last_ts_ns),
        "packets": m.packets,
        "chunks": f.packet_chunks().count(),
        "stored_bytes": f.stored_len,
        "codecs": codecs.join(" "),
        "drops": drops,
        "out_of_order": m.out_of_order,
        "repaired": m.repaired,
    })
}

fn totals(l: &Listing) -> Value {
    json!({ "files": l.rows.len(), "packets": l.packets, "stored_bytes": l.bytes, "drops": l.drops })
}

/// One stored file, described as `info STORE` describes it. Its drops are its own when the
/// store it lies in has the files before it; a file on its own can only tell the drops its
/// recorder had counted by the time it was closed.
fn describe_file(path: &Path, json: bool) -> anyhow::Result<i32> {
    let file = StoredFile::open(path).map_err(|e| {
        anyhow::anyhow!("{e}; `tapdeck info` wants a store directory or a stored file")
    })?;
    let same = |p: &PathBuf| std::fs::canonicalize(p).ok() == std::fs::canonicalize(path).ok();
    let store = path
        .ancestors()
        .skip(1)
        .take(4)
        .filter(|dir| dir.join(meta::MANIFEST).is_file())
        .find_map(|dir| Store::open(dir).ok().filter(|s| s.files.iter().any(same)));
    let (listing, cumulative) = match &store {
        Some(s) => {
            let upto = s.files.iter().position(same).map_or(0, |i| i + 1);
            let mut l = list(&s.files[..upto]);
            let own = l.rows.pop();
            l.rows = own.into_iter().collect();
            l.errors.clear();
            l.packets = file.meta.packets;
            l.bytes = file.stored_len;
            l.drops = l.rows[0]["drops"].as_u64().unwrap_or(0);
            (l, false)
        }
        None => (list(std::slice::from_ref(&path.to_path_buf())), true),
    };
    if json {
        let doc = json!({
            "store": store.as_ref().map(|s| &s.root),
            "file": path,
            "files": listing.rows,
            "totals": totals(&listing),
            "drops_since_recorder_start": cumulative,
            "errors": listing.errors,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_rows(&listing.rows);
        if cumulative && !file.meta.counts.is_empty() {
            println!(
                "drops: counted since its recorder started (the file is not in a store, so the drops of the files before it cannot be subtracted)"
            );
        }
    }
    Ok(if listing.errors.is_empty() { 0 } else { 1 })
}

fn print_rows(rows: &[Value]) {
    println!(
        "{:<50} {:>6} {:>6} {:<30} {:<30} {:>10} {:>12} {:>8}  CODECS",
        "NAME", "STREAM", "SEQ", "FIRST", "LAST", "PACKETS", "BYTES", "DROPS"
    );
    for r in rows {
        let drops = r["drops"]
            .as_u64()
            .map_or("-".to_string(), |d| d.to_string());
        println!(
            "{:<50} {:>6} {:>6} {:<30} {:<30} {:>10} {:>12} {:>8}  {}{}",
            r["name"].as_str().unwrap_or(""),
            r["stream"].as_u64().unwrap_or(0),
            r["seq"].as_u64().unwrap_or(0),
            r["first"].as_str().unwrap_or(""),
            r["last"].as_str().unwrap_or(""),
            r["packets"].as_u64().unwrap_or(0),
            r["stored_bytes"].as_u64().unwrap_or(0),
            drops,
            r["codecs"].as_str().unwrap_or(""),
            if r["repaired"] == true {
                " (repaired)"
            } else {
                ""
            }
        );
    }
}

fn describe_store(store: &Store, json: bool) -> anyhow::Result<i32> {
    let Listing {
        rows,
        errors,
        packets,
        bytes,
        drops,
    } = list(&store.files);
    // A partial file is live while a recorder holds its directory; else a crash left it.
    let (mut live, mut left) = (Vec::new(), Vec::new());
    for p in &store.partials {
        match lock::writer_of(p) {
            Some(holder) => live.push((p, holder)),
            None => left.push(p),
        }
    }
    let described =
        |p: &PathBuf| json!({ "path": p, "bytes": std::fs::metadata(p).map(|m| m.len()).ok() });
    let being_written: Vec<Value> = live.iter().map(|(p, _)| described(p)).collect();
    let incomplete: Vec<Value> = left.iter().map(|p| described(p)).collect();
    let totals =
        json!({ "files": rows.len(), "packets": packets, "stored_bytes": bytes, "drops": drops });

    if json {
        let merge = store.manifest.as_ref().and_then(|m| m.merge.as_ref());
        let doc = json!({ "store": store.root, "files": rows, "totals": totals, "being_written": being_written, "incomplete": incomplete, "errors": errors, "merge": merge });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_rows(&rows);
        println!(
            "total: {} files, {packets} packets, {bytes} bytes stored, {drops} dropped",
            rows.len()
        );
        if let Some(m) = store.manifest.as_ref().and_then(|m| m.merge.as_ref()) {
            // Where a merged store's packets came from (interfaces are described `LABEL stream N`).
            println!(
                "merged from {} stores{}:",
                m.inputs.len(),
                if m.complete {
                    ""
                } else {
                    " (incomplete: the merge stopped early)"
                }
            );
            for i in &m.inputs {
                println!(
                    "  {} {} ({} packets, {} duplicates dropped, offset {} ns, clock {})",
                    i.label,
                    i.store,
                    i.packets,
                    i.duplicates,
                    i.offset_ns,
                    i.clock
                        .map_or("unknown".to_string(), |c| if c.synchronized {
                            format!("synced, max error {} us", c.max_error_us)
                        } else {
                            "not synced".to_string()
                        })
                );
            }
        }
        for (p, holder) in &live {
            println!("being written: {} (by {holder})", p.display());
        }
        for p in &left {
            println!(
                "incomplete: {} (run `tapdeck verify --repair` to finalize it)",
                p.display()
            );
        }
        for e in &errors {
            eprintln!("{e}");
        }
    }
    Ok(if errors.is_empty() { 0 } else { 1 })
}
