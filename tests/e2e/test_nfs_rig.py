"""The NFS rig (tests/nfs) proves itself: real nfs-ganesha traffic, captured on the veth, holds
what the clients did, as tshark decodes it. Needs root; marked `nfs` (`pytest -m nfs`), and the
tests must not run in parallel with each other (one rig per machine at a time)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nfs import oracle  # noqa: E402
from nfs import rig as nfsrig
from nfs.rig import NfsRig  # noqa: E402
from nfs.workloads import MANY_FILES, V3_COPY, V3_WRITES, V4_WRITES  # noqa: E402

pytestmark = pytest.mark.nfs

NFS3ERR_NOENT = NFS4ERR_NOENT = 2
NFS3ERR_EXIST = 17
MNT3ERR_ACCES = 13


def _need_rig():
    reason = nfsrig.unavailable_reason()
    if reason:
        pytest.skip(reason)


def _capture(tmp_path: Path, kind: str):
    _need_rig()
    pcap = tmp_path / f"{kind}.pcap"
    with NfsRig(tmp_path / "rig") as r:
        with r.capture(pcap):
            result = r.workload(kind)
    return pcap, result, oracle.rpc_messages(pcap)


def _common_checks(msgs):
    assert msgs, "tshark found no RPC message"
    lost = oracle.unmatched(msgs)
    assert not lost, f"{len(lost)} RPC messages without their partner, e.g. {lost[:3]}"
    for m in msgs:
        if m["msg_type"] == 1:
            assert (m["reply_stat"], m["accept_stat"]) == (0, 0), m
        else:
            assert m["auth_flavor"] in (0, 1), m  # rpcinfo: AUTH_NONE, libnfs: AUTH_SYS
            if m["auth_flavor"] == 1:
                assert (m["auth_uid"], m["auth_gid"], m["auth_machine"]) == (0, 0, "libnfs"), m
            if m["program"] == 100003 and m["procedure"]:
                assert m["auth_flavor"] == 1, m
            assert m["reply_frame"] is not None, m
    addrs = {(m["src"], m["dst"]) for m in msgs}
    assert addrs <= {(nfsrig.CLIENT_IP, nfsrig.SERVER_IP), (nfsrig.SERVER_IP, nfsrig.CLIENT_IP)}


def _replies_by_call(msgs):
    calls = {(m["frame"], m["xid"]): m for m in msgs if m["msg_type"] == 0}
    return [(calls[(m["call_frame"], m["xid"])], m) for m in msgs
            if m["msg_type"] == 1 and (m["call_frame"], m["xid"]) in calls]


def test_v3_workload(tmp_path):
    pcap, result, msgs = _capture(tmp_path, "v3")
    _common_checks(msgs)
    counts = oracle.op_counts(msgs)
    v3 = [m for m in msgs if m["program"] == 100003 and m["version"] == 3]
    pairs = [(c, r) for c, r in _replies_by_call(msgs) if c["program"] == 100003
             and c["version"] == 3]

    # WRITE: per file handle, the bytes written add up to each file's size, exactly.
    writes = [m for m in v3 if m["procedure"] == 7 and m["msg_type"] == 0]
    per_fh = Counter()
    for m in writes:
        n = m["nfs"]
        assert n["count"] == n["data_len"], m
        assert n["offset"] == per_fh[n["fh"][0]], "writes are sequential"
        per_fh[n["fh"][0]] += n["count"]
    want = sorted(len(d) for d in result.written[3].values() if d)
    assert sorted(per_fh.values()) == want
    assert {p: len(d) for p, d in result.written[3].items()} == dict(
        V3_WRITES, **{V3_COPY[1]: len(result.written[3][V3_COPY[1]])})
    assert max(m["nfs"]["count"] for m in writes) == 1 << 20, "libnfs writes in 1 MiB WRITEs"
    for c, r in pairs:
        if c["procedure"] == 7:
            assert r["nfs"]["status"] == 0 and r["nfs"]["count"] == c["nfs"]["count"]
            assert r["nfs"]["attrs"][-1]["size"] == c["nfs"]["offset"] + c["nfs"]["count"]

    # CREATE names the new files; writing over an existing one fails with NFS3ERR_EXIST.
    created = Counter((c["nfs"]["names"][0], r["nfs"]["status"]) for c, r in pairs
                      if c["procedure"] == 8)
    assert created == Counter({(Path(p).name, 0) for p in result.written[3]}
                              | {("three_k.bin", NFS3ERR_EXIST)})

    # READ: the data returned equals what the clients read back (every file, in full).
    read_bytes = sum(r["nfs"]["data_len"] or 0 for c, r in pairs if c["procedure"] == 6)
    assert read_bytes == sum(len(d) for v, _, d in result.read if v == 3)
    for c, r in pairs:
        if c["procedure"] == 6:
            assert r["nfs"]["count"] == (r["nfs"]["data_len"] or 0) <= c["nfs"]["count"]

    # LOOKUPs of missing files fail with NFS3ERR_NOENT. nfs-ls MOUNTs the directory itself,
    # and ganesha refuses to mount a missing one with MNT3ERR_ACCES.
    noent = {c["nfs"]["names"][0] for c, r in pairs
             if c["procedure"] == 3 and r["nfs"]["status"] == NFS3ERR_NOENT}
    assert noent == {"missing.bin", "none.txt"}
    refused = [(c["fields"]["mount.path"], r["fields"]["mount.status"])
               for c, r in _replies_by_call(msgs) if c["program"] == 100005
               and c["procedure"] == 1 and r["fields"].get("mount.status") != ["0"]]
    assert refused == [(["/export/no/such/dir"], [str(MNT3ERR_ACCES)])]

    # READDIRPLUS lists all of many/ (in several replies: more than one fits).
    entries = [e for c, r in pairs if c["procedure"] == 17 for e in r["nfs"]["entries"]]
    many = {e for e in entries if e.startswith("file_with_a_longish_name_")}
    assert len(many) == MANY_FILES
    assert counts["NFSv3 READDIRPLUS"] >= 4

    # The UDP NULL calls and the MOUNT/portmap traffic are there too.
    assert any(m["transport"] == "udp" and m["program"] == 100003 for m in msgs)
    assert counts["MOUNTv3 MNT"] >= 10 and counts["portmapv2 GETPORT"] >= 10
    assert counts["portmapv2 DUMP"] == 1


def test_v4_workload(tmp_path):
    pcap, result, msgs = _capture(tmp_path, "v4")
    _common_checks(msgs)
    counts = oracle.op_counts(msgs)
    assert not any(m["program"] == 100003 and m["version"] == 3 and m["procedure"]
                   for m in msgs), "a v4 workload sends no NFSv3 operation"
    for name in ("PUTFH", "PUTROOTFH", "LOOKUP", "OPEN", "OPEN_CONFIRM", "READ", "WRITE",
                 "CLOSE", "GETATTR", "GETFH", "READDIR", "SETCLIENTID"):
        assert counts[f"NFSv4 {name}"] > 0, name
    pairs = [(c, r) for c, r in _replies_by_call(msgs) if c["program"] == 100003
             and c["version"] == 4 and c["procedure"] == 1]
    for c, r in pairs:
        n = r["nfs"]
        assert n["ops"] and n["status"] == n["ops"][-1]["status"]
        assert [o["opcode"] for o in n["ops"]] == [o["opcode"] for o in c["nfs"]["ops"]][
            :len(n["ops"])], "a reply answers the call's ops in order, up to the first error"
        assert all(o["status"] == 0 for o in n["ops"][:-1])

    # WRITE ops carry exactly the small files' bytes.
    write_ops = [o for c, _ in pairs for o in c["nfs"]["ops"] if o["name"] == "WRITE"]
    assert sorted(o["count"] for o in write_ops) == sorted(s for s in V4_WRITES.values() if s)
    assert all(o["count"] == o["data_len"] and o["offset"] == 0 for o in write_ops)
    assert {p: len(d) for p, d in result.written[4].items()} == V4_WRITES

    # READ ops return what the clients read back.
    read_ops = [o for _, r in pairs for o in r["nfs"]["ops"] if o["name"] == "READ"]
    assert sum(o["data_len"] or 0 for o in read_ops) == sum(
        len(d) for v, _, d in result.read if v == 4)

    # Missing files: LOOKUP (or OPEN) fails with NFS4ERR_NOENT and ends the COMPOUND.
    failed = [(c, r) for c, r in pairs if r["nfs"]["status"] == NFS4ERR_NOENT]
    last = {r["nfs"]["ops"][-1]["name"] for _, r in failed}
    assert len(failed) >= 3 and last <= {"LOOKUP", "OPEN"}, last
    names = {c["nfs"]["ops"][len(r["nfs"]["ops"]) - 1]["names"][0] for c, r in failed}
    assert {"missing.bin", "none.txt", "no"} <= names

    # READDIR of many/ names every file.
    entries = {e for _, r in pairs for o in r["nfs"]["ops"] if o["name"] == "READDIR"
               for e in o.get("entries", [])}
    assert sum(e.startswith("file_with_a_longish_name_") for e in entries) == MANY_FILES


def test_rig_cleans_up_and_starts_again(tmp_path):
    """A crashed run's namespace (with a process in it) is removed at start; after exit no
    namespace or daemon of the rig is left; a second rig right after the first works."""
    _need_rig()
    subprocess.run(["ip", "netns", "add", nfsrig.SERVER_NS], check=True)
    stray = subprocess.Popen(["ip", "netns", "exec", nfsrig.SERVER_NS, "sleep", "300"])
    try:
        # Until `ip netns exec` has entered the namespace, nothing can find the process there
        # (a rig started before that would miss it, and the test would fail for no fault).
        deadline = time.monotonic() + 10
        while str(stray.pid) not in subprocess.run(
                ["ip", "netns", "pids", nfsrig.SERVER_NS], capture_output=True,
                text=True).stdout.split():
            assert time.monotonic() < deadline, "the stray process never entered the namespace"
            time.sleep(0.02)
        for i in range(2):
            with NfsRig(tmp_path / f"rig{i}") as r:
                assert _wait_exit(stray), "the stray process of a 'crashed run' was not killed"
                daemons = [r._pid("ganesha.pid"), r._pid("rpcbind.pid")]
                assert all(daemons)
                assert r.run("nfs-ls", r.url(version=4)).stdout.strip() == b""  # empty export
                assert r.run("nfs-ls", r.url(version=3)).stdout.strip() == b""
            left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
            assert "tdnfs" not in left
            assert not any(Path(f"/proc/{p}").exists() and not nfsrig._zombie(p)
                           for p in daemons)
    finally:
        if stray.poll() is None:
            stray.kill()
        stray.wait(timeout=10)


def _wait_exit(proc, timeout=10):
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.poll() is not None


@pytest.mark.skipif(not os.environ.get("TAPDECK_BIN"), reason="set TAPDECK_BIN to compare "
                    "a tapdeck recording of the rig with tcpdump's")
def test_tapdeck_records_what_tcpdump_records(tmp_path):
    """tapdeck record and tcpdump on the same veth: tshark sees the same RPC messages."""
    _need_rig()
    a, b = tmp_path / "tcpdump.pcap", tmp_path / "tapdeck.pcapng"
    with NfsRig(tmp_path / "rig") as r:
        with r.capture(a), r.capture(b, tool="tapdeck"):
            r.workload("v4")
    def key(m):
        return m["xid"], m["msg_type"], m["program"], m["procedure"], tuple(oracle.op_names(m))

    ma, mb = oracle.rpc_messages(a), oracle.rpc_messages(b)
    assert ma and sorted(map(key, ma)) == sorted(map(key, mb))


# ---- the oracle on a hand-made capture: no root needed -----------------------------------

def _rpc_null_call(xid: int) -> bytes:
    body = struct.pack("!IIIIII", xid, 0, 2, 100003, 3, 0) + struct.pack("!IIII", 0, 0, 0, 0)
    return struct.pack("!I", 0x80000000 | len(body)) + body


def _rpc_null_reply(xid: int) -> bytes:
    body = struct.pack("!IIIIII", xid, 1, 0, 0, 0, 0)
    return struct.pack("!I", 0x80000000 | len(body)) + body


def _tcp_frame(src, dst, sport, dport, seq, ack, payload: bytes) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, 0x18, 65535, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0,
                     bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))))
    s = sum(struct.unpack("!10H", ip))
    s = (s & 0xFFFF) + (s >> 16)
    ip = ip[:10] + struct.pack("!H", ~s & 0xFFFF) + ip[12:]
    return bytes.fromhex("020000000002020000000001") + b"\x08\x00" + ip + tcp


def test_oracle_several_rpcs_in_one_frame(tmp_path):
    """Two NFSv3 NULL calls in one TCP segment and both replies in one: four messages, with
    index 0 and 1 inside each frame, every call matched to its reply. The client port is 564,
    which tshark alone would give to 9P (libnfs picks such reserved ports)."""
    c, s = nfsrig.CLIENT_IP, nfsrig.SERVER_IP
    calls = _rpc_null_call(0x1001) + _rpc_null_call(0x1002)
    replies = _rpc_null_reply(0x1001) + _rpc_null_reply(0x1002)
    frames = [_tcp_frame(c, s, 564, 2049, 1000, 5000, calls),
              _tcp_frame(s, c, 2049, 564, 5000, 1000 + len(calls), replies)]
    pcap = tmp_path / "two.pcap"
    with open(pcap, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", 1_795_000_000, i * 1000, len(fr), len(fr)) + fr)
    msgs = oracle.rpc_messages(pcap)
    got = [(m["frame"], m["index"], m["xid"], m["msg_type"], m["program"], m["procedure"])
           for m in msgs]
    assert got == [(1, 0, 0x1001, 0, 100003, 0), (1, 1, 0x1002, 0, 100003, 0),
                   (2, 0, 0x1001, 1, 100003, 0), (2, 1, 0x1002, 1, 100003, 0)]
    assert [m["reply_frame"] for m in msgs[:2]] == [2, 2]
    assert [m["call_frame"] for m in msgs[2:]] == [1, 1]
    assert [m["time_ns"] for m in msgs] == [1_795_000_000 * 10**9] * 2 + [
        1_795_000_000 * 10**9 + 1_000_000] * 2
    assert oracle.op_counts(msgs) == Counter({"NFSv3 NULL": 2})
    assert not oracle.unmatched(msgs)
