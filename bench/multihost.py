#!/usr/bin/env python3
"""Multi-host benchmark (issue 7): header forwarding to a collector, KDDI-style, and a traffic
split over monitors, T-Labs-style, against tcpdump in the same run.

    ns gen (tcpreplay)  gen0 ═ swin  ns sw: capture host / "switch" ── up0 ═ dn0  ns col (collect)
                                           (198.18.50.1)  forwarding link  (198.18.50.2)
                        nftables netdev ingress on swin: fwd to symhash mod N ── mon0 ═ cap0  ns m0
                                                                             ── mon1 ═ cap1  ns m1

* KDDI table: frames of 64, 128, 384 and 1518 bytes (as KDDI counts them, FCS included: 60 ..
  1514 bytes on the veth) at trafgen's top speed, captured on swin (no split loaded) by
  `tapdeck record --snaplen 54`, by `tapdeck export --snaplen 54` to a `tapdeck collect` in ns
  col, and by `tcpdump -s 54 -w`. Collection ratio = headers stored (read back) / frames offered.
* T-Labs sweep: the realistic size mix at rising `tcpreplay --mbps` rates up to top speed, the
  split loaded with 1 or 2 monitors, `tapdeck record` or `tcpdump` in each monitor namespace,
  whole frames, with and without a BPF filter of about 50 instructions that passes every frame.
  Capture rate = packets stored by all monitors / frames offered.
* CPU: each process's user+system seconds (/proc/PID/stat when all were ready, wait4 at exit),
  and each core's softirq time from /proc/stat over the generator's window (system-wide).

Output: bench/results/multihost-<UTC time>.{json,md,png}. Needs root. Usage:
    python3 bench/multihost.py [--quick] [--work DIR] [--results DIR] [--reps 5] [--kddi-reps 3]
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from itertools import product
from pathlib import Path
from types import SimpleNamespace

import capture  # (puts tests/ on sys.path: netlab)
from netlab import Lab, in_ns, sh  # noqa: E402

ROOT, BIN = capture.ROOT, capture.BIN
GEN_CPU, CAP_CPU, COL_CPU = "0", "1", "0"
KDDI_SIZES = (64, 128, 384, 1518)
FCS = 4  # KDDI's frame sizes count the Ethernet FCS, which a veth does not carry
SNAP = 54
PORT = 4739
EXPORTER_ADDR, COLLECTOR_ADDR = "198.18.50.1", "198.18.50.2"
STAGING = "256MiB"  # explicit: bounds memory and the recorder's start-up work
KDDI_TOOLS = ("tapdeck record", "tapdeck export", "tapdeck export --no-gso", "tcpdump")
SWEEP_TOOLS = ("tapdeck record", "tcpdump")
GENERATOR_COUNT = {
    "trafgen": "trafgen's packets outgoing",
    "tcpreplay": "tcpreplay's successful packets",
}
SWEEP_SETUPS = ((1, False), (1, True), (2, False))  # (monitors, BPF filter)
SWEEP_FRACTIONS = (
    0.1,
    0.3,
    0.6,
)  # of the calibrated top rate; top speed is the last step
# 50 BPF instructions (tcpdump -d), nearly all of them walked by each of our frames: they are
# UDP from 198.18.0.0/15 on none of the excluded ports, so the filter passes everything. (No
# `vlan`: it shifts the offsets of what follows, and then nothing passes offline.)
FILTER = (
    "not (tcp or icmp or arp or ip6 or sctp or igmp) and ip and udp and not (src net "
    "10.0.0.0/8 or dst net 10.0.0.0/8 or src net 172.16.0.0/12 or dst net 172.16.0.0/12 or src "
    "net 192.168.0.0/16 or dst net 192.168.0.0/16 or src net 224.0.0.0/4 or dst net 224.0.0.0/4) "
    "and (src net 198.18.0.0/15) and not (port 53 or port 123 or port 161 or port 514)"
)


def log(*a):
    print("multihost:", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The testbed


class Testbed:
    def __init__(self, fwd_mtu: int):
        self.names = {
            r: f"tdmh{os.getpid()}-{r}" for r in ("gen", "sw", "m0", "m1", "col")
        }
        self.fwd_mtu = fwd_mtu
        self.lab = Lab()
        self.split_loaded = False
        # What capture.tcpreplay needs: the generator's namespace and device.
        self.generator = SimpleNamespace(ns=self.names["gen"], gen="gen0")

    def up(self):
        n = self.names
        for ns in n.values():
            self.lab.add_ns(ns)
        self.lab.pair(n["gen"], "gen0", n["sw"], "swin")
        for i in (0, 1):
            self.lab.pair(n["sw"], f"mon{i}", n[f"m{i}"], f"cap{i}")
        self.lab.pair(n["sw"], "up0", n["col"], "dn0", mtu=self.fwd_mtu)
        self.lab.address(n["sw"], "up0", f"{EXPORTER_ADDR}/24")
        self.lab.address(n["col"], "dn0", f"{COLLECTOR_ADDR}/24")
        # The collector is another host: its receive processing (IP, UDP, socket queueing)
        # runs on its own core. Without RPS, a veth delivers in the sender's softirq, and the
        # collector's receive work is billed to the exporter's process.
        mask = format(1 << int(COL_CPU), "x")
        sh(in_ns(n["col"]) + ["sh", "-c", f"echo {mask} > /sys/class/net/dn0/queues/rx-0/rps_cpus"])
        return self

    def split(self, monitors: int):
        """Loads the symmetric-hash split over `monitors` links (0: none, frames stop at swin)."""
        if self.split_loaded:
            sh(in_ns(self.names["sw"]) + ["nft", "delete", "table", "netdev", "split"])
            self.split_loaded = False
        if monitors:
            ports = ", ".join(f'{i} : "mon{i}"' for i in range(monitors))
            self.lab.nft(
                self.names["sw"],
                f"""table netdev split {{
    chain ingress {{
        type filter hook ingress device "swin" priority 0; policy accept;
        fwd to symhash mod {monitors} map {{ {ports} }}
    }}
}}
""",
            )
            self.split_loaded = True

    def rx(self, points):
        """Packets and drops received on the (role, device) points, summed."""
        stats = [self.lab.rx(self.names[role], dev) for role, dev in points]
        return {k: sum(s[k] for s in stats) for k in ("packets", "dropped")}

    def close(self):
        self.lab.close()


# ---------------------------------------------------------------------------------------------
# The processes under test


@dataclass
class Proc:
    name: str  # label in the report
    kind: str  # record, export, collect, tcpdump
    role: str  # capture or collector
    ns: str
    cpu: str
    cmd: list
    output: Path | None = None  # what it stored, counted by reading it back
    marker: str | None = None  # text in its log once it captures
    ready_file: Path | None = None  # or a file that appears then


def record(ns, iface, out: Path, snaplen=None, bpf=None, name="tapdeck record"):
    stats = out.with_suffix(".stats")
    cmd = [BIN, "record", "-i", iface, "--store", out, "--stats", stats]
    cmd += f"--codec none --staging {STAGING} --stats-interval 1 -q --log warn".split()
    cmd += ["--snaplen", snaplen] if snaplen else []
    cmd += ["--filter", bpf] if bpf else []
    return Proc(name, "record", "capture", ns, CAP_CPU, cmd, out, ready_file=stats)


def tcpdump(ns, iface, out: Path, snaplen=None, bpf=None, name="tcpdump"):
    f = out.with_suffix(".pcap")
    cmd = ["tcpdump", "-i", iface, "-n", "-B", capture.BUFFER_MIB * 1024, "-Z", "root"]
    cmd += (["-s", snaplen] if snaplen else []) + ["-w", f] + ([bpf] if bpf else [])
    return Proc(name, "tcpdump", "capture", ns, CAP_CPU, cmd, f, marker="listening on")


def export(ns, iface, stats: Path, gso=True):
    to = f"{COLLECTOR_ADDR}:{PORT}"
    cmd = [BIN, "export", "-i", iface, "--to", to, "--stats", stats]
    cmd += f"--snaplen {SNAP} --stats-interval 1 --log warn".split()
    # --no-gso: each datagram down the stack on its own, to show what UDP GSO saves.
    cmd += [] if gso else ["--no-gso"]
    name = "tapdeck export"
    return Proc(name, "export", "capture", ns, CAP_CPU, cmd, ready_file=stats)


def collect(ns, store: Path):
    cmd = [BIN, "collect", "--listen", f"{COLLECTOR_ADDR}:{PORT}", "--store", store]
    cmd += f"--allow {EXPORTER_ADDR} --codec none --log warn".split()
    cmd += ["--staging", STAGING]
    # The sockets are bound before the manifest is written.
    ready = store / "manifest.json"
    name = "tapdeck collect"
    return Proc(name, "collect", "collector", ns, COL_CPU, cmd, store, ready_file=ready)


def details(pr: Proc, text: str) -> dict:
    """What the tool itself says it saw and dropped."""
    if pr.kind == "record":
        d, _, _ = capture.parse_drops("tapdeck", text, pr.output.with_suffix(".stats"))
        return d
    if pr.kind == "tcpdump":
        return capture.parse_drops("tcpdump", text, None)[0]
    if pr.kind == "export":
        lines = pr.ready_file.read_text().split("\n") if pr.ready_file.exists() else []
        final = json.loads(next((x for x in reversed(lines) if x.strip()), "{}"))
        keep = ("observed", "kernel_dropped", "sent", "not_sent", "final")
        d = {k: final.get(k) for k in keep}
        d["collectors"] = final.get("collectors")
        return d
    ledger = pr.output / "collector.json"
    if not ledger.exists():
        return {"error": "no collector.json"}
    led = json.loads(ledger.read_text())
    keys = (
        "records",
        "lost",
        "reordered",
        "duplicates",
        "no_template",
        "malformed",
        "packets",
    )
    return {k: sum(s.get(k, 0) for s in led["streams"]) for k in keys}


# ---------------------------------------------------------------------------------------------
# One measured run


def cpu_times():
    """Per core: /proc/stat's jiffies (user nice system idle iowait irq softirq ...) in seconds."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f[0].startswith("cpu") and f[0] != "cpu":
            out[f[0]] = [int(x) / hz for x in f[1:8]]
    return out


