"""`tapdeck index` (issue: "adds the flow index to older stores and to plain pcap/pcapng files
(a sidecar); verify checks it").

A store recorded with `--no-flow-index` (as stores before the flow index) is indexed after
the fact: `verify` passes, a selective filter skips chunks (`--explain`), and the indexed
extract equals both `--no-index` and `tcpdump -r ORIGINAL FILTER`, byte for byte. The stock
tools (zstd/lz4 then tcpdump and tshark) read every file with the packets it had before. The
flow indexes equal those the recorder writes for the same packets (same trace recorded with
its index; the trailers are parsed here, independently of tapdeck). A second run changes
nothing. `kill -9` at several moments of a run (after 0, 1, 3 … files reported) leaves
every file readable with all its packets, and a second run completes. Plain pcap and pcapng
files get a sidecar `FILE.tdx` and are left byte for byte as they were; `verify` checks the
sidecar, and warns once about a stale one (the file changed). Errors are one line and
change nothing: a missing file, a file that is not a capture, a cut-short capture or stored
file, a file or directory that cannot be written (`chattr +i`).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import struct
from pathlib import Path

import pytest
from conftest import (
    QUICK,
    SLOW,
    Tapdeck,
    data_files,
    decompress,
    one_error_line,
    partial_files,
    run,
    start_recording,
    tshark_packets,
    wait_for,
)
from test_flow_index import FILTERS, trace

SEEK_FOOTER = 0x8F92EAB1
INDEX_MAGIC = 0x184D2A5B
SEEK_MAGIC = 0x184D2A5E


def parse_trailer(path: Path) -> dict:
    """The chunk index of a stored file (the last trailer, skipping replaced ones), read
    by this test's own parser of docs/store-format.md: entries and per-entry flow indexes."""
    b = path.read_bytes()
    frames, _desc, magic = struct.unpack_from("<IBI", b, len(b) - 9)
    assert magic == SEEK_FOOTER, path
    table_start = len(b) - (8 + 8 * frames + 9)
    assert struct.unpack_from("<I", b, table_start)[0] == SEEK_MAGIC
    sizes = [struct.unpack_from("<II", b, table_start + 8 + 8 * i) for i in range(frames)]
    at = sum(f for f, _ in sizes)
    replaced = 0
    while True:
        magic, length = struct.unpack_from("<II", b, at)
        assert magic in (INDEX_MAGIC, SEEK_MAGIC), (path, at)
        if magic == INDEX_MAGIC and at + 8 + length == table_start:
            break
        at += 8 + length
        replaced += 1
    body = b[at + 8 : table_start]
    assert body[:4] == b"TDCI"
    version, _flags, meta_len = struct.unpack_from("<HHI", body, 4)
    pos = 12 + meta_len
    (count,) = struct.unpack_from("<I", body, pos)
    pos += 4
    entries = []
    for _ in range(count):
        entries.append(struct.unpack_from("<QIQIQQIBBBb", body, pos))
        pos += 48
    flows, summary = [], b""
    if version >= 2:
        # Version 2: the FLOW extension; version 3: FLOW, then SUMM (the file's summary).
        n, tag, _len = struct.unpack_from("<I4sI", body, pos)
        assert (n, tag) == (version - 1, b"FLOW")
        pos += 12
        for _ in range(count):
            (ln,) = struct.unpack_from("<I", body, pos)
            flows.append(body[pos + 4 : pos + 4 + ln])
            pos += 4 + ln
        if version == 3:
            tag, ln = struct.unpack_from("<4sI", body, pos)
            assert tag == b"SUMM" and ln > 0
            summary = body[pos + 8 : pos + 8 + ln]
            pos += 8 + ln
    assert pos == len(body)
    return {"version": version, "entries": entries, "flows": flows, "summary": summary,
            "replaced_frames": replaced}  # fmt: skip


def record(tapdeck, original, store, *extra, codec="zstd:3"):
    r = tapdeck.record(store, "-r", original, "--chunk-size", "512KiB", "--codec", codec, *extra)
    assert r.returncode == 0, r.describe()
    return store


def packets_by_stock_tools(tmp: Path, path: Path) -> tuple[int, int]:
    """(tcpdump's count, tshark's count) of a stored file, decompressed by zstd/lz4."""
    plain = decompress(path, tmp / ("stock-" + path.name.rsplit(".", 1)[0]))
    r = run(["tcpdump", "-r", plain, "-nn", "-q"], timeout=SLOW)
    assert r.returncode == 0, r.describe()
    code, rows, err = tshark_packets(plain)
    assert code == 0, err
    return len(r.out.splitlines()), len(rows)


def tcpdump_packets(path, flt="") -> list[str]:
    r = run(["tcpdump", "-r", path, "-nn", "-tt", "--nano", "-xx", *([flt] if flt else [])],
            timeout=SLOW)
    assert r.returncode == 0, r.describe()
    return r.out.splitlines()


