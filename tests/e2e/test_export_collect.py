"""Header forwarding end to end: `tapdeck export` on a veth fed by tcpreplay, `tapdeck collect`
in other network namespaces, over veth pairs the test makes and removes.

    netns G (tcpreplay) gen ─veth─ cap  netns E (tapdeck export -i cap, tcpdump reference)
                                        up1 198.18.41.1 ─veth─ dn1 198.18.41.2  netns C1 (collect)
                                        up2 198.18.42.1 ─veth─ dn2 198.18.42.2  netns C2 (collect)

Oracles: the original frames (corpus NFS and TCP captures), a tcpdump capture on the exporter's
interface (same kernel timestamps), tshark's cflow dissector on the export datagrams captured at
the collector, and ipfixDump on the collector's RFC 5655 file.
"""

from __future__ import annotations

import calendar
import json
import os
import shutil
import signal
import struct
import subprocess
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import fwdtools
import pytest
from conftest import (
    CORPUS,
    QUICK,
    SLOW,
    Pkt,
    gen_packets,
    need,
    one_error_line,
    read_packets,
    run,
    wait_for,
    write_pcap,
)
from fwdtools import (
    last_stats,
    ledger,
    ledger_packets,
    ledger_records,
    sh,
    start_collector,
    stop,
)

SNAP = 128
# Engineers sharing a machine give each run its own namespace prefix and port.
PORT = int(os.environ.get("TAPDECK_EXPORT_PORT", "4739"))
NS_PREFIX = os.environ.get("TAPDECK_EXPORT_NS", "tdx")
E_UP = {1: "198.18.41.1", 2: "198.18.42.1"}
C_ADDR = {1: "198.18.41.2", 2: "198.18.42.2"}

# Corpus captures replayed: TCP conversations and NFS calls/replies (Ethernet, whole frames;
# one NFS frame of 8014 bytes, so the veths carry jumbo frames).
TCP_FILES = ["mptcp-v0.pcap", "ssh.pcap", "bgp-4byte-asn.pcap", "dns_tcp.pcap", "whois.pcap"]
NFS_FILES = ["nfs-write-verf-cookie.pcapng", "nfs-seg-fault-1.pcapng", "unaligned-nfs-1.pcap",
             "nfs-cannot-pad-32-bit.pcap"]



class Net(fwdtools.Namespaces):
    """The namespaces and veth pairs of the drawing above; removed on close."""

    def __init__(self, collectors: int = 2):
        self.collectors = collectors
        super().__init__(NS_PREFIX, ["g", "e", "c1", "c2"][:2 + collectors])

    def build(self):
        self.pair(self.ns["g"], "gen", self.ns["e"], "cap", fwdtools.JUMBO)
        for k in range(1, self.collectors + 1):
            self.pair(self.ns["e"], f"up{k}", self.ns[f"c{k}"], f"dn{k}", fwdtools.JUMBO)
            self.address(self.ns["e"], f"up{k}", f"{E_UP[k]}/24")
            self.address(self.ns[f"c{k}"], f"dn{k}", f"{C_ADDR[k]}/24")


@pytest.fixture
def net(procs):
    n = Net()
    yield n
    fwdtools.kill_all(procs)
    n.close()


def corpus_frames() -> list[Pkt]:
    if not CORPUS.is_dir():
        pytest.skip(f"public corpus not found at {CORPUS}")
    frames = []
    for name in TCP_FILES + NFS_FILES:
        for p in read_packets(CORPUS / "tcpdump-tests" / name):
            if p.linktype == 1 and len(p.data) == p.orig_len and 14 <= len(p.data) <= 9014:
                frames.append(p)
    assert len(frames) > 400
    return frames


def start_exporter(tapdeck, net, stats, procs, *args):
    return fwdtools.start_exporter(tapdeck, net, stats, procs, SNAP, *args)




def replay(net, pcap, pps=None):
    args = ["tcpreplay", "-q", "-i", "gen"] + ([f"--pps={pps}"] if pps else ["--topspeed"])
    r = sh("ip", "netns", "exec", net.ns["g"], *args, str(pcap), timeout=60)
    assert r.returncode == 0, r.describe()


def packets_in(pcap) -> int:
    """The whole records of a pcap a tcpdump is still writing (0 while it is still empty or
    its last record is cut)."""
    try:
        return len(read_packets(pcap))
    except Exception:  # noqa: BLE001 (a record cut mid-write: ask again)
        return 0


