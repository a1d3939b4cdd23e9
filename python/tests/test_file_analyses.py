"""file_sizes, file_age, sequentiality and top against computations written here in plain
Python over the dataset's Parquet files (no SQL), on conftest's `file_workload` (NFSv2, v3 and
v4; a file without attributes, a client with one access, tied times and records, negative
ages), plus the definitions' edge cases and the headlines."""

import math
from collections import defaultdict

import pyarrow as pa
import pytest
from conftest import FILE_CLIENTS, MS, ONE_ACCESS_CLIENT, S, assert_rows, parquet_rows
from datasetbuilder import T0, DatasetBuilder

from tapdeck_analyze import file_age, file_sizes, open_dataset, sequentiality, top
from tapdeck_analyze.analyses import ANALYSES, run
from tapdeck_analyze.file_age import age_distribution
from tapdeck_analyze.sequentiality import run_lengths

DAY = 86400 * S
# The documented age buckets (README): 0, 1 ms, 10 ms, 100 ms, 1 s, 10 s, 1 min, 10 min, 1 h,
# 1 d, 1 week, 30 d, 365 d.
AGE_EDGES = [0, MS, 10 * MS, 100 * MS, S, 10 * S, 60 * S, 600 * S, 3600 * S, DAY, 7 * DAY,
             30 * DAY, 365 * DAY]  # fmt: skip


# -- the model: plain Python over the Parquet rows ---------------------------------------------


def accesses(path) -> list[dict]:
    """Per transaction, its first READ/WRITE call row."""
    first = {}
    for r in parquet_rows(path, "nfs_rw"):
        if r["direction"] == "call":
            cur = first.get(r["transaction_id"])
            if cur is None or r["time_ns"] < cur["time_ns"]:
                first[r["transaction_id"]] = r
    return list(first.values())


def first_reply_rw(path) -> list[tuple[dict, dict]]:
    """(nfs_rw reply row, its rpc row) for first (not duplicate) replies."""
    rpc = {(r["file_id"], r["record"], r["transaction_id"]): r
           for r in parquet_rows(path, "rpc") if r["direction"] == "reply" and not r["retransmit"]}  # fmt: skip
    out = []
    for w in parquet_rows(path, "nfs_rw"):
        key = (w["file_id"], w["record"], w["transaction_id"])
        if w["direction"] == "reply" and key in rpc:
            out.append((w, rpc[key]))
    return out


def latest(rows, col) -> dict:
    """Per fh, `col` of the row with the greatest (time, file, record, value), NULLs skipped."""
    best = {}
    for r in rows:
        if r["fh"] is None or r[col] is None:
            continue
        key = (r["time_ns"], r["file_id"], r["record"], r[col])
        if r["fh"] not in best or key > best[r["fh"]]:
            best[r["fh"]] = key
    return {fh: key[-1] for fh, key in best.items()}


def nearest(values, p):
    v = sorted(values)
    return v[max(1, math.ceil(p * len(v))) - 1]


def pow2_floor(n: int) -> int:
    return 0 if n == 0 else 1 << (n.bit_length() - 1)


# -- file_sizes ------------------------------------------------------------------------------