def last_record(buf: bytes, fmt: str) -> bytes:
    """The last packet record of a little-endian pcap, or the last EPB of a pcapng."""
    at, last = (24, b"") if fmt == "pcap" else (0, b"")
    while at < len(buf):
        if fmt == "pcap":
            (caplen,) = struct.unpack_from("<I", buf, at + 8)
            n = 16 + caplen
            last = buf[at : at + n]
        else:
            kind, n = struct.unpack_from("<II", buf, at)
            if kind == 6:
                last = buf[at : at + n]
        at += n
    assert last
    return last


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def made(tapdeck_bin, tmp_path_factory):
    """The trace of test_flow_index, recorded with and without the flow index (one file
    each, so their chunks are the same), and in several files (LZ4) without it."""
    tapdeck = Tapdeck(tapdeck_bin)
    tmp = tmp_path_factory.mktemp("indexcmd")
    original = trace(tmp / "original.pcap")
    return {
        "tmp": tmp,
        "original": original,
        "with": record(tapdeck, original, tmp / "with"),
        "without": record(tapdeck, original, tmp / "without", "--no-flow-index"),
        "rotated": record(
            tapdeck, original, tmp / "rotated", "--no-flow-index", "--rotate-size", "1MiB",
            codec="lz4",
        ),
    }


def fresh_copy(made, name, dest: Path) -> Path:
    shutil.copytree(made[name], dest)
    return dest


def index(tapdeck, *paths, code=0):
    r = tapdeck("index", *paths, timeout=SLOW)
    assert r.returncode == code, r.describe()
    return r


def test_an_indexed_store_extracts_as_tcpdump_does_and_skips_chunks(tapdeck, made, tmp_path):
    store = fresh_copy(made, "without", tmp_path / "store")
    files = data_files(store)
    before = {f.name: packets_by_stock_tools(tmp_path, f) for f in files}
    assert all(parse_trailer(f)["version"] == 1 for f in files)

    r = index(tapdeck, store)
    assert f"indexed {len(files)} file(s), skipped 0, failed 0" in r.out, r.out
    for f in files:
        t = parse_trailer(f)
        assert (t["version"], t["replaced_frames"]) == (3, 2), f  # the old index, seek table
    v = tapdeck.verify(store)
    assert v.returncode == 0, v.describe()

    # The stock tools read every file as before.
    assert {f.name: packets_by_stock_tools(tmp_path, f) for f in files} == before

    # A second run is a no-op.
    snapshot = {f.name: sha(f) for f in files}
    r = index(tapdeck, store)
    assert f"indexed 0 file(s), skipped {len(files)}, failed 0" in r.out, r.out
    assert "already has a flow index" in r.out
    assert {f.name: sha(f) for f in files} == snapshot

    pruned_some = False
    for i, flt in enumerate(FILTERS):
        out, plain = tmp_path / f"x{i}.pcapng", tmp_path / f"n{i}.pcapng"
        r = tapdeck.extract(store, out, "--explain", flt, timeout=SLOW)
        assert r.returncode == 0, r.describe()
        r2 = tapdeck.extract(store, plain, "--no-index", flt, timeout=SLOW)
        assert r2.returncode == 0, r2.describe()
        want = tcpdump_packets(made["original"], flt)
        assert tcpdump_packets(out) == want, flt
        assert tcpdump_packets(plain) == want, flt
        pruned_some |= " 0 ruled out by the flow index" not in r.stderr
    assert pruned_some, "no filter skipped a chunk"
    r = tapdeck.extract(store, tmp_path / "one.pcapng", "--explain", "host 198.18.3.7")
    m = re.search(r"explain: (\d+) of (\d+) chunks in the window read, (\d+) ruled out", r.stderr)
    assert m, r.stderr
    _read, total, pruned = map(int, m.groups())
    assert pruned > total // 2, m.group(0)


def test_flow_indexes_equal_the_recorders(tapdeck, made, tmp_path):
    store = fresh_copy(made, "without", tmp_path / "store")
    index(tapdeck, store)
    (indexed,) = data_files(store)
    (recorded,) = data_files(made["with"])
    a, b = parse_trailer(indexed), parse_trailer(recorded)
    # The same chunks (where they are in the data, their packets and times) ...
    key = lambda e: (e[2], e[3], e[4], e[5], e[6], e[7])
    assert [key(e) for e in a["entries"]] == [key(e) for e in b["entries"]]
    # ... have the same flow indexes, byte for byte, and the files the same summary.
    assert len(a["flows"]) == len(b["flows"]) > 5
    assert a["flows"] == b["flows"]
    assert a["version"] == b["version"] == 3 and a["summary"] == b["summary"] != b""


