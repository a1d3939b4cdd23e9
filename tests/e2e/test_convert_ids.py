"""Transaction ids of `tapdeck convert` do not depend on how the input is cut up or run
(the rig's mixed NFS capture; marked `nfs`).

The capture is split into parts (boundaries right after eight calls whose replies land in the
next part, and one inside a 64 KiB message); the parts' names sort in the reverse of their
time order, so the converter must order them by first packet time. Then:
  (a) the whole capture in one run;
  (b) all parts in one run (--jobs 1);
  (c) part by part, in a shuffled order, each a separate `tapdeck convert` into one dataset;
  (d) --shard I/3 for each I in a shuffled order (--jobs 2), each run given all parts.
(b), (c) and (d) must give identical rows in every table (so identical transaction ids) and
the same catalog. (a) must have the same rows too once file_id and record are ignored (they
name the source file and the packet's place in it): transaction ids are a function of the
packets (the connection, the xid and the call's time), not of file boundaries, and the parts
are one continued capture, so a message cut by a part boundary is reassembled across it.
Calls and replies in different parts pair (the stitch). Rerunning over the same inputs
reports every source unchanged and changes no file.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from convtools import (
    TABLES,
    conv_of,
    conv_of_row,
    convert_ok,
    data_files,
    messages,
    nfs_captures,
    read_pcap_records,
    table,
    write_records,
)

pytestmark = pytest.mark.nfs


def split_points(msgs) -> list[int]:
    """Frame numbers after which a part ends."""
    calls = [m for m in msgs if m["msg_type"] == 0 and not m["segments"]
             and m["reply_frame"] and m["reply_frame"] > m["frame"]]
    step = len(calls) // 9
    points = [calls[step * (i + 1)]["frame"] for i in range(8)]
    big = next(m for m in msgs if len(m["segments"]) > 20)
    points.append(big["segments"][len(big["segments"]) // 2])
    return sorted(set(points))


@pytest.fixture(scope="module")
def runs(tapdeck, tmp_path_factory):
    pcap = nfs_captures(tmp_path_factory)["mixed"]
    msgs = messages(pcap)
    base = tmp_path_factory.mktemp("ids")
    points = split_points(msgs)
    header, recs, _ = read_pcap_records(pcap)
    parts, start = [], 0
    bounds = points + [len(recs)]
    for i, end in enumerate(bounds):
        # Names sort in the reverse of time order: part_z... holds the first packets.
        p = base / "parts" / f"part_{chr(ord('z') - i)}.pcap"
        p.parent.mkdir(exist_ok=True)
        write_records(p, header, recs[start:end])
        parts.append(p)
        start = end
    ds = {k: base / k for k in "abcd"}
    rep = {"a": convert_ok(tapdeck, ds["a"], pcap),
           "b": convert_ok(tapdeck, ds["b"], *parts, args=("--jobs", "1"))}
    rng = random.Random(1)
    order = parts[:]
    rng.shuffle(order)
    rep["c"] = [convert_ok(tapdeck, ds["c"], p) for p in order]
    shards = list(range(3))
    rng.shuffle(shards)
    rep["d"] = [convert_ok(tapdeck, ds["d"], *parts, args=("--shard", f"{i}/3", "--jobs", "2"))
                for i in shards]
    return {"pcap": pcap, "msgs": msgs, "parts": parts, "points": points, "ds": ds,
            "rep": rep, "order": order, "shards": shards}


def rows_of(ds, t):
    return sorted((tuple(sorted(r.items())) for r in table(ds, t)), key=repr)


def catalog(ds):
    import pyarrow.parquet as pq

    src = pq.read_table(Path(ds) / "catalog" / "sources.parquet").to_pylist()
    groups = pq.read_table(Path(ds) / "catalog" / "row_groups.parquet").to_pylist()
    return (sorted(src, key=lambda r: r["file_id"]),
            sorted(groups, key=lambda r: (r["table"], r["path"], r["row_group"])))


def test_parts_are_ordered_by_time(runs):
    src, _ = catalog(runs["ds"]["b"])
    assert [Path(s["path"]).name for s in src] == [p.name for p in runs["parts"]]
    assert [s["file_id"] for s in src] == list(range(len(runs["parts"])))


@pytest.mark.parametrize("other", ["c", "d"])
def test_identical_rows_whatever_the_order_or_split(runs, other):
    """Every table (so every transaction id, file id, record and matched flag) and the
    catalog are identical for (b) and (c) / (d)."""
    ds = runs["ds"]

    def key(r):
        return r["time_ns"], r["xid"], r["direction"], r["transaction_id"]

    assert {key(r) for r in table(ds["b"], "rpc")} == {key(r) for r in table(ds[other], "rpc")}
    for t in TABLES:
        b, o = rows_of(ds["b"], t), rows_of(ds[other], t)
        assert len(b) == len(o), t
        assert b == o, f"table {t} differs between (b) and ({other})"
    assert catalog(ds["b"]) == catalog(ds[other])
    assert sorted(data_files(ds["b"])) == sorted(data_files(ds[other]))


def test_whole_capture_has_the_rows_of_its_parts(runs):
    """(a) vs (b): every table has the same rows once file_id and record are ignored (the
    same transaction ids, pairings, flags and times)."""
    def rows(ds, t):
        return Counter(tuple(sorted((k, v) for k, v in r.items()
                                    if k not in ("file_id", "record"))) for r in table(ds, t))

    for t in TABLES:
        a, b = rows(runs["ds"]["a"], t), rows(runs["ds"]["b"], t)
        assert a == b, f"table {t}: {sum((a - b).values())} rows of the whole capture's " \
                       f"conversion are not in the parts' and {sum((b - a).values())} others " \
                       f"are (file_id and record ignored), e.g. {list(a - b)[:1]} / " \
                       f"{list(b - a)[:1]}"


def pairs(ds) -> tuple[set, dict]:
    """Paired (conversation, xid) and the rows per transaction id."""
    by = defaultdict(list)
    for r in table(ds, "rpc"):
        by[r["transaction_id"]].append(r)
    out = set()
    for tid, rows in by.items():
        dirs = sorted(r["direction"] for r in rows)
        assert dirs in (["call"], ["reply"], ["call", "reply"]), (tid, rows)
        if dirs == ["call", "reply"]:
            assert conv_of_row(rows[0]) == conv_of_row(rows[1]), rows
            out.add(conv_of_row(rows[0]))
    return out, by


def test_split_pairs_as_the_whole(runs):
    """(a) vs (b): the same pairs, every reply paired (also the message cut by a part
    boundary: the parts are one continued capture), nothing truncated."""
    pa, _ = pairs(runs["ds"]["a"])
    pb, by_b = pairs(runs["ds"]["b"])
    assert len(pa) == sum(m["msg_type"] == 1 for m in runs["msgs"]), "(a) pairs everything"
    assert pa == pb, f"pairs only in (a): {sorted(pa - pb)[:5]}, only in (b): {sorted(pb - pa)[:5]}"
    cut = [r for rows in by_b.values() for r in rows if r["truncated"]]
    assert not cut, f"messages truncated at a part boundary: {cut[:3]}"


def test_calls_and_replies_in_different_parts_pair(runs):
    """The stitch: each of the eight calls that end a part pairs with its reply in the next
    part: same transaction id, matched, the reply with the call's program, version and
    procedure, and NFS rows under that id."""
    ds = runs["ds"]["b"]
    rpc = table(ds, "rpc")
    by_key = {conv_of_row(r) + (r["direction"],): r for r in rpc}
    ops = defaultdict(list)
    for o in table(ds, "nfs_ops"):
        ops[(o["transaction_id"], o["direction"])].append(o)
    msgs = {m["frame"]: m for m in runs["msgs"] if m["msg_type"] == 0}
    stitched = 0
    for f in runs["points"]:
        m = msgs.get(f)
        if m is None:
            continue  # the boundary inside a message
        c = by_key[conv_of(m) + ("call",)]
        r = by_key[conv_of(m) + ("reply",)]
        assert c["file_id"] + 1 == r["file_id"]
        assert c["matched"] and r["matched"], (c, r)
        assert c["transaction_id"] == r["transaction_id"], (c, r)
        assert (r["program"], r["version"], r["procedure"], r["first_time_ns"]) == (
            c["program"], c["version"], c["procedure"], c["time_ns"])
        if c["program"] == 100003 and not (c["version"] == 4 and c["procedure"] == 0):
            assert ops[(c["transaction_id"], "reply")], "NFS rows of a stitched reply"
        stitched += 1
    assert stitched == 8
    rep = runs["rep"]["b"]["counts"]
    assert rep.get("rpc.unmatched_calls", 0) + rep.get("rpc.unmatched_replies", 0) == 0, \
        f"the parts are one capture: every call and reply pairs, {rep}"


def test_rerun_changes_nothing(runs, tapdeck):
    """Converting the same inputs again: every source unchanged, no file rewritten (same
    bytes; data files and state keep their mtimes)."""
    for k, inputs in (("b", runs["parts"]), ("c", runs["parts"][:3]), ("a", [runs["pcap"]])):
        ds = runs["ds"][k]
        before = {p: (p.read_bytes(), p.stat().st_mtime_ns)
                  for p in sorted(Path(ds).rglob("*")) if p.is_file()}
        rep = convert_ok(tapdeck, ds, *inputs)
        n = len(runs["parts"]) if k != "a" else 1
        assert (rep["sources"], rep["converted"], rep["skipped"]) == (n, 0, n), rep
        after = {p: (p.read_bytes(), p.stat().st_mtime_ns)
                 for p in sorted(Path(ds).rglob("*")) if p.is_file()}
        assert sorted(before) == sorted(after), "files appeared or vanished"
        changed = [str(p.relative_to(ds)) for p in before if before[p][0] != after[p][0]]
        assert not changed, f"rewritten with other bytes: {changed}"
        touched = [str(p.relative_to(ds)) for p in before if before[p][1] != after[p][1]
                   and p.suffix == ".parquet" and "catalog" not in p.parts]
        assert not touched, f"data files rewritten: {touched}"


def test_report_of_each_step(runs):
    """(c): each run converts its new part plus the parts whose inputs changed (their ids or
    stitch partners); (d): the shards together convert every part exactly once."""
    n = len(runs["parts"])
    steps = runs["rep"]["c"]
    assert [s["sources"] for s in steps] == list(range(1, n + 1))
    assert all(1 <= s["converted"] <= s["sources"] for s in steps)
    shards = runs["rep"]["d"]
    assert sum(s["converted"] for s in shards) == n
    assert all(s["sources"] == n for s in shards)
