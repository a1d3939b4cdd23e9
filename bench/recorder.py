#!/usr/bin/env python3
"""Recorder benchmark (no network card): each stage isolated, peers in the same run.

Stages, each isolated (so that the limit of each can be seen):
  disk      the disk alone: dd with O_DIRECT, the bandwidth every other figure is judged by
  pipeline  synthetic 64-byte frames at a fixed offered rate through the whole recorder,
            writing nothing (--discard), into tmpfs, and onto the disk
  full      synthetic 1514-byte frames as fast as they come, plain files onto the disk,
            against dd's O_DIRECT bandwidth measured in the same run (interleaved)
  ladder    the adaptive codec ladder as the offered load rises: bytes through each rung
  replay    `tapdeck record -r X` against `tcpdump -r X -w Y` on the same input file

Every figure is repeated (--reps) and reported as median with min..max; ratios are taken
pair by pair within one run. Results go to bench/results/recorder-<UTC time>.{json,md}.
Needs root (it mounts a tmpfs). Usage: python3 bench/recorder.py [--quick] [--reps N]
"""

import argparse
import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("TAPDECK_BIN", ROOT / "target/release/tapdeck"))


def run(cmd, **kw):
    """Runs a command; returns (wall seconds, CPU seconds of the child, completed process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        raise SystemExit(f"bench: {' '.join(map(str, cmd))} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return wall, cpu, p


def tapdeck_record(store: Path, *args) -> dict:
    """Runs `tapdeck record` and returns its final stats record plus wall/CPU time."""
    shutil.rmtree(store, ignore_errors=True)
    stats = store.parent / (store.name + ".stats.jsonl")
    stats.unlink(missing_ok=True)
    wall, cpu, _ = run([BIN, "record", "--store", store, "--stats", stats, "-q", "--log", "warn", *args])
    final = json.loads(stats.read_text().strip().splitlines()[-1])
    assert final.get("final"), "last stats record is not the final one"
    final["wall_s"] = wall
    final["process_cpu_s"] = cpu
    return final


def dd_direct(target: Path, mib: int) -> float:
    """MB/s of dd writing `mib` MiB with O_DIRECT in 4 MiB blocks."""
    target.unlink(missing_ok=True)
    _, _, p = run(["dd", "if=/dev/zero", f"of={target}", "bs=4M", f"count={mib // 4}", "oflag=direct", "conv=fsync"])
    target.unlink(missing_ok=True)
    # dd's last stderr line: "N bytes (...) copied, S s, R MB/s"
    line = p.stderr.strip().splitlines()[-1]
    nbytes = int(line.split()[0])
    seconds = float(line.split(",")[-2].split()[0])
    return nbytes / seconds / 1e6


def spread(values):
    values = list(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def fmt(s, digits=1):
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}..{s['max']:.{digits}f})"


def stage_disk_and_full(work: Path, reps: int, mib: int):
    """dd and tapdeck (1514-byte frames, plain files) alternately on the same disk. Each
    tapdeck run is offered 1.5 times what dd just wrote, for as long as dd took: the disk,
    not the generator or a capture thread spinning on drops, sets the pace."""
    dd, td, ratio, drops = [], [], [], []
    for _ in range(reps):
        d = dd_direct(work / "dd.bin", mib)
        seconds = max(4.0, mib * 1048576 / (d * 1e6))
        rate = 1.5 * d * 1e6 / 1546  # pcapng record of a 1514-byte frame
        r = tapdeck_record(work / "full", "--synthetic", "1514", "--rate", f"{rate:.0f}",
                           "--duration", f"{seconds:.1f}", "--codec", "none", "--staging", "256MiB")
        written = r["bytes_written"] / r["elapsed_s"] / 1e6
        dd.append(d)
        td.append(written)
        ratio.append(written / d)
        drops.append(r["totals"]["dropped"]["staging_full"] / max(1, r["totals"]["seen"]))
        shutil.rmtree(work / "full", ignore_errors=True)
    return {"dd_direct_mb_s": spread(dd), "tapdeck_mb_s": spread(td), "ratio": spread(ratio),
            "offered_dropped_fraction": spread(drops), "mib_per_run": mib}


def stage_pipeline(work: Path, tmpfs: Path, reps: int, seconds: float, rate: float):
    """64-byte frames offered at `rate` through the recorder into three sinks."""
    count = int(rate * seconds)
    out = {}
    sinks = {"discard (no disk)": ["--discard"], "tmpfs": [], "disk (O_DIRECT)": []}
    for name, extra in sinks.items():
        stored, cap_cpu, mpps, written = [], [], [], []
        for _ in range(reps):
            where = tmpfs if name == "tmpfs" else work
            r = tapdeck_record(where / "pipe", "--synthetic", "64", "--rate", str(rate), "--count", str(count),
                               "--codec", "none", "--staging", "1GiB", "--rotate-size", "1GiB",
                               "--max-bytes", "3GiB", *extra)
            t = r["totals"]
            stored.append(t["stored"] / t["seen"])
            cap_cpu.append(r["cpu_seconds"].get("capture", 0.0) / (t["seen"] / 1e6))
            mpps.append(t["stored"] / r["elapsed_s"] / 1e6)
            written.append(r["bytes_written"] / r["elapsed_s"] / 1e6)
            shutil.rmtree(where / "pipe", ignore_errors=True)
        out[name] = {"stored_fraction": spread(stored), "capture_cpu_s_per_mpkt": spread(cap_cpu),
                     "stored_mpps": spread(mpps), "written_mb_s": spread(written)}
    return {"offered_pps": rate, "seconds": seconds, "sinks": out}


def stage_ladder(work: Path, rates, seconds: float):
    """Default ladder, 1514-byte frames, rising offered rate: bytes per rung at each step."""
    rows = []
    for rate in rates:
        r = tapdeck_record(work / "ladder", "--synthetic", "1514", "--rate", str(rate),
                           "--count", str(int(rate * seconds)), "--staging", "256MiB")
        t = r["totals"]
        rows.append({
            "offered_pps": rate, "offered_mb_s": rate * 1546 / 1e6,
            "stored_fraction": t["stored"] / t["seen"],
            "codecs": r["codecs"], "compress_cpu_s": r["cpu_seconds"].get("compress", 0.0),
            "ratio": t["staged_bytes"] / max(1, r["bytes_written"]),
        })
        shutil.rmtree(work / "ladder", ignore_errors=True)
    return rows


def stage_replay(work: Path, reps: int, packets: int):
    """tcpdump -r X -w Y against tapdeck record -r X, on one mixed-size pcap."""
    src = work / "replay-src"
    tapdeck_record(src, "--synthetic", "mix", "--count", str(packets), "--codec", "none", "--format", "pcap",
                   "--staging", "1GiB")
    # Read the input once so neither tool pays for the first read from disk.
    subprocess.run(["cat", next(src.glob("*.pcap"))], stdout=subprocess.DEVNULL, check=True)
    x = next(src.glob("*.pcap"))
    size_mb = x.stat().st_size / 1e6
    rows = {"tcpdump -r X -w Y": [], "tapdeck --codec none --format pcap --no-direct": [],
            "tapdeck --codec none --format pcap": [], "tapdeck (default ladder)": []}
    for _ in range(reps):
        y = work / "replay-out.pcap"
        wall, cpu, _ = run(["tcpdump", "-r", x, "-w", y])
        rows["tcpdump -r X -w Y"].append((wall, cpu))
        y.unlink()
        # tcpdump writes through the page cache; the --no-direct row does the same, the
        # others wait for the disk (O_DIRECT, and a sync at the end of every file).
        for name, extra in [("tapdeck --codec none --format pcap --no-direct",
                             ["--codec", "none", "--format", "pcap", "--no-direct"]),
                            ("tapdeck --codec none --format pcap", ["--codec", "none", "--format", "pcap"]),
                            ("tapdeck (default ladder)", [])]:
            r = tapdeck_record(work / "replay-store", "-r", x, "--staging", "64MiB", *extra)
            assert r["totals"]["stored"] == packets, "replay lost packets"
            rows[name].append((r["wall_s"], r["process_cpu_s"]))
            shutil.rmtree(work / "replay-store", ignore_errors=True)
    base = rows["tcpdump -r X -w Y"]
    result = {"input_mb": size_mb, "packets": packets, "tools": {}}
    for name, runs in rows.items():
        result["tools"][name] = {
            "wall_s": spread(w for w, _ in runs), "cpu_s": spread(c for _, c in runs),
            "wall_ratio_vs_tcpdump": spread(w / b[0] for (w, _), b in zip(runs, base)),
            "mb_s": spread(size_mb / w for w, _ in runs),
        }
    shutil.rmtree(src, ignore_errors=True)
    return result


def markdown(res) -> str:
    m = [f"# Recorder benchmark — {res['when']}", "", f"Machine: {res['machine']}. Command: `{res['command']}`.",
         f"Repetitions per figure: {res['reps']}; figures are median (min..max).", ""]
    f = res.get("full")
    m += [] if not f else ["## 1514-byte frames onto the disk, against dd (interleaved, same disk)", "",
          "| | MB/s |", "|---|---|",
          f"| dd O_DIRECT, 4 MiB blocks | {fmt(f['dd_direct_mb_s'])} |",
          f"| tapdeck, synthetic 1514 B, plain pcapng, O_DIRECT | {fmt(f['tapdeck_mb_s'])} |",
          f"| **ratio tapdeck / dd** (pair by pair) | **{fmt(f['ratio'], 3)}** |", "",
          f"Offered load exceeded the disk, so the excess was dropped at staging and counted "
          f"(dropped fraction {fmt(f['offered_dropped_fraction'], 3)}).", ""]
    p = res.get("pipeline", {"offered_pps": 0, "seconds": 0, "sinks": {}})
    m += [] if not p["sinks"] else [f"## 64-byte frames offered at {p['offered_pps'] / 1e6:.1f} Mpps for {p['seconds']} s", "",
          "| sink | stored / offered | stored Mpps | written MB/s | capture CPU s per million |",
          "|---|---|---|---|---|"]
    for name, s in p["sinks"].items():
        m.append(f"| {name} | {fmt(s['stored_fraction'], 4)} | {fmt(s['stored_mpps'], 2)} | "
                 f"{fmt(s['written_mb_s'])} | {fmt(s['capture_cpu_s_per_mpkt'], 3)} |")
    m += [] if "ladder" not in res else [
          "", "## Adaptive ladder as the load rises (1514-byte frames, default ladder)", "",
          "| offered Mpps | offered MB/s | stored / offered | ratio | compress CPU s | bytes in per rung (MB) |",
          "|---|---|---|---|---|---|"]
    for row in res.get("ladder", []):
        rungs = ", ".join(f"{k}: {v['bytes_in'] / 1e6:.0f}" for k, v in row["codecs"].items())
        m.append(f"| {row['offered_pps'] / 1e6:.3f} | {row['offered_mb_s']:.0f} | {row['stored_fraction']:.4f} | "
                 f"{row['ratio']:.2f} | {row['compress_cpu_s']:.1f} | {rungs} |")
    r = res.get("replay")
    if not r:
        return "\n".join(m) + "\n"
    m += ["", f"## Replay of one {r['input_mb']:.0f} MB pcap ({r['packets']} mixed-size packets)", "",
          "| tool | wall s | CPU s | MB/s | wall / tcpdump's |", "|---|---|---|---|---|"]
    for name, t in r["tools"].items():
        m.append(f"| {name} | {fmt(t['wall_s'], 2)} | {fmt(t['cpu_s'], 2)} | {fmt(t['mb_s'])} | "
                 f"{fmt(t['wall_ratio_vs_tcpdump'], 2)} |")
    return "\n".join(m) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    ap.add_argument("--work", type=Path, default=ROOT / "bench/work", help="directory on the disk under test")
    ap.add_argument("--only", choices=["full", "pipeline", "ladder", "replay"], action="append",
                    help="run only these stages (repeatable)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench: run as root (it mounts a tmpfs)")
    if not BIN.exists():
        raise SystemExit(f"bench: {BIN} missing; run scripts/setup.sh first")
    args.work.mkdir(parents=True, exist_ok=True)
    tmpfs = Path(tempfile.mkdtemp(prefix="tapdeck-bench-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6g", "tmpfs", tmpfs], check=True)
    try:
        quick = args.quick
        res = {
            "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": f"{os.cpu_count()} cores, {os.uname().release}",
            "command": " ".join(sys.argv), "reps": args.reps,
        }
        stages = set(args.only or ["full", "pipeline", "ladder", "replay"])
        if "full" in stages:
            print("bench: disk and 1514-byte frames", file=sys.stderr)
            res["full"] = stage_disk_and_full(args.work, args.reps, 512 if quick else 2048)
        if "pipeline" in stages:
            print("bench: 64-byte pipeline", file=sys.stderr)
            res["pipeline"] = stage_pipeline(args.work, tmpfs, args.reps, 2 if quick else 5, 10e6)
        if "ladder" in stages:
            print("bench: ladder", file=sys.stderr)
            rates = [25e3, 100e3, 400e3] if quick else [25e3, 50e3, 100e3, 200e3, 400e3, 800e3]
            res["ladder"] = stage_ladder(args.work, rates, 2 if quick else 4)
        if "replay" in stages:
            print("bench: replay against tcpdump", file=sys.stderr)
            res["replay"] = stage_replay(args.work, args.reps, 300_000 if quick else 1_500_000)
    finally:
        subprocess.run(["umount", tmpfs], check=False)
        os.rmdir(tmpfs)
    out = ROOT / "bench/results"
    out.mkdir(parents=True, exist_ok=True)
    stem = "recorder-" + res["when"].replace(":", "").replace("-", "")
    (out / f"{stem}.json").write_text(json.dumps(res, indent=2) + "\n")
    (out / f"{stem}.md").write_text(markdown(res))
    print(markdown(res))
    print(f"bench: wrote {out / stem}.{{json,md}}", file=sys.stderr)


if __name__ == "__main__":
    main()
