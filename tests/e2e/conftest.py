"""Shared helpers for the tapdeck end-to-end suite.

Everything here drives the real `tapdeck` binary (located through $TAPDECK_BIN, default
<repo>/target/release/tapdeck) and checks it against independent oracles: tcpdump, tshark,
capinfos, the stock zstd / lz4 tools, and a small pcap/pcapng reader written here with the
struct module. Test traffic is generated in the tests (Ethernet/IPv4/UDP or TCP between
addresses of 198.18.0.0/15, payload half random, half zeros) or read from the public corpus
at <repo>/../shared/corpus, which is never copied into the repository.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# tests/: the harnesses shared with bench/ (netlab.py) and the NFS rig (nfs/).
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))
CORPUS = REPO.parent / "shared" / "corpus"
DEFAULT_BIN = REPO / "target" / "release" / "tapdeck"


def pytest_configure(config):
    config.addinivalue_line("markers", "nfs: uses the real NFS rig of tests/nfs (root; "
                            "one at a time, never in parallel)")

# Subprocess time limits (seconds). Everything the suite runs is bounded.
QUICK = 30
SLOW = 120

# tshark prints this when run as root; it is not a complaint about the file.
ROOT_NOTICE = 'Running as user "root" and group "root". This could be dangerous.'


# --------------------------------------------------------------------------------------
# The binary
# --------------------------------------------------------------------------------------


def tapdeck_path() -> Path:
    return Path(os.environ.get("TAPDECK_BIN", str(DEFAULT_BIN)))


@pytest.fixture(scope="session")
def tapdeck_bin() -> Path:
    path = tapdeck_path()
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.exit(
            f"tapdeck binary not found at {path}: build it first "
            "(`cargo build --release`) or point $TAPDECK_BIN at it",
            returncode=4,
        )
    return path


@dataclass
class Result:
    args: list
    returncode: int
    stdout: bytes
    stderr: str
    seconds: float

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    def describe(self) -> str:
        return (
            f"$ {' '.join(map(str, self.args))}\nexit {self.returncode} "
            f"after {self.seconds:.2f}s\nstderr:\n{self.stderr[-3000:]}\n"
            f"stdout:\n{self.out[-2000:]}"
        )


def run(args, *, timeout=QUICK, input=None, check=False, env=None) -> Result:
    """Runs a command with a time limit; stdout is bytes, stderr text."""
    args = [str(a) for a in args]
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            args,
            input=input,
            capture_output=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"timed out after {timeout}s: {' '.join(args)}\n{(e.stderr or b'')[-2000:]!r}")
    r = Result(args, p.returncode, p.stdout, p.stderr.decode(errors="replace"), time.monotonic() - t0)
    if check and r.returncode != 0:
        pytest.fail(f"command failed:\n{r.describe()}")
    return r


class Tapdeck:
    """Thin wrappers over the subcommands."""

    def __init__(self, binary: Path):
        self.bin = binary

    def __call__(self, *args, **kw) -> Result:
        return run([self.bin, *args], **kw)

    def record(self, store, *args, timeout=SLOW, **kw) -> Result:
        return self("record", "--store", store, "-q", *args, timeout=timeout, **kw)

    def verify(self, *paths, repair=False, **kw) -> Result:
        return self("verify", *(["--repair"] if repair else []), *paths, **kw)

    def extract(self, store, out, *args, **kw) -> Result:
        return self("extract", store, "-w", out, *args, **kw)

    def info(self, store) -> dict:
        r = self("info", "--json", store)
        assert r.returncode == 0, r.describe()
        return json.loads(r.stdout)

    def popen(self, *args, **kw) -> subprocess.Popen:
        return subprocess.Popen(
            [str(self.bin), *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **kw,
        )


@pytest.fixture(scope="session")
def tapdeck(tapdeck_bin) -> Tapdeck:
    return Tapdeck(tapdeck_bin)


# `record` always ends with a summary whose first line starts `tapdeck: 1.23 s, N files
# written`; it is not an error message.
SUMMARY_LINE = re.compile(r"^tapdeck: [0-9.]+ s, [0-9]+ files written")


def need(*tools):
    """Skips a test that needs root (namespaces, veth pairs) or tools that are missing."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, veth pairs)")
    missing = [t for t in ("ip", *tools) if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/setup.sh installs them)")