def expected_file_sizes(path) -> list[dict]:
    attrs = parquet_rows(path, "nfs_attrs")
    sizes, types = latest(attrs, "size"), latest(attrs, "ftype")
    sized = {fh: s for fh, s in sizes.items() if types.get(fh) in (None, 1)}
    moved = defaultdict(lambda: [0, 0])
    for w, _ in first_reply_rw(path):
        if w["fh"] is not None:
            moved[w["fh"]][w["operation"] == "WRITE"] += w["bytes"] or 0
    handles = set(sized) | {a["fh"] for a in accesses(path) if a["fh"] is not None}
    buckets = defaultdict(lambda: [0, 0, 0])
    for fh in handles:
        lower = pow2_floor(sized[fh]) if fh in sized else None
        b = buckets[lower]
        b[0] += 1
        b[1] += moved[fh][0]
        b[2] += moved[fh][1]
    order = sorted(buckets, key=lambda x: (x is None, x or 0))
    known = sum(buckets[k][0] for k in order if k is not None)
    total = sum(b[1] + b[2] for b in buckets.values())
    rows, files_so_far, bytes_so_far = [], 0, 0
    for lower in order:
        files, r, w = buckets[lower]
        bytes_so_far += r + w
        if lower is not None:
            files_so_far += files
        rows.append(dict(
            size_lower_bytes=lower,
            size_upper_bytes=None if lower is None else (1 if lower == 0 else 2 * lower),
            files=files,
            file_fraction=None if lower is None else files / known,
            cumulative_file_fraction=None if lower is None else files_so_far / known,
            bytes_read=r, bytes_written=w,
            byte_fraction=(r + w) / total, cumulative_byte_fraction=bytes_so_far / total,
        ))  # fmt: skip
    return rows


def test_file_sizes_equal_an_independent_computation(files_path, files_ds):
    want = expected_file_sizes(files_path)
    assert_rows(file_sizes(files_ds), want)
    # the fixture has the edge cases: a file read/written without attributes, and the
    # directory d0 is not a file size
    unknown = [r for r in want if r["size_lower_bytes"] is None]
    assert unknown and unknown[0]["files"] == 1 and unknown[0]["bytes_read"] > 0
    assert sum(r["files"] for r in want if r["size_lower_bytes"] is not None) == 6


def test_file_sizes_last_size_wins_and_types(tmp_path):
    b = DatasetBuilder()

    def attrs(t, fh, ftype, size, record=None):
        b.add("nfs_attrs", time_ns=t, file_id=0, record=record or b.record(0), transaction_id=1,
              nfs_version=3, operation="GETATTR", fh=fh, ftype=ftype, size=size)  # fmt: skip

    attrs(T0, "a", 1, 10)
    attrs(T0 + 1, "a", None, 5000)  # pre-operation attributes: no type, a size
    attrs(T0, "l", 5, 20)  # a symbolic link
    attrs(T0, "d", 1, 100)
    attrs(T0 + 1, "d", 2, 4096)  # its last type: a directory
    attrs(T0, "e", 1, 0)
    b.nfs(T0 + 5 * MS, T0 + 6 * MS, op="READ", version=2, transport="udp", fh="a", offset=0,
          count=8192, nbytes=5000)  # fmt: skip
    b.nfs(T0 + 7 * MS, T0 + 8 * MS, op="COMPOUND", version=4, v4_ops=["PUTFH", "WRITE"],
          fh="x", offset=0, count=300)  # fmt: skip
    rows = file_sizes(b.write(tmp_path / "ds")).to_pylist()
    got = [(r["size_lower_bytes"], r["size_upper_bytes"], r["files"], r["bytes_read"],
            r["bytes_written"]) for r in rows]  # fmt: skip
    assert got == [(0, 1, 1, 0, 0), (4096, 8192, 1, 5000, 0), (None, None, 1, 0, 300)]
    assert rows[-1]["cumulative_byte_fraction"] == 1 and rows[-1]["file_fraction"] is None
    assert rows[1]["cumulative_file_fraction"] == 1


# -- file_age --------------------------------------------------------------------------------


def expected_ages(path) -> dict[str, list]:
    attrs = [a for a in parquet_rows(path, "nfs_attrs")
             if a["fh"] is not None and a["mtime_ns"] is not None]  # fmt: skip
    acc = [a for a in accesses(path) if a["fh"] is not None]

    def age(a):
        seen = [x for x in attrs if x["fh"] == a["fh"] and x["time_ns"] <= a["time_ns"]]
        if not seen:
            return None
        last = max(seen, key=lambda x: (x["time_ns"], x["file_id"], x["record"], x["mtime_ns"]))
        return a["time_ns"] - last["mtime_ns"]

    samples = {"read": [], "write": [], "first_access": []}
    for a in acc:
        samples["read" if a["operation"] == "READ" else "write"].append(age(a))
    for fh in {a["fh"] for a in acc}:
        first = min((a for a in acc if a["fh"] == fh),
                    key=lambda a: (a["time_ns"], a["transaction_id"]))  # fmt: skip
        samples["first_access"].append(age(first))
    return {e: v for e, v in samples.items() if v}


