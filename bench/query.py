#!/usr/bin/env python3
"""Query benchmark (issue 17): does the per-chunk flow index make filtered reads of a big store
fast, what does it cost in space and recorder CPU, and do queries against a live `serve` cost
capture any packets?

Parts (--parts, all by default):
  build    a synthetic trace of realistic per-host flows (>= 100 000 client hosts in
           198.18.0.0/15 talking to a few hundred servers in 192.0.2.0/24 and 198.51.100.0/24;
           each client active for a bounded span with a few TCP/UDP flows, port 443 carrying
           the largest share; payloads half random, half zeros; packet time advancing at a steady
           rate over --minutes) streamed from this script into `tapdeck record -r - --store S`
           (no source file is kept). One "rare" client sends a handful of packets at one moment.
  queries  over the whole store, each method timed cold (page cache dropped) and warm:
             rare host   `extract host RARE` vs `extract --no-index host RARE` vs
                         `zstd -dc FILE | tcpdump -r - host RARE` over every file;
             busy port   the same three with `tcp port 443`;
             window      a 1-minute window with a host filter: extract (indexed, --no-index)
                         with --start/--end; tcpdump over the files overlapping the window
                         (by their names' times), the window applied when the output is checked.
           Every method's packets are checked against the others and the generator's count
           (count and sha256 of the records, from one extra untimed run per method).
  index    flow index bytes (the FLOW extension of each file's chunk index, read from the
           trailers here) as a fraction of the store's compressed bytes.
  cpu      `record --synthetic 1514|64 --rate R --duration D` with and without --no-flow-index,
           alternating: stored fraction, CPU seconds per thread role (final stats record) and
           the process's user+system CPU (wait4).
  serve    `tapdeck serve` capturing a veth (tcpreplay --topspeed from a namespace, as
           capture.py) a slice of the same trace; ten concurrent GET /api/v1/packets while it
           captures, and the same ten again once the generator has stopped (the idle peer);
           drops from /api/v1/status and the final stats record.

Targets: (queries) the indexed rare-host extract >= 100x faster than the --no-index scan and
under 1 s; (index) flow index <= 1 % of the store; (cpu) no change in stored fraction and
<= 5 % more recorder CPU with the index; (serve) 0 drops.

Output: bench/results/query-<UTC time>.{json,md}; scratch in bench/work/query-<pid>/ (removed,
--keep keeps the store). Needs root (drop_caches, namespace). Usage:
    python3 bench/query.py [--quick] [--gb 10] [--hosts 100000] [--minutes 40] [--reps 3]
                           [--parts build,queries,index,cpu,serve]
"""

import argparse
import bisect
import datetime
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The namespace harness is shared with the end-to-end tests: tests/netlab.py.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from netlab import Lab, free_port, sh  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("TAPDECK_BIN", ROOT / "target/release/tapdeck"))
GEN_CPU, REC_CPU = "0", "1"
PARTS = ["build", "queries", "index", "cpu", "serve"]
LIVE = []  # Popen objects still running: stopped on the way out


def log(*a):
    print("query:", *a, file=sys.stderr, flush=True)


def on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


# ---------------------------------------------------------------------------------------------
# The trace

def ip_checksum(hdr: bytes) -> int:
    s = sum(struct.unpack("!10H", hdr))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ip4(a: str) -> bytes:
    return socket.inet_aton(a)


# Services: (name, proto, server port, share of flows, share of packets server->client,
# frame sizes client->server, frame sizes server->client). Sizes are drawn uniformly from the
# lists (repeats weight them). 443/tcp is the busy port.
SERVICES = [
    ("https", 6, 443, 0.50, 0.62, [66, 66, 66, 66, 120, 590], [1514, 1514, 1514, 1514, 1514, 590, 66]),
    ("http", 6, 80, 0.08, 0.60, [66, 66, 66, 410], [1514, 1514, 1514, 800, 66]),
    ("ssh", 6, 22, 0.04, 0.50, [66, 110, 110, 150], [66, 110, 150, 1514]),
    ("imaps", 6, 993, 0.04, 0.55, [66, 66, 150], [1514, 1514, 590, 66]),
    ("smtp", 6, 25, 0.02, 0.40, [1514, 1514, 590, 66], [66, 66, 120]),
    ("http-alt", 6, 8080, 0.04, 0.60, [66, 66, 410], [1514, 1514, 800, 66]),
    ("dns", 17, 53, 0.14, 0.50, [80, 90, 100], [130, 180, 260, 512]),
    ("ntp", 17, 123, 0.03, 0.50, [90], [90]),
    ("quic", 17, 4433, 0.07, 0.65, [80, 1294, 1294], [1294, 1294, 1294, 1294, 80]),
    ("sip", 17, 5060, 0.04, 0.50, [590, 800, 1000], [590, 800]),
]
MAC_C, MAC_S = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
RARE_ADDR = "198.19.255.250"  # kept out of the client pool
POOL = 64 << 20  # bytes of random payload, used in turn


def mean_frame() -> float:
    tot = 0.0
    for _n, _p, _port, share, down, up_sizes, down_sizes in SERVICES:
        tot += share * (down * statistics.mean(down_sizes) + (1 - down) * statistics.mean(up_sizes))
    return tot / sum(s[3] for s in SERVICES)


