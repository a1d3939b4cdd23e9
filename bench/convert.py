#!/usr/bin/env python3
"""`tapdeck convert` against `tshark -T fields`, in one run, on the same files (issue 4).

    python3 bench/convert.py [--quick] [--reps N] [--work DIR] [--keep] [--baseline OLD_BIN]

(a) Generic traffic: `tapdeck record --synthetic mix --count N --format pcap --codec none`
    writes one pcap (UDP, 60-1514 bytes); `editcap -c` splits the same packets into 4 files;
    `editcap -r` takes a slice of the first packets. Timed: `tapdeck convert` (packets table;
    the other tables are empty) on the big file with --jobs 2 and --jobs 1, on the 4 files with
    --jobs 2 and --jobs 1, and on the slice; `tshark -T fields` extracting the same packet fields
    (time, lengths, addresses, protocol, ports, TCP flags/seq/ack, VLAN) from the slice: tshark
    manages ~35 000 packets/s here, so it only gets the slice and is compared by rate.
(b) NFS traffic: bench/nfsgen.py (NFSv3 and v4.0 over TCP; pipelined calls, RPCs spanning
    segments) and a slice of it. Timed: `tapdeck convert` with and without the packets table on
    the whole trace and on the slice, and `tshark -T fields` extracting rpc.xid, rpc.msgtyp,
    rpc.procedure, nfs.procedure_v3, nfs.opcode, nfs.status, nfs.fh.hash, offsets and counts from
    the slice. RPC messages per second: tapdeck's counts, tshark's rpc.xid values.

Every run is one child process, measured with os.wait4: wall time, user+system CPU, peak RSS.
Inputs are read once beforehand so that every tool reads from the page cache. Tools run in turn
inside each repetition; ratios are taken within a repetition (the machine is shared and
noisy), figures are median (min..max) over --reps.
With --baseline, an earlier build converts the big generic and NFS traces too, in each
repetition, and the table gives this build's CPU seconds over the baseline's.
Results: bench/results/convert-<UTC time>.{json,md}. The work directory (a few GB; the free
space is checked) is removed at the end unless --keep.
"""

import argparse
import datetime
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("TAPDECK_BIN", ROOT / "target/release/tapdeck"))
NFSGEN = ROOT / "bench/nfsgen.py"

PACKET_FIELDS = ["frame.time_epoch", "frame.len", "frame.cap_len", "ip.src", "ip.dst", "ip.proto",
                 "tcp.srcport", "tcp.dstport", "udp.srcport", "udp.dstport", "tcp.flags",
                 "tcp.seq_raw", "tcp.ack_raw", "vlan.id"]
RPC_FIELDS = ["frame.time_epoch", "rpc.xid", "rpc.msgtyp", "rpc.procedure", "nfs.procedure_v3",
              "nfs.opcode", "nfs.status", "nfs.fh.hash", "nfs.offset3", "nfs.offset4",
              "nfs.count3", "nfs.count4"]


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def measure(cmd, stdout=None, cwd=None) -> dict:
    """Runs one command as a child; returns wall s, CPU s (user+sys) and peak RSS (bytes) of
    that child from wait4, and its stderr. Fails loudly on a non-zero exit."""
    cmd = [str(c) for c in cmd]
    with tempfile.TemporaryFile() as err:
        out = open(stdout, "wb") if stdout else subprocess.DEVNULL
        try:
            t0 = time.monotonic()
            p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd)
            _, status, ru = os.wait4(p.pid, 0)
            wall = time.monotonic() - t0
            p.returncode = os.waitstatus_to_exitcode(status)
        finally:
            if stdout:
                out.close()
        err.seek(0)
        text = err.read().decode(errors="replace")
    if p.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} failed ({p.returncode}): {text.strip()[-2000:]}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "user_s": ru.ru_utime,
            "sys_s": ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024, "stderr": text}


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def fmt(s, digits=1, scale=1.0):
    if s is None:
        return "–"
    if s["min"] == s["max"]:
        return f"{s['median'] * scale:,.{digits}f}"
    return f"{s['median'] * scale:,.{digits}f} ({s['min'] * scale:,.{digits}f}..{s['max'] * scale:,.{digits}f})"


