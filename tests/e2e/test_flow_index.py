"""Indexed extract (issue 17): every stored chunk carries a flow index (addresses, ports,
protocols, VLANs), and `extract` with a filter reads only the chunks whose index can match.

The oracle is tcpdump on the original trace: for every filter, the indexed extract, the same
extract with `--no-index`, and `tcpdump -r ORIGINAL FILTER` give the same packets (time and
bytes). The trace has locality (each client is active in one stretch of time, as real hosts
are), IPv4 and IPv6, VLAN-tagged frames, ARP and IPv4 fragments, so selective filters really
skip chunks, and the chunks they skip are counted (`--explain`). Stores are written through
both writer paths (compressed chunks indexed by the compressors, `--codec raw` ones by the
writer), and without an index (`--no-flow-index`, as older stores), alone and merged with an
indexed store. `verify` checks every chunk's index against its packets.
"""

from __future__ import annotations

import random
import re
import struct
import subprocess

import pytest
from conftest import Pkt, _csum, frame, ip4, write_pcap

T0 = 1_795_413_430_000_000_000
N = 40_000


def vlan(f: bytes, vid: int) -> bytes:
    return f[:12] + struct.pack("!HH", 0x8100, vid) + f[12:]


def ipv6_udp(src: int, dst: int, sport: int, dport: int, payload: bytes) -> bytes:
    a = bytes.fromhex("20010db8000000000000000000000000")
    s, d = a[:12] + struct.pack("!I", src), a[:12] + struct.pack("!I", dst)
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack("!IHBB", 6 << 28, len(udp), 17, 64) + s + d
    return bytes.fromhex("020000000002020000000001") + b"\x86\xdd" + ip + udp


def arp(spa: int, tpa: int) -> bytes:
    body = (
        struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1)
        + bytes(6)
        + ip4(spa)
        + bytes(6)
        + ip4(tpa)
    )
    return bytes.fromhex("ffffffffffff020000000001") + b"\x08\x06" + body


def fragment(src: int, dst: int, offset8: int, more: bool, data: bytes) -> bytes:
    flags = (0x2000 if more else 0) | offset8
    hdr = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(data),
        7,
        flags,
        64,
        17,
        0,
        ip4(src),
        ip4(dst),
    )
    hdr = hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:]
    return bytes.fromhex("020000000002020000000001") + b"\x08\x00" + hdr + data


def trace(path):
    """Clients 198.18.B.H, each active in one 1/8 of the trace; servers 198.19.0.1-4."""
    rng = random.Random(17)
    pkts = []
    for i in range(N):
        phase = i * 8 // N
        client = (198 << 24) | (18 << 16) | (phase << 8) | rng.randrange(1, 60)
        server = (198 << 24) | (19 << 16) | rng.randrange(1, 5)
        kind = rng.random()
        if kind < 0.45:
            f = frame(
                rng,
                "tcp",
                client,
                server,
                20000 + rng.randrange(500),
                [80, 443, 22][phase % 3],
                bytes(rng.randrange(0, 200)),
            )
        elif kind < 0.75:
            f = frame(
                rng,
                "udp",
                client,
                server,
                30000 + rng.randrange(500),
                [53, 123, 2049][phase % 3],
                bytes(rng.randrange(0, 300)),
            )
        elif kind < 0.85:
            f = ipv6_udp(client & 0xFFFF, 0x99, 40000 + phase, 5353 + phase, bytes(40))
        elif kind < 0.93:
            f = vlan(
                frame(rng, "udp", client, server, 1000, 514, bytes(20)), 100 + phase
            )
        elif kind < 0.97:
            f = arp(client, server)
        else:
            f = fragment(
                client, server, 0 if kind < 0.985 else 185, kind < 0.985, bytes(48)
            )
        pkts.append(Pkt(1, T0 + i * 50_000, len(f), f))
    write_pcap(path, pkts)
    return path


FILTERS = [
    "host 198.18.3.7",
    "host 198.18.6.20 and tcp",
    "src net 198.18.5.0/24 and udp",
    "dst host 198.19.0.2 and port 443",
    "portrange 2049-2050",
    "udp port 5356",
    "ip6",
    "ip6 and host 2001:db8::3:14",
    "vlan 104",
    "vlan and host 198.18.1.5",
    "arp",
    "icmp",
    "not host 198.18.0.1",
    "(tcp port 22 or udp port 123) and net 198.18.4.0/24",
    "ip proto 17 and not port 53",
    "host 198.18.2.9 or len > 1400",  # not answerable: read whole
]


