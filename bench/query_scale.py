#!/usr/bin/env python3
"""Query cost against store size (issue 32): does a rare-host query stay cheap as the store
grows in chunks and in files, and what would it cost on a month of a busy link?

Parts (--parts, all by default):
  sweep  one synthetic trace (bench/query.py's generator: >= 100 000 client hosts, per-host
         flows, one rare host) written once to a pcap file, then recorded by `record -r` into
         one store per layout: 4 MiB chunks in 512 MiB files (10 files), down to 512 KiB chunks
         in 4 MiB files (1,300 files) (--layouts; sizes of capture data). Per layout: the rare host, a busy port (`tcp port 443`) and a
         one-minute window with a host, each cold (page cache dropped) and warm; the rare host
         also with --no-index. `extract --explain` gives the catalog entries consulted and the
         files and chunks read. Index bytes: chunk filters, file summaries and catalog, as a
         fraction of the stored bytes.
  busy   3 M packets among 100 000 hosts in uniform random pairs (every chunk holds thousands
         of addresses), 512 KiB chunks: the rare host indexed against --no-index.
  month  the catalog of a month: crates/store/examples/catalog_scale.rs writes catalogs of
         3,000, 30,000 and 300,000 entries (30 days of a 1 Gb/s link in files of 1 GiB is
         301,749) with their groups, and times the rare-host lookup, a one-hour window and
         the listing of a directory of that many files, cold and warm. A straight line
         through the three extrapolates to 10 Gb/s (3 M files).

Targets: rare host cold < 1 s at every layout; >= 100x faster than --no-index at the largest;
>= 20x on the busy store; the 1000-file layout's cold rare host <= 2x the 10-file one's; index
<= 1 % of stored bytes at 4 MiB chunks, <= 2 % at 512 KiB.

Output: bench/results/query-scale-<UTC time>.{json,md}; scratch in --work (removed unless
--keep). Needs root (drop_caches). Usage:
    python3 bench/query_scale.py [--gb 5.5] [--reps 2] [--parts sweep,busy,month] [--layouts ...]
"""

import argparse
import datetime
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import query as q  # noqa: E402  (the generator, trailer reader and helpers)

ROOT = Path(__file__).resolve().parent.parent
BIN = q.BIN
# chunk size, rotate size: from the fewest, largest files to the most, smallest.
LAYOUTS = "4MiB:512MiB,1MiB:128MiB,1MiB:16MiB,512KiB:4MiB"
EXPLAIN_CATALOG = re.compile(r"store catalog: (\d+) entries consulted \((\d+) read whole, the rest settled by "
                             r"the member lists and address slices of (\d+) groups\); (\d+) more files skipped")
EXPLAIN_CHUNKS = re.compile(r"(\d+) of (\d+) chunks in the window read, \d+ ruled out")


def log(*a):
    print("query-scale:", *a, file=sys.stderr, flush=True)


def run(cmd, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} exited {p.returncode}: {p.stderr[-1200:]}")
    return p


def make_trace(args, work: Path):
    path = work / "trace.pcap"
    trace = q.Trace(int(args.gb * 1e9), args.hosts, args.minutes * 60.0, seed=args.seed)
    log(f"trace: {args.gb} GB, {args.hosts} hosts over {args.minutes} min into {path}")
    t0 = time.monotonic()
    with open(path, "wb") as f:
        truth = trace.write(f)
    log(f"trace: {truth['packets']} packets in {time.monotonic() - t0:.0f} s")
    return path, trace.describe(), truth


def record(trace: Path, store: Path, chunk: str, rotate: str):
    shutil.rmtree(store, ignore_errors=True)
    t0 = time.monotonic()
    run([BIN, "record", "-r", trace, "--store", store, "--chunk-size", chunk, "--rotate-size", rotate,
         "-q", "--log", "warn"])
    return time.monotonic() - t0


def index_bytes(store: Path):
    info, files = q.data_files(store)
    per = [q.trailer_sizes(Path(f["path"])) for f in files]
    stored = sum(f["stored_bytes"] for f in files)
    catalog = sum((store / n).stat().st_size for n in ("catalog.tdc", "catalog.tdg", "catalog.tds")
                  if (store / n).exists())
    flow = sum(p["flow_bytes"] for p in per)
    summary = sum(p["summary_bytes"] for p in per)
    return {"files": len(files), "chunks": sum(f["chunks"] for f in files), "stored_bytes": stored,
            "flow_bytes": flow, "summary_bytes": summary, "catalog_bytes": catalog,
            "index_fraction": (flow + summary + catalog) / max(1, stored)}