def packet_count(path) -> int:
    out = subprocess.run(["capinfos", "-c", "-M", "-T", "-r", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return int(out.split("\t")[-1])


def warm(*paths) -> None:
    """Reads files once so that each tool finds them in the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.readinto(bytearray(8 << 20)):
                pass


def tool_versions() -> dict:
    v = {"tapdeck": subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.strip()}
    v["tshark"] = subprocess.run(["tshark", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    v["python"] = sys.version.split()[0]
    return v


def tapdeck_convert(inputs, dataset: Path, *extra, binary: Path = BIN) -> dict:
    """`tapdeck convert --json`; returns the measurement plus the report's counts."""
    shutil.rmtree(dataset, ignore_errors=True)
    report = dataset.parent / (dataset.name + ".json")
    r = measure([binary, "convert", *inputs, "--out", dataset, "--json", "-q", "--log", "warn", *extra],
                stdout=report)
    rep = json.loads(report.read_text())
    report.unlink()
    c = rep["counts"]
    r.pop("stderr")
    r["packets"] = c.get("packets", 0)
    r["rpc_messages"] = c.get("rpc.calls", 0) + c.get("rpc.replies", 0)
    r["rows"] = sum(v for k, v in c.items() if k.startswith("rows."))
    r["report_seconds"] = rep.get("seconds")
    return r


def unmatched(dataset: Path) -> int:
    import duckdb
    return duckdb.sql(f"SELECT count(*) FROM read_parquet('{dataset}/rpc/**/*.parquet') "
                      "WHERE NOT matched").fetchall()[0][0]


def tshark_fields(path: Path, fields, out: Path, rpc: bool = False) -> dict:
    cmd = ["tshark", "-r", path, "-T", "fields", "-E", "occurrence=a"]
    for f in fields:
        cmd += ["-e", f]
    if rpc:
        cmd += ["-Y", "rpc"]
    r = measure(cmd, stdout=out)
    r.pop("stderr")
    if rpc:
        xid = fields.index("rpc.xid")
        n = 0
        with open(out) as f:
            for line in f:
                v = line.rstrip("\n").split("\t")[xid]
                n += v.count(",") + 1 if v else 0
        r["rpc_messages"] = n
    else:
        with open(out, "rb") as f:
            r["lines"] = sum(1 for _ in f)
    out.unlink()
    return r


def prepare(work: Path, quick: bool) -> dict:
    """Makes the inputs; returns their paths and packet counts."""
    n_generic = 500_000 if quick else 5_000_000
    n_slice = 50_000 if quick else 500_000
    nfs_tx = 30_000 if quick else 400_000
    inp = {}
    log(f"generic trace: tapdeck record --synthetic mix --count {n_generic}")
    store = work / "store"
    # At full speed the generator outruns the disk and the excess is dropped at staging: offer a
    # fixed rate the disk keeps up with, and check that every packet was stored.
    stats = work / "record-stats.jsonl"
    measure([BIN, "record", "--synthetic", "mix", "--count", n_generic, "--rate", "400000", "--store", store,
             "--format", "pcap", "--codec", "none", "--rotate-size", "64GiB", "--staging", "1GiB", "-q",
             "--log", "warn", "--stats", stats])
    final = json.loads(stats.read_text().strip().splitlines()[-1])
    inp["record"] = {"offered": n_generic, "stored": final["totals"]["stored"]}
    if final["totals"]["stored"] != n_generic:  # a busy disk: fewer packets, still one trace
        log(f"tapdeck record stored {final['totals']['stored']} of {n_generic} packets (disk busy)")
    files = sorted(glob.glob(str(store / "*.pcap")))
    if len(files) != 1:
        raise SystemExit(f"bench: expected one pcap file in {store}, found {files}")
    big = work / "generic.pcap"
    os.replace(files[0], big)
    shutil.rmtree(store)
    inp["generic"] = big
    parts = work / "parts"
    parts.mkdir()
    log("splitting it into 4 files (editcap -c) and taking a slice (editcap -r)")
    subprocess.run(["editcap", "-c", str(-(-packet_count(big) // 4)), big, parts / "part.pcap"], check=True)
    inp["generic_parts"] = sorted(parts.glob("*.pcap"))
    inp["generic_slice"] = work / "generic-slice.pcap"
    subprocess.run(["editcap", "-r", big, inp["generic_slice"], f"1-{n_slice}"], check=True)
    log(f"NFS trace: nfsgen --transactions {nfs_tx}")
    nfs = work / "nfs.pcap"
    g = measure([sys.executable, NFSGEN, nfs, "--transactions", nfs_tx, "--seed", "4"])
    inp["nfs_generation"] = {"wall_s": g["wall_s"], "cpu_s": g["cpu_s"], "message": g["stderr"].strip()}
    inp["nfs"] = nfs
    inp["nfs_slice"] = work / "nfs-slice.pcap"
    subprocess.run(["editcap", "-r", nfs, inp["nfs_slice"], f"1-{n_slice}"], check=True)
    inp["nfs_truth"] = json.loads((work / "nfs.truth.json").read_text())
    counts = {}
    for k in ("generic", "generic_slice", "nfs", "nfs_slice"):
        counts[k] = {"packets": packet_count(inp[k]), "bytes": inp[k].stat().st_size}
    counts["generic_parts"] = {"packets": sum(packet_count(p) for p in inp["generic_parts"]),
                               "bytes": sum(p.stat().st_size for p in inp["generic_parts"]),
                               "files": len(inp["generic_parts"])}
    inp["counts"] = counts
    return inp


# The conversions a --baseline binary repeats, for the this/baseline CPU ratio.
BASELINE_RUNS = {
    "tapdeck generic --jobs 2": ("generic", ["--jobs", "2"]),
    "tapdeck generic --jobs 1": ("generic", ["--jobs", "1"]),
    "tapdeck nfs": ("nfs", []),
    "tapdeck nfs --no-packets": ("nfs", ["--no-packets"]),
}


def run_benchmark(work: Path, inp: dict, reps: int, baseline: Path | None = None) -> dict:
    ds = work / "ds"
    out = work / "tshark.out"
    runs = {}

    def add(name, r):
        runs.setdefault(name, []).append(r)

    warm(inp["generic"], *inp["generic_parts"], inp["generic_slice"], inp["nfs"], inp["nfs_slice"])
    for rep in range(reps):
        log(f"repetition {rep + 1}/{reps}: generic traffic")
        add("tapdeck generic --jobs 2", tapdeck_convert([inp["generic"]], ds, "--jobs", "2"))
        add("tapdeck generic --jobs 1", tapdeck_convert([inp["generic"]], ds, "--jobs", "1"))
        add("tapdeck generic 4 files --jobs 2", tapdeck_convert(inp["generic_parts"], ds, "--jobs", "2"))
        add("tapdeck generic 4 files --jobs 1", tapdeck_convert(inp["generic_parts"], ds, "--jobs", "1"))
        add("tapdeck generic slice", tapdeck_convert([inp["generic_slice"]], ds))
        add("tshark generic slice", tshark_fields(inp["generic_slice"], PACKET_FIELDS, out))
        log(f"repetition {rep + 1}/{reps}: NFS traffic")
        r = tapdeck_convert([inp["nfs"]], ds)
        r["unmatched"] = unmatched(ds)
        add("tapdeck nfs", r)
        add("tapdeck nfs --no-packets", tapdeck_convert([inp["nfs"]], ds, "--no-packets"))
        add("tapdeck nfs slice", tapdeck_convert([inp["nfs_slice"]], ds))
        add("tapdeck nfs slice --no-packets", tapdeck_convert([inp["nfs_slice"]], ds, "--no-packets"))
        add("tshark nfs slice", tshark_fields(inp["nfs_slice"], RPC_FIELDS, out, rpc=True))
        if baseline:
            log(f"repetition {rep + 1}/{reps}: the baseline binary")
            for name, (src, extra) in BASELINE_RUNS.items():
                add("baseline" + name.removeprefix("tapdeck"),
                    tapdeck_convert([inp[src]], ds, *extra, binary=baseline))
    shutil.rmtree(ds, ignore_errors=True)
    return runs


def summarise(inp: dict, runs: dict) -> dict:
    c = inp["counts"]
    packets_of = {"generic": c["generic"]["packets"], "generic_slice": c["generic_slice"]["packets"],
                  "generic_parts": c["generic_parts"]["packets"], "nfs": c["nfs"]["packets"],
                  "nfs_slice": c["nfs_slice"]["packets"]}

    def input_of(name):
        if "4 files" in name:
            return "generic_parts"
        base = "nfs" if " nfs" in name else "generic"
        return base + ("_slice" if "slice" in name else "")

    tools = {}
    for name, rs in runs.items():
        if name.startswith("baseline"):
            continue
        src = input_of(name)
        n = packets_of[src]
        t = {"input": src, "packets": n,
             "wall_s": spread(r["wall_s"] for r in rs), "cpu_s": spread(r["cpu_s"] for r in rs),
             "user_s": spread(r["user_s"] for r in rs), "sys_s": spread(r["sys_s"] for r in rs),
             "peak_rss_mb": spread(r["peak_rss_mb"] for r in rs),
             "packets_per_s": spread(n / r["wall_s"] for r in rs),
             "packets_per_cpu_s": spread(n / r["cpu_s"] for r in rs)}
        if src.startswith("nfs"):
            t["rpc_messages"] = rs[0].get("rpc_messages")
            t["rpc_per_s"] = spread(r["rpc_messages"] / r["wall_s"] for r in rs)
        if name.startswith("tapdeck"):
            t["rows"] = rs[0]["rows"]
            t["rows_per_s"] = spread(r["rows"] / r["wall_s"] for r in rs)
            if any(r["packets"] != n for r in rs):
                t["warning"] = f"tapdeck counted {rs[0]['packets']} packets, capinfos {n}"
        if "unmatched" in rs[0]:
            t["unmatched_rpc"] = [r["unmatched"] for r in rs]
        tools[name] = t
    # This binary's CPU over the baseline's, within each repetition.
    against_baseline = {}
    for name in BASELINE_RUNS:
        base = runs.get("baseline" + name.removeprefix("tapdeck"))
        if base:
            against_baseline[name] = {
                "cpu_s": spread(r["cpu_s"] for r in runs[name]),
                "baseline_cpu_s": spread(r["cpu_s"] for r in base),
                "cpu_ratio": spread(r["cpu_s"] / b["cpu_s"] for r, b in zip(runs[name], base, strict=True)),
                "rows": runs[name][0]["rows"], "baseline_rows": base[0]["rows"]}
    # Ratios within each repetition: tapdeck's rate over tshark's.
    ratios = {}
    for name, rs in runs.items():
        if not name.startswith("tapdeck"):
            continue
        nfs = " nfs" in name
        peer = runs["tshark nfs slice" if nfs else "tshark generic slice"]
        src, psrc = input_of(name), ("nfs_slice" if nfs else "generic_slice")
        key = "rpc_messages" if nfs and "no-packets" in name else None
        vals = []
        for r, p in zip(rs, peer, strict=True):
            if key:
                mine, theirs = r[key] / r["wall_s"], p[key] / p["wall_s"]
            else:
                mine, theirs = packets_of[src] / r["wall_s"], packets_of[psrc] / p["wall_s"]
            vals.append(mine / theirs)
        ratios[name] = {"vs": "tshark nfs slice" if nfs else "tshark generic slice",
                        "by": "RPC messages/s" if key else "packets/s", "ratio": spread(vals)}
    return {"tools": tools, "ratios": ratios, "against_baseline": against_baseline}


def markdown(res) -> str:
    c = res["inputs"]
    m = [f"# Convert benchmark — {res['when']}", "",
         f"Machine: {res['machine']}. Command: `{res['command']}`. Tools: {res['versions']['tapdeck']}, "
         f"{res['versions']['tshark']}.",
         f"Repetitions: {res['reps']}; figures are median (min..max). Rates are packets (or RPC "
         "messages) over wall time; CPU is user+system of the process (all threads); RSS is its peak.", "",
         "Inputs: " + "; ".join(f"{k}: {v['packets']:,} packets, {v['bytes'] / 1e6:,.0f} MB"
                                + (f" in {v['files']} files" if "files" in v else "")
                                for k, v in c.items()) + ".",
         f"NFS trace: {res['nfs_generation']['message']}", "",
         "| tool / input | packets | RPC msgs | wall s | packets/s | RPC msgs/s | CPU s | packets per CPU s | peak RSS MB | rate / tshark's |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for name, t in res["summary"]["tools"].items():
        r = res["summary"]["ratios"].get(name)
        ratio = f"{fmt(r['ratio'], 1)}× ({r['by']})" if r else "1"
        m.append(f"| {name} | {t['packets']:,} | {t.get('rpc_messages') or '–'} | {fmt(t['wall_s'], 2)} | "
                 f"{fmt(t['packets_per_s'], 0)} | {fmt(t.get('rpc_per_s'), 0)} | {fmt(t['cpu_s'], 2)} | "
                 f"{fmt(t['packets_per_cpu_s'], 0)} | {fmt(t['peak_rss_mb'], 0)} | {ratio} |")
    tools = res["summary"]["tools"]
    g = tools["tapdeck generic --jobs 2"]["packets_per_s"]["median"]
    m += ["", "Targets (issue 4): packets table at least 2 M packets/s on 2 cores and 20× tshark.",
          f"Measured: {g / 1e6:.2f} M packets/s on the generic trace with --jobs 2 "
          f"({'met' if g >= 2e6 else 'not met'}); "
          f"{res['summary']['ratios']['tapdeck generic --jobs 2']['ratio']['median']:.1f}× tshark "
          f"({'met' if res['summary']['ratios']['tapdeck generic --jobs 2']['ratio']['median'] >= 20 else 'not met'}).",
          f"Unmatched RPC messages in the NFS conversion: {tools['tapdeck nfs'].get('unmatched_rpc')} "
          f"(the generator answers every call)."]
    ab = res["summary"].get("against_baseline")
    if ab:
        m += ["", f"Against the baseline binary `{res.get('baseline')}` ({res.get('baseline_version')}), "
              "CPU seconds of the same conversion in the same repetition (the 10 % rule of issue 18: "
              "a ratio above 1.10 is a miss):", "",
              "| conversion | CPU s | baseline CPU s | ratio | rows | baseline rows |", "|---|---|---|---|---|---|"]
        for name, a in ab.items():
            m.append(f"| {name} | {fmt(a['cpu_s'], 2)} | {fmt(a['baseline_cpu_s'], 2)} | "
                     f"{fmt(a['cpu_ratio'], 3)} | {a['rows']:,} | {a['baseline_rows']:,} |")
    return "\n".join(m) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 2; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="small inputs, one repetition (about a minute)")
    ap.add_argument("--work", type=Path, default=Path("/tmp"), help="where the temporary directory goes")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--baseline", type=Path, help="another tapdeck binary (an earlier build) to time "
                    "on the same conversions in each repetition, for a CPU ratio against it")
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 2)
    if not BIN.exists():
        raise SystemExit(f"bench: {BIN} missing; build it (scripts/setup.sh)")
    for tool in ("tshark", "editcap", "capinfos"):
        if not shutil.which(tool):
            raise SystemExit(f"bench: {tool} not found")
    need = 2e9 if args.quick else 16e9
    Path(args.work).mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.work).free
    if free < need:
        raise SystemExit(f"bench: {args.work} has {free / 1e9:.0f} GB free, need {need / 1e9:.0f}")
    work = Path(tempfile.mkdtemp(prefix="tapdeck-bench-convert-", dir=args.work))
    t0 = time.monotonic()
    try:
        inp = prepare(work, args.quick)
        runs = run_benchmark(work, inp, reps, args.baseline)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    res = {
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{os.cpu_count()} cores, {os.uname().release}, load average at the end "
                   f"{os.getloadavg()[0]:.1f}",
        "command": " ".join(["python3", *sys.argv]), "reps": reps, "versions": tool_versions(),
        "inputs": inp["counts"], "nfs_generation": inp["nfs_generation"], "record": inp["record"],
        "tshark_fields": {"packets": PACKET_FIELDS, "nfs": RPC_FIELDS},
        "runs": runs, "summary": summarise(inp, runs), "total_s": time.monotonic() - t0,
    }
    if args.baseline:
        res["baseline"] = str(args.baseline)
        res["baseline_version"] = subprocess.run([args.baseline, "--version"], capture_output=True,
                                                 text=True).stdout.strip()
    out = ROOT / "bench/results"
    out.mkdir(parents=True, exist_ok=True)
    stem = "convert-" + res["when"].replace(":", "").replace("-", "")
    (out / f"{stem}.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    (out / f"{stem}.md").write_text(markdown(res))
    print(markdown(res))
    log(f"wrote {out / stem}.{{json,md}} in {res['total_s']:.0f} s" + (f"; kept {work}" if args.keep else ""))


if __name__ == "__main__":
    main()