def net_softirqs():
    """Per core: NET_RX and NET_TX softirq counts from /proc/softirqs."""
    lines = Path("/proc/softirqs").read_text().splitlines()
    cpus = [c.lower() for c in lines[0].split()]
    out = {c: {} for c in cpus}
    for line in lines[1:]:
        f = line.split()
        if f[0] in ("NET_RX:", "NET_TX:"):
            for c, v in zip(cpus, f[1:]):
                out[c][f[0].rstrip(":").lower()] = int(v)
    return out


def kernel_delta(t0, t1, n0, n1):
    fields = ("user", "nice", "system", "idle", "iowait", "irq", "softirq")
    return {
        c: {
            **{k: round(b - a, 3) for k, a, b in zip(fields, t0[c], t1[c])},
            **{k: n1[c][k] - n0[c][k] for k in n1.get(c, {})},
        }
        for c in t1
    }


def measure(procs, generate, rx_points, tb: Testbed, logs: Path) -> dict:
    """Starts `procs` in order, each ready before the next; runs the generator; stops them in
    reverse order (the exporter's last batches reach the collector before it stops)."""
    running = []
    try:
        for pr in procs:
            log_path = logs / f"{pr.name.replace(' ', '-')}.log"
            p = capture.start(in_ns(pr.ns) + pr.cmd, log_path, pr.cpu)
            running.append((pr, p, log_path))
            capture.wait_ready(p, log_path, pr.marker, pr.ready_file)
        cpu_ready = [capture.proc_cpu(p.pid) for _, p, _ in running]
        rx0, t0, n0 = tb.rx(rx_points), cpu_times(), net_softirqs()
        start = time.monotonic()
        gen = generate()
        time.sleep(0.5)  # the last frames reach the rings
        window = time.monotonic() - start
        rx1, t1, n1 = tb.rx(rx_points), cpu_times(), net_softirqs()
        cpu_window = [capture.proc_cpu(p.pid) for _, p, _ in running]
    finally:
        exits = {}
        for pr, p, _ in reversed(running):
            exits[pr.name] = capture.stop(p)
            time.sleep(0.3)
    processes = {}
    for (pr, _, log_path), c0, c1 in zip(running, cpu_ready, cpu_window):
        rc, cpu_total, exit_s = exits[pr.name]
        processes[pr.name] = {
            "kind": pr.kind,
            "role": pr.role,
            "cpu": pr.cpu,
            "namespace": pr.ns,
            "returncode": rc,
            "cpu_s": cpu_total - c0,
            "cpu_window_s": c1 - c0,
            "cpu_total_s": cpu_total,
            "exit_s": exit_s,
            "stored": capture.count_packets(pr.output) if pr.output else None,
            "details": details(pr, log_path.read_text(errors="replace")),
            "command": " ".join(map(str, pr.cmd)),
        }
        if rc not in (0, 130, -2):
            log(
                f"warning: {pr.name} exited {rc}: {log_path.read_text(errors='replace')[-500:]}"
            )
    return figures(
        gen,
        window,
        rx1["packets"] - rx0["packets"],
        rx1["dropped"] - rx0["dropped"],
        processes,
        kernel_delta(t0, t1, n0, n1),
    )


