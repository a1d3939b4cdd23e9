"""File rotation by packet time (--rotate-interval), by size (--rotate-size), and both.

args.rs: "Start a new file at every multiple of this many seconds of packet time since the
epoch (60 cuts at :00 of each minute). With --rotate-size too, whichever comes first; a
size cut does not move the interval boundaries." and "Start a new file once this much
capture data (before compression) is in it."
"""

from __future__ import annotations

import datetime as dt

import pytest

from conftest import (
    data_files,
    decompress,
    final_stats,
    gen_packets,
    pcapng_record_lengths,
    write_pcap,
)

MiB = 1 << 20
MINUTE = 60 * 10**9
T0 = 1_795_413_420 * 10**9 + 30 * 10**9  # 2026-11-23T05:57:30Z: hh:mm:30


def compact_utc(ts_ns: int) -> str:
    s, ns = divmod(ts_ns, 10**9)
    d = dt.datetime.fromtimestamp(s, dt.timezone.utc)
    return d.strftime("%Y%m%dT%H%M%S") + f".{ns:09d}Z"


def record_and_describe(tapdeck, tmp_path, packets, *args):
    src = write_pcap(tmp_path / "in.pcap", packets)
    store = tmp_path / "S"
    # File replay runs at full speed and, like a live capture, drops what does not fit in
    # staging: make the pool larger than the file.
    r = tapdeck.record(store, "-r", src, "--staging", "32MiB", "--chunk-size", "512KiB", *args)
    assert r.returncode == 0, r.describe()
    v = tapdeck.verify(store)
    assert v.returncode == 0, v.describe()
    info = tapdeck.info(store)
    assert info["totals"]["packets"] == len(packets)
    assert final_stats(store)["totals"]["stored"] == len(packets)
    return store, info


def check_names(store, info):
    files = data_files(store)
    assert [f.name for f in files] == [f["name"] for f in info["files"]]
    for f in info["files"]:
        assert f["name"].startswith(compact_utc(f["first_ts_ns"]) + "-s00-"), f["name"]
    assert [f["seq"] for f in info["files"]] == list(range(1, len(files) + 1))


def test_interval_cuts_at_minute_boundaries(tapdeck, tmp_path):
    # 3.5 minutes from hh:mm:30, one packet every ~0.1 s: files for :30-:60 and 3 minutes more.
    packets = gen_packets(2100, start_ns=T0, duration_ns=210 * 10**9, seed=11, sizes=(100, 300))
    store, info = record_and_describe(tapdeck, tmp_path, packets, "--rotate-interval", "60")
    check_names(store, info)
    files = info["files"]
    assert len(files) == 4, [f["name"] for f in files]
    minute0 = T0 - 30 * 10**9
    for k, f in enumerate(files):
        lo, hi = minute0 + k * MINUTE, minute0 + (k + 1) * MINUTE
        inside = [p.ts_ns for p in packets if lo <= p.ts_ns < hi]
        assert f["packets"] == len(inside)
        assert f["first_ts_ns"] == inside[0] and f["last_ts_ns"] == inside[-1]
        assert lo <= f["first_ts_ns"] <= f["last_ts_ns"] < hi
    assert files[0]["first_ts_ns"] == packets[0].ts_ns


def test_interval_with_a_gap(tapdeck, tmp_path):
    """A quiet stretch longer than the interval: no empty files, and the next file still
    starts on the first packet after the gap."""
    a = gen_packets(100, start_ns=T0, duration_ns=20 * 10**9, seed=1)
    b = gen_packets(100, start_ns=T0 + 180 * 10**9, duration_ns=20 * 10**9, seed=2)
    store, info = record_and_describe(tapdeck, tmp_path, a + b, "--rotate-interval", "60")
    assert [f["packets"] for f in info["files"]] == [100, 100]
    assert info["files"][1]["first_ts_ns"] == b[0].ts_ns


def file_record_sizes(store, tmp_path) -> list[list[int]]:
    out = []
    for i, f in enumerate(data_files(store)):
        plain = decompress(f, tmp_path / f"plain{i}.pcapng")
        out.append(pcapng_record_lengths(plain.read_bytes()))
    return out


@pytest.mark.parametrize("codec", ["default", "none"])
def test_size_cuts(tapdeck, tmp_path, codec):
    packets = gen_packets(4000, start_ns=T0, duration_ns=10 * 10**9, seed=5)
    extra = [] if codec == "default" else ["--codec", codec]
    store, info = record_and_describe(tapdeck, tmp_path, packets, "--rotate-size", "1MiB", *extra)
    check_names(store, info)
    sizes = file_record_sizes(store, tmp_path)
    assert len(sizes) >= 3
    total = sum(map(sum, sizes))
    assert len(sizes) == -(-total // MiB) or len(sizes) == -(-total // MiB) + 1
    for k, recs in enumerate(sizes):
        assert sum(recs) <= MiB, f"file {k} holds {sum(recs)} bytes of packets"
        if k + 1 < len(sizes):
            # Cut only when the next record would not fit.
            assert sum(recs) + sizes[k + 1][0] > MiB, (k, sum(recs), sizes[k + 1][0])


def test_interval_and_size_together(tapdeck, tmp_path):
    # ~2.5 MiB per minute over 3.5 minutes, 1 MiB files: size cuts inside each minute,
    # and every minute boundary still cuts.
    packets = gen_packets(7000, start_ns=T0, duration_ns=210 * 10**9, seed=9, sizes=(1514,))
    store, info = record_and_describe(tapdeck, tmp_path, packets, "--rotate-interval", "60",
                                      "--rotate-size", "1MiB")
    check_names(store, info)
    files = info["files"]
    sizes = file_record_sizes(store, tmp_path)
    minute0 = T0 - 30 * 10**9
    minute_of = lambda ts: (ts - minute0) // MINUTE
    for f in files:
        assert minute_of(f["first_ts_ns"]) == minute_of(f["last_ts_ns"]), f"{f['name']} spans a minute"
    by_minute: dict[int, list[int]] = {}
    for k, f in enumerate(files):
        by_minute.setdefault(minute_of(f["first_ts_ns"]), []).append(k)
    assert sorted(by_minute) == [0, 1, 2, 3]
    for m, ks in by_minute.items():
        first = [p.ts_ns for p in packets if minute_of(p.ts_ns) == m][0]
        assert files[ks[0]]["first_ts_ns"] == first, "a minute's first file does not start at its first packet"
        for a, b in zip(ks, ks[1:]):
            # Inside a minute, a cut is a size cut.
            assert sum(sizes[a]) <= MiB and sum(sizes[a]) + sizes[b][0] > MiB
        assert sum(sizes[ks[-1]]) <= MiB
    assert len(by_minute[1]) >= 3, "expected several size cuts within a full minute"
