"""Conversion must not depend on how a recording was cut into files: real NFS traffic as one
capture file and the same traffic recorded into a store rotated into dozens of files (so that
1 MiB READs and WRITEs span several files) give the same RPC rows, the same pairs, and the same
`nfs_latency` and `rpc_matching` results. Needs root (the NFS rig); marked `nfs`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nfs import rig as nfsrig
from nfs.rig import NfsRig

duckdb = pytest.importorskip("duckdb")

pytestmark = pytest.mark.nfs


def _rpc_rows(dataset: Path) -> list[tuple]:
    """The rpc table without the columns that name files (file_id, record, ids)."""
    return sorted(
        duckdb.sql(
            f"""select xid, direction, transport, client_addr, client_port, server_addr,
                       server_port, time_ns, procedure, matched, retransmit, truncated,
                       message_len, first_time_ns
                from read_parquet('{dataset}/rpc/**/*.parquet', hive_partitioning = true)"""
        ).fetchall()
    )


def _pairs(dataset: Path) -> set[tuple]:
    """(call time, reply time, xid) of every call paired with its reply by transaction id."""
    return set(
        duckdb.sql(
            f"""with r as (select * from read_parquet('{dataset}/rpc/**/*.parquet',
                                                      hive_partitioning = true))
                select c.time_ns, p.time_ns, c.xid from r c join r p
                  on c.transaction_id = p.transaction_id
                 and c.direction = 'call' and p.direction = 'reply'"""
        ).fetchall()
    )


def _analysis(name: str, dataset: Path) -> str:
    out = subprocess.run(
        ["tapdeck-analyze", "run", name, str(dataset), "--format", "csv"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_rotated_store_converts_like_one_file(tmp_path, tapdeck):
    reason = nfsrig.unavailable_reason()
    if reason:
        pytest.skip(reason)
    pcap = tmp_path / "nfs.pcap"
    with NfsRig(tmp_path / "rig") as r, r.capture(pcap):
        r.workload("mixed")
    one = tmp_path / "one"
    res = tapdeck("convert", str(pcap), "--out", str(one), "-q")
    assert res.returncode == 0, res.describe()
    rows_one = _rpc_rows(one)
    assert len(rows_one) > 500
    assert all(r[9] for r in rows_one), "a lossless capture pairs every message"

    # The store in its own directory, and spread over two data directories (a stream's
    # files alternate between them, and still chain in sequence).
    for layout, dirs in (("one dir", []), ("two dirs", ["d1", "d2"])):
        store = tmp_path / layout.replace(" ", "-")
        extra = [a for d in dirs for a in ("--dir", str(tmp_path / f"{store.name}-{d}"))]
        # 256 KiB files: a 1 MiB WRITE call or READ reply spans four or five of them.
        res = tapdeck.record(store, "-r", str(pcap), "--rotate-size", "256KiB", *extra)
        assert res.returncode == 0, res.describe()
        files = sorted(tmp_path.glob(f"{store.name}*/*.pcapng.zst"))
        assert len(files) >= 10, files

        rotated = tmp_path / f"rotated-{store.name}"
        res = tapdeck("convert", str(store), "--out", str(rotated), "-q")
        assert res.returncode == 0, res.describe()
        assert _rpc_rows(rotated) == rows_one, layout
        assert _pairs(rotated) == _pairs(one), layout
        for name in ("nfs_latency", "rpc_matching"):
            assert _analysis(name, rotated) == _analysis(name, one), (layout, name)