@pytest.fixture(scope="module")
def stores(tapdeck_bin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flowindex")
    original = trace(tmp / "original.pcap")
    out = {"original": original}
    for name, extra in [
        ("zstd", []),
        ("raw", ["--codec", "raw"]),
        ("unindexed", ["--no-flow-index"]),
    ]:
        store = tmp / name
        r = subprocess.run(
            [
                tapdeck_bin,
                "record",
                "-r",
                original,
                "--store",
                store,
                "-q",
                "--chunk-size",
                "512KiB",
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert r.returncode == 0, r.stderr
        out[name] = store
    return out


def tcpdump_lines(path, flt="") -> list[str]:
    r = subprocess.run(
        ["tcpdump", "-r", str(path), "-nn", "-tt", "-xx", *([flt] if flt else [])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def extract(tapdeck, out, *args) -> tuple[list[str], dict]:
    r = tapdeck("extract", *args, "-w", out, "--explain", timeout=120)
    assert r.returncode == 0, r.describe()
    m = re.search(
        r"explain: (\d+) of (\d+) chunks in the window read, (\d+) ruled out", r.stderr
    )
    assert m, r.stderr
    read, total, pruned = map(int, m.groups())
    return tcpdump_lines(out), {
        "read": read,
        "total": total,
        "pruned": pruned,
        "stderr": r.stderr,
    }


@pytest.mark.parametrize("store", ["zstd", "raw"])
def test_indexed_extract_equals_tcpdump_and_skips_chunks(
    tapdeck, stores, tmp_path, store
):
    pruned_somewhere = 0
    for i, flt in enumerate(FILTERS):
        want = tcpdump_lines(stores["original"], flt)
        got, ex = extract(tapdeck, tmp_path / f"i{i}.pcapng", stores[store], "-f", flt)
        assert got == want, (
            f"{store}: indexed extract of `{flt}` differs from tcpdump "
            f"({len(got)} vs {len(want)} lines)"
        )
        full, ex_full = extract(
            tapdeck, tmp_path / f"n{i}.pcapng", stores[store], "-f", flt, "--no-index"
        )
        assert full == got, f"--no-index differs from the indexed extract for `{flt}`"
        assert ex_full["pruned"] == 0 and ex_full["read"] == ex_full["total"]
        if "len >" in flt or flt.startswith("not "):
            assert ex["pruned"] == 0, (
                f"`{flt}` cannot be answered by the index: {ex['stderr']}"
            )
        pruned_somewhere += ex["pruned"]
        if flt == "host 198.18.3.7":
            # One client of one eighth of the trace: most chunks go unread.
            assert ex["pruned"] >= ex["total"] * 6 // 10, ex["stderr"]
    assert pruned_somewhere > 0


def test_a_store_without_index_is_read_whole_and_merges_with_an_indexed_one(
    tapdeck, stores, tmp_path
):
    flt = "host 198.18.3.7"
    want = tcpdump_lines(stores["original"], flt)
    got, ex = extract(tapdeck, tmp_path / "old.pcapng", stores["unindexed"], "-f", flt)
    assert got == want
    assert ex["pruned"] == 0 and "(no flow index)" in ex["stderr"], ex["stderr"]
    # Two stores holding the same packets, merged by time: every packet twice.
    got, ex = extract(
        tapdeck,
        tmp_path / "both.pcapng",
        stores["unindexed"],
        stores["zstd"],
        "-f",
        flt,
    )
    assert ex["pruned"] > 0, "the indexed store's chunks are skipped"
    times = [line.split()[0] for line in got if not line.startswith("\t")]
    want_times = [line.split()[0] for line in want if not line.startswith("\t")]
    assert sorted(times) == sorted(want_times * 2)


@pytest.mark.parametrize("store", ["zstd", "raw", "unindexed"])
def test_verify_checks_every_chunk_index(tapdeck, stores, store):
    r = tapdeck("verify", stores[store])
    assert r.returncode == 0, r.describe()
