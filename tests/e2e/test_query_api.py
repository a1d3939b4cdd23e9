"""The query API of `tapdeck serve` (issue 17, first part): `GET /api/v1/packets` streams
the packets of a window and a filter as one capture file, `tapdeck query` is its client,
`GET /api/v1/files` lists the files.

Everything runs inside a network namespace the test creates: the service records that
namespace's own loopback (private to it, so nothing else is on it), traffic comes from ping
and UDP inside it, and the HTTP server listens on the namespace's 127.0.0.1. The oracle:
tcpdump applying the same filter to everything the store holds (`extract --no-index`), so
the API answers exactly what tcpdump would select, also while the files are still being
written.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess

import netlab
import pytest
from conftest import gen_packets, kill_all, need, tcpdump_lines, wait_for, write_pcap
from netlab import free_port, run_in
from served import Served

# A token-file token: the metrics token opens only /metrics and /healthz, and every token has
# 16 characters at least (issue 31).
TOKEN = "q-secret-0123456789"


@pytest.fixture
def ns(procs):
    """A namespace of its own (loopback only, IPv6 on: the traffic pings ::1), removed after
    what runs in it."""
    need()
    with netlab.Lab("tdquery", ["x"], ipv6=True) as lab:
        yield lab.ns["x"]
        kill_all(procs)


@pytest.fixture
def limits():
    """Extra config lines (a test may set the query limits before the service starts)."""
    return ""


@pytest.fixture
def service(tapdeck_bin, ns, tmp_path, limits, procs):
    store = tmp_path / "S"
    token = tmp_path / "tokens"
    token.write_text(f"query {TOKEN}\n")
    cfg = tmp_path / "t.toml"
    cfg.write_text(
        f'interface = ["lo"]\nstore = "{store}"\nstaging = "32MiB"\nchunk-size = "1MiB"\n'
        f'min-free = "0"\nrotate-size = "256KiB"\nflush-interval = 0.2\n'
        f'listen = "127.0.0.1:9799"\ntoken-file = "{token}"\n{limits}'
    )
    s = Served(tapdeck_bin, procs, tmp_path, config=cfg, ns=ns, token=TOKEN)
    s.wait_answering(timeout=20)  # healthz 200: recording
    return {"proc": s.proc, "store": store, "token": token, "log": s.log, "bin": tapdeck_bin,
            "ns": ns}


def traffic(ns):
    # ICMP both ways, IPv6 ICMP, and UDP to two ports: filters have something to choose.
    run_in(ns, "ping", "-c", "300", "-i", "0.002", "-q", "127.0.0.1")
    run_in(ns, "ping", "-6", "-c", "100", "-i", "0.002", "-q", "::1")
    script = (
        "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "for i in range(400): s.sendto(bytes(64 + i % 200), ('127.0.0.1', 5000 + i % 2))"
    )
    run_in(ns, "python3", "-c", script)


def settled(ns) -> bool:
    r = run_in(
        ns,
        "curl",
        "-s",
        "-H",
        f"Authorization: Bearer {TOKEN}",
        "http://127.0.0.1:9799/api/v1/status",
        text=True,
    )
    totals = json.loads(r.stdout)["stats"]["totals"]
    return totals["seen"] > 0 and totals["in_flight"] == 0


def query(s, out, *args, token=True):
    extra = ["--token-file", s["token"]] if token else []
    return run_in(
        s["ns"], s["bin"], "query", "127.0.0.1:9799", "-w", out, *extra, *args, text=True
    )


def test_query_answers_what_tcpdump_selects(service, tapdeck, tmp_path):
    traffic(service["ns"])
    # Everything seen is stored (nothing in flight) before asking.
    wait_for(lambda: settled(service["ns"]), 20, "every packet seen to be stored")
    filters = [
        "icmp",
        "icmp6",
        "udp port 5001",
        "host 127.0.0.1 and udp",
        "ip6",
        "tcp",
        "udp and len > 200",
    ]
    answers = {}
    for i, flt in enumerate(filters):
        out = tmp_path / f"q{i}.pcapng"
        r = query(service, out, flt)
        assert r.returncode == 0, r.stderr
        answers[flt] = tcpdump_lines(out)
    # The oracle: the whole store as it is now (it only grows: later packets are not in
    # the queries' files, so compare on what both hold, by time).
    whole = tmp_path / "whole.pcapng"
    r = tapdeck("extract", service["store"], "--no-index", "-w", whole)
    assert r.returncode == 0, r.describe()
    for flt, got in answers.items():
        want = tcpdump_lines(whole, flt)
        assert got == want[: len(got)], (
            f"`{flt}`: the API's answer is not what tcpdump selects"
        )
        if flt in ("icmp", "udp port 5001", "icmp6"):
            assert got, f"`{flt}` found nothing"
    # The service's own HTTP answers cross the loopback it records: tcp is not empty, and
    # is still exactly what tcpdump selects.
    # The query log names the client, the filter and what was read.
    wait_for(
        lambda: 'filter "udp port 5001"' in service["log"].read_text(),
        5,
        "the query log",
    )
    assert "skipped by the flow index" in service["log"].read_text()


def test_files_lists_the_store_and_errors_are_one_line(service, tmp_path):
    traffic(service["ns"])
    # The list holds finished files. The traffic may stay under rotate-size (it was cut or
    # not by a few KiB of HTTP on the same loopback), so SIGUSR1 finishes the file: at the
    # next packet, which the polling requests themselves make.
    service["proc"].send_signal(signal.SIGUSR1)
    files = []

    def listed():
        nonlocal files
        r = run_in(
            service["ns"],
            "curl",
            "-s",
            "-H",
            f"Authorization: Bearer {TOKEN}",
            "http://127.0.0.1:9799/api/v1/files",
            text=True,
        )
        files = json.loads(r.stdout)
        return bool(files)

    wait_for(listed, 20, "a finished file in /api/v1/files after SIGUSR1")
    assert all("packets" in f and f["flow_index"] for f in files), files
    r = query(service, tmp_path / "bad.pcapng", "host", "no.such.host.invalid")
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and "does not compile" in r.stderr, r.stderr
    r = query(service, tmp_path / "bad.pcapng", "--start", "yesterday")
    assert r.returncode != 0 and "is not a time" in r.stderr, r.stderr
    r = query(
        service, tmp_path / "bad.pcapng", "--start", "1795659768", "--end", "1795659767"
    )
    assert r.returncode != 0 and "start must be before end" in r.stderr, r.stderr


def test_the_token_is_required(service, tmp_path):
    r = query(service, tmp_path / "x.pcapng", "icmp", token=False)
    assert r.returncode != 0 and "wants a token" in r.stderr, r.stderr
    assert (
        not (tmp_path / "x.pcapng").exists()
        or (tmp_path / "x.pcapng").stat().st_size == 0
    )
    r = run_in(
        service["ns"],
        "curl",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "http://127.0.0.1:9799/api/v1/packets",
        text=True,
    )
    assert r.stdout == "401"


@pytest.mark.parametrize("limits", ['query-max-bytes = "64KiB"\n'])
def test_an_answer_ends_at_the_byte_limit_and_the_log_says_so(
    service, tmp_path, limits
):
    traffic(service["ns"])
    wait_for(lambda: settled(service["ns"]), 20, "every packet seen to be stored")
    out = tmp_path / "cut.pcapng"
    query(service, out)
    # The answer stops before the limit; what was sent is a readable prefix of a file.
    assert 0 < out.stat().st_size <= 64 * 1024, out.stat().st_size
    wait_for(
        lambda: (
            "cut short: the answer reached the byte limit" in service["log"].read_text()
        ),
        5,
        "the log to say the answer was cut at the byte limit",
    )


def test_bad_limits_are_refused_at_start(tapdeck, ns, tmp_path):
    cfg = tmp_path / "t.toml"
    cfg.write_text(
        f'interface = ["lo"]\nstore = "{tmp_path / "S"}"\nquery-max-bytes = "lots"\n'
    )
    r = run_in(ns, tapdeck.bin, "serve", "--config", cfg, "--check", text=True)
    assert r.returncode == 2, r.stderr
    assert "query-max-bytes" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_no_capture_serves_existing_stores_read_only(tapdeck, tmp_path, procs):
    """`serve --no-capture STORE…`: queries over stores recorded earlier (two, merged by
    time), healthy while it serves, SIGHUP (no token file to re-read) and SIGUSR1 survived,
    SIGTERM ends it with 0."""
    stores = []
    for seed in (1, 2):
        pcap = write_pcap(tmp_path / f"t{seed}.pcap", gen_packets(3000, seed=seed))
        store = tmp_path / f"S{seed}"
        r = tapdeck("record", "-r", pcap, "--store", store, "-q")
        assert r.returncode == 0, r.describe()
        stores.append(store)
    served = Served(tapdeck.bin, procs, tmp_path, "--listen", f"127.0.0.1:{free_port()}",
                    "--no-capture", *stores)
    p, addr = served.proc, served.addr

    def answers():
        r = subprocess.run(
            ["curl", "-sf", f"http://{addr}/healthz"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return r.returncode == 0 and '"read-only"' in r.stdout

    wait_for(answers, 20, "the read-only service to answer /healthz")
    p.send_signal(1)
    p.send_signal(10)
    flt = random.Random(3).choice(["udp", "tcp", "udp and port 53"])
    out = tmp_path / "q.pcapng"
    r = subprocess.run(
        [str(tapdeck.bin), "query", addr, "-w", str(out), flt],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    merged = tmp_path / "merged.pcapng"
    r = tapdeck("extract", *stores, "-f", flt, "--no-index", "-w", merged)
    assert r.returncode == 0, r.describe()
    assert tcpdump_lines(out) == tcpdump_lines(merged) != []
    r = subprocess.run(
        ["curl", "-sf", f"http://{addr}/api/v1/info"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    info = json.loads(r.stdout)
    assert [s["packets"] for s in info["stores"]] == [3000, 3000], info
    assert all(s["first_ts_ns"] <= s["last_ts_ns"] for s in info["stores"]), info
    assert p.poll() is None, "SIGHUP or SIGUSR1 ended the read-only service"
    p.terminate()
    assert p.wait(timeout=10) == 0