def store_packets(tapdeck, store, tmp_path) -> list[Pkt]:
    out = tmp_path / f"{Path(store).name}.pcapng"
    r = tapdeck("extract", store, "-w", out)
    assert r.returncode == 0, r.describe()
    return read_packets(out)



def flow_of(data: bytes):
    """Direction-free 5-tuple of an Ethernet/IPv4 frame (ports 0 when absent or a later
    fragment), as the exporter's flow hash sees it; None for other frames."""
    if len(data) < 34 or data[12:14] != b"\x08\x00":
        return None
    ihl = (data[14] & 15) * 4
    proto = data[23]
    src, dst = data[26:30], data[30:34]
    frag = struct.unpack(">H", data[20:22])[0] & 0x1FFF
    sp = dp = 0
    if proto in (6, 17) and frag == 0 and len(data) >= 14 + ihl + 4:
        sp, dp = struct.unpack(">HH", data[14 + ihl:18 + ihl])
    return (proto, *sorted([(src, sp), (dst, dp)]))


def tshark_time(s: str) -> int:
    """`Nov 23, 2026 13:12:00.123456789 UTC` → ns since 1970."""
    parts = s.split()
    months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    month = months.index(parts[0]) + 1
    day, year = int(parts[1].rstrip(",")), int(parts[2])
    hms, frac = parts[3].split(".")
    h, m, sec = map(int, hms.split(":"))
    secs = calendar.timegm((year, month, day, h, m, sec))
    return secs * 1_000_000_000 + int(frac.ljust(9, "0")[:9])


@pytest.fixture(scope="module")
def two_collectors(tapdeck, tmp_path_factory):
    """Corpus NFS and TCP frames replayed into the exporter's interface, exported to two
    collectors (collector 1 also writing --ipfix-file, collector 2 also streaming `-w -`),
    with tcpdump on the exporter's interface (the reference: the same kernel timestamps)
    and on collector 1's link (the export datagrams); everything stopped once every frame
    is stored. What each left behind, for the claims below."""
    need("tcpreplay", "tcpdump", "tshark", "ipfixDump")
    frames = corpus_frames()
    tmp = tmp_path_factory.mktemp("two-collectors")
    procs = []
    net = Net()
    try:
        return export_to_two_collectors(tapdeck, net, procs, tmp, frames)
    finally:
        fwdtools.kill_all(procs)
        net.close()


def export_to_two_collectors(tapdeck, net, procs, tmp_path, frames) -> SimpleNamespace:
    src = write_pcap(tmp_path / "frames.pcap", frames)
    stores = {k: tmp_path / f"store{k}" for k in (1, 2)}
    ipfix_file = tmp_path / "c1.ipfix"
    live_path = tmp_path / "c2-live.pcapng"
    live_out = open(live_path, "wb")  # noqa: SIM115 (closed once c2 stops)
    c1 = start_collector(tapdeck, net, "c1", f"{C_ADDR[1]}:{PORT}", stores[1], procs,
                         "--allow", E_UP[1], "--ipfix-file", ipfix_file)
    c2 = start_collector(tapdeck, net, "c2", f"{C_ADDR[2]}:{PORT}", stores[2], procs,
                         "--allow", E_UP[2], "-w", "-", stdout=live_out)
    wire = tmp_path / "export-dn1.pcap"
    dump_export = net.tcpdump("c1", tmp_path / "dn1.log", "-i", "dn1", "-s", "0", "-U", "-w",
                              wire, f"udp port {PORT}")
    procs.append(dump_export)
    ref = tmp_path / "ref.pcap"
    dump_ref = net.tcpdump("e", tmp_path / "cap.log", "-i", "cap", "-s", "0", "-U",
                           "--time-stamp-precision", "nano", "-w", ref)
    procs.append(dump_ref)
    stats = tmp_path / "export.jsonl"
    exp = start_exporter(tapdeck, net, stats, procs, "--to", f"{C_ADDR[1]}:{PORT}", "--to",
                         f"{C_ADDR[2]}:{PORT}")
    replay(net, src)
    wait_for(lambda: last_stats(stats)["sent"] >= len(frames), 15, "the exporter to send all")
    exporter_err = stop(exp)
    final = last_stats(stats)
    # Stop the collectors only once their ledgers hold every frame (a ledger counts what its
    # store has written): stopped earlier, a loaded collector leaves datagrams unread.
    wait_for(lambda: sum(ledger_packets(stores[k]) for k in (1, 2)) >= len(frames), 20,
             "the collectors to store every exported frame (a shortfall: datagrams lost)")
    # And the two tcpdumps to have written what they saw (stopped sooner, they drop what
    # is still in their capture buffer).
    wait_for(lambda: packets_in(ref) >= len(frames), 20, "tcpdump to write every replayed frame")
    wait_for(lambda: packets_in(wire) >= final["collectors"][0]["messages"], 20,
             "tcpdump to write every export datagram to collector 1")
    for p in (dump_export, dump_ref):
        p.send_signal(signal.SIGINT)
        p.wait(timeout=QUICK)
    err1, err2 = stop(c1), stop(c2)
    live_out.close()
    return SimpleNamespace(
        tmp=tmp_path, frames=frames, stores=stores, exporter_err=exporter_err, final=final,
        collector_err={1: err1, 2: err2}, reference=read_packets(ref), wire=wire,
        ipfix_file=ipfix_file, live=live_path,
        per_store={k: store_packets(tapdeck, stores[k], tmp_path) for k in (1, 2)},
    )


