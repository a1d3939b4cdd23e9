"""rates, burstiness and sizes: hand-computed cases and brute force over random packets."""

import math
import random

import pytest
from conftest import MS, S
from datasetbuilder import T0, DatasetBuilder

from tapdeck_analyze import burstiness, rates, sizes
from tapdeck_analyze.burstiness import burstiness_distribution
from tapdeck_analyze.sizes import flows, protocols, talkers


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    b = DatasetBuilder()
    # minute 0: 3 packets of 100 B; minute 1: nothing; minute 2: 1 packet of 1500 B
    # (all within hour 08); then one packet of 60 B in hour 10 (hour 09 empty)
    b.packet(T0 + 5 * S, 100)
    b.packet(T0 + 6 * S, 100)
    b.packet(T0 + 30 * S, 100, src="10.0.0.9", dst="10.0.0.1", protocol=17, flow_id=7)
    b.packet(T0 + 150 * S, 1500)
    b.packet(T0 + 2 * 3600 * S + 1 * S, 60, protocol=None, src=None, dst=None, flow_id=None)
    return b.write(tmp_path_factory.mktemp("traffic") / "ds", rows_per_group=2)


def test_rates_per_hour_of_minutes(traffic):
    rows = rates(traffic, sample="1min", window="1h").to_pylist()
    assert [r["window_start_ns"] for r in rows] == [T0, T0 + 3600 * S, T0 + 7200 * S]
    h8, h9, h10 = rows
    assert (h8["samples"], h8["packets"], h8["bytes"]) == (60, 4, 1800)
    assert h8["min_pps"] == 0 and h8["max_pps"] == pytest.approx(3 / 60)
    assert h8["mean_pps"] == pytest.approx(4 / 3600)
    assert h8["max_bps"] == pytest.approx(1500 * 8 / 60)
    assert (h9["packets"], h9["max_pps"]) == (0, 0)
    # the last window ends at the last packet: one sample
    assert (h10["samples"], h10["min_pps"], h10["mean_bps"]) == (1, 1 / 60, 60 * 8 / 60)


def test_rates_align_first_matches_io_stat_intervals(traffic):
    rows = rates(traffic, sample="1s", window="1s", align="first").to_pylist()
    assert rows[0]["window_start_ns"] == T0 + 5 * S
    assert [r["packets"] for r in rows[:3]] == [1, 1, 0]
    assert rows[25]["window_start_ns"] == T0 + 30 * S and rows[25]["packets"] == 1
    assert len(rows) == 2 * 3600 + 1 - 5 + 1
    assert sum(r["bytes"] for r in rows) == 1860


def test_rates_rejects_bad_durations(traffic):
    from tapdeck_analyze import DatasetError

    with pytest.raises(DatasetError):
        rates(traffic, sample="10us")
    with pytest.raises(DatasetError):
        rates(traffic, sample="7s", window="1min")