def extract(store: Path, flt: str, window=None, no_index=False, explain=False):
    cmd = [BIN, "extract", store, "-f", flt, "-w", "/dev/null", "--log", "warn"]
    if window:
        cmd += ["--start", q.iso(window[0]), "--end", q.iso(window[1])]
    if no_index:
        cmd.append("--no-index")
    if explain:
        cmd.append("--explain")
    t0 = time.monotonic()
    p = run(cmd)
    wall = time.monotonic() - t0
    written = re.search(r"wrote (\d+) packets", p.stderr)
    return wall, p.stderr, int(written.group(1)) if written else None


def explained(stderr: str):
    cat, chunks = EXPLAIN_CATALOG.search(stderr), EXPLAIN_CHUNKS.search(stderr)
    files_read = len(re.findall(r"explain: \S+: [1-9]\d* of \d+ chunks", stderr))
    return {"catalog_entries": int(cat.group(1)) if cat else None,
            "catalog_records_read": int(cat.group(2)) if cat else None,
            "catalog_groups": int(cat.group(3)) if cat else None,
            "files_skipped_by_catalog": int(cat.group(4)) if cat else None,
            "chunks_read": int(chunks.group(1)) if chunks else None,
            "chunks_in_window": int(chunks.group(2)) if chunks else None,
            "files_read": files_read}


