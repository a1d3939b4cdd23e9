"""`tapdeck-analyze` on real conversions, NFS side (issue 6's acceptance):

- `nfs_latency` for NFSv3 agrees with `tshark -q -z rpc,srt,100003,3` on the rig's v3 and
  mixed captures (no retransmissions there): the same calls per procedure, and the same min,
  max and mean to the microsecond; NFSv4 operation counts equal the operations tshark decodes
  in the replies. The NFS cases of the tcpdump corpus are compared the same way.
- `rpc_matching` finds nothing unmatched on lossless captures; with packets removed at random
  (seeded), over UDP the unmatched messages are exactly the partners of the RPCs removed, over
  TCP at least that many, and no call is ever paired with another call's reply.

The rig tests are marked `nfs` (root; the captures are made once per session by convtools).
"""

from __future__ import annotations

import random
import shutil
import struct
from collections import Counter

import duckdb
import pytest
from anatools import analyze, corpus_file, tshark_srt
from conftest import REPO, Pkt, frame, write_pcap
from convtools import (
    conv_of,
    convert_ok,
    drop_random,
    messages,
    nfs_captures,
    read_pcap_records,
    write_records,
)
from nfs import oracle


@pytest.fixture(scope="module")
def captures(tmp_path_factory, tapdeck):
    """kind -> (pcap, dataset) for the rig's v3, v4 and mixed workloads."""
    caps = nfs_captures(tmp_path_factory)
    base = tmp_path_factory.mktemp("analyze-nfs")
    out = {}
    for kind, pcap in caps.items():
        convert_ok(tapdeck, base / kind, pcap)
        out[kind] = (pcap, base / kind)
    return out


def latency_rows(ds, version) -> dict[str, dict]:
    return {r["operation"]: r for r in analyze("nfs_latency", ds) if r["nfs_version"] == version}


