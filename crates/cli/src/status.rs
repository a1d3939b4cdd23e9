//! `tapdeck status`: what a running `tapdeck serve` says about itself, in a few lines.

use crate::args::StatusArgs;
use crate::wording;

pub fn run(args: &StatusArgs) -> anyhow::Result<i32> {
    let doc = tapdeck_service::status::fetch(&args.remote.to_remote(&args.listen))
        .map_err(wording::client)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", describe(&doc));
    }
    // Scripts can test the exit status: 0 healthy, 1 not.
    Ok(if doc["health"]["healthy"].as_bool() == Some(true) {
        0
    } else {
        1
    })
}

fn describe(doc: &serde_json::Value) -> String {
    let h = &doc["health"];
    let mut out = format!(
        "tapdeck {} at {}: {}\n",
        doc["version"].as_str().unwrap_or("?"),
        h["phase"].as_str().unwrap_or("?"),
        if h["healthy"].as_bool() == Some(true) {
            "healthy".to_string()
        } else {
            format!(
                "UNHEALTHY: {}",
                h["reasons"]
                    .as_array()
                    .map(|r| r
                        .iter()
                        .filter_map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join("; "))
                    .unwrap_or_default()
            )
        }
    );
    let s = &doc["stats"];
    if s.is_null() {
        return out;
    }
    let t = &s["totals"];
    let d = &t["dropped"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    out += &format!(
        "  packets: seen {}  stored {}  dropped {} (kernel {}, staging full {}, write error {})  in flight {}\n",
        n(&t["seen"]),
        n(&t["stored"]),
        n(&d["kernel"]) + n(&d["staging_full"]) + n(&d["write_error"]),
        n(&d["kernel"]),
        n(&d["staging_full"]),
        n(&d["write_error"]),
        n(&t["in_flight"]),
    );
    out += &format!(
        "  files: {} written, {} deleted by retention; {} bytes written; running {:.0} s\n",
        n(&s["files_written"]),
        n(&s["files_deleted"]),
        n(&s["bytes_written"]),
        s["elapsed_s"].as_f64().unwrap_or(0.0)
    );
    let now_ns = tapdeck_recorder::recorder::now_ns();
    if let Some(h) = doc["horizon_ns"].as_u64() {
        out += &format!(
            "  horizon: the oldest packet stored is {:.0} s old\n",
            now_ns.saturating_sub(h) as f64 / 1e9
        );
    }
    for d in doc["data_dirs"].as_array().into_iter().flatten() {
        out += &format!(
            "  {} {}: {:.1} GB free of {:.1} GB\n",
            if d["up"].as_bool() == Some(true) {
                "dir"
            } else {
                "FAILING dir"
            },
            d["path"].as_str().unwrap_or("?"),
            n(&d["free_bytes"]) as f64 / 1e9,
            n(&d["size_bytes"]) as f64 / 1e9
        );
    }
    out
}