def test_file_age_equals_an_independent_computation(files_path, files_ds):
    samples = expected_ages(files_path)
    want = []
    for event, ages in samples.items():
        known = [a for a in ages if a is not None]
        want.append(dict(
            event=event, accesses=len(ages), unknown=len(ages) - len(known),
            min_s=min(known) / 1e9, p10_s=nearest(known, 0.1) / 1e9,
            p50_s=nearest(known, 0.5) / 1e9, p90_s=nearest(known, 0.9) / 1e9,
            max_s=max(known) / 1e9,
        ))  # fmt: skip
    assert_rows(file_age(files_ds), want)
    # the fixture covers accesses without attributes before them and negative ages
    assert all(w["unknown"] > 0 for w in want) and min(w["min_s"] for w in want) < 0

    dist = []
    for event, ages in samples.items():
        known = sorted(a for a in ages if a is not None)
        counts = defaultdict(int)
        for a in known:
            counts[max((e for e in AGE_EDGES if e <= a), default=None)] += 1
        seen = 0
        for lower in sorted(counts, key=lambda x: (x is not None, x or 0)):
            seen += counts[lower]
            i = AGE_EDGES.index(lower) if lower is not None else None
            upper = 0 if lower is None else (AGE_EDGES[i + 1] if i + 1 < len(AGE_EDGES) else None)
            dist.append(dict(
                event=event, lower_s=None if lower is None else lower / 1e9,
                upper_s=None if upper is None else upper / 1e9, accesses=counts[lower],
                fraction=counts[lower] / len(known), cumulative_fraction=seen / len(known),
            ))  # fmt: skip
    assert_rows(age_distribution(files_ds), dist)


def test_file_age_uses_attributes_at_or_before_the_call(tmp_path):
    b = DatasetBuilder()

    def attrs(t, mtime, fh="a"):
        b.add("nfs_attrs", time_ns=t, file_id=0, record=b.record(0), transaction_id=1,
              nfs_version=2, operation="GETATTR", fh=fh, ftype=1, size=1, mtime_ns=mtime)  # fmt: skip

    attrs(T0, T0 - 3600 * S)
    attrs(T0 + 10 * S, T0 + 5 * S)  # at the same instant as the read below: counts
    b.nfs(T0 + 10 * S, T0 + 10 * S + MS, op="READ", version=2, transport="udp", fh="a",
          offset=0, count=10)  # fmt: skip
    attrs(T0 + 10 * S + MS, T0 + 10 * S)  # after the call (its reply's): not yet known
    b.nfs(T0 + 20 * S, None, op="COMPOUND", version=4, v4_ops=["PUTFH", "WRITE"], fh="a",
          offset=10, count=10)  # fmt: skip
    b.nfs(T0 + 30 * S, None, op="READ", fh="b", offset=0, count=10)  # no attributes at all
    rows = {r["event"]: r for r in file_age(b.write(tmp_path / "ds")).to_pylist()}
    assert (rows["read"]["accesses"], rows["read"]["unknown"]) == (2, 1)
    assert rows["read"]["p50_s"] == 5.0
    assert rows["write"]["p50_s"] == 10.0  # 20 s − the mtime of the reply at 10.001 s
    assert (rows["first_access"]["accesses"], rows["first_access"]["p50_s"]) == (2, 5.0)


# -- sequentiality -----------------------------------------------------------------------------


