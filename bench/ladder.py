#!/usr/bin/env python3
"""Ladder benchmark (issue 20): does the adaptive ladder store at least what raw writing or
any fixed rung stores, and compress as much as the CPU and the disk allow?

For each disk and each offered rate of synthetic half-random frames, one run per choice:
  ladder   the default ladder (the controller chooses per chunk)
  none     --codec none (plain files: the raw baseline)
  RUNG     --codec RUNG for each rung of the default ladder (caveat: a one-rung ladder still
           has a raw rung the controller may use, so these are not strictly fixed)
Disks: `disk` (the work directory, O_DIRECT), `throttled` (the same with the writer's
benchmark-only token bucket, --bench-disk-limit, default 400 MB/s), `discard` (--discard).
Measured: stored / seen, stored packets, effective ratio (capture bytes / bytes written),
MB/s of capture data stored, the ladder's bytes per rung and reason. Medians of --reps runs
with min..max. Results go to bench/results/ladder-<UTC time>.{json,md}.

Not yet here (see bench/README.md): the 3-phase burst (idle, 10 s at 2x the disk, idle)
needs a source whose rate changes during a run; a plot.

Usage: python3 bench/ladder.py [--quick] [--reps N] [--disks disk,throttled,discard]
"""

import argparse
import datetime
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recorder import BIN, ROOT, fmt, spread, tapdeck_record

LADDER = "zstd:3,zstd:1,lz4,raw"
CHOICES = {"ladder": [], "none": ["--codec", "none"]} | {
    r: ["--codec", r] for r in LADDER.split(",") if r != "raw"}


def one_run(work: Path, frame: int, pps: float, seconds: float, disk: str, limit: str, extra):
    args = ["--synthetic", str(frame), "--rate", str(int(pps)), "--duration", str(seconds),
            "--staging", "256MiB", "--stats-interval", "1", *extra]
    if disk == "throttled":
        args += ["--bench-disk-limit", limit]
    elif disk == "discard":
        args += ["--discard"]
    r = tapdeck_record(work / "ladder-store", *args)
    shutil.rmtree(work / "ladder-store", ignore_errors=True)
    t = r["totals"]
    return {
        "stored_fraction": t["stored"] / max(1, t["seen"]),
        "stored": t["stored"],
        "ratio": t["staged_bytes"] / max(1, r["bytes_written"]) if disk != "discard" else None,
        "stored_mb_s": t["staged_bytes"] / max(1e-9, r["elapsed_s"]) / 1e6,
        "ladder": r.get("ladder", {}),
    }


def measure(work, frame, rates, seconds, disks, limit, reps):
    rows = []
    for disk in disks:
        for pps in rates:
            row = {"disk": disk, "frame": frame, "offered_pps": pps, "choices": {}}
            for name, extra in CHOICES.items():
                runs = [one_run(work, frame, pps, seconds, disk, limit, extra) for _ in range(reps)]
                row["choices"][name] = {
                    "stored_fraction": spread(r["stored_fraction"] for r in runs),
                    "stored": spread(r["stored"] for r in runs),
                    "stored_mb_s": spread(r["stored_mb_s"] for r in runs),
                    "ratio": spread(r["ratio"] for r in runs) if runs[0]["ratio"] is not None else None,
                    "ladder": runs[len(runs) // 2]["ladder"],
                }
                print(f"bench: {disk} {frame} B {pps / 1e6:.2f} Mpps {name}: "
                      f"{fmt(row['choices'][name]['stored_fraction'], 4)}", file=sys.stderr)
            rows.append(row)
    return rows


def verdict(row) -> str:
    """The issue's target: the ladder stores no fewer packets than the best other choice."""
    c = row["choices"]
    best_name = max((n for n in c if n != "ladder"), key=lambda n: c[n]["stored"]["median"])
    best = c[best_name]["stored"]["median"]
    ours = c["ladder"]["stored"]["median"]
    ok = ours >= best * 0.999
    return f"{'ok' if ok else 'SHORT'} ({ours / max(1, best):.4f} of {best_name})"


def markdown(res) -> str:
    m = [f"# Ladder benchmark — {res['when']}", "", f"Machine: {res['machine']}. Command: `{res['command']}`.",
         f"Load average before: {res['loadavg']}. Repetitions: {res['reps']}; median (min..max).", ""]
    for row in res["rows"]:
        head = (f"## {row['disk']}, {row['frame']}-byte frames, {row['offered_pps'] / 1e6:.3f} Mpps offered — "
                f"ladder vs best: {verdict(row)}")
        m += [head, "",
              "| choice | stored / seen | stored packets | ratio | stored MB/s | ladder: MB per rung (reasons) |",
              "|---|---|---|---|---|---|"]
        for name, c in row["choices"].items():
            mix = "; ".join(
                f"{codec} {sum(r.values()) / 1e6:.0f} (" + ", ".join(f"{k} {v / 1e6:.0f}" for k, v in r.items()) + ")"
                for codec, r in c["ladder"].items())
            ratio = fmt(c["ratio"], 2) if c["ratio"] else "-"
            m.append(f"| {name} | {fmt(c['stored_fraction'], 4)} | {fmt(c['stored'], 0)} | {ratio} | "
                     f"{fmt(c['stored_mb_s'])} | {mix} |")
        m.append("")
    return "\n".join(m) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="few rates, short runs, one frame size")
    ap.add_argument("--work", type=Path, default=ROOT / "bench/work", help="directory on the disk under test")
    ap.add_argument("--disks", default="disk,throttled,discard")
    ap.add_argument("--limit", default="400MB", help="--bench-disk-limit of the throttled disk")
    args = ap.parse_args()
    if not BIN.exists():
        raise SystemExit(f"bench: {BIN} missing; build it first")
    args.work.mkdir(parents=True, exist_ok=True)
    disks = args.disks.split(",")
    loadavg = Path("/proc/loadavg").read_text().split()[0]
    res = {
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{os.cpu_count()} cores, {os.uname().release}", "loadavg": loadavg,
        "command": " ".join(sys.argv), "reps": args.reps, "rows": [],
    }
    if args.quick:
        res["rows"] += measure(args.work, 1514, [0.1e6, 0.4e6, 0.8e6], 3, disks, args.limit, args.reps)
    else:
        rates = [0.1e6, 0.2e6, 0.4e6, 0.6e6, 0.8e6, 1.0e6, 1.2e6, 1.5e6]
        res["rows"] += measure(args.work, 1514, rates, 10, disks, args.limit, args.reps)
        res["rows"] += measure(args.work, 64, [1e6, 2e6, 4e6], 10, disks, args.limit, args.reps)
    out = ROOT / "bench/results"
    out.mkdir(parents=True, exist_ok=True)
    stem = "ladder-" + res["when"].replace(":", "").replace("-", "")
    (out / f"{stem}.json").write_text(json.dumps(res, indent=2) + "\n")
    (out / f"{stem}.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
