"""The T-Labs split, for real: traffic hashed over N monitors by a "switch", one `tapdeck
record` per monitor, and `tapdeck merge` of their stores against a reference capture.

    netns gen ── gen0 ═ swin ── netns sw ─────────────── mon0 ═ cap0 ── netns m0
    (tcpreplay)       (tcpdump: the reference)  ── mon1 ═ cap1 ── netns m1
                      nftables netdev ingress:  ── mon2 ═ cap2 ── netns m2
                      fwd to symhash mod N map { 0 : "mon0", … }

(Each namespace's name is `tdsplit`, a tag of this run, and the name above.)

The generator replays a pcap of TCP connections (both directions: handshake, data each way,
close) and UDP exchanges between addresses of 198.18.0.0/15; nothing in the namespaces has an
address or IPv6, so the only frames on the links are the replayed ones. tcpreplay is pinned
to one CPU: every veth hop then goes through that CPU's backlog in order, so the monitors
stamp frames in the order the switch saw them. Each monitor records with its own store and
an explicit staging size (monitor 0 with n + 1 fanout threads and small rotated files, so
stores of several streams and files are merged too).

Asserted, with two and with three monitors: the reference holds exactly the generated frames;
`tapdeck merge` of the monitor stores holds exactly the reference's frames, same bytes, same
order (read back by our pcapng reader and counted by capinfos, and `tapdeck verify` accepts
the merged store); every TCP connection's frames, both directions, are in exactly one
monitor's store; the merge report's counts add up (per monitor: stored = merged, shares sum to
1, bytes equal the frames' lengths, no drops), and the manifest keeps each input, offset and
clock state. With two monitors also: `--offset` shifts one store by exactly the offset,
`--dedup` of the merge with one of its inputs drops exactly that input's frames, extract of
several stores with -f, `convert --merge` (one packet row per reference frame; a rerun
reuses the merge), and a truncated input store gives one error line.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import netlab
import pytest
from conftest import (
    Pkt,
    _csum,
    capinfos_count,
    one_error_line,
    read_packets,
    run,
    write_pcap,
)

TOOLS = ("ip", "nft", "tcpreplay", "tcpdump", "taskset", "ethtool", "capinfos")
TCP_CONNECTIONS = 48
UDP_EXCHANGES = 16


def missing_reason() -> str | None:
    if os.geteuid() != 0:
        return "the split needs root (network namespaces, veth pairs, nftables)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"the split needs {', '.join(missing)} (scripts/setup.sh installs nftables and tcpreplay)"
    return None


pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or "")


# --------------------------------------------------------------------------------------
# Traffic: frames with known 5-tuples
# --------------------------------------------------------------------------------------


def addr(host: int) -> bytes:
    """198.18.40.0/21 + host: inside 198.18.0.0/15."""
    return struct.pack("!I", (198 << 24 | 18 << 16 | 40 << 8) + host)


def mac(host: int) -> bytes:
    return bytes([0x02, 0, 0, 0, host >> 8 & 0xFF, host & 0xFF])


def l4_checksum(src: bytes, dst: bytes, proto: int, seg: bytes) -> int:
    return _csum(src + dst + struct.pack("!BBH", 0, proto, len(seg)) + seg)


def ip_frame(src: int, dst: int, proto: int, l4: bytes, ident: int) -> bytes:
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), ident & 0xFFFF, 0x4000, 64, proto,
                      0, addr(src), addr(dst))
    hdr = hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:]
    return mac(dst) + mac(src) + b"\x08\x00" + hdr + l4


def tcp_frame(src, dst, sport, dport, seq, ack, flags, payload, ident) -> bytes:
    seg = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4,
                      flags, 65535, 0, 0) + payload
    c = l4_checksum(addr(src), addr(dst), 6, seg)
    seg = seg[:16] + struct.pack("!H", c) + seg[18:]
    return ip_frame(src, dst, 6, seg, ident)


def udp_frame(src, dst, sport, dport, payload, ident) -> bytes:
    seg = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    c = l4_checksum(addr(src), addr(dst), 17, seg) or 0xFFFF
    seg = seg[:6] + struct.pack("!H", c) + seg[8:]
    return ip_frame(src, dst, 17, seg, ident)


def payload(rng: random.Random, n: int) -> bytes:
    h = n // 2
    return rng.randbytes(h) + bytes(n - h)


SYN, ACK, PSH, FIN = 0x02, 0x10, 0x08, 0x01


def tcp_connection(rng, c, s, cport, sport) -> list[bytes]:
    """Handshake, data both ways, close: every frame of one connection, in order."""
    ident = rng.getrandbits(16)
    cs, ss = rng.getrandbits(32), rng.getrandbits(32)
    out = []

    def send(from_client, flags, data=b""):
        nonlocal cs, ss, ident
        ident += 1
        if from_client:
            out.append(tcp_frame(c, s, cport, sport, cs, ss, flags, data, ident))
            cs += len(data) + (1 if flags & (SYN | FIN) else 0)
        else:
            out.append(tcp_frame(s, c, sport, cport, ss, cs, flags, data, ident))
            ss += len(data) + (1 if flags & (SYN | FIN) else 0)

    send(True, SYN)
    send(False, SYN | ACK)
    send(True, ACK)
    for _ in range(rng.randrange(2, 5)):
        send(True, PSH | ACK, payload(rng, rng.choice([40, 200, 600])))
        send(False, PSH | ACK, payload(rng, rng.choice([100, 900, 1460])))
    send(True, FIN | ACK)
    send(False, FIN | ACK)
    send(True, ACK)
    return out


def traffic(seed: int = 11) -> list[bytes]:
    """TCP connections and UDP exchanges, their frames interleaved at random (each flow's
    own frames stay in order)."""
    rng = random.Random(seed)
    flows = []
    for i in range(TCP_CONNECTIONS):
        flows.append(tcp_connection(rng, 1 + i % 20, 300 + i % 7, 20000 + i, rng.choice([80, 443, 2049, 22])))
    for i in range(UDP_EXCHANGES):
        c, s, cport, sport = 100 + i, 400 + i % 3, 30000 + i, rng.choice([53, 123, 2049])
        f = []
        for k in range(rng.randrange(2, 6)):
            f.append(udp_frame(c, s, cport, sport, payload(rng, rng.choice([30, 300])), 1000 + 2 * k))
            f.append(udp_frame(s, c, sport, cport, payload(rng, rng.choice([60, 1200])), 2000 + 2 * k))
        flows.append(f)
    frames = []
    while flows:
        f = rng.choice(flows)
        frames.append(f.pop(0))
        if not f:
            flows.remove(f)
    return frames


def flow_key(frame: bytes):
    """(proto, {ip:port, ip:port}) with both directions the same, or None if not IPv4."""
    if frame[12:14] != b"\x08\x00":
        return None
    ihl = (frame[14] & 0xF) * 4
    proto = frame[23]
    src, dst = frame[26:30], frame[30:34]
    sport, dport = struct.unpack("!HH", frame[14 + ihl:14 + ihl + 4])
    return proto, frozenset([(src, sport), (dst, dport)])


# --------------------------------------------------------------------------------------
# The network
# --------------------------------------------------------------------------------------


class SplitNet(netlab.Lab):
    """The generator, the switch with its nftables split over n monitor links, and n monitor
    namespaces (`self.ns["gen"]`, `["sw"]`, `["m0"]`...); removed on close, and what runs in
    them is killed first. Offloads off: frames stay the frames that were sent."""

    def __init__(self, n: int):
        self.n = n
        super().__init__("tdsplit", ["gen", "sw", *(f"m{i}" for i in range(n))])

    def build(self):
        ns = self.ns
        self.pair(ns["gen"], "gen0", ns["sw"], "swin")
        for i in range(self.n):
            self.pair(ns["sw"], f"mon{i}", ns[f"m{i}"], f"cap{i}")
        ports = ", ".join(f'{i} : "mon{i}"' for i in range(self.n))
        rules = f"""table netdev split {{
    chain ingress {{
        type filter hook ingress device "swin" priority 0; policy accept;
        fwd to symhash mod {self.n} map {{ {ports} }}
    }}
}}
"""
        r = run(["ip", "netns", "exec", ns["sw"], "nft", "-f", "-"], input=rules.encode())
        assert r.returncode == 0, f"nft refused the split:\n{rules}\n{r.describe()}"
        ends = [("gen", "gen0"), ("sw", "swin"), *((f"m{i}", f"cap{i}") for i in range(self.n))]
        for key, dev in ends:
            self.wait_carrier(ns[key], dev)

    def close(self):
        self.kill_inside()
        super().close()


def start(args, log: Path) -> subprocess.Popen:
    with open(log, "wb") as f:
        return subprocess.Popen([str(a) for a in args], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=f)


def stop(proc: subprocess.Popen, log: Path, what: str) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"{what} did not stop within 30 s:\n{log.read_text()[-2000:]}")
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{log.read_text()[-2000:]}"


def wait_file_text(path: Path, text: str, proc, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            pytest.fail(f"{what} exited at start:\n{path.read_text()[-2000:]}")
        time.sleep(0.05)
    pytest.fail(f"{what} not ready after {timeout}s:\n{path.read_text()[-2000:]}")


def capture_split(tapdeck, tmp: Path, n: int, frames: list[bytes]):
    """Runs the split once; returns (reference pcap, monitor stores)."""
    pcap = write_pcap(tmp / "traffic.pcap",
                      [Pkt(1, 1_795_413_454_000_000_000 + i * 1000, len(f), f)
                       for i, f in enumerate(frames)])
    ref = tmp / "reference.pcap"
    stores = [tmp / f"mon{i}" for i in range(n)]
    procs = []
    try:
        with SplitNet(n) as net:
            ref_log = tmp / "tcpdump.log"
            # --immediate-mode: packets never wait in a half-full ring block at the stop.
            tcpdump = start(["ip", "netns", "exec", net.ns["sw"], "tcpdump", "-i", "swin", "-s", "0",
                             "--immediate-mode", "-U", "-n", "-Z", "root", "-w", ref], ref_log)
            procs.append(tcpdump)
            wait_file_text(ref_log, "listening on", tcpdump, "tcpdump")
            recorders = []
            for i, store in enumerate(stores):
                # The kernel's fanout hash is nft's symhash too, each scaled to a range:
                # monitor 0 gets the lowest 1/n of it, which a fanout splits only with more
                # than n threads. With n + 1 its store gets two streams. At this low rate each
                # ring block is retired by the 10 ms block timeout with a few packets in it, so
                # the ring's block count is how long a capture thread may go unscheduled on a
                # busy machine before the kernel drops: 64 blocks give 640 ms (8 gave 80 ms,
                # and a loaded CI machine once dropped half of monitor 0's packets).
                extra = ["--threads", str(n + 1), "--rotate-size", "16KiB"] if i == 0 else []
                log = tmp / f"mon{i}.log"
                p = start(["ip", "netns", "exec", net.ns[f"m{i}"], tapdeck.bin, "record", "-i",
                           f"cap{i}", "--store", store, "-q", "--staging", "16MiB",
                           "--chunk-size", "1MiB", "--ring-blocks", "64", "--ring-block-size",
                           "256KiB", "--codec", "zstd:1", *extra], log)
                procs.append(p)
                recorders.append((p, log))
            for (p, log), store in zip(recorders, stores):
                # The manifest is written once the sockets are open.
                wait_for_path(store / "manifest.json", p, log)
            time.sleep(0.5)
            r = run(["ip", "netns", "exec", net.ns["gen"], "taskset", "-c", "0", "tcpreplay", "-q",
                     "-i", "gen0", "--pps", "4000", pcap], timeout=60)
            assert r.returncode == 0, r.describe()
            time.sleep(0.5)
            for (p, log), i in zip(recorders, range(n)):
                stop(p, log, f"tapdeck record on monitor {i}")
                # Every later comparison assumes each monitor stored all it was given.
                summary = log.read_text()
                assert re.search(r"packets: seen \d+  stored \d+  dropped 0 ", summary), (
                    f"monitor {i} dropped packets, so the merge cannot equal the reference:\n"
                    + summary[-1500:]
                )
            stop(tcpdump, ref_log, "tcpdump")
            text = ref_log.read_text()
            assert re.search(r"^0 packets dropped by kernel", text, re.MULTILINE), text
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return ref, stores


def wait_for_path(path: Path, proc, log: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"tapdeck record exited at start:\n{log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{path} not written after {timeout}s")
        time.sleep(0.05)


def extract(tapdeck, tmp: Path, name: str, *stores, bpf: str = "") -> list[Pkt]:
    out = tmp / f"{name}.pcapng"
    r = tapdeck("extract", *stores, "-f", bpf, "-w", out, timeout=120)
    assert r.returncode == 0, r.describe()
    return read_packets(out)


def merge(tapdeck, out: Path, *args) -> dict:
    r = tapdeck("merge", *args, "--out", out, "--json", timeout=120)
    assert r.returncode == 0, r.describe()
    assert "panicked" not in r.stderr
    return json.loads(r.stdout)


# --------------------------------------------------------------------------------------
# The test
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3])
def test_split_over_monitors_merges_back_to_the_reference(tapdeck, tmp_path, n):
    frames = traffic()
    ref_path, stores = capture_split(tapdeck, tmp_path, n, frames)

    # The reference is exactly what was replayed: nothing else was on the link.
    ref = read_packets(ref_path)
    assert [p.data for p in ref] == frames

    # Monitor 0's store holds several streams and files: the merge merges those too.
    names = [p.name for p in stores[0].iterdir() if ".pcapng" in p.name]
    assert {n_.split("-")[1] for n_ in names} >= {"s00", "s01"}, names
    assert len(names) >= 3, names

    # Each monitor's store, and which monitor holds which flow.
    per_monitor = [extract(tapdeck, tmp_path, f"mon{i}", s) for i, s in enumerate(stores)]
    holders: dict = {}
    for i, pkts in enumerate(per_monitor):
        for p in pkts:
            holders.setdefault(flow_key(p.data), {}).setdefault(i, 0)
            holders[flow_key(p.data)][i] += 1
    want: dict = {}
    for f in frames:
        want[flow_key(f)] = want.get(flow_key(f), 0) + 1
    assert set(holders) == set(want)
    tcp = [k for k in want if k[0] == 6]
    assert len(tcp) == TCP_CONNECTIONS
    for k, count in want.items():
        # Both directions of every connection (and UDP exchange) at one monitor, all of it.
        assert len(holders[k]) == 1, f"flow {k} split over monitors {holders[k]}"
        assert sum(holders[k].values()) == count
    used = {i for h in holders.values() for i in h}
    assert used == set(range(n)), f"the hash used monitors {used} of {n}"
    assert sum(len(p) for p in per_monitor) == len(frames)

    # The merge: exactly the reference's frames, same bytes, same order.
    merged_store = tmp_path / "merged"
    report = merge(tapdeck, merged_store, *stores)
    merged = extract(tapdeck, tmp_path, "merged", merged_store)
    assert [p.data for p in merged] == [p.data for p in ref]
    assert [p.orig_len for p in merged] == [p.orig_len for p in ref]
    ts = [p.ts_ns for p in merged]
    assert ts == sorted(ts)
    assert capinfos_count(tmp_path / "merged.pcapng") == len(frames)
    v = tapdeck.verify(merged_store)
    assert v.returncode == 0, v.describe()

    # The report adds up.
    assert report["packets_written"] == len(frames)
    assert report["duplicates"] == 0
    assert len(report["inputs"]) == n
    for i, inp in enumerate(report["inputs"]):
        pkts = per_monitor[i]
        assert inp["label"] == f"mon{i}"
        assert inp["packets"] == len(pkts) == inp["merged"]["packets"]
        assert inp["merged"]["wire_bytes"] == sum(p.orig_len for p in pkts)
        assert inp["merged"]["captured_bytes"] == sum(len(p.data) for p in pkts)
        assert inp["first_ts_ns"] == pkts[0].ts_ns and inp["last_ts_ns"] == pkts[-1].ts_ns
        assert (inp["dropped_kernel"], inp["dropped_staging_full"], inp["dropped_write_error"]) == (0, 0, 0)
        assert inp["offset_ns"] == 0
        assert inp["packet_share"] == pytest.approx(len(pkts) / len(frames))
    assert sum(i["packet_share"] for i in report["inputs"]) == pytest.approx(1.0)
    assert sum(i["byte_share"] for i in report["inputs"]) == pytest.approx(1.0)
    # Flows interleave, so every pair of monitors overlaps in time.
    assert len(report["spans"]) == n * (n - 1) // 2
    assert all(s["overlap_ns"] is not None and s["gap_ns"] is None for s in report["spans"])

    # The manifest names the inputs, offsets and clock states.
    manifest = json.loads((merged_store / "manifest.json").read_text())
    m = manifest["merge"]
    assert m["complete"] is True
    assert [i["label"] for i in m["inputs"]] == [f"mon{i}" for i in range(n)]
    assert [i["packets"] for i in m["inputs"]] == [len(p) for p in per_monitor]
    for i, s in zip(m["inputs"], stores):
        assert i["store"] == str(s.resolve())
        assert i["offset_ns"] == 0
        src_manifest = json.loads((s / "manifest.json").read_text())
        assert i["clock"] == src_manifest.get("clock")
    # Each output interface says which monitor it came from.
    descriptions = descriptions_of(tmp_path / "merged.pcapng")
    assert {d.split(" stream ")[0] for d in descriptions} == {f"mon{i}" for i in range(n)}

    if n == 2:
        check_offset_dedup_multi_extract_and_damage(tapdeck, tmp_path, stores, per_monitor, ref)


def descriptions_of(path: Path) -> list[str]:
    """if_description of every IDB of a pcapng file."""
    buf = path.read_bytes()
    out, off = [], 0
    while off + 12 <= len(buf):
        btype, blen = struct.unpack("<II", buf[off:off + 8])
        if btype == 1:
            body, o = buf[off + 8:off + blen - 4], 8
            while o + 4 <= len(body):
                code, ln = struct.unpack("<HH", body[o:o + 4])
                if code == 0:
                    break
                if code == 3:
                    out.append(body[o + 4:o + 4 + ln].decode())
                o += 4 + ((ln + 3) & ~3)
        off += blen
    return out


def check_offset_dedup_multi_extract_and_damage(tapdeck, tmp, stores, per_monitor, ref):
    # --offset: mon1's clock "ran 1 s behind": every one of its packets moves by exactly
    # 1 s, and since the traffic lasted well under a second, all of them come after mon0's.
    shifted = tmp / "shifted"
    report = merge(tapdeck, shifted, *stores, "--offset", f"{stores[1]}=+1s")
    assert report["inputs"][1]["offset_ns"] == 10**9
    got = extract(tapdeck, tmp, "shifted", shifted)
    want = per_monitor[0] + [Pkt(p.linktype, p.ts_ns + 10**9, p.orig_len, p.data)
                             for p in per_monitor[1]]
    assert [(p.ts_ns, p.data) for p in got] == [(p.ts_ns, p.data) for p in want]
    manifest = json.loads((shifted / "manifest.json").read_text())
    assert [i["offset_ns"] for i in manifest["merge"]["inputs"]] == [0, 10**9]
    # Spans moved apart: a gap now, and the report says how long.
    (span,) = report["spans"]
    assert span["gap_ns"] == per_monitor[1][0].ts_ns + 10**9 - per_monitor[0][-1].ts_ns

    # --dedup: the merged store merged again with mon0 holds every mon0 frame twice, at
    # the same time: exactly mon0's frames are dropped, and the result is the reference.
    merged = tmp / "merged"
    dedup = tmp / "dedup"
    report = merge(tapdeck, dedup, merged, stores[0], "--dedup")
    assert report["duplicates"] == len(per_monitor[0])
    assert report["inputs"][1]["merged"]["duplicates"] == len(per_monitor[0])
    assert report["inputs"][1]["merged"]["packets"] == 0
    assert report["packets_written"] == len(ref)
    got = extract(tapdeck, tmp, "dedup", dedup)
    assert [p.data for p in got] == [p.data for p in ref]
    # Without --dedup the copies stay.
    both = merge(tapdeck, tmp / "both", merged, stores[0])
    assert both["packets_written"] == len(ref) + len(per_monitor[0])

    # extract of several stores (filter with -f) is the merge, filtered.
    udp = extract(tapdeck, tmp, "multi-udp", *stores, bpf="udp")
    assert [p.data for p in udp] == [p.data for p in ref if p.data[23] == 17]
    # Without -f, a second store is not taken for a filter word.
    r = tapdeck("extract", stores[0], stores[1], "-w", tmp / "x.pcapng")
    assert r.returncode != 0
    assert "-f" in one_error_line(r.stderr)

    # convert --merge: the monitors merged inside the dataset, then converted; every
    # reference frame becomes one packet row; a rerun reuses the merge and converts nothing.
    ds = tmp / "dataset"
    r = tapdeck("convert", *stores, "--merge", "--out", ds, "--json", "-q", timeout=120)
    assert r.returncode == 0, r.describe()
    first = json.loads(r.stdout)
    assert first["counts"]["packets"] == len(ref)
    inside = extract(tapdeck, tmp, "dataset-merge", ds / "_merged" / "store")
    assert [p.data for p in inside] == [p.data for p in ref]
    r = tapdeck("convert", *stores, "--merge", "--out", ds, "--json", "-q", timeout=120)
    assert r.returncode == 0, r.describe()
    again = json.loads(r.stdout)
    assert (again["converted"], again["skipped"]) == (0, first["sources"])

    # A damaged input (the last use of mon1's store): its file's trailer cut off. One line
    # names the file; nothing is written (the merge stops before it starts).
    victim = min(p for p in stores[1].iterdir() if p.name.endswith(".zst"))
    victim.write_bytes(victim.read_bytes()[:-40])
    out = tmp / "from-broken"
    r = tapdeck("merge", stores[0], stores[1], "--out", out)
    assert r.returncode == 1, r.describe()
    line = one_error_line(r.stderr)
    assert victim.name in line and "tapdeck verify" in line, line
    assert not (out / "manifest.json").exists()
