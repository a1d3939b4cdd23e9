"""Helpers for the `tapdeck convert` tests (test_convert_*.py): running convert, reading the
dataset's tables with pyarrow, real NFS captures from the rig of tests/nfs (made once per
pytest session and kept on disk), tshark's view of them (tests/nfs/oracle.py, cached), and
small pcap surgery (dropping packets, cutting the end)."""

from __future__ import annotations

import json
import pickle
import random
import struct
import sys
from pathlib import Path

import pytest
from conftest import SLOW, run

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from nfs import oracle
from nfs import rig as nfsrig

TABLES = ("packets", "rpc", "nfs_ops", "nfs_rw", "nfs_attrs", "nfs_names", "mount")
KINDS = ("v3", "v4", "mixed")


# ---- convert and the dataset -------------------------------------------------------------

def convert(tapdeck, out, *inputs, args=(), timeout=SLOW):
    """`tapdeck convert INPUT... --out OUT --json -q ARGS`: (Result, report dict or None)."""
    r = tapdeck("convert", *inputs, "--out", out, "--json", "-q", *args, timeout=timeout)
    rep = None
    if r.returncode == 0:
        rep = json.loads(r.stdout.decode().strip().splitlines()[-1])
    return r, rep


def convert_ok(tapdeck, out, *inputs, args=(), timeout=SLOW) -> dict:
    r, rep = convert(tapdeck, out, *inputs, args=args, timeout=timeout)
    assert r.returncode == 0, r.describe()
    assert "panicked" not in r.stderr, r.describe()
    return rep


def table(ds, name: str) -> list[dict]:
    """Every row of a table (empty when the table has no files), without the hive column."""
    import pyarrow.dataset as pds

    d = Path(ds) / name
    if not d.is_dir() or not any(d.rglob("*.parquet")):
        return []
    rows = pds.dataset(str(d), format="parquet", partitioning="hive").to_table().to_pylist()
    for r in rows:
        r.pop("hour", None)
    return rows


def data_files(ds) -> dict[str, bytes]:
    """Relative path -> bytes of every Parquet data file of the tables."""
    ds = Path(ds)
    return {str(p.relative_to(ds)): p.read_bytes() for t in TABLES + ("capture_stats",)
            for p in sorted((ds / t).rglob("*.parquet")) if (ds / t).is_dir()}


