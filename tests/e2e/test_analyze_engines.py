"""`tapdeck-analyze` on DuckDB and on Spark gives the same tables, with the same Arrow schemas
(column names, types, nullability), for every analysis and part, on a real multi-client NFS
dataset (issue 13): four libnfs clients run at the same time against the rig's server (NFSv3
and NFSv4, reads, writes, listings, failing lookups, NULL calls over UDP), each command on a
connection of its own; the capture is cut into three files, and a third of the middle one is
cut out (a capture gap), so the dataset has several sources, overlapping outstanding calls and
unmatched messages. (python/tests/test_spark.py covers NULL attributes and tied rows, which
this rig's traffic does not have, on a built dataset.)

Marked `nfs` (root, the rig of tests/nfs, never in parallel); skipped without pyspark (>= 4.0)
or tapdeck_analyze. About 70 s here: the rig and capture 2 s, Spark's start about 20 s.
"""

from __future__ import annotations

import threading

import pytest
from convtools import convert_ok, need_rig, read_pcap_records, write_records
from nfs import rig as nfsrig
from nfs import workloads

pytestmark = pytest.mark.nfs

CLIENTS = 4
ROUNDS = 2


def client_commands(rig, k: int, i: int, local) -> list[tuple[list, bool]]:
    """What client `k` runs in round `i`: (command, must succeed). Even clients speak NFSv3,
    odd ones NFSv4 (whose writes stay below libnfs' ~3.5 KB limit, see tests/nfs/README.md)."""
    v = 3 if k % 2 == 0 else 4
    name = f"w{v}/client{k}_{i}.bin"
    cmds = [
        (["nfs-ls", rig.url("many", v)], True),
        (["nfs-cat", rig.url("seed/seed.bin", v)], True),
        (["nfs-cp", str(local), rig.url(name, v)], True),
        (["nfs-cat", rig.url(name, v)], True),
        (["nfs-cat", rig.url("no/such/file.bin", v)], False),
    ]
    if k == 0:
        cmds.append((["rpcinfo", "-u", rig.server_ip, "nfs", "3"], True))
    return cmds


def run_clients(rig, workdir) -> list[str]:
    """Runs CLIENTS threads at once, each its commands for ROUNDS rounds; returns what went
    other than expected (each thread waits for its own commands only)."""
    problems: list[str] = []
    start = threading.Barrier(CLIENTS)

    def client(k: int):
        local = workdir / f"client{k}.bin"
        local.write_bytes(bytes(range(256)) * 12)  # 3072 B: fits NFSv4 writes too
        start.wait()
        for i in range(ROUNDS):
            for cmd, ok in client_commands(rig, k, i, local):
                r = rig.run(*cmd, check=False)
                if (r.returncode == 0) != ok:
                    problems.append(f"client {k}: {r.describe()}")

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return problems


def _is_nfs_reply(rec: bytes) -> bool:
    """A pcap record (16-byte header first) of an Ethernet/IPv4/TCP segment from port 2049
    that starts with an RPC reply (record mark, xid, msg_type 1)."""
    f = rec[16:]
    if len(f) < 34 or f[12:14] != b"\x08\x00" or f[23] != 6:
        return False
    ip = 14 + (f[14] & 0x0F) * 4
    tcp = ip + (f[ip + 12] >> 4) * 4
    return f[ip : ip + 2] == b"\x08\x01" and f[tcp + 8 : tcp + 12] == b"\x00\x00\x00\x01"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, tapdeck):
    need_rig()
    pytest.importorskip("tapdeck_analyze")
    pytest.importorskip("pyspark", minversion="4.0")
    base = tmp_path_factory.mktemp("analyze-engines")
    pcap = base / "clients.pcap"
    with nfsrig.NfsRig(base / "rig") as rig:
        workloads.populate(rig.export_dir)
        with rig.capture(pcap):
            problems = run_clients(rig, base)
    assert not problems, "\n".join(problems)
    # Three files of a third of the frames each; the middle third of the middle one is lost.
    header, recs, _ = read_pcap_records(pcap)
    third = len(recs) // 3
    assert third > 300, len(recs)
    chunks = [recs[:third], recs[third : 2 * third], recs[2 * third :]]
    chunks[1] = chunks[1][: third // 3] + chunks[1][2 * third // 3 :]
    # Where the gap falls in the traffic varies from run to run (it may hold whole exchanges
    # only), so also drop the first five single-segment NFS replies after it (in the rest of
    # the middle file, then in the last one): their calls are then unmatched for certain.
    # (A run where the middle file held only three such replies after the gap failed when
    # all five had to come from it.)
    keep = third // 3
    after = [(1, i) for i in range(keep, len(chunks[1]))] + [(2, i) for i in range(len(chunks[2]))]
    gone = {(c, i) for c, i in after if _is_nfs_reply(chunks[c][i])}
    gone = set(sorted(gone)[:5])
    assert len(gone) == 5, "fewer than five single-segment NFS replies after the gap"
    for c in (1, 2):
        chunks[c] = [r for i, r in enumerate(chunks[c]) if (c, i) not in gone]
    parts = [write_records(base / f"part{i}.pcap", header, c) for i, c in enumerate(chunks)]
    ds = base / "ds"
    convert_ok(tapdeck, ds, *parts)
    return ds


def test_duckdb_and_spark_agree_on_a_real_multi_client_dataset(dataset):
    from tapdeck_analyze import open_dataset
    from tapdeck_analyze.analyses import ANALYSES, engine_differences, run

    ds = dataset

    duck = open_dataset(ds)
    # The dataset is what the test claims: several connections at once, calls outstanding
    # together, unmatched messages from the gap, three sources.
    shape = duck.query("""
SELECT count(DISTINCT client_port) AS connections,
       count(DISTINCT file_id) AS sources,
       sum(CASE WHEN NOT matched THEN 1 ELSE 0 END) AS unmatched
FROM rpc""").to_pylist()[0]
    assert shape["connections"] >= CLIENTS * ROUNDS and shape["sources"] == 3, shape
    assert shape["unmatched"] > 0, shape
    outstanding = run(ANALYSES["nfs_ops"], duck)["nfs_ops_outstanding"]
    assert max(outstanding.column("max_outstanding").to_pylist()) >= 2

    spark = open_dataset(ds, engine="spark")
    # rates as the report runs it on a short trace: 100 ms samples in 1 s windows
    options = {"rates": {"sample": "100ms", "window": "1s", "by": "interface,direction"}}
    diffs, compared = engine_differences(duck, spark, options)
    assert not diffs, "\n".join(diffs)
    # every analysis had rows to compare (an empty table would compare trivially)
    assert compared == sum(len(a.parts) + 1 for a in ANALYSES.values()), compared
