"""Collectors that go away, and collectors a router cannot reach: what the exporter counts.

    netns G (tcpreplay) gen ─veth─ cap  netns E (tapdeck export -i cap; tcpdump reference)
                                        eup 198.18.72.1 ─veth─ r1 198.18.72.254 ┐
                                                                      netns R (router:
                                                           unreachable 198.18.74.0/24)
                                        cdn 198.18.73.2 ─veth─ r2 198.18.73.254 ┘
                                        netns C (tapdeck collect, ports 47201 and 47202)

198.18.74.0/24 has no host: the router's route for it is of type `unreachable` (or
`prohibit`), so its kernel answers every packet for it with ICMP destination unreachable
(host unreachable, or administratively prohibited). Oracles: the router's own ICMP counters
(it did answer), a tcpdump capture of the replay on the exporter's interface, and the stores.
"""

from __future__ import annotations

import random
from collections import Counter

import fwdtools
import pytest
from conftest import Pkt, frame, half_random, need, read_packets, wait_for, write_pcap
from fwdtools import last_stats, ledger, start_collector, stop
from test_forward_tcp import replay, stop_collector, stop_reference, stored

SNAP = 128
E_ADDR = "198.18.72.1"
C_ADDR = "198.18.73.2"
GONE = "198.18.74.2"
PORT_A, PORT_B, PORT_GONE = 47201, 47202, 47203


class RoutedNet(fwdtools.Namespaces):
    """The namespaces of the drawing above (names start with `tdB`)."""

    def __init__(self):
        super().__init__("tdB", ("g", "e", "r", "c"))

    def build(self):
        e, r, c = self.ns["e"], self.ns["r"], self.ns["c"]
        self.pair(self.ns["g"], "gen", e, "cap", fwdtools.JUMBO)
        self.pair(e, "eup", r, "r1", fwdtools.JUMBO)
        self.pair(c, "cdn", r, "r2", fwdtools.JUMBO)
        self.address(e, "eup", f"{E_ADDR}/24")
        self.address(r, "r1", "198.18.72.254/24")
        self.address(r, "r2", "198.18.73.254/24")
        self.address(c, "cdn", f"{C_ADDR}/24")
        self.sysctl(r, "net.ipv4.ip_forward=1")
        for net in ("198.18.73.0/24", "198.18.74.0/24"):
            self.route(e, net, "via", "198.18.72.254")
        self.route(c, "198.18.72.0/24", "via", "198.18.73.254")

    def cut_off(self, kind: str):
        """The router answers for GONE's subnet with ICMP: `unreachable` (host unreachable)
        or `prohibit` (administratively prohibited)."""
        self.ns_sh(self.ns["r"], "ip", "route", "add", kind, "198.18.74.0/24")

    def dest_unreachables_sent(self) -> int:
        """ICMP destination unreachable messages the router's kernel sent (/proc/net/snmp)."""
        text = self.ns_sh(self.ns["r"], "cat", "/proc/net/snmp").out
        names, values = [line.split()[1:] for line in text.splitlines()
                         if line.startswith("Icmp:")][:2]
        return int(dict(zip(names, values))["OutDestUnreachs"])


@pytest.fixture
def rnet(procs):
    need("tcpreplay", "tcpdump")
    n = RoutedNet()
    yield n
    fwdtools.kill_all(procs)
    n.close()


def flows_frames(n: int, flows: int, seed: int, start_ns: int) -> list[Pkt]:
    """`n` frames of `flows` UDP/TCP flows in turn (so every flow has frames in every part
    of the list), 1 ms apart, half-random payloads."""
    rng = random.Random(seed)
    ends = [("udp" if f % 2 else "tcp", 10 + f % 7, 300 + f, 20000 + f, 2049 if f % 3 else 53)
            for f in range(flows)]
    out = []
    for i in range(n):
        proto, src, dst, sport, dport = ends[i % flows]
        payload = half_random(rng, rng.choice([20, 200, 900]))
        data = frame(rng, proto, src, dst, sport, dport, payload)
        out.append(Pkt(1, start_ns + i * 1_000_000, len(data), data))
    return out


def flow_of(data: bytes):
    """Addresses, protocol and ports of an Ethernet/IPv4 frame (one direction only here)."""
    return data[26:34], data[23], data[34:38]