def test_a_store_of_several_lz4_files_and_its_stock_readers(tapdeck, made, tmp_path):
    store = fresh_copy(made, "rotated", tmp_path / "store")
    files = data_files(store)
    assert len(files) >= 3
    before = {f.name: packets_by_stock_tools(tmp_path, f) for f in files}
    index(tapdeck, store)
    assert {f.name: packets_by_stock_tools(tmp_path, f) for f in files} == before
    assert tapdeck.verify(store).returncode == 0
    out = tmp_path / "x.pcapng"
    r = tapdeck.extract(store, out, "--explain", "vlan 104")
    assert r.returncode == 0, r.describe()
    assert tcpdump_packets(out) == tcpdump_packets(made["original"], "vlan 104")
    assert " 0 ruled out" not in r.stderr, r.stderr


def all_packets(tapdeck, store, tmp: Path) -> list[str]:
    out = tmp / "all.pcapng"
    r = tapdeck.extract(store, out, "--no-index", timeout=SLOW)
    assert r.returncode == 0, r.describe()
    return tcpdump_packets(out)


@pytest.mark.parametrize("after_lines", [0, 1, 3, 6])
def test_kill_9_at_any_moment_leaves_readable_files_and_a_rerun_completes(
    tapdeck, made, tmp_path, procs, after_lines
):
    store = fresh_copy(made, "rotated", tmp_path / "store")
    files = data_files(store)
    want = tcpdump_packets(made["original"])
    stock = {f.name: packets_by_stock_tools(tmp_path, f) for f in files}

    p = tapdeck.popen("index", store)
    procs.append(p)
    seen = 0
    while seen < after_lines:  # progress: one line per file; bounded by the files
        line = p.stdout.readline()
        if not line:
            break
        seen += b": indexed:" in line
    p.kill()
    p.wait(timeout=QUICK)

    # Whatever the moment: every file reads whole, by tapdeck and by the stock tools.
    v = tapdeck.verify(store)
    assert v.returncode == 0, v.describe()
    assert all_packets(tapdeck, store, tmp_path) == want
    assert {f.name: packets_by_stock_tools(tmp_path, f) for f in files} == stock

    r = index(tapdeck, store)
    assert "failed 0" in r.out
    assert all(parse_trailer(f)["version"] == 3 for f in files)
    assert tapdeck.verify(store).returncode == 0
    assert all_packets(tapdeck, store, tmp_path) == want
    out = tmp_path / "f.pcapng"
    assert tapdeck.extract(store, out, "host 198.18.6.20 and tcp").returncode == 0
    assert tcpdump_packets(out) == tcpdump_packets(made["original"], "host 198.18.6.20 and tcp")


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_a_plain_capture_file_gets_a_sidecar_that_verify_checks(tapdeck, made, tmp_path, fmt):
    if fmt == "pcap":
        path = tmp_path / "trace.pcap"
        shutil.copyfile(made["original"], path)
    else:
        path = tmp_path / "trace.pcapng"
        r = tapdeck.extract(made["with"], path)
        assert r.returncode == 0, r.describe()
    digest = sha(path)
    want = tcpdump_packets(path)

    r = index(tapdeck, path)
    sidecar = Path(f"{path}.tdx")
    assert sidecar.is_file(), r.out
    assert "indexed 1 file(s)" in r.out
    assert sha(path) == digest, "the capture file was changed"
    assert tcpdump_packets(path) == want
    v = tapdeck.verify(path)
    assert v.returncode == 0, v.describe()
    assert "sidecar index of" in v.out and "matches" in v.out, v.out
    assert "already indexed" in index(tapdeck, path).out

    # The file changes (its last packet once more): the sidecar is stale, a one-line
    # warning, and indexing again replaces it.
    with open(path, "ab") as f:
        f.write(last_record(path.read_bytes(), fmt))
    v = tapdeck.verify(path)
    warnings = [l for l in v.stderr.splitlines() if "stale" in l]
    assert len(warnings) == 1 and warnings[0].startswith("tapdeck: warning:"), v.describe()
    r = index(tapdeck, path)
    assert "replacing a stale one" in r.out, r.out
    v = tapdeck.verify(path)
    assert v.returncode == 0 and "stale" not in v.stderr, v.describe()