def test_the_exporter_sends_every_frame_in_path_mtu_messages(two_collectors):
    final, frames = two_collectors.final, two_collectors.frames
    err = two_collectors.exporter_err
    assert "accounting: observed = sent + not sent holds" in err, err
    assert final["final"] and final["observed"] == len(frames) == final["sent"], final
    # Messages are sized to the path MTU (the veths carry 9000-byte packets).
    assert [c["message_len"] for c in final["collectors"]] == [9000 - 28] * 2
    assert final["not_sent"] == 0 and final["kernel_dropped"] == 0, final


def test_every_frame_reaches_one_collector_as_its_first_bytes(two_collectors):
    """Each frame reaches the two collectors' stores as exactly its first 128 bytes, with
    its original length and the capture timestamp (the reference tcpdump's); each flow at
    one collector."""
    # The reference capture holds exactly the replayed frames.
    reference, per_store = two_collectors.reference, two_collectors.per_store
    assert [p.data for p in reference] == [f.data for f in two_collectors.frames]
    want = Counter((p.ts_ns, p.data[:SNAP], p.orig_len) for p in reference)
    got = Counter()
    for pkts in per_store.values():
        got.update((p.ts_ns, p.data, p.orig_len) for p in pkts)
    assert got == want
    assert all(len(per_store[k]) > 0 for k in (1, 2)), "both collectors get flows"
    owner = {}
    for k, pkts in per_store.items():
        for p in pkts:
            f = flow_of(p.data)
            if f is not None:
                assert owner.setdefault(f, k) == k, f"flow {f} at both collectors"


@pytest.mark.parametrize("k", [1, 2])
def test_each_collectors_ledger_is_what_its_exporter_sent(tapdeck, two_collectors, k):
    store, stored = two_collectors.stores[k], two_collectors.per_store[k]
    assert tapdeck("verify", store).returncode == 0
    led = ledger(store)
    [s] = led["streams"]
    assert s["exporter"] == E_UP[k] and s["domain"] == 1
    assert s["packets"] == len(stored)
    assert (s["lost"], s["duplicates"], s["malformed"], s["no_template"]) == (0, 0, 0, 0), s
    assert s["exporter_counts"]["observed_packets"] == len(two_collectors.frames)
    history = [json.loads(x) for x in (store / "collector.jsonl").read_text().splitlines()]
    assert history[-1]["final"] and history[-1]["streams"] == led["streams"]
    sent = two_collectors.final["collectors"][k - 1]
    assert sent["records"] == s["records"] and sent["packets"] == s["packets"], (sent, s)
    err = two_collectors.collector_err[k]
    assert f"exporter {E_UP[k]} domain 1: stored {len(stored)} packets" in err


