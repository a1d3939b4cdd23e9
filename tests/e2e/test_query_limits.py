"""The query API's limits (issue 17): a query never costs capture a packet, and no client
can hold the service's query slots for longer than the limits allow.

- A client that stops reading holds its slot only until `query-max-seconds`: meanwhile a
  query beyond `query-max-concurrent` gets 429 with a JSON reason, afterwards queries run
  again, the log says the answer was cut at the time limit, and the stalled response ends
  broken (not as a file that looks complete).
- An answer cut at `query-max-bytes` makes `tapdeck query` fail with one line; the file
  holds the bytes that came.
- Ten queries at once while the service records traffic: every query answers, and the
  recorder drops nothing (queries run at the idle CPU and I/O priority).
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time

import netlab
import pytest
from conftest import gen_packets, kill_all, need, tcpdump_lines, wait_for, write_pcap
from netlab import free_port, run_in
from served import Served


def curl(url, *extra):
    r = subprocess.run(
        ["curl", "-s", "-o", "/dev/stderr", "-w", "%{http_code}", *extra, url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return r.stdout, r.stderr


@pytest.fixture
def read_only(tapdeck, tmp_path, procs):
    """A 30 MB store served read-only with one query slot, 2 s and 256 KiB per answer."""

    def start(limits: str):
        pcap = write_pcap(
            tmp_path / "big.pcap", gen_packets(20000, seed=5, sizes=(1514,))
        )
        store = tmp_path / "S"
        r = tapdeck("record", "-r", pcap, "--store", store, "-q")
        assert r.returncode == 0, r.describe()
        port = free_port()
        cfg = tmp_path / "serve.toml"
        cfg.write_text(f'listen = "127.0.0.1:{port}"\n{limits}')
        served = Served(tapdeck.bin, procs, tmp_path, "--no-capture", store, config=cfg)
        log = served.log
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: curl(base + "/healthz")[0] == "200", 20, "the service")
        return {"base": base, "log": log, "port": port, "pcap": pcap, "store": store}

    return start


def test_a_stalled_client_holds_its_slot_only_until_the_time_limit(read_only):
    s = read_only('query-max-concurrent = 1\nquery-max-seconds = 2\n')
    stalled = socket.socket()
    # A small receive buffer and no reading: the answer (30 MB) backs up into the server.
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", s["port"]))
    # This host's name as `Host`: without tokens another gets 421 (issue 31).
    stalled.sendall(b"GET /api/v1/packets HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = stalled.recv(512)
    assert head.startswith(b"HTTP/1.1 200"), head
    started = time.monotonic()
    code, body = curl(s["base"] + "/api/v1/count")
    assert code == "429", f"a second query got {code} while the only slot was taken"
    assert "queries are running" in json.loads(body)["error"]
    # The slot comes back once the time limit cuts the stalled answer.
    wait_for(
        lambda: curl(s["base"] + "/api/v1/count")[0] == "200",
        20,
        "a query to run again after the stalled one reached its time limit",
    )
    assert time.monotonic() - started >= 1.0, (
        "the slot came back before the time limit: the stalled query was not holding it"
    )
    wait_for(
        lambda: "the query reached the time limit" in s["log"].read_text(),
        5,
        "the log to say the answer was cut at the time limit",
    )
    # Reading what is left: the response ends broken (no final chunk), so the client
    # knows the file is incomplete.
    stalled.settimeout(10)
    rest = bytearray(head)
    while True:
        piece = stalled.recv(1 << 20)
        if not piece:
            break
        rest += piece
    stalled.close()
    assert not rest.endswith(b"\r\n0\r\n\r\n"), (
        "an answer cut at the time limit ended like a complete one"
    )


def test_an_answer_cut_at_the_byte_limit_fails_the_client(read_only, tapdeck, tmp_path):
    s = read_only('query-max-bytes = "256KiB"\n')
    out = tmp_path / "cut.pcapng"
    r = subprocess.run(
        [tapdeck.bin, "query", s["base"].removeprefix("http://"), "-w", out],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and "stopped early" in r.stderr, r.stderr
    assert 0 < out.stat().st_size <= 256 * 1024
    wait_for(
        lambda: "cut short: the answer reached the byte limit" in s["log"].read_text(),
        5,
        "the log to say the answer was cut at the byte limit",
    )
    # Within the limit, the same client succeeds: the whole store, exactly.
    whole = tmp_path / "whole.pcapng"
    flt = "src host 198.18.0.1 and dst host 198.18.1.1 and dst port 53"
    r = subprocess.run(
        [tapdeck.bin, "query", s["base"].removeprefix("http://"), "-w", whole, flt],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    want = tcpdump_lines(s["pcap"], flt)
    assert want and tcpdump_lines(whole) == want, (
        "the answer within the limit is not what tcpdump selects from the original"
    )


SERVICE_ADDR, PEER_ADDR = "198.18.7.1", "198.18.7.2"

# 8 s of UDP at ~20,000 packets/s, paced; prints how many it sent.
SENDER = (
    "import socket, time\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "payload = bytes(range(256)) * 4\n"
    "t0 = time.monotonic(); n = 0\n"
    "while time.monotonic() - t0 < 8:\n"
    "    for _ in range(200):\n"
    f"        s.sendto(payload, ('{SERVICE_ADDR}', 7000 + n % 16)); n += 1\n"
    "    lag = t0 + n / 20000 - time.monotonic()\n"
    "    if lag > 0: time.sleep(lag)\n"
    "print(n)\n"
)


@pytest.fixture(scope="module")
def ten_queries(tapdeck, tmp_path_factory):
    """The service records a veth whose far end (another namespace) sends UDP at ~20,000
    packets/s; its API listens on its own loopback, which it does not record, so the
    answers are not traffic. The ten clients run at nice 19 as the service's own query
    threads do not (those are SCHED_IDLE): on a two-core machine the clients stand in for
    remote hosts and must not be what starves the recorder. What they got, and the
    service's totals once everything seen is stored or counted as dropped."""
    need()
    tmp = tmp_path_factory.mktemp("ten-queries")
    procs = []
    with netlab.Link("tdqlim", "tdq0", SERVICE_ADDR, "tdq1", PEER_ADDR) as link:
        try:
            return ten_queries_while_recording(tapdeck, tmp, procs, link)
        finally:
            kill_all(procs)  # before their namespaces go