def expected_streams(path) -> dict[tuple, list[int]]:
    """Per (fh, client, op): the lengths of its runs, in order."""
    client = {r["transaction_id"]: r["client_addr"] for r in parquet_rows(path, "rpc")
              if r["direction"] == "call" and not r["retransmit"]}  # fmt: skip
    streams = defaultdict(list)
    for a in accesses(path):
        if None not in (a["fh"], a["offset"], a["count"]):
            streams[(a["fh"], client[a["transaction_id"]], a["operation"])].append(a)
    runs = {}
    for key, acc in streams.items():
        acc.sort(key=lambda a: (a["time_ns"], a["transaction_id"]))
        lengths, end = [], None
        for a in acc:
            if end is not None and a["offset"] == end:
                lengths[-1] += 1
            else:
                lengths.append(1)
            end = a["offset"] + a["count"]
        runs[key] = lengths
    return runs


def test_sequentiality_equals_an_independent_computation(files_path, files_ds):
    runs = expected_streams(files_path)
    want = []
    for (fh, client, op), lengths in runs.items():
        n = sum(lengths)
        seq = n - len(lengths)
        want.append(dict(fh=fh, client_addr=client, operation=op, accesses=n, sequential=seq,
                         sequential_fraction=seq / (n - 1) if n > 1 else None,
                         runs=len(lengths), longest_run=max(lengths)))  # fmt: skip
    want.sort(key=lambda r: (-r["accesses"], r["fh"], r["client_addr"], r["operation"]))
    got = sequentiality(files_ds)
    assert_rows(got, want)
    single = [r for r in got.to_pylist() if r["client_addr"] == ONE_ACCESS_CLIENT]
    assert [(r["accesses"], r["sequential_fraction"], r["runs"]) for r in single] == [(1, None, 1)]
    # NFSv2 and v4 accesses count: every access with an offset is in some stream
    versions = {a["nfs_version"] for a in accesses(files_path)}
    assert versions == {2, 3, 4}
    assert sum(r["accesses"] for r in want) == len(accesses(files_path))

    dist = defaultdict(lambda: [0, 0])
    for (_, _, op), lengths in runs.items():
        for n in lengths:
            dist[(op, pow2_floor(n))][0] += 1
            dist[(op, pow2_floor(n))][1] += n
    want_runs = []
    for op in sorted({op for op, _ in dist}):
        keys = sorted(k for k in dist if k[0] == op)
        total_runs = sum(dist[k][0] for k in keys)
        total = sum(dist[k][1] for k in keys)
        seen = 0
        for k in keys:
            seen += dist[k][1]
            want_runs.append(dict(
                operation=op, length_lower=k[1], length_upper=2 * k[1], runs=dist[k][0],
                accesses=dist[k][1], run_fraction=dist[k][0] / total_runs,
                access_fraction=dist[k][1] / total, cumulative_access_fraction=seen / total,
            ))  # fmt: skip
    assert_rows(run_lengths(files_ds), want_runs)


def test_sequential_ties_are_ordered_by_transaction(tmp_path):
    b = DatasetBuilder()
    t = T0 + 5 * S
    # three writes at one instant, in transaction order 0, 4096, 8192: one run of 3
    for k in range(3):
        b.nfs(t, t + MS, op="WRITE", fh="a", offset=k * 4096, count=4096)
    # then a retransmitted read (one access), a jump back, and a second client's read
    b.nfs(t + S, t + S + MS, op="READ", fh="a", offset=0, count=100, retransmits=[t + S + 1])
    b.nfs(t + 2 * S, t + 2 * S + MS, op="READ", fh="a", offset=100, count=100)
    b.nfs(t + 3 * S, None, op="READ", fh="a", offset=0, count=100)
    b.nfs(t + 3 * S, None, op="READ", fh="a", offset=200, count=100, client="10.0.0.3")
    rows = {(r["client_addr"], r["operation"]): r
            for r in sequentiality(b.write(tmp_path / "ds")).to_pylist()}  # fmt: skip
    w = rows[("10.0.0.1", "WRITE")]
    assert (w["accesses"], w["sequential"], w["sequential_fraction"], w["runs"]) == (3, 2, 1.0, 1)
    r = rows[("10.0.0.1", "READ")]
    assert (r["accesses"], r["sequential"], r["runs"], r["longest_run"]) == (3, 1, 2, 2)
    assert rows[("10.0.0.3", "READ")]["sequential"] == 0  # another client's stream