def test_convert_reads_the_collectors_stores_unchanged(tapdeck, two_collectors):
    """The packets tables hold every stored packet with its times and lengths, and no flow
    id is at both collectors."""
    pads = pytest.importorskip("pyarrow.dataset")
    flow_ids = {}
    for k in (1, 2):
        ds = two_collectors.tmp / f"ds{k}"
        r = tapdeck("convert", two_collectors.stores[k], "--out", ds, "-q", timeout=SLOW)
        assert r.returncode == 0, r.describe()
        rows = pads.dataset(str(ds / "packets"), format="parquet",
                            partitioning="hive").to_table().to_pylist()
        assert sorted((x["time_ns"], x["wire_len"], x["cap_len"]) for x in rows) == sorted(
            (p.ts_ns, p.orig_len, len(p.data)) for p in two_collectors.per_store[k])
        flow_ids[k] = {x["flow_id"] for x in rows if x["flow_id"] is not None}
    assert flow_ids[1] and flow_ids[2] and not flow_ids[1] & flow_ids[2]


def test_w_dash_streams_what_the_collector_stored(two_collectors):
    live = read_packets(two_collectors.live)
    assert Counter((p.ts_ns, p.data, p.orig_len) for p in live) == Counter(
        (p.ts_ns, p.data, p.orig_len) for p in two_collectors.per_store[2])
    r = run(["tshark", "-r", two_collectors.live, "-T", "fields", "-e", "frame.number"])
    assert r.returncode == 0 and len(r.out.split()) == len(live), r.describe()


def test_tshark_decodes_the_export_datagrams_cleanly(two_collectors):
    """The same sections, sizes and nanoseconds as collector 1 stored. tshark dissects each
    dataLinkFrameSection as an Ethernet frame, whose cut IP header it rightly calls
    malformed: the clean check looks at the IPFIX layer alone, with eth disabled — on the
    datagrams as raw IP (linktype 101), since disabling eth on an Ethernet capture would
    leave nothing to check."""
    tmp_path, wire, stored = two_collectors.tmp, two_collectors.wire, two_collectors.per_store[1]
    env = {**os.environ, "TZ": "UTC"}
    datagrams = read_packets(wire)
    assert len(datagrams) == two_collectors.final["collectors"][0]["messages"]
    assert max(len(d.data) for d in datagrams) <= 14 + 9000
    assert max(len(d.data) for d in datagrams) > 14 + 1500, "large messages were needed"
    raw = write_pcap(tmp_path / "export-raw.pcap",
                     [Pkt(101, p.ts_ns, p.orig_len - 14, p.data[14:]) for p in datagrams],
                     linktype=101)
    clean = run(["tshark", "-r", raw, "-d", f"udp.port=={PORT},cflow", "--disable-protocol",
                 "eth", "-V"], env=env, timeout=60)
    assert clean.returncode == 0, clean.describe()
    assert "Malformed" not in clean.out and "no template found" not in clean.out
    assert clean.out.count("Data Link Frame Section") >= len(stored), "the check saw reports"
    expert = run(["tshark", "-r", raw, "-d", f"udp.port=={PORT},cflow", "--disable-protocol",
                  "eth", "-q", "-z", "expert,warn"], env=env)
    assert "Warning" not in expert.out and "Error" not in expert.out, expert.out
    r = run(["tshark", "-r", wire, "-d", f"udp.port=={PORT},cflow", "-T", "fields", "-E",
             "occurrence=a", "-E", "aggregator=|", "-E", "separator=\t", "-e",
             "cflow.data_link_frame_section", "-e", "cflow.data_link_frame_size", "-e",
             "cflow.observation_time_nanoseconds"], env=env, timeout=60)
    assert r.returncode == 0, r.describe()
    decoded = Counter()
    for line in r.out.splitlines():
        cols = line.split("\t")
        if not cols[0]:
            continue
        for sec, size, t in zip(cols[0].split("|"), cols[1].split("|"), cols[2].split("|")):
            decoded[(tshark_time(t), bytes.fromhex(sec.replace(":", "")), int(size))] += 1
    assert decoded == Counter((p.ts_ns, p.data, p.orig_len) for p in stored)


def test_ipfixdump_reads_every_report_of_the_ipfix_file(two_collectors):
    tmp_path = two_collectors.tmp
    r = run(["ipfixDump", "-i", two_collectors.ipfix_file, "-o", tmp_path / "dump.txt"])
    assert r.returncode == 0, r.describe()
    dump = (tmp_path / "dump.txt").read_text(errors="replace")
    assert dump.count("dataLinkFrameSection") >= len(two_collectors.per_store[1]), dump[:2000]


