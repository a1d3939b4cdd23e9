"""Hostile and broken input: record either succeeds or fails with one clear line.

- The corpus's malformed files (`*oobr*`, `*overflow*`, `*crash*`, `*segfault*`,
  `*invalid*`): `record -r` exits 0, or exits nonzero with exactly one `tapdeck:` line
  naming the file and a byte offset; never a panic. Whatever was stored verifies, and is
  the original's first packets (tcpdump's reading of both agrees).
- Files truncated at many offsets (a generated pcap, a corpus pcapng): the packets before
  the cut are stored, completely and verified, and the error names the offset.
- Random garbage, a missing file, a bad --codec, a store path that is a regular file:
  one-line errors, nothing stored.
"""

from __future__ import annotations

import random
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import (
    CORPUS,
    corpus_id,
    data_files,
    gen_packets,
    known_bugs,
    one_error_line,
    read_packets,
    scan_capture,
    tcpdump_text,
    write_pcap,
)

MALFORMED_PATTERNS = ("oobr", "overflow", "crash", "segfault", "invalid")
MALFORMED = sorted(
    f for f in (CORPUS / "tcpdump-tests").glob("*")
    if f.is_file() and any(p in f.name for p in MALFORMED_PATTERNS)
) if CORPUS.is_dir() else []

OFFSET = re.compile(r"byte offset \d+")


def check_failure(stderr: str, path) -> str:
    line = one_error_line(stderr)
    assert str(path) in line, f"the error does not name the file: {line}"
    assert OFFSET.search(line), f"the error does not give a byte offset: {line}"
    return line


def packet_lines(lines: list[str]) -> list[list[str]]:
    """tcpdump -xx output split per packet (a packet starts with a timestamp)."""
    out: list[list[str]] = []
    for l in lines:
        if l[:1].isdigit():
            out.append([l])
        elif out:
            out[-1].append(l)
    return out


def record_one(tapdeck, src: Path, work: Path):
    store = work / "S"
    r = tapdeck.record(store, "-r", src, "--staging", "8MiB", "--chunk-size", "512KiB",
                       "--log", "warn", timeout=60)
    return store, r


def check_malformed(tapdeck, src: Path, work: Path) -> str | None:
    store, r = record_one(tapdeck, src, work)
    try:
        if "panicked" in r.stderr:
            return "panicked:\n" + r.stderr
        if r.returncode != 0:
            check_failure(r.stderr, src)
        files = data_files(store)
        if files:
            v = tapdeck.verify(store)
            if v.returncode != 0:
                return "stored files do not verify:\n" + v.describe()
            x = tapdeck.extract(store, work / "out.pcapng")
            if x.returncode != 0:
                return "extract failed:\n" + x.describe()
            info = scan_capture(src)
            if info["caplen_gt_snap"] or info["caplen_gt_orig"]:
                # As in test_roundtrip: the original breaks its own header and tapdeck keeps
                # every byte, declaring lengths that cover them; compare packets directly.
                want_p = [(p.ts_ns, max(p.orig_len, len(p.data)), p.data) for p in read_packets(src)]
                got_p = [(p.ts_ns, p.orig_len, p.data) for p in read_packets(work / "out.pcapng")]
                if r.returncode == 0 and len(got_p) != len(want_p):
                    return f"record succeeded but stored {len(got_p)} of {len(want_p)} packets"
                if got_p != want_p[:len(got_p)]:
                    return "stored packets differ from the original's first ones"
                return None
            rc, got, _ = tcpdump_text(work / "out.pcapng")
            rc0, want, _ = tcpdump_text(src)
            got, want = packet_lines(got), packet_lines(want)
            if r.returncode == 0 and len(got) != len(want):
                return f"record succeeded but stored {len(got)} of {len(want)} packets"
            # The stored packets are the original's first ones (bytes compared by tcpdump,
            # whose timestamps line up only when the file's are normal).
            strip = lambda ps: [p[1:] for p in ps]
            if strip(got) != strip(want[:len(got)]):
                return "stored packets differ from the original's first ones"
        elif r.returncode == 0 and scan_capture(src)["packets"]:
            return "record succeeded but stored nothing"
    except AssertionError as e:
        return str(e)
    return None