# -- top -----------------------------------------------------------------------------------------


def expected_top(path, n) -> list[dict]:
    calls = {k: defaultdict(set) for k in ("client", "server", "file")}
    for r in parquet_rows(path, "nfs_ops"):
        if r["direction"] == "call":
            calls["client"][r["client_addr"]].add(r["transaction_id"])
            calls["server"][r["server_addr"]].add(r["transaction_id"])
            if r["fh"] is not None:
                calls["file"][r["fh"]].add(r["transaction_id"])
    moved = {k: defaultdict(lambda: [0, 0]) for k in calls}
    for w, rpc in first_reply_rw(path):
        i = w["operation"] == "WRITE"
        for kind, name in (("client", rpc["client_addr"]), ("server", rpc["server_addr"]),
                           ("file", w["fh"])):  # fmt: skip
            if name is not None:
                moved[kind][name][i] += w["bytes"] or 0
    names = {}
    for r in parquet_rows(path, "nfs_names"):
        key = (r["time_ns"], r["file_id"], r["record"], r["name"])
        if r["fh"] not in names or key > names[r["fh"]]:
            names[r["fh"]] = key
    rows = []
    for kind in ("client", "server", "file"):
        keys = set(calls[kind]) | set(moved[kind])
        c = {k: len(calls[kind].get(k, ())) for k in keys}
        b = {k: sum(moved[kind].get(k, [0, 0])) for k in keys}
        by_calls = sorted(keys, key=lambda k: (-c[k], k))
        by_bytes = sorted(keys, key=lambda k: (-b[k], k))
        for k in by_calls:
            cr, br = by_calls.index(k) + 1, by_bytes.index(k) + 1
            if cr > n and br > n:
                continue
            rd, wr = moved[kind].get(k, [0, 0])
            rows.append(dict(
                kind=kind, name=k, file_name=names[k][-1] if kind == "file" and k in names else None,
                calls=c[k], bytes_read=rd, bytes_written=wr,
                call_share=c[k] / sum(c.values()), byte_share=b[k] / sum(b.values()),
                calls_rank=cr, bytes_rank=br,
            ))  # fmt: skip
    return rows


@pytest.mark.parametrize("n", [10, 2])
def test_top_equals_an_independent_computation(files_path, files_ds, n):
    want = expected_top(files_path, n)
    assert_rows(top(files_ds, n=n), want)
    if n == 2:  # the union of two top-2 lists: two to four rows per kind
        assert all(2 <= sum(r["kind"] == k for r in want) <= 4 for k in ("client", "file"))


def test_top_ties_go_by_name(tmp_path):
    b = DatasetBuilder()
    for i, client in enumerate(["10.0.0.9", "10.0.0.3", "10.0.0.5"]):
        b.nfs(T0 + i * MS, T0 + i * MS + 1, op="READ", fh="f", offset=0, count=100,
              client=client)  # fmt: skip
    rows = [r for r in top(b.write(tmp_path / "ds")).to_pylist() if r["kind"] == "client"]
    assert [(r["name"], r["calls_rank"], r["bytes_rank"]) for r in rows] == [
        ("10.0.0.3", 1, 1), ("10.0.0.5", 2, 2), ("10.0.0.9", 3, 3)]  # fmt: skip


# -- headlines -----------------------------------------------------------------------------------