def test_collector_restart_counts_the_gap_as_loss(tapdeck, net, procs, tmp_path):
    """A collector stopped mid-run and started again on its store counts the records sent
    while it was away as lost in transit: records seen + lost equals what the exporter sent,
    exactly, and the store holds exactly the packets the ledger says. The exporter, hearing
    the ICMP errors, counts what it sent meanwhile as not sent, so it claims no packet the
    collector did not store."""
    need("tcpreplay")
    pkts = gen_packets(2400, seed=11)
    src = write_pcap(tmp_path / "gen.pcap", pkts)
    store = tmp_path / "store"
    c1 = start_collector(tapdeck, net, "c1", f"{C_ADDR[1]}:{PORT}", store, procs)
    stats = tmp_path / "export.jsonl"
    exp = start_exporter(tapdeck, net, stats, procs, "--to", f"{C_ADDR[1]}:{PORT}")
    rep = subprocess.Popen(["ip", "netns", "exec", net.ns["g"], "tcpreplay", "-q", "-i", "gen",
                            "--pps=800", str(src)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
    procs.append(rep)
    # Stop the collector once a sixth of the replay is out, start it again once another
    # sixth went out while it was away: the gap lies inside the replay however loaded the
    # machine (a failure here means the exporter stopped reading or sending).
    wait_for(lambda: last_stats(stats)["observed"] >= len(pkts) // 6, 20,
             "the exporter to read the first sixth of the replay")
    stop(c1)
    away = last_stats(stats)["observed"]
    wait_for(lambda: last_stats(stats)["observed"] >= away + len(pkts) // 6, 20,
             "the exporter to read another sixth while the collector is away")
    assert last_stats(stats)["observed"] < len(pkts), "the replay ended before the restart"
    c1 = start_collector(tapdeck, net, "c1", f"{C_ADDR[1]}:{PORT}", store, procs)
    assert rep.wait(timeout=30) == 0, rep.stderr.read().decode()
    wait_for(lambda: last_stats(stats)["observed"] >= len(pkts), 15, "the exporter to see all")
    err = stop(exp)
    final = last_stats(stats)
    sent_records = final["collectors"][0]["records"]
    wait_for(lambda: ledger_records(store) >= sent_records, 20,
             "the collector to account for every record sent (received or lost)")
    stop(c1)
    assert final["observed"] == len(pkts) and final["sent"] + final["not_sent"] == len(pkts), err
    [s] = ledger(store)["streams"]
    to = final["collectors"][0]
    print(f"restart: exporter sent {to['records']} records ({to['packets']} packets, "
          f"{to['not_sent']} not sent, {to['refused']} refused sends); collector counted "
          f"{s['records']} records, lost {s['lost']}, stored {s['packets']} packets, "
          f"{s['no_template']} messages before templates")
    assert s["lost"] > 0, s
    assert s["records"] + s["lost"] == to["records"], (s, to)
    # What went out while the collector was away drew ICMP port unreachable: the exporter
    # counts it as not sent (unconfirmed, or down until a probe is answered), never as sent,
    # so its sent packets are at least what was stored (over UDP an inequality: a datagram
    # lost without an ICMP error is counted nowhere).
    assert s["packets"] <= to["packets"]
    assert to["unconfirmed"] + to["down"] > 0, to
    stored = store_packets(tapdeck, store, tmp_path)
    assert len(stored) == s["packets"]
    assert len({p.data for p in stored}) == len(stored), "no packet stored twice"
    assert s["exporter_counts"]["observed_packets"] == len(pkts)


def test_exporter_restart_is_counted_not_lost(tapdeck, net, procs, tmp_path):
    """An exporter stopped and started again (new port, new start time, sequence numbers
    from 0) is one stream that restarted: nothing counted as lost, every packet stored, and
    the collector's records are the two sessions' records together."""
    need("tcpreplay")
    pkts = gen_packets(400, seed=13)
    store = tmp_path / "store"
    c1 = start_collector(tapdeck, net, "c1", f"{C_ADDR[1]}:{PORT}", store, procs)
    sent = []
    for half in (pkts[:200], pkts[200:]):
        src = write_pcap(tmp_path / "half.pcap", half)
        n = len(half)
        stats = tmp_path / f"export{len(sent)}.jsonl"
        exp = start_exporter(tapdeck, net, stats, procs, "--to", f"{C_ADDR[1]}:{PORT}")
        replay(net, src, pps=2000)
        wait_for(lambda stats=stats, n=n: last_stats(stats)["sent"] >= n, 15,
                 "the exporter to send all")
        stop(exp)
        sent.append(last_stats(stats)["collectors"][0])
    wait_for(lambda: ledger_packets(store) >= len(pkts), 20,
             "the collector to store every packet sent (a shortfall: datagrams lost)")
    stop(c1)
    [s] = ledger(store)["streams"]
    assert (s["restarts"], s["lost"], s["duplicates"]) == (1, 0, 0), s
    assert s["records"] == sum(x["records"] for x in sent)
    assert s["packets"] == sum(x["packets"] for x in sent) == len(pkts)
    assert len(store_packets(tapdeck, store, tmp_path)) == len(pkts)


def ipfix_message(seq: int, *, templates: bool, reports=(), domain=1, template_id=256) -> bytes:
    """A minimal IPFIX message written independently of tapdeck: template 256 as
    docs/ipfix.md lists it, and packet reports of it."""
    sets = b""
    if templates:
        fields = [(325, 8), (10, 4), (302, 4), (312, 2), (315, 65535)]
        rec = struct.pack(">HH", 256, len(fields)) + b"".join(struct.pack(">HH", *f) for f in fields)
        sets += struct.pack(">HH", 2, 4 + len(rec)) + rec
    if reports:
        body = b""
        for ts_ns, data in reports:
            sec, ns = divmod(ts_ns, 1_000_000_000)
            frac = -(-(ns << 32) // 1_000_000_000)
            body += struct.pack(">IIIIH", sec + 2_208_988_800, frac, 0, 1, len(data) + 100)
            body += bytes([len(data)]) + data
        sets += struct.pack(">HH", template_id, 4 + len(body)) + body
    return struct.pack(">HHIII", 10, 16 + len(sets), int(time.time()), seq, domain) + sets


def test_bad_messages_are_counted_not_stored(tapdeck, net, procs, tmp_path):
    """Messages from an exporter not allowed, data sets whose template was never seen and
    truncated messages are counted and dropped; a replayed message is counted as a duplicate
    and stored all the same (a sequence number proves nothing over UDP); the collector keeps
    running."""
    need()
    store = tmp_path / "store"
    c1 = start_collector(tapdeck, net, "c1", f"{C_ADDR[1]}:{PORT}", store, procs,
                         "--allow", E_UP[1])
    net.ns_sh(net.ns["e"], "ip", "addr", "add", "198.18.41.3/24", "dev", "up1")
    good = [(1_795_400_000_123_456_789 + i, bytes([i]) * 60) for i in range(3)]
    script = tmp_path / "send.py"
    msgs = {
        "unknown_template": ipfix_message(0, templates=False, reports=good[:1], template_id=300),
        "good": ipfix_message(0, templates=True, reports=good),
        "truncated": ipfix_message(4, templates=False, reports=good[:1])[:-7],
        "replayed": ipfix_message(0, templates=True, reports=good),
        "stranger": ipfix_message(0, templates=True, reports=good),
    }
    script.write_text(
        "import socket, sys, time\n"
        f"msgs = {[(k, v) for k, v in msgs.items()]!r}\n"
        f"s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('{E_UP[1]}', 0))\n"
        "t = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); t.bind(('198.18.41.3', 0))\n"
        "for k, m in msgs:\n"
        f"    (t if k == 'stranger' else s).sendto(m, ('{C_ADDR[1]}', {PORT}))\n"
        "    time.sleep(0.05)\n")
    r = net.ns_sh(net.ns["e"], "python3", script)
    assert r.returncode == 0, r.describe()
    wait_for(lambda: ledger_packets(store) >= 6, 20, "the collector to store the six good records")
    assert c1.poll() is None, "the collector survives bad input"
    err = stop(c1)
    led = ledger(store)
    [s] = led["streams"]
    assert s["exporter"] == E_UP[1]
    assert (s["packets"], s["no_template"], s["malformed"], s["duplicates"]) == (6, 1, 1, 1), s
    assert led["not_allowed"] == {"198.18.41.3": 1}
    stored = store_packets(tapdeck, store, tmp_path)
    assert sorted((p.ts_ns, p.data, p.orig_len) for p in stored) == sorted(
        [(t, d, len(d) + 100) for t, d in good] * 2)
    assert "not in --allow" in err and "panicked" not in err


def test_export_never_captures_its_own_traffic(tapdeck, net, procs, tmp_path):
    """Capturing the interface the export datagrams leave by too: none of them is exported.
    Two fanout threads: each its own observation domain, together every packet once, into a
    collector with two SO_REUSEPORT sockets (two streams of the store)."""
    need("tcpreplay")
    pkts = gen_packets(300, seed=12)
    src = write_pcap(tmp_path / "gen.pcap", pkts)
    store = tmp_path / "store"
    c1 = start_collector(tapdeck, net, "c1", f"{C_ADDR[1]}:{PORT}", store, procs,
                         "--sockets", "2")
    stats = tmp_path / "export.jsonl"
    exp = start_exporter(tapdeck, net, stats, procs, "-i", "up1", "--threads", "2", "--to",
                         f"{C_ADDR[1]}:{PORT}")
    replay(net, src, pps=2000)
    wait_for(lambda: last_stats(stats)["sent"] >= len(pkts), 15, "the exporter to send all")
    # Template refreshes (every 0.5 s, messages with no packet) cross up1 meanwhile.
    messages = lambda: sum(c["messages"] for c in last_stats(stats)["collectors"])
    after = messages()
    wait_for(lambda: messages() >= after + 2, 10, "two template refreshes to leave by up1")
    stop(exp)
    wait_for(lambda: ledger_packets(store) >= len(pkts), 20,
             "the collector to store every replayed packet")
    stop(c1)
    stored = store_packets(tapdeck, store, tmp_path)
    to_collector = [p for p in stored if p.data[12:14] == b"\x08\x00" and p.data[23] == 17
                    and struct.unpack(">H", p.data[36:38])[0] == PORT]
    assert to_collector == []
    sent = Counter(q.data[:SNAP] for q in pkts)
    assert Counter(p.data for p in stored if p.data in sent) == sent
    assert json.loads((store / "manifest.json").read_text())["streams"] == 2
    assert tapdeck("verify", store).returncode == 0
    streams = ledger(store)["streams"]
    assert {s["domain"] for s in streams} <= {1, 2}
    assert sum(s["packets"] for s in streams) == len(stored)
    assert all(s["lost"] == 0 and s["duplicates"] == 0 for s in streams), streams


def test_clear_errors(tapdeck, net, procs, tmp_path):
    """One line each: unknown interface, unreachable collector, no CAP_NET_RAW, port in use,
    bad --allow."""
    need()
    e = net.ns["e"]
    r = run(["ip", "netns", "exec", e, tapdeck.bin, "export", "-i", "nosuch0", "--to",
             f"{C_ADDR[1]}:{PORT}"])
    assert r.returncode == 1 and "no interface named nosuch0" in one_error_line(r.stderr)
    r = run(["ip", "netns", "exec", e, tapdeck.bin, "export", "-i", "cap", "--to",
             "198.19.200.1:4739"])
    assert r.returncode == 1 and "unreachable" in one_error_line(r.stderr), r.stderr
    if shutil.which("setpriv"):
        # root without CAP_NET_RAW, not another user, who could not reach a binary in a
        # checkout inside a mode-0700 directory
        r = run(["ip", "netns", "exec", e, "setpriv", "--bounding-set=-net_raw,-net_admin",
                 "--inh-caps=-all", tapdeck.bin, "export", "-i", "cap", "--to",
                 f"{C_ADDR[1]}:{PORT}"])
        assert r.returncode == 1 and "CAP_NET_RAW" in one_error_line(r.stderr), r.stderr
    holder = net.popen("c1", "python3", "-c",
                       "import socket,time; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                       f"s.bind(('{C_ADDR[1]}', {PORT})); print('ok', flush=True); time.sleep(30)")
    procs.append(holder)
    assert holder.stdout.readline().strip() == b"ok"
    r = run(["ip", "netns", "exec", net.ns["c1"], tapdeck.bin, "collect", "--listen",
             f"{C_ADDR[1]}:{PORT}", "--store", tmp_path / "s"])
    assert r.returncode == 1 and "in use" in one_error_line(r.stderr), r.stderr
    r = tapdeck("collect", "--listen", "127.0.0.1:0", "--store", tmp_path / "s2", "--allow", "x")
    assert r.returncode == 1 and "--allow x" in one_error_line(r.stderr)
