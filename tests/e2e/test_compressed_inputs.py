"""Issue 18, compressed inputs: `record -r` and `convert` read traces compressed with gzip,
bzip2 and xz (how archives of old traces are kept) as they read zstd: told by content, not
by name, streamed, concatenated members too, from standard input too.

Oracles: the stock tools make the archives (`gzip`, `bzip2`, `xz`, `zstd`; `cat` of two
members) and decompress the cut ones (what they recover is what must be kept); the packets
are compared with conftest's struct-based reader and the Parquet files byte for byte with a
conversion of the uncompressed trace. Traces: generated Ethernet/IPv4 UDP and TCP (pcap, and
pcapng through editcap) and an NFS trace from bench/nfsgen.py (RPC and NFS tables).
"""

from __future__ import annotations

import bz2
import re
import shutil
import sys
from pathlib import Path

import pytest

from conftest import (
    REPO,
    SLOW,
    data_files,
    gen_packets,
    one_error_line,
    read_packets,
    run,
    scan_capture,
    write_pcap,
)
from convtools import TABLES, convert_ok, table
from convtools import data_files as parquet_files

# The stock compressor of each form; "gz2" is two gzip members one after the other (as `cat
# a.gz b.gz` makes), and likewise "bz22", "xz2", "zst2" and "lz42".
TOOLS = {"gz": "gzip", "bz2": "bzip2", "xz": "xz", "zst": "zstd", "lz4": "lz4"}
FORMS = ["gz", "bz2", "xz", "zst", "gz2", "bz22", "xz2", "zst2", "lz42"]
ARCHIVES = ["gz", "bz2", "xz"]


def need_tools(*tools):
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/setup.sh installs them)")


def tool_of(form: str) -> str:
    return TOOLS[form if form in TOOLS else form[:-1]]


def compress(data: bytes, form: str) -> bytes:
    """`data` compressed by the stock tool; a two-member form compresses each half apart."""
    tool = tool_of(form)
    need_tools(tool)
    if form not in TOOLS:
        half = len(data) // 2
        return compress(data[:half], form[:-1]) + compress(data[half:], form[:-1])
    r = run([tool, "-c", "-q"] if tool in ("zstd", "lz4") else [tool, "-c"], input=data,
            timeout=SLOW)
    assert r.returncode == 0, r.describe()
    return r.stdout


def recovered(archive: Path, form: str) -> bytes:
    """What the stock tool decompresses of a (cut) archive; it complains, but writes it. The
    `bzip2` tool drops the last piece it decoded (up to 5000 bytes) when it meets the cut,
    so for bzip2 Python's binding of libbzip2 says what is recoverable."""
    if form == "bz2":
        return bz2.BZ2Decompressor().decompress(archive.read_bytes())
    r = run([tool_of(form), "-dc", archive], timeout=SLOW)
    assert r.returncode != 0, f"{tool_of(form)} read the cut {archive} without complaint"
    return r.stdout


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    """Plain traces: a pcap, the same as pcapng, and an NFS pcap."""
    d = tmp_path_factory.mktemp("traces")
    out = {"pcap": write_pcap(d / "gen.pcap", gen_packets(4000, seed=18))}
    if shutil.which("editcap"):
        ng = d / "gen.pcapng"
        r = run(["editcap", "-F", "pcapng", out["pcap"], ng], timeout=SLOW)
        assert r.returncode == 0, r.describe()
        out["pcapng"] = ng
    nfs = d / "nfs.pcap"
    r = run([sys.executable, REPO / "bench" / "nfsgen.py", nfs, "--transactions", "300",
             "--seed", "18"], timeout=SLOW)
    if r.returncode == 0:
        out["nfs"] = nfs
    return out


def trace(traces, kind: str) -> Path:
    if kind not in traces:
        pytest.skip(f"no {kind} trace here (editcap, or numpy for bench/nfsgen.py, missing)")
    return traces[kind]


def packets(path) -> list[tuple]:
    return [(p.ts_ns, p.orig_len, p.data) for p in read_packets(path)]