def figures(gen, window, received, rx_dropped, processes, kernel) -> dict:
    """The raw figures of one run and what the report derives from them."""
    stored = sum(p["stored"] or 0 for p in processes.values())

    def role_cpu(role, key):
        return sum(p[key] for p in processes.values() if p["role"] == role)

    r = {
        "offered": gen["offered"],
        "offered_bytes": gen["bytes"],
        "gen_seconds": gen["seconds"],
        "generator": gen,
        "window_s": window,
        "received": received,
        "rx_dropped": rx_dropped,
        "stored": stored,
        "processes": processes,
        "kernel": kernel,
    }
    r["offered_pps"] = gen["offered"] / gen["seconds"]
    r["offered_mbps"] = gen["bytes"] * 8 / gen["seconds"] / 1e6
    r["ratio"] = stored / gen["offered"] if gen["offered"] else None
    for role in ("capture", "collector"):
        cpu_s = role_cpu(role, "cpu_s")
        r[f"{role}_cpu_s"] = cpu_s
        r[f"{role}_cpu_pct"] = 100 * role_cpu(role, "cpu_window_s") / window
        r[f"{role}_cpu_s_per_mpkt"] = cpu_s / (stored / 1e6) if stored else None
    for c, k in kernel.items():
        r[f"softirq_pct_{c}"] = 100 * k["softirq"] / window
    return r


def clean(path: Path):
    for p in path.iterdir():
        if p.suffix != ".log":
            shutil.rmtree(p) if p.is_dir() else p.unlink()


# ---------------------------------------------------------------------------------------------
# The two experiments


def kddi_procs(tool, tb: Testbed, out: Path):
    sw = tb.names["sw"]
    if tool == "tapdeck record":
        return [record(sw, "swin", out / "store", snaplen=SNAP)]
    if tool == "tcpdump":
        return [tcpdump(sw, "swin", out / "tcpdump", snaplen=SNAP)]
    return [
        collect(tb.names["col"], out / "collected"),
        export(sw, "swin", out / "export.stats", gso=tool == "tapdeck export"),
    ]


def kddi_traffic(args, where: Path) -> dict:
    """Per frame size: a trafgen config or a pcap for tcpreplay (capture.generate tells them apart)."""
    out = {}
    for size in args.sizes:
        if args.kddi_generator == "trafgen":
            out[size] = where / f"{size}.cfg"
            out[size].write_text(capture.trafgen_config(size - FCS))
        else:
            out[size] = where / f"{size}.pcap"
            capture.write_pcap(out[size], str(size - FCS), args.packets)
    return out


