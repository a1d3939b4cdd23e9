"""The tshark oracle for ONC RPC and NFS: what Wireshark's dissectors see in a capture.

    msgs = rpc_messages("nfs.pcap")     # one dict per RPC message, in capture order
    op_counts(msgs)                     # {"NFSv3 WRITE": 3, "NFSv4 PUTFH": 40, ...} (calls)

Reads `tshark -T json` (the dissection tree, in order, with repeated keys kept: a frame's layers
come as a list of (name, subtree) pairs, so the order of several RPC messages in one frame and of
the operations in an NFSv4 COMPOUND is never lost). TCP reassembly and RPC record marking are
tshark's own; a message spread over many segments belongs to the frame that completes it, and
`segments` lists the frames that carried it. Several messages in one frame get `index` 0, 1, ...

Every message dict has these keys (None where tshark shows nothing):
  frame, index, time_ns (capture time, integer ns), segments (frame numbers, [] if one frame),
  transport ("tcp"/"udp"), src, dst, sport, dport,
  xid, msg_type (0 call, 1 reply), rpc_version, program, version, procedure,
  reply_stat, accept_stat, reject_stat, auth_flavor, auth_uid, auth_gid, auth_gids (aux list),
  auth_stamp, auth_machine, verifier_flavor, call_frame (replies), reply_frame (calls),
  fraglen (record marking: sum of the fragment lengths), layer (the program's tshark layer name,
  e.g. "nfs", "portmap", "mount"), fields ({tshark field: [values in order]} of that layer),
  nfs (None unless program 100003; then see below).

msg["nfs"] for NFSv2/v3:
  status (replies), fh [hex, in order], names [nfs.name], offset, count, eof, stable, committed,
  data_len (bytes of READ/WRITE data), entries [names listed by READDIR(PLUS)],
  attrs [one dict per fattr3: type, mode, nlink, uid, gid, size, used, fileid, atime, mtime, ctime
  (times as integer ns); per NFSv2 fattr the same keys (used None, times from seconds and
  microseconds) plus blocksize, blocks, rdev, fsid].
msg["nfs"] for NFSv4:
  status (the COMPOUND's, replies), tag, minorversion, main_opcode,
  ops [one dict per operation, in order: opcode, name, status (replies), fh [hex], names
  (path components), offset, count, eof, stable, data_len, attrs {type, size, fileid, mode,
  numlinks, owner, owner_group, space_used, time_access, time_metadata, time_modify}, fields
  {...}; READDIR replies have entries [names] instead of names and attrs].
All numbers are ints; file handles are lowercase hex without separators.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

NFS_PROGRAM = 100003
PROGRAMS = {100000: "portmap", 100003: "NFS", 100005: "MOUNT", 100021: "NLM", 100024: "STATUS"}

NFS3_PROCS = ["NULL", "GETATTR", "SETATTR", "LOOKUP", "ACCESS", "READLINK", "READ", "WRITE",
              "CREATE", "MKDIR", "SYMLINK", "MKNOD", "REMOVE", "RMDIR", "RENAME", "LINK",
              "READDIR", "READDIRPLUS", "FSSTAT", "FSINFO", "PATHCONF", "COMMIT"]
NFS4_OPS = {
    3: "ACCESS", 4: "CLOSE", 5: "COMMIT", 6: "CREATE", 7: "DELEGPURGE", 8: "DELEGRETURN",
    9: "GETATTR", 10: "GETFH", 11: "LINK", 12: "LOCK", 13: "LOCKT", 14: "LOCKU", 15: "LOOKUP",
    16: "LOOKUPP", 17: "NVERIFY", 18: "OPEN", 19: "OPENATTR", 20: "OPEN_CONFIRM",
    21: "OPEN_DOWNGRADE", 22: "PUTFH", 23: "PUTPUBFH", 24: "PUTROOTFH", 25: "READ",
    26: "READDIR", 27: "READLINK", 28: "REMOVE", 29: "RENAME", 30: "RENEW", 31: "RESTOREFH",
    32: "SAVEFH", 33: "SECINFO", 34: "SETATTR", 35: "SETCLIENTID", 36: "SETCLIENTID_CONFIRM",
    37: "VERIFY", 38: "WRITE", 39: "RELEASE_LOCKOWNER", 40: "BACKCHANNEL_CTL",
    41: "BIND_CONN_TO_SESSION", 42: "EXCHANGE_ID", 43: "CREATE_SESSION", 44: "DESTROY_SESSION",
    45: "FREE_STATEID", 46: "GET_DIR_DELEGATION", 47: "GETDEVICEINFO", 48: "GETDEVICELIST",
    49: "LAYOUTCOMMIT", 50: "LAYOUTGET", 51: "LAYOUTRETURN", 52: "SECINFO_NO_NAME",
    53: "SEQUENCE", 54: "SET_SSV", 55: "TEST_STATEID", 56: "WANT_DELEGATION",
    57: "DESTROY_CLIENTID", 58: "RECLAIM_COMPLETE", 10044: "ILLEGAL"}
MOUNT_PROCS = ["NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"]
PORTMAP_PROCS = {2: ["NULL", "SET", "UNSET", "GETPORT", "DUMP", "CALLIT"],
                 3: ["NULL", "SET", "UNSET", "GETADDR", "DUMP", "CALLIT", "GETTIME",
                     "UADDR2TADDR", "TADDR2UADDR"],
                 4: ["NULL", "SET", "UNSET", "GETADDR", "DUMP", "BCAST", "GETTIME",
                     "UADDR2TADDR", "TADDR2UADDR", "GETVERSADDR", "INDIRECT", "GETADDRLIST",
                     "GETSTAT"]}
FATTR4_TIMES = {47: "time_access", 50: "time_create", 52: "time_metadata", 53: "time_modify"}
NFS3ERR = {0: "OK", 1: "PERM", 2: "NOENT", 5: "IO", 6: "NXIO", 13: "ACCES", 17: "EXIST",
           18: "XDEV", 19: "NODEV", 20: "NOTDIR", 21: "ISDIR", 22: "INVAL", 27: "FBIG",
           28: "NOSPC", 30: "ROFS", 31: "MLINK", 63: "NAMETOOLONG", 66: "NOTEMPTY",
           69: "DQUOT", 70: "STALE", 71: "REMOTE", 10001: "BADHANDLE", 10002: "NOT_SYNC",
           10003: "BAD_COOKIE", 10004: "NOTSUPP", 10005: "TOOSMALL", 10006: "SERVERFAULT",
           10007: "BADTYPE", 10008: "JUKEBOX"}

# Leaves too big or too noisy to keep in `fields` (the data itself, mode bit flags).
_SKIP_FIELDS = ("nfs.data", "nfs.mode3.", "nfs.mode.", "rpc.fill_bytes", "nfs.attr_mask_tree")


class OracleError(RuntimeError):
    pass


# libnfs (as root) and rpcinfo send from reserved ports, and tshark picks a connection's
# dissector by its lower port first: NFS from port 564 was decoded as 9P, and nothing of that
# connection as RPC. Connections from these ports are decoded as RPC (the RPC dissector still
# rejects what is not RPC).
RESERVED_PORTS = "512-1023"


def run_tshark_json(pcap, *, tshark: str = "tshark", timeout: float = 600,
                    rpc_ports: str | None = RESERVED_PORTS) -> list:
    """tshark's JSON dissection of every frame, as nested lists of (key, value) pairs.
    Out-of-order TCP segments are reassembled too: on a veth with two cores the capture
    sees some segments of one connection out of order."""
    args = [tshark, "-r", str(pcap), "-n", "-T", "json",
            "-o", "tcp.desegment_tcp_streams:TRUE", "-o", "rpc.defragment_rpc_over_tcp:TRUE",
            "-o", "tcp.reassemble_out_of_order:TRUE"]
    if rpc_ports:
        args += ["-d", f"tcp.port=={rpc_ports},rpc", "-d", f"udp.port=={rpc_ports},rpc"]
    p = subprocess.run(args, capture_output=True, timeout=timeout)
    err = p.stderr.decode(errors="replace")
    if p.returncode != 0:
        raise OracleError(f"tshark failed on {pcap} ({p.returncode}): {err[-2000:]}")
    if not p.stdout.strip():
        return []
    return json.loads(p.stdout, object_pairs_hook=lambda pairs: pairs)


def _is_tree(v) -> bool:
    return isinstance(v, list) and bool(v) and isinstance(v[0], tuple)


def _leaves(pairs, path=()):
    """(path of subtree labels, key, value) for every leaf, depth first, in order."""
    for k, v in pairs:
        if _is_tree(v):
            yield from _leaves(v, path + (k,))
        elif isinstance(v, list):  # an empty subtree, or a repeated leaf tshark merged
            for item in v:
                if not _is_tree(item):
                    yield path, k, item
        else:
            yield path, k, v


def _int(v) -> int | None:
    if v is None or v == "":
        return None
    try:
        return int(v, 0) if isinstance(v, str) else int(v)
    except ValueError:
        return None


def _first(pairs, key):
    for _, k, v in _leaves(pairs):
        if k == key:
            return v
    return None


def _hex(v: str) -> str:
    return v.replace(":", "").lower()


def _data_len(v: str) -> int:
    return 0 if not v else v.count(":") + 1


def _fields(pairs) -> dict[str, list]:
    out: dict[str, list] = {}
    for _, k, v in _leaves(pairs):
        if k.startswith(_SKIP_FIELDS) or k.endswith("_raw"):
            continue
        out.setdefault(k, []).append(v)
    return out


def _ns(sec, nsec) -> int | None:
    s, n = _int(sec), _int(nsec)
    return None if s is None else s * 1_000_000_000 + (n or 0)


def _time_ns(epoch: str) -> int:
    sec, _, frac = epoch.partition(".")
    return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])


# ---- RPC ---------------------------------------------------------------------------------

def _rpc_header(pairs) -> dict:
    m = dict.fromkeys(("xid", "msg_type", "rpc_version", "program", "version", "procedure",
                       "reply_stat", "accept_stat", "reject_stat", "auth_flavor", "auth_uid",
                       "auth_gid", "auth_stamp", "auth_machine", "verifier_flavor", "call_frame",
                       "reply_frame"))
    m["auth_gids"] = []
    m["fraglen"] = 0
    simple = {"rpc.xid": "xid", "rpc.msgtyp": "msg_type", "rpc.version": "rpc_version",
              "rpc.program": "program", "rpc.programversion": "version",
              "rpc.procedure": "procedure", "rpc.replystat": "reply_stat",
              "rpc.state_accept": "accept_stat", "rpc.state_reject": "reject_stat",
              # tshark puts the call's frame into a reply's rpc.repframe ("reply to a request
              # in frame N"); calls learn their reply frame in rpc_messages().
              "rpc.reqframe": "call_frame", "rpc.repframe": "call_frame"}
    for path, k, v in _leaves(pairs):
        if k == "rpc.fraglen":
            m["fraglen"] += _int(v) or 0
        elif k in simple and m[simple[k]] is None:
            m[simple[k]] = _int(v)
        elif path and path[0] == "Credentials":
            if k == "rpc.auth.flavor":
                m["auth_flavor"] = _int(v)
            elif k == "rpc.auth.uid":
                m["auth_uid"] = _int(v)
            elif k == "rpc.auth.gid":
                if any(p.startswith("Auxiliary GIDs") for p in path):
                    m["auth_gids"].append(_int(v))
                else:
                    m["auth_gid"] = _int(v)
            elif k == "rpc.auth.stamp":
                m["auth_stamp"] = _int(v)
            elif k == "rpc.auth.machinename":
                m["auth_machine"] = v
        elif path and path[0] == "Verifier" and k == "rpc.auth.flavor":
            m["verifier_flavor"] = _int(v)
    if m["fraglen"] == 0:
        m["fraglen"] = None  # UDP: no record marking
    return m


# ---- NFS ---------------------------------------------------------------------------------

_FATTR3 = {"nfs.fattr3.type": "type", "nfs.mode3": "mode", "nfs.fattr3.nlink": "nlink",
           "nfs.fattr3.uid": "uid", "nfs.fattr3.gid": "gid", "nfs.fattr3.size": "size",
           "nfs.fattr3.used": "used", "nfs.fattr3.fileid": "fileid"}


# NFSv2's fattr (RFC 1094); its sattr (calls) has no type, so only fattr trees match.
_FATTR2 = {"nfs.ftype": "type", "nfs.mode": "mode", "nfs.fattr.nlink": "nlink",
           "nfs.fattr.uid": "uid", "nfs.fattr.gid": "gid", "nfs.fattr.size": "size",
           "nfs.fattr.blocksize": "blocksize", "nfs.fattr.rdev": "rdev",
           "nfs.fattr.blocks": "blocks", "nfs.fattr.fsid": "fsid", "nfs.fattr.fileid": "fileid"}


def _fattr3_trees(pairs):
    """Subtrees that directly hold a fattr3 or an NFSv2 fattr (they have nfs.fattr3.type or
    nfs.ftype as a child)."""
    for _, v in pairs:
        if _is_tree(v):
            if any(kk in ("nfs.fattr3.type", "nfs.ftype") for kk, _ in v):
                yield v
            else:
                yield from _fattr3_trees(v)


def _fattr2(tree) -> dict:
    a = dict.fromkeys(list(_FATTR2.values()) + ["used", "atime", "mtime", "ctime"])
    times: dict[str, dict] = {}
    for _, k, v in _leaves(tree):
        if k in _FATTR2 and a[_FATTR2[k]] is None:
            a[_FATTR2[k]] = _int(v)
        for t in ("atime", "mtime", "ctime"):
            if k in (f"nfs.{t}.sec", f"nfs.{t}.usec"):
                times.setdefault(t, {})[k.rsplit(".", 1)[1]] = v
    for t, parts in times.items():
        sec, usec = _int(parts.get("sec")), _int(parts.get("usec"))
        a[t] = None if sec is None else sec * 1_000_000_000 + (usec or 0) * 1_000
    return a


def _fattr3(tree) -> dict:
    if any(k == "nfs.ftype" for k, _ in tree):
        return _fattr2(tree)
    a = dict.fromkeys(list(_FATTR3.values()) + ["atime", "mtime", "ctime"])
    times: dict[str, dict] = {}
    for _, k, v in _leaves(tree):
        if k in _FATTR3 and a[_FATTR3[k]] is None:
            a[_FATTR3[k]] = _int(v)
        for t in ("atime", "mtime", "ctime"):
            if k in (f"nfs.{t}.sec", f"nfs.{t}.nsec"):
                times.setdefault(t, {})[k.rsplit(".", 1)[1]] = v
    for t, parts in times.items():
        a[t] = _ns(parts.get("sec"), parts.get("nsec"))
    return a


def _nfs3(pairs) -> dict:
    n = {"status": None, "fh": [], "names": [], "offset": None, "count": None, "eof": None,
         "stable": None, "committed": None, "data_len": None, "entries": []}
    for _, k, v in _leaves(pairs):
        if k in ("nfs.status3", "nfs.status2") and n["status"] is None:
            n["status"] = _int(v)
        elif k == "nfs.fhandle":
            n["fh"].append(_hex(v))
        elif k == "nfs.name":
            n["names"].append(v)
        elif k in ("nfs.readdirplus.entry.name", "nfs.readdir.entry.name"):
            n["entries"].append(v)
        elif k in ("nfs.offset3", "nfs.offset", "nfs.read.offset", "nfs.write.offset") \
                and n["offset"] is None:
            n["offset"] = _int(v)
        elif k in ("nfs.count3", "nfs.count", "nfs.read.count", "nfs.readdir.count") \
                and n["count"] is None:
            n["count"] = _int(v)
        elif k in ("nfs.read.eof", "nfs.readdir.eof"):
            n["eof"] = _int(v)
        elif k == "nfs.write.stable":
            n["stable"] = _int(v)
        elif k == "nfs.write.committed":
            n["committed"] = _int(v)
        elif k == "nfs.data":
            n["data_len"] = (n["data_len"] or 0) + _data_len(v)
    n["attrs"] = [_fattr3(t) for t in _fattr3_trees(pairs)]
    return n


def _fattr4(tree) -> dict:
    """Attributes of an op body: nfs.attr = N is followed by nfs.attr_tree with its value."""
    a: dict = {}
    last_attr = None
    simple = {"nfs.fattr4.size": "size", "nfs.fattr4.fileid": "fileid", "nfs.mode": "mode",
              "nfs.fattr4.numlinks": "numlinks", "nfs.fattr4_owner": "owner",
              "nfs.fattr4_owner_group": "owner_group", "nfs.fattr4.space_used": "space_used",
              "nfs.nfs_ftype4": "type"}

    def walk(pairs):
        nonlocal last_attr
        for k, v in pairs:
            if k == "nfs.attr" and not _is_tree(v):
                last_attr = _int(v)
            elif k == "nfs.attr_tree" and _is_tree(v):
                secs = dict((kk.rsplit(".", 1)[1], vv) for _, kk, vv in _leaves(v)
                            if kk in ("nfs.nfstime4.seconds", "nfs.nfstime4.nseconds"))
                if last_attr in FATTR4_TIMES and secs:
                    a[FATTR4_TIMES[last_attr]] = _ns(secs.get("seconds"), secs.get("nseconds"))
                for _, kk, vv in _leaves(v):
                    if kk in simple:
                        name = simple[kk]
                        a[name] = vv if name in ("owner", "owner_group") else _int(vv)
            elif _is_tree(v):
                walk(v)

    walk(tree)
    return a


def _nfs4_op(opcode: int, body) -> dict:
    op = {"opcode": opcode, "name": NFS4_OPS.get(opcode, str(opcode)), "status": None,
          "fh": [], "names": [], "offset": None, "count": None, "eof": None, "stable": None,
          "data_len": None, "attrs": {}, "fields": {}}
    if body:
        for k, v in body:  # the op's own status is a direct child of its tree
            if k == "nfs.nfsstat4":
                op["status"] = _int(v)
                break
        for _, k, v in _leaves(body):
            if k == "nfs.fhandle":
                op["fh"].append(_hex(v))
            elif k in ("nfs.pathname.component", "nfs.component4", "nfs.name"):
                op["names"].append(v)
            elif k == "nfs.offset4" and op["offset"] is None:
                op["offset"] = _int(v)
            elif k in ("nfs.count4", "nfs.read.data_length", "nfs.write.data_length") \
                    and op["count"] is None:
                op["count"] = _int(v)
            elif k == "nfs.eof":
                op["eof"] = _int(v)
            elif k == "nfs.stable_how4":
                op["stable"] = _int(v)
            elif k == "nfs.data":
                op["data_len"] = (op["data_len"] or 0) + _data_len(v)
        op["attrs"] = _fattr4(body)
        op["fields"] = _fields(body)
    if opcode == 26:  # READDIR: the names are entries, and attributes belong to each entry
        op["entries"], op["names"], op["attrs"] = op["names"], [], {}
    return op


def _nfs4(pairs) -> dict:
    n = {"status": None, "tag": None, "minorversion": None, "main_opcode": None, "ops": []}
    for k, v in pairs:
        if k == "nfs.nfsstat4" and n["status"] is None:
            n["status"] = _int(v)
        elif k == "nfs.minorversion":
            n["minorversion"] = _int(v)
        elif k == "nfs.main_opcode":
            n["main_opcode"] = _int(v)
        elif k.startswith("Tag") and _is_tree(v):
            n["tag"] = _first(v, "nfs.tag")
        elif k == "nfs.ops.count_tree" and _is_tree(v):
            current = None
            for kk, vv in v:
                if kk == "nfs.opcode" and not _is_tree(vv):
                    current = _nfs4_op(_int(vv), None)
                    n["ops"].append(current)
                elif kk == "nfs.opcode_tree" and current is not None:
                    n["ops"][-1] = _nfs4_op(current["opcode"], vv)
    return n


# ---- frames ------------------------------------------------------------------------------

def _frame_messages(layers) -> list[dict]:
    frame = dict(layers[0][1]) if layers and layers[0][0] == "frame" else {}
    base = {"frame": _int(frame.get("frame.number")),
            "time_ns": _time_ns(frame["frame.time_epoch"]) if "frame.time_epoch" in frame else None,
            "transport": None, "src": None, "dst": None, "sport": None, "dport": None}
    msgs: list[dict] = []
    segments: list[int] = []
    for name, tree in layers:
        if not _is_tree(tree):
            continue
        d = dict(tree)
        if name in ("ip", "ipv6"):
            base["src"] = d.get(f"{name}.src")
            base["dst"] = d.get(f"{name}.dst")
        elif name in ("tcp", "udp"):
            base["transport"] = name
            base["sport"] = _int(d.get(f"{name}.srcport"))
            base["dport"] = _int(d.get(f"{name}.dstport"))
        elif name == "tcp.segments":
            segments = [_int(v) for _, k, v in _leaves(tree) if k == "tcp.segment"]
        elif name == "rpc":
            m = dict(base, index=len(msgs), segments=segments, **_rpc_header(tree))
            m.update(layer=None, fields={}, nfs=None)
            msgs.append(m)
            segments = []
        elif msgs and msgs[-1]["layer"] is None:
            m = msgs[-1]
            m["layer"] = name
            m["fields"] = _fields(tree)
            if m["program"] == NFS_PROGRAM:
                m["nfs"] = _nfs4(tree) if m["version"] == 4 else _nfs3(tree)
    return msgs


def rpc_messages(pcap, *, tshark: str = "tshark", timeout: float = 600,
                 rpc_ports: str | None = RESERVED_PORTS) -> list[dict]:
    """Every ONC RPC message tshark decodes in `pcap`, in frame order (see the module doc).
    `rpc_ports`: a port range whose TCP and UDP traffic is decoded as RPC whatever else is
    registered for it (None: tshark's defaults)."""
    out = []
    for pkt in run_tshark_json(pcap, tshark=tshark, timeout=timeout, rpc_ports=rpc_ports):
        source = dict(pkt).get("_source")
        layers = dict(source).get("layers") if source else None
        if layers:
            out.extend(_frame_messages(layers))
    calls = {(m["frame"], m["xid"]): m for m in out if m["msg_type"] == 0}
    for m in out:
        if m["msg_type"] == 0:
            m["call_frame"] = None
        elif m["call_frame"] is not None and (m["call_frame"], m["xid"]) in calls:
            calls[(m["call_frame"], m["xid"])]["reply_frame"] = m["frame"]
    return out


# ---- timing (fast) -----------------------------------------------------------------------

TIMING_FIELDS = ("frame.number", "frame.time_epoch", "ip.src", "ip.dst", "tcp.srcport",
                 "tcp.dstport", "udp.srcport", "udp.dstport", "rpc.xid", "rpc.msgtyp",
                 "rpc.time", "rpc.repframe", "tcp.segment", "rpc.program",
                 "rpc.programversion", "rpc.procedure")


def _seconds_ns(v: str) -> int:
    """tshark's seconds with up to 9 decimals ("0.000628000", "-1.5") as integer ns."""
    neg = v.startswith("-")
    sec, _, frac = v.lstrip("-").partition(".")
    ns = int(sec or 0) * 1_000_000_000 + int((frac + "000000000")[:9])
    return -ns if neg else ns


def rpc_timing(pcap, *, tshark: str = "tshark", timeout: float = 600,
               out_of_order: bool = True) -> list[dict]:
    """Every ONC RPC message tshark finds, from `tshark -T fields` (much faster than
    rpc_messages, with less in each message). Dissectors are chosen by heuristics first
    (`tcp.try_heuristic_first`, `udp.try_heuristic_first`: RPC is recognised by its header,
    not by the lower port). One dict per message: frame (the frame tshark dissects it in:
    for a message over several TCP segments the "reassembled in" frame), time_ns (that
    frame's), transport, src, sport, dst, dport, xid, msg_type, program, version, procedure
    (None in a frame holding several messages), rpc_time_ns (replies tshark
    pairs with a call: rpc.time, reply time minus call time, in ns), call_frame (replies
    tshark pairs; tshark's one pass cannot name a call's reply frame), segments (frames of
    a reassembled message, [] for one frame) and ambiguous (a frame holding several messages whose per-message fields cannot be told
    apart: rpc_time_ns, call_frame and segments are then None)."""
    args = [tshark, "-r", str(pcap), "-n", "-o", "tcp.try_heuristic_first:TRUE",
            "-o", "udp.try_heuristic_first:TRUE", "-o", "tcp.desegment_tcp_streams:TRUE",
            "-o", "rpc.defragment_rpc_over_tcp:TRUE",
            "-o", f"tcp.reassemble_out_of_order:{'TRUE' if out_of_order else 'FALSE'}",
            "-Y", "rpc", "-T", "fields", "-E", "occurrence=a", "-E", "separator=/t"]
    for f in TIMING_FIELDS:
        args += ["-e", f]
    p = subprocess.run(args, capture_output=True, timeout=timeout)
    if p.returncode != 0:
        raise OracleError(f"tshark failed on {pcap} ({p.returncode}): "
                          f"{p.stderr.decode(errors='replace')[-2000:]}")
    out = []
    for line in p.stdout.decode(errors="replace").splitlines():
        f = dict(zip(TIMING_FIELDS, line.split("\t"), strict=False))
        lists = {k: [x for x in f.get(k, "").split(",") if x] for k in TIMING_FIELDS}
        xids, types = lists["rpc.xid"], lists["rpc.msgtyp"]
        if not xids or len(xids) != len(types):
            continue
        tcp = bool(f.get("tcp.srcport"))
        sport = _int(f["tcp.srcport" if tcp else "udp.srcport"].split(",")[0])
        dport = _int(f["tcp.dstport" if tcp else "udp.dstport"].split(",")[0])
        n = len(xids)
        replies = types.count("1")
        times, rep = iter(lists["rpc.time"]), iter(lists["rpc.repframe"])
        single = n == 1
        # Several messages in one frame: their rpc.time values can be assigned only when
        # every reply of the frame has one.
        clear = single or (len(lists["rpc.time"]) in (0, replies)
                           and len(lists["rpc.repframe"]) == len(lists["rpc.time"]))
        for i, (x, t) in enumerate(zip(xids, types, strict=True)):
            m = {"frame": _int(f["frame.number"]), "index": i,
                 "time_ns": _time_ns(f["frame.time_epoch"]),
                 "transport": "tcp" if tcp else "udp", "src": f["ip.src"].split(",")[0],
                 "dst": f["ip.dst"].split(",")[0], "sport": sport, "dport": dport,
                 "xid": _int(x), "msg_type": _int(t), "rpc_time_ns": None,
                 "call_frame": None, "ambiguous": not clear,
                 "segments": [_int(s) for s in lists["tcp.segment"]] if single else None}
            for k, name in (("rpc.program", "program"), ("rpc.programversion", "version"),
                            ("rpc.procedure", "procedure")):
                m[name] = _int(lists[k][0]) if single and lists[k] else None
            if clear and t == "1" and lists["rpc.time"]:
                m["rpc_time_ns"] = _seconds_ns(next(times))
                m["call_frame"] = _int(next(rep))
            out.append(m)
    return out


# ---- summaries ---------------------------------------------------------------------------

def op_names(m: dict) -> list[str]:
    """Names of what an RPC message asks for: "NFSv3 WRITE", "NFSv4 PUTFH", ..., "portmap 3"."""
    prog, vers, proc = m["program"], m["version"], m["procedure"]
    if prog == NFS_PROGRAM and vers == 3 and proc is not None and proc < len(NFS3_PROCS):
        return [f"NFSv3 {NFS3_PROCS[proc]}"]
    if prog == NFS_PROGRAM and vers == 4:
        if proc == 0:
            return ["NFSv4 NULL"]
        if m["nfs"] and m["nfs"]["ops"]:
            return [f"NFSv4 {op['name']}" for op in m["nfs"]["ops"]]
        return ["NFSv4 COMPOUND"]
    names = {100005: MOUNT_PROCS, 100000: PORTMAP_PROCS.get(vers, [])}.get(prog, [])
    if proc is not None and proc < len(names):
        return [f"{PROGRAMS[prog]}v{vers} {names[proc]}"]
    return [f"{PROGRAMS.get(prog, prog)}v{vers} proc {proc}"]


def op_counts(msgs: list[dict], *, msg_type: int = 0) -> Counter:
    """Operations per name over calls (msg_type 0) or replies (1). A v4 COMPOUND counts each
    of its operations (a reply holds only the operations up to the first failure)."""
    c: Counter = Counter()
    for m in msgs:
        if m["msg_type"] == msg_type:
            c.update(op_names(m))
    return c


def unmatched(msgs: list[dict]) -> list[dict]:
    """Calls without a reply and replies without a call (matched by xid and connection)."""
    def conn(m, reply):
        a, b = (m["src"], m["sport"]), (m["dst"], m["dport"])
        return (m["transport"], m["xid"]) + ((b, a) if reply else (a, b))
    calls = Counter(conn(m, False) for m in msgs if m["msg_type"] == 0)
    replies = Counter(conn(m, True) for m in msgs if m["msg_type"] == 1)
    missing = calls - replies
    extra = replies - calls
    return [m for m in msgs
            if (m["msg_type"] == 0 and conn(m, False) in missing)
            or (m["msg_type"] == 1 and conn(m, True) in extra)]


def main(argv=None) -> None:
    """`python3 -m nfs.oracle FILE.pcap`: prints the operation counts (calls) as JSON."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("pcap", type=Path)
    ap.add_argument("--messages", action="store_true", help="print every message (JSON lines)")
    args = ap.parse_args(argv)
    msgs = rpc_messages(args.pcap)
    if args.messages:
        for m in msgs:
            print(json.dumps(m))
    else:
        print(json.dumps(dict(sorted(op_counts(msgs).items())), indent=1))


if __name__ == "__main__":
    main()