def ten_queries_while_recording(tapdeck, tmp_path, procs, link) -> dict:
    store = tmp_path / "S"
    cfg = tmp_path / "t.toml"
    cfg.write_text(
        f'interface = ["tdq0"]\nstore = "{store}"\nstaging = "64MiB"\nchunk-size = "1MiB"\n'
        f'min-free = "0"\nrotate-size = "4MiB"\nlisten = "127.0.0.1:9797"\n'
        f"query-max-concurrent = 10\n"
    )
    Served(tapdeck.bin, procs, tmp_path, config=cfg, ns=link.a)

    def status():
        r = run_in(link.a, "curl", "-s", "http://127.0.0.1:9797/api/v1/status", text=True,
                   timeout=120)
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout else None

    wait_for(lambda: (status() or {}).get("stats") is not None, 20, "the service to record")
    sender = link.popen(link.b, "python3", "-c", SENDER, stderr=None, text=True)
    procs.append(sender)
    # Let a few files fill, then ten clients query the whole store over and over while the
    # traffic lasts.
    wait_for(
        lambda: (status() or {"stats": {"totals": {"stored": 0}}})["stats"]["totals"][
            "stored"
        ]
        > 20000,
        20,
        "the first second of traffic to be stored",
    )
    results = []

    def client(i):
        n = 0
        while sender.poll() is None and n < 50:
            out = tmp_path / f"q{i}-{n}.pcapng"
            r = run_in(
                link.a, "nice", "-n", "19", tapdeck.bin, "query", "127.0.0.1:9797", "-w", out,
                f"udp dst port {7000 + i}", text=True, timeout=120,
            )  # fmt: skip
            size = out.stat().st_size if out.exists() else 0
            results.append((i, r.returncode, r.stderr, size))
            out.unlink(missing_ok=True)
            n += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    sent = int(sender.communicate(timeout=60)[0])
    for t in threads:
        t.join(timeout=120)

    def settled():
        t = status()["stats"]["totals"]
        return t["in_flight"] == 0 and t["seen"] >= sent

    wait_for(settled, 30, "every packet seen to be stored or counted as dropped")
    return {"sent": sent, "results": results, "totals": status()["stats"]["totals"]}


def test_ten_queries_at_once_all_answer(ten_queries):
    sent, results = ten_queries["sent"], ten_queries["results"]
    assert sent > 100_000, f"the sender managed only {sent} packets"
    failed = [x for x in results if x[1] != 0]
    assert not failed, f"queries failed: {failed[:3]}"
    assert len(results) >= 10 and all(x[3] > 0 for x in results), results[:5]
    assert len({x[0] for x in results}) == 10, "not every client got an answer"


def test_ten_queries_at_once_cost_capture_nothing(ten_queries):
    totals, results = ten_queries["totals"], ten_queries["results"]
    dropped = sum(totals["dropped"].values())
    assert dropped == 0, (
        f"capture dropped {totals['dropped']} while ten queries ran: queries must "
        f"never cost capture a packet (seen {totals['seen']}, {len(results)} queries)"
    )
    assert totals["stored"] == totals["seen"]