def kddi(tb: Testbed, traffic: dict, args, work: Path, res: dict):
    tb.split(0)
    for rep, size, tool in product(
        range(1, args.kddi_reps + 1), args.sizes, KDDI_TOOLS
    ):
        row = {
            "experiment": "kddi",
            "tool": tool,
            "frame_size": size,
            "veth_frame": size - FCS,
        }
        log(
            f"KDDI rep {rep}/{args.kddi_reps}: {size} B, {tool}, {args.kddi_seconds:.0f} s"
        )
        out = run_dir(work, row, rep)
        generate = partial(
            capture.generate, tb.generator, traffic[size], args.kddi_seconds
        )
        run = try_measure(
            res, kddi_procs(tool, tb, out), generate, [("sw", "swin")], tb, out
        )
        clean(out)
        keep(res, row, rep, run)


def sweep_procs(tool, monitors, bpf, tb: Testbed, out: Path):
    make = record if tool == "tapdeck record" else tcpdump
    return [
        make(
            tb.names[f"m{i}"],
            f"cap{i}",
            out / f"m{i}",
            bpf=FILTER if bpf else None,
            name=f"{tool} m{i}",
        )
        for i in range(monitors)
    ]


def sweep(tb: Testbed, mix: Path, steps, args, work: Path, res: dict):
    reps = range(1, args.reps + 1)
    for rep, step, (monitors, bpf), tool in product(
        reps, steps, SWEEP_SETUPS, SWEEP_TOOLS
    ):
        row = {
            "experiment": "sweep",
            "tool": tool,
            "monitors": monitors,
            "filter": bpf,
            "step_mbps": step,
        }
        log(
            f"sweep rep {rep}/{args.reps}: {step or 'top'} Mbps, {monitors} monitor(s), "
            f"{'filter' if bpf else 'no filter'}, {tool}"
        )
        tb.split(monitors)
        out = run_dir(work, row, rep)
        speed = [f"--mbps={step}"] if step else ["--topspeed"]
        generate = partial(
            capture.tcpreplay, tb.generator, mix, args.sweep_seconds, speed
        )
        points = [(f"m{i}", f"cap{i}") for i in range(monitors)]
        procs = sweep_procs(tool, monitors, bpf, tb, out)
        run = try_measure(res, procs, generate, points, tb, out)
        if (
            run
            and monitors == 2
            and tool == "tapdeck record"
            and "merge_check" not in res
        ):
            res["merge_check"] = merge_check(out, run)
        clean(out)
        keep(res, row, rep, run)


def run_dir(work: Path, row: dict, rep: int) -> Path:
    out = work / "-".join(str(v).replace(" ", "-") for v in [*row.values(), rep])
    out.mkdir(parents=True)
    return out


def keep(res, row, rep, run):
    if run:
        res["rows"].append({**row, "rep": rep, **run})
        brief(run)


def merge_check(out: Path, run) -> dict:
    """Once: `tapdeck merge` of the two monitor stores holds what their stores held."""
    p = sh(
        [
            BIN,
            "merge",
            out / "m0",
            out / "m1",
            "--out",
            out / "merged",
            "--json",
            "--log",
            "warn",
        ],
        check=False,
    )
    if p.returncode != 0:
        return {"error": p.stderr.strip()[-500:]}
    merged = capture.count_packets(out / "merged")
    return {
        "merged": merged,
        "sum_of_stores": run["stored"],
        "equal": merged == run["stored"],
    }


# trafgen's TX ring flush can meet a full socket send buffer (it cannot raise wmem_max from
# inside a network namespace) and then gives up: seen once in a CI run of the quick benchmark.
TRANSIENT = "Flushing TX_RING failed: Resource temporarily unavailable"


def try_measure(res, procs, generate, rx_points, tb, out: Path):
    """One failed run is recorded and skipped, not fatal to the benchmark. A run whose
    generator gave up on a transient error is run once more from scratch (its outputs
    removed, the processes started again), and the retry is recorded."""
    for attempt in (1, 2):
        try:
            return measure(procs, generate, rx_points, tb, out)
        except (RuntimeError, OSError, ValueError) as e:
            if attempt == 1 and TRANSIENT in str(e):
                log(f"  generator gave up ({TRANSIENT}); running again")
                res.setdefault("retried", []).append(str(e)[-500:])
                clean(out)
                continue
            log(f"  run failed: {e}")
            res["failed"].append(str(e)[-2000:])
            return None


def brief(run):
    log(
        f"  offered {run['offered']} ({run['offered_mbps']:.0f} Mbit/s) received {run['received']} "
        f"stored {run['stored']} ({100 * (run['ratio'] or 0):.1f} %), capture CPU "
        f"{run['capture_cpu_pct']:.0f} %, collector CPU {run['collector_cpu_pct']:.0f} %"
    )


def calibrate(tb: Testbed, mix: Path, seconds: float) -> dict:
    """tcpreplay's top speed with the mix through a one-monitor split, nothing capturing."""
    tb.split(1)
    return capture.tcpreplay(tb.generator, mix, seconds)


