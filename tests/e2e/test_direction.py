"""Packet direction end to end: `tapdeck record -i` on one end of a veth pair while pings run
both ways, in two network namespaces the test makes and removes (198.18.61.0/24).

    netns A: tapdeck record -i dira, dira 198.18.61.1 ─veth─ dirb 198.18.61.2 :netns B

Oracles: the Ethernet source address (a frame from dira's own address left A: outbound,
any other arrived: inbound), tshark's `frame.packet_flags_direction` on the stored file and on
the extract, and tshark's `-z io,stat` filtered by direction for the rates analysis.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import netlab
import pytest
from anatools import analyze, need_analyze
from conftest import QUICK, SLOW, data_files, decompress, finish, need, run, wait_for

A_ADDR, B_ADDR = "198.18.61.1", "198.18.61.2"
PINGS = 25
INTERVAL = 0.1  # 25 pings 0.1 s apart each way: about 2.5 s, several 1 s intervals
INBOUND, OUTBOUND = "0x00000001", "0x00000002"
UDP_PORT, DATAGRAMS = 9000, 30

# One-way UDP from B to A, so the two directions differ in frames and bytes: A receives
# (without answering), B sends DATAGRAMS of 300 bytes 0.08 s apart.
UDP_SINK = f"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("{A_ADDR}", {UDP_PORT}))
s.settimeout(10)
print("bound", flush=True)
for _ in range({DATAGRAMS}):
    s.recv(2048)
"""
UDP_SOURCE = f"""
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range({DATAGRAMS}):
    s.sendto(bytes(300), ("{A_ADDR}", {UDP_PORT}))
    time.sleep(0.08)
"""


class Pair(netlab.Link):
    """Namespaces A and B joined by the veth pair dira/dirb; removed on close. No IPv6:
    router and neighbour solicitations would be extra, timed traffic."""

    def __init__(self):
        super().__init__("tdd", "dira", A_ADDR, "dirb", B_ADDR)

    def sh(self, ns, *args):
        r = run(["ip", "netns", "exec", ns, *map(str, args)], timeout=QUICK)
        assert r.returncode == 0, r.describe()
        return r

    def mac(self, side, dev) -> str:
        links = json.loads(self.sh(self.ns[side], "ip", "-j", "link", "show", dev).out)
        return links[0]["address"]


@pytest.fixture
def pair(procs):
    need("tshark", "ping", "zstd")
    p = Pair()
    yield p
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=10)
    p.close()


