"""nfs_latency, nfs_ops, rpc_matching and files on the hand-computed fixture of conftest.py."""

import math
import random

import pyarrow as pa
import pytest
from conftest import MS, S, multi_client, v2_beside_v3_v4
from datasetbuilder import T0, DatasetBuilder

from tapdeck_analyze import files, nfs_latency, nfs_ops, open_dataset, recency, rpc_matching, sizes
from tapdeck_analyze.analyses import ANALYSES
from tapdeck_analyze.nfs_ops import errors, outstanding, per_host, per_minute
from tapdeck_analyze.sizes import flows


def by_op(table):
    return {(r["nfs_version"], r["operation"]): r for r in table.to_pylist()}


def test_nfs_latency_columns_and_values(nfs_ds):
    t = nfs_latency(nfs_ds)
    assert t.column_names == ["nfs_version", "operation", "calls", "min_s", "mean_s", "max_s",
                              "p50_s", "p90_s", "p99_s", "retransmits", "duplicate_replies"]  # fmt: skip
    rows = by_op(t)
    g = rows[(3, "GETATTR")]
    assert (g["calls"], g["retransmits"], g["duplicate_replies"]) == (3, 1, 1)
    assert g["min_s"] == pytest.approx(0.002) and g["max_s"] == pytest.approx(0.009)
    assert g["mean_s"] == pytest.approx(0.005)
    # nearest rank over [2, 4, 9] ms: p50 = 2nd, p90 = p99 = 3rd
    assert (g["p50_s"], g["p90_s"], g["p99_s"]) == pytest.approx((0.004, 0.009, 0.009))
    r = rows[(3, "READ")]
    assert r["calls"] == 2 and r["mean_s"] == pytest.approx(0.002)  # the third has no reply
    assert rows[(3, "WRITE")]["min_s"] == pytest.approx(0.005)
    for op in ("COMPOUND", "SEQUENCE", "PUTFH", "READ"):
        assert rows[(4, op)]["calls"] == 1 and rows[(4, op)]["p50_s"] == pytest.approx(0.006)
    keys = [(r["nfs_version"], r["operation"]) for r in t.to_pylist()]
    assert keys == sorted(keys)


def test_nfs_latency_percentiles_match_brute_force(tmp_path):
    rng = random.Random(6)
    b = DatasetBuilder()
    latencies = {"READ": [], "WRITE": []}
    t = T0
    for _ in range(700):
        op = rng.choice(["READ", "WRITE"])
        lat = rng.choice([rng.randint(1, 50), rng.randint(1, 5_000_000)]) * 1000
        latencies[op].append(lat)
        b.nfs(t, t + lat, op=op, fh="f", offset=0, count=1)
        t += rng.randint(1, 3_000_000)
    rows = by_op(nfs_latency(b.write(tmp_path / "ds")))

    def nearest(values, p):
        v = sorted(values)
        return v[max(1, math.ceil(p * len(v))) - 1]

    for op, vals in latencies.items():
        r = rows[(3, op)]
        assert r["calls"] == len(vals)
        for col, p in (("p50_s", 0.5), ("p90_s", 0.9), ("p99_s", 0.99)):
            assert r[col] == nearest(vals, p) / 1e9
        assert r["mean_s"] == pytest.approx(sum(vals) / len(vals) / 1e9, rel=1e-12)


def test_nfs_ops_mix_bytes_and_errors(nfs_ds):
    rows = by_op(nfs_ops(nfs_ds))
    assert rows[(3, "GETATTR")]["calls"] == 3  # the retransmission is not a new call
    assert rows[(3, "READ")]["calls"] == 3
    assert rows[(3, "READ")]["bytes_read"] == 8192 + 4096  # the unanswered read moved nothing
    assert rows[(3, "WRITE")]["bytes_written"] == 1000
    assert rows[(4, "READ")]["bytes_read"] == 50
    assert sum(r["call_share"] for r in rows.values()) == pytest.approx(1)
    errs = errors(nfs_ds).to_pylist()
    assert errs == [dict(nfs_version=3, operation="LOOKUP", status=2, status_name="NOENT",
                         replies=1)]  # fmt: skip
    per_min = per_minute(nfs_ds).to_pylist()
    assert {r["interval_start_ns"] for r in per_min} == {T0, T0 + 60 * S}
    clients = per_host(nfs_ds, "client").to_pylist()
    assert {(r["client_addr"], r["operation"]): r["calls"] for r in clients}[
        ("10.0.0.3", "GETATTR")
    ] == 1


def test_outstanding(nfs_ds):
    out = outstanding(nfs_ds).to_pylist()
    first = out[0]
    assert first["interval_start_ns"] == T0
    # in the first second: at most one answered call is pending at a time, and the unanswered
    # READ at 50 ms stays pending
    assert (first["min_outstanding"], first["max_outstanding"]) == (0, 1)
    assert out[-1]["min_outstanding"] == 1


def test_rpc_matching(nfs_ds):
    rows = rpc_matching(nfs_ds).to_pylist()
    main = {(r["client_addr"]): r for r in rows}["10.0.0.1"]
    assert (main["calls"], main["unmatched_calls"], main["unmatched_replies"]) == (8, 1, 1)
    # 9 transactions seen, 2 messages of 18 missing
    assert main["estimated_loss"] == pytest.approx(2 / 18)
    per_min = rpc_matching_per_minute = ANALYSES["rpc_matching"].parts["per_minute"](nfs_ds)
    assert sum(r["unmatched_calls"] for r in rpc_matching_per_minute.to_pylist()) == 1
    assert per_min.num_rows == 2
    drops = ANALYSES["rpc_matching"].parts["drops"](nfs_ds).to_pylist()
    assert drops[0]["interface_name"] == "eth0" and drops[0]["kernel_dropped"] == 0