@pytest.mark.parametrize("kind", ["unreachable", "prohibit"])
def test_udp_collector_beyond_a_router_is_never_counted_as_sent(tapdeck, rnet, procs, tmp_path,
                                                                 kind):
    """A UDP collector on a subnet the router cannot reach: the router answers with ICMP
    (host unreachable, a "soft" error Linux reports to a UDP socket only with IP_RECVERR;
    or administratively prohibited); the exporter hears it, counts nothing as sent (nothing
    can have been received: sent 0 ≥ received 0) and every observed packet as not sent
    (`down`, or `unconfirmed` if it left before the error came back)."""
    rnet.cut_off(kind)
    frames = flows_frames(1500, 30, seed=71, start_ns=1_795_500_000_000_000_000)
    src = write_pcap(tmp_path / "frames.pcap", frames)
    before = rnet.dest_unreachables_sent()
    stats = tmp_path / "export.jsonl"
    exp = fwdtools.start_exporter(tapdeck, rnet, stats, procs, str(SNAP), "--to",
                                  f"{GONE}:{PORT_GONE}")
    wait_for(lambda: last_stats(stats)["collectors"][0]["down_now"], 10,
             "the exporter to hear the router's ICMP error (a failure: it never did)")
    replay(rnet, src, 3000)
    wait_for(lambda: last_stats(stats)["observed"] >= len(frames), 20, "the exporter to read all")
    err = stop(exp)
    assert "accounting: observed = sent + not sent holds" in err, err
    final = last_stats(stats)
    [c] = final["collectors"]
    assert rnet.dest_unreachables_sent() > before, "the router's kernel answered with ICMP"
    assert final["observed"] == len(frames), final
    assert final["sent"] == c["packets"] == 0, final
    assert final["not_sent"] == c["down"] + c["unconfirmed"] == len(frames), final
    assert c["refused"] == 0, "host unreachable is not a refusal (port unreachable)"


def test_tcp_collector_beyond_a_router_queues_then_counts_exactly(tapdeck, rnet, procs,
                                                                  tmp_path):
    """A TCP collector on a subnet the router cannot reach: every connection attempt fails
    (ICMP host unreachable aborts the SYN); nothing is counted as sent; packets queue up to
    --buffer and the rest is counted `over_buffer`; at stop what is queued is counted
    `unconfirmed`: observed = over_buffer + unconfirmed exactly."""
    rnet.cut_off("unreachable")
    frames = flows_frames(3000, 30, seed=72, start_ns=1_795_500_100_000_000_000)
    src = write_pcap(tmp_path / "frames.pcap", frames)
    stats = tmp_path / "export.jsonl"
    exp = fwdtools.start_exporter(tapdeck, rnet, stats, procs, str(SNAP), "--to",
                                  f"tcp://{GONE}:{PORT_GONE}", "--buffer", "64KiB")
    wait_for(lambda: last_stats(stats)["collectors"][0]["down_now"], 10,
             "the exporter to find the collector down (a failed connection attempt)")
    replay(rnet, src, 3000)
    wait_for(lambda: last_stats(stats)["observed"] >= len(frames), 20, "the exporter to read all")

    def queued_or_over():
        s = last_stats(stats)
        return s["buffered"] + s["collectors"][0]["over_buffer"] == len(frames) and s

    queued = wait_for(queued_or_over, 10, "every packet queued or counted over the buffer")
    queued = queued["buffered"]
    err = stop(exp)
    assert "accounting: observed = sent + not sent holds" in err, err
    assert "No route to host" in err, err
    final = last_stats(stats)
    [c] = final["collectors"]
    assert (final["sent"], c["packets"], c["connects"], final["buffered"]) == (0, 0, 0, 0), final
    assert c["over_buffer"] > 0 and c["unconfirmed"] == queued > 0, c
    assert c["over_buffer"] + c["unconfirmed"] == c["not_sent"] == final["observed"] \
        == len(frames), final


