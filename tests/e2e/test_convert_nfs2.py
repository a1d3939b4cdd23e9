"""`tapdeck convert` on a real NFSv2 capture (tests/captures/nfsv2.pcap: NFSv2 and MOUNT v1
over UDP, every v2 procedure but the obsolete ROOT and WRITECACHE; see the README there),
checked message by message against tshark (tests/nfs/oracle.py) on the same file.

A dataset row and a tshark message are the same message when (record, xid, direction) equals
(frame, xid, msg_type), as in test_convert_nfs.py.
"""

from __future__ import annotations

import shutil

import pytest
from conftest import REPO
from convtools import convert_ok, direction, messages, table

PCAP = REPO / "tests" / "captures" / "nfsv2.pcap"
NFS, MOUNT = 100003, 100005
V2_PROCS = ["NULL", "GETATTR", "SETATTR", "ROOT", "LOOKUP", "READLINK", "READ", "WRITECACHE",
            "WRITE", "CREATE", "REMOVE", "RENAME", "LINK", "SYMLINK", "MKDIR", "RMDIR",
            "READDIR", "STATFS"]
READ, WRITE, LOOKUP, CREATE, MKDIR, RENAME, LINK, READDIR = 6, 8, 4, 9, 14, 11, 12, 16
MOUNT_PROCS = ["NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"]


@pytest.fixture(scope="module")
def conv(tapdeck, tmp_path_factory):
    """(dataset, report, tshark's messages, calls by (frame, xid)). The capture is copied
    first: the oracle caches tshark's answer beside the file it reads."""
    base = tmp_path_factory.mktemp("convert-nfs2")
    pcap = base / "nfsv2.pcap"
    shutil.copyfile(PCAP, pcap)
    rep = convert_ok(tapdeck, base / "ds", pcap)
    msgs = messages(pcap)
    calls = {(m["frame"], m["xid"]): m for m in msgs if m["msg_type"] == 0}
    return base / "ds", rep, msgs, calls


def key(m):
    return (m["frame"], m["xid"], direction(m))


def nfs2(msgs):
    return [m for m in msgs if m["program"] == NFS and m["version"] == 2]


def call_of(m, calls):
    return m if m["msg_type"] == 0 else calls[(m["call_frame"], m["xid"])]


def test_rpc_rows_name_every_v2_procedure(conv):
    ds, rep, msgs, _ = conv
    rpc = {(r["record"], r["xid"], r["direction"]): r for r in table(ds, "rpc")}
    assert len(rpc) == len(msgs) == 156
    for m in msgs:
        r = rpc[key(m)]
        assert (r["program"], r["version"], r["procedure"]) == (
            m["program"], m["version"], m["procedure"]), m["frame"]
        assert r["matched"], m["frame"]
        if m["program"] == NFS:
            assert r["procedure_name"] == V2_PROCS[m["procedure"]]
        if m["program"] == MOUNT:
            assert r["procedure_name"] == MOUNT_PROCS[m["procedure"]]
    assert rep["counts"]["rows.nfs_ops"] == len(nfs2(msgs))


def test_nfs_ops_equal_tshark(conv):
    """One nfs_ops row per NFSv2 message: version 2, the procedure's number and name, the
    status of replies, the handle the procedure acts on (the call's first handle; a reply's row
    repeats its call's)."""
    ds, _rep, msgs, calls = conv
    rpc = {(r["record"], r["xid"], r["direction"]): r for r in table(ds, "rpc")}
    ops = {(r["record"], r["direction"]): r for r in table(ds, "nfs_ops")}
    v2 = nfs2(msgs)
    assert len(ops) == len(v2)
    seen = set()
    for m in v2:
        r = ops[(m["frame"], direction(m))]
        assert r["transaction_id"] == rpc[key(m)]["transaction_id"]
        c = call_of(m, calls)
        want_fh = c["nfs"]["fh"][0] if c["nfs"]["fh"] else None
        got = (r["nfs_version"], r["minor_version"], r["op_index"], r["op_num"], r["operation"],
               r["status"], r["fh"])
        want = (2, None, 0, m["procedure"], V2_PROCS[m["procedure"]],
                m["nfs"]["status"] if m["msg_type"] == 1 else None, want_fh)
        assert got == want, (m["frame"], got, want)
        seen.add(r["operation"])
    assert seen == {"NULL", "GETATTR", "SETATTR", "LOOKUP", "READLINK", "READ", "WRITE",
                    "CREATE", "REMOVE", "RENAME", "LINK", "SYMLINK", "MKDIR", "RMDIR",
                    "READDIR", "STATFS"}