def record_and_extract(tapdeck, work: Path, src, *, input=None):
    """`record -r SRC` into work/S, then the store's verify and extract: (record's Result,
    the extracted packets)."""
    store = work / "S"
    r = tapdeck.record(store, "-r", src, "--staging", "8MiB", "--chunk-size", "512KiB",
                       "--log", "warn", input=input)
    assert "panicked" not in r.stderr, r.describe()
    got = []
    if data_files(store):
        v = tapdeck.verify(store)
        assert v.returncode == 0, v.describe()
        x = tapdeck.extract(store, work / "out.pcapng")
        assert x.returncode == 0, x.describe()
        got = packets(work / "out.pcapng")
    return r, got


# ---------------------------------------------------------------------------------------
# Whole archives: the same packets, the same tables
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
@pytest.mark.parametrize("form", FORMS)
def test_record_of_an_archive_stores_the_original_packets(tapdeck, traces, tmp_path, kind, form):
    src = trace(traces, kind)
    want = packets(src)
    # Named as a plain trace: the content decides, not the name.
    for name in (f"{src.name}.{form}", src.name):
        work = tmp_path / name
        work.mkdir()
        archive = work / name
        archive.write_bytes(compress(src.read_bytes(), form))
        r, got = record_and_extract(tapdeck, work, archive)
        assert r.returncode == 0, r.describe()
        assert got == want, f"{name}: {len(got)} packets stored of {len(want)}, or different"


@pytest.mark.parametrize("form", FORMS)
def test_record_from_standard_input(tapdeck, traces, tmp_path, form):
    src = trace(traces, "pcapng")
    r, got = record_and_extract(tapdeck, tmp_path, "-", input=compress(src.read_bytes(), form))
    assert r.returncode == 0, r.describe()
    assert got == packets(src)


@pytest.mark.parametrize("kind", ["pcap", "pcapng", "nfs"])
def test_convert_of_each_archive_writes_the_same_parquet_files(tapdeck, traces, tmp_path, kind):
    """The trace converted plain, then each archive of it put in its place (same path, so
    the files' metadata naming their source is the same): the same Parquet files, byte for
    byte. Under an archive's own name (x.pcap.gz): the same rows."""
    src = trace(traces, kind)
    original = src.read_bytes()
    work = tmp_path / "in"
    work.mkdir()
    at = work / src.name
    at.write_bytes(original)
    convert_ok(tapdeck, tmp_path / "plain", at)
    want = parquet_files(tmp_path / "plain")
    assert any(p.startswith("packets/") for p in want), sorted(want)
    if kind == "nfs":
        assert any(p.startswith("nfs_ops/") for p in want), sorted(want)
    rows = {t: table(tmp_path / "plain", t) for t in TABLES}
    for form in FORMS:
        at.write_bytes(compress(original, form))
        convert_ok(tapdeck, tmp_path / form, at)
        got = parquet_files(tmp_path / form)
        assert sorted(got) == sorted(want), form
        differ = [p for p in want if got[p] != want[p]]
        assert not differ, f"{form}: these Parquet files differ from the plain trace's: {differ}"
    for form in ARCHIVES:
        archive = work / f"{src.name}.{form}"
        archive.write_bytes(compress(original, form))
        convert_ok(tapdeck, tmp_path / f"named-{form}", archive)
        for t in TABLES:
            assert table(tmp_path / f"named-{form}", t) == rows[t], f"{archive.name}: table {t}"


def test_a_directory_walk_finds_archives_by_name(tapdeck, traces, tmp_path):
    import pyarrow.parquet as pq

    src = trace(traces, "pcap")
    d = tmp_path / "traces"
    d.mkdir()
    names = [f"{src.name}.{form}" for form in ARCHIVES] + ["notes.txt.gz"]
    for name, form in zip(names, ARCHIVES + ["gz"]):
        (d / name).write_bytes(compress(src.read_bytes(), form))
    convert_ok(tapdeck, tmp_path / "D", d)
    sources = pq.read_table(tmp_path / "D" / "catalog" / "sources.parquet").to_pylist()
    assert sorted(Path(s["path"]).name for s in sources) == sorted(names[:-1])
    assert len(table(tmp_path / "D", "packets")) == len(ARCHIVES) * len(packets(src))


