"""Round trip of the public corpus: record -r FILE, extract, and compare with tcpdump/tshark.

Every corpus file that tcpdump reads is recorded with the default codec ladder into pcapng,
extracted again, and tcpdump's complete decoding (ns timestamps, link headers, every byte in
hex, lengths) of the original and of the extract must be identical line by line. Files
tcpdump cannot read (pcapng with several link types or snap lengths) are compared with
tshark's fields and hex dump instead. A deterministic sample of 80 files (plus four pcapng
files with several link types or interfaces; every file with TAPDECK_E2E_FULL=1) also goes
through the `none`, `lz4` and `zstd:1` codecs and `--format pcap`, which must refuse files
with several link types. `tapdeck verify` must accept every store.

The work runs once per session in a small thread pool (the machine has two cores); each
(file, variant) pair is then reported as its own test.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import (
    CORPUS,
    corpus_files,
    corpus_id,
    known_bugs,
    one_error_line,
    read_packets,
    scan_capture,
    tcpdump_header,
    tcpdump_text,
    tshark_packets,
)

FILES = corpus_files()
SAMPLE_SIZE = 80
PCAP_TIME_LIMIT_NS = 2**32 * 10**9
WORKERS = 3

VARIANTS = {
    "default": [],
    "none": ["--codec", "none"],
    "lz4": ["--codec", "lz4"],
    "zstd1": ["--codec", "zstd:1"],
    "pcap": ["--format", "pcap"],
}


def _sample() -> list[Path]:
    rng = random.Random(20261123)
    chosen = set(rng.sample(FILES, min(SAMPLE_SIZE, len(FILES)))) if FILES else set()
    # Always include files with several link types / interfaces and a few pcapng ones.
    for f in FILES:
        rel = corpus_id(f)
        if rel.endswith(("test006.pcapng", "test100.pcapng", "test202.pcapng", "test001.pcapng")):
            chosen.add(f)
    return sorted(chosen)


SAMPLE = _sample()

# Every file through the default ladder; the other codecs and the pcap format (container
# and format code, which the traffic's content hardly reaches) through the sample, with
# pcapng files of several link types and interfaces. TAPDECK_E2E_FULL=1 sends every
# file through every variant (4,600 cases, 4 minutes here; the sample keeps the suite's
# time down).
_OTHERS = FILES if os.environ.get("TAPDECK_E2E_FULL") == "1" else SAMPLE
CASES = [(f, "default") for f in FILES] + [
    (f, v) for v in ("none", "lz4", "zstd1", "pcap") for f in _OTHERS
]


def pcapng_linktypes(path: Path) -> list[int] | None:
    """Link types of every IDB of a pcapng file (all sections); None for a pcap file."""
    buf = path.read_bytes()
    if buf[:4] != b"\x0a\x0d\x0d\x0a":
        return None
    off, e, out = 0, "<", []
    while off + 12 <= len(buf):
        if buf[off:off + 4] == b"\x0a\x0d\x0d\x0a":
            e = "<" if buf[off + 8:off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
        btype, blen = struct.unpack(e + "II", buf[off:off + 8])
        if blen < 12 or off + blen > len(buf):
            break
        if btype == 1:
            out.append(struct.unpack(e + "H", buf[off + 8:off + 10])[0])
        off += blen
    return out


TS = re.compile(r"^(\d+)\.(\d+)(?= )")


def ts_ns(line: str) -> int | None:
    m = TS.match(line)
    return int(m.group(1)) * 10**9 + int(m.group(2)) if m else None


class Oracle:
    """How the original reads: with tcpdump if it can, else tshark, else not at all."""

    def __init__(self, path: Path):
        self.path = path
        self.info = scan_capture(path)
        self.linktypes = self.info["linktypes"] if self.info["format"] == "pcapng" else None
        rc, lines, err = tcpdump_text(path)
        if rc == 0:
            self.tool, self.header = "tcpdump", tcpdump_header(err)
            self.lines = self._normalize(lines)
            return
        rc, lines, err = tshark_packets(path)
        if rc == 0:
            self.tool, self.lines, self.header = "tshark", lines, ""
        else:
            self.tool, self.lines, self.header = None, [], ""

    def _normalize(self, lines: list[str]) -> list[str]:
        """Timestamps as integer ns (libpcap prints an un-normalized fraction such as
        .1000000000 verbatim); when the original's fractions overflow (µs >= 1e6), tcpdump
        wraps them in 32 bits, so times are left out here and compared separately."""
        out = []
        for line in lines:
            t = ts_ns(line)
            if t is not None:
                rest = TS.sub("", line, count=1)
                line = ("<ts>" if self.info["frac_overflow"] else str(t)) + rest
            out.append(line)
        return out

    def compare(self, out: Path) -> str | None:
        """None if `out` holds the same packets; else what differs."""
        if self.info["caplen_gt_snap"] or self.info["caplen_gt_orig"]:
            # The original breaks its own header: a packet longer than the snap length, or
            # with more captured bytes than it had on the wire. tapdeck keeps every byte and
            # declares a snap length and an original length that cover them, so tcpdump
            # (which clamps to the snap length) shows more of the packet than it does in the
            # original. Compare the packets themselves, with that one documented change.
            a = [(p.linktype, p.ts_ns, max(p.orig_len, len(p.data)), p.data) for p in read_packets(self.path)]
            b = [(p.linktype, p.ts_ns, p.orig_len, p.data) for p in read_packets(out)]
            if a != b:
                return f"packets differ ({len(a)} in the original, {len(b)} in the extract)"
            return None
        if self.tool == "tcpdump":
            rc, lines, err = tcpdump_text(out)
            if rc != 0:
                return f"tcpdump cannot read the extract: {err.strip()[-500:]}"
            header = tcpdump_header(err)
            if header != self.header:
                return f"link type differs: original '{self.header}', extract '{header}'"
            lines = self._normalize(lines)
            if self.info["has_spb"]:
                # Simple packet blocks have no time (tcpdump shows 0); tapdeck gives them
                # the previous packet's (documented in crates/pcap/src/reader.rs).
                lines = [o if o.startswith("0 ") and l.split(" ", 1)[1:] == o.split(" ", 1)[1:]
                         else l for o, l in zip(self.lines, lines)] + lines[len(self.lines):]
            if lines != self.lines:
                return "tcpdump decodes the extract differently: " + first_difference(
                    self.lines, lines)
            if self.info["frac_overflow"]:
                a = [p.ts_ns for p in read_packets(self.path)]
                b = [p.ts_ns for p in read_packets(out)]
                if a != b:
                    return f"timestamps differ (normalized): {a[:5]} vs {b[:5]}"
            return None
        rc, rows, err = tshark_packets(out)
        if rc != 0:
            return f"tshark cannot read the extract: {err.strip()[-500:]}"
        rows = [o if o.startswith("\t") and o.split("\t")[1:] == r.split("\t")[1:] else r
                for o, r in zip(self.lines, rows)] + rows[len(self.lines):]
        if rows != self.lines:
            return "tshark sees the extract differently: " + first_difference(self.lines, rows)
        a = [(p.linktype, p.orig_len, p.data) for p in read_packets(self.path)]
        b = [(p.linktype, p.orig_len, p.data) for p in read_packets(out)]
        if a != b:
            return f"packet bytes differ ({len(a)} packets in the original, {len(b)} in the extract)"
        return None


def first_difference(a: list[str], b: list[str]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"line {i + 1}:\n  original: {x}\n  extract:  {y}"
    return f"lengths differ: original {len(a)} lines, extract {len(b)} lines"


def roundtrip(tapdeck, oracle: Oracle, variant: str, work: Path) -> tuple[str, str]:
    """Returns (outcome, message): outcome is 'ok', 'skip' or 'fail'."""
    if oracle.tool is None:
        return "skip", "neither tcpdump nor tshark reads the original"
    store = work / "S"
    out = work / ("out.pcap" if variant == "pcap" else "out.pcapng")
    r = tapdeck.record(store, "-r", oracle.path, "--staging", "8MiB", "--chunk-size", "512KiB",
                       *VARIANTS[variant], timeout=60)
    several_linktypes = oracle.linktypes is not None and len(set(oracle.linktypes)) > 1
    several_ifaces = oracle.linktypes is not None and len(oracle.linktypes) > 1
    if variant == "pcap" and several_linktypes:
        if r.returncode == 0:
            return "fail", f"--format pcap accepted a file with link types {oracle.linktypes}"
        try:
            line = one_error_line(r.stderr)
        except AssertionError as e:
            return "fail", f"refusal is not one clear line: {e}"
        if "pcap" not in line:
            return "fail", f"refusal does not say why: {line}"
        return "ok", "refused"
    if variant == "pcap" and any(p.ts_ns >= PCAP_TIME_LIMIT_NS for p in read_packets(oracle.path)):
        # Classic pcap's seconds are 32 bits: times from 2106-02-07 on cannot be stored.
        if r.returncode == 0:
            return "fail", "--format pcap accepted times past 2106-02-07"
        line = one_error_line(r.stderr)
        return ("ok", "refused (time past 2106)") if "pcapng" in line else ("fail", f"unclear refusal: {line}")
    if r.returncode != 0:
        if variant == "pcap" and several_ifaces:
            # Several interfaces of one link type: refusing is acceptable too.
            try:
                one_error_line(r.stderr)
                return "ok", "refused (several interfaces)"
            except AssertionError as e:
                return "fail", f"refusal is not one clear line: {e}"
        return "fail", "record failed:\n" + r.describe()
    v = tapdeck.verify(store)
    if v.returncode != 0:
        return "fail", "verify failed:\n" + v.describe()
    x = tapdeck.extract(store, out)
    if x.returncode != 0:
        return "fail", "extract failed:\n" + x.describe()
    if "panicked" in r.stderr + v.stderr + x.stderr:
        return "fail", "a panic was reported:\n" + r.stderr + v.stderr + x.stderr
    problem = oracle.compare(out)
    if problem:
        return "fail", problem
    return "ok", f"{len(oracle.lines)} lines identical ({oracle.tool})"


@pytest.fixture(scope="session")
def roundtrip_results(tapdeck, tmp_path_factory, corpus):
    base = tmp_path_factory.mktemp("roundtrip")
    with ThreadPoolExecutor(WORKERS) as pool:
        oracles = dict(zip(FILES, pool.map(Oracle, FILES)))
    results = {}
    lock = threading.Lock()

    def job(i_case):
        i, (f, variant) = i_case
        work = base / f"{i:05d}"
        work.mkdir()
        try:
            res = roundtrip(tapdeck, oracles[f], variant, work)
        except BaseException as e:  # pytest.fail inside a thread, timeouts
            res = ("fail", f"{type(e).__name__}: {e}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        with lock:
            results[(f, variant)] = res

    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(job, enumerate(CASES)))
    return results, oracles


def _params():
    infos = {}
    out = []
    for f, v in CASES:
        info = infos.setdefault(f, scan_capture(f))
        bugs = known_bugs(info, v)
        marks = [pytest.mark.xfail(reason="; ".join(bugs), strict=True)] if bugs else []
        out.append(pytest.param(f, v, marks=marks, id=f"{v}:{corpus_id(f)}"))
    return out


@pytest.mark.parametrize("path,variant", _params())
def test_roundtrip(roundtrip_results, path, variant):
    results, _ = roundtrip_results
    outcome, message = results[(path, variant)]
    if outcome == "skip":
        pytest.skip(message)
    assert outcome == "ok", message


def test_corpus_mostly_readable(roundtrip_results):
    """Guard against the oracle silently skipping everything."""
    _, oracles = roundtrip_results
    readable = [o for o in oracles.values() if o.tool]
    assert len(readable) >= 0.9 * len(oracles), (
        f"only {len(readable)} of {len(oracles)} corpus files are readable by tcpdump/tshark")
    assert any(o.tool == "tshark" for o in readable), "no multi-interface pcapng was compared"


def test_pcap_refusals_seen(roundtrip_results):
    """The sample holds files with several link types, and --format pcap refused them."""
    results, oracles = roundtrip_results
    refused = [f for (f, v), (o, m) in results.items() if v == "pcap" and m == "refused"]
    assert refused, "no multi-link-type file in the pcap sample"
