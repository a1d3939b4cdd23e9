"""Header forwarding on a hostile network (issue 19): a real exporter forwards through a
router namespace to `tapdeck collect --allow EXPORTER`, while an attacker on another subnet
sends forged IPFIX with the exporter's source address through a raw socket (the router does
no source filtering, as most networks don't).

    netns G (tcpreplay) gen ─veth─ cap  netns E (tapdeck export -i cap)
                                        up 198.18.51.1 ─veth─ 198.18.51.254 ┐
    netns A (ipfix_forge.py)   at 198.18.53.1 ─veth─ 198.18.53.254 ── netns R (router)
                                        dn 198.18.52.2 ─veth─ 198.18.52.254 ┘
                                        netns C (tapdeck collect --allow 198.18.51.1)

Oracle: the generated frames themselves; every one must be in the store, cut to the snap
length, whatever the attacker sends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import fwdtools
import pytest
from conftest import QUICK, SLOW, gen_packets, need, wait_for, write_pcap
from fwdtools import last_stats, ledger, start_collector, stop

HERE = Path(__file__).resolve().parent
SNAP = 128
# Engineers sharing a machine give each run its own namespace prefix and port.
PORT = int(os.environ.get("TAPDECK_HOSTILE_PORT", "4739"))
NS_PREFIX = os.environ.get("TAPDECK_HOSTILE_NS", "tdh")
EXPORTER = "198.18.51.1"
COLLECTOR = "198.18.52.2"
ATTACKER = "198.18.53.1"
LISTEN = f"{COLLECTOR}:{PORT}"  # the collector's, which takes the exporter's datagrams



class HostileNet(fwdtools.Namespaces):
    """The namespaces of the drawing above; removed on close."""

    def __init__(self):
        super().__init__(NS_PREFIX, "gerac")

    def build(self):
        for ns in self.ns.values():
            for k in ("all", "default"):
                self.sysctl(ns, f"net.ipv4.conf.{k}.rp_filter=0")
        self.sysctl(self.ns["r"], "net.ipv4.ip_forward=1")
        self.pair(self.ns["g"], "gen", self.ns["e"], "cap", fwdtools.JUMBO)
        for dev, ns, addr, peer, gw in (("eup", "e", EXPORTER, "r1", "198.18.51.254"),
                                        ("cdn", "c", COLLECTOR, "r2", "198.18.52.254"),
                                        ("att", "a", ATTACKER, "r3", "198.18.53.254")):
            self.pair(self.ns[ns], dev, self.ns["r"], peer, fwdtools.JUMBO)
            self.address(self.ns[ns], dev, f"{addr}/24")
            self.address(self.ns["r"], peer, f"{gw}/24")
            self.route(self.ns[ns], "198.18.0.0/15", "via", gw)
            self.sysctl(self.ns["r"], f"net.ipv4.conf.{peer}.rp_filter=0")
        self.sysctl(self.ns["c"], "net.ipv4.conf.cdn.rp_filter=0")

    def forge(self, mode, *args, src=EXPORTER, timeout=SLOW):
        """Runs the forger in the attacker's namespace (with the exporter's address unless
        `src` says otherwise); returns the datagrams it sent."""
        r = self.ns_sh(self.ns["a"], sys.executable, HERE / "ipfix_forge.py", mode, "--src",
                       src, "--dst", COLLECTOR, "--port", str(PORT), *map(str, args),
                       timeout=timeout)
        assert r.returncode == 0, r.describe()
        return int(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def hnet(procs):
    need("tcpreplay")
    n = HostileNet()
    yield n
    fwdtools.kill_all(procs)
    n.close()


def start_exporter(tapdeck, net, stats, procs, *args):
    return fwdtools.start_exporter(tapdeck, net, stats, procs, SNAP, "--to",
                                   f"{COLLECTOR}:{PORT}", *args)





def real_stream(store) -> dict:
    [s] = [s for s in ledger(store)["streams"] if s["exporter"] == EXPORTER and s["domain"] == 1]
    return s


def stored_frames(tapdeck, store, tmp_path) -> list:
    from conftest import read_packets
    out = tmp_path / f"{Path(store).name}-all.pcapng"
    r = tapdeck("extract", store, "-w", out)
    assert r.returncode == 0, r.describe()
    return read_packets(out)


def run_real_exporter(tapdeck, hnet, procs, tmp_path, store, n, pps, during):
    """Replays `n` generated frames at `pps` into the exporter's interface while `during()`
    runs (the attack); returns the frames, the exporter's final stats and its stderr."""
    pkts = gen_packets(n, seed=19)
    src = write_pcap(tmp_path / "gen.pcap", pkts)
    stats = tmp_path / "export.jsonl"
    exp = start_exporter(tapdeck, hnet, stats, procs)
    rep = hnet.popen("g", "tcpreplay", "-q", "-i", "gen", f"--pps={pps}", src,
                     stdout=subprocess.DEVNULL)
    procs.append(rep)
    during()
    assert rep.wait(timeout=SLOW) == 0, rep.stderr.read().decode()
    wait_for(lambda: last_stats(stats)["observed"] >= n, QUICK, "the exporter to see every frame")
    err = stop(exp)
    final = last_stats(stats)
    assert final["observed"] == n and final["sent"] == n, (final, err)
    # Every record the exporter sent has arrived once the ledger counts them all.
    records = final["collectors"][0]["records"]
    wait_for(lambda: (Path(store) / "collector.json").exists()
             and real_stream(store)["records"] + real_stream(store)["lost"] >= records, QUICK,
             "the collector to count every record the exporter sent")
    return pkts, final