def one_error_line(stderr: str) -> str:
    """The user-facing error: exactly one line starting `tapdeck:` and no panic."""
    assert "panicked" not in stderr, stderr
    assert "RUST_BACKTRACE" not in stderr, stderr
    lines = [l for l in stderr.splitlines()
             if l.startswith("tapdeck:") and not SUMMARY_LINE.match(l)]
    assert len(lines) == 1, f"expected one 'tapdeck:' line, got:\n{stderr}"
    return lines[0]


# --------------------------------------------------------------------------------------
# Store helpers
# --------------------------------------------------------------------------------------

DATA_SUFFIXES = (".pcapng", ".pcap", ".pcapng.zst", ".pcap.zst", ".pcapng.lz4", ".pcap.lz4")


def data_files(*dirs) -> list[Path]:
    """Complete data files in the given directories, sorted by name (= by time)."""
    out = []
    for d in dirs:
        d = Path(d)
        if d.is_dir():
            out += [
                p
                for p in d.iterdir()
                if p.is_file() and not p.name.startswith(".") and p.name.endswith(DATA_SUFFIXES)
            ]
    return sorted(out, key=lambda p: p.name)


def partial_files(*dirs) -> list[Path]:
    out = []
    for d in dirs:
        out += [p for p in Path(d).iterdir() if p.name.startswith(".") and p.name.endswith(".partial")
                and p.name != ".manifest.json.partial"]
    return sorted(out)


def stats_records(store) -> list[dict]:
    path = Path(store) / "stats.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            out.append(json.loads(line))
    return out


# A live (synthetic) recording's options for tests that watch it through its stats.
LIVE = ["--staging", "32MiB", "--chunk-size", "1MiB", "--stats-interval", "0.2",
        "--flush-interval", "0.2", "--log", "warn", "-q"]


def start_recording(tapdeck, procs, store, *args):
    """Starts `record --store STORE` with LIVE options and `args`; killed at the test's end."""
    p = tapdeck.popen("record", "--store", store, *LIVE, *args)
    procs.append(p)
    return p


def stored_so_far(store) -> int:
    """Packets stored as the last stats record says (0 before the first)."""
    recs = stats_records(store)
    return recs[-1]["totals"]["stored"] if recs else 0


def final_stats(store) -> dict:
    recs = stats_records(store)
    assert recs, f"no stats records in {store}"
    last = recs[-1]
    assert last.get("final") is True, f"last stats record is not final: {last}"
    return last


def dropped_total(rec: dict) -> int:
    return sum(rec["totals"]["dropped"].values())


def decompress(path: Path, dest: Path) -> Path:
    """Decompresses a stored file with the stock tool for its suffix (or copies a plain one)."""
    name = path.name
    if name.endswith(".zst"):
        r = run(["zstd", "-q", "-dc", path], timeout=SLOW)
    elif name.endswith(".lz4"):
        r = run(["lz4", "-q", "-dc", path], timeout=SLOW)
    else:
        shutil.copyfile(path, dest)
        return dest
    assert r.returncode == 0, r.describe()
    dest.write_bytes(r.stdout)
    return dest


# --------------------------------------------------------------------------------------
# Oracles
# --------------------------------------------------------------------------------------


def tcpdump_text(path, *extra, input=None) -> tuple[int, list[str], str]:
    """tcpdump's full decoding (ns timestamps, link headers, hex of every byte)."""
    r = run(["tcpdump", "-r", path, "-nn", "-tt", "--nano", "-xx", "-e", "-v", *extra],
            timeout=SLOW, input=input)
    return r.returncode, r.out.splitlines(), r.stderr


