"""Header-only capture: `record -r FILE --headers=rpc` keeps each packet through its ONC RPC
header. tshark must still decode every RPC xid and message type it decodes in the original
UDP frames, every frame keeps its length on the wire while its captured length shrinks (or
stays, when there was nothing to cut), and the summary's "headers: kept X %" line and the
final stats agree with the bytes in the files."""

from __future__ import annotations

import random
import re
import struct

import pytest
from conftest import (
    CORPUS,
    Pkt,
    data_files,
    decompress,
    final_stats,
    frame,
    run,
    write_pcap,
)

NFS_CORPUS = sorted(p for p in (CORPUS / "tcpdump-tests").glob("*")
                    if "nfs" in p.name.lower()) if CORPUS.is_dir() else []

SUMMARY = re.compile(r"^  headers: kept ([0-9.]+) % of captured bytes \(saved ([0-9.]+) (B|kB|MB|GB|TB)\)$",
                     re.MULTILINE)
UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def tshark_rows(path) -> list[dict]:
    """Per frame: lengths, whether it is UDP, and the (xid, msgtyp) pairs tshark decodes."""
    fields = ["frame.len", "frame.cap_len", "udp.srcport", "rpc.xid", "rpc.msgtyp"]
    args = ["tshark", "-r", path, "-n", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]
    for f in fields:
        args += ["-e", f]
    r = run(args, timeout=60)
    assert r.returncode == 0, r.describe()
    rows = []
    for line in r.out.splitlines():
        length, cap_len, udp, xids, types = line.split("\t")
        rpc = list(zip(xids.split(","), types.split(","))) if xids else []
        rows.append({"len": int(length), "cap_len": int(cap_len), "udp": udp != "", "rpc": rpc})
    return rows


def record_headers(tapdeck, tmp_path, src):
    store = tmp_path / "S"
    r = tapdeck.record(store, "-r", src, "--headers=rpc")
    assert r.returncode == 0, r.describe()
    files = data_files(store)
    assert files, r.describe()
    rows = []
    for i, f in enumerate(files):
        rows += tshark_rows(decompress(f, tmp_path / f"plain{i}.pcapng"))
    return store, r, rows


def check_headers_only(tapdeck, tmp_path, src) -> int:
    """Records `src` header-only and checks it against the original; returns how many UDP
    RPC messages were compared."""
    before = tshark_rows(src)
    store, r, after = record_headers(tapdeck, tmp_path, src)
    assert len(after) == len(before), r.describe()
    compared = 0
    for i, (b, a) in enumerate(zip(before, after), 1):
        assert a["len"] == b["len"], f"frame {i}: length on the wire changed"
        assert a["cap_len"] <= b["cap_len"], f"frame {i}: captured length grew"
        if b["udp"] and b["rpc"]:
            assert a["rpc"] == b["rpc"], f"frame {i}: RPC header lost"
            compared += len(b["rpc"])
    captured = sum(b["cap_len"] for b in before)
    kept = sum(a["cap_len"] for a in after)
    totals = final_stats(store)["totals"]
    assert (totals["captured_bytes"], totals["kept_bytes"]) == (captured, kept)
    m = SUMMARY.search(r.stderr)
    assert m, r.describe()
    kept_pct, saved, unit = float(m.group(1)), float(m.group(2)), m.group(3)
    # The printed saved fraction is 1 - kept/captured of the files, to its rounding.
    assert abs((100 - kept_pct) / 100 - (1 - kept / captured)) <= 0.0005 + 1e-9
    assert abs(saved * UNITS[unit] - (captured - kept)) <= 0.005 * (captured - kept) + 0.5
    return compared


@pytest.mark.parametrize("src", NFS_CORPUS, ids=lambda p: p.name)
def test_nfs_corpus_file_header_only(tapdeck, corpus, tmp_path, src):
    check_headers_only(tapdeck, tmp_path, src)


def test_nfs_corpus_holds_rpc_over_udp(corpus):
    """The test above is only as good as the UDP RPC messages the corpus holds: some."""
    assert sum(len(row["rpc"]) for src in NFS_CORPUS for row in tshark_rows(src) if row["udp"])


def nfs_over_udp(n: int, seed: int = 7) -> list[Pkt]:
    """NFSv3 READ calls (AUTH_UNIX with machine names of every padding) and their replies
    carrying 1 to 8 KiB of data, UDP to and from port 2049."""
    rng = random.Random(seed)
    out, ts = [], 1_795_413_430_000_000_000
    for i in range(n):
        xid = 0x10000000 + i
        name = b"client" + b"x" * (i % 4)
        padded = name + bytes(-len(name) % 4)
        cred = struct.pack("!II", 1, len(name)) + padded + struct.pack("!III", 0, 0, 0)
        call = (struct.pack("!IIIIII", xid, 0, 2, 100003, 3, 6)
                + struct.pack("!II", 1, len(cred)) + cred + struct.pack("!II", 0, 0)
                + struct.pack("!I", 32) + rng.randbytes(32) + struct.pack("!QI", i * 8192, 8192))
        data = rng.randbytes(1024 * (1 + i % 8))
        reply = (struct.pack("!IIIIII", xid, 1, 0, 0, 0, 0)
                 + struct.pack("!IIII", 0, 0, len(data), 0) + struct.pack("!I", len(data)) + data)
        port = 800 + i % 8
        for payload, src, dst, sport, dport in ((call, 1, 300, port, 2049),
                                                (reply, 300, 1, 2049, port)):
            f = frame(rng, "udp", src, dst, sport, dport, payload)
            out.append(Pkt(1, ts, len(f), f))
            ts += 1000
    return out


def test_generated_nfs_over_udp_header_only(tapdeck, tmp_path):
    src = write_pcap(tmp_path / "nfs.pcap", nfs_over_udp(300))
    (tmp_path / "r").mkdir()
    assert check_headers_only(tapdeck, tmp_path / "r", src) == 600
