"""`tapdeck convert` on real NFS traffic (the rig of tests/nfs: nfs-ganesha and libnfs clients),
checked message by message against tshark (tests/nfs/oracle.py) on the same capture.

Marked `nfs` (root; one rig at a time). One rig session captures the v3, v4 and mixed workloads
(convtools.nfs_captures); the captures and tshark's JSON are made once per pytest session.

Keys: a dataset row and a tshark message are the same message when (record, xid, direction)
equals (frame, xid, msg_type): the converter's record is the 1-based frame number, and an
RPC message belongs to the frame that completes it in both.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from convtools import (
    KINDS,
    conv_of,
    conv_of_row,
    convert_ok,
    direction,
    messages,
    nfs_captures,
    oracle,
    table,
)

pytestmark = pytest.mark.nfs

NFS, MOUNT = 100003, 100005
# v4 operations whose arguments name something (oracle names: pathname components).
V4_NAME_OPS = ("LOOKUP", "OPEN", "CREATE", "REMOVE", "RENAME", "LINK")
# v4 operations that change the current filehandle to one the op itself does not state.
V4_FH_CHANGERS = ("CREATE", "LOOKUP", "LOOKUPP", "OPEN", "OPENATTR", "PUTFH", "PUTPUBFH",
                  "PUTROOTFH", "RESTOREFH", "SECINFO")


@pytest.fixture(scope="module")
def caps(tmp_path_factory):
    return nfs_captures(tmp_path_factory)


@pytest.fixture(scope="module")
def converted(caps, tapdeck, tmp_path_factory):
    """kind -> (capture, dataset, report, tshark messages)."""
    base = tmp_path_factory.mktemp("convert-nfs")
    out = {}
    for kind in KINDS:
        ds = base / kind
        rep = convert_ok(tapdeck, ds, caps[kind])
        out[kind] = (caps[kind], ds, rep, messages(caps[kind]))
    return out


def by_key(rows):
    out = {}
    for r in rows:
        k = (r["record"], r["xid"], r["direction"])
        assert k not in out, f"two rpc rows for {k}"
        out[k] = r
    return out


def key(m):
    return (m["frame"], m["xid"], direction(m))


def call_of(m, calls):
    return m if m["msg_type"] == 0 else calls[(m["call_frame"], m["xid"])]


def calls_by_frame(msgs):
    return {(m["frame"], m["xid"]): m for m in msgs if m["msg_type"] == 0}


def diff_report(diffs: Counter, examples: dict, total: int, what: str) -> str:
    lines = [f"{sum(diffs.values())} differences in {total} {what}:"]
    for k, n in diffs.most_common(20):
        lines.append(f"  {k}: {n}, e.g. {examples[k]}")
    return "\n".join(lines)


class Diffs:
    def __init__(self):
        self.counts: Counter = Counter()
        self.examples: dict = {}
        self.compared = 0

    def add(self, k, example):
        self.counts[k] += 1
        self.examples.setdefault(k, example)

    def check(self, got, want, k, example):
        self.compared += 1
        if got != want:
            self.add(k, (example, "got", got, "tshark", want))

    def assert_none(self, what):
        assert self.compared > 0, f"nothing compared for {what}"
        assert not self.counts, diff_report(self.counts, self.examples, self.compared, what)


# ---- RPC ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_rpc_messages_equal_tshark(converted, kind):
    """The multiset of (xid, direction, program, version, procedure) is tshark's; each row
    sits at tshark's frame and time; transport, addresses, ports, auth and reply states,
    record-mark lengths agree; the report counts them."""
    _pcap, ds, rep, msgs = converted[kind]
    rpc = table(ds, "rpc")
    assert len(msgs) > 200
    ours = Counter((r["xid"], r["direction"], r["program"], r["version"], r["procedure"])
                   for r in rpc)
    theirs = Counter((m["xid"], direction(m), m["program"], m["version"], m["procedure"])
                     for m in msgs)
    assert not theirs - ours and not ours - theirs, (
        f"missing {list((theirs - ours).items())[:5]}, extra {list((ours - theirs).items())[:5]}")
    rows = by_key(rpc)
    assert set(rows) == {key(m) for m in msgs}, "records (frame numbers) differ from tshark's"
    d = Diffs()
    for m in msgs:
        r = rows[key(m)]
        call = m["msg_type"] == 0
        want = {"time_ns": m["time_ns"], "transport": m["transport"],
                "client_addr": m["src"] if call else m["dst"],
                "server_addr": m["dst"] if call else m["src"],
                "client_port": m["sport"] if call else m["dport"],
                "server_port": m["dport"] if call else m["sport"]}
        if m["fraglen"]:
            want["message_len"] = m["fraglen"]
        if call:
            want["auth_flavor"] = m["auth_flavor"]
            if m["auth_flavor"] == 1:
                want.update(uid=m["auth_uid"], gid=m["auth_gid"])
        else:
            want.update(reply_stat=m["reply_stat"], accept_stat=m["accept_stat"])
        for f, v in want.items():
            d.check(r[f], v, f, key(m))
        d.check(r["truncated"], False, "truncated", key(m))
        d.check(r["retransmit"], False, "retransmit", key(m))
    d.assert_none(f"rpc rows of {kind}")
    c = rep["counts"]
    assert c["rpc.calls"] == sum(m["msg_type"] == 0 for m in msgs)
    assert c["rpc.replies"] == sum(m["msg_type"] == 1 for m in msgs)
    assert c["rows.rpc"] == len(msgs) == len(rpc)
    assert c["packets"] == c["rows.packets"] == len(table(ds, "packets"))
    assert not [k for k in c if k.startswith("failed.")], c


@pytest.mark.parametrize("kind", KINDS)
def test_every_reply_pairs_with_its_call(converted, kind):
    """Lossless capture: 100 % pairing. Each reply has the transaction id of the call tshark
    links it to (rpc.repframe), on the same conversation and xid, after the call; ids of
    different transactions differ; nothing is unmatched in the table or the report."""
    _pcap, ds, rep, msgs = converted[kind]
    assert not oracle.unmatched(msgs), "tshark itself sees loss: the capture is not lossless"
    rows = by_key(table(ds, "rpc"))
    calls = calls_by_frame(msgs)
    tids = Counter()
    for m in msgs:
        r = rows[key(m)]
        assert r["matched"], f"unmatched {direction(m)} {key(m)}"
        if m["msg_type"] == 0:
            tids[r["transaction_id"]] += 1
            assert r["first_time_ns"] == r["time_ns"]
            continue
        c = rows[key(call_of(m, calls))]
        assert r["transaction_id"] == c["transaction_id"], (key(m), r, c)
        assert conv_of_row(r) == conv_of_row(c) == conv_of(m)
        assert (c["time_ns"], c["record"]) <= (r["time_ns"], r["record"])
        assert r["first_time_ns"] == c["time_ns"]
        assert (r["program"], r["version"], r["procedure"]) == (
            c["program"], c["version"], c["procedure"])
    assert set(tids.values()) == {1}, "two calls share a transaction id"
    c = rep["counts"]
    assert c.get("rpc.unmatched_calls", 0) == c.get("rpc.unmatched_replies", 0) == 0, c


def test_procedure_names_for_nfs_and_mount(converted):
    """program_name / procedure_name as tshark names them for NFSv3, NFSv4 and MOUNT."""
    _pcap, ds, _rep, msgs = converted["mixed"]
    rows = by_key(table(ds, "rpc"))
    d = Diffs()
    calls = calls_by_frame(msgs)
    for m in msgs:
        c = call_of(m, calls)
        r = rows[key(m)]
        if c["program"] == NFS and c["version"] == 3:
            want = ("NFS", oracle.NFS3_PROCS[c["procedure"]])
        elif c["program"] == NFS and c["version"] == 4:
            want = ("NFS", ["NULL", "COMPOUND"][c["procedure"]])
        elif c["program"] == MOUNT:
            want = ("MOUNT", oracle.MOUNT_PROCS[c["procedure"]])
        else:
            continue
        d.check((r["program_name"], r["procedure_name"]), want, "names", key(m))
    d.assert_none("NFS/MOUNT procedure names")


def test_procedure_names_for_portmap(converted):
    _pcap, ds, _rep, msgs = converted["v3"]
    rows = by_key(table(ds, "rpc"))
    calls = calls_by_frame(msgs)
    d = Diffs()
    for m in msgs:
        c = call_of(m, calls)
        if c["program"] == 100000:
            want = ("PORTMAP", oracle.PORTMAP_PROCS[c["version"]][c["procedure"]])
            r = rows[key(m)]
            d.check((r["program_name"], r["procedure_name"]), want,
                    (c["version"], c["procedure"]), key(m))
    d.assert_none("portmap procedure names")


# ---- NFS operations ----------------------------------------------------------------------

def ops_by_message(ds, t="nfs_ops"):
    out = defaultdict(list)
    for r in table(ds, t):
        out[(r["record"], r["direction"])].append(r)
    for v in out.values():
        v.sort(key=lambda r: r["op_index"])
    return out


def nfs_msgs(msgs):
    return [m for m in msgs if m["program"] == NFS and m["version"] in (3, 4)]


@pytest.mark.parametrize("kind", KINDS)
def test_nfs_ops_equal_tshark(converted, kind):
    """Per NFS message: the list of (op_index, operation, status) is tshark's (v3: one row,
    the procedure; v4: the COMPOUND's operations, a reply's up to the first failure; a v4
    NULL has none). File handles: v3 rows carry the call's first handle (the object or
    directory); v4 PUTFH/GETFH rows carry the handle tshark shows."""
    _pcap, ds, rep, msgs = converted[kind]
    ops = ops_by_message(ds)
    calls = calls_by_frame(msgs)
    d = Diffs()
    seen = set()
    for m in nfs_msgs(msgs):
        k = (m["frame"], direction(m))
        seen.add(k)
        got = ops.get(k, [])
        reply = m["msg_type"] == 1
        if m["version"] == 3:
            want = [(0, oracle.NFS3_PROCS[m["procedure"]], m["nfs"]["status"] if reply else None)]
        elif m["procedure"] == 0:
            want = []
        else:
            want = [(i, o["name"], o["status"]) for i, o in enumerate(m["nfs"]["ops"])]
        d.check([(r["op_index"], r["operation"], r["status"]) for r in got], want, "ops", k)
        for r in got:
            d.check((r["nfs_version"], r["transaction_id"] is not None), (m["version"], True),
                    "version", k)
            if m["version"] == 4:
                d.check(r["minor_version"], m["nfs"]["minorversion"], "minor", k)
        if m["version"] == 3 and got:
            c = call_of(m, calls)
            want_fh = c["nfs"]["fh"][0] if c["nfs"]["fh"] else None
            d.check(got[0]["fh"], want_fh, ("fh v3", oracle.NFS3_PROCS[m["procedure"]]), k)
        elif m["version"] == 4:
            for i, o in enumerate(m["nfs"]["ops"]):
                if o["name"] in ("PUTFH", "GETFH") and o["fh"]:
                    d.check(got[i]["fh"] if i < len(got) else None, o["fh"][0],
                            ("fh v4", o["name"], direction(m)), k)
    d.assert_none(f"NFS messages of {kind}")
    extra = set(ops) - seen
    assert not extra, f"nfs_ops rows for messages tshark has no NFS in: {sorted(extra)[:5]}"
    assert rep["counts"]["rows.nfs_ops"] == sum(len(v) for v in ops.values())


@pytest.mark.parametrize("kind", KINDS)
def test_reads_and_writes_equal_tshark(converted, kind):
    """nfs_rw: one row per READ/WRITE (call and reply), with tshark's handle, offset, count;
    replies: bytes returned or written, eof (READ), committed (WRITE); calls: stable."""
    _pcap, ds, _rep, msgs = converted[kind]
    rw = {(r["record"], r["direction"], r["op_index"]): r for r in table(ds, "nfs_rw")}
    calls = calls_by_frame(msgs)
    d = Diffs()
    want_keys = set()
    for m in nfs_msgs(msgs):
        c = call_of(m, calls)
        reply = m["msg_type"] == 1
        items = []
        if m["version"] == 3 and m["procedure"] in (6, 7):
            name, n, cn = oracle.NFS3_PROCS[m["procedure"]], m["nfs"], c["nfs"]
            w = {"fh": cn["fh"][0], "offset": cn["offset"], "count": cn["count"]}
            if reply:
                w.update(bytes=n["count"], eof=bool(n["eof"]) if name == "READ" else None,
                         stable=n["committed"] if name == "WRITE" else None)
            else:
                w.update(bytes=None, eof=None, stable=n["stable"] if name == "WRITE" else None)
            items.append((0, name, w))
        elif m["version"] == 4 and m["procedure"] == 1:
            cur = None  # the call's current filehandle as far as PUTFH tells it
            for i, co in enumerate(c["nfs"]["ops"]):
                if co["name"] == "PUTFH":
                    cur = co["fh"][0]
                elif co["name"] in V4_FH_CHANGERS:
                    cur = None
                if i >= len(m["nfs"]["ops"]) or co["name"] not in ("READ", "WRITE"):
                    continue
                o = m["nfs"]["ops"][i]
                w = {"offset": co["offset"], "count": co["count"]}
                if cur:
                    w["fh"] = cur
                if reply:
                    w.update(bytes=(o["data_len"] or 0) if o["name"] == "READ" else o["count"],
                             eof=bool(o["eof"]) if o["name"] == "READ" else None,
                             stable=o["stable"] if o["name"] == "WRITE" else None)
                else:
                    w.update(bytes=None, eof=None,
                             stable=o["stable"] if o["name"] == "WRITE" else None)
                items.append((i, o["name"], w))
        for i, name, w in items:
            k = (m["frame"], direction(m), i)
            want_keys.add(k)
            r = rw.get(k)
            if r is None:
                d.add(("missing", name, direction(m)), k)
                continue
            d.check((r["operation"], r["nfs_version"], r["transaction_id"] is not None),
                    (name, m["version"], True), "op", k)
            for f, v in w.items():
                d.check(r[f], v, (name, direction(m), f), k)
    d.assert_none(f"READ/WRITE operations of {kind}")
    assert set(rw) == want_keys, f"extra nfs_rw rows: {sorted(set(rw) - want_keys)[:5]}"
    if kind != "v4":
        assert any(r["bytes"] == 1 << 20 for r in rw.values()), "a 1 MiB READ or WRITE"


def expected_names(m, c, *, stop_at_failure=False):
    """Counter of (operation, name) tshark shows for a message: calls, the names of their
    operations; replies, READDIR(PLUS) entries plus the call's names (the reply resolves
    them). With stop_at_failure, a v4 reply resolves only the operations it answered."""
    reply = m["msg_type"] == 1
    want = Counter()
    if m["version"] == 3:
        p = oracle.NFS3_PROCS[m["procedure"]]
        want.update((p, nm) for nm in c["nfs"]["names"])
        if reply:
            want.update((p, e) for e in m["nfs"]["entries"])
        return want
    cops = c["nfs"]["ops"]
    if reply and stop_at_failure:
        cops = cops[:len(m["nfs"]["ops"])]
    want.update((o["name"], nm) for o in cops if o["name"] in V4_NAME_OPS for nm in o["names"])
    if reply:
        want.update((o["name"], e) for o in m["nfs"]["ops"] for e in o.get("entries", []))
    return want


def check_names(converted, kind, *, stop_at_failure):
    _pcap, ds, _rep, msgs = converted[kind]
    names = defaultdict(list)
    for r in table(ds, "nfs_names"):
        names[(r["record"], r["direction"])].append(r)
    calls = calls_by_frame(msgs)
    d = Diffs()
    total = 0
    for m in nfs_msgs(msgs):
        if m["procedure"] == 0:
            continue
        k = (m["frame"], direction(m))
        c = call_of(m, calls)
        got = names.get(k, [])
        want = expected_names(m, c, stop_at_failure=stop_at_failure)
        total += sum(want.values())
        g = Counter((r["operation"], r["name"]) for r in got)
        d.check(g, want, ("names", m["version"], direction(m)), k)
        if m["version"] == 3 and m["msg_type"] == 0 and c["nfs"]["names"]:
            for r in got:  # the directory is the call's first handle
                d.check(r["dir_fh"], c["nfs"]["fh"][0], ("dir_fh v3", r["operation"]), k)
        if m["version"] == 3 and m["msg_type"] == 1 and m["procedure"] == 3 \
                and m["nfs"]["status"] == 0:
            for r in got:  # LOOKUP's reply names the object's handle first
                d.check(r["fh"], m["nfs"]["fh"][0], "fh of a v3 LOOKUP result", k)
    d.assert_none(f"names of {kind}")
    return total


@pytest.mark.parametrize("kind", KINDS)
def test_names_equal_tshark(converted, kind):
    """nfs_names: LOOKUP/CREATE/OPEN/... names of calls, and of replies (resolved; a v4 reply
    only up to the operation that failed, as the server ran no more), and every READDIR(PLUS)
    entry, as tshark decodes them; v3 directory handles and LOOKUP results."""
    assert check_names(converted, kind, stop_at_failure=True) > 100


def test_mount_equals_tshark(converted):
    """mount: one row per MOUNT call and reply; procedure, dirpath (MNT calls), status and
    handle (MNT replies) as tshark shows them (including MNT3ERR_ACCES for a missing dir)."""
    _pcap, ds, _rep, msgs = converted["v3"]
    rows = {(r["record"], r["direction"]): r for r in table(ds, "mount")}
    calls = calls_by_frame(msgs)
    d = Diffs()
    mnt = [m for m in msgs if m["program"] == MOUNT]
    for m in mnt:
        k = (m["frame"], direction(m))
        r = rows.get(k)
        if r is None:
            d.add("missing", k)
            continue
        f, c = m["fields"], call_of(m, calls)
        w = {"procedure_name": oracle.MOUNT_PROCS[c["procedure"]]}
        if m["msg_type"] == 0:
            w.update(dirpath=f.get("mount.path", [None])[0], status=None, fh=None)
        else:
            st, fh = f.get("mount.status"), f.get("nfs.fhandle")
            w.update(status=int(st[0]) if st else None,
                     fh=fh[0].replace(":", "") if fh else None)
        for fld, v in w.items():
            d.check(r[fld], v, (fld, direction(m), w["procedure_name"]), k)
    d.assert_none("MOUNT messages")
    assert len(rows) == len(mnt)
    assert any(r["status"] == 13 for r in rows.values()), "MNT3ERR_ACCES"


@pytest.mark.parametrize("kind", ["v3", "v4"])
def test_attributes_equal_tshark(converted, kind):
    """nfs_attrs: every fattr3 in a v3 reply (post-op, wcc-after, READDIRPLUS entries) and
    every v4 GETATTR result: type, mode, nlink, uid, gid (v4: owner strings), size, used,
    fileid, times; v3 rows carry the object's handle."""
    _pcap, ds, _rep, msgs = converted[kind]
    attrs = defaultdict(list)
    for r in table(ds, "nfs_attrs"):
        attrs[r["record"]].append(r)
    calls = calls_by_frame(msgs)
    d = Diffs()
    for m in nfs_msgs(msgs):
        if m["msg_type"] != 1:
            d.check(attrs.get(m["frame"], []), [], "attributes in a call", m["frame"])
            continue
        got = attrs.get(m["frame"], [])
        if m["version"] == 3:
            want = Counter((a["type"], a["mode"], a["nlink"], a["uid"], a["gid"], a["size"],
                            a["used"], a["fileid"], a["atime"], a["mtime"], a["ctime"])
                           for a in m["nfs"]["attrs"])
            g = Counter((r["ftype"], r["mode"], r["nlink"], r["uid"], r["gid"], r["size"],
                         r["used"], r["fileid"], r["atime_ns"], r["mtime_ns"], r["ctime_ns"])
                        for r in got)
            d.check(g, want, ("v3", oracle.NFS3_PROCS[m["procedure"]]), m["frame"])
            proc = m["procedure"]
            c = call_of(m, calls)
            if proc in (1, 6, 7, 2, 4, 21) and m["nfs"]["status"] == 0:  # object = call's fh
                d.check({r["fh"] for r in got}, {c["nfs"]["fh"][0]},
                        ("fh v3", oracle.NFS3_PROCS[proc]), m["frame"])
            if proc == 17:  # READDIRPLUS: every entry's attributes name its handle
                d.check(sum(r["fh"] is None for r in got), 0, "fh of entries", m["frame"])
        elif m["procedure"] == 1:
            want = Counter()
            for o in m["nfs"]["ops"]:
                a = o["attrs"]
                if a:
                    want[(o["name"], a.get("type"), a.get("mode"), a.get("numlinks"),
                          a.get("owner"), a.get("owner_group"), a.get("size"),
                          a.get("space_used"), a.get("fileid"), a.get("time_access"),
                          a.get("time_modify"), a.get("time_metadata"))] += 1
            g = Counter((r["operation"], r["ftype"], r["mode"], r["nlink"], r["owner"],
                         r["owner_group"], r["size"], r["used"], r["fileid"], r["atime_ns"],
                         r["mtime_ns"], r["ctime_ns"])
                        for r in got if r["operation"] != "READDIR")
            d.check(g, want, "v4 GETATTR", m["frame"])
            for r in got:
                if r["owner"] is not None and r["owner"].isdigit():
                    d.check(r["uid"], int(r["owner"]), "numeric owner as uid", m["frame"])
    d.assert_none(f"attributes of {kind}")


