"""Call/reply pairing of `tapdeck convert` on a real multi-client NFS trace (issue 13; marked
`nfs`, needs the rig of tests/nfs).

The trace is the rig's `concurrent` workload: six client workers at once (NFSv3 and NFSv4
over TCP, one connection per command, 1 MiB READs and WRITEs spanning hundreds of segments,
NULL calls over UDP), every libnfs command as PID 1 of its own PID namespace so that the
same xid appears on many connections at once, and sometimes twice on one reused
address/port pair (see tests/nfs/workloads.py). A second copy has capture gaps cut out with
editcap: the last segment of a WRITE call right before a COMMIT call on its connection (the
COMMIT's segment then follows a "previous segment not captured" gap, as in the issue), the
first segments of a large message (its record mark and header), and two runs of consecutive
frames in the middle of several busy connections.

- On both: every reply tshark pairs (rpc.time, nanoseconds) and tapdeck decodes has exactly
  tshark's latency (reply time_ns - first_time_ns); no negative latency; a transaction id
  holds one call (and its retransmissions) and its replies on one connection with one xid,
  the call first; every message carries the time and record of the packet that completes it
  (tshark's frame, for reassembled messages the "reassembled in" frame).
- Two conversions (--jobs 1, --jobs 2, and the default) write byte-identical Parquet files.
- The trace cut into N = 1, 2, 6 files (editcap -c), converted in one process, as --shard I/N
  runs one after another and as --shard I/N processes started together: every table has the
  same rows as the whole trace's when file_id and record are ignored (the same transaction
  ids, pairings, flags and times); concurrent shards exit 0 and leave a complete dataset.
- A dataset missing a shard says so in dataset.json, and `tapdeck-analyze` refuses it.
- `--shard I/N` on one file says in one line that it splits by file.

tshark runs as the oracle with heuristics first (RPC is recognised by its header, not by the
lower port); on the gapped copy without out-of-order reassembly, which would otherwise keep
everything after a gap waiting for the missing segment and decode nothing of it.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from anatools import analyze_cli
from conftest import SLOW
from convtools import (
    TABLES,
    concurrent_capture,
    conv_of,
    conv_of_row,
    convert,
    convert_ok,
    data_files,
    editcap,
    frame_times,
    table,
    tcp_udp_frames,
    timing,
)

pytestmark = pytest.mark.nfs

NFS, V3_WRITE, V3_COMMIT = 100003, 7, 21
RUN = 20  # frames in a busy run cut out of the trace
IGNORED = ("file_id", "record")  # name the source file and the packet's place in it


# ---- the traces -----------------------------------------------------------------------------

def key_of(m) -> tuple:
    """(transport, client, server, xid, direction) of a tshark message."""
    return conv_of(m) + ("reply" if m["msg_type"] == 1 else "call",)


def key_of_row(r) -> tuple:
    return conv_of_row(r) + (r["direction"],)


def next_call_after_gap(msgs, frames, want) -> dict | None:
    """The first call `m` whose connection's previous call `p` spans several segments and
    satisfies want(p, m), with no other data of that direction between p's last segment and
    m's first, and whose keys are unique in the trace; cutting p's last segment (the frame
    tshark completes it in) makes m's segment follow a gap."""
    once = Counter(key_of(m) for m in msgs)
    prev_call = {}
    for m in msgs:
        if m["msg_type"] != 0 or m["ambiguous"]:
            continue
        c = conv_of(m)[:3]
        p, prev_call[c] = prev_call.get(c), m
        if not p or len(p["segments"]) < 2 or not want(p, m):
            continue
        if once[key_of(m)] > 1 or once[key_of(p)] > 1:
            continue  # a reused port pair and xid: keep the example unambiguous
        way = frames[m["frame"] - 1][:3]
        first = min(m["segments"] or [m["frame"]])
        if not any(frames[f - 1] and frames[f - 1][:3] == way and frames[f - 1][3]
                   for f in range(p["frame"] + 1, first)):
            return {"before": p, "after": m, "cut": [p["frame"]]}
    return None