def assert_matches_srt(pcap, ds, version=3):
    """nfs_latency's NFSv3 (or v2) rows against tshark's rpc,srt table: same procedures and
    calls; min/max as tshark prints them (truncated to µs); mean within half a µs (tshark
    rounds)."""
    srt = tshark_srt(pcap, version=version)
    ours = {op: r for op, r in latency_rows(ds, version).items() if r["calls"] > 0}
    assert sorted(ours) == sorted(srt), (sorted(ours), sorted(srt))
    bad = []
    for op, t in srt.items():
        r = ours[op]
        got = {"calls": r["calls"], "min_us": round(r["min_s"] * 1e9) // 1000,
               "max_us": round(r["max_s"] * 1e9) // 1000}
        want = {k: t[k] for k in got}
        if got != want or abs(r["mean_s"] * 1e6 - t["avg_us"]) > 0.5 + 1e-6:
            bad.append((op, r, t))
        assert r["retransmits"] == 0 and r["duplicate_replies"] == 0, r
    assert not bad, bad
    return srt


def v4_reply_op_counts(pcap) -> Counter:
    """What nfs_latency counts for NFSv4, from tshark's replies: each operation in a reply,
    and each COMPOUND (procedure 1) and NULL reply as a whole."""
    want = Counter()
    for m in messages(pcap):
        if m["msg_type"] != 1 or m["program"] != 100003 or m["version"] != 4:
            continue
        if m["procedure"] == 0:
            want["NULL"] += 1
            continue
        want["COMPOUND"] += 1
        want.update(op["name"] for op in (m["nfs"] or {}).get("ops") or [])
    return want


@pytest.mark.nfs
@pytest.mark.parametrize("kind", ["v3", "mixed"])
def test_nfsv3_latency_equals_tshark_srt(captures, kind):
    pcap, ds = captures[kind]
    srt = assert_matches_srt(pcap, ds)
    assert sum(t["calls"] for t in srt.values()) > 150
    assert {"READ", "WRITE", "LOOKUP", "GETATTR", "COMMIT"} <= set(srt)


@pytest.mark.nfs
@pytest.mark.parametrize("kind", ["v4", "mixed"])
def test_nfsv4_operation_counts_equal_tsharks_replies(captures, kind):
    pcap, ds = captures[kind]
    want = v4_reply_op_counts(pcap)
    got = {op: r["calls"] for op, r in latency_rows(ds, 4).items() if r["calls"]}
    assert want["COMPOUND"] > 80 and want["READ"] > 5
    assert got == dict(want)


@pytest.mark.nfs
def test_message_completed_by_an_out_of_order_segment(captures, tapdeck, tmp_path):
    """One middle segment of a multi-segment READ reply moved after the reply's last segment
    (times stay in capture order), as a segment lost on the wire and sent again: the client's
    ACKs in between stay at its first byte (duplicate ACKs, as a receiver missing it sends;
    an ACK past it would say the client had it, and the hole would be capture loss). The
    reply is complete only at that moved packet."""
    pcap, _ = captures["v3"]
    m = next(m for m in messages(pcap)
             if m["msg_type"] == 1 and m["procedure"] == 6 and len(m["segments"]) > 20
             and m["frame"] == m["segments"][-1])
    moved, last = m["segments"][5], m["frame"]
    header, recs, _ = read_pcap_records(pcap)
    order = list(range(1, len(recs) + 1))
    order.remove(moved)
    order.insert(order.index(last) + 1, moved)
    # each packet takes the timestamp of the slot it now occupies
    new = recs[:moved - 1] + [recs[slot - 1][:8] + recs[i - 1][8:]
                              for slot, i in zip(range(moved, last + 1), order[moved - 1:last])]
    new += recs[last:]
    new = _dup_acks(new, recs[moved - 1], moved, last)
    ooo = write_records(tmp_path / "ooo.pcap", header, new)
    want = next(x for x in oracle.rpc_messages(ooo) if x["xid"] == m["xid"] and x["msg_type"])
    assert want["frame"] == last, "tshark: the moved segment (now at the old last frame) completes"
    convert_ok(tapdeck, tmp_path / "ds", ooo)
    (row,) = duckdb.sql(f"""select record, time_ns from read_parquet('{tmp_path}/ds/rpc/**/*.parquet')
                            where xid = {m["xid"]} and direction = 'reply'""").fetchall()
    assert row == (want["frame"], want["time_ns"])


def _tcp(rec: bytes) -> tuple[int, int, int, int, int] | None:
    """(offset of the TCP header in the record, sport, dport, seq, ack) of an Ethernet/IPv4
    TCP record (16-byte pcap record header first)."""
    eth = 16
    if rec[eth + 12:eth + 14] != b"\x08\x00" or rec[eth + 23] != 6:
        return None
    t = eth + 14 + (rec[eth + 14] & 0x0F) * 4
    sport, dport, seq, ack = struct.unpack("!HHII", rec[t:t + 12])
    return t, sport, dport, seq, ack


def _dup_acks(recs: list[bytes], seg: bytes, first: int, last: int) -> list[bytes]:
    """Records `first`..`last` (1-based) with the ACKs of the segment's receiver on its
    connection held at the segment's first byte."""
    _, sport, dport, seq, _ = _tcp(seg)
    out = list(recs)
    for i in range(first - 1, last):
        h = _tcp(out[i])
        if h and (h[1], h[2]) == (dport, sport) and (h[4] - seq) % 2**32 < 2**31:
            t = h[0]
            out[i] = out[i][:t + 8] + struct.pack("!I", seq) + out[i][t + 12:]
    return out


NFS_CORPUS = ["hoobr_nfs_printfh.pcap", "hoobr_nfs_xid_map_enter.pcap", "nfs-attr-oobr.pcap",
              "nfs-cannot-pad-32-bit.pcap", "nfs-seg-fault-1.pcapng",
              "nfs-write-verf-cookie.pcapng", "nfs_large_credentials_length.pcap",
              "unaligned-nfs-1.pcap"]


@pytest.mark.parametrize("name", NFS_CORPUS)
def test_corpus_nfs_cases_agree_with_tshark_srt(name, tapdeck, tmp_path):
    """The corpus's NFS files hold single messages or damaged ones (tshark's srt has no row
    for any of them): nfs_latency must then have no answered call either, and no traceback."""
    pcap = corpus_file(name)
    convert_ok(tapdeck, tmp_path / "ds", pcap)
    if not any((tmp_path / "ds" / "packets").rglob("*.parquet")):
        pytest.skip(f"{name}: converted to no packets")
    ours = {op: r for op, r in latency_rows(tmp_path / "ds", 3).items() if r["calls"] > 0}
    srt = tshark_srt(pcap)
    assert sorted(ours) == sorted(srt)
    for op, t in srt.items():
        assert ours[op]["calls"] == t["calls"]


def test_nfsv2_analyses_agree_with_tshark(tapdeck, tmp_path):
    """The NFSv2 capture of tests/captures (real UDP traffic, every v2 procedure but the
    obsolete ROOT and WRITECACHE): nfs_latency's v2 rows equal tshark's rpc,srt,100003,2;
    nfs_ops counts the calls tshark decodes per procedure, the bytes READ returned and WRITE
    sent, and the error statuses; files lists the files read and written; recency counts the
    reads."""
    pcap = tmp_path / "nfsv2.pcap"  # a copy: the oracle caches its answer beside the file
    shutil.copyfile(REPO / "tests" / "captures" / "nfsv2.pcap", pcap)
    ds = tmp_path / "ds"
    convert_ok(tapdeck, ds, pcap)
    srt = assert_matches_srt(pcap, ds, version=2)
    assert {"GETATTR", "LOOKUP", "READ", "WRITE", "READDIR", "STATFS"} <= set(srt)
    msgs = [m for m in messages(pcap) if m["program"] == 100003 and m["version"] == 2]
    calls = Counter(V2_PROCS[m["procedure"]] for m in msgs if m["msg_type"] == 0)
    ops = {r["operation"]: r for r in analyze("nfs_ops", ds) if r["nfs_version"] == 2}
    assert {op: r["calls"] for op, r in ops.items()} == dict(calls)
    replies = [m for m in msgs if m["msg_type"] == 1]
    read = sum(m["nfs"]["data_len"] or 0 for m in replies if m["procedure"] == 6)
    written = sum(m["nfs"]["data_len"] or 0 for m in msgs
                  if m["msg_type"] == 0 and m["procedure"] == 8)
    assert (ops["READ"]["bytes_read"], ops["WRITE"]["bytes_written"]) == (read, written) != (0, 0)
    errors = {(r["operation"], r["status"]): r["replies"] for r in analyze("nfs_ops", ds, "--part", "errors")
              if r["nfs_version"] == 2}
    want = Counter((V2_PROCS[m["procedure"]], m["nfs"]["status"]) for m in replies
                   if m["nfs"] and m["nfs"]["status"])
    assert errors == dict(want) and errors
    rw_fh = {m["nfs"]["fh"][0] for m in msgs
             if m["msg_type"] == 0 and m["procedure"] in (6, 8)}
    files = {r["fh"]: r for r in analyze("files", ds)}
    assert rw_fh <= set(files)
    assert all(files[fh]["reads"] + files[fh]["writes"] > 0 for fh in rw_fh)
    (smallest, *_) = analyze("recency", ds)
    assert smallest["reads"] == calls["READ"] > 0


V2_PROCS = ["NULL", "GETATTR", "SETATTR", "ROOT", "LOOKUP", "READLINK", "READ", "WRITECACHE",
            "WRITE", "CREATE", "REMOVE", "RENAME", "LINK", "SYMLINK", "MKDIR", "RMDIR",
            "READDIR", "STATFS"]


# ---- rpc_matching ----------------------------------------------------------------------

def totals(ds, transport=None) -> tuple[int, int, int, int]:
    """(calls, replies, unmatched calls, unmatched replies) over rpc_matching's rows."""
    rows = [r for r in analyze("rpc_matching", ds) if transport in (None, r["transport"])]
    return tuple(sum(r[k] for r in rows)
                 for k in ("calls", "replies", "unmatched_calls", "unmatched_replies"))


def pairs(ds) -> set[tuple]:
    """(transport, client, server, xid) of every call paired with a reply (sharing its
    transaction id), asserting that the reply is of the same conversation and xid."""
    rows = duckdb.sql(f"""
        with r as (select * from read_parquet('{ds}/rpc/**/*.parquet', hive_partitioning = true)
                   where not retransmit)
        select c.transport, c.client_addr, c.client_port, c.server_addr, c.server_port, c.xid,
               p.transport, p.client_addr, p.client_port, p.server_addr, p.server_port, p.xid
        from r c join r p on c.transaction_id = p.transaction_id
         and c.direction = 'call' and p.direction = 'reply'""").fetchall()
    wrong = [r for r in rows if r[:6] != r[6:]]
    assert not wrong, f"calls paired with another conversation's reply: {wrong[:5]}"
    keys = [r[:6] for r in rows]
    assert len(set(keys)) == len(keys), "a call paired twice"
    return set(keys)


@pytest.mark.nfs
@pytest.mark.parametrize("kind", ["v3", "v4", "mixed"])
def test_lossless_capture_has_nothing_unmatched(captures, kind):
    pcap, ds = captures[kind]
    msgs = messages(pcap)
    calls = sum(m["msg_type"] == 0 for m in msgs)
    replies = len(msgs) - calls
    assert not oracle.unmatched(msgs)
    assert totals(ds) == (calls, replies, 0, 0)
    per_minute = analyze("rpc_matching", ds, "--part", "per_minute")
    assert sum(r["unmatched_calls"] + r["unmatched_replies"] for r in per_minute) == 0
    assert sum(r["calls"] for r in per_minute) == calls


def expected_unmatched(msgs, dropped: set[int]) -> tuple[Counter, Counter]:
    """Per transport: unmatched calls (reply removed, call kept) and unmatched replies (call
    removed, reply kept). A message is removed with the packet that carries its RPC header
    (its first segment): the rest of a message can be lost and the message still be kept,
    truncated, with its xid."""
    def gone(m):
        return min(m["segments"] or [m["frame"]]) in dropped
    by_key = {conv_of(m) + (m["msg_type"],): m for m in msgs}
    calls, replies = Counter(), Counter()
    for m in msgs:
        partner = by_key.get(conv_of(m) + (1 - m["msg_type"],))
        if not gone(m) and partner is not None and gone(partner):
            (replies if m["msg_type"] else calls)[m["transport"]] += 1
    return calls, replies


@pytest.mark.nfs
@pytest.mark.parametrize("fraction,seed", [(0.03, 5), (0.10, 6)])
def test_rpc_matching_counts_the_rpcs_removed(captures, tapdeck, tmp_path, fraction, seed):
    pcap, ds = captures["mixed"]
    msgs = messages(pcap)
    lossy = tmp_path / "lossy.pcap"
    dropped = set(drop_random(pcap, lossy, fraction, seed))
    # and the first UDP call and the last UDP reply (of other transactions), so that UDP
    # loses a call and a reply for sure
    udp = sorted((m for m in msgs if m["transport"] == "udp"), key=lambda m: m["frame"])
    assert udp[0]["msg_type"] == 0 and udp[-1]["msg_type"] == 1
    assert udp[0]["xid"] != udp[-1]["xid"]
    dropped = (dropped - {m["frame"] for m in udp}) | {udp[0]["frame"], udp[-1]["frame"]}
    header, recs, _ = read_pcap_records(pcap)
    write_records(lossy, header, (r for i, r in enumerate(recs, 1) if i not in dropped))
    convert_ok(tapdeck, tmp_path / "ds", lossy)
    want_calls, want_replies = expected_unmatched(msgs, dropped)
    assert want_calls["udp"] == 1 and want_replies["udp"] == 1
    _, _, uc, ur = totals(tmp_path / "ds", "udp")
    assert (uc, ur) == (want_calls["udp"], want_replies["udp"])
    _, _, uc, ur = totals(tmp_path / "ds", "tcp")
    assert uc >= want_calls["tcp"] and ur >= want_replies["tcp"], (uc, ur, want_calls,
                                                                   want_replies)
    assert uc + ur > 0
    lost_pairs, whole = pairs(tmp_path / "ds"), pairs(ds)
    assert len(lost_pairs) > len(whole) // 2
    assert lost_pairs <= whole, f"wrong pairs: {sorted(lost_pairs - whole)[:5]}"


# A generated NFSv3-over-UDP trace: the rig's UDP traffic is a handful of NULL calls.

def rpc_call(xid, proc) -> bytes:
    return struct.pack("!IIIIIIIIII", xid, 0, 2, 100003, 3, proc, 0, 0, 0, 0)


def rpc_reply(xid) -> bytes:
    return struct.pack("!IIIIII", xid, 1, 0, 0, 0, 0)


def udp_rpc_trace(path, transactions=600, seed=1):
    """`transactions` NULL calls from 4 clients to one server, a reply 150-650 µs after each,
    a new call every 0.5 ms (so replies and later calls interleave)."""
    rng = random.Random(seed)
    t0, pkts, xids = 1_795_413_430_000_000_000, [], rng.sample(range(1, 1 << 31), transactions)
    for i, xid in enumerate(xids):
        client, port = i % 4, 700 + i % 4
        t = t0 + i * 500_000
        pkts.append(Pkt(1, t, 0, frame(rng, "udp", client, 256, port, 2049, rpc_call(xid, 0))))
        pkts.append(Pkt(1, t + rng.randrange(150_000, 650_000), 0,
                        frame(rng, "udp", 256, client, 2049, port, rpc_reply(xid))))
    pkts.sort(key=lambda p: p.ts_ns)
    pkts = [Pkt(p.linktype, p.ts_ns, len(p.data), p.data) for p in pkts]
    return write_pcap(path, pkts)


def test_udp_unmatched_equal_the_rpcs_removed(tapdeck, tmp_path):
    whole = udp_rpc_trace(tmp_path / "udp.pcap")
    convert_ok(tapdeck, tmp_path / "whole", whole)
    assert totals(tmp_path / "whole") == (600, 600, 0, 0)
    header, recs, _ = read_pcap_records(whole)
    for seed in (1, 2, 3):
        rng = random.Random(seed)
        dropped = set(rng.sample(range(len(recs)), 90))
        # Packets alternate call/reply only roughly: decode which each dropped packet is.
        kinds = {i: struct.unpack("!I", recs[i][16 + 14 + 20 + 8 + 4:][:4])[0] for i in dropped}
        xid_of = {i: struct.unpack("!I", recs[i][16 + 42:][:4])[0] for i in range(len(recs))}
        gone_calls = {xid_of[i] for i in dropped if kinds[i] == 0}
        gone_replies = {xid_of[i] for i in dropped if kinds[i] == 1}
        lossy = write_records(tmp_path / f"lossy{seed}.pcap", header,
                              (r for i, r in enumerate(recs) if i not in dropped))
        ds = tmp_path / f"lossy{seed}"
        convert_ok(tapdeck, ds, lossy)
        calls, replies, uc, ur = totals(ds)
        assert (uc, ur) == (len(gone_replies - gone_calls), len(gone_calls - gone_replies))
        assert (calls, replies) == (600 - len(gone_calls), 600 - len(gone_replies))
        assert pairs(ds) <= pairs(tmp_path / "whole")
        assert len(pairs(ds)) == 600 - len(gone_calls | gone_replies)