def tcpdump_lines(path, flt: str = "") -> list[str]:
    """`tcpdump_text` of the packets `flt` selects, which tcpdump must read without error."""
    rc, lines, err = tcpdump_text(path, *([flt] if flt else []))
    assert rc == 0, f"tcpdump could not read {path}: {err}"
    return lines


def tcpdump_packets(lines: list[str]) -> int:
    """Packets in `tcpdump_text` output (each starts a line; its details are indented)."""
    return sum(1 for line in lines if line and not line[0].isspace())


def tcpdump_header(stderr: str) -> str:
    """The link type from tcpdump's 'reading from file X, link-type Y, snapshot ...' line."""
    for line in stderr.splitlines():
        if line.startswith("reading from file"):
            parts = [p.strip() for p in line.split(",")]
            return next((p for p in parts if p.startswith("link-type")), "")
    return ""


TSHARK_FIELDS = ["frame.time_epoch", "frame.len", "frame.cap_len", "frame.encap_type"]


def tshark_packets(path) -> tuple[int, list[str], str]:
    """tshark's view of each packet: time (ns), lengths, encapsulation. tshark 4.0 also
    lists pcapng custom blocks as frames without an encapsulation; those are left out."""
    args = ["tshark", "-r", path, "-n", "-T", "fields"]
    for f in TSHARK_FIELDS:
        args += ["-e", f]
    r = run(args, timeout=SLOW)
    if r.returncode != 0:
        return r.returncode, [], r.stderr
    rows = [l for l in r.out.splitlines() if l.split("\t")[-1] != ""]
    return 0, rows, r.stderr


def capinfos_count(path) -> int:
    r = run(["capinfos", "-M", "-c", "-T", "-r", path], timeout=SLOW)
    assert r.returncode == 0, r.describe()
    line = r.out.strip().splitlines()[-1]
    return int(line.split("\t")[-1])


def clean_stderr(stderr: str) -> list[str]:
    return [l for l in stderr.splitlines() if l.strip() and ROOT_NOTICE not in l
            and not l.startswith("reading from file")]


# --------------------------------------------------------------------------------------
# A small, strict pcap / pcapng reader (independent of tapdeck's own)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pkt:
    linktype: int
    ts_ns: int
    orig_len: int
    data: bytes


