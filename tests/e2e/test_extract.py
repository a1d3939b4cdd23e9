"""`tapdeck extract`: time windows and BPF filters against tcpdump, pipes, several data
directories, and standard-input recording.

Oracle: `tcpdump -r ORIG -w - FILTER` gives the packets the filter passes; the window
[start, end) is applied to those in Python. Packets are compared by timestamp (ns),
original length and bytes. Multi-stream stores cannot be made from the CLI yet (one
source per run), so merging of streams is not covered here.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest

from conftest import (
    data_files,
    gen_packets,
    one_error_line,
    read_packets,
    read_packets_bytes,
    run,
    tcpdump_text,
    write_pcap,
)

T0 = 1_795_413_454_000_000_000  # 2026-11-23T05:57:34Z
N = 6000
SPAN = 60 * 10**9


@pytest.fixture(scope="module")
def store(tapdeck, tmp_path_factory):
    """A store of several files, each of several chunks, from one generated pcap."""
    base = tmp_path_factory.mktemp("extract")
    packets = gen_packets(N, start_ns=T0, duration_ns=SPAN, seed=3)
    src = write_pcap(base / "orig.pcap", packets)
    s = base / "S"
    r = tapdeck.record(s, "-r", src, "--staging", "32MiB", "--chunk-size", "512KiB",
                       "--rotate-size", "1MiB")
    assert r.returncode == 0, r.describe()
    assert len(data_files(s)) >= 3
    return s, src, packets


def key(p):
    return (p.ts_ns, p.orig_len, p.data)


def tcpdump_filtered(src, expr: str, tmp_path):
    out = tmp_path / "want.pcap"
    r = run(["tcpdump", "--nano", "-r", src, "-w", out, *expr.split()], timeout=60)
    assert r.returncode == 0, r.describe()
    return read_packets(out)


def rfc3339(ts_ns: int) -> str:
    s, ns = divmod(ts_ns, 10**9)
    return dt.datetime.fromtimestamp(s, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{ns:09d}Z"


def epoch(ts_ns: int) -> str:
    s, ns = divmod(ts_ns, 10**9)
    return f"{s}.{ns:09d}"


CASES = [
    # (filter, start index, end index, time syntax)
    ("", None, None, None),
    ("udp and port 53", None, None, None),
    ("", 1000, 1001, "epoch"),
    ("", 1234, 4321, "rfc3339"),
    ("tcp", 10, 5990, "epoch"),
    ("udp and port 53", 2000, 2600, "rfc3339"),
    ("dst net 198.19.0.0/16 or tcp port 443", 3000, None, "epoch"),
    ("udp", None, 500, "rfc3339"),
    ("greater 1000", 0, N - 1, "epoch"),
]


@pytest.mark.parametrize("expr,lo,hi,syntax", CASES,
                         ids=[f"{c[0] or 'all'}[{c[1]}:{c[2]}]{c[3] or ''}" for c in CASES])
def test_window_and_filter_match_tcpdump(tapdeck, store, tmp_path, expr, lo, hi, syntax):
    s, src, packets = store
    fmt = {"epoch": epoch, "rfc3339": rfc3339, None: None}[syntax]
    args = []
    start = packets[lo].ts_ns if lo is not None else None
    end = packets[hi].ts_ns if hi is not None else None
    if start is not None:
        args += ["--start", fmt(start)]
    if end is not None:
        args += ["--end", fmt(end)]
    out = tmp_path / "out.pcapng"
    r = tapdeck.extract(s, out, *args, *(expr.split() if expr else []))
    assert r.returncode == 0, r.describe()
    want = tcpdump_filtered(src, expr, tmp_path) if expr else read_packets(src)
    want = [p for p in want if (start is None or p.ts_ns >= start) and (end is None or p.ts_ns < end)]
    got = read_packets(out)
    assert len(got) == len(want)
    assert [key(p) for p in got] == [key(p) for p in want]
    m = re.search(r"wrote (\d+) packets", r.stderr)
    assert m and int(m.group(1)) == len(want), r.stderr


def test_narrow_window_reads_few_chunks(tapdeck, store, tmp_path):
    s, src, packets = store
    r = tapdeck.extract(s, tmp_path / "o.pcapng", "--start", epoch(packets[3000].ts_ns),
                        "--end", epoch(packets[3001].ts_ns))
    assert r.returncode == 0, r.describe()
    m = re.search(r"decoded (\d+) of (\d+) files, (\d+) of (\d+) chunks", r.stderr)
    assert m, r.stderr
    files, files_total, chunks, chunks_total = map(int, m.groups())
    # (Chunks are counted in the files opened: the store catalog leaves out files whose
    # true time range misses the window.)
    assert files == 1 and chunks == 1 and files_total > 3, r.stderr
    assert [key(p) for p in read_packets(tmp_path / "o.pcapng")] == [key(packets[3000])]


def test_pipe_to_tcpdump(tapdeck, store):
    s, src, packets = store
    x = tapdeck("extract", s, "-w", "-", timeout=60)
    assert x.returncode == 0, x.describe()
    rc, got, err = tcpdump_text("-", input=x.stdout)
    assert rc == 0, err
    rc, want, _ = tcpdump_text(src)
    assert got == want


def test_pipe_to_tcpdump_that_stops_early(tapdeck, store):
    """`extract -w - | tcpdump -c 5`: the reader goes away; extract ends quietly."""
    s, _, _ = store
    r = run(["bash", "-c", f"set -o pipefail; {tapdeck.bin} extract {s} -w - | tcpdump -r - -c 5 -nn"],
            timeout=60)
    assert r.returncode == 0, r.describe()
    assert len(r.out.splitlines()) == 5
    assert "panicked" not in r.stderr and "Broken pipe" not in r.stderr


def test_pcap_output_from_pcapng_store(tapdeck, store, tmp_path):
    s, src, packets = store
    out = tmp_path / "o.pcap"
    r = tapdeck.extract(s, out, "--format", "pcap", "udp")
    assert r.returncode == 0, r.describe()
    assert out.read_bytes()[:4] == b"\x4d\x3c\xb2\xa1", "not a nanosecond pcap"
    assert [key(p) for p in read_packets(out)] == [key(p) for p in tcpdump_filtered(src, "udp", tmp_path)]


def test_bad_extract_arguments(tapdeck, store, tmp_path):
    s, _, packets = store
    for args, word in [
        (["--start", epoch(packets[10].ts_ns), "--end", epoch(packets[5].ts_ns)], "--start"),
        (["--start", "yesterday"], "--start"),
        (["udp and and"], "filter"),
    ]:
        r = tapdeck.extract(s, tmp_path / "o.pcapng", *args)
        assert r.returncode != 0, args
        line = one_error_line(r.stderr)
        assert word in line, line


def test_two_dirs_round_robin(tapdeck, tmp_path):
    packets = gen_packets(3000, start_ns=T0, duration_ns=SPAN, seed=4)
    src = write_pcap(tmp_path / "orig.pcap", packets)
    s, d1, d2 = tmp_path / "S", tmp_path / "d1", tmp_path / "d2"
    r = tapdeck.record(s, "-r", src, "--dir", d1, "--dir", d2, "--staging", "32MiB",
                       "--chunk-size", "512KiB", "--rotate-size", "512KiB")
    assert r.returncode == 0, r.describe()
    in1, in2 = data_files(d1), data_files(d2)
    assert data_files(s) == []
    assert len(in1) >= 2 and len(in2) >= 2
    seqs = lambda fs: [int(f.name.split("-")[2].split(".")[0]) for f in fs]
    assert seqs(in1) == list(range(1, 2 * len(in1), 2)), "files do not alternate"
    assert seqs(in2) == list(range(2, 2 * len(in2) + 1, 2)), "files do not alternate"
    assert abs(len(in1) - len(in2)) <= 1
    v = tapdeck.verify(s)
    assert v.returncode == 0, v.describe()
    out = tmp_path / "o.pcapng"
    x = tapdeck.extract(s, out)
    assert x.returncode == 0, x.describe()
    assert [key(p) for p in read_packets(out)] == [key(p) for p in packets]


def test_record_from_stdin(tapdeck, tmp_path):
    packets = gen_packets(2000, start_ns=T0, duration_ns=SPAN, seed=6)
    src = write_pcap(tmp_path / "orig.pcap", packets)
    s = tmp_path / "S"
    r = tapdeck("record", "--store", s, "-q", "-r", "-", "--staging", "32MiB",
                "--chunk-size", "512KiB", input=src.read_bytes(), timeout=60)
    assert r.returncode == 0, r.describe()
    x = tapdeck("extract", s, "-w", "-", timeout=60)
    assert x.returncode == 0, x.describe()
    assert [key(p) for p in read_packets_bytes(x.stdout)] == [key(p) for p in packets]
    rc, got, _ = tcpdump_text("-", input=x.stdout)
    rc0, want, _ = tcpdump_text(src)
    assert got == want


def test_record_from_stdin_compressed_store_file(tapdeck, store, tmp_path):
    """A stored .zst file fed back on standard input is decompressed on the fly."""
    s, src, packets = store
    first = data_files(s)[0]
    s2 = tmp_path / "S2"
    r = tapdeck("record", "--store", s2, "-q", "-r", "-", "--staging", "32MiB",
                "--chunk-size", "512KiB", input=first.read_bytes(), timeout=60)
    assert r.returncode == 0, r.describe()
    n = tapdeck.info(s)["files"][0]["packets"]
    assert tapdeck.info(s2)["totals"]["packets"] == n
    x = tapdeck.extract(s2, tmp_path / "o.pcapng")
    assert x.returncode == 0
    assert [key(p) for p in read_packets(tmp_path / "o.pcapng")] == [key(p) for p in packets[:n]]