def test_headlines_in_human_units(files_ds):
    sizes = pa.Table.from_pylist([
        dict(size_lower_bytes=4096, size_upper_bytes=8192, files=3, cumulative_file_fraction=0.75,
             bytes_read=100, bytes_written=0),
        dict(size_lower_bytes=1 << 30, size_upper_bytes=1 << 31, files=1,
             cumulative_file_fraction=1.0, bytes_read=200, bytes_written=100),
    ])  # fmt: skip
    assert ANALYSES["file_sizes"].headline({"file_sizes": sizes}) == (
        "Half of the 4 files are under 8 KiB; 75 % of the bytes read and written go to files "
        "of 1 GiB or more"
    )
    ages = pa.Table.from_pylist([dict(event="read", p50_s=3 * 86400.0),
                                 dict(event="first_access", p50_s=0.0125)])  # fmt: skip
    assert ANALYSES["file_age"].headline({"file_age": ages}) == (
        "Median time since the file's last change: 3 d at reads, 12.5 ms at first access"
    )
    seq = pa.Table.from_pylist([
        dict(operation="READ", accesses=11, sequential=9, runs=2),
        dict(operation="READ", accesses=1, sequential=0, runs=1),
        dict(operation="WRITE", accesses=4, sequential=0, runs=4),
    ])  # fmt: skip
    assert ANALYSES["sequentiality"].headline({"sequentiality": seq}) == (
        "90 % of reads and 0 % of writes continue the previous one (same file and client); "
        "runs average 4 reads and 1 writes"
    )
    # every new analysis says something on the fixture, without raw nanoseconds or 1e+06
    for name in ("file_sizes", "file_age", "sequentiality", "top", "wan_whatif"):
        text = ANALYSES[name].headline(run(ANALYSES[name], files_ds))
        assert text and "e+" not in text and not any(w.isdigit() and len(w) > 6
                                                     for w in text.split()), text  # fmt: skip
        assert FILE_CLIENTS[0] not in text or name == "top"


def test_analyses_on_an_empty_nfs_dataset(tmp_path):
    """Packets but no NFS: every new table is empty or says nothing, and no headline fails."""
    b = DatasetBuilder()
    b.packet(T0, 100, "10.0.0.7", "10.0.0.8")
    ds = open_dataset(b.write(tmp_path / "ds"))
    for name in ("file_sizes", "file_age", "sequentiality", "top"):
        tables = run(ANALYSES[name], ds)
        assert all(t.num_rows == 0 for t in tables.values()), name
        assert ANALYSES[name].headline(tables) is None


def test_units():
    from tapdeck_analyze import units

    assert [units.size(n) for n in (0, 1023, 1536, 3 << 20, 5 << 40)] == [
        "0 B", "1023 B", "1.5 KiB", "3 MiB", "5 TiB"]  # fmt: skip
    assert [units.duration(s) for s in (0, 2e-6, 0.03, 59.5, 150, 7560, 3 * 86400)] == [
        "0 s", "2 µs", "30 ms", "59.5 s", "2.5 min", "2.1 h", "3 d"]  # fmt: skip
    assert [units.rate(b) for b in (500, 1.5e8, 2e9)] == ["500 bit/s", "150 Mbit/s", "2 Gbit/s"]
    assert [units.percent(f) for f in (0, 0.004, 0.734, 0.996, 1)] == [
        "0 %", "0.4 %", "73 %", "99.6 %", "100 %"]  # fmt: skip


def test_top_file_names_decrypt_with_the_key(tmp_path):
    from test_names import encrypt, write_key

    from tapdeck_analyze.names import load_key

    key_path = write_key(tmp_path / "k")
    b = DatasetBuilder()
    b.nfs(T0, T0 + MS, op="READ", fh="f", offset=0, count=100)
    b.add("nfs_names", time_ns=T0 - 1, file_id=0, record=b.record(0), transaction_id=1,
          direction="reply", nfs_version=3, operation="LOOKUP", dir_fh="root",
          name=encrypt(b"secret.bin"), fh="f")  # fmt: skip
    path = b.write(tmp_path / "ds", meta={"key_id": load_key(key_path).key_id})

    def file_names(ds):
        return [r["file_name"] for r in top(ds).to_pylist() if r["kind"] == "file"]

    assert file_names(open_dataset(path, key=key_path)) == ["secret.bin"]
    assert file_names(open_dataset(path)) == [encrypt(b"secret.bin")]  # ciphertext without it