def choose_gaps(msgs, frames) -> dict:
    """Frames to cut (1-based, sorted) and what they hit:
    commit: the last segment of a multi-segment NFSv3 WRITE call whose connection's next
      call is a COMMIT (the COMMIT's segment then follows the gap, as in the issue);
    held: the last segment of the first WRITE call on the connection that carries the most
      data from client to server (the 22 MB write): more than 16 MiB of that direction
      follows the gap, so a converter holding the bytes behind a hole until a buffer bound
      releases them (with a later packet's time) shows itself;
    header: the first three segments of the largest message on another connection (its
      record mark and RPC header);
    busy: two runs of RUN consecutive frames carrying data of at least three connections,
      the first inside a message of several segments."""
    n = len(frames)
    def write(p):
        return (p["program"], p["version"], p["procedure"]) == (NFS, 3, V3_WRITE)

    commit = next_call_after_gap(msgs, frames, lambda p, m: write(p) and (
        m["program"], m["version"], m["procedure"]) == (NFS, 3, V3_COMMIT))
    assert commit, "the concurrent trace has no NFSv3 WRITE over several segments followed " \
                   "by a COMMIT on its connection (did the workload change?)"
    sent = Counter()
    for f in frames:
        if f and f[0] == "tcp":
            sent[f[:3]] += f[3]
    (top, top_bytes), = sent.most_common(1)
    assert top_bytes > 20 << 20, f"no connection carries 20 MiB one way ({top_bytes} B)"
    held = next_call_after_gap(msgs, frames, lambda p, m: write(p) and conv_of(m)[:3] == top)
    assert held, "the 22 MB write's connection has no WRITE call followed by another call"
    after = sum(f[3] for f in frames[held["after"]["frame"]:] if f and f[:3] == top)
    assert after > 16 << 20, f"only {after} bytes follow the held gap"
    spoken = {conv_of(commit["after"])[:3], top}
    big = max((m for m in msgs if m["segments"] and conv_of(m)[:3] not in spoken),
              key=lambda m: len(m["segments"]))
    header = {"message": big, "cut": sorted(big["segments"])[:3]}
    inside = {f for m in msgs if m["segments"] for f in m["segments"][1:-1]}
    taken = set(commit["cut"]) | set(held["cut"]) | set(header["cut"])
    # The busy runs must not cut into the cases: the calls around each gap and their replies
    # (a WRITE after the held gap is completed hundreds of frames later, maybe in a run).
    cases = {conv_of(g[k]) for g in (commit, held) for k in ("before", "after")}
    keep = {f for m in msgs if conv_of(m) in cases for f in (m["segments"] or []) + [m["frame"]]}
    keep -= taken
    busy = []
    for start in (int(n * 0.35), int(n * 0.65)):
        for s in range(start, n - RUN):
            run = range(s + 1, s + RUN + 1)
            conns = {frames[f - 1][:3] for f in run if frames[f - 1] and frames[f - 1][3]}
            if len(conns) < 3 or not (busy or inside & set(run)):
                continue
            if any(abs(f - t) < 3 * RUN for f in (run[0], run[-1]) for t in taken):
                continue
            if keep.intersection(run):
                continue
            busy.append(list(run))
            taken |= set(run)
            break
    assert len(busy) == 2, "no run of frames where three connections carry data at once"
    return {"commit": commit, "held": held, "header": header, "busy": busy,
            "cut": sorted(taken)}


def ranges(frames: list[int]) -> list[str]:
    """editcap's frame selection: "a-b" for each run of consecutive frames."""
    out, start = [], None
    for i, f in enumerate(frames):
        if start is None:
            start = f
        if i + 1 == len(frames) or frames[i + 1] != f + 1:
            out.append(f"{start}-{f}" if f > start else str(f))
            start = None
    return out


