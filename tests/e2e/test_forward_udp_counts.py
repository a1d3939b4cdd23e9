"""Honest exporter counts over UDP: a collector that refuses (ICMP port unreachable) or
starts late. Same namespaces as `test_forward_tcp.py` (names starting `ipx`, 198.18.61.0/24).

Over UDP the exporter learns of a refusing collector only from ICMP errors (rate-limited by
the kernel), so it cannot count exactly; what it must never do is count as sent what it knows
was refused. The oracles: the tcpdump reference on the exporter's interface (every frame the
exporter observed), and the store (what arrived).
"""

from __future__ import annotations

from collections import Counter

import fwdtools
from conftest import gen_packets, read_packets, wait_for, write_pcap
from fwdtools import last_stats, ledger, start_collector, stop
from test_forward_tcp import (  # noqa: F401 (net, pki: fixtures)
    C_ADDR,
    E_ADDR,
    PORT,
    SNAP,
    net,
    replay,
    stop_collector,
    stop_reference,
    stored,
)

DEAD_PORT = PORT + 1


def test_a_refusing_collectors_flows_fail_over(tapdeck, net, procs, tmp_path):
    """Two collectors, the second refusing (nothing listens on its port, so the collector's
    host answers with ICMP port unreachable): the exporter counts nothing as sent to it, its
    flows go to the living collector (counted as failed over), which stores every packet the
    exporter counts as sent to it; observed = stored + not sent, exactly."""
    frames = gen_packets(3000, seed=64)
    src = write_pcap(tmp_path / "frames.pcap", frames)
    store = tmp_path / "store"
    clog = tmp_path / "collector.log"
    col = start_collector(tapdeck, net, "c", f"udp://{C_ADDR}:{PORT}", store, procs,
                          log=clog)
    ref, dump = fwdtools.reference(net, tmp_path, procs)
    stats = tmp_path / "export.jsonl"
    exp = fwdtools.start_exporter(tapdeck, net, stats, procs, str(SNAP), "--to",
                                  f"{C_ADDR}:{PORT}", "--to", f"{C_ADDR}:{DEAD_PORT}")
    wait_for(lambda: last_stats(stats)["collectors"][1]["refused"] > 0, 10,
             "the exporter to hear the refusal (ICMP port unreachable)")
    replay(net, src, 3000)
    wait_for(lambda: last_stats(stats)["observed"] >= len(frames), 20, "the exporter to read all")
    err = stop(exp)
    assert "accounting: observed = sent + not sent holds" in err, err
    final = last_stats(stats)
    stop_reference(dump, ref, len(frames))
    fwdtools.wait_stored(store, final["collectors"][0]["packets"])
    stop_collector(col, clog)
    live, dead = final["collectors"]
    assert dead["packets"] == 0, dead
    assert dead["failed_over"] > 0 and live["failed_over"] == 0, final
    got = stored(tapdeck, store, tmp_path)
    want = Counter((p.ts_ns, p.data[:SNAP], p.orig_len) for p in read_packets(ref))
    assert sum(want.values()) == final["observed"] == len(frames)
    have = Counter((p.ts_ns, p.data, p.orig_len) for p in got)
    assert not have - want, "only observed packets are stored"
    assert len(got) == live["packets"] == ledger(store)["streams"][0]["packets"], final
    assert len(got) + final["not_sent"] == final["observed"], final
    # The failover came early: nearly every packet of the dead collector's flows got through.
    assert final["not_sent"] <= dead["failed_over"], final


def test_a_late_collector_is_not_counted_as_received(tapdeck, net, procs, tmp_path):
    """The exporter starts before its collector: what it observes while the collector's port
    is closed is counted as not sent (`down`), never as sent; once a probe draws no error it
    sends again, and from then on the store holds exactly what the exporter counts as sent."""
    frames = gen_packets(2000, seed=65)
    half = len(frames) // 2
    first = write_pcap(tmp_path / "first.pcap", frames[:half])
    second = write_pcap(tmp_path / "second.pcap", frames[half:])
    store = tmp_path / "store"
    clog = tmp_path / "collector.log"
    ref, dump = fwdtools.reference(net, tmp_path, procs)
    stats = tmp_path / "export.jsonl"
    exp = fwdtools.start_exporter(tapdeck, net, stats, procs, str(SNAP), "--to",
                                  f"{C_ADDR}:{PORT}")
    wait_for(lambda: last_stats(stats)["collectors"][0]["refused"] > 0, 10,
             "the exporter to hear the refusal")
    replay(net, first, 2000)
    wait_for(lambda: last_stats(stats)["observed"] >= half, 20, "the exporter to read the first half")
    s = last_stats(stats)
    assert s["sent"] == 0 and s["collectors"][0]["down"] == half, s
    col = start_collector(tapdeck, net, "c", f"udp://{C_ADDR}:{PORT}", store, procs,
                          log=clog)
    # Up again once a probe (every 1.2 s) drew no error for 1.2 s.
    wait_for(lambda: not last_stats(stats)["collectors"][0]["down_now"], 10,
             "the exporter to find the collector answering")
    replay(net, second, 2000)
    wait_for(lambda: last_stats(stats)["sent"] >= len(frames) - half, 20,
             "the second half sent")
    err = stop(exp)
    assert "accounting: observed = sent + not sent holds" in err, err
    assert "answers again" in err, err
    final = last_stats(stats)
    stop_reference(dump, ref, len(frames))
    fwdtools.wait_stored(store, final["sent"])
    stop_collector(col, clog)
    got = stored(tapdeck, store, tmp_path)
    c = final["collectors"][0]
    assert c["down"] == half and c["unconfirmed"] == 0, c
    assert len(got) == final["sent"] == len(frames) - half, final
    want = Counter((p.ts_ns, p.data[:SNAP], p.orig_len) for p in read_packets(ref)[half:])
    assert Counter((p.ts_ns, p.data, p.orig_len) for p in got) == want