def timings(store, flt, window, reps, no_index=False):
    out = {"cold": [], "warm": []}
    for _ in range(reps):
        for state in ("cold", "warm"):
            if state == "cold":
                # The store's pages dropped, the binary's loaded again: cold as a running
                # service's queries are (its program stays in memory).
                q.drop_caches()
                run([BIN, "--version"])
            wall, _, _ = extract(store, flt, window, no_index=no_index)
            out[state].append(wall)
    return {k: {"median": sorted(v)[len(v) // 2], "min": min(v), "max": max(v), "runs": v}
            for k, v in out.items()}


def sweep(args, work: Path, res: dict):
    trace, info, truth = make_trace(args, work)
    res["trace"] = {"info": info, "truth": truth, "bytes": trace.stat().st_size}
    queries = [("rare host", f"host {info['rare_host']}", None, truth.get("rare")),
               ("busy port", "tcp port 443", None, truth.get("port443")),
               ("1-minute window, one host", f"host {info['window_host']}", info["window_ns"],
                truth.get("window"))]
    rows = []
    for layout in args.layouts.split(","):
        chunk, rotate = layout.split(":")
        store = work / f"store-{chunk}-{rotate}"
        wall = record(trace, store, chunk, rotate)
        row = {"chunk": chunk, "rotate": rotate, "record_s": wall, **index_bytes(store), "queries": {}}
        log(f"sweep {layout}: {row['files']} files, {row['chunks']} chunks, index "
            f"{100 * row['index_fraction']:.3f} % of {row['stored_bytes'] / 1e9:.2f} GB")
        for name, flt, window, expect in queries:
            _, stderr, packets = extract(store, flt, window, explain=True)
            entry = {"filter": flt, "window": window, "packets": packets, "expected": expect,
                     "explain": explained(stderr), "indexed": timings(store, flt, window, args.reps)}
            if name == "rare host":
                entry["no_index"] = timings(store, flt, window, 1, no_index=True)
                entry["speedup_cold"] = entry["no_index"]["cold"]["median"] / entry["indexed"]["cold"]["median"]
                entry["speedup_warm"] = entry["no_index"]["warm"]["median"] / entry["indexed"]["warm"]["median"]
            row["queries"][name] = entry
            log(f"sweep {layout} {name}: {packets} packets (expected {expect}); cold "
                f"{entry['indexed']['cold']['median']:.3f} s, warm {entry['indexed']['warm']['median']:.3f} s; "
                f"{entry['explain']}")
        rows.append(row)
        if not args.keep:
            shutil.rmtree(store, ignore_errors=True)
    if not args.keep:
        trace.unlink()
    res["sweep"] = rows


def fit(pts):
    """Least squares a + b*x."""
    n = len(pts)
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0.0
    return my - b * mx, b


MONTH_FILES = {"1 Gb/s": 1e9 / 8 * 30 * 86400 / (1 << 30), "10 Gb/s": 10e9 / 8 * 30 * 86400 / (1 << 30)}


def month(args, work: Path, res: dict):
    run(["cargo", "build", "--release", "-q", "-p", "tapdeck-store", "--example", "catalog_scale"], cwd=ROOT)
    example = ROOT / "target/release/examples/catalog_scale"
    rows = []
    for n in (3_000, 30_000, 300_000):
        d = work / f"month-{n}"
        p = run([example, d, n])
        row = json.loads(p.stdout)
        log(f"month: {n} entries: rare host cold {row['cold']['rare_host_s']:.3f} s "
            f"warm {row['warm']['rare_host_s']:.3f} s ({row['cold']['records_read']} records read); "
            f"hour cold {row['cold']['hour_window_s']:.3f} s; listing cold {row['cold']['list_dir_s']:.3f} s")
        rows.append(row)
        shutil.rmtree(d, ignore_errors=True)
    out = {"rows": rows, "links": {}}
    for key in ("rare_host_s", "hour_window_s", "list_dir_s"):
        for state in ("cold", "warm"):
            a, b = fit([(r["entries"], r[state][key]) for r in rows])
            for link, files in MONTH_FILES.items():
                out["links"].setdefault(link, {"files": files})[f"{key}_{state}"] = a + b * files
    res["month"] = out


def busy_trace(path: Path, packets: int, hosts: int, seed: int, rare: str):
    """Ethernet/IPv4/UDP frames of 100 bytes (payload half random, half zeros, as the other
    traces) between uniformly random pairs of `hosts` addresses in 198.18.0.0/15, 10 us
    apart, and 20 packets from `rare` in the middle."""
    rng = random.Random(seed)
    base = (198 << 24) | (18 << 16)
    t0 = 1_795_500_000_000_000_000
    pool = os.urandom(1 << 20)
    eth = bytes.fromhex("020000000002020000000001") + b"\x08\x00"
    rare_at = packets // 2
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))
        out = bytearray()
        for i in range(packets + 20):
            if rare_at <= i < rare_at + 20:
                src = struct.unpack("!I", bytes(int(x) for x in rare.split(".")))[0]
            else:
                src = base + rng.randrange(1, hosts)
            dst = base + rng.randrange(1, hosts)
            at = (i * 29) % ((1 << 20) - 29)
            payload = pool[at:at + 29] + bytes(29)
            udp = struct.pack("!HHHH", 1024 + (i & 1023), 53, 8 + len(payload), 0) + payload
            ip = struct.pack("!BBHHHBBHII", 0x45, 0, 20 + len(udp), i & 0xFFFF, 0, 64, 17, 0, src, dst)
            frame = eth + ip + udp
            ts = t0 + i * 10_000
            out += struct.pack("<IIII", ts // 10**9, ts % 10**9, len(frame), len(frame)) + frame
            if len(out) > 8 << 20:
                f.write(out)
                out.clear()
        f.write(out)


def busy(args, work: Path, res: dict):
    rare = "198.19.255.77"
    trace = work / "busy.pcap"
    log(f"busy: {args.busy_packets} packets among {args.busy_hosts} hosts in random pairs")
    busy_trace(trace, args.busy_packets, args.busy_hosts, args.seed, rare)
    store = work / "busy-store"
    record(trace, store, "512KiB", "64MiB")
    sizes = index_bytes(store)
    _, stderr, packets = extract(store, f"host {rare}", explain=True)
    row = {**sizes, "packets": packets, "explain": explained(stderr),
           "indexed": timings(store, f"host {rare}", None, args.reps),
           "no_index": timings(store, f"host {rare}", None, args.reps, no_index=True)}
    row["speedup_cold"] = row["no_index"]["cold"]["median"] / row["indexed"]["cold"]["median"]
    row["speedup_warm"] = row["no_index"]["warm"]["median"] / row["indexed"]["warm"]["median"]
    log(f"busy: {packets} packets of the rare host; {row['explain']}; cold {row['speedup_cold']:.1f}x, "
        f"warm {row['speedup_warm']:.1f}x against --no-index; index {100 * sizes['index_fraction']:.3f} %")
    res["busy"] = row
    if not args.keep:
        shutil.rmtree(store, ignore_errors=True)
        trace.unlink()


def markdown(res: dict) -> str:
    lines = [f"# Query scale ({res['started']})", "", f"tapdeck {res['commit']}", ""]
    if "sweep" in res:
        lines += ["| chunks | files | chunk count | index % | rare cold s | rare warm s | rare --no-index cold s "
                  "| speed-up cold | busy port cold s | window cold s | catalog entries | files read (rare) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in res["sweep"]:
            qr = r["queries"]
            lines.append(
                f"| {r['chunk']} | {r['files']} | {r['chunks']} | {100 * r['index_fraction']:.3f} "
                f"| {qr['rare host']['indexed']['cold']['median']:.3f} | {qr['rare host']['indexed']['warm']['median']:.3f} "
                f"| {qr['rare host']['no_index']['cold']['median']:.2f} | {qr['rare host']['speedup_cold']:.0f}x "
                f"| {qr['busy port']['indexed']['cold']['median']:.2f} "
                f"| {qr['1-minute window, one host']['indexed']['cold']['median']:.3f} "
                f"| {qr['rare host']['explain']['catalog_entries']} | {qr['rare host']['explain']['files_read']} |")
    if "month" in res:
        lines += ["", "Month-scale catalogs (crates/store/examples/catalog_scale.rs; cold = page cache dropped):", "",
                  "| entries | catalog MB | groups MB | rare host cold s | warm s | records read | hour window cold s "
                  "| listing cold s | warm s |", "|---|---|---|---|---|---|---|---|---|"]
        for r in res["month"]["rows"]:
            lines.append(f"| {r['entries']} | {r['catalog_bytes'] / 1e6:.0f} | {r['groups_bytes'] / 1e6:.0f} "
                         f"| {r['cold']['rare_host_s']:.3f} | {r['warm']['rare_host_s']:.3f} | {r['cold']['records_read']} "
                         f"| {r['cold']['hour_window_s']:.3f} | {r['cold']['list_dir_s']:.3f} | {r['warm']['list_dir_s']:.3f} |")
        lines.append("")
        for link, v in res["month"]["links"].items():
            lines.append(f"- 30 days at {link} ({v['files']:.0f} files of 1 GiB): rare-host catalog lookup cold "
                         f"~{v['rare_host_s_cold']:.2f} s (warm {v['rare_host_s_warm']:.2f} s), listing the store "
                         f"cold ~{v['list_dir_s_cold']:.2f} s (warm {v['list_dir_s_warm']:.2f} s)")
    if "busy" in res:
        b = res["busy"]
        lines += ["", f"Busy store: {b['files']} files, {b['chunks']} chunks; rare host cold "
                      f"{b['indexed']['cold']['median']:.3f} s vs --no-index {b['no_index']['cold']['median']:.3f} s "
                      f"({b['speedup_cold']:.1f}x), warm {b['speedup_warm']:.1f}x; chunks read "
                      f"{b['explain']['chunks_read']} of {b['explain']['chunks_in_window']}; index "
                      f"{100 * b['index_fraction']:.3f} %"]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=5.5, help="GB of frames: 10,000+ chunks of 512 KiB")
    ap.add_argument("--hosts", type=int, default=100_000)
    ap.add_argument("--minutes", type=float, default=40.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--parts", default="sweep,busy,month")
    ap.add_argument("--layouts", default=LAYOUTS)
    ap.add_argument("--busy-packets", type=int, default=3_000_000)
    ap.add_argument("--busy-hosts", type=int, default=100_000)
    ap.add_argument("--work", type=Path, default=ROOT / "bench/work")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    work = args.work / f"query-scale-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    res = {"started": started, "commit": commit, "args": {k: str(v) for k, v in vars(args).items()}}
    try:
        for part in args.parts.split(","):
            {"sweep": sweep, "busy": busy, "month": month}[part](args, work, res)
    finally:
        out = ROOT / "bench/results" / f"query-scale-{started}"
        out.with_suffix(".json").write_text(json.dumps(res, indent=1))
        if "sweep" in res or "busy" in res or "month" in res:
            out.with_suffix(".md").write_text(markdown(res))
        log(f"results in {out}.json")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