def test_tcp_failover_every_frame_reaches_exactly_one_collector(tapdeck, rnet, procs, tmp_path):
    """Two TCP collectors behind the router; the second stops (cleanly) while a replay
    runs and starts again before the last part. Its flows go to the first while it is down
    (counted as failed over), including what was queued for it and never sent; they come
    back when it does. Every replayed frame is stored at exactly one collector, byte for
    byte as tcpdump saw it; the exporter's acknowledged counts equal each collector's
    ledger; `failed_over` is exactly the second collector's flows' packets stored at the
    first; no record is counted lost across the restart."""
    flows = 30
    frames = flows_frames(4000, flows, seed=73, start_ns=1_795_500_200_000_000_000)
    cuts = [0, 1000, 3000, 4000]
    parts = [write_pcap(tmp_path / f"part{i}.pcap", frames[cuts[i]:cuts[i + 1]])
             for i in range(3)]
    stores = [tmp_path / "a", tmp_path / "b"]
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    col_a = start_collector(tapdeck, rnet, "c", f"tcp://{C_ADDR}:{PORT_A}", stores[0], procs,
                            "--allow", E_ADDR, log=logs[0])
    col_b = start_collector(tapdeck, rnet, "c", f"tcp://{C_ADDR}:{PORT_B}", stores[1], procs,
                            "--allow", E_ADDR, log=logs[1])
    ref, dump = fwdtools.reference(rnet, tmp_path, procs)
    stats = tmp_path / "export.jsonl"
    exp = fwdtools.start_exporter(tapdeck, rnet, stats, procs, str(SNAP), "--to",
                                  f"tcp://{C_ADDR}:{PORT_A}", "--to", f"tcp://{C_ADDR}:{PORT_B}")
    wait_for(lambda: all(c["connects"] == 1 for c in last_stats(stats)["collectors"]), 10,
             "the exporter to connect to both")
    replay(rnet, parts[0], 1000)
    wait_for(lambda: last_stats(stats)["sent"] >= 1000, 20, "the first part acknowledged")
    # The second collector stops while the second part (2 s) is replayed: what the exporter
    # queues for it between its close and the failed reconnection (500 ms later) never went
    # out, and moves to the first collector.
    bg = rnet.popen("g", "tcpreplay", "-q", "-i", "gen", "--pps=1000", parts[1])
    procs.append(bg)
    wait_for(lambda: last_stats(stats)["observed"] >= 1100, 10, "the second part to start")
    stop_collector(col_b, logs[1])
    wait_for(lambda: last_stats(stats)["collectors"][1]["down_now"], 10,
             "the exporter to find the stopped collector down")
    assert bg.wait(timeout=60) == 0, bg.communicate()[1].decode()
    wait_for(lambda: last_stats(stats)["sent"] >= 3000, 20,
             "the second part acknowledged (by the first collector)")
    col_b = start_collector(tapdeck, rnet, "c", f"tcp://{C_ADDR}:{PORT_B}", stores[1], procs,
                            "--allow", E_ADDR, log=logs[1])
    wait_for(lambda: not last_stats(stats)["collectors"][1]["down_now"], 15,
             "the exporter to connect to the restarted collector (backoff up to 5 s)")
    replay(rnet, parts[2], 1000)
    wait_for(lambda: last_stats(stats)["sent"] >= 4000, 20, "the last part acknowledged")
    err = stop(exp)
    assert "accounting: observed = sent + not sent holds" in err, err
    final = last_stats(stats)
    stop_reference(dump, ref, len(frames))
    for col, log in zip((col_a, col_b), logs):
        stop_collector(col, log)

    reference_pkts = read_packets(ref)
    assert [p.data for p in reference_pkts] == [f.data for f in frames], "tcpdump saw the replay"
    want = Counter((p.ts_ns, p.data[:SNAP], p.orig_len) for p in reference_pkts)
    got = [stored(tapdeck, s, tmp_path) for s in stores]
    have = [Counter((p.ts_ns, p.data, p.orig_len) for p in g) for g in got]
    assert have[0] + have[1] == want, "every frame at exactly one collector, byte for byte"

    a, b = final["collectors"]
    assert final["observed"] == final["sent"] == len(frames) and final["not_sent"] == 0, final
    for c, s, g in zip((a, b), stores, got):
        streams = ledger(s)["streams"]
        assert c["packets"] == sum(x["packets"] for x in streams) == len(g), (c, streams)
        assert c["records"] == sum(x["records"] for x in streams), (c, streams)
        assert sum(x["lost"] + x["duplicates"] + x["malformed"] for x in streams) == 0, streams
    # The second collector's flows: those it stored in the first part (stored times are the
    # capture's, as tcpdump's).
    second, third = reference_pkts[1000].ts_ns, reference_pkts[3000].ts_ns
    b_flows = {flow_of(p.data) for p in got[1] if p.ts_ns < second}
    a_flows = {flow_of(p.data) for p in got[0] if p.ts_ns < second}
    assert b_flows and a_flows and not b_flows & a_flows and len(a_flows | b_flows) == flows
    moved = sum(1 for p in got[0] if flow_of(p.data) in b_flows)
    assert b["failed_over"] == moved > 0 and a["failed_over"] == 0, final
    # They came back: the last part of its flows is all at the second collector.
    assert all(flow_of(p.data) in b_flows for p in got[1]), "it got only its own flows"
    assert sum(1 for p in got[1] if p.ts_ns >= third) == \
        sum(1 for f in frames[3000:] if flow_of(f.data) in b_flows), "its flows came back"
    assert "down: its flows go to the other collectors" in err, err
    assert "queued for it and never sent go to the other collectors" in err, err
    assert "connected again; its flows come back" in err, err
    assert b["connects"] >= 2 and b["disconnects"] >= 1, b