def filter_length() -> int:
    out = sh(["tcpdump", "-d", FILTER]).stdout
    return sum(1 for line in out.splitlines() if line.startswith("("))


def filter_passes(pcap: Path) -> dict:
    """How many frames of the traffic file the filter passes (it should pass them all)."""
    total = capture.count_packets(pcap)
    f = pcap.with_suffix(".filtered.pcap")
    sh(["tcpdump", "-r", pcap, "-w", f, FILTER])
    passed = capture.count_packets(f)
    f.unlink()
    return {"frames": total, "passed": passed}


# ---------------------------------------------------------------------------------------------
# Report

METRICS = (
    "offered",
    "offered_pps",
    "offered_mbps",
    "received",
    "stored",
    "ratio",
    "capture_cpu_pct",
    "capture_cpu_s_per_mpkt",
    "collector_cpu_pct",
    "collector_cpu_s_per_mpkt",
    "softirq_pct_cpu0",
    "softirq_pct_cpu1",
)
KDDI_KEYS = ("frame_size", "tool")
SWEEP_KEYS = ("monitors", "filter", "step_mbps", "tool")


def summarize(rows, keys):
    """Rows grouped by `keys`: every metric's median (min..max), and the ratios against the
    tcpdump run of the same repetition and point."""
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)

    def point(r):  # the repetition and point, whatever the tool
        return (r["rep"],) + tuple(r[k] for k in keys if k != "tool")

    peers = {point(r): r for r in rows if r["tool"] == "tcpdump"}
    out = []
    for key, rs in groups.items():
        s = {**dict(zip(keys, key)), "runs": len(rs)}
        s.update({m: capture.spread(r.get(m) for r in rs) for m in METRICS})
        pairs = [(r, peers.get(point(r))) for r in rs]
        for name, m in (
            ("ratio_vs_tcpdump", "ratio"),
            ("cpu_per_mpkt_vs_tcpdump", "capture_cpu_s_per_mpkt"),
        ):
            s[name] = capture.spread(
                r[m] / t[m] for r, t in pairs if t and t[m] and r[m] is not None
            )
        out.append(s)
    return out


def f(s, digits=1, scale=1.0):
    return capture.fmt(s, digits, scale)


def kddi_table(summary):
    m = [
        (
            "| frame (KDDI / veth) | tool | offered | offered Mpps | received | stored | collection ratio | "
            "ratio / tcpdump's | capture CPU % of a core | capture CPU s per Mpkt stored | CPU / tcpdump's | "
            "collector CPU % | softirq % CPU 0 | softirq % CPU 1 |"
        ),
        "|" + "---|" * 14,
    ]
    for s in summary:
        m.append(
            f"| {s['frame_size']} / {s['frame_size'] - FCS} B | {s['tool']} | {f(s['offered'], 0)} | "
            f"{f(s['offered_pps'], 3, 1e-6)} | {f(s['received'], 0)} | {f(s['stored'], 0)} | "
            f"{f(s['ratio'], 1, 100)} % | {f(s['ratio_vs_tcpdump'], 2)} | {f(s['capture_cpu_pct'], 0)} | "
            f"{f(s['capture_cpu_s_per_mpkt'], 2)} | {f(s['cpu_per_mpkt_vs_tcpdump'], 2)} | "
            f"{f(s['collector_cpu_pct'], 0)} | {f(s['softirq_pct_cpu0'], 0)} | {f(s['softirq_pct_cpu1'], 0)} |"
        )
    return m


def sweep_table(summary):
    m = [
        (
            "| monitors | filter | tool | step | offered Mbit/s | offered | stored | capture rate | "
            "rate / tcpdump's | capture CPU % of a core (all monitors) | CPU s per Mpkt stored | "
            "CPU / tcpdump's | softirq % CPU 0 | softirq % CPU 1 |"
        ),
        "|" + "---|" * 14,
    ]
    for s in summary:
        m.append(
            f"| {s['monitors']} | {'yes' if s['filter'] else 'no'} | {s['tool']} | "
            f"{s['step_mbps'] or 'top speed'} | {f(s['offered_mbps'], 0)} | {f(s['offered'], 0)} | "
            f"{f(s['stored'], 0)} | {f(s['ratio'], 1, 100)} % | {f(s['ratio_vs_tcpdump'], 2)} | "
            f"{f(s['capture_cpu_pct'], 0)} | {f(s['capture_cpu_s_per_mpkt'], 2)} | "
            f"{f(s['cpu_per_mpkt_vs_tcpdump'], 2)} | {f(s['softirq_pct_cpu0'], 0)} | "
            f"{f(s['softirq_pct_cpu1'], 0)} |"
        )
    return m


def kddi_target(summary) -> str:
    """Issue 7's target at 64-byte frames, judged on medians of this run."""
    at = {s["tool"]: s for s in summary if s["frame_size"] == 64}
    e, t = at.get("tapdeck export"), at.get("tcpdump")
    if not (
        e
        and t
        and e["ratio"]
        and t["ratio"]
        and e["capture_cpu_s_per_mpkt"]
        and t["capture_cpu_s_per_mpkt"]
    ):
        return "Target at 64-byte frames: not measured in this run."
    more = e["ratio"]["median"] > t["ratio"]["median"]
    less = e["capture_cpu_s_per_mpkt"]["median"] < t["capture_cpu_s_per_mpkt"]["median"]
    return (
        f"Target at 64-byte frames (export + collector stores a larger fraction than tcpdump, with less "
        f"capture-side CPU per Mpkt): collection ratio {100 * e['ratio']['median']:.1f} % vs "
        f"{100 * t['ratio']['median']:.1f} % ({'met' if more else 'not met'}), capture CPU "
        f"{e['capture_cpu_s_per_mpkt']['median']:.2f} vs {t['capture_cpu_s_per_mpkt']['median']:.2f} s "
        f"per Mpkt stored ({'met' if less else 'not met'})."
    )