def _read_pcap(buf: bytes) -> list[Pkt]:
    magic = buf[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    else:
        e = ">"
    (m,) = struct.unpack(e + "I", magic)
    nano = m == 0xA1B23C4D
    _, _, _, _, _, linktype = struct.unpack(e + "HHiIII", buf[4:24])
    linktype &= 0xFFFF
    out, off = [], 24
    while off < len(buf):
        assert off + 16 <= len(buf), f"truncated record header at {off}"
        sec, frac, incl, orig = struct.unpack(e + "IIII", buf[off:off + 16])
        off += 16
        assert off + incl <= len(buf), f"truncated record at {off}"
        ts = sec * 1_000_000_000 + (frac if nano else frac * 1000)
        out.append(Pkt(linktype, ts, orig, buf[off:off + incl]))
        off += incl
    return out


def _read_pcapng(buf: bytes) -> list[Pkt]:
    out, off = [], 0
    e = "<"
    ifaces: list[tuple[int, int, int]] = []  # linktype, units per second, offset s
    while off < len(buf):
        btype_raw = buf[off:off + 4]
        if btype_raw == b"\x0a\x0d\x0d\x0a":
            bom = buf[off + 8:off + 12]
            e = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">"
            ifaces = []
        btype, blen = struct.unpack(e + "II", buf[off:off + 8])
        assert blen >= 12 and off + blen <= len(buf), f"bad block at {off}"
        body = buf[off + 8:off + blen - 4]
        if btype == 1:  # IDB
            lt, _, _snap = struct.unpack(e + "HHI", body[:8])
            res, tsoff = 1_000_000, 0
            o = 8
            while o + 4 <= len(body):
                code, ln = struct.unpack(e + "HH", body[o:o + 4])
                val = body[o + 4:o + 4 + ln]
                if code == 0:
                    break
                if code == 9:
                    b = val[0]
                    res = 2 ** (b & 0x7F) if b & 0x80 else 10 ** b
                if code == 14:
                    (tsoff,) = struct.unpack(e + "q", val[:8])
                o += 4 + ((ln + 3) & ~3)
            ifaces.append((lt, res, tsoff))
        elif btype in (6, 2):  # EPB, obsolete PB
            if btype == 6:
                iface, hi, lo, cap, orig = struct.unpack(e + "IIIII", body[:20])
            else:
                iface, _drops, hi, lo, cap, orig = struct.unpack(e + "HHIIII", body[:20])
            lt, res, tsoff = ifaces[iface]
            units = (hi << 32) | lo
            ts = tsoff * 1_000_000_000 + units * 1_000_000_000 // res
            out.append(Pkt(lt, ts, orig, body[20:20 + cap]))
        elif btype == 3:  # SPB
            (orig,) = struct.unpack(e + "I", body[:4])
            lt = ifaces[0][0]
            out.append(Pkt(lt, 0, orig, body[4:4 + min(orig, len(body) - 4)]))
        off += blen
    return out


def scan_capture(path) -> dict:
    """Facts about a (possibly malformed) capture file that decide what tapdeck can keep:
    format, link types of its interfaces, simple packet blocks, interfaces declared after
    packets, records longer than the snap length or than on the wire, and timestamps whose
    fraction is out of range (µs >= 1e6, ns >= 1e9). Stops quietly at the first defect."""
    buf = Path(path).read_bytes()
    info = dict(format=None, linktypes=[], has_spb=False, idb_after_packet=False,
                caplen_gt_snap=False, caplen_gt_orig=False, frac_overflow=False, packets=0, end=0)
    try:
        if buf[:4] == b"\x0a\x0d\x0d\x0a":
            info["format"] = "pcapng"
            off, e, snaps, seen_packet = 0, "<", [], False
            while off + 12 <= len(buf):
                if buf[off:off + 4] == b"\x0a\x0d\x0d\x0a":
                    e = "<" if buf[off + 8:off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
                    snaps = []  # (tapdeck numbers interfaces across sections)
                btype, blen = struct.unpack(e + "II", buf[off:off + 8])
                if blen < 12 or off + blen > len(buf):
                    break
                body = buf[off + 8:off + blen - 4]
                if btype == 1:
                    lt, _, snap = struct.unpack(e + "HHI", body[:8])
                    info["linktypes"].append(lt)
                    snaps.append(snap)
                    if seen_packet:
                        info["idb_after_packet"] = True
                elif btype in (2, 6):
                    seen_packet = True
                    info["packets"] += 1
                    if btype == 6:
                        iface, _, _, cap, orig = struct.unpack(e + "IIIII", body[:20])
                    else:
                        iface, _, _, _, cap, orig = struct.unpack(e + "HHIIII", body[:20])
                    if cap > orig:
                        info["caplen_gt_orig"] = True
                    if iface < len(snaps) and snaps[iface] and cap > snaps[iface]:
                        info["caplen_gt_snap"] = True
                elif btype == 3:
                    seen_packet = True
                    info["has_spb"] = True
                    info["packets"] += 1
                off += blen
                info["end"] = off
        elif len(buf) >= 24:
            e = "<" if buf[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
            (m,) = struct.unpack(e + "I", buf[:4])
            info["format"] = "pcap"
            unit = 10**9 if m == 0xA1B23C4D else 10**6
            snap, lt = struct.unpack(e + "II", buf[16:24])
            info["linktypes"] = [lt & 0xFFFF]
            off = 24
            info["end"] = off
            while off + 16 <= len(buf):
                _, frac, cap, orig = struct.unpack(e + "IIII", buf[off:off + 16])
                if off + 16 + cap > len(buf):
                    break
                info["packets"] += 1
                info["frac_overflow"] |= frac >= unit
                info["caplen_gt_orig"] |= cap > orig
                info["caplen_gt_snap"] |= bool(snap) and cap > snap
                off += 16 + cap
                info["end"] = off
    except (struct.error, IndexError):
        pass
    return info


def known_bugs(info: dict, variant: str = "default") -> list[str]:
    """Known recorder bugs, keyed by a fact of the input: each becomes a strict xfail. The
    ones found so far (ISBs for undeclared interfaces, packets beyond the snap length or
    the original length) are fixed; the list is kept for the next."""
    return []


def read_packets(path) -> list[Pkt]:
    buf = Path(path).read_bytes()
    if buf[:4] == b"\x0a\x0d\x0d\x0a":
        return _read_pcapng(buf)
    return _read_pcap(buf)


def read_packets_bytes(buf: bytes) -> list[Pkt]:
    if buf[:4] == b"\x0a\x0d\x0d\x0a":
        return _read_pcapng(buf)
    return _read_pcap(buf)


# --------------------------------------------------------------------------------------
# Traffic generator and pcap writer
# --------------------------------------------------------------------------------------


def _csum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip4(a: int) -> bytes:
    """Address number `a` inside 198.18.0.0/15."""
    return struct.pack("!I", (198 << 24 | 18 << 16) + (a % (1 << 17)))


def half_random(rng: random.Random, n: int) -> bytes:
    h = n // 2
    return rng.randbytes(h) + bytes(n - h)


def frame(rng: random.Random, proto: str, src: int, dst: int, sport: int, dport: int,
          payload: bytes) -> bytes:
    if proto == "udp":
        l4 = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
        pnum = 17
    else:
        seq = rng.getrandbits(32)
        l4 = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x18, 65535, 0, 0) + payload
        pnum = 6
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), rng.getrandbits(16), 0x4000, 64,
                      pnum, 0, ip4(src), ip4(dst))
    hdr = hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:]
    eth = bytes.fromhex("020000000002" "020000000001") + b"\x08\x00"
    return eth + hdr + l4