def test_files(nfs_ds):
    rows = {r["fh"]: r for r in files(nfs_ds).to_pylist()}
    a = rows["aa"]
    assert (a["reads"], a["sequential_reads"], a["bytes_read"]) == (3, 1, 12288)
    assert (a["name"], a["path"], a["size"], a["ftype"]) == ("a.bin", "…/data/a.bin", 12288, 1)
    assert a["first_access_ns"] == T0 + 30 * MS and a["last_access_ns"] == T0 + 50 * MS
    assert (rows["bb"]["writes"], rows["bb"]["bytes_written"]) == (1, 1000)
    assert rows["cc"]["bytes_read"] == 50
    assert list(rows)[0] == "aa"  # most bytes first


def test_filters(nfs_path):
    ds = open_dataset(nfs_path, client="10.0.0.3")
    assert [(r["operation"], r["calls"]) for r in nfs_latency(ds).to_pylist()] == [("GETATTR", 1)]
    ds = open_dataset(nfs_path, op="READ")
    ops = {(r["nfs_version"], r["operation"]) for r in nfs_latency(ds).to_pylist()}
    assert ops == {(3, "READ"), (4, "COMPOUND"), (4, "READ")}


def test_time_range_keeps_transactions_by_call(nfs_path):
    ds = open_dataset(nfs_path, start=T0 + 60 * S)
    rows = by_op(nfs_latency(ds))
    assert set(rows) == {(3, "WRITE"), (3, "LOOKUP"), (4, "COMPOUND"), (4, "SEQUENCE"),
                         (4, "PUTFH"), (4, "READ")}  # fmt: skip


def test_files_and_flows_pick_null_safe_and_break_ties(tmp_path):
    """The answers both engines must give on multi_client's NULL and tied rows (test_spark.py
    checks that Spark gives them too): the last known type and size, each on its own; among
    rows of one instant the later record, then the greater value; a flow's first packet by
    record when two share its time."""
    b = DatasetBuilder()
    multi_client(b)
    ds = open_dataset(b.write(tmp_path / "ds"))
    rows = {r["fh"]: r for r in files(ds).to_pylist()}
    got = {fh: (r["ftype"], r["size"], r["name"], r["path"]) for fh, r in rows.items()}
    assert got == {
        "f0": (1, 300, "zeta", "…/dir0/zeta"),
        "f1": (2, 40, "looked-up", "…/dir0/dir1/looked-up"),
        "f2": (2, 1000, "two", "…/dir0/dir1/two"),
        "f3": (None, 5, None, None),
    }
    f = {r["flow_id"]: r for r in flows(ds).to_pylist()}
    assert [f[9][k] for k in ("protocol", "addr_a", "port_a", "addr_b", "port_b")] == [
        6, "10.0.0.7", 5000, "10.0.0.8", 53]  # fmt: skip
    assert [f[10][k] for k in ("protocol", "port_a", "port_b")] == [1, None, None]
    ranks = sizes(ds)
    assert ranks.schema.field("rank").type == pa.int64()
    # 1500, 1400 and 1300 bytes have 3 packets each: ranked by size
    r = {row["wire_len"]: row["rank"] for row in ranks.to_pylist()}
    assert r[1300] < r[1400] < r[1500]


def test_nfsv2_beside_v3_and_v4(tmp_path):
    """NFSv2 rows (conftest.v2_beside_v3_v4) are analysed as v3's are, per procedure, and kept
    apart from v3 and v4 operations of the same name."""
    b = DatasetBuilder()
    v2_beside_v3_v4(b)
    ds = open_dataset(b.write(tmp_path / "ds"))
    lat = by_op(nfs_latency(ds))
    assert lat[(2, "GETATTR")]["calls"] == 1
    assert lat[(2, "GETATTR")]["max_s"] == pytest.approx(0.003)
    assert lat[(2, "READ")]["calls"] == 2 and lat[(2, "READ")]["mean_s"] == pytest.approx(0.003)
    assert lat[(2, "WRITE")]["p50_s"] == pytest.approx(0.010)
    assert lat[(2, "STATFS")]["calls"] == 0
    assert lat[(3, "READ")]["mean_s"] == pytest.approx(0.005)
    assert lat[(4, "READ")]["mean_s"] == pytest.approx(0.006)
    ops = by_op(nfs_ops(ds))
    assert (ops[(2, "READ")]["calls"], ops[(2, "READ")]["bytes_read"]) == (2, 16384)
    assert (ops[(2, "WRITE")]["calls"], ops[(2, "WRITE")]["bytes_written"]) == (1, 8192)
    assert ops[(2, "STATFS")]["calls"] == 1
    assert (ops[(3, "READ")]["bytes_read"], ops[(4, "READ")]["bytes_read"]) == (4096, 50)
    err = {(r["nfs_version"], r["operation"], r["status"]): r for r in errors(ds).to_pylist()}
    assert list(err) == [(2, "LOOKUP", 2)] and err[(2, "LOOKUP", 2)]["status_name"] == "NOENT"
    f = {r["fh"]: r for r in files(ds).to_pylist()}["v2f"]
    assert (f["reads"], f["writes"], f["sequential_reads"]) == (2, 1, 1)
    assert (f["bytes_read"], f["bytes_written"]) == (16384, 8192)
    (smallest, *_) = recency(ds).to_pylist()
    # v2's two reads of v2f, v3's and v4's one each; the second v2 read is of new blocks
    assert (smallest["reads"], smallest["hit_reads"]) == (4, 0)
