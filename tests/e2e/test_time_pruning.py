"""Time pruning (issue 32, item 3): a `--start/--end` window opens only the data files whose
time span meets it, plus at most one more at each edge, in `extract`, the query API
(`/api/v1/packets` through `tapdeck query`, and `/api/v1/count`) and `convert --start/--end`,
and the answer is what reading every file gives.

A file's span comes from names: its name's time (its first packet) up to the next file's
name time. Opens are counted by strace (`openat` of data files). Oracles: strace for what was
opened; the stock `zstd` tool and the strict reader of conftest for what each file really
holds (so that every file holding a packet of the window is among those opened); the
generated packets for what the window holds; `extract --no-index` (which opens every file)
for the bytes; tcpdump for the query API's answer.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess

import pytest
from conftest import (
    data_files,
    decompress,
    gen_packets,
    need,
    opened_data_files,
    read_packets,
    run,
    tcpdump_lines,
    wait_for,
    write_pcap,
)
from netlab import free_port
from served import Served

T0 = 1_795_413_454_000_000_000  # 2026-11-23T05:57:34Z
N = 20_000
SPAN = 100 * 10**9
SEC = 10**9



def name_time(name: str) -> int:
    """The first packet time a file's name gives (ns since the epoch)."""
    t = dt.datetime.strptime(name[:15], "%Y%m%dT%H%M%S").replace(tzinfo=dt.UTC)
    return int(t.timestamp()) * SEC + int(name[16:25])


def epoch(ts_ns: int) -> str:
    s, ns = divmod(ts_ns, SEC)
    return f"{s}.{ns:09d}"


@pytest.fixture(scope="module")
def store(tapdeck, tmp_path_factory):
    """About a hundred files of one stream, each about a second of packets, and what each
    really holds (read with the stock zstd tool)."""
    need("strace", "zstd", "tcpdump")
    base = tmp_path_factory.mktemp("prune")
    packets = gen_packets(N, start_ns=T0, duration_ns=SPAN, seed=32)
    src = write_pcap(base / "orig.pcap", packets)
    s = base / "S"
    r = tapdeck.record(s, "-r", src, "--staging", "32MiB", "--chunk-size", "300KiB",
                       "--rotate-size", "128KiB")
    assert r.returncode == 0, r.describe()
    files = sorted(p.name for p in data_files(s))
    assert len(files) >= 80, len(files)
    holds = {}
    for name in files:
        got = read_packets(decompress(s / name, base / "one.pcapng"))
        holds[name] = (min(p.ts_ns for p in got), max(p.ts_ns for p in got))
    return {"dir": s, "packets": packets, "files": files, "holds": holds, "base": base}


def allowed(files: list[str], start, end) -> tuple[set[str], set[str]]:
    """The files whose name span meets [start, end), and those with at most one more at
    each edge (one stream: the names' order is the stream's)."""
    times = [name_time(f) for f in files]
    meets = []
    for i, t in enumerate(times):
        last = times[i + 1] if i + 1 < len(times) else None
        meets.append((start is None or last is None or last >= start)
                     and (end is None or t < end))
    idx = [i for i, m in enumerate(meets) if m]
    lo, hi = (idx[0] - 1, idx[-1] + 1) if idx else (0, 0)
    near = {files[i] for i in range(max(lo, 0), min(hi, len(files) - 1) + 1)}
    return {files[i] for i in idx}, near


def needed(st, start, end) -> set[str]:
    """The files holding a packet of [start, end), by their contents."""
    return {f for f, (lo, hi) in st["holds"].items()
            if (start is None or hi >= start) and (end is None or lo < end)}


def in_window(st, start, end) -> list[tuple]:
    return [(p.ts_ns, p.orig_len, p.data) for p in st["packets"]
            if (start is None or p.ts_ns >= start) and (end is None or p.ts_ns < end)]


def traced(args, log, timeout=120):
    r = run(["strace", "-f", "-qq", "-e", "trace=openat,open", "-o", log, *args],
            timeout=timeout)
    return r, opened_data_files(log.read_text())


def windows(st):
    """(start, end) pairs: inside, exactly at a file's name time, ending at one, before the
    first file, after the last, and open on either side."""
    t = [name_time(f) for f in st["files"]]
    return [
        (T0 + 40 * SEC, T0 + 50 * SEC),
        (t[30], t[30] + SEC),
        (t[60] - 3 * SEC, t[60]),
        (T0 - 10 * SEC, T0 - 5 * SEC),
        (T0 + SPAN + SEC, T0 + SPAN + 2 * SEC),
        (T0 + 90 * SEC, None),
        (None, T0 + 5 * SEC),
    ]