@pytest.fixture
def recorded(tapdeck, pair, procs, tmp_path):
    """A store recorded on dira while A and B ping each other (different sizes each way) and B
    sends UDP datagrams to A."""
    store = tmp_path / "store"
    rec = pair.popen("a", tapdeck.bin, "record", "-i", "dira", "--store", store, "--no-direct",
                     "--block-timeout-ms", "5", stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    procs.append(rec)
    wait_for(lambda: (store / "manifest.json").exists() or rec.poll() is not None, 10,
             "the recorder to start")  # fmt: skip
    assert rec.poll() is None, rec.communicate()[1].decode()
    sink = pair.popen("a", sys.executable, "-c", UDP_SINK, stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE)  # fmt: skip
    procs.append(sink)
    assert sink.stdout.readline() == b"bound\n", sink.communicate()[1].decode()
    traffic = []
    for side, size, to in (("a", 200, B_ADDR), ("b", 700, A_ADDR)):
        traffic.append(pair.popen(side, "ping", "-n", "-q", "-c", PINGS, "-i", INTERVAL, "-s", size,
                                  "-W", 1, to, stdout=subprocess.PIPE, stderr=subprocess.PIPE))  # fmt: skip
    traffic.append(pair.popen("b", sys.executable, "-c", UDP_SOURCE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE))  # fmt: skip
    procs.extend(traffic)
    for p in [*traffic, sink]:
        code, _, err = finish(p, timeout=QUICK)
        assert code == 0, err
    # No wait: a stop reads what the ring holds (the last replies may still be there).
    rec.send_signal(signal.SIGINT)
    code, _, err = finish(rec, timeout=QUICK)
    assert code == 0, err
    assert "panicked" not in err
    return store, pair.mac("a", "dira")


def tshark_fields(pcap, *fields) -> list[list[str]]:
    args = [a for f in fields for a in ("-e", f)]
    r = run(["tshark", "-r", pcap, "-n", "-T", "fields", "-E", "separator=|", *args],
            timeout=SLOW)  # fmt: skip
    assert r.returncode == 0, r.describe()
    return [line.split("|") for line in r.out.splitlines() if line]


def expected_direction(src_mac: str, own_mac: str) -> str:
    return OUTBOUND if src_mac.lower() == own_mac.lower() else INBOUND


def check_directions(pcap, own_mac) -> list[str]:
    """tshark's direction of every packet, checked against its source address."""
    rows = tshark_fields(pcap, "eth.src", "frame.packet_flags_direction")
    got = [d for _, d in rows]
    want = [expected_direction(src, own_mac) for src, _ in rows]
    bad = [(i + 1, g, w) for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    assert not bad, f"{len(bad)} of {len(got)} packets have the wrong direction: {bad[:5]}"
    return got


def check_counts(directions: list[str]):
    """Each side's requests and the other's replies in both directions, the datagrams inbound
    (ARP may add a few). Over the whole recording: it may be cut into two files (a new file
    every minute, on the minute)."""
    assert directions.count(OUTBOUND) >= 2 * PINGS, directions
    assert directions.count(INBOUND) >= 2 * PINGS + DATAGRAMS, directions


def test_recorded_direction_reaches_tshark_the_dataset_and_rates(tapdeck, recorded, tmp_path):
    store, own_mac = recorded
    files = data_files(store)
    assert files, list(store.iterdir())
    stored = []
    for i, f in enumerate(files):
        plain = decompress(f, tmp_path / f"stored{i}.pcapng")
        stored.append((f, plain, check_directions(plain, own_mac)))
    check_counts([d for _, _, ds in stored for d in ds])

    # extract writes epb_flags back as it read them.
    extract = tmp_path / "extract.pcapng"
    r = tapdeck.extract(store, extract)
    assert r.returncode == 0, r.describe()
    assert check_directions(extract, own_mac) == [d for _, _, ds in stored for d in ds]

    # convert: the direction column per packet, as tshark reads it per stored file.
    import pyarrow.dataset as pds
    import pyarrow.parquet as pq

    ds = tmp_path / "ds"
    r = tapdeck("convert", store, "--out", ds, "-q", timeout=SLOW)
    assert r.returncode == 0, r.describe()
    rows = pds.dataset(str(ds / "packets"), format="parquet", partitioning="hive").to_table()
    rows = rows.select(["file_id", "record", "direction"]).to_pylist()
    names = {s["file_id"]: Path(s["path"]).name for s in
             pq.read_table(ds / "catalog" / "sources.parquet").to_pylist()}  # fmt: skip
    as_column = {INBOUND: "in", OUTBOUND: "out"}
    for f, _, directions in stored:
        (fid,) = [k for k, n in names.items() if n == f.name]
        got = [r["direction"] for r in sorted(rows, key=lambda r: r["record"]) if r["file_id"] == fid]
        assert got == [as_column[d] for d in directions], f.name

    # rates by direction against tshark's io,stat filtered by direction.
    need_analyze()
    want = iostat_by_direction(extract)
    got = analyze("rates", ds, "--by", "direction", "--sample", "1s", "--window", "1s",
                  "--align", "first")  # fmt: skip
    assert {r["direction"] for r in got} == {"in", "out"}
    for column, k in (("in", 0), ("out", 1)):
        series = [(r["packets"], r["bytes"]) for r in got if r["direction"] == column]
        assert series == [w[k] for w in want], column
    assert len(want) >= 3
    assert want != [(w[1], w[0]) for w in want], "the directions should differ"


def iostat_by_direction(pcap) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """`tshark -z io,stat,1,DIR==1,DIR==2`: per 1 s interval from the first packet, (frames,
    bytes) inbound and outbound."""
    d = "frame.packet_flags_direction"
    r = run(["tshark", "-r", pcap, "-n", "-q", "-z", f"io,stat,1,{d}==1,{d}==2"], timeout=SLOW)
    assert r.returncode == 0, r.describe()
    rows = []
    for line in r.out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and "<>" in cells[0]:
            assert int(cells[0].split("<>")[0]) == len(rows), line
            n = [int(c) for c in cells[1:]]
            rows.append(((n[0], n[1]), (n[2], n[3])))
    assert rows, r.out
    return rows