def test_burstiness_matches_brute_force(tmp_path):
    rng = random.Random(2)
    b = DatasetBuilder()
    times, lens = [], []
    t = T0 + 123_456
    for _ in range(400):
        t += rng.choice([rng.randint(1, 200_000), rng.randint(1, 40 * MS)])
        n = rng.randint(60, 1500)
        b.packet(t, n)
        times.append(t)
        lens.append(n)
    rows = burstiness(b.write(tmp_path / "ds")).to_pylist()
    first, last = times[0], times[-1]
    for row, scale in zip(rows, [100_000, MS, 10 * MS, 100 * MS, S], strict=True):
        n = (last - first) // scale + 1
        pk, by = [0] * n, [0] * n
        for ti, li in zip(times, lens, strict=True):
            pk[(ti - first) // scale] += 1
            by[(ti - first) // scale] += li
        assert row["scale_s"] == scale / 1e9
        assert row["intervals"] == n and row["empty_intervals"] == pk.count(0)
        for name, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99_9", 0.999),
                        ("p99_99", 0.9999), ("max", 1)):  # fmt: skip
            rank = max(1, math.ceil(round(p * n, 9))) - 1
            assert row[f"{name}_pps"] == pytest.approx(sorted(pk)[rank] * 1e9 / scale)
            assert row[f"{name}_bps"] == pytest.approx(sorted(by)[rank] * 8e9 / scale)
        assert row["resolution_ns"] == 1 and not row["below_resolution"]
    dist = burstiness_distribution(b.write(tmp_path / "ds2")).to_pylist()
    assert sum(r["intervals"] for r in dist if r["scale_s"] == 1.0) == rows[-1]["intervals"]


def test_burstiness_flags_scales_below_resolution(traffic):
    rows = burstiness(traffic).to_pylist()
    assert rows[0]["resolution_ns"] == S  # the fixture's times are whole seconds
    assert [r["below_resolution"] for r in rows] == [True] * 5


def test_sizes_protocols_talkers_flows(traffic):
    s = sizes(traffic).to_pylist()
    assert [(r["wire_len"], r["packets"], r["rank"]) for r in s] == [
        (60, 1, 2), (100, 3, 1), (1500, 1, 3)]  # fmt: skip
    assert s[1]["cumulative_fraction"] == pytest.approx(4 / 5)
    p = {r["protocol_name"]: r for r in protocols(traffic).to_pylist()}
    assert (p["TCP"]["packets"], p["TCP"]["bytes"]) == (3, 1700)
    assert p["UDP"]["packets"] == 1 and p["non-IP"]["bytes"] == 60
    t = talkers(traffic).to_pylist()
    assert t[0]["addr"] in ("10.0.0.1", "10.0.0.2") and t[0]["bytes_total"] == 1800
    f = flows(traffic).to_pylist()
    assert f[0]["bytes"] == 1700 and f[0]["addr_a"] == "10.0.0.1" and f[0]["port_b"] == 2049


@pytest.fixture(scope="module")
def two_ways(tmp_path_factory):
    b = DatasetBuilder()
    # second 0: out 100 B, in 200 B, in 300 B on interface 0; second 1: nothing;
    # second 2: out 1000 B on interface 1 and one packet of unknown direction
    b.packet(T0, 100, direction="out")
    b.packet(T0 + 100 * MS, 200, direction="in")
    b.packet(T0 + 900 * MS, 300, direction="in")
    b.packet(T0 + 2 * S, 1000, direction="out", interface=1)
    b.packet(T0 + 2 * S + 1, 60)
    return b.write(tmp_path_factory.mktemp("two_ways") / "ds")


def series(rows, *cols) -> dict:
    out = {}
    for r in rows:
        out.setdefault(tuple(r[c] for c in cols), []).append((r["packets"], r["bytes"]))
    return out


def test_rates_by_direction(two_ways):
    rows = rates(two_ways, sample="1s", window="1s", align="first", by="direction").to_pylist()
    assert list(rows[0])[0] == "direction"
    assert series(rows, "direction") == {
        ("in",): [(2, 500), (0, 0), (0, 0)],
        ("out",): [(1, 100), (0, 0), (1, 1000)],
        (None,): [(0, 0), (0, 0), (1, 60)],
    }
    # Series in order, nulls last; within each, windows in time order.
    assert [r["direction"] for r in rows] == ["in"] * 3 + ["out"] * 3 + [None] * 3
    assert [r["max_pps"] for r in rows[3:6]] == [1, 0, 1]


def test_rates_by_interface_and_direction(two_ways):
    rows = rates(two_ways, sample="1s", window="3s", align="first", by="interface,direction")
    rows = rows.to_pylist()
    assert series(rows, "interface", "direction") == {
        (0, "in"): [(2, 500)],
        (0, "out"): [(1, 100)],
        (1, "out"): [(1, 1000)],
        (0, None): [(1, 60)],
    }
    assert [(r["interface"], r["direction"]) for r in rows] == [
        (0, "in"),
        (0, "out"),
        (0, None),
        (1, "out"),
    ]


def test_rates_by_rejects_other_columns(two_ways):
    from tapdeck_analyze import DatasetError

    for by in ("protocol", "direction,direction", "interface;direction"):
        with pytest.raises(DatasetError, match="--by is interface, direction"):
            rates(two_ways, by=by)


def test_datasets_without_the_direction_column_still_read(tmp_path):
    """Files converted before `direction` existed: alone the column reads as null, mixed with
    newer files it is null for their rows only."""
    import pyarrow.parquet as pq

    b = DatasetBuilder()
    b.packet(T0, 100, direction="out")
    b.packet(T0 + 2 * 3600 * S, 200, file_id=1, direction="in")
    ds = b.write(tmp_path / "ds")
    old = sorted((ds / "packets").rglob("*.parquet"))
    assert len(old) == 2

    def drop_direction(f):
        t = pq.read_table(f)
        pq.write_table(t.drop_columns(["direction"]).replace_schema_metadata(t.schema.metadata), f)

    drop_direction(old[1])
    rows = rates(ds, sample="1h", window="1h", by="direction").to_pylist()
    assert series(rows, "direction") == {
        ("out",): [(1, 100), (0, 0), (0, 0)],
        (None,): [(0, 0), (0, 0), (1, 200)],
    }
    drop_direction(old[0])
    rows = rates(ds, sample="1h", window="1h", by="direction").to_pylist()
    assert series(rows, "direction") == {(None,): [(1, 100), (0, 0), (1, 200)]}