def test_reads_and_writes_equal_tshark(conv):
    """nfs_rw: calls' offsets and counts (a WRITE's count is its data's length), READ replies'
    data length, WRITE replies the bytes their call sent (v2 writes all or fails); v2 has no
    eof on READ and no stable/committed."""
    ds, _rep, msgs, calls = conv
    rw = {(r["record"], r["direction"]): r for r in table(ds, "nfs_rw")}
    want = {}
    for m in nfs2(msgs):
        if m["procedure"] not in (READ, WRITE):
            continue
        c = call_of(m, calls)
        op = V2_PROCS[m["procedure"]]
        count = c["nfs"]["count"] if op == "READ" else c["nfs"]["data_len"]
        if m["msg_type"] == 0:
            nbytes = None
        elif op == "READ":
            nbytes = m["nfs"]["data_len"]
        else:
            nbytes = count if m["nfs"]["status"] == 0 else None
        want[(m["frame"], direction(m))] = (op, c["nfs"]["fh"][0], c["nfs"]["offset"], count,
                                           nbytes, None, None)
    got = {k: (r["operation"], r["fh"], r["offset"], r["count"], r["bytes"], r["eof"],
               r["stable"]) for k, r in rw.items()}
    assert got == want
    assert {v[0] for v in want.values()} == {"READ", "WRITE"}


def test_attributes_equal_tshark(conv):
    """nfs_attrs: one row per fattr of a reply, every field tshark shows equal, times exact
    (seconds and microseconds as ns); the handle is the object's (LOOKUP/CREATE/MKDIR: the
    reply's, the others: the call's)."""
    ds, _rep, msgs, calls = conv
    got = {}
    for r in table(ds, "nfs_attrs"):
        got.setdefault(r["record"], []).append(
            (r["nfs_version"], r["operation"], r["fh"], r["ftype"], r["mode"], r["nlink"],
             r["uid"], r["gid"], r["size"], r["used"], r["fileid"], r["atime_ns"],
             r["mtime_ns"], r["ctime_ns"], r["owner"], r["owner_group"]))
    want = {}
    for m in nfs2(msgs):
        if m["msg_type"] != 1 or not m["nfs"]["attrs"]:
            continue
        c = call_of(m, calls)
        fh = (m["nfs"]["fh"] if m["procedure"] in (LOOKUP, CREATE, MKDIR) else c["nfs"]["fh"])[0]
        want[m["frame"]] = [
            (2, V2_PROCS[m["procedure"]], fh, a["type"], a["mode"], a["nlink"], a["uid"],
             a["gid"], a["size"], None, a["fileid"], a["atime"], a["mtime"], a["ctime"], None,
             None)
            for a in m["nfs"]["attrs"]]
    assert got == want
    assert len(want) > 40
    # microseconds are kept: some time is not a whole second
    assert any(row[11] % 1_000_000_000 for rows in got.values() for row in rows)


def test_names_equal_tshark(conv):
    """nfs_names: the calls' names under their directory (RENAME's target as to_dir_fh /
    to_name, LINK's source as fh), replies' names with the handle LOOKUP/CREATE/MKDIR return,
    READDIR entries with their fileid."""
    ds, _rep, msgs, calls = conv
    got = sorted((r["record"], r["direction"], r["operation"], r["dir_fh"], r["name"], r["fh"],
                  r["to_dir_fh"], r["to_name"]) for r in table(ds, "nfs_names"))
    want = []
    for m in nfs2(msgs):
        c = call_of(m, calls)
        op = V2_PROCS[m["procedure"]]
        fhs, names = c["nfs"]["fh"], c["nfs"]["names"]
        d = direction(m)
        if m["procedure"] == READDIR and m["msg_type"] == 1:
            want += [(m["frame"], d, op, fhs[0], e, None, None, None)
                     for e in m["nfs"]["entries"]]
            continue
        if not names:
            continue
        if m["procedure"] == RENAME:
            want.append((m["frame"], d, op, fhs[0], names[0], None, fhs[1], names[1]))
        elif m["procedure"] == LINK:
            want.append((m["frame"], d, op, fhs[1], names[0], fhs[0], None, None))
        else:
            fh = None
            if m["msg_type"] == 1 and m["procedure"] in (LOOKUP, CREATE, MKDIR) and m["nfs"]["fh"]:
                fh = m["nfs"]["fh"][0]
            want.append((m["frame"], d, op, fhs[0], names[0], fh, None, None))
    assert got == sorted(want)
    entries = [r for r in table(ds, "nfs_names") if r["operation"] == "READDIR"]
    assert entries and all(r["fileid"] is not None for r in entries)


def test_mount_v1_equals_tshark(conv):
    ds, _rep, msgs, _calls = conv
    got = sorted((r["record"], r["direction"], r["procedure_name"], r["dirpath"], r["status"],
                  r["fh"]) for r in table(ds, "mount"))
    want = []
    for m in msgs:
        if m["program"] != MOUNT:
            continue
        assert m["version"] == 1
        f = m["fields"]
        path = (f.get("mount.path") or [None])[0]
        status = (f.get("mount.status") or [None])[0]
        fh = (f.get("nfs.fhandle") or [None])[0]
        want.append((m["frame"], direction(m), MOUNT_PROCS[m["procedure"]], path,
                     None if status is None else int(status),
                     fh.replace(":", "") if fh else None))
    assert got == sorted(want)
    assert any(w[5] for w in want), "the MNT reply's 32-byte handle"
