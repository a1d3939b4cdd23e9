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


@pytest.fixture(scope="session")
def nfs_path(tmp_path_factory):
    b = DatasetBuilder()
    small_nfs(b)
    return b.write(tmp_path_factory.mktemp("nfs") / "ds", rows_per_group=4)


@pytest.fixture(scope="session")
def nfs_ds(nfs_path):
    return open_dataset(nfs_path)
