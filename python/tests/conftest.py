import random

import pytest
from datasetbuilder import T0, DatasetBuilder

from tapdeck_analyze import open_dataset

MS = 1_000_000
S = 1_000_000_000


def small_nfs(b: DatasetBuilder) -> None:
    """The hand-computed NFS fixture (see test_nfs.py for the expected answers)."""
    # NFSv3 GETATTR: latencies 2 ms, 4 ms (retransmitted call, duplicate reply), 9 ms
    b.nfs(T0, T0 + 2 * MS, op="GETATTR")
    b.nfs(T0 + 10 * MS, T0 + 14 * MS, op="GETATTR", retransmits=[T0 + 12 * MS],
          duplicate_replies=[T0 + 15 * MS])  # fmt: skip
    b.nfs(T0 + 20 * MS, T0 + 29 * MS, op="GETATTR", client="10.0.0.3")
    # NFSv3 READs of file aa: 0-8192 then 8192-12288 (sequential), one unanswered
    b.nfs(T0 + 30 * MS, T0 + 31 * MS, op="READ", fh="aa", offset=0, count=8192)
    b.nfs(T0 + 40 * MS, T0 + 43 * MS, op="READ", fh="aa", offset=8192, count=4096)
    b.nfs(T0 + 50 * MS, None, op="READ", fh="aa", offset=0, count=4096)
    # NFSv3 WRITE of file bb, failing LOOKUP
    b.nfs(T0 + 61 * S, T0 + 61 * S + 5 * MS, op="WRITE", fh="bb", offset=0, count=1000)
    b.nfs(T0 + 62 * S, T0 + 62 * S + 1 * MS, op="LOOKUP", status=2)
    # NFSv4 COMPOUND(SEQUENCE, PUTFH, READ) of file cc, 6 ms
    b.nfs(T0 + 63 * S, T0 + 63 * S + 6 * MS, op="COMPOUND", version=4,
          v4_ops=["SEQUENCE", "PUTFH", "READ"], fh="cc", offset=0, count=100, nbytes=50)  # fmt: skip
    # a reply whose call the capture missed
    b.unmatched_reply(T0 + 64 * S)
    b.add("nfs_names", time_ns=T0 + 1, file_id=0, record=9000, transaction_id=1,
          direction="reply", nfs_version=3, operation="LOOKUP", dir_fh="root", name="data",
          fh="dd")  # fmt: skip
    b.add("nfs_names", time_ns=T0 + 2, file_id=0, record=9001, transaction_id=1,
          direction="reply", nfs_version=3, operation="LOOKUP", dir_fh="dd", name="a.bin",
          fh="aa")  # fmt: skip
    b.add("nfs_attrs", time_ns=T0 + 3, file_id=0, record=9002, transaction_id=1,
          nfs_version=3, operation="GETATTR", fh="aa", ftype=1, size=12288)  # fmt: skip


def v2_beside_v3_v4(b: DatasetBuilder) -> None:
    """NFSv2 over UDP beside NFSv3 and NFSv4 (see test_nfs.py for the expected answers): v2
    GETATTR 3 ms, a LOOKUP failing with NFSERR_NOENT 1 ms, two sequential READs of file "v2f"
    (4 ms, 2 ms), a WRITE 10 ms, a STATFS never answered; a v3 READ and a v4 COMPOUND READ of
    other files."""
    v2 = dict(version=2, transport="udp")
    b.nfs(T0, T0 + 3 * MS, op="GETATTR", **v2)
    b.nfs(T0 + 10 * MS, T0 + 11 * MS, op="LOOKUP", status=2, **v2)
    b.nfs(T0 + 20 * MS, T0 + 24 * MS, op="READ", fh="v2f", offset=0, count=8192, **v2)
    b.nfs(T0 + 30 * MS, T0 + 32 * MS, op="READ", fh="v2f", offset=8192, count=8192, **v2)
    b.nfs(T0 + 40 * MS, T0 + 50 * MS, op="WRITE", fh="v2f", offset=16384, count=8192, **v2)
    b.nfs(T0 + 60 * MS, None, op="STATFS", **v2)
    b.nfs(T0 + 70 * MS, T0 + 75 * MS, op="READ", fh="v3f", offset=0, count=4096)
    b.nfs(T0 + 80 * MS, T0 + 86 * MS, op="COMPOUND", version=4,
          v4_ops=["SEQUENCE", "PUTFH", "READ"], fh="v4f", offset=0, count=100, nbytes=50)  # fmt: skip