def file_states(ds) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file under the dataset."""
    return {str(p.relative_to(ds)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(Path(ds).rglob("*")) if p.is_file()}


# ---- NFS captures ----------------------------------------------------------------------

def need_rig():
    reason = nfsrig.unavailable_reason()
    if reason:
        pytest.skip(reason)


def nfs_captures(tmp_path_factory) -> dict[str, Path]:
    """v3, v4 and mixed workload captures (tcpdump on the rig's veth), made the first time a
    test asks and kept in the session's base temp directory."""
    need_rig()
    base = tmp_path_factory.getbasetemp() / "convert-nfs-captures"
    done = base / "done.json"
    if done.exists():
        return {k: Path(v) for k, v in json.loads(done.read_text()).items()}
    base.mkdir(parents=True, exist_ok=True)
    caps = {}
    # One rig per workload: a second workload in the same rig session fails (its populate()
    # deletes and recreates w3/ and w4/ under ganesha, and the v4 client then gets
    # NFS4ERR_STALE for the export's root).
    # Under load a libnfs command has failed once in a while (NFS4ERR_EXPIRED on an OPEN
    # right after SETCLIENTID_CONFIRM): a workload gets a second try in a fresh rig.
    for kind in KINDS:
        caps[kind] = base / f"{kind}.pcap"
        for attempt in (1, 2):
            try:
                with nfsrig.NfsRig(base / f"rig-{kind}-{attempt}") as r, \
                        r.capture(caps[kind]):
                    r.workload(kind)
                break
            except nfsrig.RigError as e:
                if attempt == 2:
                    raise
                print(f"rig: workload {kind} failed, trying again: {e}", file=sys.stderr)
    done.write_text(json.dumps({k: str(v) for k, v in caps.items()}))
    return caps


def concurrent_capture(tmp_path_factory, take: int = 1) -> Path:
    """The rig's concurrent workload (several clients at once, NFSv3 and v4 over TCP, NULL
    calls over UDP; see tests/nfs/workloads.py), captured by tcpdump the first time a test
    asks and kept in the session's base temp directory; `take` 2, 3, ... are other runs of
    it, for a test whose case a run may lack."""
    need_rig()
    base = tmp_path_factory.getbasetemp() / f"convert-nfs-concurrent{'' if take == 1 else take}"
    pcap = base / "concurrent.pcap"
    done = base / "done"
    if done.exists():
        return pcap
    base.mkdir(parents=True, exist_ok=True)
    for attempt in (1, 2):  # a fresh rig for a second try, as nfs_captures does
        try:
            with nfsrig.NfsRig(base / f"rig-{attempt}") as r, r.capture(pcap):
                r.workload("concurrent")
            break
        except nfsrig.RigError as e:
            if attempt == 2:
                raise
            print(f"rig: the concurrent workload failed, trying again: {e}", file=sys.stderr)
    done.write_text("")
    return pcap


def _cached(pcap, name: str, make):
    """make(), pickled beside the capture under `name` and reused while the capture is
    unchanged."""
    cache = Path(f"{pcap}.{name}.pickle")
    if cache.exists() and cache.stat().st_mtime_ns >= Path(pcap).stat().st_mtime_ns:
        return pickle.loads(cache.read_bytes())
    value = make()
    cache.write_bytes(pickle.dumps(value))
    return value


def messages(pcap) -> list[dict]:
    """oracle.rpc_messages(pcap), cached beside the capture (tshark -T json is slow)."""
    return _cached(pcap, "oracle", lambda: oracle.rpc_messages(pcap))


def timing(pcap, *, out_of_order: bool = True) -> list[dict]:
    """oracle.rpc_timing(pcap): tshark's frame, time and rpc.time of every RPC message,
    cached beside the capture."""
    return _cached(pcap, f"timing-{int(out_of_order)}",
                   lambda: oracle.rpc_timing(pcap, out_of_order=out_of_order))


def direction(m: dict) -> str:
    return "reply" if m["msg_type"] == 1 else "call"


def conv_of(m: dict) -> tuple:
    """(transport, client, server, xid) of a tshark message."""
    a, b = (m["src"], m["sport"]), (m["dst"], m["dport"])
    return (m["transport"],) + ((b, a) if m["msg_type"] == 1 else (a, b)) + (m["xid"],)


def conv_of_row(r: dict) -> tuple:
    return (r["transport"], (r["client_addr"], r["client_port"]),
            (r["server_addr"], r["server_port"]), r["xid"])


# ---- pcap surgery ------------------------------------------------------------------------

def read_pcap_records(path) -> tuple[bytes, list[bytes], str]:
    """(global header, raw records with their 16-byte headers, byte order) of a classic pcap."""
    buf = Path(path).read_bytes()
    magic = buf[:4]
    e = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    assert magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\xc3\xd4",
                     b"\xa1\xb2\x3c\x4d"), f"{path}: not a classic pcap"
    off, recs = 24, []
    while off + 16 <= len(buf):
        incl = struct.unpack(e + "I", buf[off + 8:off + 12])[0]
        recs.append(buf[off:off + 16 + incl])
        off += 16 + incl
    return buf[:24], recs, e


def write_records(path, header: bytes, recs) -> Path:
    with open(path, "wb") as f:
        f.write(header)
        f.writelines(recs)
    return Path(path)


def frame_times(path) -> list[int]:
    """Capture time (ns) of every record of a classic pcap, in record order."""
    header, recs, e = read_pcap_records(path)
    magic = struct.unpack(e + "I", header[:4])[0]
    scale = 1 if magic == 0xA1B23C4D else 1000
    return [(lambda sec, frac: sec * 1_000_000_000 + frac * scale)(
        *struct.unpack(e + "II", r[:8])) for r in recs]


def tcp_udp_frames(path) -> list[tuple | None]:
    """Per record of an Ethernet/IPv4 pcap: (transport, (src, sport), (dst, dport),
    payload bytes) for TCP and UDP packets, None for others (ARP, ...)."""
    _header, recs, _ = read_pcap_records(path)
    out = []
    for r in recs:
        d = r[16:]
        if len(d) < 34 or d[12:14] != b"\x08\x00" or d[23] not in (6, 17):
            out.append(None)
            continue
        ihl = (d[14] & 0x0F) * 4
        total = struct.unpack("!H", d[16:18])[0]
        src = ".".join(map(str, d[26:30]))
        dst = ".".join(map(str, d[30:34]))
        l4 = 14 + ihl
        sport, dport = struct.unpack("!HH", d[l4:l4 + 4])
        if d[23] == 6:
            hl = (d[l4 + 12] >> 4) * 4
            out.append(("tcp", (src, sport), (dst, dport), total - ihl - hl))
        else:
            out.append(("udp", (src, sport), (dst, dport), total - ihl - 8))
    return out


def drop_random(src, dst, fraction: float, seed: int) -> list[int]:
    """Writes src without a seeded random `fraction` of its packets; returns the dropped
    frame numbers (1-based)."""
    header, recs, _ = read_pcap_records(src)
    rng = random.Random(seed)
    dropped = sorted(rng.sample(range(1, len(recs) + 1), round(len(recs) * fraction)))
    gone = set(dropped)
    write_records(dst, header, (r for i, r in enumerate(recs, 1) if i not in gone))
    return dropped


def editcap(*args):
    r = run(["editcap", *args], timeout=SLOW)
    assert r.returncode == 0, r.describe()
    return r
