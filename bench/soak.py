#!/usr/bin/env python3
"""Soak test of `tapdeck serve`: steady live traffic for a long time, with retention churning.

A namespace `tdsoak<pid>` and a veth pair: `tdskg<pid>` inside it (the generator sends
there), `tdskc<pid>` in the root namespace (`tapdeck serve` captures there). No addresses
(frames carry 198.18.0.0/15 addresses and a MAC that is no host's, so nothing but the capture
socket takes them), IPv6 off, offloads off. Removed at the end, on Ctrl-C, SIGTERM, SIGHUP
and after an error; the serve and generator processes are killed if still there.

`tapdeck serve` gets a config file: rotate-size 1MiB, max-bytes 64MiB, min-keep 0,
min-free 0 (only max-bytes deletes), staging 64MiB, stats every second to a file outside the
store, HTTP on a free loopback port. The generator (this script with --generator, run by
`ip netns exec`, one Python thread, so at most one core) sends Ethernet/IPv4/UDP frames
through an AF_PACKET socket at a fixed rate (--pps, --size; payload: a sequence number, random
bytes to half its length, zeros), 2 ms batches, catching up after a stall.

Every second /api/v1/status is read (seen = stored + dropped + in_flight must hold in each
document, per interface and in total) together with /proc/PID: VmRSS (and RssAnon, RssFile),
open fds, threads, utime+stime; every 5 s /metrics (the same balance in the same scrape, and
its process_* figures), /healthz and the store's size. At the end: SIGTERM, exit 0 within
--stop-timeout, the final stats record balanced with nothing in flight, `tapdeck verify`
on the store, and these checks:

  * every status and metrics document balanced, every request answered
  * VmRSS grows < 5 % from after warm-up (min(20 % of the run, 30 s) into the traffic) to
    the end of the traffic, each the median over a window of max(10 s, 5 % of the run), at
    most 60 s (RssAnon, which the ~265 MB of ring pages in VmRSS dilute, is reported too)
  * open fds flat after warm-up: max - min <= 4, and the fitted trend over the run < 1 fd
  * drops honest: tapdeck's seen equals the capture interface's rx_packets over the run
    (every packet that arrived was counted), and the final seen = stored + dropped
  * the store: every file verifies, files present = files written - files deleted, it
    stayed within max-bytes (+ 2 MiB of slack) at every scrape, and retention deleted files

Results: OUT/soak-<UTC time>.{json.gz,md,png} (OUT: --out, default bench/results); the JSON holds
every sample. Scratch (store, config, log) in a directory under --work (default /tmp),
removed at the end unless --keep (on failure the log and stats stay). Exit status 0 when every
check passed, 1 when one failed, 130 when interrupted. Needs root.

    python3 bench/soak.py [--duration 60] [--pps 20000] [--size 1514] [--out DIR] [--work DIR]
"""

import argparse
import datetime
import gzip
import hashlib
import itertools
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The namespace harness is shared with the end-to-end tests: tests/netlab.py.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from netlab import Lab, free_port, in_ns, sh  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("TAPDECK_BIN", ROOT / "target/release/tapdeck"))
CLK_TCK = os.sysconf("SC_CLK_TCK")
MIB = 1 << 20

MAX_BYTES = 64 * MIB
ROTATE = 1 * MIB
STAGING = 64 * MIB
IDLE_BEFORE_S = 2.0  # samples with no traffic, before the generator starts
IDLE_AFTER_S = 4.0  # after it stops: longer than flush-interval (2 s), so all is stored
METRICS_EVERY = 5  # seconds between /metrics scrapes

RSS_GROWTH_LIMIT = 0.05
FD_SPREAD_LIMIT = 4


def log(msg):
    print(f"soak: {msg}", file=sys.stderr, flush=True)


def on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


# ---- the generator (runs inside the namespace) ----------------------------------------------