class Trace:
    """Realistic per-host flows, generated on the fly as classic pcap (nanosecond magic).

    `hosts` clients, each active for a span of about `span_s` (0.5..1.5 of it) starting at a
    uniform time, with 1-4 flows to servers; `servers` servers, chosen with a skew (a few are
    popular). Packet time advances by `total_s / packets` per packet, so the trace covers
    `total_s`; each packet goes to a uniformly chosen active client, one of its flows (weighted
    by the service's share), a direction and a size from the service's lists."""

    def __init__(self, target_bytes, hosts, total_s, servers=300, concurrency=1200, seed=17,
                 t0_ns=1_795_000_000_000_000_000):
        if hosts > 131_000:
            raise SystemExit("query: at most 131 000 hosts fit in 198.18.0.0/15")
        self.rng = random.Random(seed)
        self.target_bytes = target_bytes
        self.total_s = total_s
        self.t0_ns = t0_ns
        self.est_packets = int(target_bytes / mean_frame()) + 1
        self.step_ns = total_s * 1e9 / self.est_packets
        rng = self.rng
        rare_off = int.from_bytes(ip4(RARE_ADDR), "big") - int.from_bytes(ip4("198.18.0.0"), "big")
        offsets = [o for o in range(1, 131_071) if o != rare_off and o & 0xFF not in (0, 255)]
        rng.shuffle(offsets)
        base = int.from_bytes(ip4("198.18.0.0"), "big")
        addrs = [(base + o).to_bytes(4, "big") for o in offsets[:hosts]]
        self.servers = [ip4(f"192.0.2.{i}") for i in range(1, 255)] + \
                       [ip4(f"198.51.100.{i}") for i in range(1, 255)]
        self.servers = self.servers[:servers]
        span_mean = min(total_s, concurrency * total_s / hosts)
        shares = [s[3] for s in SERVICES]
        cum = [sum(shares[:i + 1]) / sum(shares) for i in range(len(shares))]
        clients = []
        for a in addrs:
            span = span_mean * rng.uniform(0.5, 1.5)
            start = rng.uniform(0, max(0.0, total_s - span))
            nflows = rng.choice((1, 2, 2, 3, 3, 4))
            flows = []
            for _ in range(nflows):
                svc = bisect.bisect_left(cum, rng.random())
                srv = self.servers[min(len(self.servers) - 1, int(len(self.servers) * rng.random() ** 3))]
                flows.append((svc, srv, rng.randint(32768, 60999)))
            # ten slots, filled in proportion to each flow's service share
            w = [SERVICES[f[0]][3] for f in flows]
            slots = []
            for i, f in enumerate(flows):
                slots += [i] * max(1, round(10 * w[i] / sum(w)))
            clients.append([start, start + span, a, flows, slots, None])
        clients.sort(key=lambda c: c[0])
        self.clients = clients
        # The rare host: one DNS exchange and a short TCP exchange at 37 % of the trace.
        self.rare_at = int(0.37 * self.est_packets)
        self.rare_addr = RARE_ADDR
        # The window query: the minute starting at the middle of the trace, and a client
        # active throughout it.
        mid = total_s / 2
        self.window = (mid, mid + 60.0)
        cand = [c for c in clients if c[0] <= mid and c[1] >= mid + 30]
        pick = cand[len(cand) // 2] if cand else clients[len(clients) // 2]
        self.window_host = socket.inet_ntoa(pick[2])
        self.truth = {"rare": 0, "port443": 0, "window": 0, "packets": 0, "bytes": 0}
        # Random bytes are taken from this pool in sequence, so nothing repeats within zstd's
        # window (a small pool reused at random offsets compresses ~3:1 instead of ~2:1).
        self.pool = memoryview(os.urandom(POOL + 2048))
        self.zeros = memoryview(bytes(1514))

    def header(self, client, flow, down, size):
        """Record lengths + frame headers (Ethernet/IPv4/TCP or UDP) for one size and direction."""
        svc, srv, cport = flow
        proto, sport_srv = SERVICES[svc][1], SERVICES[svc][2]
        src, dst = (srv, client) if down else (client, srv)
        sp, dp = (sport_srv, cport) if down else (cport, sport_srv)
        iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, size - 14, 0x1234, 0x4000, 64, proto, 0, src, dst)
        iph = iph[:10] + struct.pack("!H", ip_checksum(iph)) + iph[12:]
        if proto == 6:
            flags = 0x18 if size > 66 else 0x10
            l4 = struct.pack("!HHIIBBHHH", sp, dp, 1000, 2000, 0x50, flags, 65535, 0, 0)
        else:
            l4 = struct.pack("!HHHH", sp, dp, size - 34, 0)
        eth = (MAC_C + MAC_S) if down else (MAC_S + MAC_C)
        frame_hdr = eth + b"\x08\x00" + iph + l4
        return struct.pack("<II", size, size) + frame_hdr, size - len(frame_hdr)

    def write(self, out, max_packets=None, log_every=5.0, seen=None):
        """Writes the trace (or its first `max_packets` packets) to the binary file `out`.
        `seen`: a set to collect client addresses (dotted) of the first packets into."""
        rng = self.rng
        rnd = rng.random
        pool, zeros = self.pool, self.zeros
        off = 0
        clients = self.clients
        nxt = 0
        active = []
        out.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))
        i = 0
        nbytes = 0
        win_lo = self.t0_ns + int(self.window[0] * 1e9)
        win_hi = self.t0_ns + int(self.window[1] * 1e9)
        wh = ip4(self.window_host)
        batch = 4096
        t_log = time.monotonic()
        target = self.target_bytes
        limit = max_packets or 1 << 62
        pack_ts = struct.Struct("<II").pack
        truth = self.truth
        while nbytes < target and i < limit:
            t_s = i * self.step_ns / 1e9
            t_end = (i + batch) * self.step_ns / 1e9
            while nxt < len(clients) and clients[nxt][0] <= t_end:
                clients[nxt][5] = {}
                active.append(clients[nxt])
                nxt += 1
            if any(c[1] < t_s for c in active):
                active = [c for c in active if c[1] >= t_s]
            if not active:  # nobody yet: take the next client early
                clients[nxt][5] = {}
                active.append(clients[nxt])
                nxt += 1
            parts = []
            n_act = len(active)
            for _ in range(batch):
                ts = self.t0_ns + int(i * self.step_ns)
                if i == self.rare_at:
                    for k in range(6):
                        svc = 6 if k < 2 else 0
                        down = k % 2 == 1
                        size = (80, 180)[down] if svc == 6 else (66, 590, 66, 1514)[k - 2]
                        flow = (svc, self.servers[7], 40000 + (0 if svc == 6 else 1))
                        hdr, plen = self.header(ip4(self.rare_addr), flow, down, size)
                        half = plen // 2
                        off = 0 if off > POOL else off
                        t = ts + k * 1000
                        parts += (pack_ts(t // 1_000_000_000, t % 1_000_000_000), hdr,
                                  pool[off:off + half], zeros[:plen - half])
                        off += half
                        nbytes += size
                        truth["rare"] += 1
                        truth["packets"] += 1
                        if svc == 0:
                            truth["port443"] += 1
                    ts += 6000
                c = active[int(rnd() * n_act)]
                fi = c[4][int(rnd() * len(c[4]))]
                flow = c[3][fi]
                svc = SERVICES[flow[0]]
                down = rnd() < svc[4]
                sizes = svc[6] if down else svc[5]
                size = sizes[int(rnd() * len(sizes))]
                key = (fi, down, size)
                cached = c[5].get(key)
                if cached is None:
                    cached = c[5][key] = self.header(c[2], flow, down, size)
                hdr, plen = cached
                half = plen // 2
                if off > POOL:
                    off = 0
                parts += (pack_ts(ts // 1_000_000_000, ts % 1_000_000_000), hdr,
                          pool[off:off + half], zeros[:plen - half])
                off += half
                nbytes += size
                if svc[2] == 443:
                    truth["port443"] += 1
                if c[2] == wh and win_lo <= ts < win_hi:
                    truth["window"] += 1
                if seen is not None and len(seen) < 64:
                    seen.add(socket.inet_ntoa(c[2]))
                i += 1
                if nbytes >= target or i >= limit:
                    break
            out.write(b"".join(parts))
            if log_every and time.monotonic() - t_log > log_every:
                t_log = time.monotonic()
                log(f"  generated {nbytes / 1e9:.2f} of {target / 1e9:.2f} GB ({i} packets, "
                    f"{n_act} clients active)")
        truth["packets"] += i
        truth["bytes"] = nbytes
        truth["last_ts_ns"] = self.t0_ns + int((i - 1) * self.step_ns)
        return truth

    def describe(self):
        return {
            "hosts": len(self.clients), "servers": len(self.servers), "total_s": self.total_s,
            "t0_ns": self.t0_ns, "step_ns": self.step_ns, "mean_frame_expected": round(mean_frame(), 1),
            "rare_host": self.rare_addr, "rare_at_packet": self.rare_at,
            "window_host": self.window_host,
            "window_ns": [self.t0_ns + int(self.window[0] * 1e9), self.t0_ns + int(self.window[1] * 1e9)],
            "client_span_s_mean": statistics.mean(c[1] - c[0] for c in self.clients),
            "services": [{"name": s[0], "proto": s[1], "port": s[2], "flow_share": s[3]} for s in SERVICES],
        }


# ---------------------------------------------------------------------------------------------
# Helpers

def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def fmt(s, digits=2, scale=1.0, unit=""):
    if s is None:
        return "–"
    a, b, c = s["median"] * scale, s["min"] * scale, s["max"] * scale
    if len(s["runs"]) == 1 or a == b == c:
        return f"{a:.{digits}f}{unit}"
    return f"{a:.{digits}f}{unit} ({b:.{digits}f}..{c:.{digits}f})"


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def drop_caches():
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def data_files(store: Path):
    """The store's data files in time order, from `tapdeck info --json`."""
    info = json.loads(sh([BIN, "info", store, "--json", "--log", "warn"]).stdout)
    return info, [f for f in sorted(info["files"], key=lambda f: (f["first_ts_ns"], f["seq"]))]


class PcapDigest:
    """Count and sha256 of the packet records of one or more classic pcap streams (each file's
    24-byte header skipped), optionally only records in [lo, hi) ns."""

    def __init__(self, window=None):
        self.h = hashlib.sha256()
        self.packets = 0
        self.window = window

    def feed_stream(self, f):
        hdr = f.read(24)
        if len(hdr) < 24:
            return
        magic = struct.unpack("<I", hdr[:4])[0]
        if magic == 0xA1B2C3D4:
            raise RuntimeError("microsecond pcap where nanoseconds were asked for")
        if magic != 0xA1B23C4D:
            raise RuntimeError(f"not a little-endian nanosecond pcap (magic {magic:#x})")
        buf = b""
        while True:
            more = f.read(8 << 20)
            if not more and not buf:
                break
            buf = buf[0:] + more if buf else more
            pos, n = 0, len(buf)
            while pos + 16 <= n:
                sec, nsec, incl, _orig = struct.unpack_from("<IIII", buf, pos)
                end = pos + 16 + incl
                if end > n:
                    break
                if self.window:
                    t = sec * 1_000_000_000 + nsec
                    if not self.window[0] <= t < self.window[1]:
                        pos = end
                        continue
                self.h.update(buf[pos:end])
                self.packets += 1
                pos = end
            buf = buf[pos:]
            if not more:
                if buf:
                    raise RuntimeError(f"{len(buf)} bytes of a cut-off record at the end")
                break

    def result(self):
        return {"packets": self.packets, "sha256": self.h.hexdigest()}


# ---------------------------------------------------------------------------------------------
# Part: build

def build(args, work: Path, res: dict):
    store = work / "store"
    shutil.rmtree(store, ignore_errors=True)
    trace = Trace(int(args.gb * 1e9), args.hosts, args.minutes * 60.0, seed=args.seed)
    res["trace"] = trace.describe()
    log(f"build: {args.gb} GB, {args.hosts} hosts over {args.minutes} min of packet time "
        f"(~{trace.est_packets} packets) into {store}")
    cmd = [BIN, "record", "-r", "-", "--store", store, "--rotate-size", "1GiB", "--rotate-interval", "60",
           "-q", "--log", "warn"]
    rec_log = open(work / "record.log", "w")
    t0 = time.monotonic()
    p = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.PIPE, stdout=rec_log, stderr=rec_log)
    LIVE.append(p)
    gen_cpu0 = time.process_time()
    try:
        truth = trace.write(p.stdin)
        p.stdin.close()
    except BrokenPipeError:
        raise RuntimeError(f"record stopped reading: {(work / 'record.log').read_text()[-1500:]}")
    gen_cpu = time.process_time() - gen_cpu0
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    LIVE.remove(p)
    rec_log.close()
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"record -r - exited {p.returncode}: {(work / 'record.log').read_text()[-1500:]}")
    final = json.loads((store / "stats.jsonl").read_text().strip().splitlines()[-1])
    info, files = data_files(store)
    res["build"] = {
        "wall_s": wall, "generator_cpu_s": gen_cpu, "record_cpu_s": ru.ru_utime + ru.ru_stime,
        "truth": truth, "files": len(files), "chunks": sum(f["chunks"] for f in files),
        "store_packets": info["totals"]["packets"], "stored_bytes": info["totals"]["stored_bytes"],
        "record_final": {k: final.get(k) for k in ("totals", "bytes_written", "cpu_seconds", "codecs")},
    }
    if info["totals"]["packets"] != truth["packets"]:
        log(f"warning: the store holds {info['totals']['packets']} packets, generated {truth['packets']}")
    log(f"build: {truth['packets']} packets, {truth['bytes'] / 1e9:.2f} GB of frames in {wall:.0f} s; "
        f"store {info['totals']['stored_bytes'] / 1e9:.2f} GB in {len(files)} files, "
        f"{res['build']['chunks']} chunks")
    return store, trace