def message_len(rows):
    for r in rows:
        exp = r["processes"].get("tapdeck export")
        for c in (exp or {}).get("details", {}).get("collectors") or []:
            return c.get("message_len")
    return None


def markdown(res) -> str:
    kddi_rows = [r for r in res["rows"] if r["experiment"] == "kddi"]
    m = [
        f"# Multi-host benchmark — {res['when']}",
        "",
        (
            f"Machine: {res['machine']}; load average {res['load_before']} before, {res['load_after']} after "
            f"(a shared machine: /proc/stat's softirq time is system-wide). Command: `{res['command']}`. "
            f"Versions: {', '.join(f'{k} {v}' for k, v in res['versions'].items())}."
        ),
        "",
    ]
    if res["quick"]:
        m += [
            "**Quick run (smoke test): short runs, one repetition — not a measurement.**",
            "",
        ]
    m += [
        "## Setup",
        "",
        "```",
        __doc__.split("\n\n")[1].strip("\n"),
        "```",
        "",
        (
            f"Pinning: tcpreplay on CPU {GEN_CPU} (ns gen), every capture process (record, export, tcpdump; "
            f"both monitors of the split) on CPU {CAP_CPU}, the collector on CPU {COL_CPU}. On a veth the "
            f"receiver's kernel work runs in the sender's context: the generator's frames are received "
            f"(and copied into every capture ring, and forwarded by the split) in softirq on CPU {GEN_CPU}; the "
            f"export datagrams are received for the collector in softirq on the exporter's CPU {CAP_CPU}. "
            f"Capture CPU = the capture processes' own user+system time from the moment all were ready "
            f"until they exited (per Mpkt stored), or over the generator's window (% of a core). "
            f"Every tool gets a {capture.BUFFER_MIB} MiB kernel buffer (tapdeck: its default ring); tapdeck writes "
            f"with `--codec none --staging {STAGING}`, as tcpdump writes plain pcap. Links MTU 1500, "
            f"offloads off, no IPv6."
        ),
        "",
    ]
    if kddi_rows:
        m += [
            (
                f"## KDDI-style: header capture at the generator's top rate ({res['kddi_seconds']:.0f} s per run, "
                f"{res['kddi_reps']} interleaved repetition(s); median (min..max))"
            ),
            "",
            (
                f"Snap length {SNAP} bytes everywhere. Forwarding link MTU {res['fwd_mtu']}; the exporter's "
                f"IPFIX messages are {message_len(kddi_rows)} bytes (the route's MTU less IP and UDP headers). "
                f"Frame sizes as KDDI counts them include the 4-byte FCS a veth does not carry. Generator: "
                f"{res['kddi_generator']} at top speed (one core; the frames count a UDP source port, "
                f"payload half random, half zeros). Offered = {GENERATOR_COUNT[res['kddi_generator']]}; "
                f"it differs from run to run, because the capture copies run on the generator's core; received = rx_packets of swin; collection ratio = "
                f"packets stored (read back with capinfos; for export, from the collector's store) / offered."
            ),
            "",
            *kddi_table(res["kddi"]),
            "",
            kddi_target(res["kddi"]),
            "",
        ]
    if res["sweep"]:
        top = res["calibration"]
        m += [
            (
                f"## T-Labs-style: capture rate against data rate ({res['sweep_seconds']:.0f} s per run, "
                f"{res['reps']} interleaved repetition(s); median (min..max))"
            ),
            "",
            (
                f"The realistic size mix (mean {res['mix']['mean_frame']:.0f} B) at tcpreplay `--mbps` steps "
                f"of the calibrated top speed ({top['bytes'] * 8 / top['seconds'] / 1e6:.0f} Mbit/s, "
                f"{top['offered'] / top['seconds'] / 1e6:.3f} Mpps through a one-monitor split, nothing "
                f"capturing), then top speed. Whole frames. Capture rate = packets stored by all monitors "
                f"(read back) / frames offered."
            ),
            "",
            (
                f"Filter ({res['filter']['instructions']} BPF instructions by `tcpdump -d`; it passes "
                f"{res['filter']['passed']} of the {res['filter']['frames']} frames of the traffic file): "
                f"`{FILTER}`"
            ),
            "",
            (
                "**Two cores measure contention, not scaling.** With two monitors both recorders share CPU "
                f"{CAP_CPU}, and the generator, the split and every receive path share CPU {GEN_CPU}: the two-monitor "
                "rows show what splitting costs on one machine. They make no claim about how capture scales "
                "with monitors."
            ),
            "",
            *sweep_table(res["sweep"]),
            "",
        ]
        mc = res.get("merge_check")
        if mc:
            m += [
                f"Merge check (the first two-monitor tapdeck run): {json.dumps(mc)}.",
                "",
            ]
    if res["failed"]:
        m += [
            "## Failed runs",
            "",
            *[f"- {e.splitlines()[0] if e else e}" for e in res["failed"]],
            "",
        ]
    return "\n".join(m) + "\n"