# ---------------------------------------------------------------------------------------
# Archives cut short, and corrupt
# ---------------------------------------------------------------------------------------

CUT_SHORT = re.compile(r"the (gzip|bzip2|xz|zstd) archive is cut short: it ends at its byte (\d+)")


@pytest.mark.parametrize("form", ARCHIVES + ["zst", "gz2"])
@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
def test_record_of_a_cut_archive_keeps_the_packets_before_the_cut(tapdeck, traces, tmp_path,
                                                                  kind, form):
    """Cut at 70 %: what the stock tool recovers decides how many packets are whole before
    the cut; exactly those are stored (verified, extracted), then record exits nonzero with
    one line naming the file, that it is cut short, and where."""
    src = trace(traces, kind)
    whole = compress(src.read_bytes(), form)
    cut = len(whole) * 7 // 10
    archive = tmp_path / f"{src.name}.{form}"
    archive.write_bytes(whole[:cut])
    saved = recovered(archive, form)
    (tmp_path / "saved").write_bytes(saved)
    expected = scan_capture(tmp_path / "saved")["packets"]
    assert expected > 0, "the cut left no whole packet: cut later"
    r, got = record_and_extract(tapdeck, tmp_path, archive)
    assert r.returncode != 0, r.describe()
    line = one_error_line(r.stderr)
    assert str(archive) in line, line
    m = CUT_SHORT.search(line)
    assert m and int(m.group(2)) == cut, line
    assert re.search(r"byte offset \d+", line), line
    assert src.read_bytes().startswith(saved), f"{tool_of(form)} recovered other bytes"
    assert got == packets(src)[:len(got)], "what was stored is not the trace's first packets"
    assert len(got) == expected, f"{expected} whole packets before the cut, {len(got)} stored"


@pytest.mark.parametrize("form", ARCHIVES)
def test_convert_of_a_cut_archive_converts_the_packets_before_the_cut(tapdeck, traces, tmp_path,
                                                                      form):
    """As for a plain file cut short: a warning naming the file and the cut, the packets
    before it converted, the dataset written."""
    src = trace(traces, "pcap")
    whole = compress(src.read_bytes(), form)
    archive = tmp_path / f"{src.name}.{form}"
    archive.write_bytes(whole[: len(whole) * 7 // 10])
    (tmp_path / "saved").write_bytes(recovered(archive, form))
    expected = scan_capture(tmp_path / "saved")["packets"]
    r = tapdeck("convert", archive, "--out", tmp_path / "D", "-q", timeout=SLOW)
    assert r.returncode == 0, r.describe()
    warnings = [l for l in r.stderr.splitlines() if "cut short" in l]
    assert len(warnings) == 1 and str(archive) in warnings[0], r.stderr
    assert f"converted the {expected} packets before it" in warnings[0], warnings[0]
    assert len(table(tmp_path / "D", "packets")) == expected


@pytest.mark.parametrize("form", ARCHIVES)
def test_a_corrupt_archive_is_one_error_line(tapdeck, traces, tmp_path, form):
    """A check value at the end damaged (gzip's CRC-32, bzip2's stream CRC, xz's footer
    CRC): the packets decoded before the decoder finds the damage are stored (a decoder may
    withhold its last output once it sees damage), then one line names the file and says
    the archive is corrupt."""
    src = trace(traces, "pcap")
    bad = bytearray(compress(src.read_bytes(), form))
    bad[len(bad) - {"gz": 8, "bz2": 2, "xz": 10}[form]] ^= 0xFF
    archive = tmp_path / f"{src.name}.{form}"
    archive.write_bytes(bytes(bad))
    r, got = record_and_extract(tapdeck, tmp_path, archive)
    assert r.returncode != 0, r.describe()
    line = one_error_line(r.stderr)
    assert str(archive) in line, line
    assert f"the {tool_of(form)} archive is corrupt near its byte" in line, line
    want = packets(src)
    assert len(got) > len(want) // 2 and got == want[:len(got)], f"{len(got)} of {len(want)}"