@pytest.fixture(scope="module")
def traces(tapdeck, tmp_path_factory):
    """The concurrent trace and its gapped copy, each with tshark's messages, the time of
    every frame and a conversion."""
    # A run of the workload may lack a case: in one CI run none of the first ten WRITEs of
    # the 22 MB write could be cut unambiguously (`next_call_after_gap`: a port pair and xid
    # that recur, as they do on purpose here since every client is PID 1 of its namespace,
    # rule a pair out), and only 10 MB followed the first that could (held: "only 10469028
    # bytes follow the held gap"). Another run of the workload is the remedy; three at most.
    for take in (1, 2, 3):
        pcap = concurrent_capture(tmp_path_factory, take)
        msgs = timing(pcap)
        frames = tcp_udp_frames(pcap)
        try:
            gaps = choose_gaps(msgs, frames)
            break
        except AssertionError as lacking:
            if take == 3:
                raise
            print(f"pairing: run {take} of the workload lacks a case ({lacking}); "
                  "running it again", file=sys.stderr)
    base = tmp_path_factory.mktemp("pairing")
    gapped = base / "gapped.pcap"
    editcap("-F", "pcap", pcap, gapped, *ranges(gaps["cut"]))
    cut = set(gaps["cut"])
    kept = [f for f in range(1, len(frames) + 1) if f not in cut]  # new frame -> old frame
    out = {}
    for name, path, ooo in (("whole", pcap, True), ("gapped", gapped, False)):
        ds = base / f"ds-{name}"
        rep = convert_ok(tapdeck, ds, path)
        out[name] = {"pcap": path, "msgs": timing(path, out_of_order=ooo), "ds": ds,
                     "rep": rep, "rpc": table(ds, "rpc"), "times": frame_times(path)}
    out["gapped"].update(gaps=gaps, kept=kept)
    return out


# ---- the workload itself --------------------------------------------------------------------

