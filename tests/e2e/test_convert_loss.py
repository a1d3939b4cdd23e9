"""`tapdeck convert` on damaged real NFS captures (the rig's mixed workload; marked `nfs`):

- packets removed at random (seeded, 2 % and 10 %, plus half of the UDP RPC datagrams):
  unmatched calls and replies are counted in the report and the rpc `matched` column, every
  row is a message tshark saw in the original capture, no pairing is ever wrong, and over UDP
  the unmatched rows are exactly the partners of the datagrams removed;
- a capture cut by a snap length of 200 bytes (editcap -s 200): one rpc row per message,
  `truncated` exactly where the message lost bytes, xids/procedures equal tshark's;
- a capture that ends in the middle of a message.

tshark (tests/nfs/oracle.py) runs on the original capture only; rows of a damaged copy are
mapped back through the list of packets kept.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest
from conftest import SLOW, run
from convtools import (
    conv_of,
    conv_of_row,
    convert_ok,
    direction,
    drop_random,
    editcap,
    messages,
    nfs_captures,
    read_pcap_records,
    table,
    write_records,
)

pytestmark = pytest.mark.nfs


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    pcap = nfs_captures(tmp_path_factory)["mixed"]
    msgs = messages(pcap)
    keys = Counter(conv_of(m) + (m["msg_type"],) for m in msgs)
    assert max(keys.values()) == 1, "xids repeat on a conversation: keys below are ambiguous"
    return pcap, msgs


def index(msgs):
    """(conv, xid, msg_type) -> tshark message."""
    return {conv_of(m) + (m["msg_type"],): m for m in msgs}


def frames_of(m):
    return set(m["segments"] or [m["frame"]])


def damaged_copy(src, dst, fraction, seed, msgs):
    """src without `fraction` of its packets (seeded) and without every other UDP RPC
    datagram; returns (dropped frame set, kept frame list)."""
    dropped = set(drop_random(src, dst, fraction, seed))
    udp = sorted(m["frame"] for m in msgs if m["transport"] == "udp")
    dropped |= set(random.Random(seed).sample(udp, len(udp) // 2))
    header, recs, _ = read_pcap_records(src)
    write_records(dst, header, (r for i, r in enumerate(recs, 1) if i not in dropped))
    kept = [i for i in range(1, len(recs) + 1) if i not in dropped]
    return dropped, kept


@pytest.fixture(scope="module", params=[0.02, 0.10], ids=["2pct", "10pct"])
def lossy(request, mixed, tapdeck, tmp_path_factory):
    pcap, msgs = mixed
    base = tmp_path_factory.mktemp(f"loss-{request.param}")
    dst = base / "lossy.pcap"
    dropped, kept = damaged_copy(pcap, dst, request.param, 11, msgs)
    rep = convert_ok(tapdeck, base / "ds", dst)
    return msgs, dropped, kept, rep, table(base / "ds", "rpc")


def test_loss_is_counted_and_pairings_are_right(lossy):
    msgs, dropped, kept, rep, rpc = lossy
    true = index(msgs)
    c = rep["counts"]
    un_calls = sum(r["direction"] == "call" and not r["matched"] for r in rpc)
    un_replies = sum(r["direction"] == "reply" and not r["matched"] for r in rpc)
    assert un_calls + un_replies > 0
    assert (c.get("rpc.unmatched_calls", 0), c.get("rpc.unmatched_replies", 0)) == (
        un_calls, un_replies), "report vs the rpc table's matched column"
    assert c["rpc.calls"] + c["rpc.replies"] == len(rpc)
    problems = []
    by_tid = defaultdict(list)
    for r in rpc:
        by_tid[r["transaction_id"]].append(r)
        k = conv_of_row(r) + (int(r["direction"] == "reply"),)
        m = true.get(k)
        if m is None:
            problems.append(("a message tshark never saw", r))
            continue
        if r["record"] < 1:
            continue  # judged in test_message_cut_by_the_end_of_the_capture
        frame = kept[r["record"] - 1]
        if r["truncated"]:
            if frame < max(frames_of(m) - dropped, default=0):
                problems.append(("a cut message before its last kept segment", r, m["frame"]))
        elif frame != m["frame"] or frames_of(m) & dropped:
            problems.append(("record", r, m["frame"]))
        if r["direction"] == "reply" and not r["matched"] and r["procedure"] is not None:
            problems.append(("an unmatched reply with a procedure", r))
    pairs = 0
    for tid, rows in by_tid.items():
        calls = [r for r in rows if r["direction"] == "call"]
        replies = [r for r in rows if r["direction"] == "reply"]
        if len(calls) > 1 or len(replies) > 1:
            problems.append(("rows per transaction id", tid, rows))
            continue
        if not (calls and replies):
            continue
        call, reply = calls[0], replies[0]
        pairs += 1
        if conv_of_row(call) != conv_of_row(reply):
            problems.append(("paired across conversations or xids", call, reply))
        elif not (call["matched"] and reply["matched"]):
            problems.append(("a pair not marked matched", call, reply))
        elif reply["time_ns"] < call["time_ns"] and not call["truncated"]:
            # (a call cut by loss: test_call_cut_by_loss_comes_before_its_reply)
            problems.append(("reply before its call", call, reply))
        elif (reply["program"], reply["version"], reply["procedure"]) != (
                call["program"], call["version"], call["procedure"]):
            problems.append(("reply procedure", call, reply))
    assert pairs > len(msgs) // 4
    assert not problems, f"{len(problems)} problems, e.g. {problems[:4]}"


def test_udp_unmatched_equal_the_rpcs_removed(lossy):
    """Over UDP every message stands alone: the unmatched UDP rows are exactly the calls whose
    reply was removed and the replies whose call was removed."""
    msgs, dropped, _kept, _rep, rpc = lossy
    udp = [m for m in msgs if m["transport"] == "udp"]
    assert len(udp) >= 8
    true = index(udp)
    want = set()
    for m in udp:
        partner = true.get(conv_of(m) + (1 - m["msg_type"],))
        if m["frame"] not in dropped and (partner is None or partner["frame"] in dropped):
            want.add(conv_of(m) + (m["msg_type"],))
    got_rows = [r for r in rpc if r["transport"] == "udp"]
    got = {conv_of_row(r) + (int(r["direction"] == "reply"),) for r in got_rows
           if not r["matched"]}
    assert want, "the drop removed no UDP RPC"
    assert got == want
    assert len(got_rows) == sum(m["frame"] not in dropped for m in udp)


def test_transactions_captured_whole_are_paired(lossy):
    msgs, dropped, kept, _rep, rpc = lossy
    rows = {(kept[r["record"] - 1], r["xid"], r["direction"]): r for r in rpc
            if r["record"] >= 1}
    calls = {(m["frame"], m["xid"]): m for m in msgs if m["msg_type"] == 0}
    whole, lost = 0, []
    for m in msgs:
        if m["msg_type"] != 1:
            continue
        c = calls[(m["call_frame"], m["xid"])]
        if (frames_of(c) | frames_of(m)) & dropped:
            continue
        whole += 1
        a = rows.get((c["frame"], c["xid"], "call"))
        b = rows.get((m["frame"], m["xid"], "reply"))
        if not (a and b and a["matched"] and a["transaction_id"] == b["transaction_id"]):
            lost.append((c["frame"], m["frame"]))
    assert whole > 300
    assert not lost, f"{len(lost)} of {whole} transactions captured whole are not paired, " \
                     f"e.g. (call frame, reply frame) {lost[:5]}"


def test_call_cut_by_loss_comes_before_its_reply(mixed, tapdeck, tmp_path):
    pcap, msgs = mixed
    calls = {(m["frame"], m["xid"]) for m in msgs if m["msg_type"] == 0}
    big = next(m for m in msgs if m["msg_type"] == 0 and len(m["segments"]) > 20)
    assert (big["frame"], big["xid"]) in calls
    header, recs, _ = read_pcap_records(pcap)
    write_records(tmp_path / "c.pcap", header,
                  (r for i, r in enumerate(recs, 1) if i != big["frame"]))
    convert_ok(tapdeck, tmp_path / "ds", tmp_path / "c.pcap")
    rows = {r["direction"]: r for r in table(tmp_path / "ds", "rpc") if r["xid"] == big["xid"]}
    call, reply = rows["call"], rows["reply"]
    assert call["truncated"]
    assert call["time_ns"] <= reply["time_ns"] and call["record"] < reply["record"], (call, reply)
    assert call["matched"] and reply["matched"], (call, reply)
    assert call["transaction_id"] == reply["transaction_id"]


# ---- snap length -----------------------------------------------------------------------

def tshark_message_starts(pcap) -> Counter:
    """(frame, xid, msg_type, program, procedure) of every RPC header tshark finds at the
    start of a TCP segment or UDP datagram, without TCP reassembly (a cut capture cannot be
    reassembled; libnfs starts every message in a new segment)."""
    args = ["tshark", "-r", pcap, "-n", "-o", "tcp.desegment_tcp_streams:FALSE",
            "-o", "rpc.defragment_rpc_over_tcp:FALSE", "-d", "tcp.port==512-1023,rpc",
            "-d", "udp.port==512-1023,rpc", "-Y", "rpc", "-T", "fields", "-E", "occurrence=a",
            "-e", "frame.number", "-e", "rpc.xid", "-e", "rpc.msgtyp", "-e", "rpc.program",
            "-e", "rpc.procedure"]
    r = run(args, timeout=SLOW)
    assert r.returncode == 0, r.describe()
    out = Counter()
    for line in r.out.splitlines():
        f = line.split("\t")
        xids, types = f[1].split(","), f[2].split(",")
        progs, procs = f[3].split(","), f[4].split(",")
        for i, (x, t) in enumerate(zip(xids, types)):
            if not x or not t:
                continue  # a continuation segment
            def at(v, i=i):
                return int(v[i]) if i < len(v) and v[i] else None
            out[(int(f[0]), int(x, 16), int(t), at(progs), at(procs))] += 1
    return out


def test_snapped_capture(mixed, tapdeck, tmp_path):
    """editcap -s 200: every message still has its rpc row (same record, xid, direction,
    program, version, procedure as tshark on the whole capture); `truncated` is set exactly
    when a packet carrying the message was cut; tshark on the cut file finds the same
    messages (by the segment that starts them) with the same xids and procedures."""
    pcap, msgs = mixed
    snapped = tmp_path / "snap.pcap"
    editcap("-s", "200", pcap, snapped)
    rep = convert_ok(tapdeck, tmp_path / "ds", snapped)
    rpc = table(tmp_path / "ds", "rpc")
    _, recs, e = read_pcap_records(pcap)
    import struct
    wire = {i: struct.unpack(e + "I", r[12:16])[0] for i, r in enumerate(recs, 1)}
    ours = Counter((r["record"], r["xid"], r["direction"], r["program"], r["version"],
                    r["procedure"]) for r in rpc)
    want = Counter((m["frame"], m["xid"], direction(m), m["program"], m["version"],
                    m["procedure"]) for m in msgs)
    assert ours == want, f"missing {list((want - ours).items())[:5]}, " \
                         f"extra {list((ours - want).items())[:5]}"
    cut = {(m["frame"], m["xid"], direction(m)): any(wire[f] > 200 for f in frames_of(m))
           for m in msgs}
    wrong = [(k, r["truncated"]) for r in rpc
             if r["truncated"] != cut[k := (r["record"], r["xid"], r["direction"])]]
    assert sum(cut.values()) > 100
    assert not wrong, f"{len(wrong)} rows with the wrong truncated flag, e.g. {wrong[:5]}"
    assert all(r["matched"] for r in rpc)
    assert rep["counts"]["rpc.calls"] + rep["counts"]["rpc.replies"] == len(msgs)
    # tshark on the cut file, message by message (keyed by the frame that starts it).
    start = {(m["frame"], m["xid"], m["msg_type"]): min(frames_of(m)) for m in msgs}
    theirs = tshark_message_starts(snapped)
    mine = Counter((start[(r["record"], r["xid"], int(r["direction"] == "reply"))], r["xid"],
                    int(r["direction"] == "reply"), r["program"], r["procedure"]) for r in rpc)
    assert mine == theirs, f"ours only {list((mine - theirs).items())[:5]}, " \
                           f"tshark only {list((theirs - mine).items())[:5]}"
    # The NFS tables keep what fits: v3 procedures and v4 first operations still decode.
    ops = table(tmp_path / "ds", "nfs_ops")
    nfs_msgs = {(r["record"], r["direction"]) for r in rpc if r["program"] == 100003
                and not (r["version"] == 4 and r["procedure"] == 0)}
    assert {(o["record"], o["direction"]) for o in ops} == nfs_msgs


# ---- a capture that ends inside a message -----------------------------------------------

@pytest.fixture(scope="module")
def cut_at_end(mixed, tmp_path_factory):
    """The mixed capture up to the middle of its first RPC that spans more than 20 segments
    (a 64 KiB v3 WRITE call): that message is completed only by the end of the capture."""
    pcap, msgs = mixed
    big = next(m for m in msgs if len(m["segments"]) > 20)
    last = big["segments"][len(big["segments"]) // 2]
    base = tmp_path_factory.mktemp("cut-end")
    header, recs, _ = read_pcap_records(pcap)
    out = write_records(base / "cut.pcap", header, recs[:last])
    return out, big, last


def test_message_cut_by_the_end_of_the_capture(cut_at_end, tapdeck, tmp_path):
    """The cut message has its row: truncated, unmatched, with the xid, procedure and record
    length tshark shows (its record: test_cut_message_record_is_its_last_packet)."""
    pcap, big, _last = cut_at_end
    rep = convert_ok(tapdeck, tmp_path / "ds", pcap)
    assert rep["counts"].get("failed.truncated_at_end", 0) >= 1
    rows = [r for r in table(tmp_path / "ds", "rpc") if r["xid"] == big["xid"]
            and r["direction"] == direction(big)]
    assert len(rows) == 1
    r = rows[0]
    assert (r["truncated"], r["matched"], r["procedure"]) == (True, False, big["procedure"])
    assert r["message_len"] == big["fraglen"]
    assert r["time_ns"] <= max(m["time_ns"] for m in [big]) and r["time_ns"] > 0


def test_cut_message_record_is_its_last_packet(cut_at_end, tapdeck, tmp_path):
    pcap, big, last = cut_at_end
    convert_ok(tapdeck, tmp_path / "ds", pcap)
    rows = [r for r in table(tmp_path / "ds", "rpc") if r["xid"] == big["xid"]]
    assert [r["record"] for r in rows] == [last]


def test_duplicated_packets(mixed, tapdeck, tmp_path):
    """A UDP call and its reply captured twice: the copies are retransmit rows of the same
    transaction; a TCP segment captured twice (a retransmission) adds no row."""
    pcap, msgs = mixed
    header, recs, _ = read_pcap_records(pcap)
    ucall = next(m for m in msgs if m["transport"] == "udp" and m["msg_type"] == 0)
    urep = next(m for m in msgs if m["transport"] == "udp" and m["msg_type"] == 1
                and m["xid"] == ucall["xid"])
    tcall = next(m for m in msgs if m["transport"] == "tcp" and m["msg_type"] == 0
                 and not m["segments"] and m["program"] == 100003)
    twice = {ucall["frame"], urep["frame"], tcall["frame"]}
    write_records(tmp_path / "dup.pcap", header,
                  (x for i, r in enumerate(recs, 1) for x in ([r, r] if i in twice else [r])))
    rep = convert_ok(tapdeck, tmp_path / "ds", tmp_path / "dup.pcap")
    rpc = table(tmp_path / "ds", "rpc")
    assert len(rpc) == len(msgs) + 2
    u = sorted((r["record"], r["direction"], r["retransmit"], r["transaction_id"], r["matched"])
               for r in rpc if r["xid"] == ucall["xid"] and r["transport"] == "udp")
    tid = u[0][3]
    assert [x[1:3] for x in u] == [("call", False), ("call", True), ("reply", False),
                                    ("reply", True)]
    assert {x[3] for x in u} == {tid} and all(x[4] for x in u)
    t = [r for r in rpc if r["xid"] == tcall["xid"] and r["transport"] == "tcp"]
    assert sorted(r["direction"] for r in t) == ["call", "reply"]
    assert not any(r["retransmit"] for r in t)
    c = rep["counts"]
    assert (c.get("rpc.retransmits"), c.get("rpc.duplicate_replies")) == (1, 1)
    assert not c.get("rpc.unmatched_calls") and not c.get("rpc.unmatched_replies")