def plot(res, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing (python3 -m pip install matplotlib); no plot")
        return False
    fig, ax = plt.subplots(2, 3, figsize=(16, 9))
    plot_kddi(ax[0], res["kddi"])
    plot_sweep(ax[1], res["sweep"])
    fig.suptitle(
        f"tapdeck multi-host benchmark, {res['when']}{' (quick: not a measurement)' if res['quick'] else ''}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def line(ax, xs, spreads, label, scale=1.0, **kw):
    pts = [(x, s) for x, s in zip(xs, spreads) if s]
    if pts:
        ax.errorbar(
            [x for x, _ in pts],
            [scale * s["median"] for _, s in pts],
            yerr=[
                [scale * (s["median"] - s["min"]) for _, s in pts],
                [scale * (s["max"] - s["median"]) for _, s in pts],
            ],
            label=label,
            marker="o",
            capsize=3,
            **kw,
        )


def plot_kddi(ax, summary):
    """As KDDI's Figures 10-12: collection ratio, capture-side CPU, kernel and collector CPU."""
    for tool in KDDI_TOOLS:
        rows = sorted(
            (s for s in summary if s["tool"] == tool), key=lambda s: s["frame_size"]
        )
        xs = [s["frame_size"] for s in rows]
        line(ax[0], xs, [s["ratio"] for s in rows], tool, 100)
        line(ax[1], xs, [s["capture_cpu_pct"] for s in rows], tool)
        line(
            ax[2],
            xs,
            [s["softirq_pct_cpu0"] for s in rows],
            f"{tool}: softirq CPU {GEN_CPU}",
        )
        line(
            ax[2],
            xs,
            [s["softirq_pct_cpu1"] for s in rows],
            f"{tool}: softirq CPU {CAP_CPU}",
            ls="--",
        )
        if tool.startswith("tapdeck export"):
            line(
                ax[2],
                xs,
                [s["collector_cpu_pct"] for s in rows],
                "tapdeck collect (process)",
                ls=":",
            )
    titles = (
        "Collection ratio (stored / offered, %)",
        "Capture-side process CPU (% of a core)",
        "Kernel softirq and collector CPU (% of a core)",
    )
    label_panels(ax, titles, "frame size (bytes, FCS included)")
    for a in ax:
        a.set_xscale("log")
        a.set_xticks(KDDI_SIZES, [str(x) for x in KDDI_SIZES])


def plot_sweep(ax, summary):
    """As T-Labs' Figures 4-7: capture rate and CPU against the offered data rate."""
    for monitors, bpf in SWEEP_SETUPS:
        for tool in SWEEP_TOOLS:
            rows = [
                s
                for s in summary
                if (s["monitors"], s["filter"], s["tool"]) == (monitors, bpf, tool)
            ]
            rows.sort(key=lambda s: s["offered_mbps"]["median"])
            xs = [s["offered_mbps"]["median"] for s in rows]
            label = f"{tool}, {monitors} mon{', filter' if bpf else ''}"
            style = {"ls": "--" if bpf else "-"}
            line(ax[0], xs, [s["ratio"] for s in rows], label, 100, **style)
            line(ax[1], xs, [s["capture_cpu_pct"] for s in rows], label, **style)
            line(ax[2], xs, [s["capture_cpu_s_per_mpkt"] for s in rows], label, **style)
    titles = (
        "Capture rate (stored / offered, %)",
        "Capture CPU, all monitors (% of a core)",
        "Capture CPU s per Mpkt stored",
    )
    label_panels(ax, titles, "offered data rate (Mbit/s)")


def label_panels(ax, titles, xlabel):
    """A row of panels whose first is a percentage of what was offered."""
    for a, t in zip(ax, titles):
        a.set_title(t, fontsize=10)
        a.set_xlabel(xlabel)
        a.legend(fontsize=7)
        a.set_ylim(bottom=0)
    ax[0].set_ylim(0, 105)


# ---------------------------------------------------------------------------------------------


def parse_args():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 64-byte frames, one low rate, 3 s, 1 rep",
    )
    ap.add_argument(
        "--kddi-seconds", type=float, default=8.0, help="generator time per KDDI run"
    )
    ap.add_argument("--kddi-reps", type=int, default=3)
    ap.add_argument(
        "--kddi-generator",
        choices=("trafgen", "tcpreplay"),
        default="trafgen",
        help="trafgen reaches about twice tcpreplay's packet rate with small frames",
    )
    ap.add_argument(
        "--sizes",
        default=",".join(map(str, KDDI_SIZES)),
        help="KDDI frame sizes, FCS included",
    )
    ap.add_argument(
        "--sweep-seconds", type=float, default=6.0, help="generator time per sweep run"
    )
    ap.add_argument("--reps", type=int, default=5, help="sweep repetitions")
    ap.add_argument(
        "--steps",
        default=",".join(map(str, SWEEP_FRACTIONS)),
        help="sweep rates as fractions of the calibrated top speed (top speed is added)",
    )
    ap.add_argument("--parts", default="kddi,sweep")
    ap.add_argument(
        "--fwd-mtu", type=int, default=1500, help="MTU of the exporter-collector link"
    )
    ap.add_argument(
        "--packets", type=int, default=100_000, help="distinct packets per traffic file"
    )
    ap.add_argument(
        "--work", type=Path, default=ROOT / "bench/work", help="where the tools write"
    )
    ap.add_argument("--results", type=Path, default=ROOT / "bench/results")
    args = ap.parse_args()
    args.sizes = [int(x) for x in args.sizes.split(",") if x]
    args.fractions = [float(x) for x in args.steps.split(",") if x]
    if args.quick:
        args.sizes, args.fractions = args.sizes[:1], args.fractions[:1]
        args.kddi_seconds = args.sweep_seconds = 3.0
        args.kddi_reps = args.reps = 1
        args.packets = min(args.packets, 20_000)
    return args


def preflight():
    if os.geteuid() != 0:
        raise SystemExit("multihost: run as root (namespaces, raw sockets, nftables)")
    need = {
        "tcpreplay": "tcpreplay",
        "trafgen": "netsniff-ng",
        "tcpdump": "tcpdump",
        "nft": "nftables",
        "capinfos": "wireshark-common",
        "ethtool": "ethtool",
        "taskset": "util-linux",
    }
    missing = [f"{b} ({pkg})" for b, pkg in need.items() if not shutil.which(b)]
    if missing:
        raise SystemExit(
            f"multihost: missing {', '.join(missing)}; run scripts/setup.sh"
        )
    if not BIN.exists():
        raise SystemExit(
            f"multihost: {BIN} missing; run scripts/setup.sh or set TAPDECK_BIN"
        )
    if (os.cpu_count() or 1) < 2:
        raise SystemExit(
            "multihost: needs two cores (generator and capture pinned apart)"
        )


def versions():
    out = {}
    for name, cmd in (
        ("tapdeck", [BIN, "--version"]),
        ("tcpdump", ["tcpdump", "--version"]),
        ("tcpreplay", ["tcpreplay", "--version"]),
        ("nft", ["nft", "--version"]),
    ):
        p = sh(cmd, check=False)
        out[name] = ((p.stdout or p.stderr).strip().splitlines() or [""])[0]
    return out


def run_all(args, tb: Testbed, work: Path, res: dict):
    tb.up()
    log(f"namespaces {', '.join(tb.names.values())}")
    traffic = work / "traffic"
    traffic.mkdir()
    parts = args.parts.split(",")
    if "kddi" in parts:
        kddi(tb, kddi_traffic(args, traffic), args, work, res)
    if "sweep" in parts:
        mix = traffic / "mix.pcap"
        res["mix"] = capture.write_pcap(mix, "mix", args.packets)
        res["filter"] = {
            "expression": FILTER,
            "instructions": filter_length(),
            **filter_passes(mix),
        }
        res["calibration"] = calibrate(tb, mix, 3)
        top = res["calibration"]["bytes"] * 8 / res["calibration"]["seconds"] / 1e6
        steps = [max(1, round(x * top)) for x in args.fractions] + (
            [] if args.quick else [None]
        )
        log(f"top speed {top:.0f} Mbit/s; steps {steps}")
        sweep(tb, mix, steps, args, work, res)


def main():
    args = parse_args()
    preflight()
    signal.signal(signal.SIGTERM, capture.on_signal)
    signal.signal(signal.SIGHUP, capture.on_signal)
    args.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="multihost-", dir=args.work))
    res = {
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{os.cpu_count()} cores, {os.uname().release}",
        "command": " ".join(sys.argv),
        "load_before": round(os.getloadavg()[0], 2),
        "quick": args.quick,
        "versions": versions(),
        "pinning": {"generator": GEN_CPU, "capture": CAP_CPU, "collector": COL_CPU},
        "kddi_generator": args.kddi_generator,
        "kddi_seconds": args.kddi_seconds,
        "kddi_reps": args.kddi_reps,
        "sweep_seconds": args.sweep_seconds,
        "reps": args.reps,
        "fwd_mtu": args.fwd_mtu,
        "snaplen": SNAP,
        "rows": [],
        "failed": [],
    }
    tb = Testbed(args.fwd_mtu)
    try:
        run_all(args, tb, work, res)
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); cleaning up, writing what was measured")
        res["interrupted"] = True
    finally:
        for p in list(capture.LIVE):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        tb.close()
        shutil.rmtree(work / "traffic", ignore_errors=True)
    res["load_after"] = round(os.getloadavg()[0], 2)
    res["kddi"] = summarize(
        [r for r in res["rows"] if r["experiment"] == "kddi"], KDDI_KEYS
    )
    res["sweep"] = summarize(
        [r for r in res["rows"] if r["experiment"] == "sweep"], SWEEP_KEYS
    )
    write_results(res, args.results, work)


def write_results(res, out: Path, work: Path):
    out.mkdir(parents=True, exist_ok=True)
    stem = out / ("multihost-" + res["when"].replace(":", "").replace("-", ""))
    stem.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
    md = markdown(res)
    stem.with_suffix(".md").write_text(md)
    png = plot(res, stem.with_suffix(".png")) if res["rows"] else False
    print(md)
    log(f"wrote {stem}.{{json,md{',png' if png else ''}}}; logs in {work}")


if __name__ == "__main__":
    main()
