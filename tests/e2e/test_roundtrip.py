"""Round trip of the public corpus: record -r FILE, extract, and compare with tcpdump/tshark.

Every corpus file that tcpdump reads is recorded with the default codec ladder into pcapng,
extracted again, and tcpdump's complete decoding (ns timestamps, link headers, every byte in
hex, lengths) of the original and of the extract must be identical line by line. Files
tcpdump cannot read (pcapng with several link types or snap lengths) are compared with
tshark's fields and hex dump instead. A deterministic sample is also run through the `none`,
`lz4` and `zstd:1` codecs and `--format pcap`, which must refuse files with several link
types. `tapdeck verify` must accept every store.

The work runs once per session in a small thread pool (the machine has two cores); each
(file, variant) pair is then reported as its own test.
"""

from __future__ import annotations

import random
import shutil
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import (
    CORPUS,
    clean_stderr,
    corpus_files,
    corpus_id,
    one_error_line,
    tcpdump_header,
    tcpdump_text,
    tshark_packets,
)

FILES = corpus_files()
SAMPLE_SIZE = 80
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

CASES = [(f, "default") for f in FILES] + [
    (f, v) for v in ("none", "lz4", "zstd1", "pcap") for f in SAMPLE
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


class Oracle:
    """How the original reads: with tcpdump if it can, else tshark, else not at all."""

    def __init__(self, path: Path):
        self.path = path
        rc, lines, err = tcpdump_text(path)
        self.linktypes = pcapng_linktypes(path)
        if rc == 0:
            self.tool, self.lines, self.header = "tcpdump", lines, tcpdump_header(err)
            return
        self.tcpdump_error = err.strip().splitlines()[-1:] or ["?"]
        rc, lines, err = tshark_packets(path)
        if rc == 0:
            self.tool, self.lines, self.header = "tshark", lines, ""
        else:
            self.tool, self.lines, self.header = None, [], ""

    def read(self, path: Path) -> tuple[int, list[str], str, str]:
        if self.tool == "tcpdump":
            rc, lines, err = tcpdump_text(path)
            return rc, lines, tcpdump_header(err), err
        rc, lines, err = tshark_packets(path)
        return rc, self._fill_missing_times(lines), "", err

    def _fill_missing_times(self, lines: list[str]) -> list[str]:
        """Simple packet blocks carry no timestamp (tshark shows none); tapdeck stores them
        with the previous packet's time (documented in crates/pcap/src/reader.rs). Blank
        times in the original accept whatever the extract has."""
        out = list(lines)
        n = len(self.lines)
        for i, (orig, got) in enumerate(zip(self.lines, lines)):
            if orig == "--bytes--":
                break
            if orig.startswith("\t") and "\t" in got:
                out[i] = orig if orig.split("\t")[1:] == got.split("\t")[1:] else got
        return out


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
    rc, lines, header, err = oracle.read(out)
    if rc != 0:
        return "fail", f"{oracle.tool} cannot read the extract: {err.strip()[-500:]}"
    if oracle.tool == "tcpdump" and header != oracle.header:
        return "fail", f"link type differs: original '{oracle.header}', extract '{header}'"
    if lines != oracle.lines:
        return "fail", f"{oracle.tool} decodes the extract differently: " + first_difference(
            oracle.lines, lines)
    return "ok", f"{len(lines)} lines identical ({oracle.tool})"


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


@pytest.mark.parametrize(
    "path,variant", CASES, ids=[f"{v}:{corpus_id(f)}" for f, v in CASES]
)
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