@pytest.mark.parametrize("tool", ["gzip", "bzip2", "xz", "zstd"])
def test_a_compressed_capture_file_gets_a_sidecar_over_its_stream(tapdeck, made, tmp_path, tool):
    """Archives of old traces (issue 18): the stock tool's archive is indexed as the plain
    file is, over the decompressed stream; the archive stays as it was, verify checks the
    sidecar, and a cut archive is refused in one line and gets no sidecar."""
    if shutil.which(tool) is None:
        pytest.skip(f"needs {tool} (scripts/setup.sh installs it)")
    plain = tmp_path / "trace.pcap"
    shutil.copyfile(made["original"], plain)
    index(tapdeck, plain)
    blocks = re.search(r"sidecar index of (\d+) blocks", tapdeck.verify(plain).out).group(1)
    suffix = {"gzip": ".gz", "bzip2": ".bz2", "xz": ".xz", "zstd": ".zst"}[tool]
    run([tool, "-k", "-q", plain], check=True)
    packed = tmp_path / f"trace.pcap{suffix}"
    digest = sha(packed)
    r = index(tapdeck, packed)
    assert Path(f"{packed}.tdx").is_file() and "indexed 1 file(s)" in r.out, r.out
    assert sha(packed) == digest, "the archive was changed"
    v = tapdeck.verify(packed)
    assert v.returncode == 0, v.describe()
    # The same blocks as the plain file's: the block count verify reports, and the packets.
    assert f"sidecar index of {blocks} blocks matches" in v.out, v.out
    assert re.search(r"ok: (\d+) packets", v.out).group(1) == re.search(
        r"ok: (\d+) packets", tapdeck.verify(plain).out
    ).group(1)

    cut = tmp_path / f"cut.pcap{suffix}"
    cut.write_bytes(packed.read_bytes()[: packed.stat().st_size * 2 // 3])
    r = index(tapdeck, cut, code=1)
    line = one_error_line(r.stderr)
    assert "decompressed" in line and "not indexed" in line, line
    assert not Path(f"{cut}.tdx").exists()


def test_errors_are_one_line_and_change_nothing(tapdeck, made, tmp_path):
    r = index(tapdeck, tmp_path / "missing.pcap", code=1)
    assert "No such file" in one_error_line(r.stderr)

    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"hello, not a capture file" * 10)
    r = index(tapdeck, junk, code=1)
    assert "not a pcap or pcapng file" in one_error_line(r.stderr)
    assert not Path(f"{junk}.tdx").exists()

    cut = tmp_path / "cut.pcap"
    cut.write_bytes(made["original"].read_bytes()[:1_000_000])
    r = index(tapdeck, cut, code=1)
    line = one_error_line(r.stderr)
    assert "at byte offset" in line and "not indexed" in line, line
    assert not Path(f"{cut}.tdx").exists()

    store = fresh_copy(made, "without", tmp_path / "store")
    (f,) = data_files(store)
    f.write_bytes(f.read_bytes()[:400_000])
    digest = sha(f)
    r = index(tapdeck, store, code=1)
    line = one_error_line(r.stderr)
    assert "truncated" in line and "at byte offset" in line and "nothing changed" in line, line
    assert sha(f) == digest


def test_files_that_cannot_be_written_are_refused(tapdeck, made, tmp_path):
    if shutil.which("chattr") is None:
        pytest.skip("needs chattr")
    store = fresh_copy(made, "without", tmp_path / "store")
    (f,) = data_files(store)
    plain_dir = tmp_path / "ro"
    plain_dir.mkdir()
    plain = plain_dir / "trace.pcap"
    shutil.copyfile(made["original"], plain)
    digest = sha(f)
    if run(["chattr", "+i", f, plain_dir]).returncode != 0:
        pytest.skip("this filesystem has no immutable attribute")
    try:
        r = index(tapdeck, f, plain, code=1)
        errors = [l for l in r.stderr.splitlines() if l.startswith("tapdeck:")]
        assert len(errors) == 2, r.stderr
        assert all("nothing changed" in l for l in errors), errors
    finally:
        run(["chattr", "-i", f, plain_dir])
    assert sha(f) == digest
    assert not list(plain_dir.glob("*.tdx")) and not list(plain_dir.glob(".*"))


def test_a_partial_file_is_skipped(tapdeck, made, tmp_path):
    store = fresh_copy(made, "rotated", tmp_path / "store")
    files = data_files(store)
    partial = store / f".{files[-1].name}.partial"
    files[-1].rename(partial)
    r = index(tapdeck, store)
    assert "verify --repair" in r.out and "skipped 1" in r.out, r.out


def test_a_file_a_running_recorder_writes_is_skipped_and_the_rest_indexed(tapdeck, tmp_path, procs):
    store = tmp_path / "live"
    start_recording(
        tapdeck, procs, store, "--synthetic", "mix", "--rate", "20000", "--rotate-size", "1MiB",
        "--no-flow-index",
    )
    wait_for(lambda: len(data_files(store)) >= 2 and partial_files(store), SLOW,
             "two finished files and one being written")
    r = index(tapdeck, store)
    lines = r.out.splitlines()
    live = [l for l in lines if ".partial: skipped: being written by pid" in l]
    assert len(live) == 1, r.out
    assert "index it once the recorder has finished it" in live[0]
    assert sum(": indexed:" in l for l in lines) >= 2, r.out
    assert "failed 0" in lines[-1], r.out
