#!/usr/bin/env python3
"""The analysis benchmark of issue 6: nfs_latency and rates on a large NFS dataset, against
plain pandas on the same Parquet and tshark's rpc,srt on a slice of the same traffic.

    python3 bench/analyze.py [--quick] [--rows N] [--reps N] [--work DIR] [--keep]

1. Traffic: bench/nfsgen.py, one generator per core in parallel (different seeds and clients,
   the same time span, files of --split-packets packets), sized for a dataset of --rows rows in
   all tables together (default 50 million; 13 rows per transaction, measured), NFSv3 and
   NFSv4.0 over TCP with known injected latencies (exponential per operation).
2. `tapdeck convert` once, all files (timed: wall, CPU, peak RSS; rows per table).
3. Each analysis in a fresh process (peak RSS from wait4 is the analysis' own), --reps times:
   * tapdeck-analyze's functions on DuckDB: `nfs_latency(ds)` and
     `rates(ds, sample="1s", window="1min")` (opening the dataset included);
   * the same two analyses written plainly in pandas (pyarrow reads the Parquet files into
     pandas DataFrames; groupby, join, sort), with the package's definitions: latency from a
     transaction's first call to its first matched reply, NFSv4 per COMPOUND and per operation
     of the reply, exact nearest-rank percentiles; rates per 1 s sample and 1 min window;
   * `tshark -q -z rpc,srt,100003,3` on the first 1 million packets of the first file.
   Rows/s = rows the analysis scans (nfs_latency: rpc + nfs_ops; rates: packets) / seconds.
4. Checks: DuckDB and pandas give the same tables (counts, min, max and percentiles equal,
   means within 1e-9 relative); nfs_latency's calls and mean per operation against the
   generator's truth (OUT.truth.json; the same definition of latency).

Results: bench/results/analyze-<UTC time>.{json,md}. Needs pandas: `pip install -e 'python[bench]'`.
"""

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from convert import BIN, NFSGEN, ROOT, fmt, log, measure, spread, tool_versions  # noqa: E402

ROWS_PER_TRANSACTION = 12.9  # measured with --io-kib 4,8,16,32 (packets 4.8, rpc 2, nfs_ops 3.6, ...)
IO_KIB = "4,8,16,32"
SAMPLE, WINDOW = "1s", "1min"
NFS_PROGRAM = 100003
PERCENTILES = {"p50": 5000, "p90": 9000, "p99": 9900}


# --- the pandas implementations -------------------------------------------------------------

def read_table(dataset: Path, table: str, columns):
    import pyarrow.parquet as pq
    files = sorted(glob.glob(f"{dataset}/{table}/**/*.parquet", recursive=True))
    return pq.ParquetDataset(files).read(columns=columns).to_pandas()