def test_extract_opens_only_the_files_near_the_window_and_answers_as_every_file(
        tapdeck, store, tmp_path):
    st = store
    for start, end in windows(st):
        args = [*(["--start", epoch(start)] if start else []),
                *(["--end", epoch(end)] if end else [])]
        out, everything = tmp_path / "pruned.pcapng", tmp_path / "all.pcapng"
        r, opened = traced([tapdeck.bin, "extract", st["dir"], "-w", out, "--explain", *args],
                           tmp_path / "x.strace")
        assert r.returncode == 0, r.describe()
        meets, near = allowed(st["files"], start, end)
        assert needed(st, start, end) <= opened, (start, end)
        assert opened <= near and len(opened) <= len(meets) + 2, (start, end, sorted(opened))
        # Unopened: by their names, or (the edge files, whose true range the store catalog
        # knows) by the catalog.
        m = re.search(r"skipped by time: (\d+) of (\d+) files", r.stderr)
        c = re.search(r"store catalog: \d+ entries consulted [^;]*; (\d+) more files skipped", r.stderr)
        assert m and c and (int(m[1]) + int(c[1]), int(m[2])) == (
            len(st["files"]) - len(opened), len(st["files"])), r.stderr
        r, all_opened = traced([tapdeck.bin, "extract", st["dir"], "-w", everything,
                                "--no-index", *args], tmp_path / "n.strace")
        assert r.returncode == 0, r.describe()
        assert all_opened == set(st["files"])
        assert out.read_bytes() == everything.read_bytes(), (start, end)
        got = [(p.ts_ns, p.orig_len, p.data) for p in read_packets(out)]
        assert got == in_window(st, start, end), (start, end)
    # A ten-second window of a hundred-second store: a tenth of the files, not all.
    start, end = windows(st)[0]
    _, opened = traced([tapdeck.bin, "extract", st["dir"], "-w", tmp_path / "o.pcapng",
                        "--start", epoch(start), "--end", epoch(end)], tmp_path / "t.strace")
    assert len(opened) <= len(st["files"]) // 5, sorted(opened)


def test_convert_start_end_opens_only_the_files_near_the_window(tapdeck, store, tmp_path):
    st = store
    start, end = T0 + 20 * SEC, T0 + 31 * SEC
    r, opened = traced([tapdeck.bin, "convert", st["dir"], "-o", tmp_path / "D",
                        "--start", epoch(start), "--end", epoch(end)], tmp_path / "c.strace",
                       timeout=300)
    assert r.returncode == 0, r.describe()
    _, near = allowed(st["files"], start, end)
    assert needed(st, start, end) <= opened <= near, sorted(opened)
    m = re.search(r"selected (\d+) packets", r.stderr)
    assert m and int(m[1]) == len(in_window(st, start, end)), r.stderr


@pytest.fixture
def served(tapdeck, store, tmp_path, procs):
    """`serve --no-capture STORE` on loopback, with strace attached to it (all threads)."""
    s = Served(tapdeck.bin, procs, tmp_path, "--listen", f"127.0.0.1:{free_port()}",
               "--no-capture", store["dir"])

    def answers():
        r = run(["curl", "-sf", f"http://{s.addr}/healthz"], timeout=10)
        return r.returncode == 0

    wait_for(answers, 20, "the read-only service to answer /healthz")
    log = tmp_path / "serve.strace"
    err = tmp_path / "strace.stderr"
    with open(err, "wb") as e:
        tracer = subprocess.Popen(
            ["strace", "-f", "-e", "trace=openat,open", "-o", str(log), "-p", str(s.pid)],
            stdout=subprocess.DEVNULL, stderr=e)
    procs.append(tracer)
    wait_for(lambda: "attached" in err.read_text(), 10, "strace to attach to serve")
    yield s, log
    tracer.terminate()
    tracer.wait(timeout=10)


def test_the_query_api_and_count_open_only_the_files_near_the_window(
        tapdeck, store, served, tmp_path):
    st = store
    s, log = served
    start, end = T0 + 60 * SEC, T0 + 70 * SEC
    _, near = allowed(st["files"], start, end)
    flt = "udp"
    out = tmp_path / "q.pcapng"
    before = len(log.read_text())
    r = run([tapdeck.bin, "query", s.addr, "--start", epoch(start), "--end", epoch(end),
             "-w", out, flt], timeout=60)
    assert r.returncode == 0, r.describe()
    opened = opened_data_files(log.read_text()[before:])
    assert needed(st, start, end) <= opened <= near, sorted(opened)
    everything = tmp_path / "all.pcapng"
    r = tapdeck("extract", st["dir"], "--no-index", "--start", epoch(start), "--end",
                epoch(end), "-w", everything, flt)
    assert r.returncode == 0, r.describe()
    assert tcpdump_lines(out) == tcpdump_lines(everything) != []

    before = len(log.read_text())
    url = f"http://{s.addr}/api/v1/count?start={epoch(start)}&end={epoch(end)}&filter={flt}"
    r = run(["curl", "-sf", url], timeout=30)
    assert r.returncode == 0, r.describe()
    opened = opened_data_files(log.read_text()[before:])
    assert needed(st, start, end) <= opened <= near, sorted(opened)
    assert json.loads(r.out)["packets"] == len(read_packets(everything))
