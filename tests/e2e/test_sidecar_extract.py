"""Plain capture files read through their sidecars (issue 32, item 5): `extract FILE` and
`convert FILE --filter` read only the blocks of a pcap/pcapng file that its sidecar
(`tapdeck index FILE`) says can match, and answer what tcpdump answers over the whole file.

Oracles: tcpdump's own reading of the same file with the same filter (its text lines,
timestamps included); strace for the bytes read from the capture file; `--no-index`,
which reads every block, for the output bytes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import (
    corpus_files,
    corpus_id,
    need,
    read_packets,
    run,
    tcpdump_lines,
    tcpdump_packets,
)
from test_store_catalog import RARE, SEC, T0, trace_with_rare_host

FILTER = f"host {RARE}"
# The rare host's 20 packets lie at second 42 of a 100-second trace.
WINDOW = [f"--start={(T0 + 40 * SEC) / 1e9:.9f}", f"--end={(T0 + 45 * SEC) / 1e9:.9f}"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    """About 90 MB of pcap (22 sidecar blocks of 4 MiB), the rare host in one of them."""
    return trace_with_rare_host(tmp_path_factory.mktemp("sidecar") / "in.pcap", n=150_000)


def fresh_copy(src: Path, dest_dir: Path, name: str = "in.pcap") -> Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / name
    shutil.copyfile(src, dest)
    return dest


def index(tapdeck, path: Path) -> Path:
    r = tapdeck("index", path)
    assert r.returncode == 0, r.describe()
    sidecar = path.with_name(path.name + ".tdx")
    assert sidecar.is_file(), r.describe()
    return sidecar


def extract(tapdeck, path: Path, out: Path, *extra, filt: str = FILTER, strace: Path | None = None):
    args = [tapdeck.bin, "extract", path, "-f", filt, "-w", out, "--explain", *extra]
    if strace is not None:
        args = ["strace", "-f", "-e", "trace=openat,read,pread64,close", "-o", strace, *args]
    r = run(args, timeout=120)
    assert r.returncode == 0, r.describe()
    return r.stderr


def chunks_read(stderr: str) -> tuple[int, int]:
    m = re.search(r"explain: (\d+) of (\d+) chunks in the window read", stderr)
    assert m, stderr
    return int(m.group(1)), int(m.group(2))


def bytes_read_from(log: str, name: str) -> int:
    """Bytes strace saw read from every descriptor opened on `name`."""
    fds, total = set(), 0
    for line in log.splitlines():
        m = re.search(r'openat\(.*"([^"]+)".*\) = (\d+)$', line)
        if m:
            fd = int(m.group(2))
            if m.group(1).rsplit("/", 1)[-1] == name:
                fds.add(fd)
            else:
                fds.discard(fd)
            continue
        m = re.search(r"close\((\d+)\)", line)
        if m:
            fds.discard(int(m.group(1)))
            continue
        m = re.search(r"(?:pread64|read)\((\d+),.*\) = (\d+)$", line)
        if m and int(m.group(1)) in fds:
            total += int(m.group(2))
    return total


def test_extract_reads_only_the_blocks_that_can_hold_the_host(tapdeck, trace, tmp_path):
    need("tcpdump", "strace")
    path = fresh_copy(trace, tmp_path)
    index(tapdeck, path)
    out, log = tmp_path / "out.pcap", tmp_path / "strace.log"
    stderr = extract(tapdeck, path, out, strace=log)
    read, total = chunks_read(stderr)
    assert total >= 20 and read <= 2, f"{read} of {total} blocks read:\n{stderr}"
    # The blocks the index ruled out were never read: at most a tenth of the file was (the
    # header, the sidecar's identity hashes of both ends, the one block).
    got = bytes_read_from(log.read_text(), path.name)
    size = path.stat().st_size
    assert 0 < got < size // 10, f"read {got} of {size} bytes of {path.name}"
    want = tcpdump_lines(path, FILTER)
    assert tcpdump_packets(want) == 20
    assert tcpdump_lines(out) == want, "extract through the sidecar differs from tcpdump"
    every = tmp_path / "every.pcap"
    extract(tapdeck, path, every, "--no-index")
    assert out.read_bytes() == every.read_bytes()


def test_a_pcapng_file_reads_through_its_sidecar_too(tapdeck, trace, tmp_path):
    need("tcpdump", "editcap")
    path = tmp_path / "in.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", trace, path], check=True, timeout=120)
    index(tapdeck, path)
    out = tmp_path / "out.pcapng"
    stderr = extract(tapdeck, path, out, "--format", "pcapng")
    read, total = chunks_read(stderr)
    assert total >= 20 and read <= 2, stderr
    assert tcpdump_lines(out) == tcpdump_lines(path, FILTER)


def test_without_a_fresh_sidecar_the_file_is_indexed_in_memory_and_left_as_it_was(
    tapdeck, trace, tmp_path
):
    need("tcpdump")
    path = fresh_copy(trace, tmp_path / "none")
    out = tmp_path / "none.pcap"
    stderr = extract(tapdeck, path, out)
    assert "no sidecar index" in stderr and "indexing it in memory" in stderr, stderr
    assert not path.with_name("in.pcap.tdx").exists(), "extract must not write a sidecar"
    want = tcpdump_lines(trace, FILTER)
    assert tcpdump_lines(out) == want

    # A sidecar of another file (same size, other bytes) is stale: ignored, and kept.
    other = fresh_copy(trace, tmp_path / "stale")
    sidecar = index(tapdeck, other)
    before = sidecar.read_bytes()
    with open(other, "r+b") as f:
        f.seek(100)
        f.write(b"\xff")  # inside the first packet's bytes, outside any address
    out = tmp_path / "stale.pcap"
    stderr = extract(tapdeck, other, out)
    assert "stale" in stderr and "indexing it in memory" in stderr, stderr
    assert sidecar.read_bytes() == before
    assert tcpdump_packets(tcpdump_lines(out)) == 20


def test_a_window_on_a_capture_file_reads_the_blocks_it_overlaps(tapdeck, trace, tmp_path):
    path = fresh_copy(trace, tmp_path)
    index(tapdeck, path)
    out, every = tmp_path / "win.pcap", tmp_path / "every.pcap"
    stderr = extract(tapdeck, path, out, *WINDOW, filt="")
    read, total = chunks_read(stderr)
    assert read <= 3, stderr
    extract(tapdeck, path, every, *WINDOW, "--no-index", filt="")
    assert out.read_bytes() == every.read_bytes()
    assert tcpdump_packets(tcpdump_lines(out)) > 1000


def test_what_cannot_be_read_by_blocks_gets_one_line_and_no_output(tapdeck, trace, tmp_path):
    need("gzip")
    gz = tmp_path / "in.pcap.gz"
    with open(gz, "wb") as f:
        subprocess.run(["gzip", "-1", "-c", trace], stdout=f, check=True, timeout=120)
    notes = tmp_path / "notes.txt"
    notes.write_text("not a capture\n")
    for bad, says in [(gz, "gzip-compressed"), (notes, "not a pcap or pcapng file"),
                      (tmp_path / "missing.pcap", "no such store directory or capture file")]:
        out = tmp_path / "out.pcap"
        r = tapdeck("extract", bad, "-f", FILTER, "-w", out)
        assert r.returncode == 1, r.describe()
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and says in lines[0], r.describe()
        assert lines[0].count(bad.name) == 1, f"the error repeats itself: {lines[0]}"
        assert not out.exists(), "nothing is written when nothing can be read"


def test_convert_filter_reads_a_capture_file_through_its_sidecar(tapdeck, trace, tmp_path):
    path = fresh_copy(trace, tmp_path)
    index(tapdeck, path)
    ds = tmp_path / "ds"
    r = tapdeck("convert", path, "--out", ds, "--filter", FILTER, "--json", timeout=300)
    assert r.returncode == 0, r.describe()
    assert re.search(r"selected 20 packets .* from 1 of 22 chunks \(21 skipped", r.stderr), r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["counts"].get("rows.packets") == 20, report


def capture_samples() -> list[Path]:
    """Every pcapng test vector (interfaces and sections declared after the first packet,
    statistics before it, custom blocks) and every 20th tcpdump test file."""
    files = corpus_files()
    vectors = [f for f in files if "pcapng-test-vectors" in str(f)]
    tcpdump = [f for f in files if "pcapng-test-vectors" not in str(f)]
    return vectors + tcpdump[::20]


@pytest.mark.parametrize("path", capture_samples(), ids=corpus_id)
def test_every_kind_of_capture_file_extracts_to_its_own_packets(tapdeck, path, tmp_path):
    """A file whose blocks cannot be read alone is read whole; either way the output holds
    the file's packets (time, link type, bytes) in the file's order, as the strict reader
    of conftest reads them."""
    def key(p, spb: bool):
        # A simple packet block has no time, and its captured length follows the snap
        # length (the reader here gives time 0 and ignores the snap length): tapdeck's
        # handling of both is the round trip's to check (test_roundtrip.py). An original
        # length is widened to cover every byte kept (documented there too).
        if spb:
            return ("simple packet block", p.linktype)
        return (p.ts_ns, p.linktype, max(p.orig_len, len(p.data)), p.data)

    oracle = read_packets(path)
    spbs = [p.ts_ns == 0 for p in oracle]
    want = [key(p, spb) for p, spb in zip(oracle, spbs)]
    # Indexed in memory, then through the sidecar `tapdeck index` writes.
    copy = fresh_copy(path, tmp_path / "copy", path.name)
    for sidecar in (False, True):
        if sidecar and tapdeck("index", copy).returncode != 0:
            continue  # a file `index` refuses (e.g. with no packets) is read as above
        out = tmp_path / f"out-{sidecar}.pcapng"
        r = tapdeck("extract", copy, "-f", "", "-w", out, "--format", "pcapng")
        if r.returncode == 1 and not want:
            continue  # nothing to read (a file of statistics or custom blocks only)
        assert r.returncode == 0, r.describe()
        got = [key(p, spb) for p, spb in zip(read_packets(out), spbs + [False] * 10**6)]
        assert got == want, f"sidecar={sidecar}"