def assert_every_frame_stored(tapdeck, store, tmp_path, pkts):
    stored = stored_frames(tapdeck, store, tmp_path)
    want = Counter(p.data[:SNAP] for p in pkts)
    got = Counter(p.data for p in stored if p.data in want)
    missing = sum((want - got).values())
    assert missing == 0, f"{missing} of {len(pkts)} real frames not stored"
    return stored


def test_forged_sequence_numbers_and_restarts_never_cost_a_real_packet(tapdeck, hnet, procs,
                                                                       tmp_path):
    """130 forged header-only messages with far-apart sequence numbers and 7 forged restarts
    (a statistics record with a later start time, sequence numbers from 0), in bursts while
    the real exporter forwards 4000 frames: every real frame is stored; the real stream counts
    no loss and no restart (the forged lines are refuted by the real exporter's next message
    and counted as anomalies), and records + lost = what the exporter sent."""
    store = tmp_path / "store"
    c = start_collector(tapdeck, hnet, "c", LISTEN, store, procs, "--allow", EXPORTER)

    def attack():
        for burst in range(7):
            hnet.forge("headers", "--count", 130 // 7 + 1)
            hnet.forge("restart", "--count", 1, "--start-ms",
                       int(time.time() * 1000) + burst * 10)
            time.sleep(0.15)  # spread over the replay: bursts between real messages

    pkts, final = run_real_exporter(tapdeck, hnet, procs, tmp_path, store, 4000, 1500, attack)
    err = stop(c)
    s = real_stream(store)
    to = final["collectors"][0]
    print(f"forged seq: exporter sent {to['records']} records ({to['packets']} packets); "
          f"collector: records {s['records']}, lost {s['lost']}, restarts {s['restarts']}, "
          f"jumps {s['jumps']}, anomalies {s['anomalies']}, duplicates {s['duplicates']}, "
          f"packets {s['packets']}")
    assert_every_frame_stored(tapdeck, store, tmp_path, pkts)
    assert s["packets"] >= len(pkts)
    assert (s["lost"], s["restarts"], s["jumps"]) == (0, 0, 0), s
    assert s["records"] == to["records"], (s, to)
    assert s["anomalies"] >= 7 * 19, s
    assert "sequence anomaly" in err
    assert err.count("sequence anomaly") < 20, "logged once per episode"


def vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def store_files(store) -> list[Path]:
    return [p for p in Path(store).rglob("*") if p.is_file() and ".pcap" in p.name]


# mode, forged datagrams, extra forger arguments
FLOODS = {
    "templates": (3000, []),  # 60 templates each, every datagram from a new source port
    "domains": (20000, []),  # a new observation domain in every datagram
    "interfaces": (10000, ["--domain", 77]),  # a report on a new interface id in every one
    "names": (2000, ["--domain", 77]),  # 40 interface names each
}
MEMORY_BOUND_KIB = 512 * 1024


@pytest.mark.parametrize("mode", list(FLOODS))
def test_state_floods_stay_bounded_and_cost_no_real_packet(tapdeck, hnet, procs, tmp_path, mode):
    """A flood of new state (templates, observation domains, interface ids, interface names)
    with the exporter's forged source address while the real exporter forwards 2000 frames:
    every real frame is stored, the collector's peak resident memory (VmHWM, with
    --staging 64MiB) stays under the 512 MiB the docs state, the store holds a bounded number
    of files, and what went over a cap is counted under `refused`."""
    store = tmp_path / "store"
    c = start_collector(tapdeck, hnet, "c", LISTEN, store, procs, "--allow", EXPORTER)
    count, extra = FLOODS[mode]
    sent = []

    def attack():
        # Let the real exporter's templates and interface arrive first, as they would.
        def real_packets():
            if not (Path(store) / "collector.json").exists():
                return 0
            return sum(s["packets"] for s in ledger(store)["streams"]
                       if s["exporter"] == EXPORTER and s["domain"] == 1)
        wait_for(real_packets, QUICK, "the first real packets")
        sent.append(hnet.forge(mode, "--count", count, "--pps", 8000, *extra))

    t0 = time.monotonic()
    pkts, final = run_real_exporter(tapdeck, hnet, procs, tmp_path, store, 2000, 500, attack)
    hwm = vm_hwm_kib(c.pid)
    err = stop(c)
    files = store_files(store)
    led = ledger(store)
    refused = led.get("refused", {}).get(EXPORTER, {})
    streams = len(led["streams"])
    history = (Path(store) / "collector.jsonl").stat().st_size
    print(f"flood {mode}: {sent[0]} forged datagrams in {time.monotonic() - t0:.1f}s; "
          f"collector VmHWM {hwm / 1024:.1f} MiB; {len(files)} store files; {streams} streams; "
          f"refused {refused}; collector.jsonl {history} bytes")
    assert_every_frame_stored(tapdeck, store, tmp_path, pkts)
    assert hwm < MEMORY_BOUND_KIB, f"{hwm} KiB"
    assert len(files) <= 20, files
    assert streams <= 32
    if mode == "templates":
        assert refused.get("templates", 0) > 0, led
    elif mode == "domains":
        assert refused.get("domains", 0) >= count - 32, led
    elif mode == "interfaces":
        assert refused.get("interfaces", 0) >= count - 16, led
    else:
        assert refused.get("names", 0) > 0, led
    assert err.count("over the caps") <= 1 and err.count("logged once") <= 6, err[-3000:]


FLOODER = "198.18.53.1"  # the attacker's own address, allowed: a second exporter
FLOOD_PER = 8  # packet reports per flood message, 1000 random octets each


def test_a_flood_from_another_exporter_is_shed_as_its_own_loss(tapdeck, hnet, procs, tmp_path):
    """A second allowed exporter floods valid data (8 reports of 1000 random octets per
    message, 2000 messages/s: 16 MB/s) against an 8 MiB staging pool whose store takes 3 MB/s
    (--bench-disk-limit), while the real exporter forwards 3000 frames at 750/s. The flood
    is over its share of what the pool drains and the real exporter within it, so: every real
    frame is stored (bytes equal to the frames replayed, cut to the snap length), the real
    stream sheds nothing and loses nothing, the flood's losses are its own (`shed`, logged
    once), the store drops nothing as staging_full, and per exporter what it sent equals what
    was stored plus its counted losses."""
    store = tmp_path / "store"
    # 16 segments of 512 KiB; a partial chunk goes out each second (each holds a segment).
    c = start_collector(tapdeck, hnet, "c", LISTEN, store, procs, "--allow", EXPORTER,
                        "--allow", FLOODER, "--bench-disk-limit", "3MB", staging="8MiB",
                        chunk="512KiB", flush="1")
    flood_messages = 8000
    sent = []

    def flood():
        # Once the real exporter forwards, for as long as the replay lasts (4 s).
        wait_for(lambda: last_stats(tmp_path / "export.jsonl")["sent"] > 0, QUICK,
                 "the real exporter to forward")
        sent.append(hnet.forge("data", "--count", flood_messages, "--pps", 2000, "--per",
                               FLOOD_PER, src=FLOODER))

    pkts, final = run_real_exporter(tapdeck, hnet, procs, tmp_path, store, 3000, 750, flood)
    flood_packets = sent[0] * FLOOD_PER

    def flood_stream():
        return next((s for s in ledger(store)["streams"] if s["exporter"] == FLOODER), None)
    wait_for(lambda: (s := flood_stream()) and s["records"] + s["lost"] >= flood_packets,
             QUICK, "the collector to count every flood message")
    err = stop(c)
    real, fl = real_stream(store), flood_stream()
    to = final["collectors"][0]
    totals = last_stats(Path(store) / "stats.jsonl")["totals"]
    print(f"share: real sent {to['packets']} packets ({to['records']} records): stored "
          f"{real['packets']}, shed {real['shed']}, lost {real['lost']}; flood sent "
          f"{flood_packets}: stored {fl['packets']}, shed {fl['shed']}, lost {fl['lost']}; "
          f"store: stored {totals['stored']}, staging_full {totals['dropped']['staging_full']}")
    assert_every_frame_stored(tapdeck, store, tmp_path, pkts)
    # The real exporter: within its share, nothing shed, nothing lost, every record counted.
    assert (real["shed"], real["lost"]) == (0, 0), real
    assert real["records"] == to["records"] and real["packets"] == to["packets"] == len(pkts)
    # The flood: shed (most of it), counted as its own; sent = stored + shed + lost exactly
    # (its messages hold packet reports only, so records are packets).
    assert fl["shed"] > flood_packets // 2, fl
    assert fl["records"] + fl["lost"] == flood_packets, fl
    assert fl["packets"] + fl["shed"] + fl["lost"] == flood_packets, fl
    # The store: no drop a share rule could have avoided; it holds exactly what was handed
    # to it, and so many flood frames.
    assert totals["dropped"]["staging_full"] == 0, totals
    assert totals["stored"] == real["packets"] + fl["packets"], (totals, real, fl)
    stored = stored_frames(tapdeck, store, tmp_path)
    assert sum(len(p.data) == 1000 for p in stored) == fl["packets"]
    assert err.count("more than its share") == 1 and FLOODER in err, err[-3000:]


def test_format_pcap_is_refused_at_start(tapdeck, tmp_path):
    """`collect --format pcap` would have to exit on the first report of a second interface
    (a remote shutdown): it is refused at start instead, in one line."""
    from conftest import one_error_line
    r = tapdeck("collect", "--listen", "127.0.0.1:0", "--store", tmp_path / "s", "--format",
                "pcap")
    assert r.returncode == 1 and "classic pcap holds one" in one_error_line(r.stderr), r.stderr


def test_collector_kill9_recovery_user_and_private_files(tapdeck, hnet, procs, tmp_path):
    """`collect --user nobody` runs as nobody (uid from /proc) and its store files are 0640;
    killed with SIGKILL mid-stream, the restarted collector finalizes the file it left
    incomplete (one log line) before collecting again: no `.partial` remains, `verify` passes,
    and no packet is stored twice."""
    import pwd
    import shutil
    import stat
    import tempfile
    nobody = pwd.getpwnam("nobody")
    base = Path(tempfile.mkdtemp(prefix="tapdeck-user-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        store = base / "store"
        store.mkdir()
        os.chown(store, nobody.pw_uid, nobody.pw_gid)
        c = start_collector(tapdeck, hnet, "c", LISTEN, store, procs, "--allow", EXPORTER,
                            "--user", "nobody")
        wait_for(lambda: "Uid:\t%d" % nobody.pw_uid in Path(f"/proc/{c.pid}/status").read_text(),
                 10, "the collector to run as nobody")
        pkts = gen_packets(3000, seed=23)
        src = write_pcap(tmp_path / "gen.pcap", pkts)
        stats = tmp_path / "export.jsonl"
        exp = start_exporter(tapdeck, hnet, stats, procs)
        rep = hnet.popen("g", "tcpreplay", "-q", "-i", "gen", "--pps=1000", src,
                         stdout=subprocess.DEVNULL)
        procs.append(rep)
        wait_for(lambda: any(store.glob(".*.partial")) and (store / "collector.json").exists()
                 and sum(s["packets"] for s in ledger(store)["streams"]) > 500, QUICK,
                 "packets in a partial file")
        c.kill()
        c.wait(timeout=10)
        assert list(store.glob(".*.partial"))
        c = start_collector(tapdeck, hnet, "c", LISTEN, store, procs, "--allow", EXPORTER,
                            "--user", "nobody")
        assert rep.wait(timeout=SLOW) == 0
        wait_for(lambda: last_stats(stats)["observed"] >= len(pkts), QUICK, "the exporter to see all")
        stop(exp)
        wait_for(lambda: real_stream(store)["packets"] > 0, QUICK, "the ledger")
        time.sleep(0.5)  # the last datagrams in flight (no counter says they have all arrived)
        err = stop(c)
        assert "left incomplete by an earlier run; finalized as" in err, err[-2000:]
        assert not list(store.glob(".*.partial"))
        r = tapdeck("verify", store)
        assert r.returncode == 0, r.describe()
        files = store_files(store)
        assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o640 for f in files), [
            (f.name, oct(f.stat().st_mode)) for f in files]
        stored = stored_frames(tapdeck, store, tmp_path)
        datas = [p.data for p in stored]
        assert len(set(datas)) == len(datas), "no packet stored twice"
        want = {p.data[:SNAP] for p in pkts}
        real = real_stream(store)
        print(f"kill -9: {sum(d in want for d in datas)} of {len(pkts)} frames stored across "
              f"the crash; ledger packets {real['packets']}, lost records {real['lost']}")
        # The ledger saved before the kill counted only packets already written, so it never
        # says more than the store holds; what the crashed run wrote after its last save is
        # counted as lost by the restarted collector (its sequence numbers were past it).
        mine = sum(d in want for d in datas)
        assert real["packets"] <= mine <= real["packets"] + real["lost"], real
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_own_traffic_exclusion_keeps_frames_it_cannot_parse(tapdeck, hnet, procs, tmp_path):
    """Frames too short for the fields the exporter's own-traffic exclusion (a kernel BPF
    filter) reads — truncated IPv4 headers, IPv4 with options cut before the ports, UDP with
    its ports cut, a bare IPv6 header — are exported and stored with the ordinary frames around
    them. (A regression test for the filter's length guard: on this veth path it passes with
    the unguarded filter too, so it does not reproduce the loss issue 19 saw.)"""
    from conftest import Pkt
    store = tmp_path / "store"
    c = start_collector(tapdeck, hnet, "c", LISTEN, store, procs, "--allow", EXPORTER)
    eth = bytes.fromhex("020000000002020000000001")
    v4 = eth + b"\x08\x00" + bytes.fromhex("45000030000000004011") + b"\x00\x00" + bytes(
        [198, 18, 9, 1, 198, 18, 9, 2])
    short = [
        eth + b"\x08\x00" + b"\x45\x00\x00\x30" + b"\x00" * 8,  # IPv4 header cut at 12 octets
        v4 + b"\x13",  # UDP ports cut (35 octets)
        v4[:14] + b"\x4f" + v4[15:] + b"\x01" * 10,  # IHL 15, options cut before the ports
        eth + b"\x86\xdd" + b"\x60" + b"\x00" * 5 + b"\x11\x40" + b"\x00" * 32,  # bare IPv6
    ]
    pkts = gen_packets(200, seed=29)
    frames = []
    for i, p in enumerate(pkts):
        frames.append(p)
        if i % 10 == 0:
            d = short[(i // 10) % len(short)] + bytes([i])
            frames.append(Pkt(1, p.ts_ns + 1, len(d), d))
    src = write_pcap(tmp_path / "mixed.pcap", frames)
    stats = tmp_path / "export.jsonl"
    exp = start_exporter(tapdeck, hnet, stats, procs)
    r = hnet.ns_sh(hnet.ns["g"], "tcpreplay", "-q", "-i", "gen", "--pps=2000", src, timeout=60)
    assert r.returncode == 0, r.describe()
    wait_for(lambda: last_stats(stats)["observed"] >= len(frames), QUICK,
             f"the exporter to observe all {len(frames)} frames, the short ones included")
    stop(exp)
    # The exporter counts the frames its exclusion could not read (and kept).
    assert last_stats(stats)["too_short_to_exclude"] == len(frames) - len(pkts)
    records = last_stats(stats)["collectors"][0]["records"]
    wait_for(lambda: real_stream(store)["records"] + real_stream(store)["lost"] >= records,
             QUICK, "the collector to count everything")
    stop(c)
    assert_every_frame_stored(tapdeck, store, tmp_path, frames)