def gen_packets(n: int, *, start_ns: int = 1_795_413_430_000_000_000, duration_ns: int = 10**9,
                seed: int = 1, sizes=(60, 200, 576, 1514), tcp_share: float = 0.5,
                snap: int | None = None) -> list[Pkt]:
    """`n` Ethernet/IPv4 UDP/TCP frames evenly spread over `duration_ns` from `start_ns`."""
    rng = random.Random(seed)
    out = []
    step = duration_ns // max(n, 1)
    for i in range(n):
        proto = "tcp" if rng.random() < tcp_share else "udp"
        size = rng.choice(sizes)
        plen = max(0, size - 14 - 20 - (20 if proto == "tcp" else 8))
        sport = 1024 + rng.randrange(8)
        dport = rng.choice([53, 80, 443, 2049, 5000 + rng.randrange(4)])
        data = frame(rng, proto, rng.randrange(16), 256 + rng.randrange(16), sport, dport,
                     half_random(rng, plen))
        ts = start_ns + i * step + rng.randrange(max(step, 1))
        orig = len(data)
        if snap is not None and len(data) > snap:
            data = data[:snap]
        out.append(Pkt(1, ts, orig, data))
    return out


# A data file's name: FIRST-TIME-sSS-SEQUENCE.pcapng[.zst|.lz4] (not its .idx sidecar).
DATA_NAME = re.compile(r"\d{8}T\d{6}\.\d{9}Z-s\d{2}-\d{6}\.pcapng(?:\.zst|\.lz4)?")
OPENED = re.compile(r'open(?:at)?\(.*?"([^"]+)".*\) = \d+')


def opened_data_files(log: str) -> set[str]:
    """Names of the data files strace saw opened (successfully)."""
    names = set()
    for line in log.splitlines():
        m = OPENED.search(line)
        if m and DATA_NAME.fullmatch(m.group(1).rsplit("/", 1)[-1]):
            names.add(m.group(1).rsplit("/", 1)[-1])
    return names