def test_the_trace_holds_the_hard_cases(traces):
    """The workload really produces what the pairing must handle: thousands of RPCs, xids
    on several connections, messages over many segments, connections overlapping in time,
    UDP, and tshark pairing every reply."""
    msgs = traces["whole"]["msgs"]
    frames = tcp_udp_frames(traces["whole"]["pcap"])
    calls = [m for m in msgs if m["msg_type"] == 0]
    replies = [m for m in msgs if m["msg_type"] == 1]
    assert len(calls) >= 2000, f"only {len(calls)} calls"
    assert sum(m["rpc_time_ns"] is not None for m in replies) == len(replies) == len(calls), \
        "tshark pairs every reply of the whole trace"
    conns_per_xid = defaultdict(set)
    for m in msgs:
        conns_per_xid[m["xid"]].add(conv_of(m)[:3])
    shared = sum(len(c) > 1 for c in conns_per_xid.values())
    assert shared >= 100, f"only {shared} xids appear on more than one connection"
    assert sum(len(m["segments"] or []) > 100 for m in msgs) >= 6, "few messages over many segments"
    assert {m["transport"] for m in msgs} == {"tcp", "udp"}
    assert {(m["program"], m["version"]) for m in calls} >= {(NFS, 3), (NFS, 4)}
    # connections carrying data in the same 10 ms: at least three at some point
    times = traces["whole"]["times"]
    per_slot = defaultdict(set)
    for t, f in zip(times, frames, strict=True):
        if f and f[0] == "tcp" and f[3]:
            per_slot[t // 10_000_000].add(frozenset((f[1], f[2])))
    assert max(map(len, per_slot.values())) >= 3, "the clients did not overlap in time"
    assert (times[-1] - times[0]) >= 500_000_000, "the trace spans less than half a second"


# ---- pairing and times against tshark -------------------------------------------------------

def index_rows(rows):
    by = defaultdict(list)
    for r in rows:
        by[key_of_row(r) + (r["record"],)].append(r)
    return by


@pytest.mark.parametrize("view", ["whole", "gapped"])
def test_latency_equals_tshark(traces, view):
    """For every reply tshark pairs with a call and tapdeck decodes (same connection, xid
    and frame), tapdeck's latency (reply time_ns - first_time_ns) is tshark's rpc.time to
    the nanosecond."""
    t = traces[view]
    rows = index_rows(t["rpc"])
    paired = [m for m in t["msgs"] if m["msg_type"] == 1 and m["rpc_time_ns"] is not None]
    both, wrong, unpaired = 0, [], []
    for m in paired:
        got = rows.get(key_of(m) + (m["frame"],))
        if not got:
            continue
        both += 1
        r = got[0]
        if r["first_time_ns"] is None or not r["matched"]:
            unpaired.append((m["frame"], hex(m["xid"]), m["rpc_time_ns"]))
        elif r["time_ns"] - r["first_time_ns"] != m["rpc_time_ns"]:
            wrong.append((m["frame"], hex(m["xid"]), r["time_ns"] - r["first_time_ns"],
                          m["rpc_time_ns"]))
    least = len(paired) if view == "whole" else int(len(paired) * 0.95)
    assert both >= least, f"tapdeck decodes only {both} of the {len(paired)} replies tshark " \
                          f"pairs (in the frame tshark dissects them in)"
    assert not wrong, f"{len(wrong)} of {both} replies have another latency than tshark's " \
                      "rpc.time: tapdeck paired them with another call, or stamped the call " \
                      "or the reply with the time of another packet; (frame, xid, tapdeck ns, " \
                      f"tshark ns): {wrong[:6]}"
    assert not unpaired, f"{len(unpaired)} of {both} replies that tshark pairs are unmatched " \
                         f"in tapdeck (frame, xid, tshark ns): {unpaired[:6]}"


def transaction_problems(rows) -> list[tuple]:
    """What is wrong with the transactions of an rpc table: a transaction id must hold one
    call (plus its retransmissions) and its replies (plus duplicates), all on one connection
    with one xid; the first call comes no later than any reply; a matched reply's
    first_time_ns is that call's time; `matched` says whether both sides are there."""
    by = defaultdict(list)
    for r in rows:
        by[r["transaction_id"]].append(r)
    bad = []
    for tid, rs in by.items():
        calls = sorted((r for r in rs if r["direction"] == "call"), key=lambda r: r["time_ns"])
        replies = [r for r in rs if r["direction"] == "reply"]
        if len({conv_of_row(r) for r in rs}) > 1:
            bad.append(("one id on several connections or xids", tid,
                        sorted({conv_of_row(r) for r in rs})[:3]))
            continue
        if sum(not r["retransmit"] for r in calls) > 1:
            bad.append(("several original calls under one id", tid, len(calls)))
        if sum(not r["retransmit"] for r in replies) > 1:
            bad.append(("several original replies under one id", tid, len(replies)))
        both = bool(calls and replies)
        if any(r["matched"] != both for r in rs):
            bad.append(("matched flag", tid, both, [r["matched"] for r in rs]))
        if calls and replies:
            first = calls[0]["time_ns"]
            late = [r["time_ns"] for r in replies if r["time_ns"] < first]
            if late:
                bad.append(("a reply before its call", tid, first, late))
            if any(r["first_time_ns"] != first for r in replies):
                bad.append(("reply first_time_ns is not its call's time", tid, first,
                            [r["first_time_ns"] for r in replies]))
    return bad


@pytest.mark.parametrize("view", ["whole", "gapped"])
def test_pairs_are_on_one_connection_and_never_backwards(traces, view):
    rows = traces[view]["rpc"]
    negative = [(r["record"], hex(r["xid"]), r["time_ns"] - r["first_time_ns"]) for r in rows
                if r["first_time_ns"] is not None and r["time_ns"] < r["first_time_ns"]]
    assert not negative, f"{len(negative)} negative latencies (record, xid, ns): {negative[:6]}"
    bad = transaction_problems(rows)
    assert not bad, f"{len(bad)} transactions break the pairing rules, e.g. {bad[:5]}"
    assert traces[view]["rep"]["counts"].get("rpc.replies", 0) > 0


@pytest.mark.parametrize("view", ["whole", "gapped"])
def test_messages_carry_their_completing_frame(traces, view):
    """Every rpc row's time is the time of its own record (the row names the packet it was
    stamped with), and for every message both decode that packet is the one tshark says
    completes it: the frame it dissects the message in (a reassembled message's
    "reassembled in" frame). Messages are matched by connection, xid and direction; the
    same key twice (a reused port pair with a reused xid) is compared as a multiset."""
    t = traces[view]
    times = t["times"]
    off = [(r["record"], hex(r["xid"]), r["direction"], r["time_ns"] - times[r["record"] - 1])
           for r in t["rpc"] if not 1 <= r["record"] <= len(times)
           or r["time_ns"] != times[r["record"] - 1]]
    assert not off, f"{len(off)} rpc rows carry another time than their record's packet " \
                    f"(record, xid, direction, difference ns): {off[:6]}"
    ours, theirs = defaultdict(list), defaultdict(list)
    for r in t["rpc"]:
        if not r["truncated"]:
            ours[key_of_row(r)].append(r["record"])
    for m in t["msgs"]:
        theirs[key_of(m)].append(m["frame"])
    wrong, compared = [], 0
    for k, frames in theirs.items():
        mine = ours.get(k)
        if not mine:
            continue
        a, b = Counter(mine), Counter(frames)
        compared += min(len(mine), len(frames))
        ok = a == b if len(mine) == len(frames) else (a <= b or b <= a)
        if not ok:
            wrong.append((k[0], k[1][1], k[2][1], hex(k[3]), k[4], sorted(mine), sorted(frames)))
    assert compared >= 0.9 * len(t["msgs"]), f"only {compared} of {len(t['msgs'])} compared"
    assert not wrong, f"{len(wrong)} messages are stamped with another packet than the one " \
                      "that completes them (transport, client port, server port, xid, " \
                      f"direction, tapdeck records, tshark frames): {wrong[:5]}"


@pytest.mark.parametrize("case", ["commit", "held"])
def test_the_call_after_a_gap_keeps_its_own_time(traces, case):
    """The gapped copy: the call right after the gap (the COMMIT; the second WRITE of the
    22 MB write) is decoded by tshark and by tapdeck at its own frame, with its own time,
    and paired with its reply with tshark's latency; the WRITE call that lost its last
    segment is truncated and comes no later than its reply."""
    g = traces["gapped"]
    new = {old: i + 1 for i, old in enumerate(g["kept"])}
    after, before = g["gaps"][case]["after"], g["gaps"][case]["before"]
    frame = new[after["frame"]]
    theirs = [m for m in g["msgs"] if m["frame"] == frame and m["xid"] == after["xid"]]
    assert theirs, f"tshark does not decode the call after the gap ({case}): the test lost " \
                   "its case"
    rows = [r for r in g["rpc"] if conv_of_row(r) == conv_of(after)]
    call = [r for r in rows if r["direction"] == "call"]
    assert [(r["record"], r["time_ns"]) for r in call] == [(frame, g["times"][frame - 1])], \
        f"the call after the gap ({case}, xid {after['xid']:#x}) must be at record {frame}, " \
        "its own segment, with that segment's time; tapdeck has (record, time - its time) " \
        f"{[(r['record'], r['time_ns'] - g['times'][frame - 1]) for r in call]}: bytes " \
        "behind a gap were held back and stamped with a later packet"
    their_reply = [m for m in g["msgs"] if m["msg_type"] == 1 and m["xid"] == after["xid"]
                   and conv_of(m) == conv_of(after) and m["rpc_time_ns"] is not None]
    reply = [r for r in rows if r["direction"] == "reply"]
    assert their_reply and len(reply) == 1, f"the reply to the call after the gap ({case}): " \
                                            f"tshark {their_reply}, tapdeck {reply}"
    r = reply[0]
    assert r["matched"] and r["first_time_ns"] is not None, \
        f"the reply to the call after the gap ({case}) is not paired with it: {r}"
    assert r["time_ns"] - r["first_time_ns"] == their_reply[0]["rpc_time_ns"], \
        f"latency of the call after the gap ({case}): tapdeck " \
        f"{r['time_ns'] - r['first_time_ns']} ns, tshark {their_reply[0]['rpc_time_ns']} ns"
    w = [r for r in g["rpc"] if conv_of_row(r) == conv_of(before)]
    wc = [r for r in w if r["direction"] == "call"]
    assert len(wc) == 1 and wc[0]["truncated"], \
        f"the WRITE call that lost its last segment must have one row, truncated: {wc}"
    assert all(wc[0]["time_ns"] <= r["time_ns"] for r in w if r["direction"] == "reply"), w


# ---- determinism ----------------------------------------------------------------------------

@pytest.mark.parametrize("view", ["whole", "gapped"])
def test_conversions_are_byte_identical(traces, tapdeck, tmp_path, view):
    """The same trace converted again with --jobs 1 and --jobs 2: every Parquet file of
    every table has the same name and the same bytes as the first conversion's (default
    jobs)."""
    t = traces[view]
    first = data_files(t["ds"])
    assert first
    for jobs in ("1", "2"):
        ds = tmp_path / f"j{jobs}"
        convert_ok(tapdeck, ds, t["pcap"], args=("--jobs", jobs))
        again = data_files(ds)
        assert sorted(again) == sorted(first), f"--jobs {jobs} wrote other files"
        differ = [p for p in first if first[p] != again[p]]
        assert not differ, f"--jobs {jobs}: {len(differ)} Parquet files differ in their bytes " \
                           f"from another conversion of the same trace: {differ[:6]}"


# ---- the trace cut into files, converted in one process or in shards ------------------------

def comparable(ds) -> dict[str, Counter]:
    """Every table's rows without file_id and record, as a multiset."""
    out = {}
    for t in TABLES:
        out[t] = Counter(tuple(sorted((k, v) for k, v in r.items() if k not in IGNORED))
                         for r in table(ds, t))
    return out


def differing_tables(want_ds, got_ds) -> list[str]:
    """The tables whose rows (file_id and record ignored) differ between two datasets."""
    want, got = comparable(want_ds), comparable(got_ds)
    return [t for t in TABLES if want[t] != got[t]]


def dataset_json(ds) -> dict:
    return json.loads((Path(ds) / "dataset.json").read_text())


def start_shards(tapdeck, ds, files, n) -> list:
    return [tapdeck.popen("convert", *files, "--out", ds, "--json", "-q", "--shard", f"{i}/{n}")
            for i in range(n)]


def wait_all(procs, timeout=SLOW) -> list[tuple[int, str, str]]:
    """(exit code, stdout, stderr) of each process, all within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"shards started together did not all end within {timeout}s: "
                        f"{p.args}")
        out.append((p.returncode, o.decode(errors="replace"), e.decode(errors="replace")))
    return out


@pytest.fixture(scope="module")
def cuts(traces, tapdeck, tmp_path_factory, request):
    """The whole trace cut into 2 and 6 files (editcap -c, plain pcap), each converted
    (a) in one process, (b) as --shard I/N runs one after another, (c) as --shard I/N
    processes started together; N = 1 is the whole trace's conversion."""
    pcap = traces["whole"]["pcap"]
    total = len(traces["whole"]["times"])
    base = tmp_path_factory.mktemp("cuts")
    out = {"1a": {"ds": traces["whole"]["ds"], "files": [pcap], "shards": []}}
    started = []
    request.addfinalizer(lambda: [p.kill() for p in started if p.poll() is None])
    for n in (2, 6):
        d = base / f"n{n}"
        d.mkdir()
        editcap("-F", "pcap", "-c", str(math.ceil(total / n)), pcap, d / "part.pcap")
        files = sorted(d.glob("part_*.pcap"))
        assert len(files) == n, f"editcap -c made {len(files)} files, not {n}"
        a = base / f"{n}a"
        convert_ok(tapdeck, a, *files)
        b = base / f"{n}b"
        shards_b = [convert_ok(tapdeck, b, *files, args=("--shard", f"{i}/{n}"))
                    for i in range(n)]
        c = base / f"{n}c"
        procs = start_shards(tapdeck, c, files, n)
        started += procs
        shards_c = wait_all(procs)
        out[f"{n}a"] = {"ds": a, "files": files, "shards": []}
        out[f"{n}b"] = {"ds": b, "files": files, "shards": shards_b}
        out[f"{n}c"] = {"ds": c, "files": files, "shards": shards_c}
    return out


def describe_rows(rows: Counter, k: int = 3) -> list[dict]:
    return [dict(r) for r in list(rows)[:k]]


@pytest.mark.parametrize("name", ["2a", "2b", "2c", "6a", "6b", "6c"])
def test_cut_and_sharded_conversions_equal_the_whole(cuts, name):
    """Every table of the cut trace's dataset has exactly the rows of the whole trace's
    when file_id and record are ignored: the same transaction ids, pairings, matched,
    retransmit, first_time_ns, truncated flags and times, whatever the cut or the shards."""
    want, got = comparable(cuts["1a"]["ds"]), comparable(cuts[name]["ds"])
    n, how = name[0], {"a": "in one process", "b": "in shards one after another",
                       "c": "in shards at the same time"}[name[1]]
    problems = []
    for t in TABLES:
        missing, extra = want[t] - got[t], got[t] - want[t]
        if missing or extra:
            problems.append(f"table {t}: {sum(missing.values())} rows of the whole trace's "
                            f"dataset are not in the {n}-file conversion {how}, "
                            f"{sum(extra.values())} rows are there instead; e.g. missing "
                            f"{describe_rows(missing, 2)}, extra {describe_rows(extra, 2)}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("n", [2, 6])
def test_sharded_conversions_write_the_same_files(cuts, n):
    """The N files converted in one process, in shards one after another and in shards at
    the same time: the same Parquet files, byte for byte (each source's rows are converted
    the same way whichever process does it)."""
    one = data_files(cuts[f"{n}a"]["ds"])
    assert one
    for how in ("b", "c"):
        other = data_files(cuts[f"{n}{how}"]["ds"])
        assert sorted(other) == sorted(one), f"({how}) wrote other files than one process"
        differ = [p for p in one if one[p] != other[p]]
        assert not differ, f"{len(differ)} Parquet files of the {n} files converted " \
                           f"{'in shards one after another' if how == 'b' else 'in shards at the same time'} " \
                           f"differ in their bytes from one process's: {differ[:6]}"


@pytest.mark.parametrize("name", ["2a", "2b", "2c", "6a", "6b", "6c"])
def test_cut_datasets_keep_one_id_per_transaction(cuts, name):
    bad = transaction_problems(table(cuts[name]["ds"], "rpc"))
    assert not bad, f"{len(bad)} transactions break the pairing rules, e.g. {bad[:5]}"


@pytest.mark.parametrize("name", ["2b", "2c", "6b", "6c"])
def test_shards_succeed_and_the_dataset_is_complete(cuts, name):
    """Every shard exits 0 without an error (also when all run at the same time, into one
    dataset), and dataset.json then says the dataset is complete."""
    c = cuts[name]
    for i, s in enumerate(c["shards"]):
        if isinstance(s, tuple):
            rc, _out, err = s
            assert rc == 0 and "panicked" not in err, \
                f"shard {i}/{name[0]} started with the others failed ({rc}):\n{err[-2000:]}"
    meta = dataset_json(c["ds"])
    assert (meta.get("complete"), meta.get("missing_sources")) == (True, []), \
        f"every shard ran, yet dataset.json says: {meta}"


def test_one_process_dataset_is_complete(cuts):
    for name in ("1a", "2a", "6a"):
        meta = dataset_json(cuts[name]["ds"])
        assert (meta.get("complete"), meta.get("missing_sources")) == (True, []), (name, meta)


# ---- incomplete datasets --------------------------------------------------------------------

def resolved(paths) -> set[str]:
    return {str(Path(p).resolve()) for p in paths}


def test_a_missing_shard_makes_the_dataset_incomplete(cuts, tapdeck, tmp_path, procs):
    """Shards 0/3 and 1/3 of the 6 files ran, shard 2/3 was killed at once (kill -9): the
    dataset says it is incomplete and names the two files of shard 2; tapdeck-analyze
    refuses it (exit 1, one line saying it is incomplete) unless --allow-incomplete, which
    runs and warns. Running shard 2/3 again completes it, with the rows of the whole trace."""
    files = cuts["6a"]["files"]
    ds = tmp_path / "ds"
    for i in (0, 1):
        convert_ok(tapdeck, ds, *files, args=("--shard", f"{i}/3"))
    p = tapdeck.popen("convert", *files, "--out", ds, "--json", "-q", "--shard", "2/3")
    procs.append(p)
    p.kill()
    p.communicate(timeout=30)
    assert p.returncode == -9, f"shard 2/3 ended before it was killed ({p.returncode})"
    meta = dataset_json(ds)
    shard2 = resolved(files[i] for i in range(2, len(files), 3))
    assert meta.get("complete") is False, f"a shard is missing, yet dataset.json says {meta}"
    assert resolved(meta.get("missing_sources", [])) == shard2, \
        f"missing_sources must name the files of shard 2/3 ({sorted(shard2)}): {meta}"

    r = analyze_cli("run", "nfs_latency", ds)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 1, f"tapdeck-analyze must refuse an incomplete dataset:\n{r.describe()}"
    assert len(lines) == 1 and "incomplete" in lines[0].lower(), \
        f"expected one line saying the dataset is incomplete:\n{r.describe()}"
    r = analyze_cli("run", "nfs_latency", ds, "--allow-incomplete")
    assert r.returncode == 0, f"--allow-incomplete must analyze anyway:\n{r.describe()}"
    assert "incomplete" in r.stderr.lower(), f"--allow-incomplete must warn:\n{r.describe()}"
    assert r.out.strip(), "no result"

    convert_ok(tapdeck, ds, *files, args=("--shard", "2/3"))
    meta = dataset_json(ds)
    assert (meta.get("complete"), meta.get("missing_sources")) == (True, []), meta
    differ = differing_tables(cuts["1a"]["ds"], ds)
    assert not differ, f"after the rerun of shard 2/3 these tables differ from the whole " \
                       f"trace's (file_id and record ignored): {differ}"


def test_shards_of_a_single_file(traces, tapdeck, tmp_path):
    """--shard 1/3 and 2/3 given one file: each says in one line on stderr that --shard
    splits by file (and converts nothing, or fails); once 0/3 has run the dataset is
    complete and equals the unsharded conversion."""
    pcap, ds = traces["whole"]["pcap"], tmp_path / "ds"
    for i in (1, 2):
        r, rep = convert(tapdeck, ds, pcap, args=("--shard", f"{i}/3"))
        said = [line for line in r.stderr.splitlines()
                if "shard" in line.lower() and "file" in line.lower()]
        assert len(said) == 1, "--shard on a single file must say in one line that it " \
                               f"splits by file:\n{r.describe()}"
        assert "panicked" not in r.stderr
        if r.returncode == 0:
            assert rep["converted"] == 0, rep
    rep = convert_ok(tapdeck, ds, pcap, args=("--shard", "0/3"))
    assert rep["converted"] == 1, rep
    meta = dataset_json(ds)
    assert (meta.get("complete"), meta.get("missing_sources")) == (True, []), meta
    differ = differing_tables(traces["whole"]["ds"], ds)
    assert not differ, f"shard 0/3 of one file must convert it as an unsharded run does; " \
                       f"these tables differ: {differ}"
