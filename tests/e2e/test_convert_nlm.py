"""`tapdeck convert` on real NLM, NSM and NFS_ACL captures (tests/captures/nlm_v4.pcap: NLM v4
and NSM from nfs-ganesha and rpc.statd; nfsacl_v3.pcap: a Linux client's NFS_ACL v3 GETACL;
see the README there), checked against tshark on the same files: every RPC message's row
(xid, direction, program, procedure, and the procedure's name as tshark's own value strings
spell it), and for NLM every `nlm_ops` row's cookie, caller, handle, owner, svid, range,
flags and status (a reply's lock is its call's, as tshark shows it in the call's frame).
"""

from __future__ import annotations

import subprocess

import pytest
from conftest import REPO
from convtools import convert_ok, table

CAPTURES = REPO / "tests" / "captures"
NLM_PCAP = CAPTURES / "nlm_v4.pcap"
ACL_PCAP = CAPTURES / "nfsacl_v3.pcap"
NLM, NSM, NFS_ACL = 100021, 100024, 100227
SEP = "\x1f"


def tshark_fields(pcap, fields: list[str]) -> dict[int, dict[str, list[str]]]:
    """tshark -T fields: every occurrence of each field, per frame number."""
    cmd = ["tshark", "-n", "-r", str(pcap), "-T", "fields", "-E", "occurrence=a",
           "-E", f"aggregator={SEP}", "-e", "frame.number"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    frames = {}
    for line in out.splitlines():
        cols = line.split("\t")
        frames[int(cols[0])] = {f: v.split(SEP) for f, v in zip(fields, cols[1:]) if v}
    return frames


def tshark_names() -> dict[tuple[str, int], str]:
    """tshark's value strings of the RPC programs' fields: (field, number) -> name (its
    spelling of procedures and statuses, straight from the dissectors)."""
    out = subprocess.run(["tshark", "-G", "values"], capture_output=True, text=True,
                         check=True).stdout
    protocols = ("nlm", "stat", "nfsacl", "nfs", "mount", "portmap")
    names = {}
    for line in out.splitlines():
        cols = line.split("\t")
        if cols[0] != "V" or len(cols) != 4 or cols[1].split(".")[0] not in protocols:
            continue
        n = cols[2]
        names[(cols[1], int(n, 16) if n.startswith("0x") else int(n))] = cols[3]
    return names


PROC_FIELD = {100000: "portmap.procedure_v{}", 100003: "nfs.procedure_v{}",
              100005: "mount.procedure_v{}", NLM: "nlm.procedure_v{}",
              NSM: "stat.procedure_v{}", NFS_ACL: "nfsacl.procedure_v{}"}


def rpc_messages(pcap) -> dict[tuple[int, int, str], dict]:
    """Every RPC message tshark finds: (frame, xid, direction) -> program, version, procedure.
    Frames holding several records list their fields in order; the version is the first
    `rpc.programversion` of a message (NFS repeats it inside its own tree)."""
    fs = tshark_fields(pcap, ["rpc.xid", "rpc.msgtyp", "rpc.program", "rpc.procedure",
                              "rpc.programversion"])
    out = {}
    for frame, f in fs.items():
        xids = f.get("rpc.xid", [])
        if not xids:
            continue
        types, progs, procs = f["rpc.msgtyp"], f["rpc.program"], f["rpc.procedure"]
        assert len(types) == len(xids) == len(progs) == len(procs), (frame, f)
        single = len(xids) == 1
        for i, xid in enumerate(xids):
            d = "reply" if types[i] == "1" else "call"
            out[(frame, int(xid, 16), d)] = {
                "program": int(progs[i]), "procedure": int(procs[i]),
                "version": int(f["rpc.programversion"][0]) if single else None}
    return out


@pytest.fixture(scope="module")
def nlm_ds(tapdeck, tmp_path_factory):
    base = tmp_path_factory.mktemp("convert-nlm")
    rep = convert_ok(tapdeck, base / "ds", NLM_PCAP)
    return base / "ds", rep


@pytest.fixture(scope="module")
def acl_ds(tapdeck, tmp_path_factory):
    base = tmp_path_factory.mktemp("convert-nfsacl")
    rep = convert_ok(tapdeck, base / "ds", ACL_PCAP)
    return base / "ds", rep


@pytest.mark.parametrize("which", ["nlm", "acl"])
def test_rpc_rows_equal_tshark(which, nlm_ds, acl_ds):
    """One rpc row per message tshark finds, all matched, with tshark's program, version,
    procedure and procedure name."""
    pcap, (ds, rep) = (NLM_PCAP, nlm_ds) if which == "nlm" else (ACL_PCAP, acl_ds)
    msgs = rpc_messages(pcap)
    names = tshark_names()
    rows = {(r["record"], r["xid"], r["direction"]): r for r in table(ds, "rpc")}
    assert set(rows) == set(msgs)
    programs = set()
    for k, m in msgs.items():
        r = rows[k]
        assert (r["program"], r["procedure"]) == (m["program"], m["procedure"]), k
        if m["version"] is not None:
            assert r["version"] == m["version"], k
        assert r["matched"], k
        field = PROC_FIELD[m["program"]].format(r["version"])
        assert r["procedure_name"] == names[(field, m["procedure"])], (k, field)
        programs.add(r["program_name"])
    if which == "nlm":
        assert programs == {"PORTMAP", "NFS", "MOUNT", "NLM", "NSM"}
        assert rep["counts"]["rows.nlm_ops"] == sum(
            1 for m in msgs.values() if m["program"] == NLM)
    else:
        assert "NFS_ACL" in programs
        acl = sorted(r["procedure_name"] for r in rows.values() if r["program"] == NFS_ACL)
        assert acl == ["GETACL", "GETACL", "NULL", "NULL"]
        assert "not decoded" not in str(rep.get("counts", {}))


NLM_FIELDS = ["rpc.xid", "rpc.msgtyp", "rpc.reqframe", "rpc.repframe", "nlm.procedure_v4", "nlm.cookie",
              "nlm.lock.caller_name", "nfs.fhandle", "nlm.lock.owner", "nlm.lock.svid",
              "nlm.exclusive", "nlm.lock.l_offset64", "nlm.lock.l_len64", "nlm.block",
              "nlm.reclaim", "nlm.state", "nlm.stat", "nlm.test_stat.stat"]


def test_nlm_ops_equal_tshark(nlm_ds):
    """nlm_ops, one row per NLM message: the call's lock (cookie, caller, fh, owner, svid,
    exclusive, 64-bit offset and length, block, reclaim, state) in calls and repeated in their
    replies; the reply's cookie and status, named as tshark names it; the holder a denied TEST
    names; call and reply share the rpc row's transaction id."""
    ds, _rep = nlm_ds
    fs = tshark_fields(NLM_PCAP, NLM_FIELDS)
    names = tshark_names()
    rpc = {(r["record"], r["direction"]): r for r in table(ds, "rpc")}
    rows = {(r["record"], r["direction"]): r for r in table(ds, "nlm_ops")}
    one = lambda f, k, conv=str: conv(f[k][0]) if k in f else None
    flag = lambda f, k: None if k not in f else f[k][0] == "1"
    want = {}
    for frame, f in fs.items():
        if "nlm.procedure_v4" not in f:
            continue
        reply = f["rpc.msgtyp"][0] == "1"
        proc = int(f["nlm.procedure_v4"][0])
        # tshark 4.0 files a reply's "reply to a request in frame" as rpc.repframe.
        link = f.get("rpc.reqframe") or f.get("rpc.repframe")
        call = fs[int(link[0])] if reply else f
        status = one(f, "nlm.stat", int)
        if status is None:
            status = one(f, "nlm.test_stat.stat", int)
        holder = reply and status == 1 and proc == 1
        want[(frame, "reply" if reply else "call")] = {
            "nlm_version": 4, "procedure": proc,
            "operation": names[("nlm.procedure_v4", proc)],
            "cookie": one(f, "nlm.cookie"),
            "caller_name": one(call, "nlm.lock.caller_name"),
            "fh": one(call, "nfs.fhandle"),
            "oh": one(call, "nlm.lock.owner"),
            "svid": one(call, "nlm.lock.svid", int),
            "exclusive": flag(call, "nlm.exclusive"),
            "offset": one(call, "nlm.lock.l_offset64", int),
            "length": one(call, "nlm.lock.l_len64", int),
            "block": flag(call, "nlm.block"),
            "reclaim": flag(call, "nlm.reclaim"),
            "state": one(call, "nlm.state", int),
            "status": status,
            "status_name": None if status is None else names[("nlm.stat", status)],
            "holder_exclusive": flag(f, "nlm.exclusive") if holder else None,
            "holder_svid": one(f, "nlm.lock.svid", int) if holder else None,
            "holder_oh": one(f, "nlm.lock.owner") if holder else None,
            "holder_offset": one(f, "nlm.lock.l_offset64", int) if holder else None,
            "holder_length": one(f, "nlm.lock.l_len64", int) if holder else None,
        }
    got = {k: {c: r[c] for c in next(iter(want.values()))} for k, r in rows.items()}
    assert got == want
    for k, r in rows.items():
        assert r["transaction_id"] == rpc[k]["transaction_id"], k
    ops = {(w["operation"], w["status_name"]) for w in want.values()}
    assert {("TEST", "NLM_DENIED"), ("LOCK", "NLM_GRANTED"), ("LOCK", "NLM_DENIED"),
            ("CANCEL", "NLM_GRANTED"), ("UNLOCK", "NLM_GRANTED")} <= ops
    assert any(w["offset"] == 1 << 40 for w in want.values()), "a 64-bit offset"
    assert sum(w["holder_svid"] is not None for w in want.values()) == 1