def write_pcap(path, packets, *, linktype: int = 1, nano: bool = True, snaplen: int = 262144) -> Path:
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D if nano else 0xA1B2C3D4, 2, 4, 0, 0,
                            snaplen, linktype))
        for p in packets:
            sec, ns = divmod(p.ts_ns, 1_000_000_000)
            frac = ns if nano else ns // 1000
            f.write(struct.pack("<IIII", sec, frac, len(p.data), p.orig_len))
            f.write(p.data)
    return Path(path)


# --------------------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------------------


def corpus_dir() -> Path:
    return CORPUS


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"public corpus not found at {CORPUS} (see its README)")
    return CORPUS


def corpus_files() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    files = sorted((CORPUS / "tcpdump-tests").glob("*.pcap*"))
    files += sorted((CORPUS / "pcapng-test-vectors").rglob("*.pcapng"))
    return [f for f in files if f.is_file()]


def corpus_id(p: Path) -> str:
    return str(p.relative_to(CORPUS))


# --------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------


def wait_for(cond, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def finish(proc: subprocess.Popen, timeout: float = QUICK) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"process {proc.args} did not exit within {timeout}s:\n{err.decode()[-2000:]}")
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def kill_all(procs) -> None:
    """Kills (by pid) the processes still running, and reaps them."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            try:
                p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def procs():
    """Processes a test starts; any still running at the end are killed (by pid)."""
    started: list[subprocess.Popen] = []
    yield started
    kill_all(started)


def pcapng_blocks(buf: bytes):
    """(type, body) of every block of a pcapng byte string (all sections)."""
    off, e = 0, "<"
    while off + 12 <= len(buf):
        if buf[off:off + 4] == b"\x0a\x0d\x0d\x0a":
            e = "<" if buf[off + 8:off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
        btype, blen = struct.unpack(e + "II", buf[off:off + 8])
        assert blen >= 12 and off + blen <= len(buf), f"bad block at {off}"
        yield btype, buf[off + 8:off + blen - 4], e
        off += blen


def parse_isb(body: bytes, e: str = "<") -> dict:
    """An interface statistics block: interface, and its options by name."""
    iface, _hi, _lo = struct.unpack(e + "III", body[:12])
    names = {1: "comment", 4: "ifrecv", 5: "ifdrop", 6: "filteraccept", 7: "osdrop", 8: "usrdeliv"}
    out = {"iface": iface}
    o = 12
    while o + 4 <= len(body):
        code, ln = struct.unpack(e + "HH", body[o:o + 4])
        if code == 0:
            break
        val = body[o + 4:o + 4 + ln]
        name = names.get(code, str(code))
        out[name] = val.decode() if code == 1 else (struct.unpack(e + "Q", val)[0] if ln == 8 else val)
        o += 4 + ((ln + 3) & ~3)
    return out


def pcapng_record_lengths(buf: bytes) -> list[int]:
    """Block length of each packet block (what the recorder counts as capture data)."""
    return [len(body) + 12 for t, body, _ in pcapng_blocks(buf) if t in (2, 3, 6)]


def loop_ext4(tmp_path, request, size: int) -> Path:
    """An ext4 filesystem of `size` bytes, loop-mounted in tmp_path and unmounted (lazily if
    busy) by a finalizer; the test is skipped where loop mounts are impossible."""
    need("mkfs.ext4", "losetup")
    if os.geteuid() != 0:
        pytest.skip("mounting a loop filesystem needs root")
    image, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(size)
    r = run(["mkfs.ext4", "-q", "-F", image])
    assert r.returncode == 0, r.describe()
    r = run(["mount", "-o", "loop", image, mnt])
    if r.returncode != 0:
        pytest.skip(f"cannot loop-mount an ext4 image here: {r.stderr.strip()}")

    def unmount():
        umount = ["umount", str(mnt)]
        if subprocess.run(umount, capture_output=True, timeout=30, check=False).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30,
                           check=False)

    request.addfinalizer(unmount)
    return mnt