def v4_getattr_handles(m, c):
    """For a v4 COMPOUND reply: the handle of each successful GETATTR's object, where the
    reply or call states it (a PUTFH before, or a GETFH after, with no op between that
    changes the current filehandle)."""
    ops = m["nfs"]["ops"]
    cops = c["nfs"]["ops"]
    out = {}
    for i, o in enumerate(ops):
        if o["name"] != "GETATTR" or o["status"] != 0:
            continue
        fh = None
        for j in range(i + 1, len(ops)):
            if ops[j]["name"] == "GETFH" and ops[j]["fh"]:
                fh = ops[j]["fh"][0]
                break
            if ops[j]["name"] in V4_FH_CHANGERS:
                break
        for j in range(i - 1, -1, -1):
            if fh:
                break
            if cops[j]["name"] == "PUTFH":
                fh = cops[j]["fh"][0]
            if cops[j]["name"] in V4_FH_CHANGERS:
                break
        if fh:
            out[i] = fh
    return out


def test_v4_attributes_name_their_handle(converted):
    _pcap, ds, _rep, msgs = converted["v4"]
    attrs = defaultdict(list)
    for r in table(ds, "nfs_attrs"):
        attrs[r["record"]].append(r)
    ops = ops_by_message(ds)
    calls = calls_by_frame(msgs)
    d = Diffs()
    for m in nfs_msgs(msgs):
        if m["msg_type"] != 1 or m["procedure"] != 1:
            continue
        for i, fh in v4_getattr_handles(m, call_of(m, calls)).items():
            got = [r["fh"] for r in attrs.get(m["frame"], []) if r["operation"] == "GETATTR"]
            d.check(fh in got, True, "nfs_attrs.fh", (m["frame"], i, got))
            d.check(ops[(m["frame"], "reply")][i]["fh"], fh, "nfs_ops.fh", (m["frame"], i))
    d.assert_none("v4 GETATTR handles")