def pandas_nfs_latency(dataset: Path):
    import numpy as np
    import pandas as pd
    rpc = read_table(dataset, "rpc", ["transaction_id", "direction", "program", "version",
                                      "procedure_name", "first_time_ns", "time_ns", "retransmit", "matched"])
    calls = rpc[(rpc["direction"] == "call") & (rpc["program"] == NFS_PROGRAM)]
    calls = calls.assign(retransmit=calls["retransmit"].fillna(False).astype("int64"))
    c = calls.groupby("transaction_id").agg(nfs_version=("version", "min"), operation=("procedure_name", "min"),
                                            first_call_ns=("first_time_ns", "min"),
                                            retransmits=("retransmit", "sum"))
    replies = rpc[(rpc["direction"] == "reply") & rpc["matched"].fillna(False).astype(bool)]
    replies = replies.assign(retransmit=replies["retransmit"].fillna(False).astype("int64"))
    r = replies.groupby("transaction_id").agg(first_reply_ns=("time_ns", "min"),
                                              duplicate_replies=("retransmit", "sum"))
    del rpc, calls, replies
    tx = c.join(r, how="left")
    tx["latency_ns"] = tx["first_reply_ns"] - tx["first_call_ns"]
    tx["duplicate_replies"] = tx["duplicate_replies"].fillna(0).astype("int64")
    ops = read_table(dataset, "nfs_ops", ["transaction_id", "direction", "nfs_version", "op_index", "operation"])
    ops = ops[(ops["direction"] == "reply") & (ops["nfs_version"] == 4)]
    ops = ops[["transaction_id", "op_index", "operation"]].drop_duplicates().set_index("transaction_id")
    cols = ["nfs_version", "operation", "latency_ns", "retransmits", "duplicate_replies"]
    v4 = tx.drop(columns="operation").join(ops, how="inner")
    per_op = pd.concat([tx[cols], v4[cols]], ignore_index=True)
    keys = ["nfs_version", "operation"]
    s = per_op.groupby(keys).agg(calls=("latency_ns", "count"), min_ns=("latency_ns", "min"),
                                 mean_ns=("latency_ns", "mean"), max_ns=("latency_ns", "max"),
                                 retransmits=("retransmits", "sum"),
                                 duplicate_replies=("duplicate_replies", "sum"))
    # exact nearest-rank percentiles: the value at rank ceil(p * n) in each group
    a = per_op.dropna(subset=["latency_ns"]).sort_values(keys + ["latency_ns"])
    rank = a.groupby(keys).cumcount().to_numpy() + 1
    n = a.groupby(keys)["latency_ns"].transform("size").to_numpy()
    for name, p in PERCENTILES.items():
        pick = a[rank == (p * n + 9999) // 10000]
        s[f"{name}_s"] = pick.set_index(keys)["latency_ns"] / 1e9
    out = s.reset_index()
    for k in ("min", "mean", "max"):
        out[f"{k}_s"] = out[f"{k}_ns"] / 1e9
    out = out[["nfs_version", "operation", "calls", "min_s", "mean_s", "max_s", "p50_s", "p90_s", "p99_s",
               "retransmits", "duplicate_replies"]]
    return out.sort_values(keys).reset_index(drop=True), int(np.int64(len(a)))


def pandas_rates(dataset: Path, sample_ns: int, window_ns: int):
    import numpy as np
    import pandas as pd
    p = read_table(dataset, "packets", ["time_ns", "wire_len"])
    k = window_ns // sample_ns
    sample = p["time_ns"] // sample_ns
    per = p.groupby(sample)["wire_len"].agg(["size", "sum"]).rename(columns={"size": "packets", "sum": "bytes"})
    del p, sample
    first, last = per.index.min(), per.index.max()
    w = per.index // k
    win = per.groupby(w).agg(busy=("packets", "size"), packets=("packets", "sum"), bytes=("bytes", "sum"),
                             min_packets=("packets", "min"), max_packets=("packets", "max"),
                             min_bytes=("bytes", "min"), max_bytes=("bytes", "max"))
    wi = win.index.to_numpy()
    samples = np.minimum(last, wi * k + k - 1) - np.maximum(first, wi * k) + 1
    full = win["busy"].to_numpy() >= samples
    out = pd.DataFrame({
        "window_start_ns": wi * window_ns, "samples": samples,
        "packets": win["packets"].to_numpy(), "bytes": win["bytes"].to_numpy(),
        "min_pps": np.where(full, win["min_packets"], 0) * 1e9 / sample_ns,
        "mean_pps": win["packets"].to_numpy() * 1e9 / (samples * sample_ns),
        "max_pps": win["max_packets"].to_numpy() * 1e9 / sample_ns,
        "min_bps": np.where(full, win["min_bytes"], 0) * 8e9 / sample_ns,
        "mean_bps": win["bytes"].to_numpy() * 8e9 / (samples * sample_ns),
        "max_bps": win["max_bytes"].to_numpy() * 8e9 / sample_ns,
    })
    return out


def worker(impl: str, analysis: str, dataset: Path, out: Path) -> None:
    """One measured run in this (fresh) process; writes timings and the result table."""
    t0 = time.perf_counter()
    if impl == "duckdb":
        from tapdeck_analyze import nfs_latency, open_dataset, rates
        t_import = time.perf_counter()
        ds = open_dataset(str(dataset))
        t_open = time.perf_counter()
        if analysis == "nfs_latency":
            table = nfs_latency(ds).to_pandas()
        else:
            table = rates(ds, sample=SAMPLE, window=WINDOW).to_pandas()
    else:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
        t_import = t_open = time.perf_counter()
        if analysis == "nfs_latency":
            table, _ = pandas_nfs_latency(dataset)
        else:
            from tapdeck_analyze.times import parse_duration
            table = pandas_rates(dataset, parse_duration(SAMPLE), parse_duration(WINDOW))
    t_end = time.perf_counter()
    out.write_text(json.dumps({"import_s": t_import - t0, "open_s": t_open - t_import,
                               "compute_s": t_end - t_open, "seconds": t_end - t_import,
                               "table": json.loads(table.to_json(orient="records"))}))


# --- the benchmark ------------------------------------------------------------------------------

def generate(work: Path, transactions: int, shards: int, split: int) -> dict:
    """Runs `shards` generators in parallel; returns their files, truth (merged) and timings."""
    procs = []
    per = -(-transactions // shards)
    t0 = time.monotonic()
    for k in range(shards):
        cmd = [sys.executable, str(NFSGEN), str(work / f"nfs{k}.pcap"), "--transactions", str(per),
               "--seed", str(100 + k), "--client-offset", str(100 * k), "--split-packets", str(split),
               "--io-kib", IO_KIB]
        err = open(work / f"nfsgen{k}.log", "w")
        procs.append((subprocess.Popen(cmd, stderr=err), err, cmd))
    cpu, rss = 0.0, 0.0
    for p, err, cmd in procs:
        _, status, ru = os.wait4(p.pid, 0)
        err.close()
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"bench: {' '.join(cmd)} failed: {(work / err.name).read_text()[-2000:]}")
        cpu += ru.ru_utime + ru.ru_stime
        rss = max(rss, ru.ru_maxrss / 1024)
    wall = time.monotonic() - t0
    files, truth, packets, messages = [], {}, 0, []
    for k in range(shards):
        t = json.loads((work / f"nfs{k}.truth.json").read_text())
        files += [Path(f) for f in t["files"]]
        packets += t["packets"]
        messages.append((work / f"nfsgen{k}.log").read_text().strip())
        for v, ops in t["ops"].items():
            for op, e in ops.items():
                m = truth.setdefault(v, {}).setdefault(op, {"calls": 0, "sum_s": 0.0, "min_s": e["min_s"],
                                                             "max_s": e["max_s"]})
                m["calls"] += e["calls"]
                m["sum_s"] += e["mean_s"] * e["calls"]
                m["min_s"] = min(m["min_s"], e["min_s"])
                m["max_s"] = max(m["max_s"], e["max_s"])
    for ops in truth.values():
        for m in ops.values():
            m["mean_s"] = m.pop("sum_s") / m["calls"]
    return {"files": files, "truth": truth, "packets": packets, "transactions": per * shards,
            "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss, "messages": messages,
            "injected_mean_s": t["injected_mean_s"],
            "bytes": sum(f.stat().st_size for f in files)}


def parse_srt(text: str) -> list:
    rows = []
    for line in text.splitlines():
        m = re.match(r"^\s*([A-Z_0-9]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", line)
        if m:
            rows.append({"procedure": m[1], "calls": int(m[2]), "min_s": float(m[3]), "max_s": float(m[4]),
                         "mean_s": float(m[5]), "sum_s": float(m[6])})
    return rows


def compare_tables(a: list, b: list, keys: list, exact: list, close: list) -> list:
    """Differences between two result tables (lists of row dicts)."""
    problems = []
    ia = {tuple(r[k] for k in keys): r for r in a}
    ib = {tuple(r[k] for k in keys): r for r in b}
    if set(ia) != set(ib):
        problems.append(f"different groups: {sorted(set(ia) ^ set(ib))[:5]}")
    for key in set(ia) & set(ib):
        for c in exact:
            x, y = ia[key][c], ib[key][c]
            if not (x == y or (isinstance(x, float) and isinstance(y, float) and abs(x - y) <= 1e-12 * max(1, abs(x)))):
                problems.append(f"{key} {c}: {x} vs {y}")
        for c in close:
            x, y = ia[key][c], ib[key][c]
            if abs(x - y) > 1e-9 * max(abs(x), abs(y), 1e-30):
                problems.append(f"{key} {c}: {x} vs {y}")
    return problems


def check_truth(table: list, truth: dict) -> list:
    rows = []
    got = {(f"v{r['nfs_version']}", r["operation"]): r for r in table}
    for v, ops in sorted(truth.items()):
        for op, t in sorted(ops.items()):
            r = got.get((v, op))
            rows.append({
                "nfs_version": v, "operation": op, "truth_calls": t["calls"],
                "calls": r["calls"] if r else 0, "truth_mean_s": t["mean_s"],
                "mean_s": r["mean_s"] if r else None,
                "rel_diff": (r["mean_s"] - t["mean_s"]) / t["mean_s"] if r else None,
                "truth_min_s": t["min_s"], "min_s": r["min_s"] if r else None,
                "truth_max_s": t["max_s"], "max_s": r["max_s"] if r else None})
    return rows


def run(args) -> dict:
    quick = args.quick
    rows_target = args.rows or (800_000 if quick else 50_000_000)
    transactions = int(rows_target / ROWS_PER_TRANSACTION) + 1
    shards = max(1, min(os.cpu_count() or 1, 4))
    split = 200_000 if quick else 2_000_000
    slice_packets = 100_000 if quick else 1_000_000
    reps = args.reps or 1
    need = transactions * 4.0e3 * 1.4 + 2e9
    Path(args.work).mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.work).free
    if free < need:
        raise SystemExit(f"bench: {args.work} has {free / 1e9:.0f} GB free, need about {need / 1e9:.0f}")
    work = Path(tempfile.mkdtemp(prefix="tapdeck-bench-analyze-", dir=args.work))
    res = {"rows_target": rows_target, "reps": reps}
    try:
        log(f"generating {transactions} transactions with {shards} nfsgen processes")
        gen = generate(work, transactions, shards, split)
        res["generation"] = {k: v for k, v in gen.items() if k not in ("files", "truth")}
        res["generation"]["files"] = len(gen["files"])
        res["truth"] = gen["truth"]
        log(f"{gen['packets']} packets, {gen['bytes'] / 1e9:.1f} GB in {len(gen['files'])} files "
            f"({gen['wall_s']:.0f} s); tapdeck convert")
        ds = work / "ds"
        report = work / "convert.json"
        conv = measure([BIN, "convert", *gen["files"], "--out", ds, "--json", "-q", "--log", "warn"], stdout=report)
        conv.pop("stderr")
        counts = json.loads(report.read_text())["counts"]
        rows = {k.removeprefix("rows."): v for k, v in counts.items() if k.startswith("rows.")}
        conv["rows"] = rows
        conv["rows_total"] = sum(rows.values())
        conv["rpc_messages"] = counts.get("rpc.calls", 0) + counts.get("rpc.replies", 0)
        res["convert"] = conv
        log(f"dataset: {conv['rows_total']:,} rows ({conv['wall_s']:.0f} s); "
            f"{', '.join(f'{k} {v:,}' for k, v in rows.items())}")
        for f in gen["files"][1:]:
            f.unlink()  # the slice comes from the first file
        slice_path = work / "slice.pcap"
        subprocess.run(["editcap", "-r", gen["files"][0], slice_path, f"1-{slice_packets}"], check=True)
        gen["files"][0].unlink()
        scanned = {"nfs_latency": rows.get("rpc", 0) + rows.get("nfs_ops", 0), "rates": rows.get("packets", 0)}
        res["rows_scanned"] = scanned
        runs = {}
        for rep in range(reps):
            for impl in ("duckdb", "pandas"):
                for analysis in ("nfs_latency", "rates"):
                    log(f"repetition {rep + 1}/{reps}: {impl} {analysis}")
                    out = work / f"{impl}-{analysis}.json"
                    r = measure([sys.executable, __file__, "--worker", impl, analysis, ds, out])
                    r.pop("stderr")
                    r.update(json.loads(out.read_text()))
                    runs.setdefault(f"{impl} {analysis}", []).append(r)
            log(f"repetition {rep + 1}/{reps}: tshark rpc,srt on {slice_packets:,} packets")
            r = measure(["tshark", "-q", "-z", "rpc,srt,100003,3", "-r", slice_path], stdout=work / "srt.txt")
            r.pop("stderr")
            r["srt"] = parse_srt((work / "srt.txt").read_text())
            runs.setdefault("tshark rpc,srt", []).append(r)
        res["slice_packets"] = slice_packets
        res["runs"] = runs
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    # checks
    dl, pl = runs["duckdb nfs_latency"][0]["table"], runs["pandas nfs_latency"][0]["table"]
    res["check_latency_duckdb_vs_pandas"] = compare_tables(
        dl, pl, ["nfs_version", "operation"],
        ["calls", "min_s", "max_s", "p50_s", "p90_s", "p99_s", "retransmits", "duplicate_replies"], ["mean_s"])
    dr, pr = runs["duckdb rates"][0]["table"], runs["pandas rates"][0]["table"]
    res["check_rates_duckdb_vs_pandas"] = compare_tables(
        dr, pr, ["window_start_ns"], ["samples", "packets", "bytes"],
        ["min_pps", "mean_pps", "max_pps", "min_bps", "mean_bps", "max_bps"])
    res["check_truth"] = check_truth(dl, res["truth"])
    return res