def frames(count: int, size: int) -> list[bytearray]:
    """`count` distinct Ethernet/IPv4/UDP frames of `size` bytes from 198.18.x.y to
    198.19.x.y; payload: an 8-byte sequence number (set when sent), random bytes to half its
    length, zeros after, so compressors see ~2:1."""
    rng = random.Random(1)
    out = []
    for i in range(count):
        payload_len = size - 42
        half = max(0, payload_len // 2 - 8)
        payload = bytes(8) + rng.randbytes(half) + bytes(payload_len - 8 - half)
        udp = struct.pack("!HHHH", 10000 + i % 4096, 9000, 8 + payload_len, 0)
        src = bytes([198, 18, (i >> 8) & 0xFF, i & 0xFF])
        dst = bytes([198, 19, (i >> 8) & 0xFF, i & 0xFF])
        ip = struct.pack(
            "!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + payload_len, 0, 0, 64, 17, 0, src, dst
        )
        ip = ip[:10] + struct.pack("!H", ip_checksum(ip)) + ip[12:]
        # Locally administered MACs that are no interface's: the root namespace's stack
        # drops the frames as PACKET_OTHERHOST; only the capture socket keeps them.
        eth = b"\x02\x00\x5e\x18\x00\x02" + b"\x02\x00\x5e\x18\x00\x01" + b"\x08\x00"
        out.append(bytearray(eth + ip + udp + payload))
    return out


def ip_checksum(header: bytes) -> int:
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def generator(args):
    """Sends --pps frames per second on --generator for --duration seconds (or until SIGINT
    or SIGTERM); prints {"sent", "seconds", "errors"} as JSON on exit."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    pool = frames(4096, args.size)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((args.generator, 0))
    send, pack_into, n = s.send, struct.Struct("!Q").pack_into, len(pool)
    batch = max(1, args.pps // 100)  # at most 10 ms worth per system-call round
    sent = errors = 0
    print("ready", flush=True)
    t0 = time.monotonic()
    while not stop:
        elapsed = time.monotonic() - t0
        if elapsed >= args.duration:
            break
        due = min(int(elapsed * args.pps), sent + batch)
        while sent < due:
            f = pool[sent % n]
            pack_into(f, 42, sent)
            try:
                send(f)
            except OSError:
                errors += 1  # ENOBUFS: counted as not sent
            sent += 1
        if sent >= int((time.monotonic() - t0) * args.pps):
            time.sleep(0.002)
    seconds = time.monotonic() - t0
    print(json.dumps({"sent": sent - errors, "errors": errors, "seconds": seconds}))


# ---- the service under test -----------------------------------------------------------------


def config_text(iface: str, work: Path, port: int, disk_limit: str | None) -> str:
    # bench-disk-limit: record's benchmark aid (a token bucket in the writer), only to make
    # drops happen on purpose.
    limit = f'bench-disk-limit = "{disk_limit}"\n' if disk_limit else ""
    return f"""\
# bench/soak.py: tapdeck serve with retention churning
interface = ["{iface}"]
store = "{work / "store"}"
rotate-size = "{ROTATE // MIB}MiB"
max-bytes = "{MAX_BYTES // MIB}MiB"
min-keep = 0
min-free = "0"
staging = "{STAGING // MIB}MiB"
stats-interval = 1.0
stats = "{work / "stats.jsonl"}"
quiet = true
listen = "127.0.0.1:{port}"
log-level = "info"
{limit}"""


# What Prometheus asks for: OpenMetrics (serve answers the classic text format otherwise).
OPENMETRICS = (
    "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
)


def get(port: int, path: str, timeout=5.0, accept=None) -> tuple[int, str, str]:
    """(status, body, content type) of GET http://127.0.0.1:port/path."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if accept:
        req.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers.get("Content-Type", "")


def proc_figures(pid: int) -> dict:
    """Memory (kB), fds, threads and CPU seconds of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    kb = {
        k: int(v)
        for k, v in re.findall(r"^(\w+):\s+(\d+) kB", status, re.MULTILINE)
        if k in ("VmRSS", "RssAnon", "RssFile", "VmHWM")
    }
    threads = int(re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE).group(1))
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return {
        "rss_kb": kb["VmRSS"],
        "rss_anon_kb": kb["RssAnon"],
        "rss_file_kb": kb["RssFile"],
        "hwm_kb": kb["VmHWM"],
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": threads,
        "cpu_s": cpu,
    }


def cpu_seconds(pid: int) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def balance(counts: dict) -> int:
    """seen - stored - dropped - in_flight: 0 when the document adds up."""
    d = counts["dropped"]
    return counts["seen"] - counts["stored"] - sum(d.values()) - counts["in_flight"]


def status_sample(doc: dict) -> dict:
    s = doc["stats"]
    t = s["totals"]
    # Each interface row too: there in_flight is implied, so only stored + dropped <= seen
    # can fail, which is the race a snapshot taken in the wrong order shows.
    rows_ok = all(
        r["stored"]
        + r["dropped_kernel"]
        + r["dropped_staging_full"]
        + r["dropped_write_error"]
        <= r["seen"]
        for st in s["streams"]
        for r in st["interfaces"]
    )
    rows_sum = sum(r["seen"] for st in s["streams"] for r in st["interfaces"])
    return {
        "elapsed_s": s["elapsed_s"],
        "seen": t["seen"],
        "stored": t["stored"],
        "dropped": dict(t["dropped"]),
        "in_flight": t["in_flight"],
        "balance": balance(t),
        "rows_ok": rows_ok and rows_sum == t["seen"],
        "captured_bytes": t["captured_bytes"],
        "files_written": s["files_written"],
        "files_deleted": s["files_deleted"],
        "bytes_written": s["bytes_written"],
        "bytes_deleted": s["bytes_deleted"],
        "retention_holds": s["retention_holds"],
        "staging_fill": s["staging_fill"],
        "healthy": doc["health"]["healthy"],
        "reasons": doc["health"]["reasons"],
    }


METRIC = re.compile(r"^([a-z_]+)(?:\{([^}]*)\})? (\S+)$")


def parse_metrics(text: str) -> dict:
    """name -> list of (labels dict, value)."""
    out: dict = {}
    for line in text.splitlines():
        m = METRIC.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


def metrics_sample(text: str) -> dict:
    m = parse_metrics(text)

    def total(name, **want):
        return sum(
            v
            for labels, v in m.get(name, [])
            if all(labels.get(k) == x for k, x in want.items())
        )

    dropped = {
        c: int(total("tapdeck_packets_dropped_total", cause=c))
        for c in ("kernel", "staging_full", "write_error")
    }
    counts = {
        "seen": int(total("tapdeck_packets_seen_total")),
        "stored": int(total("tapdeck_packets_stored_total")),
        "dropped": dropped,
        "in_flight": int(total("tapdeck_packets_in_flight")),
    }
    return {
        **counts,
        "balance": balance(counts),
        "eof": text.rstrip().endswith("# EOF"),
        "process_open_fds": total("process_open_fds"),
        "process_resident_memory_bytes": total("process_resident_memory_bytes"),
        "process_cpu_seconds_total": total("process_cpu_seconds_total"),
        "files_written_total": int(total("tapdeck_files_written_total")),
        "files_deleted_total": int(total("tapdeck_files_deleted_total")),
    }


def store_bytes(store: Path) -> int:
    n = 0
    for e in os.scandir(store):
        try:
            if e.is_file() and e.name != "manifest.json":
                n += e.stat().st_size
        except FileNotFoundError:
            pass  # deleted by retention meanwhile
    return n


def data_files(store: Path) -> list[str]:
    return sorted(
        e.name
        for e in os.scandir(store)
        if e.is_file() and e.name.startswith("20") and ".partial" not in e.name
    )


def wait_ready(port: int, serve: subprocess.Popen, timeout=30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            raise RuntimeError(
                f"tapdeck serve exited ({serve.returncode}) before it was ready"
            )
        try:
            code, body, _ = get(port, "/api/v1/status", timeout=2)
            doc = json.loads(body)
            if code == 200 and doc["health"]["phase"] == "recording" and "stats" in doc:
                return doc
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"tapdeck serve not recording after {timeout:.0f} s")


def reap(p: subprocess.Popen, timeout: float) -> tuple[int | None, float | None]:
    """Waits up to `timeout` for `p` to exit: (exit code, its user + system CPU seconds),
    or (None, None). wait4 and not Popen.wait, which would drop the rusage."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return p.returncode, ru.ru_utime + ru.ru_stime
        if time.monotonic() >= deadline:
            return None, None
        time.sleep(0.05)


def stop_process(
    p: subprocess.Popen, sig, timeout: float
) -> tuple[int | None, float | None]:
    """Sends `sig` and reaps `p` (see reap); SIGKILL after `timeout` (exit code None then)."""
    if p.returncode is not None:
        return p.returncode, None
    os.kill(p.pid, sig)  # not p.send_signal: its poll() could reap p, rusage and all
    rc, cpu = reap(p, timeout)
    if rc is None:
        os.kill(p.pid, signal.SIGKILL)
        reap(p, 10)
    return rc, cpu


# ---- the run --------------------------------------------------------------------------------


def run(args, lab: Lab, work: Path, res: dict, procs: list, binary: Path):
    tag = os.getpid()
    ns, gen_if, cap_if = f"tdsoak{tag}", f"tdskg{tag}", f"tdskc{tag}"
    res["netns"], res["links"] = ns, [gen_if, cap_if]
    lab.add_ns(ns)
    lab.pair(ns, gen_if, None, cap_if)
    port = free_port()
    cfg = work / "tapdeck.toml"
    cfg.write_text(config_text(cap_if, work, port, args.disk_limit))
    res["config"] = cfg.read_text()
    with open(work / "serve.log", "w") as serve_log:  # serve keeps its own copy
        serve = subprocess.Popen(
            [str(binary), "serve", "--config", str(cfg)],
            stdout=serve_log,
            stderr=serve_log,
            start_new_session=True,  # Ctrl-C reaches us only; we stop it with SIGTERM
        )
    procs.append(serve)
    res["serve_pid"] = serve.pid
    first = wait_ready(port, serve)
    log(
        f"serve pid {serve.pid} recording {cap_if} (port {port}); store {work / 'store'}"
    )
    rx0 = lab.rx(None, cap_if)
    res["seen_at_ready"] = first["stats"]["totals"]["seen"]

    samples, scrapes, failures = res["samples"], res["scrapes"], res["request_failures"]
    t0 = time.monotonic()
    gen = None
    gen_start = IDLE_BEFORE_S
    gen_end = gen_start + args.duration
    end = gen_end + IDLE_AFTER_S
    k = 0
    while True:
        tick = t0 + k
        if tick > t0 + end:
            break
        time.sleep(max(0.0, tick - time.monotonic()))
        t = time.monotonic() - t0
        if gen is None and t >= gen_start:
            gen = subprocess.Popen(
                [*in_ns(ns), sys.executable, "-u", __file__, "--generator", gen_if]
                + ["--pps", str(args.pps), "--size", str(args.size)]
                + ["--duration", str(args.duration)],
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            procs.append(gen)
            ready, _, _ = select.select([gen.stdout], [], [], 30)
            if not ready or gen.stdout.readline().strip() != "ready":
                raise RuntimeError("the generator did not start within 30 s")
            res["generator_start_t"] = time.monotonic() - t0
        if serve.poll() is not None:
            raise RuntimeError(
                f"tapdeck serve exited ({serve.returncode}) during the run"
            )
        sample = {"t": round(t, 3), **proc_figures(serve.pid)}
        if gen is not None:
            sample["gen_cpu_s"] = cpu_seconds(gen.pid)
        try:
            _, body, _ = get(port, "/api/v1/status")
            sample.update(status_sample(json.loads(body)))
        except (OSError, ValueError, KeyError) as e:
            failures.append({"t": t, "what": "status", "error": repr(e)})
        samples.append(sample)
        if k % METRICS_EVERY == 0:
            scrape = {"t": round(t, 3)}
            try:
                _, text, ctype = get(port, "/metrics", accept=OPENMETRICS)
                scrape.update(metrics_sample(text))
                scrape["openmetrics"] = ctype.startswith("application/openmetrics-text")
                scrape["healthz"] = get(port, "/healthz")[0]
                scrape["store_bytes"] = store_bytes(work / "store")
                scrape["fds"] = proc_figures(serve.pid)["fds"]
                scrapes.append(scrape)
            except (OSError, ValueError) as e:
                failures.append({"t": t, "what": "metrics", "error": repr(e)})
        if k % 30 == 0 and "seen" in sample:
            log(
                f"t={t:5.0f}s seen {sample['seen']} files {sample['files_written']}/"
                f"{sample['files_deleted']} RSS {sample['rss_kb'] / 1024:.0f} MB "
                f"fds {sample['fds']}"
            )
        k += 1
    # The generator stopped on its own at --duration; its count is the offered load.
    rc, cpu = reap(gen, 30)
    if rc != 0:
        raise RuntimeError(f"the generator failed (exit {rc})")
    res["generator"] = json.loads(gen.stdout.read().strip().splitlines()[-1])
    res["generator"]["cpu_s"] = cpu
    rx1 = lab.rx(None, cap_if)
    res["interface_rx"] = {k: rx1[k] - rx0[k] for k in ("packets", "bytes", "dropped")}

    log("SIGTERM to serve")
    t_stop = time.monotonic()
    rc, cpu = stop_process(serve, signal.SIGTERM, args.stop_timeout)
    res["serve_exit"] = {
        "returncode": rc,
        "seconds": time.monotonic() - t_stop,
        "cpu_s": cpu,
    }
    stats = (work / "stats.jsonl").read_text().strip().splitlines()
    res["final_stats"] = json.loads(stats[-1])
    res["serve_log_tail"] = (work / "serve.log").read_text().splitlines()[-15:]
    res["serve_log_lines"] = len((work / "serve.log").read_text().splitlines())

    store = work / "store"
    res["store_files"] = len(data_files(store))
    res["store_bytes_final"] = store_bytes(store)
    p = sh([binary, "verify", store], check=False, timeout=120)
    lines = (p.stdout + p.stderr).strip().splitlines()
    res["verify"] = {
        "returncode": p.returncode,
        "summary": lines[-1] if lines else "",
        "failed_lines": [x for x in lines if ": ok:" not in x][:20],
    }


# ---- analysis -------------------------------------------------------------------------------


def median_window(samples, key, lo, hi):
    vals = [s[key] for s in samples if lo <= s["t"] <= hi and key in s]
    return statistics.median(vals) if vals else None


def slope(points):
    """Least-squares slope of (x, y) points."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def rates(samples):
    """Per-sample rates from consecutive samples: rotations/s, deletions/s, CPU %."""
    out = []
    for a, b in itertools.pairwise(samples):
        dt = b["t"] - a["t"]
        if dt <= 0 or "files_written" not in a or "files_written" not in b:
            continue
        r = {
            "t": b["t"],
            "rotations_per_s": (b["files_written"] - a["files_written"]) / dt,
            "deletions_per_s": (b["files_deleted"] - a["files_deleted"]) / dt,
            "cpu_pct": 100 * (b["cpu_s"] - a["cpu_s"]) / dt,
            "pps": (b["seen"] - a["seen"]) / dt,
        }
        if a.get("gen_cpu_s") is not None and b.get("gen_cpu_s") is not None:
            r["gen_cpu_pct"] = 100 * (b["gen_cpu_s"] - a["gen_cpu_s"]) / dt
        out.append(r)
    return out


def analyse(res, args) -> tuple[dict, list]:
    samples = [s for s in res["samples"] if "seen" in s]
    g0 = res.get("generator_start_t", IDLE_BEFORE_S)
    g1 = g0 + args.duration
    warmup = min(0.2 * args.duration, 30.0)
    w = min(60.0, max(10.0, 0.05 * args.duration))
    after_warm = [s for s in samples if s["t"] >= g0 + warmup]
    first, last = samples[0], samples[-1]
    in_traffic = [s for s in samples if g0 <= s["t"] <= g1]
    steady = [s for s in in_traffic if s["t"] >= g0 + warmup] or after_warm
    a, b = (in_traffic[0], in_traffic[-1]) if len(in_traffic) >= 2 else (first, last)
    span = b["t"] - a["t"] or 1.0
    fs = res["final_stats"]
    ft = fs["totals"]
    gen = res["generator"]

    rss_warm = median_window(samples, "rss_kb", g0 + warmup, g0 + warmup + w)
    rss_end = median_window(samples, "rss_kb", g1 - w, g1)
    anon_warm = median_window(samples, "rss_anon_kb", g0 + warmup, g0 + warmup + w)
    anon_end = median_window(samples, "rss_anon_kb", g1 - w, g1)
    fds_after = [s["fds"] for s in after_warm]
    fd_span = after_warm[-1]["t"] - after_warm[0]["t"]
    fd_trend = slope([(s["t"], s["fds"]) for s in after_warm]) * fd_span
    warm_span = steady[-1]["t"] - steady[0]["t"]
    rss_slope = slope([(s["t"], s["rss_kb"]) for s in steady]) / 1024  # MB/s
    anon_slope = slope([(s["t"], s["rss_anon_kb"]) for s in steady]) / 1024
    per_s = rates(samples)
    cpu_traffic = 100 * (b["cpu_s"] - a["cpu_s"]) / span
    gen_cpu = gen.get("cpu_s")
    summary = {
        "duration_s": args.duration,
        "generator_s": gen["seconds"],
        "offered_pps": args.pps,
        "frame_bytes": args.size,
        "sent": gen["sent"],
        "send_errors": gen["errors"],
        "achieved_pps": gen["sent"] / gen["seconds"] if gen["seconds"] else 0,
        "interface_rx_packets": res["interface_rx"]["packets"],
        "interface_rx_dropped": res["interface_rx"]["dropped"],
        "seen": ft["seen"],
        "stored": ft["stored"],
        "dropped": ft["dropped"],
        "in_flight_final": ft["in_flight"],
        "captured_mb_s": (b["captured_bytes"] - a["captured_bytes"]) / span / 1e6,
        "written_mb_s": (b["bytes_written"] - a["bytes_written"]) / span / 1e6,
        "files_written": fs["files_written"],
        "files_deleted": fs["files_deleted"],
        "bytes_deleted": fs["bytes_deleted"],
        "retention_holds": fs["retention_holds"],
        "rotations_per_s": (b["files_written"] - a["files_written"]) / span,
        "deletions_per_s": (b["files_deleted"] - a["files_deleted"]) / span,
        "warmup_s": warmup,
        "window_s": w,
        "rss_mb": {
            "start": first["rss_kb"] / 1024,
            "after_warmup": rss_warm / 1024,
            "end": rss_end / 1024,
            "max_after_warmup": max(s["rss_kb"] for s in after_warm) / 1024,
            "growth": (rss_end - rss_warm) / rss_warm,
            "fitted_change_mb": rss_slope * warm_span,
            "fitted_mb_per_h": rss_slope * 3600,
        },
        "rss_anon_mb": {
            "start": first["rss_anon_kb"] / 1024,
            "after_warmup": anon_warm / 1024,
            "end": anon_end / 1024,
            "growth": (anon_end - anon_warm) / anon_warm,
            "fitted_change_mb": anon_slope * warm_span,
            "fitted_mb_per_h": anon_slope * 3600,
        },
        "hwm_mb": last["hwm_kb"] / 1024,
        "fds": {
            "start": first["fds"],
            "min_after_warmup": min(fds_after),
            "max_after_warmup": max(fds_after),
            "end": last["fds"],
            "trend_over_run": fd_trend,
        },
        "threads": sorted({s["threads"] for s in samples}),
        "cpu_pct_traffic": cpu_traffic,
        "cpu_s_total": last["cpu_s"],
        "cpu_s_per_million_seen": (b["cpu_s"] - a["cpu_s"])
        / max(1, b["seen"] - a["seen"])
        * 1e6,
        "cpu_pct_max_1s": max((r["cpu_pct"] for r in per_s), default=0),
        "generator_cpu_pct": 100 * gen_cpu / gen["seconds"] if gen_cpu else None,
        "samples": len(res["samples"]),
        "samples_in_traffic": len(in_traffic),
        "scrapes": len(res["scrapes"]),
        "unhealthy_samples": sum(1 for s in samples if not s["healthy"]),
        "healthz_not_200": sum(1 for s in res["scrapes"] if s.get("healthz") != 200),
        "store_bytes_max": max((s["store_bytes"] for s in res["scrapes"]), default=0),
        "stop_s": res["serve_exit"]["seconds"],
    }
    res["rates"] = per_s

    checks = []

    def check(name, ok, detail):
        checks.append({"name": name, "ok": bool(ok), "detail": detail})

    unbalanced = [s["t"] for s in res["samples"] if s.get("balance", 0) != 0]
    bad_rows = [s["t"] for s in samples if not s["rows_ok"]]
    check(
        "status: seen = stored + dropped + in_flight in every document",
        not unbalanced and not bad_rows and len(samples) == len(res["samples"]),
        f"{len(samples)} documents, {len(unbalanced)} unbalanced, {len(bad_rows)} with an "
        f"interface row over seen"
        + (f" (first at t={unbalanced[0]})" if unbalanced else ""),
    )
    m_unbalanced = [s["t"] for s in res["scrapes"] if s["balance"] != 0]
    not_om = [s["t"] for s in res["scrapes"] if not (s["eof"] and s["openmetrics"])]
    check(
        "/metrics (OpenMetrics): the same balance in every scrape",
        not m_unbalanced and not not_om and res["scrapes"],
        f"{len(res['scrapes'])} scrapes, {len(m_unbalanced)} unbalanced, {len(not_om)} "
        "not OpenMetrics (content type, # EOF)",
    )
    check(
        "every HTTP request answered",
        not res["request_failures"],
        f"{len(res['request_failures'])} failed",
    )
    check(
        "serve exited 0 after SIGTERM",
        res["serve_exit"]["returncode"] == 0,
        f"exit {res['serve_exit']['returncode']} after {res['serve_exit']['seconds']:.1f} s",
    )
    check(
        "final stats: seen = stored + dropped, nothing in flight",
        balance(ft) == 0 and ft["in_flight"] == 0 and fs.get("final"),
        f"seen {ft['seen']} stored {ft['stored']} dropped {sum(ft['dropped'].values())} "
        f"({', '.join(f'{k} {v}' for k, v in ft['dropped'].items())}), in flight "
        f"{ft['in_flight']}",
    )
    check(
        "every packet that arrived was counted (seen = interface rx_packets)",
        ft["seen"] - res["seen_at_ready"] == res["interface_rx"]["packets"],
        f"seen {ft['seen']} (at ready {res['seen_at_ready']}), interface rx "
        f"{res['interface_rx']['packets']}, generator sent {gen['sent']}",
    )
    check(
        f"VmRSS grows < {RSS_GROWTH_LIMIT:.0%} after warm-up",
        summary["rss_mb"]["growth"] < RSS_GROWTH_LIMIT,
        f"{rss_warm / 1024:.1f} MB at {warmup:.0f} s -> {rss_end / 1024:.1f} MB at the end "
        f"({summary['rss_mb']['growth']:+.2%}; medians over {w:.0f} s)",
    )
    check(
        "open fds flat after warm-up",
        max(fds_after) - min(fds_after) <= FD_SPREAD_LIMIT and fd_trend < 1.0,
        f"{min(fds_after)}..{max(fds_after)}, fitted trend {fd_trend:+.2f} over the run",
    )
    check(
        "tapdeck verify: every file verifies",
        res["verify"]["returncode"] == 0,
        res["verify"]["summary"],
    )
    expected = fs["files_written"] - fs["files_deleted"]
    check(
        "files present = files written - files deleted",
        res["store_files"] == expected,
        f"{res['store_files']} present, {fs['files_written']} - {fs['files_deleted']} = {expected}",
    )
    limit = MAX_BYTES + 2 * ROTATE
    check(
        "store within max-bytes (+ 2 MiB)",
        summary["store_bytes_max"] <= limit and res["store_bytes_final"] <= limit,
        f"max seen {summary['store_bytes_max'] / MIB:.1f} MiB, at the end "
        f"{res['store_bytes_final'] / MIB:.1f} MiB, max-bytes {MAX_BYTES // MIB} MiB",
    )
    check(
        "retention churned (files deleted)",
        fs["files_deleted"] > 0,
        f"{fs['files_written']} written, {fs['files_deleted']} deleted",
    )
    return summary, checks


# ---- output ---------------------------------------------------------------------------------


def markdown(res) -> str:
    s, checks = res["summary"], res["checks"]

    def per_hour(mem):
        # A slope over a few minutes says little about an hour: only for long runs.
        long_run = s["duration_s"] - s["warmup_s"] >= 600
        return f" ({mem['fitted_mb_per_h']:+.1f} MB/h)" if long_run else ""

    d = s["dropped"]
    rss, anon, fds = s["rss_mb"], s["rss_anon_mb"], s["fds"]
    gen_cpu = s["generator_cpu_pct"]
    b = res["versions"]["binary"]
    rows = [
        ("duration (traffic)", f"{s['generator_s']:.1f} s"),
        (
            "packets sent / at the interface / seen / stored",
            (
                f"{s['sent']:,} / {s['interface_rx_packets']:,} / {s['seen']:,} / "
                f"{s['stored']:,}"
            ),
        ),
        (
            "dropped (kernel / staging full / write error)",
            f"{d['kernel']:,} / {d['staging_full']:,} / {d['write_error']:,}",
        ),
        (
            "rate",
            (
                f"{s['achieved_pps']:,.0f} packets/s sent "
                f"({s['achieved_pps'] * s['frame_bytes'] / 1e6:.1f} MB/s); tapdeck captured "
                f"{s['captured_mb_s']:.1f} MB/s into staging, wrote {s['written_mb_s']:.1f} MB/s"
            ),
        ),
        (
            "files written / deleted by retention",
            (
                f"{s['files_written']:,} / {s['files_deleted']:,} "
                f"({s['bytes_deleted'] / 1e9:.2f} GB deleted)"
            ),
        ),
        (
            "rotations/s, deletions/s (during traffic)",
            f"{s['rotations_per_s']:.1f}, {s['deletions_per_s']:.1f}",
        ),
        ("retention holds", f"{s['retention_holds']}"),
        (
            "VmRSS start / after warm-up / end (max after warm-up)",
            (
                f"{rss['start']:.1f} / {rss['after_warmup']:.1f} / {rss['end']:.1f} "
                f"({rss['max_after_warmup']:.1f}) MB; growth {rss['growth']:+.2%}, "
                f"least-squares fit after warm-up {rss['fitted_change_mb']:+.1f} MB"
                f"{per_hour(rss)}"
            ),
        ),
        (
            "RssAnon start / after warm-up / end",
            (
                f"{anon['start']:.1f} / {anon['after_warmup']:.1f} / {anon['end']:.1f} MB; "
                f"growth {anon['growth']:+.2%}, fit {anon['fitted_change_mb']:+.1f} MB"
                f"{per_hour(anon)}"
            ),
        ),
        (
            "open fds start / after warm-up min..max / end",
            (
                f"{fds['start']} / {fds['min_after_warmup']}..{fds['max_after_warmup']} / "
                f"{fds['end']}"
            ),
        ),
        ("threads", ", ".join(map(str, s["threads"]))),
        (
            "CPU of serve during traffic (% of one core)",
            (
                f"{s['cpu_pct_traffic']:.1f} % (1-s max {s['cpu_pct_max_1s']:.0f} %); "
                f"{s['cpu_s_per_million_seen']:.1f} s per million packets"
            ),
        ),
        ("CPU of the generator", "–" if gen_cpu is None else f"{gen_cpu:.0f} %"),
        ("store size, max over scrapes", f"{s['store_bytes_max'] / MIB:.1f} MiB"),
        ("samples / /metrics scrapes", f"{s['samples']} / {s['scrapes']}"),
        (
            "unhealthy samples, /healthz not 200",
            f"{s['unhealthy_samples']}, {s['healthz_not_200']}",
        ),
        ("stop (SIGTERM to exit)", f"{s['stop_s']:.1f} s"),
    ]
    intro = (
        f"Machine: {res['machine']}, load {res['load_before']} before, "
        f"{res['load_after']} after. `{res['versions']['tapdeck']}` (built "
        f"{b['built']}, sha256 {b['sha256'][:12]}; HEAD of its tree at the run, which "
        f"the build may predate: {b['repo_head'][:60]}). "
        "Command: "
        f"`{res['command']}`. Verdict: {'**passed**' if res['passed'] else '**FAILED**'}."
    )
    setup = (
        f"Live capture on a veth end; the generator sends {s['frame_bytes']}-byte UDP "
        f"frames at {s['offered_pps']} packets/s from a namespace. Config: rotate-size "
        f"{ROTATE // MIB}MiB, max-bytes {MAX_BYTES // MIB}MiB, min-keep 0, min-free 0, "
        f"staging {STAGING // MIB}MiB, default codec ladder"
        + (
            f", writer throttled to {res['params']['disk_limit']}/s (bench-disk-limit: "
            "drops on purpose)"
            if res["params"]["disk_limit"]
            else ""
        )
        + ". Samples every second "
        f"(/api/v1/status and /proc), /metrics every {METRICS_EVERY} s. Warm-up "
        f"{s['warmup_s']:.0f} s; 'after warm-up' and 'end' (of the traffic) are medians "
        f"over {s['window_s']:.0f} s; the memory fits are over the traffic after warm-up."
    )
    m = [f"# Soak of `tapdeck serve` — {res['when']}", "", intro, "", setup, ""]
    m += ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
    m += ["## Checks", "", "| check | | detail |", "|---|---|---|"]
    for c in checks:
        verdict = "ok" if c["ok"] else "**FAILED**"
        m.append(f"| {c['name']} | {verdict} | {c['detail']} |")
    m.append("")
    if res.get("plot"):
        m += [f"![RSS, fds, CPU, rotations]({res['plot']})", ""]
    else:
        m += [f"No plot: {res.get('plot_skipped', 'matplotlib missing')}.", ""]
    return "\n".join(m)


def plot(res, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        res["plot_skipped"] = "matplotlib is not installed"
        return None
    samples = [s for s in res["samples"] if "seen" in s]
    t = [s["t"] for s in samples]
    r = res["rates"]
    g0 = res.get("generator_start_t", IDLE_BEFORE_S)
    fig, ax = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    ax[0].plot(t, [s["rss_kb"] / 1024 for s in samples], label="VmRSS")
    ax[0].plot(t, [s["rss_anon_kb"] / 1024 for s in samples], label="RssAnon")
    ax[0].plot(
        t, [s["rss_file_kb"] / 1024 for s in samples], label="RssFile (ring, binary)"
    )
    ax[0].set_ylabel("MB")
    ax[0].set_ylim(bottom=0)
    ax[0].legend(loc="lower right")
    ax[1].plot(t, [s["fds"] for s in samples], drawstyle="steps-post")
    ax[1].set_ylabel("open fds")
    ax[1].set_ylim(bottom=0, top=max(s["fds"] for s in samples) + 5)
    ax[2].plot([x["t"] for x in r], [x["cpu_pct"] for x in r], label="tapdeck serve")
    if any("gen_cpu_pct" in x for x in r):
        g = [x for x in r if "gen_cpu_pct" in x]
        ax[2].plot(
            [x["t"] for x in g], [x["gen_cpu_pct"] for x in g], label="generator"
        )
    ax[2].set_ylabel("CPU, % of a core")
    ax[2].set_ylim(bottom=0)
    ax[2].legend(loc="upper right")
    ax[3].plot(
        [x["t"] for x in r], [x["rotations_per_s"] for x in r], label="files written/s"
    )
    ax[3].plot(
        [x["t"] for x in r], [x["deletions_per_s"] for x in r], label="files deleted/s"
    )
    ax[3].set_ylabel("per second")
    ax[3].set_xlabel("seconds since serve was ready")
    ax[3].legend(loc="upper right")
    for a in ax:
        a.axvline(g0, color="grey", lw=0.8, ls=":")
        a.axvline(g0 + res["summary"]["warmup_s"], color="grey", lw=0.8, ls="--")
        a.grid(alpha=0.3)
    fig.suptitle(
        f"tapdeck serve soak {res['when']} (dotted: traffic starts; dashed: warm-up)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def versions(binary: Path) -> dict:
    out = {}
    for name, cmd in (("tapdeck", [binary, "--version"]), ("kernel", ["uname", "-r"])):
        p = sh(cmd, check=False)
        out[name] = ((p.stdout or p.stderr).strip().splitlines() or [""])[0]
    digest = hashlib.sha256()
    with open(binary, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    mtime = datetime.datetime.fromtimestamp(BIN.stat().st_mtime, datetime.UTC)
    out["binary"] = {
        "path": str(BIN),
        "sha256": digest.hexdigest(),
        "built": mtime.strftime("%Y-%m-%dT%H:%M:%SZ"),
        # The binary may be older than this commit; it is what its tree held at the run.
        "repo_head": sh(
            ["git", "-C", BIN.parent, "log", "-1", "--format=%h %s"], check=False
        ).stdout.strip()[:100],
    }
    return out


def parse_args():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of traffic")
    ap.add_argument("--pps", type=int, default=20000, help="packets per second offered")
    ap.add_argument("--size", type=int, default=1514, help="frame bytes (60..1514)")
    ap.add_argument(
        "--out", type=Path, default=ROOT / "bench/results", help="results dir"
    )
    ap.add_argument(
        "--work", type=Path, default=Path("/tmp"), help="scratch goes under it"
    )
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument(
        "--disk-limit",
        metavar="SIZE",
        help="throttle serve's writer to SIZE/s (bench-disk-limit, e.g. 5MB), so staging "
        "fills and packets are dropped: to see drops counted",
    )
    ap.add_argument(
        "--stop-timeout", type=float, default=60.0, help="SIGTERM to exit, max"
    )
    ap.add_argument("--generator", help=argparse.SUPPRESS)  # internal: the sender
    args = ap.parse_args()
    if not 60 <= args.size <= 1514:
        ap.error("--size must be 60..1514")
    if args.duration < 10:
        ap.error("--duration must be at least 10 s (warm-up and windows need samples)")
    return args


def main():
    args = parse_args()
    if args.generator:
        return generator(args)
    if os.geteuid() != 0:
        raise SystemExit("soak: run as root (network namespace, veth pair, capture)")
    if not BIN.exists():
        raise SystemExit(f"soak: {BIN} missing; build it or set TAPDECK_BIN")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    args.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tapdeck-soak-", dir=args.work))
    # A copy, so that serve and verify are one build even if the tree is rebuilt meanwhile.
    binary = work / "tapdeck"
    shutil.copy2(BIN, binary)
    res = {
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{os.cpu_count()} cores, {os.uname().release}",
        "command": " ".join(["python3", *sys.argv]),
        "load_before": round(os.getloadavg()[0], 2),
        "versions": versions(binary),
        "params": {
            "duration_s": args.duration,
            "pps": args.pps,
            "size": args.size,
            "max_bytes": MAX_BYTES,
            "rotate_size": ROTATE,
            "staging": STAGING,
            "disk_limit": args.disk_limit,
        },
        "samples": [],
        "scrapes": [],
        "request_failures": [],
    }
    lab, procs = Lab(), []
    error = None
    try:
        run(args, lab, work, res, procs, binary)
    except KeyboardInterrupt as e:
        error = f"interrupted ({e})"
        res["interrupted"] = True
    except Exception as e:  # noqa: BLE001 (reported in the results after the cleanup)
        error = f"{type(e).__name__}: {e}"
    finally:
        # A second Ctrl-C must not leave the namespace or the service behind.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for p in reversed(procs):
            stop_process(p, signal.SIGTERM, 30 if p is procs[0] else 5)
        lab.close()
        leftover = sh(["ip", "netns", "list"], check=False).stdout
        if f"tdsoak{os.getpid()}" in leftover:
            log("warning: namespace still there after cleanup")
    res["load_after"] = round(os.getloadavg()[0], 2)
    ok = error is None
    if ok:
        res["summary"], res["checks"] = analyse(res, args)
        ok = all(c["ok"] for c in res["checks"])
    else:
        res["error"] = error
        log(error)
    res["passed"] = ok
    if args.keep:
        log(f"kept {work}")
    elif ok or res.get("interrupted"):
        shutil.rmtree(work, ignore_errors=True)
    else:
        shutil.rmtree(work / "store", ignore_errors=True)
        (work / "tapdeck").unlink(missing_ok=True)
        log(f"kept {work} (log, config, stats; the store and binary copy are removed)")
    if "summary" not in res:
        # Nothing to analyse (interrupted or failed early): keep the samples anyway.
        if res["samples"]:
            write(res, args.out, partial=True)
        sys.exit(130 if res.get("interrupted") else 1)
    write(res, args.out)
    sys.exit(0 if ok else 1)


def write(res, out: Path, partial=False):
    out.mkdir(parents=True, exist_ok=True)
    stem = out / ("soak-" + res["when"].replace(":", "").replace("-", ""))
    if not partial:
        res["plot"] = plot(res, stem.with_suffix(".png"))
        md = markdown(res)
        stem.with_suffix(".md").write_text(md)
        print(md)
    # Every sample, compact and gzipped: a 30-minute run's 1,800 samples are 1.7 MB as
    # indented JSON and about a tenth of it so (`zcat FILE | jq .` reads it).
    with gzip.open(stem.with_suffix(".json.gz"), "wt") as f:
        f.write(json.dumps(res, separators=(",", ":")) + "\n")
    kinds = (
        ["json.gz"] + ([] if partial else ["md"]) + (["png"] if res.get("plot") else [])
    )
    log(
        f"wrote {stem}.{{{','.join(kinds)}}}"
        + (" (partial: no analysis)" if partial else "")
    )


if __name__ == "__main__":
    main()