@pytest.fixture(scope="session")
def nfs_path(tmp_path_factory):
    b = DatasetBuilder()
    small_nfs(b)
    return b.write(tmp_path_factory.mktemp("nfs") / "ds", rows_per_group=4)


@pytest.fixture(scope="session")
def nfs_ds(nfs_path):
    return open_dataset(nfs_path)


def multi_client(b: DatasetBuilder) -> None:
    """A dataset with the cases on which engines can disagree: three clients and two servers
    on interleaved connections, the same xid on several connections, overlapping outstanding
    calls, unmatched calls and replies, retransmissions, attribute rows with a NULL ftype or
    size (as pre-operation attributes have) after the ones that carry them, and ties (the same
    time_ns) that only a tiebreak key orders. Two source files."""
    clients = ["10.0.0.1", "10.0.0.3", "10.0.0.5"]
    servers = ["10.0.0.2", "10.0.0.4"]
    ops = ["GETATTR", "LOOKUP", "READ", "WRITE", "ACCESS"]
    for i in range(60):
        t = T0 + i * 7 * MS
        op = ops[i % len(ops)]
        rw = op in ("READ", "WRITE")
        b.nfs(
            t,
            None if i % 11 == 5 else t + (i % 9 + 1) * MS,  # some calls never answered
            op=op,
            client=clients[i % 3],
            server=servers[i % 2],
            xid=0x4521224E + i % 4,  # the same xid on every connection
            fh=f"f{i % 4}" if rw else None,
            offset=(i // 5) * 4096 if rw else None,
            count=4096 if rw else None,
            retransmits=[t + MS // 2] if i % 13 == 0 else (),
            file_id=i % 2,
        )
    # two calls from different clients at the same instant, answered at the same instant
    for client in clients[:2]:
        b.nfs(T0 + 70 * S, T0 + 70 * S + MS, op="GETATTR", client=client, xid=77)
    b.nfs(T0 + 71 * S, T0 + 71 * S + 3 * MS, op="COMPOUND", version=4,
          v4_ops=["PUTFH", "READ", "GETATTR"], fh="f1", offset=0, count=8192,
          client=clients[2], server=servers[1], xid=0x4521224E)  # fmt: skip
    b.unmatched_reply(T0 + 72 * S, client=clients[1], server=servers[1], xid=0x4521224E)
    b.unmatched_reply(T0 + 72 * S, client=clients[2], server=servers[0], xid=0x4521224E)

    def attrs(t, fh, ftype, size, record=None):
        b.add("nfs_attrs", time_ns=t, file_id=0, record=record or b.record(0), transaction_id=1,
              nfs_version=3, operation="GETATTR", fh=fh, ftype=ftype, size=size)  # fmt: skip

    # f0: the latest rows lack the type (pre-operation attributes): its type is the last known
    attrs(T0 + 1, "f0", 1, 100)
    attrs(T0 + 2, "f0", None, 200)
    attrs(T0 + 3, "f0", None, 300)
    # f1: two rows at the same instant in different records, then a tie within one record
    attrs(T0 + 5, "f1", 1, 10)
    attrs(T0 + 5, "f1", 2, 20)
    rec = b.record(0)
    attrs(T0 + 6, "f1", None, 40, record=rec)
    attrs(T0 + 6, "f1", None, 30, record=rec)
    # f2: the latest row lacks the size, f3: never a type
    attrs(T0 + 7, "f2", 1, 1000)
    attrs(T0 + 8, "f2", 2, None)
    attrs(T0 + 9, "f3", None, 5)

    def name(t, fh, dir_fh, name, op="LOOKUP", record=None):
        b.add("nfs_names", time_ns=t, file_id=0, record=record or b.record(0), transaction_id=1,
              direction="reply", nfs_version=3, operation=op, dir_fh=dir_fh, name=name,
              fh=fh)  # fmt: skip

    # f0 named twice in one reply (a tie), f1 in a READDIR and then by a LOOKUP, f2's directory
    # known only from one of two tied rows
    rec = b.record(0)
    name(T0 + 10, "f0", "d0", "zeta", record=rec)
    name(T0 + 10, "f0", "d0", "alpha", record=rec)
    name(T0 + 11, "f1", "d0", "from-readdir", op="READDIRPLUS")
    name(T0 + 12, "f1", "d1", "looked-up")
    rec = b.record(0)
    name(T0 + 13, "f2", None, "two", record=rec)
    name(T0 + 13, "f2", "d1", "two", record=rec)
    name(T0 + 14, "d0", "root", "dir0")
    name(T0 + 15, "d1", "d0", "dir1")
    # packets: a flow whose first two packets (one each way) share a time; ICMP and non-IP;
    # several sizes with the same count
    b.packet(T0 + 80 * S, 64, "10.0.0.7", "10.0.0.8", src_port=5000, dst_port=53, flow_id=9)
    b.packet(T0 + 80 * S, 64, "10.0.0.8", "10.0.0.7", src_port=53, dst_port=5000, flow_id=9)
    b.packet(T0 + 80 * S + 1, 98, "10.0.0.7", "10.0.0.8", protocol=1, src_port=None,
             dst_port=None, flow_id=10)  # fmt: skip
    b.packet(T0 + 80 * S + 2, 60, None, None, protocol=None, src_port=None, dst_port=None,
             flow_id=None)  # fmt: skip
    for n in (1500, 1400, 1300):
        for k in range(3):
            b.packet(T0 + 81 * S + k, n, file_id=1)


FILE_CLIENTS = ["10.0.0.1", "10.0.0.3", "10.0.0.5"]
FILE_SERVERS = ["10.0.0.2", "10.0.0.4"]
ONE_ACCESS_CLIENT = "10.0.0.9"


def file_workload(b: DatasetBuilder, seed: int = 5, accesses: int = 240) -> None:
    """Reads and writes for the file analyses (file_sizes, file_age, sequentiality, top,
    wan_whatif), seeded: NFSv2 (UDP), v3 and v4 COMPOUNDs from three clients to two servers
    over about three minutes, streams that continue or jump, retransmitted and unanswered
    calls, short reads, calls at the same instant; attributes before, at and after accesses
    (a server clock ahead gives negative ages), rows tied on time and on record, types only
    sometimes known, a directory, a file never described by attributes ("noattr"), a client
    with a single access, packets between other hosts, a minute with no traffic and one with
    large packets to a server."""
    rng = random.Random(seed)
    files = ["f0", "f1", "f2", "f3", "f4", "f5", "noattr"]
    next_offset: dict[tuple, int] = {}
    t = T0
    times = []
    for i in range(accesses):
        if i % 17 != 5:  # every 17th call shares the previous call's instant
            t += rng.randint(1, 1500) * MS
        fh, client = rng.choice(files), rng.choice(FILE_CLIENTS)
        op = rng.choice(["READ", "READ", "WRITE"])
        version = rng.choice([2, 3, 4])
        count = rng.choice([4096, 8192, 32768])
        stream = (fh, client, op)
        offset = next_offset.get(stream, 0) if rng.random() < 0.6 else rng.randint(0, 64) * 4096
        next_offset[stream] = offset + count
        short = op == "READ" and rng.random() < 0.2
        kw = dict(fh=fh, offset=offset, count=count, nbytes=count // 2 if short else count,
                  client=client, server=FILE_SERVERS[i % 2], file_id=i % 2,
                  retransmits=[t + MS // 3] if i % 19 == 3 else ())  # fmt: skip
        reply = None if i % 23 == 7 else t + rng.randint(1, 9) * MS
        if version == 4:
            b.nfs(t, reply, op="COMPOUND", version=4, v4_ops=["SEQUENCE", "PUTFH", op], **kw)
        else:
            b.nfs(t, reply, op=op, version=version,
                  transport="udp" if version == 2 else "tcp", **kw)  # fmt: skip
        times.append(t)
    b.nfs(T0 + 400 * S, T0 + 400 * S + 2 * MS, op="READ", fh="f1", offset=0, count=4096,
          client=ONE_ACCESS_CLIENT, server=FILE_SERVERS[0])  # fmt: skip

    def attrs(when, fh, ftype, size, mtime, record=None, version=3):
        b.add("nfs_attrs", time_ns=when, file_id=0, record=record or b.record(0),
              transaction_id=1, nfs_version=version, operation="GETATTR", fh=fh, ftype=ftype,
              size=size, mtime_ns=mtime)  # fmt: skip

    for fh in files[:-1]:
        for _ in range(rng.randint(1, 4)):
            when = rng.choice([T0 - 5 * S, rng.choice(times), rng.randint(T0, t)])
            # mostly in the past, sometimes ahead of the capture's clock
            mtime = when - rng.choice([-3 * S, 0, 2 * MS, 40 * S, 7200 * S, 400 * 86400 * S])
            ftype = None if fh == "f4" else rng.choice([1, 1, None])
            size = rng.choice([0, 1, 4095, 4096, 70000, 3 << 20, None])
            attrs(when, fh, ftype, size, mtime, version=rng.choice([2, 3, 4]))
    # ties: two rows of one instant in two records, then two in one record
    attrs(times[10], "f2", 1, 5000, times[10] - S)
    attrs(times[10], "f2", 1, 6000, times[10] - 2 * S)
    rec = b.record(0)
    attrs(times[20], "f3", 1, 9000, times[20] - 3 * S, record=rec)
    attrs(times[20], "f3", 1, 8000, times[20] - 4 * S, record=rec)
    attrs(T0 + 1, "d0", 2, 4096, T0 - 60 * S)  # a directory: not a file size
    attrs(T0 + 2, "f5", 1, 100, T0 - 60 * S)  # f5's later rows may lack the type
    # a server clock 2 s ahead: a negative age; then three writes of one instant (in
    # transaction order, each continuing the one before)
    attrs(T0 + 300 * S, "f5", 1, 100, T0 + 302 * S)
    b.nfs(T0 + 300 * S + MS, T0 + 300 * S + 2 * MS, op="READ", fh="f5", offset=0, count=100,
          client=FILE_CLIENTS[1], server=FILE_SERVERS[0])  # fmt: skip
    for k in range(3):
        b.nfs(T0 + 301 * S, T0 + 301 * S + MS, op="WRITE", fh="f0", offset=(1 << 30) + 4096 * k,
              count=4096, client=FILE_CLIENTS[2], server=FILE_SERVERS[1])  # fmt: skip
    for fh, name in (("f0", "zero.bin"), ("f1", "one.bin"), ("f2", "two.bin")):
        b.add("nfs_names", time_ns=T0 + 3, file_id=0, record=b.record(0), transaction_id=1,
              direction="reply", nfs_version=3, operation="LOOKUP", dir_fh="root", name=name,
              fh=fh)  # fmt: skip
    # traffic between other hosts (not on the WAN) and a heavy minute to a server
    for k in range(5):
        b.packet(T0 + 270 * S + k, 1500, "10.0.0.7", "10.0.0.8", src_port=5000, dst_port=80)
    for k in range(4):
        b.packet(T0 + 61 * S + k, 60000, FILE_CLIENTS[0], FILE_SERVERS[1])


def parquet_rows(path, table: str) -> list[dict]:
    """Every row of one table of a written dataset, read with pyarrow alone (no SQL engine):
    what the tests' independent computations start from."""
    import pyarrow.parquet as pq

    return [r for f in sorted((path / table).rglob("*.parquet"))
            for r in pq.read_table(f).to_pylist()]  # fmt: skip


def assert_rows(got, want: list[dict]):
    """An analysis' table (Arrow) has exactly the rows `want`, in order, with the same
    columns; floats within 1e-12 relative."""
    rows = got.to_pylist()
    assert len(rows) == len(want), (rows, want)
    for g, w in zip(rows, want, strict=True):
        assert g.keys() == w.keys()
        for k in w:
            if isinstance(w[k], float):
                assert g[k] == pytest.approx(w[k], rel=1e-12), (k, g, w)
            else:
                assert g[k] == w[k], (k, g, w)


@pytest.fixture(scope="session")
def files_path(tmp_path_factory):
    b = DatasetBuilder()
    file_workload(b)
    return b.write(tmp_path_factory.mktemp("files") / "ds", rows_per_group=16)


@pytest.fixture(scope="session")
def files_ds(files_path):
    return open_dataset(files_path)
