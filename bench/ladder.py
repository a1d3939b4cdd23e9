#!/usr/bin/env python3
"""Ladder benchmark (issue 20): does the adaptive ladder store at least what raw writing or
any fixed rung stores, and compress as much as the CPU and the disk allow?

For each disk and each offered rate of synthetic half-random frames, runs of each choice:
  ladder   the default ladder (the controller chooses per chunk)
  none     --codec none (plain files: the raw baseline)
  RUNG     --codec RUNG --bench-fixed-codec for each compressing rung of the default ladder:
           every chunk takes that rung, whatever the load (no controller, no raw copies)
Disks: `disk` (the work directory, O_DIRECT), `throttled` (the same with the writer's
benchmark-only limit, --bench-disk-limit, default 400 MB/s: each write takes its bytes at
that rate, and idle time earns no credit), `discard` (--discard).
Then 3-phase bursts on the throttled disk: quiet, 10 s at twice (and three times) the disk's
speed, quiet.

Every run is offered exactly the same packets: the source follows a rate schedule
(--rate-schedule) and stops when it has offered all of them, so stored counts compare
directly (a source slowed down by the compressors delivers late, never fewer). Choices take
turns within each repetition, so a change in the machine's load falls on all of them.

Measured: stored / offered, effective ratio (capture bytes / bytes written), MB/s of capture
data stored, the ladder's bytes per rung and reason. Medians of --reps runs with min..max.
The verdict per point is the issue's target: the ladder's stored fraction at least the best
other choice's minus 0.1 %, 100 % wherever any choice stored 100 %, and an effective ratio of
at least 1.5 wherever the disk is the limit (raw did not store everything on that disk) and
the CPU is not (some fixed rung stored everything on `discard` at that rate). Where both are
limits a higher ratio would cost packets; the verdict says so instead of calling it a miss.
Results go to bench/results/ladder-<UTC time>.{json,md,png}.

With --hog N, every point is measured twice: quiet, and with N busy loops at nice 0 running
beside the recorder (another process taking the CPU: an IDS, a compile). With the hog the
choices include `ladder-nice0` (the ladder with --compressor-nice 0, compressors at normal
priority), and the target is the worst-day one: the ladder stores at least what raw writing
(`none`) stores under the same hog, minus 0.02.

Usage: python3 bench/ladder.py [--quick] [--reps N] [--disks disk,throttled,discard] [--hog N]
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recorder import BIN, ROOT, fmt, spread, tapdeck_record

LADDER = "zstd:3,zstd:1,lz4,raw"
CHOICES = {"ladder": [], "none": ["--codec", "none"]} | {
    r: ["--codec", r, "--bench-fixed-codec"] for r in LADDER.split(",") if r != "raw"}


def source_commit() -> str:
    """The commit the benchmarked tree is at, marked `+changes` when it has uncommitted ones
    (the binary is assumed built from the tree)."""
    def git(*args) -> str:
        r = subprocess.run(["git", "-C", str(ROOT), *args], check=False, capture_output=True, text=True)
        return r.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "?"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


class Hog:
    """`n` busy loops at nice 0 while in the `with` block (none for n = 0), each bounded by
    `timeout` should the benchmark die without killing them."""

    def __init__(self, n: int):
        self.n, self.procs = n, []

    def __enter__(self):
        # A process group each, killed whole: killing `timeout` alone leaves its shell spinning.
        self.procs = [subprocess.Popen(["timeout", "-s", "KILL", "3600", "sh", "-c", "while :; do :; done"],
                                       start_new_session=True) for _ in range(self.n)]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def record_bytes(frame: int) -> int:
    """The pcapng record of a frame: 32 bytes of EPB header and trailer, data padded to 4."""
    return 32 + (frame + 3) // 4 * 4


def one_run(work: Path, frame: int, schedule: str, disk: str, limit: str, extra):
    args = ["--synthetic", str(frame), "--rate-schedule", schedule,
            "--staging", "256MiB", "--stats-interval", "1", *extra]
    if disk == "throttled":
        args += ["--bench-disk-limit", limit]
    elif disk == "discard":
        args += ["--discard"]
    r = tapdeck_record(work / "ladder-store", *args)
    shutil.rmtree(work / "ladder-store", ignore_errors=True)
    t = r["totals"]
    return {
        "seen": t["seen"],
        "stored_fraction": t["stored"] / max(1, t["seen"]),
        "stored": t["stored"],
        "ratio": t["staged_bytes"] / max(1, r["bytes_written"]) if disk != "discard" else None,
        "stored_mb_s": t["staged_bytes"] / max(1e-9, r["elapsed_s"]) / 1e6,
        "ladder": r.get("ladder", {}),
        "cpu_pressure_10s": (r.get("cpu_pressure") or {}).get("some_avg10"),
    }


def measure_point(work, frame, schedule, disk, limit, reps, label, hog=0):
    """Every choice `reps` times, taking turns, beside `hog` busy loops; the medians and
    spreads per choice."""
    choices_here = CHOICES | ({"ladder-nice0": ["--compressor-nice", "0"]} if hog else {})
    runs = {name: [] for name in choices_here}
    for rep in range(reps):
        for name, extra in choices_here.items():
            with Hog(hog):
                r = one_run(work, frame, schedule, disk, limit, extra)
            runs[name].append(r)
            ratio = "" if r["ratio"] is None else f", ratio {r['ratio']:.2f}"
            print(f"bench: {label} rep {rep + 1}/{reps} {name}: stored {r['stored_fraction']:.4f}{ratio}",
                  file=sys.stderr)
    choices = {}
    for name, rs in runs.items():
        assert len({r["seen"] for r in rs}) == 1, f"{label} {name}: offers differ: {[r['seen'] for r in rs]}"
        choices[name] = {
            "offered": rs[0]["seen"],
            "stored_fraction": spread(r["stored_fraction"] for r in rs),
            "stored": spread(r["stored"] for r in rs),
            "stored_mb_s": spread(r["stored_mb_s"] for r in rs),
            "ratio": spread(r["ratio"] for r in rs) if rs[0]["ratio"] is not None else None,
            "ladder": sorted(rs, key=lambda r: r["stored"])[len(rs) // 2]["ladder"],
            "cpu_pressure_10s": spread(r["cpu_pressure_10s"] for r in rs)
            if all(r["cpu_pressure_10s"] is not None for r in rs) else None,
        }
    return choices


def measure(work, frame, rates, seconds, disks, limit, reps, hogs=(0,)):
    rows = []
    for disk in disks:
        for pps in rates:
            for hog in hogs:
                label = f"{disk} {frame} B {pps / 1e6:.2f} Mpps" + (f" hog {hog}" if hog else "")
                choices = measure_point(work, frame, f"{int(pps)}:{seconds}", disk, limit, reps, label, hog)
                rows.append({"disk": disk, "frame": frame, "offered_pps": pps, "hog": hog, "choices": choices})
    return rows


def burst(work, limit: str, reps: int, quiet_s: float, burst_s: float, factor: float = 2.0):
    """Quiet, `burst_s` at `factor` times the throttled disk's speed, quiet again (long enough
    for a raw backlog to drain if the pool held it). At twice the disk, 2:1 data fits the
    disk compressed (every compressing choice stores everything on the 400 MB/s throttle);
    at three times, neither the disk nor one compressor keeps up."""
    if not limit.upper().endswith("MB"):
        raise SystemExit(f"bench: --limit {limit}: give it in MB (e.g. 400MB) for the burst's rate")
    disk_bps = float(limit.upper().removesuffix("MB")) * 1e6
    frame = 1514
    hot = int(factor * disk_bps / record_bytes(frame))
    calm = int(0.05 * disk_bps / record_bytes(frame))
    schedule = f"{calm}:{quiet_s},{hot}:{burst_s},{calm}:{quiet_s}"
    choices = measure_point(work, frame, schedule, "throttled", limit, reps, f"burst {schedule}")
    return {"disk": "throttled", "frame": frame, "schedule": schedule, "offered_pps": hot,
            "burst": True, "choices": choices}


def best_compressing_on_discard(row, rows):
    """The best fixed compressing rung's stored fraction on the discard disk at this point's
    rate and frame size (None if not measured): below 1, the compressors cannot take the
    offered rate even with no disk at all, so the CPU is a limit too."""
    for r in rows:
        if (r["disk"] == "discard" and r["frame"] == row["frame"] and not r.get("burst")
                and not row.get("burst") and r["offered_pps"] == row["offered_pps"]):
            return max(r["choices"][n]["stored_fraction"]["median"] for n in r["choices"]
                       if n not in ("ladder", "none"))
    return None


def verdict(row, rows) -> tuple[bool, str]:
    """The issue's targets at one point. The ratio target (>= 1.5 where the disk is the
    limit) is read as applying where the disk alone is the limit: where the compressors
    cannot take the offered rate either (discard, best fixed rung below 99.9 %), every byte
    compressed beyond what they manage is a packet dropped, and the first target (no packet
    fewer than the best fixed choice) comes first. Such points say so in their verdict."""
    c = row["choices"]
    med = {n: c[n]["stored_fraction"]["median"] for n in c}
    if row.get("hog"):
        ok = med["ladder"] >= med["none"] - 0.02
        text = (f"with {row['hog']} busy loops: ladder stored {med['ladder']:.4f}, none {med['none']:.4f}, "
                f"ladder at nice 0 {med['ladder-nice0']:.4f}")
        return ok, ("ok: " if ok else "MISS: ladder < none − 0.02; ") + text
    best_name = max((n for n in c if n != "ladder"), key=lambda n: med[n])
    ours, best = med["ladder"], med[best_name]
    problems = []
    if ours < best - 0.001:
        problems.append(f"stored {ours:.4f} < {best_name} {best:.4f} − 0.1 %")
    if best >= 1.0 and ours < 1.0:
        problems.append(f"{best_name} stored 100 %, the ladder {ours:.4%}")
    disk_limited = c["none"]["stored_fraction"]["median"] < 1.0 and c["ladder"]["ratio"] is not None
    cpu = best_compressing_on_discard(row, rows)
    traded = ""
    if disk_limited and c["ladder"]["ratio"]["median"] < 1.5:
        if cpu is not None and cpu < 0.999:
            traded = (f"; ratio {c['ladder']['ratio']['median']:.2f} < 1.5, but the CPU limits too "
                      f"(discard: best fixed rung stores {cpu:.4f})")
        else:
            problems.append(f"disk-limited and ratio {c['ladder']['ratio']['median']:.2f} < 1.5")
    text = f"stored {ours:.4f} vs best {best_name} {best:.4f}" + (
        f", ratio {c['ladder']['ratio']['median']:.2f}" if c["ladder"]["ratio"] else "") + traded
    return not problems, ("ok: " + text) if not problems else ("MISS: " + "; ".join(problems))


def markdown(res) -> str:
    m = [f"# Ladder benchmark — {res['when']}", "", f"Machine: {res['machine']}. Command: `{res['command']}`.",
         f"Load average before: {res['loadavg']}, after: {res.get('loadavg_after', '?')}. Repetitions: "
         f"{res['reps']}, choices taking turns; median (min..max). Binary: {res['binary']}, built from commit {res.get('commit', '?')}.", ""]
    oks = [verdict(r, res["rows"])[0] for r in res["rows"]]
    m += [f"**{sum(oks)} of {len(oks)} points meet the targets.**", "",
          "| disk | frame | offered | busy loops | ladder stored | best fixed (stored) | none stored | ladder ratio | "
          "verdict |",
          "|---|---|---|---|---|---|---|---|---|"]
    for row in res["rows"]:
        c = row["choices"]
        best = max((n for n in c if n not in ("ladder", "none", "ladder-nice0")),
                   key=lambda n: c[n]["stored_fraction"]["median"])
        what = "burst " + row["schedule"] if row.get("burst") else f"{row['offered_pps'] / 1e6:.2f} Mpps"
        ratio = fmt(c["ladder"]["ratio"], 2) if c["ladder"]["ratio"] else "-"
        m.append(f"| {row['disk']} | {row['frame']} B | {what} | {row.get('hog', 0)} | "
                 f"{fmt(c['ladder']['stored_fraction'], 4)} | "
                 f"{best} {fmt(c[best]['stored_fraction'], 4)} | {fmt(c['none']['stored_fraction'], 4)} | "
                 f"{ratio} | {verdict(row, res['rows'])[1]} |")
    m.append("")
    for row in res["rows"]:
        what = f"burst {row['schedule']}" if row.get("burst") else f"{row['offered_pps'] / 1e6:.3f} Mpps offered"
        hog = f", {row['hog']} busy loops beside it" if row.get("hog") else ""
        m += [f"## {row['disk']}, {row['frame']}-byte frames, {what}{hog}", "",
              "| choice | offered | stored / offered | stored packets | ratio | stored MB/s | CPU pressure (10 s) | "
              "MB per rung (reasons) |",
              "|---|---|---|---|---|---|---|---|"]
        for name, c in row["choices"].items():
            mix = "; ".join(
                f"{codec} {sum(r.values()) / 1e6:.0f} (" + ", ".join(f"{k} {v / 1e6:.0f}" for k, v in r.items()) + ")"
                for codec, r in c["ladder"].items())
            ratio = fmt(c["ratio"], 2) if c["ratio"] else "-"
            m.append(f"| {name} | {c['offered']} | {fmt(c['stored_fraction'], 4)} | {fmt(c['stored'], 0)} | {ratio} | "
                     f"{fmt(c['stored_mb_s'])} | {fmt(c['cpu_pressure_10s'], 2) if c.get('cpu_pressure_10s') else '-'} | "
                     f"{mix} |")
        m.append("")
    return "\n".join(m) + "\n"


def plot(res, path: Path):
    """Stored fraction and effective ratio against offered rate, one column per disk and
    frame size; error bars are the min..max of the runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["disk"], r["frame"]) for r in res["rows"] if not r.get("burst") and not r.get("hog")})
    if not panels:
        return
    fig, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels), 6.5), squeeze=False)
    for col, (disk, frame) in enumerate(panels):
        rows = sorted((r for r in res["rows"]
                       if (r["disk"], r["frame"]) == (disk, frame) and not r.get("burst") and not r.get("hog")),
                      key=lambda r: r["offered_pps"])
        x = [r["offered_pps"] / 1e6 for r in rows]
        for name in CHOICES:
            style = dict(lw=2.5, color="black") if name == "ladder" else dict(lw=1, alpha=0.8)
            for ax, key in ((axes[0][col], "stored_fraction"), (axes[1][col], "ratio")):
                vals = [r["choices"][name][key] for r in rows]
                if any(v is None for v in vals):
                    continue
                med = [v["median"] for v in vals]
                err = [[m - v["min"] for m, v in zip(med, vals)], [v["max"] - m for m, v in zip(med, vals)]]
                ax.errorbar(x, med, yerr=err, label=name, marker="o", ms=3, capsize=2, **style)
        axes[0][col].set_title(f"{disk}, {frame} B frames")
        axes[0][col].set_ylabel("stored / offered")
        axes[1][col].set_ylabel("effective ratio (offered / written)")
        axes[1][col].set_xlabel("offered Mpps")
        for ax in (axes[0][col], axes[1][col]):
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"tapdeck ladder vs fixed choices ({res['when']}, median of {res['reps']}, bars min..max)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="few rates, short runs, one frame size")
    ap.add_argument("--work", type=Path, default=ROOT / "bench/work", help="directory on the disk under test")
    ap.add_argument("--disks", default="disk,throttled,discard")
    ap.add_argument("--limit", default="400MB", help="--bench-disk-limit of the throttled disk (in MB)")
    ap.add_argument("--seconds", type=float, default=6.0, help="seconds of traffic per run")
    ap.add_argument("--no-burst", action="store_true")
    ap.add_argument("--burst-factors", default="2,3", help="bursts at these multiples of the throttled disk")
    ap.add_argument("--no-small", action="store_true", help="skip the 64-byte frames")
    ap.add_argument("--rates", default="0.1,0.3,0.5,0.8,1.1,1.5",
                    help="Mpps of 1514-byte frames, comma-separated")
    ap.add_argument("--small-rates", default="1,2.5", help="Mpps of 64-byte frames")
    ap.add_argument("--hog", type=int, default=0,
                    help="also measure every point beside N busy loops at nice 0 (and the ladder at nice 0)")
    args = ap.parse_args()
    if not BIN.exists():
        raise SystemExit(f"bench: {BIN} missing; build it first")
    args.work.mkdir(parents=True, exist_ok=True)
    disks = args.disks.split(",")
    res = {
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{os.cpu_count()} cores, {os.uname().release}",
        "loadavg": Path("/proc/loadavg").read_text().split()[0],
        "binary": str(BIN), "commit": source_commit(), "command": " ".join(sys.argv),
        "reps": args.reps, "rows": [],
    }
    hogs = (0, args.hog) if args.hog else (0,)
    if args.quick:
        res["rows"] += measure(args.work, 1514, [0.2e6, 0.8e6], 2, disks, args.limit, args.reps, hogs)
        if not args.no_burst:
            res["rows"].append(burst(args.work, args.limit, args.reps, 1, 2))
    else:
        mpps = lambda spec: [float(r) * 1e6 for r in spec.split(",")]  # noqa: E731
        res["rows"] += measure(args.work, 1514, mpps(args.rates), args.seconds, disks, args.limit, args.reps, hogs)
        if not args.no_small:
            res["rows"] += measure(args.work, 64, mpps(args.small_rates), args.seconds, disks, args.limit,
                                   args.reps, hogs)
        if not args.no_burst:
            for factor in map(float, args.burst_factors.split(",")):
                res["rows"].append(burst(args.work, args.limit, args.reps, 5, 10, factor))
    res["loadavg_after"] = Path("/proc/loadavg").read_text().split()[0]
    out = ROOT / "bench/results"
    out.mkdir(parents=True, exist_ok=True)
    stem = "ladder-" + res["when"].replace(":", "").replace("-", "")
    (out / f"{stem}.json").write_text(json.dumps(res, indent=2) + "\n")
    (out / f"{stem}.md").write_text(markdown(res))
    plot(res, out / f"{stem}.png")
    print(markdown(res))


if __name__ == "__main__":
    main()
