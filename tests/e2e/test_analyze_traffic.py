"""`tapdeck-analyze` on real conversions, traffic side (issue 6's acceptance):

- `rates --sample 1s --window 1s --align first` gives, per interval, the frames and bytes of
  `tshark -q -z io,stat,1` on several corpus files and on a generated NFS capture of about
  2.5 minutes (bench/nfsgen.py, nanosecond timestamps, crossing an hour boundary so that the
  dataset has two `hour=` partitions);
- `burstiness` equals the same computation done here from tshark's packet times and lengths
  (`-T fields -e frame.time_epoch -e frame.len`) at all five scales: interval counts, empty
  intervals, every nearest-rank percentile of packets/s and bits/s, the resolution flag.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from anatools import (
    analyze,
    burstiness_of,
    close,
    corpus_file,
    tshark_iostat,
    tshark_times_and_lengths,
)
from conftest import REPO, SLOW, run
from convtools import convert_ok

CORPUS = ["afs.pcap", "mptcp-v0.pcap", "ptp_ethernet.pcap", "vrrp.pcap",
          "erspan-type-ii-3.pcap", "bgp-4byte-asn.pcap", "babel_rfc6126bis.pcap",
          "of10_s4810.pcap"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory, tapdeck):
    """(pcap, dataset): 6000 NFS transactions of 2 clients over ~147 s from 07:58:30 UTC."""
    base = tmp_path_factory.mktemp("analyze-gen")
    pcap = base / "gen.pcap"
    r = run([sys.executable, REPO / "bench" / "nfsgen.py", pcap, "--transactions", "6000",
             "--clients", "2", "--think-us", "100000", "--seed", "3",
             "--start", "1795420710"], timeout=SLOW)
    assert r.returncode == 0, r.describe()
    convert_ok(tapdeck, base / "ds", pcap)
    hours = sorted(p.name for p in (base / "ds" / "packets").iterdir())
    assert hours == ["hour=2026-11-23T07", "hour=2026-11-23T08"], hours
    return pcap, base / "ds"


def converted(tapdeck, tmp_path, name) -> tuple[Path, Path]:
    pcap = corpus_file(name)
    convert_ok(tapdeck, tmp_path / "ds", pcap)
    return pcap, tmp_path / "ds"


def assert_rates_equal_iostat(pcap, ds):
    want = tshark_iostat(pcap)
    rows = analyze("rates", ds, "--sample", "1s", "--window", "1s", "--align", "first")
    got = [(r["packets"], r["bytes"]) for r in rows]
    assert len(got) == len(want)
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, f"{len(bad)} of {len(want)} intervals differ, e.g. {bad[:5]}"
    first = min(t for t, _ in tshark_times_and_lengths(pcap))
    assert [r["window_start_ns"] for r in rows] == [first + i * 10**9 for i in range(len(rows))]
    for r in rows:
        assert r["samples"] == 1
        assert close(r["mean_pps"], float(r["packets"])) and close(r["max_bps"], 8.0 * r["bytes"])
    return want


def assert_burstiness_equal(pcap, ds):
    want = burstiness_of(tshark_times_and_lengths(pcap))
    got = analyze("burstiness", ds)
    assert [r["scale_s"] for r in got] == [r["scale_s"] for r in want]
    bad = []
    for g, w in zip(got, want):
        for k, v in w.items():
            ok = close(g[k], v) if isinstance(v, float) else g[k] == v
            if not ok:
                bad.append((w["scale_s"], k, g[k], v))
    assert not bad, bad


@pytest.mark.parametrize("name", CORPUS)
def test_rates_equal_tshark_io_stat_on_corpus(name, tapdeck, tmp_path):
    pcap, ds = converted(tapdeck, tmp_path, name)
    assert len(assert_rates_equal_iostat(pcap, ds)) > 3


@pytest.mark.parametrize("name", CORPUS)
def test_burstiness_equals_an_independent_computation_on_corpus(name, tapdeck, tmp_path):
    pcap, ds = converted(tapdeck, tmp_path, name)
    assert_burstiness_equal(pcap, ds)


def test_rates_and_burstiness_on_a_generated_capture_of_minutes(generated):
    pcap, ds = generated
    want = assert_rates_equal_iostat(pcap, ds)
    assert len(want) >= 140 and sum(f for f, _ in want) > 40_000
    assert_burstiness_equal(pcap, ds)
    # the default (1 min samples in 1 h windows, epoch-aligned) adds up to the same totals
    rows = analyze("rates", ds)
    assert [r["window_start_ns"] for r in rows] == [1795417200 * 10**9, 1795420800 * 10**9]
    assert sum(r["packets"] for r in rows) == sum(f for f, _ in want)
    assert sum(r["bytes"] for r in rows) == sum(b for _, b in want)