# ---------------------------------------------------------------------------------------------
# Part: queries

def iso(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def extract_cmd(store, q, out, no_index=False, explain=False):
    cmd = [BIN, "extract", store, "--format", "pcap", "-w", out, "--log", "warn"]
    if q.get("window"):
        cmd += ["--start", iso(q["window"][0]), "--end", iso(q["window"][1])]
    if no_index:
        cmd.append("--no-index")
    if explain:
        cmd.append("--explain")
    return [str(c) for c in cmd] + ["-f", q["filter"]]


def files_for(q, files):
    if not q.get("window"):
        return files
    lo, hi = q["window"]
    return [f for f in files if f["last_ts_ns"] >= lo and f["first_ts_ns"] < hi]


def run_tcpdump(store_files, q, sink):
    """`zstd -dc FILE | tcpdump -r - -w SINK FILTER` for each file in turn. `sink` is a path
    (/dev/null) or a callable that takes each tcpdump's stdout."""
    for f in store_files:
        path = f["path"]
        dec = ["zstd", "-dcq", path] if path.endswith(".zst") else (
            ["lz4", "-dcq", path] if path.endswith(".lz4") else ["cat", path])
        z = subprocess.Popen(dec, stdout=subprocess.PIPE)
        td = subprocess.Popen(["tcpdump", "--time-stamp-precision", "nano", "-r", "-", "-w",
                               "-" if callable(sink) else str(sink), q["filter"]],
                              stdin=z.stdout, stdout=subprocess.PIPE if callable(sink) else subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
        z.stdout.close()
        if callable(sink):
            sink(td.stdout)
            td.stdout.close()
        err = td.stderr.read().decode(errors="replace")
        td.wait()
        z.wait()
        if td.returncode != 0 or z.returncode != 0:
            raise RuntimeError(f"zstd ({z.returncode}) | tcpdump ({td.returncode}) on {path}: {err[-500:]}")


def timed(fn):
    c0, t0 = children_cpu(), time.monotonic()
    fn()
    return time.monotonic() - t0, children_cpu() - c0


def one_method(method, store, q, files):
    if method == "tcpdump":
        run_tcpdump(files_for(q, files), q, "/dev/null")
        return
    p = subprocess.run(extract_cmd(store, q, "/dev/null", no_index=(method == "no-index")),
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"extract ({method}) exited {p.returncode}: {p.stderr[-800:]}")


def digest_method(method, store, q, files):
    """One untimed run whose output is counted and hashed (time window applied for tcpdump)."""
    d = PcapDigest(window=q.get("window") if method == "tcpdump" else None)
    if method == "tcpdump":
        run_tcpdump(files_for(q, files), q, d.feed_stream)
    else:
        p = subprocess.Popen(extract_cmd(store, q, "-", no_index=(method == "no-index")),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        d.feed_stream(p.stdout)
        err = p.stderr.read().decode(errors="replace")
        p.wait()
        if p.returncode != 0:
            raise RuntimeError(f"extract ({method}) exited {p.returncode}: {err[-800:]}")
    return d.result()


EXPLAIN = re.compile(r"(\d+) of (\d+) chunks in the window read, (\d+) ruled out by the flow index")


def explain(store, q):
    p = subprocess.run(extract_cmd(store, q, "/dev/null", explain=True), capture_output=True, text=True)
    m = EXPLAIN.search(p.stderr)
    if not m:
        raise RuntimeError(f"extract --explain said nothing usable: {p.stderr[-800:]}")
    files_read = len(re.findall(r"explain: \S+: [1-9]\d* of \d+ chunks", p.stderr))
    return {"chunks_read": int(m.group(1)), "chunks_in_window": int(m.group(2)),
            "chunks_ruled_out": int(m.group(3)), "files_read": files_read}


def queries(args, store: Path, trace_info: dict, truth: dict, res: dict):
    info, files = data_files(store)
    total_chunks = sum(f["chunks"] for f in files)
    qs = [
        {"name": "rare host", "filter": f"host {trace_info['rare_host']}", "expect": truth.get("rare")},
        {"name": "busy port", "filter": "tcp port 443", "expect": truth.get("port443")},
        {"name": "1-minute window, one host", "filter": f"host {trace_info['window_host']}",
         "window": trace_info["window_ns"], "expect": truth.get("window")},
    ]
    methods = ["indexed", "no-index", "tcpdump"]
    out = []
    for q in qs:
        q["explain"] = explain(store, q)
        q["chunks_total"] = total_chunks
        q["chunk_fraction"] = q["explain"]["chunks_read"] / max(1, total_chunks)
        log(f"queries: {q['name']} ({q['filter']}): {q['explain']['chunks_read']} of {total_chunks} chunks "
            f"({100 * q['chunk_fraction']:.2f} %)")
        q["digest"] = {m: digest_method(m, store, q, files) for m in methods}
        ds = {(d["packets"], d["sha256"]) for d in q["digest"].values()}
        q["same_packets"] = len(ds) == 1
        q["packets"] = q["digest"]["indexed"]["packets"]
        q["matches_generator"] = q["expect"] is None or q["packets"] == q["expect"]
        if not q["same_packets"] or not q["matches_generator"]:
            log(f"warning: {q['name']}: methods disagree or differ from the generator: "
                f"{ {m: d['packets'] for m, d in q['digest'].items()} }, expected {q['expect']}")
        q["runs"] = {m: {"cold": [], "warm": []} for m in methods}
        out.append(q)
    for rep in range(args.reps):
        for q in out:
            for m in methods:
                for state in ("cold", "warm"):
                    if state == "cold":
                        drop_caches()
                    wall, cpu = timed(lambda: one_method(m, store, q, files))
                    q["runs"][m][state].append({"wall_s": wall, "cpu_s": cpu})
                log(f"queries: rep {rep + 1} {q['name']} {m}: cold {q['runs'][m]['cold'][-1]['wall_s']:.3f} s, "
                    f"warm {q['runs'][m]['warm'][-1]['wall_s']:.3f} s")
    for q in out:
        q["summary"] = {m: {st: {"wall_s": spread(r["wall_s"] for r in q["runs"][m][st]),
                                 "cpu_s": spread(r["cpu_s"] for r in q["runs"][m][st])}
                            for st in ("cold", "warm")} for m in methods}
        # Ratios pair by pair within a repetition: scan time / indexed time.
        q["speedup"] = {}
        for peer in ("no-index", "tcpdump"):
            q["speedup"][peer] = {st: spread(b["wall_s"] / max(1e-9, a["wall_s"]) for a, b in
                                             zip(q["runs"]["indexed"][st], q["runs"][peer][st]))
                                  for st in ("cold", "warm")}
    res["queries"] = out


# ---------------------------------------------------------------------------------------------
# Part: index size

def trailer_sizes(path: Path):
    """(flow index bytes, chunk index frame bytes, seek table bytes, entries) of one stored file,
    read from its trailer (docs/store-format.md; the FLOW extension of chunk index version 2,
    crates/pcap/src/container.rs). A plain file keeps its trailer in NAME.idx."""
    src = path if path.suffix in (".zst", ".lz4") else Path(str(path) + ".idx")
    with open(src, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(size - 9)
        n, _desc, magic = struct.unpack("<IBI", f.read(9))
        if magic != 0x8F92EAB1:
            raise RuntimeError(f"{src}: no seek table footer")
        seek_len = 8 + 8 * n + 9
        f.seek(size - seek_len)
        sk_magic, _ = struct.unpack("<II", f.read(8))
        if sk_magic != 0x184D2A5E:
            raise RuntimeError(f"{src}: no seek table")
        comp = struct.unpack(f"<{2 * n}I", f.read(8 * n))[0::2]
        index_at = sum(comp) if src == path else 0
        f.seek(index_at)
        im, blen = struct.unpack("<II", f.read(8))
        if im != 0x184D2A5B or index_at + 8 + blen + seek_len != size:
            raise RuntimeError(f"{src}: chunk index not where the seek table says")
        body = f.read(blen)
    assert body[:4] == b"TDCI"
    version = struct.unpack_from("<H", body, 4)[0]
    meta_len = struct.unpack_from("<I", body, 8)[0]
    pos = 12 + meta_len
    count = struct.unpack_from("<I", body, pos)[0]
    pos += 4 + 48 * count
    flow = summary = 0
    if version >= 2:
        # Version 2: one extension (FLOW); version 3: two (FLOW, then the file's SUMM).
        ext = struct.unpack_from("<I", body, pos)[0]
        if ext != version - 1:
            raise RuntimeError(f"{src}: {ext} chunk index extensions in version {version}")
        pos += 4
        for want in (b"FLOW", b"SUMM")[:ext]:
            tag = body[pos:pos + 4]
            ln = struct.unpack_from("<I", body, pos + 4)[0]
            if tag != want:
                raise RuntimeError(f"{src}: chunk index extension {tag!r}, expected {want!r}")
            if want == b"FLOW":
                flow = 12 + ln  # extension count, tag, length, body
            else:
                summary = 8 + ln  # tag, length, body
            pos += 8 + ln
    return {"flow_bytes": flow, "summary_bytes": summary, "index_frame_bytes": 8 + blen,
            "seek_table_bytes": seek_len, "entries": count, "version": version}


def index_size(store: Path, res: dict):
    info, files = data_files(store)
    per = [trailer_sizes(Path(f["path"])) for f in files]
    stored = sum(f["stored_bytes"] for f in files)
    flow = sum(p["flow_bytes"] for p in per)
    res["index"] = {
        "files": len(files), "stored_bytes": stored, "flow_bytes": flow,
        "chunk_index_bytes": sum(p["index_frame_bytes"] for p in per),
        "seek_table_bytes": sum(p["seek_table_bytes"] for p in per),
        "flow_fraction": flow / max(1, stored),
        "flow_bytes_per_chunk": flow / max(1, sum(f["chunks"] for f in files)),
        "files_without_flow_index": sum(1 for p in per if p["flow_bytes"] == 0),
        "capture_bytes": res.get("build", {}).get("truth", {}).get("bytes"),
    }
    log(f"index: flow index {flow / 1e6:.2f} MB = {100 * flow / max(1, stored):.3f} % of {stored / 1e9:.2f} GB")


# ---------------------------------------------------------------------------------------------
# Part: recorder CPU with and without the flow index

CPU_CODECS = {"ladder": [], "none": ["--codec", "none"]}


def record_synthetic(work: Path, frame: int, pps: int, seconds: float, index: bool, codec: str):
    store = work / "cpu-store"
    shutil.rmtree(store, ignore_errors=True)
    cmd = [BIN, "record", "--synthetic", str(frame), "--rate", str(pps), "--duration", str(seconds),
           "--store", store, "--staging", "256MiB", "--stats-interval", "1", "-q", "--log", "warn",
           *CPU_CODECS[codec]]
    if not index:
        cmd.append("--no-flow-index")
    c0, t0 = children_cpu(), time.monotonic()
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    wall, cpu = time.monotonic() - t0, children_cpu() - c0
    if p.returncode != 0:
        raise RuntimeError(f"record --synthetic exited {p.returncode}: {p.stderr[-800:]}")
    final = json.loads((store / "stats.jsonl").read_text().strip().splitlines()[-1])
    flow = sum(trailer_sizes(f)["flow_bytes"] for f in store.iterdir()
               if re.search(r"\.pcapng(\.zst|\.lz4)?$", f.name))
    shutil.rmtree(store, ignore_errors=True)
    t = final["totals"]
    return {"index": index, "stored_fraction": t["stored"] / max(1, t["seen"]), "seen": t["seen"],
            "stored": t["stored"], "captured_bytes": t["captured_bytes"], "dropped": t["dropped"],
            "bytes_written": final["bytes_written"], "cpu_seconds": final["cpu_seconds"],
            "process_cpu_s": cpu, "wall_s": wall, "flow_bytes": flow,
            "codecs": {k: v.get("bytes_in") for k, v in final.get("codecs", {}).items()}}


def cpu_part(args, work: Path, res: dict):
    loads = args.loads
    rows = []
    for (frame, pps), codec in ((ld, c) for ld in loads for c in CPU_CODECS):
        row = {"frame": frame, "pps": pps, "codec": codec, "seconds": args.cpu_seconds, "on": [], "off": []}
        for rep in range(args.reps):
            order = (True, False) if rep % 2 == 0 else (False, True)
            for index in order:
                r = record_synthetic(work, frame, pps, args.cpu_seconds, index, codec)
                row["on" if index else "off"].append(r)
                log(f"cpu: {frame} B {pps} pps {codec} index {'on' if index else 'off'}: stored "
                    f"{100 * r['stored_fraction']:.2f} %, process CPU {r['process_cpu_s']:.2f} s, "
                    f"roles {r['cpu_seconds']}")
        for k in ("on", "off"):
            rs = row[k]
            row[k + "_summary"] = {
                "stored_fraction": spread(r["stored_fraction"] for r in rs),
                "process_cpu_s": spread(r["process_cpu_s"] for r in rs),
                "process_cpu_s_per_gb": spread(r["process_cpu_s"] / (r["captured_bytes"] / 1e9) for r in rs),
                "roles": {role: spread(r["cpu_seconds"].get(role, 0.0) for r in rs)
                          for role in sorted({x for r in rs for x in r["cpu_seconds"]})},
                "flow_bytes_fraction": spread(r["flow_bytes"] / max(1, r["bytes_written"]) for r in rs),
            }
        row["cpu_ratio"] = spread(a["process_cpu_s"] / max(1e-9, b["process_cpu_s"])
                                  for a, b in zip(row["on"], row["off"]))
        # The threads' own figures leave out start-up (the staging pool being touched), which
        # dominates short runs.
        row["roles_ratio"] = spread(sum(a["cpu_seconds"].values()) / max(1e-9, sum(b["cpu_seconds"].values()))
                                    for a, b in zip(row["on"], row["off"]))
        # The roles that index (the compressors, and the writer for chunks stored raw): their
        # growth against the whole recorder, without the capture thread's noise (it never
        # indexes) or start-up's.
        indexing = lambda r: sum(r["cpu_seconds"].get(k, 0.0) for k in ("compress", "writer"))  # noqa: E731
        row["indexing_roles_share"] = spread((indexing(a) - indexing(b)) / max(1e-9, b["process_cpu_s"])
                                             for a, b in zip(row["on"], row["off"]))
        row["index_cpu_s_per_gb"] = spread((a["process_cpu_s"] - b["process_cpu_s"]) / (a["captured_bytes"] / 1e9)
                                           for a, b in zip(row["on"], row["off"]))
        row["stored_fraction_delta"] = spread(a["stored_fraction"] - b["stored_fraction"]
                                              for a, b in zip(row["on"], row["off"]))
        rows.append(row)
    res["cpu"] = rows


# ---------------------------------------------------------------------------------------------
# Part: serve under load with concurrent queries

def http_get(port, path, timeout=120.0):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            n = 0
            while True:
                b = r.read(1 << 20)
                if not b:
                    break
                n += len(b)
            return r.status, n, time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, len(e.read()), time.monotonic() - t0


def status_doc(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/status", timeout=10) as r:
        return json.loads(r.read())


def concurrent_queries(port, filters, window):
    """GET /api/v1/packets for every filter at once (ten threads), each over `window`
    (start, end in epoch seconds)."""
    results = [None] * len(filters)

    def one(i, flt):
        qs = urllib.parse.urlencode({"start": f"{window[0]:.3f}", "end": f"{window[1]:.3f}",
                                     "filter": flt, "format": "pcap"})
        try:
            results[i] = dict(zip(("status", "bytes", "seconds"), http_get(port, f"/api/v1/packets?{qs}")),
                              filter=flt)
        except Exception as e:  # noqa: BLE001 (a broken answer is a result too)
            results[i] = {"status": None, "error": repr(e), "filter": flt, "seconds": None, "bytes": 0}

    ts = [threading.Thread(target=one, args=(i, f)) for i, f in enumerate(filters)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return {"window": list(window), "wall_s": time.monotonic() - t0, "queries": results}


def serve_part(args, work: Path, res: dict):
    tag = os.getpid()
    ns, gen_if, cap_if = f"tdquery{tag}", f"tdqg{tag}"[:15], f"tdqc{tag}"[:15]
    lab = Lab()
    res["serve"] = {"netns": ns}
    slice_pcap = work / "slice.pcap"
    seen = set()
    tr = Trace(int(args.slice_packets * mean_frame()), min(args.hosts, 5000), 60.0, seed=args.seed + 1)
    with open(slice_pcap, "wb") as f:
        tr.write(f, max_packets=args.slice_packets, log_every=0, seen=seen)
    hosts = sorted(seen)[:9]
    filters = [f"host {h}" for h in hosts] + ["tcp port 443"]
    res["serve"]["filters"] = filters
    res["serve"]["slice_packets"] = args.slice_packets
    store = work / "serve-store"
    shutil.rmtree(store, ignore_errors=True)
    port = free_port()
    cfg = work / "serve.toml"
    cfg.write_text(f"""\
# bench/query.py: serve at the capture benchmark's top load, ten queries at once
interface = ["{cap_if}"]
store = "{store}"
max-bytes = "{args.serve_max_bytes}"
min-keep = 0
min-free = "0"
rotate-size = "256MiB"
stats-interval = 1.0
stats = "{work / 'serve-stats.jsonl'}"
quiet = true
listen = "127.0.0.1:{port}"
log-level = "warn"
query-max-concurrent = 10
""")
    res["serve"]["config"] = cfg.read_text()
    serve = gen = None
    try:
        lab.add_ns(ns)
        lab.pair(ns, gen_if, None, cap_if)
        serve_log = open(work / "serve.log", "w")
        serve = subprocess.Popen([str(BIN), "serve", "--config", str(cfg)], stdout=serve_log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        LIVE.append(serve)
        deadline = time.monotonic() + 30
        while True:
            if serve.poll() is not None:
                raise RuntimeError(f"serve exited {serve.returncode}: {(work / 'serve.log').read_text()[-1500:]}")
            try:
                doc = status_doc(port)
                if doc["health"]["phase"] == "recording" and "stats" in doc:
                    break
            except (OSError, ValueError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("serve not recording after 30 s")
            time.sleep(0.2)
        time.sleep(2.0)  # let start-up work settle (capture.py waits for < 5 % of a core)
        st0 = status_doc(port)["stats"]["totals"]
        rx0 = lab.rx(None, cap_if)
        # The generator runs until the queries are done (and at least --serve-seconds), then
        # gets SIGINT (tcpreplay prints its counts then).
        gen_cmd = ["ip", "netns", "exec", ns, "taskset", "-c", GEN_CPU, "tcpreplay", "--topspeed",
                   "--preload-pcap", "--loop", "0", "--duration", "3600", "--no-flow-stats",
                   "-q", "-i", gen_if, str(slice_pcap)]
        gen = subprocess.Popen(gen_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
        LIVE.append(gen)
        t_gen = time.monotonic()
        time.sleep(min(5.0, args.serve_seconds / 3))
        rounds = []
        while not rounds or time.monotonic() - t_gen < args.serve_seconds - 1:
            now = time.time()
            rounds.append(concurrent_queries(port, filters, (now - args.query_back, now)))
            log(f"serve: round {len(rounds)}: ten queries under load took {rounds[-1]['wall_s']:.2f} s")
            if gen.poll() is not None:
                raise RuntimeError(f"tcpreplay stopped early: {gen.communicate()[0][-800:]}")
        st_mid = status_doc(port)["stats"]["totals"]
        time.sleep(max(0.0, args.serve_seconds - (time.monotonic() - t_gen)))
        t_stop = time.time()
        os.killpg(gen.pid, signal.SIGINT)
        try:
            gen_out = gen.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            os.killpg(gen.pid, signal.SIGKILL)
            gen_out = gen.communicate()[0]
        LIVE.remove(gen)
        m = re.search(r"Successful packets:\s+(\d+)", gen_out)
        a = re.search(r"Actual: (\d+) packets \((\d+) bytes\) sent in ([\d.]+) seconds", gen_out)
        if not (m and a):
            log(f"warning: no counts from tcpreplay: {gen_out.strip()[-500:]}")
        time.sleep(1.0)
        rx1 = lab.rx(None, cap_if)
        # The idle peer: the same ten over an equally long window of the same load (the last
        # seconds before the generator stopped: retention may have deleted the first round's),
        # with nothing being captured.
        idle = concurrent_queries(port, filters, (t_stop - 1 - args.query_back, t_stop - 1))
        st1 = status_doc(port)["stats"]["totals"]
        os.kill(serve.pid, signal.SIGTERM)
        _, status, ru = os.wait4(serve.pid, 0)
        serve.returncode = os.waitstatus_to_exitcode(status)
        LIVE.remove(serve)
        serve_log.close()
        final = json.loads((work / "serve-stats.jsonl").read_text().strip().splitlines()[-1])
        res["serve"].update({
            "offered": int(m.group(1)) if m else None,
            "generator_pps": int(a.group(1)) / float(a.group(3)) if a else None,
            "generator_mb_s": int(a.group(2)) / float(a.group(3)) / 1e6 if a else None,
            "received": rx1["packets"] - rx0["packets"], "veth_rx_dropped": rx1["dropped"] - rx0["dropped"],
            "status_before": st0, "status_mid": st_mid, "status_after": st1,
            "drops_during_run": {k: st1["dropped"][k] - st0["dropped"][k] for k in st1["dropped"]},
            "final_totals": final.get("totals"), "final": bool(final.get("final")),
            "serve_exit": serve.returncode, "serve_cpu_s": ru.ru_utime + ru.ru_stime,
            "rounds": rounds, "loaded": rounds[0], "idle": idle,
        })
        res["serve"]["drops_total"] = sum(final["totals"]["dropped"].values())
        log(f"serve: received {res['serve']['received']}, drops {final['totals']['dropped']}, "
            f"loaded {rounds[0]['wall_s']:.2f} s, idle {idle['wall_s']:.2f} s")
    finally:
        for p in (gen, serve):
            if p is not None and p in LIVE:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                    os.waitpid(p.pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
                LIVE.remove(p)
        lab.close()
        shutil.rmtree(store, ignore_errors=True)
        slice_pcap.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# Report

def verdict(ok):
    return "**pass**" if ok else "**MISS**"


def markdown(res) -> str:
    m = [f"# Query benchmark — {res['when']}", "",
         f"Machine: {res['machine']}. Command: `{res['command']}`. Load average before: {res['load_before']}, "
         f"after: {res.get('load_after')}. {res['reps']} repetition(s); figures are median (min..max).", ""]
    if res.get("quick"):
        m += ["**Quick run (smoke test): a small store, one repetition — not a measurement.** "
              "The rare-host chunk fraction cannot be below 1 % with fewer than 100 chunks.", ""]
    targets = []
    tr, b = res.get("trace"), res.get("build")
    if b:
        t = b["truth"]
        m += ["## The store", "",
              f"{t['packets']:,} packets, {t['bytes'] / 1e9:.2f} GB of frames (mean {t['bytes'] / t['packets']:.0f} B), "
              f"{tr['hosts']:,} client hosts and {tr['servers']} servers over {tr['total_s'] / 60:.0f} min of packet "
              f"time (clients active {tr['client_span_s_mean']:.0f} s on average). Recorded by `record -r -` "
              f"(rotate 1 GiB / 60 s) in {b['wall_s']:.0f} s (generator {b['generator_cpu_s']:.0f} CPU s, "
              f"recorder {b['record_cpu_s']:.0f} CPU s): {b['files']} files, {b['chunks']} chunks, "
              f"{b['stored_bytes'] / 1e9:.2f} GB stored ({t['bytes'] / max(1, b['stored_bytes']):.2f}:1). "
              f"Rare host {tr['rare_host']} ({t['rare']} packets at one moment); window host "
              f"{tr['window_host']}.", ""]
    if res.get("queries"):
        m += ["## Queries over the whole store", "",
              "Seconds of wall time (CPU seconds of all child processes in the second table). Cold: after "
              "`sync; echo 3 > /proc/sys/vm/drop_caches`; warm: the same run again at once. Outputs go to "
              "/dev/null when timed; each method's packets are counted and hashed in one extra run "
              "(tcpdump: `zstd -dc FILE | tcpdump --time-stamp-precision nano -r - -w -` per file; for the "
              "window only the files whose times overlap it, the window applied when hashing). "
              "Speed-up = the peer's time / the indexed extract's time, pair by pair.", "",
              "| query | filter | chunks read (of all) | packets | all methods same | indexed cold | indexed warm | "
              "--no-index cold | --no-index warm | tcpdump cold | tcpdump warm | vs --no-index cold / warm | "
              "vs tcpdump cold / warm |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for q in res["queries"]:
            s, sp = q["summary"], q["speedup"]
            e = q["explain"]
            m.append(
                f"| {q['name']} | `{q['filter']}`{' + 60 s window' if q.get('window') else ''} | "
                f"{e['chunks_read']} of {q['chunks_total']} ({100 * q['chunk_fraction']:.2f} %) | {q['packets']:,}"
                f"{'' if q['matches_generator'] else ' (generator: %s!)' % q['expect']} | "
                f"{'yes' if q['same_packets'] else 'NO'} | "
                + " | ".join(fmt(s[meth][st]["wall_s"], 3, unit=" s") for meth in ("indexed", "no-index", "tcpdump")
                             for st in ("cold", "warm"))
                + f" | {fmt(sp['no-index']['cold'], 1, unit='×')} / {fmt(sp['no-index']['warm'], 1, unit='×')} | "
                f"{fmt(sp['tcpdump']['cold'], 1, unit='×')} / {fmt(sp['tcpdump']['warm'], 1, unit='×')} |")
        m += ["", "| query | indexed CPU cold / warm | --no-index CPU cold / warm | tcpdump (+zstd) CPU cold / warm |",
              "|---|---|---|---|"]
        for q in res["queries"]:
            s = q["summary"]
            m.append(f"| {q['name']} | " + " | ".join(
                f"{fmt(s[meth]['cold']['cpu_s'], 2, unit=' s')} / {fmt(s[meth]['warm']['cpu_s'], 2, unit=' s')}"
                for meth in ("indexed", "no-index", "tcpdump")) + " |")
        m.append("")
        rare = next(q for q in res["queries"] if q["name"] == "rare host")
        sp = rare["speedup"]["no-index"]
        ok_speed = sp["cold"]["median"] >= 100 and sp["warm"]["median"] >= 100
        t_cold = rare["summary"]["indexed"]["cold"]["wall_s"]["median"]
        t_warm = rare["summary"]["indexed"]["warm"]["wall_s"]["median"]
        targets += [
            ("rare host: indexed ≥ 100× faster than the --no-index scan",
             f"{sp['cold']['median']:.1f}× cold, {sp['warm']['median']:.1f}× warm", ok_speed),
            ("rare host: indexed under 1 s", f"{t_cold:.3f} s cold, {t_warm:.3f} s warm", max(t_cold, t_warm) < 1.0),
            ("rare host in < 1 % of chunks (benchmark's premise)",
             f"{rare['explain']['chunks_read']} of {rare['chunks_total']} = {100 * rare['chunk_fraction']:.2f} %",
             rare["chunk_fraction"] < 0.01),
            ("every method gives the same packets (and the generator's count)",
             ", ".join(f"{q['name']}: {'yes' if q['same_packets'] and q['matches_generator'] else 'NO'}"
                       for q in res["queries"]),
             all(q["same_packets"] and q["matches_generator"] for q in res["queries"])),
        ]
    if res.get("index"):
        ix = res["index"]
        m += ["## Index size", "",
              f"Flow index (the FLOW extension of each file's chunk index, read from the trailers): "
              f"{ix['flow_bytes'] / 1e6:.3f} MB in {ix['files']} files = **{100 * ix['flow_fraction']:.3f} %** of the "
              f"{ix['stored_bytes'] / 1e9:.3f} GB store ({ix['flow_bytes_per_chunk']:.0f} B per chunk"
              + (f"; {100 * ix['flow_bytes'] / ix['capture_bytes']:.3f} % of the capture data" if ix.get("capture_bytes") else "")
              + f"). Whole chunk index frames (48 B entries, metadata, flow index): {ix['chunk_index_bytes'] / 1e6:.3f} MB; "
              f"seek tables {ix['seek_table_bytes'] / 1e6:.3f} MB. Files without a flow index: "
              f"{ix['files_without_flow_index']}.", ""]
        targets.append(("flow index ≤ 1 % of the store", f"{100 * ix['flow_fraction']:.3f} %", ix["flow_fraction"] <= 0.01))
    if res.get("cpu"):
        m += ["## Index build cost inside the recorder", "",
              "`record --synthetic F --rate R --duration D` onto the work directory, with the flow index (on) and "
              "with `--no-flow-index` (off), alternating. CPU = the process's user+system seconds (wait4); "
              "threads' CPU = the sum of the final stats record's `cpu_seconds` per role (no start-up); indexing "
              "roles' growth = (compress + writer CPU on − off) / process CPU off, pair by pair (the capture thread "
              "never indexes, so its noise is left out); index CPU "
              "per GB = (process CPU on − off) / GB of capture data, pair by pair. Staging 256 MiB. Two codec "
              "settings: the default ladder (what a recorder runs; its rung choice follows the CPU left over, so "
              "on a busy machine it can differ between the two runs: the JSON has bytes per rung) and `--codec "
              "none` (no compression: the index's cost against the cheapest recorder).", "",
              "| frame | rate | codec | stored on / off | process CPU s on / off | CPU on / off | threads' CPU on / off | "
              "indexing roles' growth / process CPU off | index CPU s per GB | roles on (s) | roles off (s) | "
              "flow index / bytes written |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in res["cpu"]:
            on, off = row["on_summary"], row["off_summary"]
            roles = lambda s: ", ".join(f"{k} {fmt(v, 2)}" for k, v in s["roles"].items())  # noqa: E731
            m.append(f"| {row['frame']} B | {row['pps'] / 1e3:.0f} kpps × {row['seconds']:.0f} s | {row['codec']} | "
                     f"{fmt(on['stored_fraction'], 2, 100, ' %')} / {fmt(off['stored_fraction'], 2, 100, ' %')} | "
                     f"{fmt(on['process_cpu_s'], 2)} / {fmt(off['process_cpu_s'], 2)} | {fmt(row['cpu_ratio'], 3)} | "
                     f"{fmt(row['roles_ratio'], 3)} | {fmt(row['indexing_roles_share'], 1, 100, ' %')} | "
                     f"{fmt(row['index_cpu_s_per_gb'], 3)} | {roles(on)} | {roles(off)} | "
                     f"{fmt(on['flow_bytes_fraction'], 3, 100, ' %')} |")
            lbl = f"{row['frame']} B at {row['pps'] / 1e3:.0f} kpps, {row['codec']}"
            targets.append((f"{lbl}: stored fraction unchanged",
                            f"on − off {fmt(row['stored_fraction_delta'], 3, 100, ' pp')}",
                            abs(row["stored_fraction_delta"]["median"]) < 1e-4))
            targets.append((f"{lbl}: ≤ 5 % more recorder CPU (process, wait4)",
                            f"{100 * (row['cpu_ratio']['median'] - 1):+.1f} % (threads' own: "
                            f"{100 * (row['roles_ratio']['median'] - 1):+.1f} %, indexing roles: "
                            f"{100 * row['indexing_roles_share']['median']:+.1f} %)", row["cpu_ratio"]["median"] <= 1.05))
        m.append("")
    sv = res.get("serve")
    if sv and "loaded" in sv:
        rounds = sv["rounds"]
        m += ["## Ten concurrent API queries while `serve` captures", "",
              f"`tapdeck serve` (query-max-concurrent 10) capturing a veth fed by `tcpreplay --topspeed` from a "
              f"namespace (generator on CPU {GEN_CPU}) with {sv['slice_packets']:,} packets of the same kind of trace, "
              f"looped: offered {sv['offered'] or 0:,} at {(sv['generator_pps'] or 0) / 1e6:.3f} Mpps "
              f"({sv['generator_mb_s'] or 0:.0f} MB/s), received {sv['received']:,}. Each query: "
              f"`GET /api/v1/packets?start=&end=&filter=&format=pcap` over the {res['params']['query_back']} s "
              f"before it was sent; rounds of ten at once while the generator ran ({len(rounds)} round(s)), then "
              f"the same ten once the generator had stopped (the idle peer), over the same length of window "
              f"ending 1 s before it stopped (retention may have deleted the first round's window). Under load "
              f"the newest seconds may still be in staging, so an answer can hold less. Queries run at the "
              f"lowest CPU and I/O priority: on a machine busy with other work, idle ones wait too.", "",
              "| filter | under load (round 1): status / MB / s | all rounds: s | idle: status / MB / s | "
              "load / idle |", "|---|---|---|---|---|"]
        for i, (a, b2) in enumerate(zip(sv["loaded"]["queries"], sv["idle"]["queries"])):
            cell = lambda r: f"{r['status']} / {r['bytes'] / 1e6:.2f} / {r['seconds']:.2f}" if r["seconds"] else f"{r.get('error')}"  # noqa: E731
            per = spread(r["queries"][i]["seconds"] for r in rounds)
            ratio = a["seconds"] / b2["seconds"] if a["seconds"] and b2["seconds"] else None
            m.append(f"| `{a['filter']}` | {cell(a)} | {fmt(per, 2)} | {cell(b2)} | "
                     f"{'%.2f×' % ratio if ratio else '–'} |")
        m += ["", f"All ten: {fmt(spread(r['wall_s'] for r in rounds), 2, unit=' s')} under load, "
              f"{sv['idle']['wall_s']:.2f} s idle. Drops (final stats record): "
              f"{sv['final_totals']['dropped']}; over the run from /api/v1/status: {sv['drops_during_run']}; "
              f"veth rx_dropped {sv['veth_rx_dropped']}. serve used {sv['serve_cpu_s']:.1f} CPU s and exited "
              f"{sv['serve_exit']}.", ""]
        ok_all = all(q["status"] == 200 for r in rounds + [sv["idle"]] for q in r["queries"])
        targets.append(("0 capture drops with ten queries at top load", f"{sv['drops_total']} dropped", sv["drops_total"] == 0))
        targets.append(("every query answered 200", "yes" if ok_all else "NO", ok_all))
    if targets:
        m += ["## Targets", "", "| target | measured | verdict |", "|---|---|---|"]
        m += [f"| {t} | {v} | {verdict(ok)} |" for t, v, ok in targets]
        m.append("")
    if res.get("error"):
        m += [f"**Error:** {res['error']}", ""]
    return "\n".join(m) + "\n"


# ---------------------------------------------------------------------------------------------

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=10.0, help="GB of frames in the store")
    ap.add_argument("--hosts", type=int, default=100_000)
    ap.add_argument("--minutes", type=float, default=40.0, help="packet time the trace covers")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--quick", action="store_true",
                    help="0.3 GB, 10 000 hosts over 5 min, 1 rep, short recorder and serve runs")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--cpu-seconds", type=float, default=10.0, help="duration of each record --synthetic run")
    ap.add_argument("--loads", default="1514:320000,64:360000",
                    help="FRAME:PPS,... for the CPU part (the capture benchmark's top loads on a veth)")
    ap.add_argument("--serve-seconds", type=int, default=30, help="generator time of the serve part")
    ap.add_argument("--query-back", type=float, default=10.0, help="seconds of capture each API query asks for")
    ap.add_argument("--slice-packets", type=int, default=200_000, help="packets in tcpreplay's file")
    ap.add_argument("--serve-max-bytes", default="8GiB", help="serve's max-bytes (retention churns at top load)")
    ap.add_argument("--work", type=Path, default=ROOT / "bench/work")
    ap.add_argument("--keep", action="store_true", help="keep the store")
    args = ap.parse_args()
    if args.quick:
        args.gb = min(args.gb, 0.3)
        args.hosts = min(args.hosts, 10_000)
        args.minutes = min(args.minutes, 5.0)
        args.reps = 1
        args.cpu_seconds = min(args.cpu_seconds, 3.0)
        args.loads = "1514:50000,64:100000"
        args.serve_seconds = min(args.serve_seconds, 10)
        args.query_back = min(args.query_back, 4.0)
        args.slice_packets = min(args.slice_packets, 50_000)
        args.serve_max_bytes = "3GiB"
    args.loads = [tuple(int(x) for x in l.split(":")) for l in args.loads.split(",") if l]
    args.parts = [p for p in args.parts.split(",") if p]
    bad = set(args.parts) - set(PARTS)
    if bad:
        ap.error(f"unknown parts {bad}; choose from {PARTS}")
    if ("queries" in args.parts or "index" in args.parts) and "build" not in args.parts:
        ap.error("queries and index need build (the store is built in the same run)")
    return args


def main():
    args = parse_args()
    if os.geteuid() != 0:
        raise SystemExit("query: run as root (drop_caches, network namespace, capture)")
    need = {"tcpdump": "tcpdump", "zstd": "zstd", "lz4": "lz4", "tcpreplay": "tcpreplay", "ethtool": "ethtool",
            "taskset": "util-linux"}
    missing = [f"{b} ({pkg})" for b, pkg in need.items() if not shutil.which(b)]
    if missing:
        raise SystemExit(f"query: missing {', '.join(missing)}; run scripts/setup.sh")
    if not BIN.exists():
        raise SystemExit(f"query: {BIN} missing; build it or set TAPDECK_BIN")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    work = args.work / f"query-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    res = {
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{os.cpu_count()} cores, {os.uname().release}", "command": " ".join(["python3", *sys.argv]),
        "load_before": round(os.getloadavg()[0], 2), "quick": args.quick, "reps": args.reps,
        "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "versions": {"tapdeck": sh([BIN, "--version"], check=False).stdout.strip(),
                     "tcpdump": (sh(["tcpdump", "--version"], check=False).stdout.splitlines() or [""])[0],
                     "zstd": sh(["zstd", "--version"], check=False).stdout.strip()},
    }
    try:
        if "build" in args.parts:
            store, trace = build(args, work, res)
            if "index" in args.parts:
                index_size(store, res)
            if "queries" in args.parts:
                queries(args, store, res["trace"], res["build"]["truth"], res)
            if not args.keep:
                shutil.rmtree(store, ignore_errors=True)
            del trace
        if "cpu" in args.parts:
            cpu_part(args, work, res)
        if "serve" in args.parts:
            serve_part(args, work, res)
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); cleaning up, writing what was measured")
        res["interrupted"] = True
        res["error"] = f"interrupted ({e})"
    except Exception as e:  # noqa: BLE001 (reported in the results after the cleanup)
        log(f"error: {type(e).__name__}: {e}")
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for p in list(LIVE):
            try:
                os.killpg(p.pid, signal.SIGKILL) if p.pid == os.getpgid(p.pid) else p.kill()
                p.wait()
            except (ProcessLookupError, ChildProcessError, OSError):
                pass
            LIVE.remove(p)
        if not args.keep:
            for p in ("store", "cpu-store", "serve-store", "slice.pcap"):
                q = work / p
                shutil.rmtree(q, ignore_errors=True) if q.is_dir() else q.unlink(missing_ok=True)
        leftover = sh(["ip", "netns", "list"], check=False).stdout
        if f"tdquery{os.getpid()}" in leftover:
            log("warning: namespace still there after cleanup")
    res["load_after"] = round(os.getloadavg()[0], 2)
    out = ROOT / "bench/results"
    out.mkdir(parents=True, exist_ok=True)
    stem = out / ("query-" + res["when"].replace(":", "").replace("-", ""))
    stem.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
    md = markdown(res)
    stem.with_suffix(".md").write_text(md)
    print(md)
    log(f"wrote {stem}.{{json,md}}; logs in {work}")
    sys.exit(1 if res.get("error") else 0)


if __name__ == "__main__":
    main()