@pytest.fixture(scope="session")
def malformed_results(tapdeck, tmp_path_factory, corpus):
    base = tmp_path_factory.mktemp("malformed")

    def job(i_f):
        i, f = i_f
        work = base / f"{i:04d}"
        work.mkdir()
        try:
            return f, check_malformed(tapdeck, f, work)
        except BaseException as e:
            return f, f"{type(e).__name__}: {e}"

    with ThreadPoolExecutor(3) as pool:
        return dict(pool.map(job, enumerate(MALFORMED)))


def _malformed_params():
    out = []
    for f in MALFORMED:
        bugs = known_bugs(scan_capture(f))
        marks = [pytest.mark.xfail(reason="; ".join(bugs), strict=True)] if bugs else []
        out.append(pytest.param(f, marks=marks, id=corpus_id(f)))
    return out


@pytest.mark.parametrize("path", _malformed_params())
def test_malformed_corpus_file(malformed_results, path):
    problem = malformed_results[path]
    assert problem is None, problem


def test_malformed_set_is_not_empty(corpus):
    assert len(MALFORMED) > 50, f"only {len(MALFORMED)} malformed files found"


# ---------------------------------------------------------------------------------------
# Truncation
# ---------------------------------------------------------------------------------------


def _cut_points(size: int, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    fixed = [1, 10, 23, 24, 25, 39, 40, 41, size - 1]
    return sorted(set(fixed + [rng.randrange(1, size) for _ in range(n)]))


def _truncation_case(tapdeck, whole: bytes, cut: int, work: Path, suffix: str):
    src = work / f"cut{cut}{suffix}"
    src.write_bytes(whole[:cut])
    info = scan_capture(src)
    expected = info["packets"]
    store, r = record_one(tapdeck, src, work)
    assert "panicked" not in r.stderr, r.stderr
    if info["end"] == cut:
        # Cut exactly after a header or a record: a shorter but valid file.
        assert r.returncode == 0, r.describe()
        line = "(whole)"
    else:
        assert r.returncode != 0, f"a file cut at {cut} of {len(whole)} bytes was accepted"
        line = check_failure(r.stderr, src)
    files = data_files(store)
    stored = []
    if files:
        v = tapdeck.verify(store)
        assert v.returncode == 0, v.describe()
        assert not list(store.glob(".*.partial")), "a partial file was left behind"
        x = tapdeck.extract(store, work / "out.pcapng")
        assert x.returncode == 0, x.describe()
        stored = read_packets(work / "out.pcapng")
    assert len(stored) == expected, (
        f"cut at {cut}: {expected} complete packets before the cut, {len(stored)} stored ({line})")
    original = read_packets_prefix(whole, expected)
    assert [(p.ts_ns, p.orig_len, p.data) for p in stored] == \
        [(p.ts_ns, p.orig_len, p.data) for p in original]


def read_packets_prefix(whole: bytes, n: int):
    from conftest import read_packets_bytes
    return read_packets_bytes(whole)[:n]


def test_truncated_generated_pcap(tapdeck, tmp_path):
    src = write_pcap(tmp_path / "whole.pcap", gen_packets(60, seed=7))
    whole = src.read_bytes()
    for cut in _cut_points(len(whole), 12, seed=3):
        work = tmp_path / f"c{cut}"
        work.mkdir()
        _truncation_case(tapdeck, whole, cut, work, ".pcap")


def test_truncated_corpus_pcapng(tapdeck, tmp_path, corpus):
    src = corpus / "tcpdump-tests" / "OSPFv2_Capture_FINAL.pcapng"
    if not src.exists():
        pytest.skip(f"{src} not in the corpus")
    whole = src.read_bytes()
    assert known_bugs(scan_capture(src)) == []
    for cut in _cut_points(len(whole), 10, seed=5):
        work = tmp_path / f"c{cut}"
        work.mkdir()
        _truncation_case(tapdeck, whole, cut, work, ".pcapng")


# ---------------------------------------------------------------------------------------
# Garbage and bad invocations
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_garbage(tapdeck, tmp_path, seed):
    rng = random.Random(seed)
    src = tmp_path / "garbage.bin"
    src.write_bytes(rng.randbytes(rng.randrange(1, 20000)))
    store, r = record_one(tapdeck, src, tmp_path)
    assert r.returncode != 0
    check_failure(r.stderr, src)
    assert data_files(store) == []


def test_garbage_after_valid_header(tapdeck, tmp_path):
    """A valid pcap header followed by garbage: an error at the first bad record."""
    good = write_pcap(tmp_path / "g.pcap", gen_packets(5, seed=2)).read_bytes()
    src = tmp_path / "bad.pcap"
    # A record header claiming 3 GB of data after five good packets.
    src.write_bytes(good + b"\x00" * 8 + b"\xff\xff\xff\xbf" + b"\x00\x00\x00\xc0" + b"x" * 100)
    store, r = record_one(tapdeck, src, tmp_path)
    assert r.returncode != 0
    line = check_failure(r.stderr, src)
    assert f"byte offset {len(good)}" in line, line
    v = tapdeck.verify(store)
    assert v.returncode == 0, v.describe()
    x = tapdeck.extract(store, tmp_path / "out.pcap", "--format", "pcap")
    assert x.returncode == 0, x.describe()
    assert len(read_packets(tmp_path / "out.pcap")) == 5


def test_missing_input(tapdeck, tmp_path):
    src = tmp_path / "does-not-exist.pcap"
    store, r = record_one(tapdeck, src, tmp_path)
    assert r.returncode != 0
    line = one_error_line(r.stderr)
    assert str(src) in line and "No such file" in line, line


@pytest.mark.parametrize("codec", ["bogus", "zstd:99", "lz4,zstd:1,raw,lz4", "raw,lz4", "zstd:1@2"])
def test_bad_codec(tapdeck, tmp_path, codec):
    src = write_pcap(tmp_path / "g.pcap", gen_packets(5))
    r = tapdeck.record(tmp_path / "S", "-r", src, "--codec", codec)
    assert r.returncode != 0
    line = one_error_line(r.stderr)
    assert "--codec" in line, line
    assert data_files(tmp_path / "S") == []


def test_store_is_a_regular_file(tapdeck, tmp_path):
    src = write_pcap(tmp_path / "g.pcap", gen_packets(5))
    store = tmp_path / "store"
    store.write_bytes(b"not a directory")
    r = tapdeck.record(store, "-r", src)
    assert r.returncode != 0
    line = one_error_line(r.stderr)
    assert str(store) in line, line
    assert store.read_bytes() == b"not a directory"


def test_data_dir_is_a_regular_file(tapdeck, tmp_path):
    src = write_pcap(tmp_path / "g.pcap", gen_packets(5))
    d = tmp_path / "d"
    d.write_bytes(b"x")
    r = tapdeck.record(tmp_path / "S", "-r", src, "--dir", d)
    assert r.returncode != 0
    line = one_error_line(r.stderr)
    assert str(d) in line, line


@pytest.mark.parametrize("args,flag", [
    (["--chunk-size", "lots"], "--chunk-size"),
    (["--staging", "1MiB", "--chunk-size", "1MiB"], "--staging"),
    (["--rotate-size", "lots"], "--rotate-size"),  # (--rotate-interval 0 turns cuts off)
    (["--min-free", "lots"], "--min-free"),
    (["--chunk-size", "1KiB"], "--chunk-size"),
])
def test_bad_sizes(tapdeck, tmp_path, args, flag):
    src = write_pcap(tmp_path / "g.pcap", gen_packets(5))
    r = tapdeck.record(tmp_path / "S", "-r", src, *args)
    assert r.returncode != 0
    line = one_error_line(r.stderr)
    assert flag in line, line


def test_verify_and_extract_of_missing_store(tapdeck, tmp_path):
    # verify reports per path, one line each ("PATH: problem"), then a summary on stdout.
    r = tapdeck.verify(tmp_path / "nope")
    assert r.returncode != 0 and "panicked" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(str(tmp_path / "nope")), r.stderr
    assert "0 file(s) ok, 1 failed" in r.out
    r = tapdeck.extract(tmp_path / "nope", tmp_path / "o")
    assert r.returncode != 0
    line = one_error_line(r.stderr)
    assert "nope" in line, line


def index_tag_only(path: Path) -> Path:
    """Issue 14's file: an index frame whose 4-byte body is only its tag `TDCI`, then a
    valid empty seek table (29 bytes). Reading it used to panic (index out of bounds)."""
    path.write_bytes(struct.pack("<II", 0x184D2A5B, 4) + b"TDCI"
                     + struct.pack("<III", 0x184D2A5E, 9, 0) + b"\x00"
                     + struct.pack("<I", 0x8F92EAB1))
    return path


@pytest.mark.parametrize("name", ["x.zst", "x.pcapng.zst"])
def test_index_frame_of_only_its_tag(tapdeck, tmp_path, name):
    bad = index_tag_only(tmp_path / name)
    # verify: one line for the file, naming it and what is wrong; exit 1.
    r = tapdeck.verify(bad)
    assert r.returncode == 1 and "panicked" not in r.stderr, r.describe()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{bad}: "), r.stderr
    assert "0 file(s) ok, 1 failed" in r.out
    if name == "x.pcapng.zst":
        # Named as a stored file, so the trailer is read: the cut field and its offset.
        assert "byte offset 12" in lines[0] and "chunk index version" in lines[0], lines[0]
    # info: one tapdeck: line naming the file.
    r = tapdeck("info", bad)
    assert r.returncode != 0
    line = one_error_line(r.stderr)
    assert str(bad) in line and "store directory or a stored file" in line, line
    # record -r: not a capture either way; one line naming the file, nothing stored.
    r = tapdeck.record(tmp_path / "S", "-r", bad)
    assert r.returncode != 0
    line = one_error_line(r.stderr)
    assert str(bad) in line, line
    assert data_files(tmp_path / "S") == []
    # extract takes stores: the file is refused in one line, no panic.
    r = tapdeck.extract(bad, tmp_path / "o.pcap")
    assert r.returncode != 0
    line = one_error_line(r.stderr)
    assert str(bad) in line, line


def test_info_of_a_stored_file(tapdeck, tmp_path):
    # Three seconds of packets, a file per second.
    src = write_pcap(tmp_path / "g.pcap", gen_packets(3000, duration_ns=3 * 10**9))
    store = tmp_path / "S"
    r = tapdeck.record(store, "-r", src, "--rotate-interval", "1", "--chunk-size", "512KiB",
                       "--staging", "8MiB", "--codec", "zstd:3")
    assert r.returncode == 0, r.describe()
    whole = tapdeck.info(store)
    assert len(whole["files"]) >= 3, whole
    for row in (whole["files"][0], whole["files"][-1]):
        path = Path(row["path"])
        # --json: the same row `info STORE` gives the file, and totals over it alone.
        one = tapdeck.info(path)
        assert one["files"] == [row], (one, row)
        assert one["totals"] == {"files": 1, "packets": row["packets"],
                                 "stored_bytes": row["stored_bytes"],
                                 "drops": row["drops"] or 0}
        assert one["store"] == whole["store"] and one["drops_since_recorder_start"] is False
        # The table: its header and the file's row (name, packets, bytes, codecs).
        r = tapdeck("info", path)
        assert r.returncode == 0, r.describe()
        lines = r.out.splitlines()
        assert lines[0].split()[:2] == ["NAME", "STREAM"] and len(lines) == 2, r.out
        fields = lines[1].split()
        assert fields[0] == row["name"], lines[1]
        assert str(row["packets"]) in fields and str(row["stored_bytes"]) in fields
        assert lines[1].endswith(row["codecs"]), lines[1]
    assert sum(f["packets"] for f in whole["files"]) == 3000

    # A stored file copied out of its store still describes itself; its drops are then
    # the recorder's running count, and the output says so.
    lone = tmp_path / "lone"
    lone.mkdir()
    copy = lone / whole["files"][-1]["name"]
    copy.write_bytes(Path(whole["files"][-1]["path"]).read_bytes())
    one = tapdeck.info(copy)
    assert one["store"] is None and one["drops_since_recorder_start"] is True
    assert one["files"][0]["packets"] == whole["files"][-1]["packets"]

    # Neither a store nor a stored file: one line saying what info wants.
    for path in (src, tmp_path / "missing"):
        r = tapdeck("info", path)
        assert r.returncode != 0
        line = one_error_line(r.stderr)
        assert str(path) in line and "wants a store directory or a stored file" in line, line
