"""IP fragment reassembly in `tapdeck convert`, on datagrams the kernel fragmented.

    netns A: client (rpcudp.py) 198.18.62.1, fd18:62::1 ─veth MTU 1500─ 198.18.62.2, fd18:62::2
                                                                         server (rpcudp.py), tcpdump :netns B

NFSv3 over UDP, IPv4 and IPv6: NULL calls (one frame each way), WRITE calls and READ replies of
8–32 KB (every one of them fragmented). The converted rpc rows are compared with what tshark
(which reassembles IP fragments by default) decodes from the same capture: the same messages in
the same frames (the frame whose fragment completes the datagram), the same procedures and
pairing; message lengths and data lengths against what the client logged it sent and received.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import netlab
import pytest
from conftest import QUICK, need, run, wait_for
from convtools import (
    convert_ok,
    direction,
    oracle,
    read_pcap_records,
    table,
    write_records,
)

HERE = Path(__file__).resolve().parent
A4, B4, A6, B6 = "198.18.62.1", "198.18.62.2", "fd18:62::1", "fd18:62::2"
PORT = 2049
CALLS = 30  # per address family: 10 NULL, 10 READ, 10 WRITE


class Pair(netlab.Link):
    """Namespaces A and B joined by the veth pair fraga/fragb of MTU `mtu` (offloads off:
    wire-sized frames in the capture), IPv4 and IPv6 addresses at each end; removed on
    close."""

    def __init__(self, mtu: int):
        super().__init__("tdf", "fraga", A4, "fragb", B4, mtu=mtu, ipv6=True)

    def build(self):
        super().build()
        self.address(self.a, "fraga", f"{A6}/64", "nodad")
        self.address(self.b, "fragb", f"{B6}/64", "nodad")


def record_run(base: Path, mtu: int) -> tuple[Path, list[dict]]:
    """(pcap, the client's log of messages) of one run over both address families, on a
    veth of the given MTU."""
    pcap, log = base / f"rpc-mtu{mtu}.pcap", base / f"sent-mtu{mtu}.jsonl"
    pair = Pair(mtu)
    procs = []
    try:
        dump_log = base / f"tcpdump-mtu{mtu}.log"
        with open(dump_log, "wb") as err:
            dump = pair.popen("b", "tcpdump", "-i", "fragb", "-s", "0", "-U", "--immediate-mode", "-n",
                              "-w", pcap,
                              "udp or ip[6:2] & 0x3fff != 0 or ip6[6] == 44",
                              stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip
        procs.append(dump)
        for addr in (B4, B6):
            procs.append(pair.popen("b", sys.executable, HERE / "rpcudp.py", "server", addr,
                                    PORT, 60, stdout=None, stderr=None))  # fmt: skip
        # Messages sent before tcpdump listens, or before a server is bound, would be missing
        # from the capture or unanswered: wait for both (a fixed second was once too short).
        wait_for(lambda: b"listening on" in dump_log.read_bytes() or dump.poll() is not None, 10,
                 "tcpdump to listen")
        assert dump.poll() is None, dump_log.read_text()
        bound = lambda: netlab.run_in(pair.ns["b"], "ss", "-Hlun", f"sport = :{PORT}").stdout  # noqa: E731
        wait_for(lambda: len(bound().splitlines()) >= 2, 10, "both RPC servers to be bound")
        for seed, addr in ((1, B4), (2, B6)):
            c = pair.popen("a", sys.executable, HERE / "rpcudp.py", "client", addr, PORT, CALLS,
                           seed, log, stdout=None, stderr=None)  # fmt: skip
            assert c.wait(timeout=60) == 0
        time.sleep(1.0)  # the last frames through tcpdump
        dump.send_signal(signal.SIGINT)
        dump.communicate(timeout=QUICK)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=QUICK)
        pair.close()
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    return pcap, sent


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """Datagrams the kernel fragmented (MTU 1500)."""
    need("tshark", "tcpdump", "ip")
    return record_run(tmp_path_factory.mktemp("fragments"), 1500)


@pytest.fixture(scope="module")
def converted(capture, tapdeck, tmp_path_factory):
    pcap, sent = capture
    ds = tmp_path_factory.mktemp("frag-ds") / "ds"
    rep = convert_ok(tapdeck, ds, pcap)
    return pcap, sent, ds, rep


def test_the_kernel_fragmented_what_was_sent(capture):
    pcap, sent = capture
    big = [m for m in sent if m["len"] > 1500]
    assert len(big) >= 2 * (CALLS // 3) * 2 * 0.9, "READ replies and WRITE calls went missing"
    r = run(["tshark", "-r", pcap, "-n", "-Y", "ip.flags.mf == 1 or ipv6.fraghdr.more == 1",
             "-T", "fields", "-e", "frame.number"])  # fmt: skip
    assert r.returncode == 0, r.describe()
    assert len(r.out.split()) >= len(big), "the capture holds no fragments"


def test_rpc_rows_match_tshark_frame_by_frame(converted):
    pcap, sent, ds, rep = converted
    rows = {(r["record"], r["xid"], r["direction"]): r for r in table(ds, "rpc")}
    msgs = [m for m in oracle.rpc_messages(pcap) if m["transport"] == "udp"]
    want = {(m["frame"], m["xid"], direction(m)): m for m in msgs}
    assert len(want) == len(sent), "tshark does not see every message the client logged"
    assert set(rows) == set(want)
    for k, m in want.items():
        r = rows[k]
        assert r["procedure"] == m["procedure"], k
        assert r["transport"] == "udp"
        assert not r["truncated"], k
        partner = m["reply_frame"] if m["msg_type"] == 0 else m["call_frame"]
        assert r["matched"] == (partner is not None), k
    by_xid = {(m["xid"], m["direction"]): m for m in sent}
    for (_, xid, d), r in rows.items():
        assert r["message_len"] == by_xid[(xid, d)]["len"], (xid, d)
    # tshark's NFS data lengths: WRITE calls and READ replies decoded whole.
    for m in msgs:
        s = by_xid[(m["xid"], direction(m))]
        if s["data_len"] is not None:
            assert m["nfs"]["data_len"] == s["data_len"]
    counts = rep["counts"]
    big = sum(1 for m in sent if m["len"] > 1500)
    assert counts.get("ip.datagrams_reassembled") == big, counts
    assert not [k for k in counts if k.startswith("failed.ip_")], counts


def test_nfs_rw_rows_carry_the_whole_data_length(converted):
    _, sent, ds, _ = converted
    rw = table(ds, "nfs_rw")
    sizes = sorted(m["data_len"] for m in sent if m["data_len"] is not None)
    got = [r["bytes"] for r in rw if r["bytes"] is not None]
    assert got and set(got) <= set(sizes) and set(sizes) <= set(got), (got[:5], sizes[:5])


def test_without_reassembly_tshark_sees_data_in_other_frames(capture):
    """The capture really needs reassembly: with it off, tshark finds NFS data only in first
    fragments (cut short); with it on, only in the frames that complete the datagrams."""
    pcap, _ = capture

    def frames(*opts):
        r = run(["tshark", "-r", pcap, "-n", *opts, "-Y", "nfs.data", "-T", "fields", "-e",
                 "frame.number"])  # fmt: skip
        assert r.returncode == 0, r.describe()
        return set(r.out.split())

    off = frames("-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE")
    on = frames()
    assert on and off and not on & off


def test_datagrams_cut_by_a_file_boundary_convert_as_uncut(converted, tapdeck, tmp_path):
    """The kernel-fragmented trace cut into three files, each cut right after the first
    fragment of a datagram (one IPv4, one IPv6), so that its fragments lie in two files:
    converting the three files together (one capture: times follow on, and each file warms up
    over the end of the previous one) gives the uncut trace's rows, file_id and record aside,
    and the same reassembly counts."""
    pcap, _sent, ds_whole, rep_whole = converted
    first = ("(ip.flags.mf == 1 and ip.frag_offset == 0) or "
             "(ipv6.fraghdr.more == 1 and ipv6.fraghdr.offset == 0)")
    r = run(["tshark", "-r", pcap, "-n", "-Y", first, "-T", "fields", "-e", "frame.number",
             "-e", "ip.version"])  # fmt: skip
    assert r.returncode == 0, r.describe()
    firsts = [(int(f), v) for f, v in (line.split("\t") for line in r.out.splitlines())]
    v4 = [f for f, v in firsts if v == "4"]
    v6 = [f for f, v in firsts if v != "4"]
    assert v4 and v6, "the capture holds fragmented datagrams of both families"
    cuts = sorted([v4[len(v4) // 2], v6[len(v6) // 2]])  # frame numbers, from 1
    header, recs, _ = read_pcap_records(pcap)
    bounds = [0, *cuts, len(recs)]
    parts = [write_records(tmp_path / f"part{i}.pcap", header, recs[a:b])
             for i, (a, b) in enumerate(itertools.pairwise(bounds))]
    rep = convert_ok(tapdeck, tmp_path / "ds", *parts)

    def rows(ds, name):
        out = [{k: v for k, v in r.items() if k not in ("file_id", "record")}
               for r in table(ds, name)]
        return sorted(out, key=lambda r: sorted((k, str(v)) for k, v in r.items()))

    for name in ("rpc", "nfs_ops", "nfs_rw"):
        assert rows(tmp_path / "ds", name) == rows(ds_whole, name), name
    # Each of the two datagrams is reassembled once, in the file of its last fragment.
    for k in ("ip.datagrams_reassembled", "ip.fragments"):
        assert rep["counts"].get(k) == rep_whole["counts"].get(k), (k, rep["counts"])
    assert not [k for k in rep["counts"] if k.startswith("failed.ip_")], rep["counts"]


# ---- fragments made by a tool from real datagrams, the unfragmented capture as ground truth --

def refragment(src: Path, dst: Path) -> dict:
    """Cuts every datagram of `src` longer than 1400 bytes into fragments with scapy, each in
    one of several ways by its index: in order, reversed, every fragment twice, with an
    overlapping fragment (IPv4: the same bytes, kept first-wins; IPv6: the datagram is
    dropped, RFC 5722), and one datagram of each family without its last fragment. Returns
    {(xid, direction): why} of the messages that must be missing."""
    from scapy.all import IP, UDP, Ether, IPv6, IPv6ExtHdrFragment, Raw, rdpcap, wrpcap

    out, missing, n = [], {}, 0
    lost_last = set()
    for p in rdpcap(str(src)):
        v6 = IPv6 in p
        ip = p[IPv6] if v6 else p.getlayer(IP)
        if ip is None or UDP not in p or len(p) <= 1400:
            out.append(p)
            continue
        data = bytes(ip.payload)
        rpc = bytes(p[UDP].payload)
        xid, mtype = int.from_bytes(rpc[:4], "big"), int.from_bytes(rpc[4:8], "big")
        key = (xid, "reply" if mtype == 1 else "call")
        step = 1232 if v6 else 1480
        pieces = [(a, min(a + step, len(data))) for a in range(0, len(data), step)]

        def frag(a, b, more, ip=ip, n=n, data=data, v6=v6, p=p):
            if v6:
                f = IPv6(src=ip.src, dst=ip.dst, hlim=ip.hlim, nh=44) / IPv6ExtHdrFragment(
                    nh=17, id=0x10000 + n, offset=a // 8, m=int(more)) / Raw(data[a:b])
            else:
                f = IP(src=ip.src, dst=ip.dst, ttl=ip.ttl, id=n, proto=17, frag=a // 8,
                       flags="MF" if more else 0) / Raw(data[a:b])
            g = Ether(src=p[Ether].src, dst=p[Ether].dst) / f
            g.time = p.time
            return g

        frags = [frag(a, b, b < len(data)) for a, b in pieces]
        way = n % 4
        if way == 1:
            frags.reverse()
        elif way == 2:
            frags = [f for f in frags for _ in (0, 1)]
        elif way == 3:
            a = pieces[0][1] - 16  # 16 bytes back into the first fragment
            frags.insert(1, frag(a, a + 64, True))
            if v6:
                missing[key] = "overlap"
        fam = 6 if v6 else 4
        if way == 0 and fam not in lost_last:
            lost_last.add(fam)
            frags = frags[:-1]
            missing[key] = "no last fragment"
        out.extend(frags)
        n += 1
    wrpcap(str(dst), out)
    return missing


@pytest.fixture(scope="module")
def refragmented(tapdeck, tmp_path_factory):
    need("tshark", "tcpdump", "ip")
    pytest.importorskip("scapy")
    base = tmp_path_factory.mktemp("refrag")
    whole, sent = record_run(base, 65535)
    cut = base / "cut.pcap"
    missing = refragment(whole, cut)
    ds_whole, ds_cut = base / "ds-whole", base / "ds-cut"
    rep_whole = convert_ok(tapdeck, ds_whole, whole)
    rep_cut = convert_ok(tapdeck, ds_cut, cut)
    return whole, cut, sent, missing, (ds_whole, rep_whole), (ds_cut, rep_cut)


def test_refragmented_datagrams_decode_like_the_originals(refragmented):
    _, _, sent, missing, (ds_whole, rep_whole), (ds_cut, rep_cut) = refragmented
    assert rep_whole["counts"].get("ip.fragments", 0) == 0, "the MTU 65535 run fragmented"
    fields = ("procedure", "program", "version", "message_len", "payload_len", "truncated",
              "transport", "client_port", "server_port")
    a = {(r["xid"], r["direction"]): r for r in table(ds_whole, "rpc")}
    b = {(r["xid"], r["direction"]): r for r in table(ds_cut, "rpc")}
    assert len(a) == len(sent)
    assert set(b) == set(a) - set(missing)
    for k, r in b.items():
        other = (k[0], "reply" if k[1] == "call" else "call")
        # A reply whose call is missing has no procedure (it comes from the call).
        same = fields if other not in missing else ("message_len", "payload_len", "truncated")
        assert {f: r[f] for f in same} == {f: a[k][f] for f in same}, k
        assert r["matched"] == (a[k]["matched"] and other not in missing), k
    c = rep_cut["counts"]
    overlaps = sum(1 for w in missing.values() if w == "overlap")
    assert c.get("failed.ip_datagram_overlap_dropped", 0) == overlaps, c
    assert c.get("ip.datagrams_overlapped", 0) > overlaps, "no IPv4 overlap was resolved"
    assert c.get("ip.fragments_duplicate", 0) > 0
    assert c.get("failed.ip_fragments_held_at_end", 0) > 0  # the two without their last
    assert c.get("ip.datagrams_reassembled") == sum(
        1 for m in sent if m["len"] > 1400) - len(missing), c


def test_refragmented_rows_match_tshark(refragmented):
    _, cut, _, missing, _, (ds_cut, _) = refragmented
    rows = {(r["record"], r["xid"], r["direction"]) for r in table(ds_cut, "rpc")}
    msgs = [m for m in oracle.rpc_messages(cut) if m["transport"] == "udp"]
    want = {(m["frame"], m["xid"], direction(m)) for m in msgs}
    # tshark keeps IPv4's last-arriving bytes on overlap and reassembles overlapping IPv6
    # fragments too (not RFC 5722): those datagrams are the only difference allowed.
    extra = {k for k in want - rows if (k[1], k[2]) in missing}
    assert rows == want - extra