def summary_rows(res) -> list:
    rows = []
    runs = res["runs"]
    for name, rs in runs.items():
        if name.startswith("tshark"):
            n = res["slice_packets"]
            what = "packets"
        else:
            n = res["rows_scanned"][name.split()[1]]
            what = "rows"
        rows.append({
            "tool": name, "rows": n, "unit": what,
            "seconds": spread(r.get("seconds", r["wall_s"]) for r in rs),
            "process_wall_s": spread(r["wall_s"] for r in rs),
            "rate": spread(n / r.get("seconds", r["wall_s"]) for r in rs),
            "cpu_s": spread(r["cpu_s"] for r in rs),
            "peak_rss_mb": spread(r["peak_rss_mb"] for r in rs)})
    base = {a: [n / r["seconds"] for r in runs[f"pandas {a}"]] for a in ("nfs_latency", "rates")
            for n in [res["rows_scanned"][a]]}
    for row in rows:
        parts = row["tool"].split()
        if parts[0] in ("duckdb", "pandas"):
            row["ratio_vs_pandas"] = spread(
                (row["rows"] / r["seconds"]) / b for r, b in zip(runs[row["tool"]], base[parts[1]], strict=True))
    return rows


def markdown(res) -> str:
    g, c = res["generation"], res["convert"]
    m = [f"# Analysis benchmark — {res['when']}", "",
         f"Machine: {res['machine']}. Command: `{res['command']}`. Tools: {res['versions']['tapdeck']}, "
         f"{res['versions']['tshark']}, duckdb {res['versions'].get('duckdb')}, pandas {res['versions'].get('pandas')}.",
         f"Repetitions: {res['reps']}; figures are median (min..max).", "",
         f"Traffic: {g['transactions']:,} NFS transactions, {g['packets']:,} packets, {g['bytes'] / 1e9:.1f} GB in "
         f"{g['files']} files, made by {len(g['messages'])} nfsgen processes in parallel in {g['wall_s']:.0f} s "
         f"({g['packets'] / g['wall_s'] / 1e6:.2f} M packets/s together, {g['cpu_s']:.0f} CPU s).",
         f"Dataset (`tapdeck convert`, once): **{c['rows_total']:,} rows** (target {res['rows_target']:,}): "
         + ", ".join(f"{k} {v:,}" for k, v in c["rows"].items())
         + f"; {c['wall_s']:.0f} s wall, {c['cpu_s']:.0f} CPU s, peak RSS {c['peak_rss_mb']:,.0f} MB, "
         f"{c['rows_total'] / c['wall_s']:,.0f} rows/s.", "",
         "| tool | input | rows or packets | seconds | rate (rows/s or packets/s) | ratio vs pandas | CPU s (process) | peak RSS MB |",
         "|---|---|---|---|---|---|---|---|"]
    for r in summary_rows(res):
        inp = (f"{res['slice_packets']:,}-packet slice" if r["unit"] == "packets"
               else ("rpc + nfs_ops" if "latency" in r["tool"] else "packets table"))
        m.append(f"| {r['tool']} | {inp} | {r['rows']:,} {r['unit']} | {fmt(r['seconds'], 2)} | {fmt(r['rate'], 0)} | "
                 f"{fmt(r.get('ratio_vs_pandas'), 1) + '×' if r.get('ratio_vs_pandas') else '–'} | "
                 f"{fmt(r['cpu_s'], 1)} | {fmt(r['peak_rss_mb'], 0)} |")
    m += ["", "Seconds: the analysis itself in its process (DuckDB: opening the dataset and the query; pandas: "
          "reading the columns and computing), without the Python start-up and imports; CPU and RSS are the "
          "whole process'. tshark: the whole process.", ""]
    ok = res["check_latency_duckdb_vs_pandas"], res["check_rates_duckdb_vs_pandas"]
    m.append("DuckDB and pandas tables: " + ("identical (counts, min, max, percentiles; means within 1e-9)"
                                             if not any(ok) else f"DIFFER: {ok}"))
    m += ["", "Injected latencies against nfs_latency (DuckDB):", "",
          "| version | operation | calls (truth) | calls | mean µs (truth) | mean µs | difference |",
          "|---|---|---|---|---|---|---|"]
    worst = 0.0
    for r in res["check_truth"]:
        d = r["rel_diff"]
        worst = max(worst, abs(d)) if d is not None else float("inf")
        m.append(f"| {r['nfs_version']} | {r['operation']} | {r['truth_calls']:,} | {r['calls']:,} | "
                 f"{r['truth_mean_s'] * 1e6:.3f} | {(r['mean_s'] or 0) * 1e6:.3f} | "
                 f"{'missing' if d is None else f'{d * 100:.2e} %'} |")
    m += ["", f"Largest relative difference of a mean: {worst * 100:.2e} %."]
    srt = res["runs"]["tshark rpc,srt"][0]["srt"]
    if srt:
        m += ["", "tshark rpc,srt on the slice (NFSv3 only): "
              + ", ".join(f"{s['procedure']} {s['calls']} calls mean {s['mean_s'] * 1e6:.0f} µs" for s in srt) + "."]
    dl = [r for r in summary_rows(res) if r["tool"].startswith("duckdb")]
    m += ["", "Target (issue 6): at least 10 million rows/s for nfs_latency and rates: "
          + "; ".join(f"{r['tool']} {r['rate']['median'] / 1e6:.1f} M rows/s "
                      f"({'met' if r['rate']['median'] >= 10e6 else 'not met'})" for r in dl) + "."]
    return "\n".join(m) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small dataset (under a million rows)")
    ap.add_argument("--rows", type=float, help="dataset size to aim for, rows in all tables (default 50e6)")
    ap.add_argument("--reps", type=int, help="repetitions of each analysis (default 1)")
    ap.add_argument("--work", type=Path, default=Path("/tmp"), help="where the temporary directory goes")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--worker", nargs=4, metavar=("IMPL", "ANALYSIS", "DATASET", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        impl, analysis, dataset, out = args.worker
        worker(impl, analysis, Path(dataset), Path(out))
        return
    if not BIN.exists():
        raise SystemExit(f"bench: {BIN} missing; build it (scripts/setup.sh)")
    try:
        import duckdb
        import pandas
        import tapdeck_analyze  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"bench: {e.name} missing (python3 -m pip install pandas; "
                         "python3 -m pip install -e python)") from e
    if args.rows:
        args.rows = int(args.rows)
    t0 = time.monotonic()
    res = run(args)
    res.update({
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{os.cpu_count()} cores, {os.uname().release}, load average at the end "
                   f"{os.getloadavg()[0]:.1f}",
        "command": " ".join(["python3", *sys.argv]),
        "versions": {**tool_versions(), "duckdb": duckdb.__version__, "pandas": pandas.__version__},
        "total_s": time.monotonic() - t0,
    })
    res["summary"] = summary_rows(res)
    out = ROOT / "bench/results"
    out.mkdir(parents=True, exist_ok=True)
    stem = "analyze-" + res["when"].replace(":", "").replace("-", "")
    (out / f"{stem}.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    (out / f"{stem}.md").write_text(markdown(res))
    print(markdown(res))
    log(f"wrote {out / stem}.{{json,md}} in {res['total_s']:.0f} s")


if __name__ == "__main__":
    main()
