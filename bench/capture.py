#!/usr/bin/env python3
"""Live-capture benchmark: tapdeck against tcpdump, dumpcap and netsniff-ng on one veth pair.

What it does (issue 3 "The benchmark harness"):
  * creates a network namespace tdbench-<pid> and a veth pair: the far end (generator side)
    inside the namespace, the near end (capture interface) in the root namespace; MTU 1500,
    GRO/GSO/TSO off on both ends; no addresses. Both are removed on exit, also on SIGINT/SIGTERM;
  * writes traffic files (pcap, in a temporary directory): 64-byte frames, 1514-byte frames and
    a realistic mix (peaks at 60-64, 576 and 1420-1514 bytes); Ethernet/IPv4/UDP between
    198.18.0.0/15 addresses; every payload half random, half zeros, with a sequence number;
  * for each traffic kind runs each recorder in turn on the same offered load for a fixed time:
    tapdeck raw (--codec none), tapdeck adaptive (default ladder), tcpdump -B, dumpcap -B,
    netsniff-ng. Generator: tcpreplay --topspeed --preload-pcap --loop 0 --duration S, inside the
    namespace, pinned to CPU 0; recorders pinned to CPU 1. The kernel's receive work on a veth
    runs in the sender's context, so it is charged to CPU 0, not to the recorder.
  * per run: offered (tcpreplay's successful packets), received (rx_packets delta of the capture
    interface), stored (the output files read back: capinfos -c -M, after `zstd -dc` / `lz4 -dc`
    for compressed tapdeck files), drops by cause as each tool reports them, the recorder
    process's own user+system CPU seconds (wait4 rusage) per million stored packets, MB/s written.
  * --burst: 10 s at top speed, 10 s idle, three times (shorter with --quick), stored fraction
    per burst from tapdeck's 1-second stats lines; peers are compared on totals.
  * traffic kind 64-trafgen: 64-byte frames from trafgen (netsniff-ng's generator, one core)
    instead of tcpreplay, as issue 3 asks for small frames.

Output: bench/results/capture-<UTC time>.{json,md,png}. Needs root. Usage:
    python3 bench/capture.py [--seconds 60] [--reps 3] [--quick] [--burst] [--kinds 64,1514,mix,64-trafgen]
                             [--tools tapdeck-raw,tapdeck-raw-noindex,tapdeck-adaptive,tapdeck-headers,tcpdump,
                                      dumpcap,netsniff-ng]
    (tapdeck-raw-noindex is tapdeck-raw with --no-flow-index: the flow index's cost per packet.)
"""

import argparse
import datetime
import json
import os
import random
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The namespace harness is shared with the end-to-end tests: tests/netlab.py.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from netlab import Lab, sh  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("TAPDECK_BIN", ROOT / "target/release/tapdeck"))
GEN_CPU, REC_CPU = "0", "1"
BUFFER_MIB = 256  # kernel buffer / ring every recorder gets (tapdeck's default ring: 64 x 4 MiB)
TOOLS = ["tapdeck-raw", "tapdeck-raw-noindex", "tapdeck-adaptive", "tapdeck-headers", "tcpdump", "dumpcap",
         "netsniff-ng"]
KINDS = ["64", "1514", "mix", "64-trafgen"]  # the last: 64-byte frames from trafgen, not tcpreplay

DATA_FILE = re.compile(r"\.pcap(ng)?(\.zst|\.lz4)?$")
PPS = None  # --pps: a fixed offered rate instead of the generator's top speed
LIVE = []  # Popen objects still running, killed on the way out


