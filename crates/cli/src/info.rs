//! `tapdeck info`: one row per stored file, totals, and the files left incomplete.

use std::collections::HashMap;

use serde_json::json;
use tapdeck_store::meta::InterfaceCounts;
use tapdeck_store::read::{format_time, Store, StoredFile};

use crate::args::InfoArgs;

pub fn run(args: &InfoArgs) -> anyhow::Result<i32> {
    let store = Store::open(&args.store)?;
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    // Counts in a file are cumulative since its recorder started: a file's own drops are
    // the difference from the previous file of its stream.
    let mut previous: HashMap<u32, Vec<InterfaceCounts>> = HashMap::new();
    let (mut packets, mut bytes, mut drops) = (0u64, 0u64, 0u64);
    for path in &store.files {
        let f = match StoredFile::open(path) {
            Ok(f) => f,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        let m = &f.meta;
        let file_drops = (!m.counts.is_empty()).then(|| {
            let prev = previous.get(&m.stream);
            let total = |c: &InterfaceCounts| {
                c.dropped_kernel + c.dropped_staging_full + c.dropped_write_error
            };
            let now: u64 = m.counts.iter().map(total).sum();
            let before: u64 = prev.map_or(0, |p| p.iter().map(total).sum());
            // A smaller total means the recorder restarted and its counters with it.
            if now >= before {
                now - before
            } else {
                now
            }
        });
        if !m.counts.is_empty() {
            previous.insert(m.stream, m.counts.clone());
        }
        packets += m.packets;
        bytes += f.stored_len;
        drops += file_drops.unwrap_or(0);
        let codecs: Vec<String> = f
            .codec_mix()
            .iter()
            .map(|(c, n)| format!("{c}x{n}"))
            .collect();
        rows.push(json!({
            "name": f.name(),
            "path": f.path,
            "stream": m.stream,
            "seq": m.seq,
            "first": format_time(m.first_ts_ns),
            "last": format_time(m.last_ts_ns),
            "first_ts_ns": m.first_ts_ns,
            "last_ts_ns": m.last_ts_ns,
            "packets": m.packets,
            "chunks": f.packet_chunks().count(),
            "stored_bytes": f.stored_len,
            "codecs": codecs.join(" "),
            "drops": file_drops,
            "out_of_order": m.out_of_order,
            "repaired": m.repaired,
        }));
    }
    let incomplete: Vec<_> = store
        .partials
        .iter()
        .map(|p| json!({ "path": p, "bytes": std::fs::metadata(p).map(|m| m.len()).ok() }))
        .collect();
    let totals =
        json!({ "files": rows.len(), "packets": packets, "stored_bytes": bytes, "drops": drops });

    if args.json {
        let merge = store.manifest.as_ref().and_then(|m| m.merge.as_ref());
        let doc = json!({ "store": store.root, "files": rows, "totals": totals, "incomplete": incomplete, "errors": errors, "merge": merge });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!(
            "{:<50} {:>6} {:>6} {:<30} {:<30} {:>10} {:>12} {:>8}  CODECS",
            "NAME", "STREAM", "SEQ", "FIRST", "LAST", "PACKETS", "BYTES", "DROPS"
        );
        for r in &rows {
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
        for p in &store.partials {
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
