"""Helpers for the `tapdeck-analyze` acceptance tests (test_analyze_*.py): running the
analysis CLI on a converted dataset, and tshark's own statistics (`-z rpc,srt`, `-z io,stat`,
per-packet times and lengths) parsed into plain Python values to compare against."""

from __future__ import annotations

import json
import re
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import SLOW, run

ANALYZE = shutil.which("tapdeck-analyze")

# The same decoding choices as tests/nfs/oracle.py: reassemble out-of-order segments, and try
# RPC on reserved ports (libnfs' source ports) before other dissectors.
TSHARK_RPC = ["-o", "tcp.desegment_tcp_streams:TRUE", "-o", "rpc.defragment_rpc_over_tcp:TRUE",
              "-o", "tcp.reassemble_out_of_order:TRUE",
              "-d", "tcp.port==512-1023,rpc", "-d", "udp.port==512-1023,rpc"]


def need_analyze():
    if ANALYZE is None:
        pytest.skip("tapdeck-analyze is not installed (pip install -e python)")


def analyze(name, ds, *args, timeout=SLOW) -> list[dict]:
    """`tapdeck-analyze run NAME DS ARGS --format json`: one dict per row, in the analysis'
    order (floats as Python's json round-trips them: exactly)."""
    need_analyze()
    r = run([ANALYZE, "run", name, ds, *args, "--format", "json"], timeout=timeout)
    assert r.returncode == 0, r.describe()
    return [json.loads(line) for line in r.out.splitlines() if line.strip()]


def analyze_cli(*args, timeout=SLOW):
    need_analyze()
    return run([ANALYZE, *args], timeout=timeout)


# ---- tshark's statistics ------------------------------------------------------------------

def _us(text: str) -> int:
    """'0.004763' seconds -> 4763 microseconds, exactly."""
    return int(Decimal(text) * 1_000_000)


def tshark_srt(pcap, program=100003, version=3) -> dict[str, dict]:
    """`tshark -q -z rpc,srt,PROGRAM,VERSION`: procedure name -> calls, min_us, max_us, avg_us
    (tshark prints seconds with six decimals)."""
    r = run(["tshark", "-r", pcap, "-n", "-q", *TSHARK_RPC, "-z",
             f"rpc,srt,{program},{version}"], timeout=SLOW)
    assert r.returncode == 0, r.describe()
    rows = {}
    for line in r.out.splitlines():
        m = re.match(r"^\s*(\d+)\s+(\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$",
                     line)
        if m:
            rows[m[2]] = {"calls": int(m[3]), "min_us": _us(m[4]), "max_us": _us(m[5]),
                          "avg_us": _us(m[6])}
    return rows


def tshark_iostat(pcap, interval=1) -> list[tuple[int, int]]:
    """`tshark -q -z io,stat,INTERVAL`: (frames, bytes) per interval, from the first packet."""
    r = run(["tshark", "-r", pcap, "-n", "-q", "-z", f"io,stat,{interval}"], timeout=SLOW)
    assert r.returncode == 0, r.describe()
    rows = []
    for line in r.out.splitlines():
        m = re.match(r"^\|\s*(\d+)\s*<>\s*(\d+|Dur)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|$", line)
        if m:
            assert int(m[1]) == len(rows), line
            rows.append((int(m[3]), int(m[4])))
    return rows


def tshark_times_and_lengths(pcap) -> list[tuple[int, int]]:
    """(capture time in integer ns, frame.len) of every packet, as tshark reads them."""
    r = run(["tshark", "-r", pcap, "-n", "-T", "fields", "-e", "frame.time_epoch",
             "-e", "frame.len"], timeout=SLOW)
    assert r.returncode == 0, r.describe()
    out = []
    for line in r.out.splitlines():
        t, n = line.split("\t")
        sec, _, frac = t.partition(".")
        out.append((int(sec) * 1_000_000_000 + int((frac + "000000000")[:9]), int(n)))
    return out


# ---- an independent burstiness ---------------------------------------------------------

PERCENTILES = {"p50": 5000, "p90": 9000, "p99": 9900, "p99_9": 9990, "p99_99": 9999,
               "max": 10000}
SCALES_NS = [100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000]


def nearest_rank(values: list[int], empty: int, per_10000: int) -> int:
    """The smallest value whose cumulative count reaches ceil(p·n), p in parts per 10 000,
    over `values` plus `empty` zeros."""
    n = len(values) + empty
    rank = -(-per_10000 * n // 10000)
    ordered = [0] * empty + sorted(values)
    return ordered[rank - 1]


def burstiness_of(packets: list[tuple[int, int]]) -> list[dict]:
    """burstiness' table computed from scratch: per scale, all intervals from the first to the
    last packet (empty ones included), nearest-rank percentiles of packets/s and bits/s."""
    times = [t for t, _ in packets]
    first, last = min(times), max(times)
    resolution = 1_000_000_000
    for t in times:
        while t % resolution:
            resolution //= 1000
    rows = []
    for s in SCALES_NS:
        pk: dict[int, int] = {}
        by: dict[int, int] = {}
        for t, n in packets:
            i = (t - first) // s
            pk[i] = pk.get(i, 0) + 1
            by[i] = by.get(i, 0) + n
        total = (last - first) // s + 1
        empty = total - len(pk)
        row = {"scale_s": s / 1e9, "intervals": total, "empty_intervals": empty}
        for name, p in PERCENTILES.items():
            row[f"{name}_pps"] = nearest_rank(list(pk.values()), empty, p) * 1e9 / s
        for name, p in PERCENTILES.items():
            row[f"{name}_bps"] = nearest_rank(list(by.values()), empty, p) * 8e9 / s
        row["resolution_ns"] = resolution
        row["below_resolution"] = s <= resolution
        rows.append(row)
    return rows


def close(a: float, b: float, rel=1e-12) -> bool:
    return a == b or abs(a - b) <= rel * max(abs(a), abs(b))


def corpus_file(name: str) -> Path:
    from conftest import CORPUS

    p = CORPUS / "tcpdump-tests" / name
    if not p.exists():
        pytest.skip(f"corpus file {p} is missing")
    return p