def log(*a):
    print("capture:", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Traffic files

def ip_checksum(hdr: bytes) -> int:
    s = sum(struct.unpack("!10H", hdr))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def frame_lengths(kind: str, n: int, rng: random.Random):
    if kind.isdigit():  # one fixed frame size
        return [int(kind)] * n
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.40:
            out.append(rng.randint(60, 64))
        elif r < 0.55:
            out.append(576)
        elif r < 0.90:
            out.append(rng.randint(1420, 1514))
        else:
            out.append(rng.randint(65, 1419))
    return out


def write_pcap(path: Path, kind: str, n: int):
    """n frames of Ethernet/IPv4/UDP, 198.18.x.y -> 198.19.x.y, payload: 8-byte sequence number,
    random bytes up to half the payload, zeros after. Classic pcap, microsecond timestamps."""
    rng = random.Random(f"tdbench-{kind}")
    lens = frame_lengths(kind, n, rng)
    rnd = os.urandom(sum(max(0, (L - 42) // 2) for L in lens) + 8)
    pos = 0
    parts = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    src_mac, dst_mac = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
    t0 = 1_700_000_000
    for i, L in enumerate(lens):
        plen = L - 42
        half = plen // 2
        payload = struct.pack("!Q", i)[: max(0, plen)]
        r = max(0, half - len(payload))
        payload += rnd[pos:pos + r]
        pos += r
        payload += bytes(plen - len(payload))
        flow = i % 4096
        src = bytes([198, 18, flow >> 8, flow & 255])
        dst = bytes([198, 19, (flow * 7 >> 8) & 255, (flow * 7) & 255])
        udp = struct.pack("!HHHH", 1024 + flow % 50000, 5001 + flow % 7, 8 + plen, 0)
        iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + plen, i & 0xFFFF, 0, 64, 17, 0, src, dst)
        iph = iph[:10] + struct.pack("!H", ip_checksum(iph)) + iph[12:]
        frame = dst_mac + src_mac + b"\x08\x00" + iph + udp + payload
        assert len(frame) == L
        parts.append(struct.pack("<IIII", t0 + i // 1_000_000, i % 1_000_000, L, L))
        parts.append(frame)
    path.write_bytes(b"".join(parts))
    return {"packets": n, "bytes": sum(lens), "mean_frame": sum(lens) / n}


# ---------------------------------------------------------------------------------------------
# Network namespace and veth pair

class Veth:
    """A namespace tdbench-<pid> with the generator's end of a veth pair; the capture end stays
    in the root namespace."""

    def __init__(self):
        pid = os.getpid()
        self.ns = f"tdbench-{pid}"
        self.cap = f"tdcap{pid}"[:15]   # root namespace, capture side
        self.gen = f"tdgen{pid}"[:15]   # inside the namespace, tcpreplay sends here
        self.lab = Lab()

    def up(self):
        self.lab.add_ns(self.ns)
        self.lab.pair(None, self.cap, self.ns, self.gen)
        return self

    def stat(self, name):
        return int(Path(f"/sys/class/net/{self.cap}/statistics/{name}").read_text())

    def down(self):
        self.lab.close()


# ---------------------------------------------------------------------------------------------
# Recorders

def recorder_cmd(tool: str, iface: str, out: Path):
    """(command, output path, ready marker in stderr+stdout or None)."""
    if tool == "tapdeck-raw":
        return [BIN, "record", "-i", iface, "--store", out, "--codec", "none", "--stats", out.with_suffix(".stats"),
                "--stats-interval", "1", "-q", "--log", "warn"], out, None
    if tool == "tapdeck-raw-noindex":  # the flow index's cost: tapdeck-raw without it
        return [BIN, "record", "-i", iface, "--store", out, "--codec", "none", "--no-flow-index", "--stats",
                out.with_suffix(".stats"), "--stats-interval", "1", "-q", "--log", "warn"], out, None
    if tool == "tapdeck-adaptive":
        return [BIN, "record", "-i", iface, "--store", out, "--stats", out.with_suffix(".stats"),
                "--stats-interval", "1", "-q", "--log", "warn"], out, None
    if tool == "tapdeck-headers":
        return [BIN, "record", "-i", iface, "--store", out, "--headers", "--stats", out.with_suffix(".stats"),
                "--stats-interval", "1", "-q", "--log", "warn"], out, None
    if tool == "tcpdump":
        f = out.with_suffix(".pcap")
        return ["tcpdump", "-i", iface, "-n", "-B", str(BUFFER_MIB * 1024), "-Z", "root", "-w", f], f, "listening on"
    if tool == "dumpcap":
        f = out.with_suffix(".pcapng")
        return ["dumpcap", "-i", iface, "-B", str(BUFFER_MIB), "-w", f], f, "Capturing on"
    if tool == "netsniff-ng":
        f = out.with_suffix(".pcap")
        return ["netsniff-ng", "--in", iface, "--out", f, "--silent", "--bind-cpu", REC_CPU, "--notouch-irq",
                "--ring-size", f"{BUFFER_MIB}MiB"], f, "Running"
    raise ValueError(tool)


def count_packets(path: Path) -> int:
    """Packets in a pcap/pcapng file, or in every data file of a tapdeck store, read back with
    Wireshark's capinfos (compressed files through the stock zstd/lz4 tools)."""
    files = sorted(p for p in path.iterdir() if DATA_FILE.search(p.name)) if path.is_dir() else [path]
    total = 0
    for f in files:
        if f.name.endswith(".zst") or f.name.endswith(".lz4"):
            dec = subprocess.Popen(["zstd" if f.name.endswith(".zst") else "lz4", "-dc", str(f)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            p = subprocess.run(["capinfos", "-c", "-M", "-"], stdin=dec.stdout, capture_output=True, text=True)
            dec.stdout.close()
            dec.wait()
        else:
            p = subprocess.run(["capinfos", "-c", "-M", str(f)], capture_output=True, text=True)
        m = re.search(r"Number of packets:\s+(\d+)", p.stdout)
        if not m:
            raise RuntimeError(f"capinfos could not count {f}: {p.stderr.strip()[-500:]}")
        if p.returncode != 0:
            log(f"warning: capinfos on {f.name}: {p.stderr.strip()[-300:]} (counted {m.group(1)})")
        total += int(m.group(1))
    return total


def output_bytes(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir() if DATA_FILE.search(p.name))
    return path.stat().st_size if path.exists() else 0


def parse_drops(tool: str, text: str, stats_file: Path):
    """Drops by cause as the tool reports them, plus whatever else it says it received."""
    d = {}
    if tool.startswith("tapdeck"):
        lines = stats_file.read_text().strip().splitlines() if stats_file.exists() else []
        final = json.loads(lines[-1]) if lines else {}
        if not final.get("final"):
            d["error"] = "no final stats record"
            return d, final, lines
        t = final["totals"]
        d.update({k: t["dropped"][k] for k in ("kernel", "staging_full", "write_error")})
        d["tool_seen"] = t["seen"]
        d["tool_stored"] = t["stored"]
        return d, final, lines
    if tool == "tcpdump":
        for key, pat in (("tool_captured", r"(\d+) packets? captured"),
                         ("tool_received_by_filter", r"(\d+) packets? received by filter"),
                         ("kernel", r"(\d+) packets? dropped by kernel"),
                         ("interface", r"(\d+) packets? dropped by interface")):
            m = re.search(pat, text)
            if m:
                d[key] = int(m.group(1))
    elif tool == "dumpcap":
        m = re.search(r"Packets received/dropped on interface '[^']*': (\d+)/(\d+) \(([^)]*)\)", text)
        if m:
            d["tool_received"] = int(m.group(1))
            d["dropped_total"] = int(m.group(2))
            for k, v in re.findall(r"(\w+):(\d+)", m.group(3)):
                d[k] = int(v)
        m = re.search(r"Packets captured: (\d+)", text)
        if m:
            d["tool_captured"] = int(m.group(1))
    elif tool == "netsniff-ng":
        for key, pat in (("tool_incoming", r"(\d+)\s+packets incoming"),
                         ("unread_on_exit", r"\((\d+) unread on exit\)"),
                         ("tool_passed", r"(\d+)\s+packets passed filter"),
                         ("out_of_space", r"(\d+)\s+packets failed filter \(out of space\)")):
            m = re.search(pat, text)
            if m:
                d[key] = int(m.group(1))
    return d, None, None


def drops_total(tool: str, d: dict) -> int:
    if tool.startswith("tapdeck"):
        return sum(d.get(k, 0) for k in ("kernel", "staging_full", "write_error"))
    if tool == "tcpdump":
        return d.get("kernel", 0) + d.get("interface", 0)
    if tool == "dumpcap":
        return d.get("dropped_total", 0)
    if tool == "netsniff-ng":
        return d.get("out_of_space", 0)
    return 0


def start(cmd, log_path: Path, cpu=REC_CPU):
    f = open(log_path, "w")
    p = subprocess.Popen(["taskset", "-c", cpu] + [str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT,
                         start_new_session=True)
    p._logfile = f
    LIVE.append(p)
    return p


def stop(p, timeout=120.0):
    """SIGINT, then wait4 for the exit: returns (returncode, user+sys CPU seconds, seconds to exit)."""
    t0 = time.monotonic()
    if p.poll() is None:
        os.kill(p.pid, signal.SIGINT)
    deadline = t0 + timeout
    status = rusage = None
    while True:
        pid, status, rusage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            log(f"warning: pid {p.pid} still running {timeout:.0f} s after SIGINT; killing it")
            os.kill(p.pid, signal.SIGKILL)
            _, status, rusage = os.wait4(p.pid, 0)
            break
        time.sleep(0.05)
    p.returncode = os.waitstatus_to_exitcode(status)
    p._logfile.close()
    LIVE.remove(p)
    return p.returncode, rusage.ru_utime + rusage.ru_stime, time.monotonic() - t0


def proc_cpu(pid):
    """user+system CPU seconds of a live process (all its threads, live and exited)."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(p, log_path: Path, marker, stats_file=None, limit=8.0, settle_limit=20.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if p.poll() is not None:
            raise RuntimeError(f"recorder exited early ({p.returncode}): {log_path.read_text()[-1500:]}")
        if marker and marker in log_path.read_text(errors="replace"):
            break
        if stats_file is not None and stats_file.exists() and stats_file.stat().st_size > 0:
            break
        time.sleep(0.1)
    else:
        log(f"warning: no ready sign from {log_path.name} after {limit:.0f} s; going on")
    # Then wait until start-up work is over (tapdeck touches its whole staging pool after it has
    # begun capturing): the recorder is ready once it uses < 5 % of a core over 0.5 s.
    t1 = time.monotonic()
    prev = proc_cpu(p.pid)
    while time.monotonic() - t1 < settle_limit:
        time.sleep(0.5)
        cur = proc_cpu(p.pid)
        if cur is None or prev is None or cur - prev < 0.025:
            break
        prev = cur
    else:
        log(f"warning: {log_path.name}: recorder still busy {settle_limit:.0f} s after start; going on")
    return time.monotonic() - t0


def tcpreplay(veth: Veth, pcap: Path, seconds: float, speed=None):
    """`speed`: tcpreplay's rate options (default: --pps from the command line, or top speed)."""
    speed = speed or ([f"--pps={PPS}"] if PPS else ["--topspeed"])
    cmd = ["ip", "netns", "exec", veth.ns, "taskset", "-c", GEN_CPU, "tcpreplay", *speed, "--preload-pcap",
           "--loop", "0", "--duration", str(int(round(seconds))), "--no-flow-stats", "-q", "-i", veth.gen, str(pcap)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = p.stdout + p.stderr
    m = re.search(r"Successful packets:\s+(\d+)", out)
    a = re.search(r"Actual: (\d+) packets \((\d+) bytes\) sent in ([\d.]+) seconds", out)
    f = re.search(r"Failed packets:\s+(\d+)", out)
    if not (m and a):
        raise RuntimeError(f"tcpreplay ({p.returncode}) said: {out.strip()[-1500:]}")
    return {"offered": int(m.group(1)), "actual": int(a.group(1)), "bytes": int(a.group(2)),
            "seconds": float(a.group(3)), "failed": int(f.group(1)) if f else 0}


def trafgen_config(size: int) -> str:
    """A trafgen packet of `size` bytes: Ethernet/IPv4/UDP, 198.18.0.1 -> 198.19.0.1, source
    port and first payload byte counting, random bytes to half the payload, zeros after."""
    payload = size - 42
    rnd = payload // 2 - 1
    return f"""{{
  eth(da=02:00:00:00:00:02, sa=02:00:00:00:00:01, type=0x0800),
  ipv4(sa=198.18.0.1, da=198.19.0.1, ttl=64),
  udp(sp=dinc(1024, 5119), dp=5001, csum=0),
  dinc(0, 255), drnd({rnd}), fill(0x00, {payload - 1 - rnd})
}}
"""


TRAFGEN_64 = trafgen_config(64)


def trafgen(veth: Veth, cfg: Path, seconds: float):
    """trafgen (netsniff-ng's generator, mmap'd TX ring) on one core for `seconds`, sending the
    frame of `cfg` (trafgen_config). Offered = trafgen's own "packets outgoing"."""
    cmd = ["ip", "netns", "exec", veth.ns, "timeout", "-s", "INT", str(seconds), "taskset", "-c", GEN_CPU,
           "trafgen", "--cpus", "1", "--notouch-irq", "--no-cpu-stats", *(["--rate", f"{PPS}pps"] if PPS else []),
           "-i", str(cfg), "-o", veth.gen]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    out = p.stdout + p.stderr
    m = re.search(r"(\d+)\s+packets outgoing\s+(\d+)\s+bytes outgoing", out)
    if not m:
        raise RuntimeError(f"trafgen ({p.returncode}) said: {out.strip()[-1500:]}")
    return {"offered": int(m.group(1)), "actual": int(m.group(1)), "bytes": int(m.group(2)),
            "seconds": wall, "failed": 0, "generator": "trafgen"}


def generate(veth: Veth, traffic: Path, seconds: float):
    if traffic.suffix == ".cfg":
        return trafgen(veth, traffic, seconds)
    return tcpreplay(veth, traffic, seconds)


def one_run(tool: str, kind: str, pcap: Path, veth: Veth, work: Path, seconds: float, burst=None):
    out = work / f"{tool}-{kind}"
    for p in work.glob(f"{tool}-{kind}*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    cmd, target, marker = recorder_cmd(tool, veth.cap, out)
    stats_file = out.with_suffix(".stats")
    log_path = work / f"{tool}-{kind}.log"
    rx0 = veth.stat("rx_packets")
    p = start(cmd, log_path)
    gens, windows = [], []
    try:
        ready_s = wait_ready(p, log_path, marker, stats_file if tool.startswith("tapdeck") else None)
        rx1, rxd1 = veth.stat("rx_packets"), veth.stat("rx_dropped")
        cpu_ready = proc_cpu(p.pid)
        t_start = time.monotonic()
        if burst:
            on, off, n = burst
            for i in range(n):
                w = {"start_ns": time.time_ns(), "rx0": veth.stat("rx_packets")}
                gens.append(generate(veth, pcap, on))
                time.sleep(off)
                w.update(end_ns=time.time_ns(), rx1=veth.stat("rx_packets"), offered=gens[-1]["offered"])
                windows.append(w)
        else:
            gens.append(generate(veth, pcap, seconds))
            time.sleep(0.5)  # let the last frames reach the ring
        gen_wall = time.monotonic() - t_start
        rx2, rxd2 = veth.stat("rx_packets"), veth.stat("rx_dropped")
        cpu_before_stop = proc_cpu(p.pid)
    finally:
        rc, cpu, exit_s = stop(p)
    text = log_path.read_text(errors="replace")
    if rc not in (0, 130, -2):
        log(f"warning: {tool} exited {rc}: {text.strip()[-500:]}")
    drops, final, lines = parse_drops(tool, text, stats_file)
    stored = count_packets(target)
    nbytes = output_bytes(target)
    active = sum(g["seconds"] for g in gens)
    r = {
        "tool": tool, "kind": kind, "returncode": rc,
        "offered": sum(g["offered"] for g in gens), "generator": gens,
        "received": rx2 - rx1, "received_during_startup": rx1 - rx0,
        "veth_rx_dropped": rxd2 - rxd1,
        "stored": stored, "drops": drops, "dropped_reported": drops_total(tool, drops),
        "cpu_s": cpu, "cpu_startup_s": cpu_ready, "ready_s": ready_s, "cpu_window_s": cpu_before_stop - cpu_ready,
        "cpu_stop_s": cpu - cpu_before_stop, "exit_s": exit_s, "gen_wall_s": gen_wall, "active_s": active,
        "bytes_written": nbytes, "mb_s_written": nbytes / gen_wall / 1e6,
    }
    r["stored_fraction"] = stored / r["received"] if r["received"] else 0.0
    # Main figure: CPU from the moment the recorder was ready to its exit (capture window plus
    # the flush after SIGINT), without its start-up; the whole-process figure is kept too.
    r["cpu_s_per_mpkt"] = (cpu - cpu_ready) / (stored / 1e6) if stored else None
    r["cpu_s_per_mpkt_whole_process"] = cpu / (stored / 1e6) if stored else None
    r["unaccounted"] = r["received"] + r["received_during_startup"] - stored - r["dropped_reported"]
    if tool.startswith("tapdeck") and final:
        r["tapdeck_final"] = {k: final.get(k) for k in ("totals", "cpu_seconds", "codecs", "bytes_written")}
        r["info_packets"] = tapdeck_info_packets(target)
        if r["info_packets"] != stored:
            log(f"warning: {tool}: tapdeck info says {r['info_packets']} packets, read back {stored}")
        if final["totals"]["stored"] != stored:
            log(f"warning: {tool}: final stats say stored {final['totals']['stored']}, read back {stored}")
    if burst:
        r["bursts"] = burst_fractions(windows, lines if tool.startswith("tapdeck") else None)
    # Outputs are large (GBs at 1514 B); keep only logs and stats.
    shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    return r


def tapdeck_info_packets(store: Path):
    p = sh([BIN, "info", store, "--json", "--log", "warn"], check=False)
    try:
        return json.loads(p.stdout)["totals"]["packets"]
    except (ValueError, KeyError):
        return None


def burst_fractions(windows, lines):
    """Per burst window (burst + idle after it): received from the interface counters; for
    tapdeck also stored and dropped from its 1-second stats lines (cumulative totals)."""
    recs = [json.loads(l) for l in lines] if lines else []

    def at(ns):  # last stats record written at or before ns
        best = None
        for rec in recs:
            if rec["ts_ns"] <= ns:
                best = rec
        return best

    out = []
    for i, w in enumerate(windows):
        row = {"burst": i + 1, "offered": w["offered"], "received": w["rx1"] - w["rx0"]}
        if recs:
            a = at(w["start_ns"])
            b = recs[-1] if i == len(windows) - 1 else at(w["end_ns"])
            ta = a["totals"] if a else {"seen": 0, "stored": 0, "dropped": {"kernel": 0, "staging_full": 0,
                                                                           "write_error": 0}}
            tb = b["totals"]
            # Packets are counted as stored when written, which with compression can be several
            # seconds after they arrived; what was kept of a burst is what tapdeck saw in it minus
            # what it dropped in it (drops are counted when they happen).
            row["stored_by_window_end"] = tb["stored"] - ta["stored"]
            row["seen"] = tb["seen"] - ta["seen"]
            row["dropped"] = {k: tb["dropped"][k] - ta["dropped"][k] for k in tb["dropped"]}
            row["stored"] = row["seen"] - sum(row["dropped"].values())
            row["stored_fraction"] = row["stored"] / row["received"] if row["received"] else None
            row["max_staging_fill"] = max((r.get("staging_fill", 0) for r in recs
                                           if w["start_ns"] <= r["ts_ns"] <= w["end_ns"]), default=None)
        out.append(row)
    return out


# ---------------------------------------------------------------------------------------------
# Report

def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def fmt(s, digits=1, scale=1.0):
    if s is None:
        return "–"
    a, b, c = s["median"] * scale, s["min"] * scale, s["max"] * scale
    if len(s["runs"]) == 1 or a == b == c:
        return f"{a:.{digits}f}"
    return f"{a:.{digits}f} ({b:.{digits}f}..{c:.{digits}f})"


def summarize(runs):
    """runs grouped by (kind, tool) -> spreads."""
    out = {}
    for r in runs:
        out.setdefault(r["kind"], {}).setdefault(r["tool"], []).append(r)
    summary = {}
    for kind, tools in out.items():
        summary[kind] = {}
        for tool, rs in tools.items():
            causes = sorted({k for r in rs for k, v in r["drops"].items()
                             if isinstance(v, int) and not k.startswith("tool_")})
            summary[kind][tool] = {
                "offered": spread(r["offered"] for r in rs), "received": spread(r["received"] for r in rs),
                "stored": spread(r["stored"] for r in rs), "stored_fraction": spread(r["stored_fraction"] for r in rs),
                "drops": {c: spread(r["drops"].get(c, 0) for r in rs) for c in causes},
                "unaccounted": spread(r["unaccounted"] for r in rs),
                "veth_rx_dropped": spread(r["veth_rx_dropped"] for r in rs),
                "cpu_s_per_mpkt": spread(r["cpu_s_per_mpkt"] for r in rs),
                "cpu_s_per_mpkt_whole_process": spread(r["cpu_s_per_mpkt_whole_process"] for r in rs),
                "cpu_startup_s": spread(r["cpu_startup_s"] for r in rs),
                "ready_s": spread(r["ready_s"] for r in rs),
                "mb_s_written": spread(r["mb_s_written"] for r in rs),
            }
    return summary


def disk_ceiling(work: Path, gib: int = 4) -> dict:
    """What the disk under test writes when nothing else runs: dd of `gib` GiB of zeros with
    O_DIRECT in 8 MiB blocks, fsync'd (the raw recorders cannot store faster than this)."""
    f = work / "dd-ceiling.bin"
    t0 = time.monotonic()
    p = sh(["dd", "if=/dev/zero", f"of={f}", "bs=8M", f"count={gib * 128}", "oflag=direct",
            "conv=fsync"], check=False)
    secs = time.monotonic() - t0
    f.unlink(missing_ok=True)
    if p.returncode != 0:
        return {"error": (p.stderr or "").strip()[-300:]}
    return {"bytes": gib << 30, "seconds": round(secs, 2), "mb_s": round((gib << 30) / secs / 1e6, 1)}


def markdown(res) -> str:
    m = [f"# Capture benchmark — {res['when']}", "",
         f"Machine: {res['machine']}. Command: `{res['command']}`.",
         f"{res['seconds']} s of generator time per run at "
         f"{('%d pps' % res['pps']) if res.get('pps') else 'top speed'} (tcpreplay, or trafgen where named; pinned to CPU {GEN_CPU}, inside namespace), "
         f"recorder pinned to CPU {REC_CPU}; {res['reps']} repetition(s), figures are median (min..max). "
         f"Each recorder gets a {BUFFER_MIB} MiB kernel buffer/ring. Received = rx_packets delta of the capture "
         f"veth while the generator ran; stored = packets read back from the output files (capinfos); "
         f"CPU = the recorder process's user+system time (/proc/PID/stat when ready, wait4 at exit) from the "
         f"moment it was ready until it exited, per million stored packets; the whole-process figure adds its "
         f"start-up (shown separately). The kernel's veth receive work, including the copy into each tool's "
         f"ring, runs in the sender's context and is charged to the generator's core, not to the recorder. Unaccounted = received (incl. startup) − stored − drops the tool reported.", ""]
    disk = res.get("disk_ceiling") or {}
    if disk:
        m += ["Disk ceiling (dd, 4 GiB of zeros, O_DIRECT, 8 MiB blocks, fsync; before and after the runs): "
              + ", ".join(f"{k} {v.get('mb_s', v.get('error'))} MB/s" for k, v in disk.items()), ""]
    if res.get("quick"):
        m += ["**Quick run (smoke test): short runs, one repetition — not a measurement.**", ""]
    for kind, tools in res["summary"].items():
        info = res["traffic"][kind]
        title = (f"## {kind} frames (mean {info['mean_frame']:.0f} B, {info['packets']} distinct packets looped "
                 f"by tcpreplay)" if info.get("packets") else
                 "## 64-byte frames from trafgen (top speed, one core; counter + random payload)")
        m += [title, "",
              "| tool | offered | received | stored | stored/received | drops by cause | unaccounted | "
              "CPU s per Mpkt stored | same, whole process | start-up CPU s / s to ready | MB/s written |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
        for tool, s in tools.items():
            drops = ", ".join(f"{c} {fmt(v, 0)}" for c, v in s["drops"].items()) or "–"
            m.append(f"| {tool} | {fmt(s['offered'], 0)} | {fmt(s['received'], 0)} | {fmt(s['stored'], 0)} | "
                     f"{fmt(s['stored_fraction'], 2, 100)} % | {drops} | {fmt(s['unaccounted'], 0)} | "
                     f"{fmt(s['cpu_s_per_mpkt'], 2)} | {fmt(s['cpu_s_per_mpkt_whole_process'], 2)} | "
                     f"{fmt(s['cpu_startup_s'], 2)} / {fmt(s['ready_s'], 1)} | {fmt(s['mb_s_written'], 1)} |")
        base = tools.get("tcpdump", {}).get("cpu_s_per_mpkt")
        if base:
            ratios = [f"{t} {s['cpu_s_per_mpkt']['median'] / base['median']:.2f}" for t, s in tools.items()
                      if s["cpu_s_per_mpkt"] and t != "tcpdump"]
            if ratios:
                m += ["", f"CPU per Mpkt stored relative to tcpdump (medians): {', '.join(ratios)}."]
        m.append("")
    if res.get("burst"):
        on, off, n = res["burst_schedule"]
        m += [f"## Bursts: {on} s at top speed, {off} s idle, {n} times ({res['burst_kind']} frames)", "",
              "For tapdeck per burst: stored = seen − dropped in the window (burst + idle after it), from the "
              "1-second stats lines; 'written by window end' shows the compression backlog.", "",
              "| tool | burst | offered | received | stored | stored/received | drops | written by window end | "
              "max staging fill |", "|---|---|---|---|---|---|---|---|---|"]
        for r in res["burst"]:
            for b in r["bursts"]:
                if "stored" in b:
                    m.append(f"| {r['tool']} | {b['burst']} | {b['offered']} | {b['received']} | {b['stored']} | "
                             f"{100 * (b['stored_fraction'] or 0):.2f} % | "
                             f"{', '.join(f'{k} {v}' for k, v in b['dropped'].items())} | {b['stored_by_window_end']} | "
                             f"{(b['max_staging_fill'] or 0):.3f} |")
                else:
                    m.append(f"| {r['tool']} | {b['burst']} | {b['offered']} | {b['received']} | – | – | – | – | – |")
            m.append(f"| {r['tool']} | **all** | {r['offered']} | {r['received']} | {r['stored']} | "
                     f"{100 * r['stored_fraction']:.2f} % | {r['dropped_reported']} | | |")
        m.append("")
    return "\n".join(m) + "\n"


def plot(res, path: Path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing (pip install matplotlib); no plot")
        return False
    kinds = list(res["summary"])
    tools = [t for t in TOOLS if any(t in res["summary"][k] for k in kinds)]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / max(1, len(tools))
    for i, t in enumerate(tools):
        xs, ys, lo, hi = [], [], [], []
        for j, k in enumerate(kinds):
            s = res["summary"][k].get(t, {}).get("stored_fraction")
            if s:
                xs.append(j + i * width)
                ys.append(100 * s["median"])
                lo.append(100 * (s["median"] - s["min"]))
                hi.append(100 * (s["max"] - s["median"]))
        ax.bar(xs, ys, width, yerr=[lo, hi], label=t, capsize=2)
    ax.set_xticks([j + width * (len(tools) - 1) / 2 for j in range(len(kinds))])
    ax.set_xticklabels([f"{k} B" if k.isdigit() else k for k in kinds])
    ax.set_ylabel("stored / received (%)")
    ax.set_ylim(0, 105)
    ax.set_title(f"Stored fraction, generator at top speed on a veth ({res['when']}{', quick' if res.get('quick') else ''})")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


# ---------------------------------------------------------------------------------------------

def on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="generator time per run")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="5 s runs, 1 rep, 50k-packet files, short bursts")
    ap.add_argument("--burst", action="store_true", help="also run the burst schedule (10 s on / 10 s off x 3)")
    ap.add_argument("--burst-kind", default="1514", choices=KINDS)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--pps", type=int, help="offer this many packets/s (tcpreplay --pps, trafgen --rate) "
                    "instead of top speed, so every tool sees the same load")
    ap.add_argument("--packets", type=int, default=200_000, help="distinct packets per traffic file")
    ap.add_argument("--work", type=Path, default=ROOT / "bench/work", help="where recorders write (the disk under test)")
    args = ap.parse_args()
    if args.quick:
        args.seconds = min(args.seconds, 5.0)
        args.reps = 1
        args.packets = min(args.packets, 50_000)
    burst = (3, 3, 3) if args.quick else (10, 10, 3)
    global PPS
    PPS = args.pps
    kinds = [k for k in args.kinds.split(",") if k]
    tools = [t for t in args.tools.split(",") if t]
    if os.geteuid() != 0:
        raise SystemExit("capture: run as root (namespaces, raw sockets)")
    need = {"tcpreplay": "tcpreplay", "trafgen": "netsniff-ng", "capinfos": "wireshark-common", "ethtool": "ethtool", "zstd": "zstd",
            "lz4": "lz4", "taskset": "util-linux"}
    need.update({t: t for t in tools if not t.startswith("tapdeck")})
    missing = [f"{b} ({pkg})" for b, pkg in need.items() if not shutil.which(b)]
    if missing:
        raise SystemExit(f"capture: missing {', '.join(missing)}; run scripts/setup.sh")
    if any(t.startswith("tapdeck") for t in tools) and not BIN.exists():
        raise SystemExit(f"capture: {BIN} missing; run scripts/setup.sh or set TAPDECK_BIN")
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("capture: needs two cores (generator and recorder pinned apart)")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    tmp = Path(tempfile.mkdtemp(prefix="tdbench-traffic-"))
    work = args.work / f"capture-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    veth = Veth()
    res = {
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{os.cpu_count()} cores, {os.uname().release}", "command": " ".join(sys.argv),
        "quick": args.quick, "seconds": args.seconds, "pps": args.pps, "reps": args.reps, "buffer_mib": BUFFER_MIB,
        "pinning": {"generator": GEN_CPU, "recorder": REC_CPU}, "traffic": {}, "runs": [],
        "versions": {},
    }
    for t, v in (("tcpreplay", ["tcpreplay", "--version"]), ("tcpdump", ["tcpdump", "--version"]),
                 ("dumpcap", ["dumpcap", "--version"]), ("netsniff-ng", ["netsniff-ng", "--version"]),
                 ("tapdeck", [BIN, "--version"])):
        p = sh(v, check=False) if shutil.which(str(v[0])) or Path(v[0]).exists() else None
        if p:
            res["versions"][t] = ((p.stdout or p.stderr).strip().splitlines() or [""])[0]
    try:
        veth.up()
        log(f"namespace {veth.ns}, capture interface {veth.cap}, generator end {veth.gen}")
        pcaps = {}
        for kind in sorted(set(kinds + ([args.burst_kind] if args.burst else []))):
            if kind == "64-trafgen":
                pcaps[kind] = tmp / "64-trafgen.cfg"
                pcaps[kind].write_text(TRAFGEN_64)
                res["traffic"][kind] = {"packets": None, "bytes": None, "mean_frame": 64, "generator": "trafgen"}
                continue
            pcaps[kind] = tmp / f"{kind}.pcap"
            res["traffic"][kind] = write_pcap(pcaps[kind], kind, args.packets)
            log(f"traffic {kind}: {res['traffic'][kind]['packets']} packets, {pcaps[kind].stat().st_size / 1e6:.0f} MB")
        if not args.quick:
            res["disk_ceiling"] = {"before": disk_ceiling(work)}
            log(f"disk ceiling before the runs: {res['disk_ceiling']['before']}")
        for rep in range(args.reps):
            for kind in kinds:
                for tool in tools:
                    log(f"rep {rep + 1}/{args.reps} {kind}: {tool} for {args.seconds:.0f} s")
                    try:
                        r = one_run(tool, kind, pcaps[kind], veth, work, args.seconds)
                    except (RuntimeError, OSError, ValueError) as e:
                        log(f"  run failed: {e}")
                        res.setdefault("failed", []).append({"tool": tool, "kind": kind, "rep": rep + 1,
                                                             "error": str(e)[-2000:]})
                        continue
                    r["rep"] = rep + 1
                    res["runs"].append(r)
                    log(f"  offered {r['offered']} received {r['received']} stored {r['stored']} "
                        f"({100 * r['stored_fraction']:.2f} %) drops {r['drops']} cpu {r['cpu_s']:.2f} s "
                        f"unaccounted {r['unaccounted']}")
        if args.burst:
            res["burst_schedule"] = burst
            res["burst_kind"] = args.burst_kind
            res["burst"] = []
            for tool in tools:
                log(f"burst {burst} {args.burst_kind}: {tool}")
                r = one_run(tool, args.burst_kind, pcaps[args.burst_kind], veth, work, 0, burst=burst)
                res["burst"].append(r)
        if not args.quick:
            res["disk_ceiling"]["after"] = disk_ceiling(work)
            log(f"disk ceiling after the runs: {res['disk_ceiling']['after']}")
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); cleaning up, writing what was measured")
        res["interrupted"] = True
    finally:
        for p in list(LIVE):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        veth.down()
        shutil.rmtree(tmp, ignore_errors=True)
        for p in work.iterdir() if work.exists() else []:
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
    res["summary"] = summarize(res["runs"])
    out = ROOT / "bench/results"
    out.mkdir(parents=True, exist_ok=True)
    stem = "capture-" + res["when"].replace(":", "").replace("-", "")
    (out / f"{stem}.json").write_text(json.dumps(res, indent=2) + "\n")
    md = markdown(res)
    (out / f"{stem}.md").write_text(md)
    png = plot(res, out / f"{stem}.png") if res["summary"] else False
    print(md)
    log(f"wrote {out / stem}.{{json,md{',png' if png else ''}}}; logs and tapdeck stats in {work}")


if __name__ == "__main__":
    main()
