"""`tapdeck serve` for real: live capture on a veth pair, scraped by a real Prometheus, run
under the systemd unit's identity, signalled, crashed, starved of disk and attacked.

    netns C: tapdeck serve -i tdsc, tdsc 198.18.71.1 ─veth─ tdsg 198.18.71.2 :netns G

Every test makes its own two namespaces and removes them. The traffic is UDP datagrams sent
from C to a socket bound in G (so no ICMP comes back), each carrying a magic and a sequence
number: a frame sent from C is handed to the capture socket before it leaves the veth, so
exactly the datagrams a sender reports must be in the store. HTTP requests to `serve` (and
to Prometheus, which runs in C too) are made from a thread that has joined C (`setns`).

Oracles: Prometheus' own scraper, query API and rule loader, `promtool check metrics`,
tcpdump on the extract, the kernel's view of the process (`/proc/PID/status`: uid, caps,
NoNewPrivs, VmRSS; `/proc/PID/fd`), `stat` of the files, and a real AF_UNIX datagram socket
for sd_notify. Needs root, ip, tcpdump, prometheus and promtool (package `prometheus`),
setpriv, useradd, mkfs.ext4 and a loop device. About 70 s.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pwd
import random
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import netlab
import pytest
from conftest import (
    QUICK,
    REPO,
    data_files,
    finish,
    kill_all,
    loop_ext4,
    need,
    one_error_line,
    partial_files,
    read_packets,
    run,
    wait_for,
)
from netlab import call_in_ns, free_port, in_ns
from served import Served, http_request, wait_exit, write_config

CAP_ADDR, GEN_ADDR = "198.18.71.1", "198.18.71.2"
SINK_PORT = 7171
MAGIC = b"TDSV"
UNIT = REPO / "deploy" / "tapdeck.service"
RULES = REPO / "deploy" / "tapdeck.rules.yml"
MiB = 1 << 20
O_DIRECT_SLACK = 64 * 1024

# Small pools: the machine is shared, and none of these tests needs throughput. At a few
# thousand packets a second each ring block is retired by the 10 ms timeout, so it is the
# number of blocks that says how long a capture thread may go unscheduled before the kernel
# drops: 64 blocks, 640 ms (16 MiB).
BASE_CONFIG = {
    "staging": "32MiB",
    "chunk-size": "1MiB",
    "ring-block-size": "256KiB",
    "ring-blocks": 64,
    "block-timeout-ms": 10,
    "flush-interval": 0.2,
    "min-free": "0",
    "compressors": 1,
}


# --------------------------------------------------------------------------------------
# Network namespaces
# --------------------------------------------------------------------------------------


class Link(netlab.Link):
    """Namespaces C (capture, `serve`) and G joined by the veth pair tdsc/tdsg; IPv6 off so
    that nothing but the test's traffic (and ARP) crosses it. A socket in G takes the
    datagrams and never reads them: no ICMP replies."""

    ifname = "tdsc"

    def __init__(self):
        self._sink = None
        super().__init__("tds", self.ifname, CAP_ADDR, "tdsg", GEN_ADDR)

    @property
    def cap(self) -> str:
        return self.a

    @property
    def gen(self) -> str:
        return self.b

    def build(self):
        super().build()
        self._sink = call_in_ns(self.gen, self._bind_sink)

    @staticmethod
    def _bind_sink():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((GEN_ADDR, SINK_PORT))
        return s

    def close(self):
        if self._sink is not None:
            self._sink.close()
        super().close()


@pytest.fixture
def link(procs):
    need("tcpdump")
    lk = Link()
    yield lk
    # Whatever runs inside the namespaces goes before they do.
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.communicate(timeout=10)
    lk.close()


# The sender runs in C: datagrams of `size` bytes (MAGIC, sequence number, random bytes, so
# nothing compresses them) to the sink in G, paced to `pps`; prints how many it sent.
SENDER = r"""
import os, signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped early: still say how many
addr, port, count, size, pps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
t0 = time.monotonic()
sent = 0
try:
    for i in range(count):
        s.sendto(b"TDSV" + i.to_bytes(4, "big") + os.urandom(size - 8), (addr, port))
        sent += 1
        ahead = t0 + sent / pps - time.monotonic()
        if ahead > 0.002:
            time.sleep(ahead)
finally:
    print(sent, flush=True)
"""


def start_sender(link, procs, count, *, size=1000, pps=5000.0) -> subprocess.Popen:
    args = [GEN_ADDR, SINK_PORT, count, size, pps]
    p = subprocess.Popen(
        [*in_ns(link.cap), sys.executable, "-c", SENDER, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    procs.append(p)
    return p


def sender_done(p: subprocess.Popen, timeout: float = QUICK) -> int:
    """How many datagrams the sender says it sent (it must have exited cleanly)."""
    rc, out, err = finish(p, timeout=timeout)
    assert rc == 0, err
    return int(out.strip())


def send(link, procs, count, **kw) -> int:
    return sender_done(
        start_sender(link, procs, count, **kw), timeout=QUICK + count / 1000
    )


# --------------------------------------------------------------------------------------
# Config files, the service and its HTTP side
# --------------------------------------------------------------------------------------


def service_config(link, store, port, **keys) -> dict:
    return {
        "interface": [link.ifname],
        "store": str(store),
        "listen": f"127.0.0.1:{port}",
        **BASE_CONFIG,
        **keys,
    }


def summary_stored(stderr: str) -> int:
    m = re.search(
        r"^  packets: seen (\d+)  stored (\d+)  dropped (\d+)", stderr, re.MULTILINE
    )
    assert m, stderr[-2000:]
    return int(m.group(2))


def seq_of(path: Path) -> int:
    """The sequence number of a data file `TIME-sSS-NNNNNN.ext`."""
    return int(path.name.rsplit("-", 1)[1].split(".")[0])


def sent_sequences(tapdeck, store, tmp_path, name="extract.pcapng") -> list[int]:
    """Sequence numbers of the test's datagrams in the store, in stored order, as tcpdump
    selects them from the extract (our reader only takes the numbers out)."""
    out = tmp_path / name
    r = tapdeck.extract(store, out)
    assert r.returncode == 0, r.describe()
    flt = (
        f"udp and src host {CAP_ADDR} and dst host {GEN_ADDR} and dst port {SINK_PORT}"
    )
    ours = tmp_path / f"ours-{name}"
    r = run(["tcpdump", "-r", out, "-w", ours, flt])
    assert r.returncode == 0, r.describe()
    seqs = []
    for p in read_packets(ours):
        payload = p.data[14 + 20 + 8 :]
        assert payload[:4] == MAGIC, p.data[:64].hex()
        seqs.append(int.from_bytes(payload[4:8], "big"))
    return seqs


def proc_status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def starter(tapdeck_bin, link, procs, workdir):
    """start(config_keys or path, *flags, **kw) → a running Served (not yet waited for)."""
    count = [0]

    def go(config, *args, **kw) -> Served:
        count[0] += 1
        if isinstance(config, dict):
            config = write_config(workdir / f"tapdeck{count[0]}.toml", config)
        kw.setdefault("name", f"serve{count[0]}")
        return Served(tapdeck_bin, procs, workdir, *args, config=config, ns=link.cap, **kw)

    return go


@pytest.fixture
def start(tapdeck_bin, link, procs, tmp_path):
    return starter(tapdeck_bin, link, procs, tmp_path)


@contextlib.contextmanager
def module_link(procs):
    """A Link for a module-scoped scenario; what runs in it (`procs`) is killed first."""
    need("tcpdump")
    with Link() as lk:
        try:
            yield lk
        finally:
            kill_all(procs)


# --------------------------------------------------------------------------------------
# 1. Config errors, --check, flags over the file
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scratch_ns():
    """An empty network namespace (lo only) for starts that must be refused: should one
    not be, it captures nothing and binds nothing on the host (and `run` ends it)."""
    need()
    with netlab.Lab("tdsx", ["x"]) as lab:
        yield lab.ns["x"]


@pytest.fixture
def serve_check(tapdeck, scratch_ns, tmp_path):
    """serve_check(text, *flags) → (config path, Result of `serve --config PATH *flags`)."""

    def go(text: str, *flags):
        path = tmp_path / "t.toml"
        path.write_text(text)
        r = run(
            [
                "ip",
                "netns",
                "exec",
                scratch_ns,
                tapdeck.bin,
                "serve",
                "--config",
                path,
                *flags,
            ]
        )
        return path, r

    return go


GOOD = 'interface = ["lo"]\nstore = "{store}"\nstaging = "32MiB"\n'


@pytest.mark.parametrize(
    "text,line,key,words",
    [
        (
            '{good}\n# a comment\nmax-byte = "1GiB"\n',
            6,
            "max-byte",
            "unknown key `max-byte` (not a `tapdeck record` option nor a serve setting); did you mean `max-bytes`?",
        ),
        ("{good}zzzzzz = 3\n", 4, "zzzzzz", "unknown key `zzzzzz`"),
        (
            '{good}threads = "two"\n',
            4,
            "threads",
            'key `threads`: invalid type: string "two"',
        ),
        (
            '{good}log-format = "xml"\n',
            4,
            "log-format",
            "key `log-format`: unknown variant `xml`",
        ),
        (
            '{good}health-stall = "soon"\n',
            4,
            "health-stall",
            "key `health-stall`: invalid type",
        ),
        ("{good}\nthreads = \n", 5, None, "line 5: "),
        ('{good}listen = "127.0.0.1:80\n', 4, None, "line 4: "),
    ],
)
def test_config_errors_name_the_file_line_and_key(
    serve_check, tmp_path, text, line, key, words
):
    store = tmp_path / "S"
    good = GOOD.format(store=store)
    path, r = serve_check(text.format(good=good))
    # Exit 2: a usage error, which the unit does not restart (RestartPreventExitStatus=2).
    assert r.returncode == 2, r.describe()
    msg = one_error_line(r.stderr)
    assert msg.startswith(f"tapdeck: {path}, line {line}: "), msg
    assert words in msg, msg
    if key:
        assert f"`{key}`" in msg, msg
    assert r.out == "" and not store.exists(), "a refused config did something"


def test_a_value_refused_after_parsing_names_the_file_line_and_key(
    serve_check, tmp_path
):
    """Sizes, durations, ladders, CPU lists are checked by the recorder's option builder after
    the file parsed; the error still names the file, the line and the key (before the fix in
    this branch it named only the flag: `tapdeck: --max-bytes lots: not a size`)."""
    store = tmp_path / "S"
    for text, line, key in (
        ('max-bytes = "lots"\n', 4, "max-bytes"),
        ('codec = "zstd:3,gzip"\n', 4, "codec"),
        ("\nflush-interval = -1.0\n", 5, "flush-interval"),
        ('pin-capture = "x"\n', 4, "pin-capture"),
    ):
        path, r = serve_check(GOOD.format(store=store) + text)
        assert r.returncode == 2, r.describe()
        msg = one_error_line(r.stderr)
        assert msg.startswith(f"tapdeck: {path}, line {line}: key `{key}`: "), msg
    # The same value given as a flag is named as the flag.
    path, r = serve_check(GOOD.format(store=store), "--max-bytes", "lots")
    assert r.returncode == 2, r.describe()
    assert (
        one_error_line(r.stderr)
        == "tapdeck: --max-bytes lots: not a size (e.g. 4MiB, 10G, 123456)"
    )
    assert not store.exists()


def test_check_refuses_what_the_start_refuses(serve_check, tmp_path):
    store = tmp_path / "S"
    _, r = serve_check(GOOD.format(store=store) + 'chunk-size = "256KiB"\n', "--check")
    assert r.returncode == 2, r.describe()
    msg = one_error_line(r.stderr)
    assert "chunk-size" in msg and "line 4" in msg, msg


def test_check_and_refusals_at_start(tapdeck, serve_check, tmp_path):
    store = tmp_path / "S"
    good = GOOD.format(store=store)
    # A good file: exit 0, says what would run, and touches nothing.
    _, r = serve_check(good, "--check")
    assert r.returncode == 0, r.describe()
    assert (
        r.out
        == f"config OK: records lo (1 capture thread(s)) into {store}; HTTP on 127.0.0.1:9780\n"
    )
    assert r.stderr == "" and not store.exists()
    # --check sees flags over the file.
    _, r = serve_check(
        good + 'listen = "127.0.0.1:9781"\n',
        "--check",
        "--listen",
        "127.0.0.1:9999",
    )
    assert r.returncode == 0 and "HTTP on 127.0.0.1:9999\n" in r.out, r.describe()

    # Beyond loopback without a token: refused by --check and by a real start.
    open_listen = good + 'listen = "0.0.0.0:9781"\n'
    for flags in (["--check"], []):
        _, r = serve_check(open_listen, *flags)
        assert r.returncode == 2, r.describe()
        msg = one_error_line(r.stderr)
        assert "listen = 0.0.0.0:9781 is reachable beyond this host" in msg, msg
        assert "metrics-token-file" in msg, msg
    assert not store.exists()
    token = tmp_path / "token"
    token.write_text("s3cret-0123456789abcdef\n")  # 16 characters at least (issue 31)
    _, r = serve_check(open_listen + f'metrics-token-file = "{token}"\n', "--check")
    assert r.returncode == 0 and r.out.endswith(
        "HTTP on 0.0.0.0:9781 (token required)\n"
    ), r.describe()
    token.write_text("\n")
    _, r = serve_check(open_listen + f'metrics-token-file = "{token}"\n', "--check")
    assert r.returncode == 2, r.describe()
    assert f"metrics-token-file {token} is empty" in one_error_line(r.stderr)

    # A missing interface, and none at all: one line each.
    _, r = serve_check(good.replace('"lo"', '"tdsnosuch0"'))
    assert r.returncode == 2, r.describe()
    assert one_error_line(r.stderr) == (
        "tapdeck: interface tdsnosuch0 does not exist on this host "
        "(see `ip link`); fix `interface` in the config or -i"
    )
    _, r = serve_check(f'store = "{store}"\n')
    assert r.returncode == 2, r.describe()
    assert "interface" in one_error_line(r.stderr)
    r = tapdeck("serve", "--config", tmp_path / "nonexistent.toml", "--check")
    assert r.returncode == 2, r.describe()
    assert f"{tmp_path / 'nonexistent.toml'}" in one_error_line(r.stderr)
    assert not store.exists()


def test_flags_override_the_file(tapdeck, link, start, tmp_path):
    """--listen and --rotate-size on the command line win over the file: the service
    answers where the flag says and cuts files as the flag says."""
    in_file, on_flag = free_port(link.cap), free_port(link.cap)
    while on_flag == in_file:
        on_flag = free_port(link.cap)
    keys = service_config(link, tmp_path / "S", in_file, **{"rotate-size": "64MiB"})
    s = start(keys, "--listen", f"127.0.0.1:{on_flag}", "--rotate-size", "2MiB")
    assert s.port == on_flag
    s.wait_recording()
    assert "a new file every 60 s or 2.0 MiB;" in s.log_text(), s.log_text()
    assert f"serving http://127.0.0.1:{on_flag}/metrics" in s.log_text()
    with pytest.raises(ConnectionRefusedError):
        http_request(link.cap, in_file, "/healthz")
    s.stop()


# --------------------------------------------------------------------------------------
# 2 and 3. A real Prometheus; the token
# --------------------------------------------------------------------------------------


class Prometheus:
    def __init__(self, link, procs, workdir: Path, jobs: list[dict]):
        need("prometheus", "promtool")
        self.link = link
        self.port = free_port(link.cap)
        cfg = workdir / "prometheus.yml"
        shutil.copy(RULES, workdir / "tapdeck.rules.yml")
        cfg.write_text(
            json.dumps(
                {  # JSON is YAML
                    "global": {
                        "scrape_interval": "1s",
                        "evaluation_interval": "1s",
                        "scrape_timeout": "900ms",
                    },
                    "rule_files": ["tapdeck.rules.yml"],
                    "scrape_configs": jobs,
                },
                indent=1,
            )
        )
        r = run(["promtool", "check", "config", cfg])
        assert r.returncode == 0, r.describe()
        self.log = workdir / "prometheus.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    *in_ns(link.cap),
                    "prometheus",
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        procs.append(self.proc)

        def ready():
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                return self.get("/-/ready")[0] == 200
            except OSError:
                return False

        wait_for(ready, 30, "Prometheus to be ready", interval=0.2)

    def get(self, path):
        status, _, body = http_request(self.link.cap, self.port, path)
        return status, body

    def api(self, path, **params):
        status, body = self.get(f"/api/v1/{path}?{urllib.parse.urlencode(params)}")
        doc = json.loads(body)
        assert status == 200 and doc["status"] == "success", (status, doc)
        return doc["data"]

    def query(self, expr) -> dict[frozenset, float]:
        """The instant vector of `expr` now, by label set (without __name__)."""
        out = {}
        for r in self.api("query", query=expr)["result"]:
            labels = frozenset(
                (k, v) for k, v in r["metric"].items() if k != "__name__"
            )
            out[labels] = float(r["value"][1])
        return out

    def value(self, expr) -> float | None:
        v = self.query(expr)
        assert len(v) <= 1, v
        return next(iter(v.values()), None)


@pytest.fixture(scope="module")
def prometheus_run(tapdeck, tapdeck_bin, tmp_path_factory):
    """A real Prometheus scrapes `serve` (with the token, as deploy/prometheus.yml's
    commented block does; and a second job without it) while a known number of datagrams
    crosses the veth; then a SIGUSR1 rotation while a trickle flows, and the stop. What
    Prometheus, the service and the store said at each step, for the claims below."""
    procs = []
    tmp = tmp_path_factory.mktemp("prometheus")
    with module_link(procs) as lk:
        return scrape_with_prometheus(tapdeck, starter(tapdeck_bin, lk, procs, tmp), lk,
                                      procs, tmp)


def scrape_with_prometheus(tapdeck, start, link, procs, tmp_path) -> SimpleNamespace:
    facts = SimpleNamespace(tmp=tmp_path)
    token = "t0k-" + os.urandom(8).hex()
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    # The metrics token opens /metrics and /healthz only (issue 31): the status API takes a
    # token-file token.
    ops = "ops-" + os.urandom(8).hex()
    ops_file = tmp_path / "tokens"
    ops_file.write_text(f"ops {ops}\n")
    store = facts.store = tmp_path / "S"
    port = free_port(link.cap)
    # No minute cuts: the files are cut by the test's SIGUSR1 and SIGTERM only.
    keys = {
        "metrics-token-file": str(token_file),
        "token-file": str(ops_file),
        "listen": f"0.0.0.0:{port}",
        "rotate-interval": 0,
    }
    s = start(service_config(link, store, port, **keys), token=token)
    s.wait_recording()
    target = {"static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
    prom = Prometheus(
        link,
        procs,
        tmp_path,
        [
            {
                "job_name": "tapdeck",
                **target,
                "authorization": {
                    "type": "Bearer",
                    "credentials_file": str(token_file),
                },
            },
            {"job_name": "tapdeck-no-token", **target},
        ],
    )
    wait_for(
        lambda: (
            prom.value('up{job="tapdeck"}') == 1.0
            and prom.value('up{job="tapdeck-no-token"}') == 0.0
        ),
        20,
        "Prometheus to scrape with the token and be refused without it",
        0.25,
    )
    facts.up = {job: prom.value(f'up{{job="{job}"}}') for job in ("tapdeck", "tapdeck-no-token")}

    facts.sent = send(link, procs, 4000, pps=1000)  # over 4 s: several scrapes see it move
    direct = s.wait_settled(facts.sent)
    # Prometheus has caught up: its latest stored count is the settled one.
    wait_for(
        lambda: (
            prom.value('sum(tapdeck_packets_stored_total{job="tapdeck"})')
            == direct.stored
        ),
        20,
        f"Prometheus to see {direct.stored} packets stored",
        0.25,
    )
    facts.scrapes = stored_scrapes(prom)
    facts.dropped = prom.value('sum(tapdeck_packets_dropped_total{job="tapdeck"})')
    facts.healthy = (prom.value('max_over_time(tapdeck_healthy{job="tapdeck"}[1m])'),
                   prom.value('min_over_time(tapdeck_healthy{job="tapdeck"}[1m])'))

    facts.trickle_sent = rotate_while_trickling(s, link, procs, direct.stored)
    final = facts.final = s.wait_settled(facts.sent + facts.trickle_sent)
    wait_for(
        lambda: (
            prom.value('sum(tapdeck_packets_stored_total{job="tapdeck"})')
            == final.stored
        ),
        20,
        "Prometheus to see the final count",
        0.25,
    )
    facts.info_rotated = tapdeck.info(store)
    status, _, body = s.get("/api/v1/status", token=ops)
    facts.status = (status, json.loads(body))

    # The alert rules: loaded, evaluated, healthy.
    def rules():
        groups = prom.api("rules")["groups"]
        rs = [r for g in groups if g["name"] == "tapdeck" for r in g["rules"]]
        return rs if rs and all(r["health"] == "ok" for r in rs) else None

    facts.rules = wait_for(rules, 20, "the rules to be evaluated healthy", 0.25)
    facts.alerts = prom.api("alerts")["alerts"]
    # What a curl (or promtool user) gets, and what Prometheus gets.
    facts.classic = s.get("/metrics")
    om = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    facts.openmetrics = s.get("/metrics", accept=om)

    facts.stop_err = s.stop()
    facts.info_stopped = tapdeck.info(store)
    return facts


def rotate_while_trickling(s, link, procs, stored: int) -> int:
    """A SIGUSR1 rotation while datagrams still flow (on a quiet link it waits for the next
    packet: see test_sigusr1_on_a_quiet_link_completes_the_file); the trickle's count."""
    trickle = start_sender(link, procs, 300, size=200, pps=100)
    wait_for(
        lambda: s.scrape().stored > stored + 10,
        10,
        "the trickle to be stored",
        0.1,
    )
    s.proc.send_signal(signal.SIGUSR1)
    s.wait_log("SIGUSR1: starting new files")
    wait_for(
        lambda: s.scrape().total("tapdeck_files_written_total") == 1,
        10,
        "the rotation to complete the first file",
        0.1,
    )
    return sender_done(trickle)


def stored_scrapes(prom) -> dict[float, dict]:
    """The raw samples Prometheus stored, scrape by scrape (one timestamp each), per stream
    and interface: {timestamp: {(stream, interface): {name: value}}}."""
    scrapes: dict[float, dict] = {}
    expr = (
        '{__name__=~"tapdeck_packets_(seen|stored|dropped)_total|tapdeck_packets_in_flight",'
        'job="tapdeck"}[10m]'
    )
    for r in prom.api("query", query=expr)["result"]:
        m = r["metric"]
        key = (m["stream"], m["interface"])
        for ts, v in r["values"]:
            per = scrapes.setdefault(ts, {}).setdefault(key, {})
            name = m["__name__"]
            per[name] = per.get(name, 0.0) + float(v)  # the causes of drops add up
    return scrapes


def test_prometheus_scrapes_with_the_token_and_is_refused_without(prometheus_run):
    assert prometheus_run.up == {"tapdeck": 1.0, "tapdeck-no-token": 0.0}


def test_prometheus_scrapes_balanced_counters(prometheus_run):
    """Every scrape balances, per stream and interface: seen = stored + dropped + in flight,
    while the count moves; nothing dropped, healthy throughout."""
    sent = prometheus_run.sent
    assert sent == 4000
    moving = 0
    for ts, per in sorted(prometheus_run.scrapes.items()):
        for key, v in per.items():
            rest = (
                v["tapdeck_packets_stored_total"]
                + v["tapdeck_packets_dropped_total"]
                + v["tapdeck_packets_in_flight"]
            )
            assert v["tapdeck_packets_seen_total"] == rest, (ts, key, v)
            moving += 0 < v["tapdeck_packets_seen_total"] < sent
    assert len(prometheus_run.scrapes) >= 6 and moving >= 2, (
        len(prometheus_run.scrapes), moving
    )
    assert prometheus_run.dropped == 0.0
    assert prometheus_run.healthy == (1.0, 1.0)


def test_sigusr1_while_prometheus_scrapes_completes_a_file(prometheus_run):
    info, final = prometheus_run.info_rotated, prometheus_run.final
    assert info["totals"]["files"] == 1 and len(info["being_written"]) == 1, info
    assert 0 < info["totals"]["packets"] < final.stored, (info["totals"], final.stored)


def test_the_status_api_says_what_the_metrics_say(prometheus_run):
    """/api/v1/status says the same as /metrics once nothing moves."""
    final, store = prometheus_run.final, prometheus_run.store
    status, doc = prometheus_run.status
    assert status == 200 and doc["health"]["healthy"], doc
    totals = doc["stats"]["totals"]
    assert totals["stored"] == final.stored and totals["seen"] == final.total(
        "tapdeck_packets_seen_total"
    )
    assert doc["stats"]["files_written"] == 1
    assert [d["path"] for d in doc["data_dirs"]] == [str(store)]
    assert doc["horizon_ns"] <= time.time_ns()
    version = final.series("tapdeck_build_info")
    assert [dict(ls)["version"] for ls in version] == [doc["version"]]


def test_prometheus_loads_the_alert_rules_and_none_fires(prometheus_run):
    loaded = prometheus_run.rules
    assert sorted(r["name"] for r in loaded) == sorted(
        [
            "TapdeckPacketsDropped",
            "TapdeckCaptureStalled",
            "TapdeckDown",
            "TapdeckDiskNearlyFullWithoutRetention",
            "TapdeckRetentionHorizonShort",
            "TapdeckDataDirFailed",
        ]
    )
    assert all(not r.get("lastError") for r in loaded), loaded
    firing = [
        a
        for a in prometheus_run.alerts
        if a["labels"].get("job") == "tapdeck"
        and a["labels"]["alertname"]
        in ("TapdeckPacketsDropped", "TapdeckCaptureStalled", "TapdeckDataDirFailed")
    ]
    assert firing == [], firing


def test_promtool_accepts_the_classic_scrape(prometheus_run):
    """promtool lints what a curl (or promtool user) gets: the classic text format."""
    status, headers, body = prometheus_run.classic
    assert headers["content-type"].startswith("text/plain; version=0.0.4"), headers
    r = run(["promtool", "check", "metrics"], input=body)
    assert r.returncode == 0 and r.out == "" and r.stderr == "", r.describe()


def test_the_openmetrics_scrape_lacks_only_help_on_total_samples(prometheus_run):
    """What Prometheus gets is OpenMetrics, which promtool 2.x reads as the classic format:
    its only complaints are that the `_total` samples lack HELP, which OpenMetrics gives
    their family (named without `_total`). Nothing else."""
    status, headers, body = prometheus_run.openmetrics
    assert headers["content-type"].startswith("application/openmetrics-text"), headers
    assert body.endswith(b"# EOF\n")
    r = run(["promtool", "check", "metrics"], input=body)
    complaints = set((r.out + r.stderr).splitlines())
    helped = {
        m[: -len(" counter")]
        for m in re.findall(r"^# TYPE (\S+ counter)$", body.decode(), re.MULTILINE)
    }
    assert complaints == {f"{name}_total no help text" for name in helped}, r.describe()


def test_stopped_the_store_holds_what_prometheus_last_saw(tapdeck, prometheus_run):
    """Every file complete, and the store holds exactly what the last scrape (and
    Prometheus) said was stored, every datagram sent among it."""
    final, store = prometheus_run.final, prometheus_run.store
    assert summary_stored(prometheus_run.stop_err) == final.stored, prometheus_run.stop_err[-2000:]
    info = prometheus_run.info_stopped
    assert info["being_written"] == [] and info["totals"]["files"] == 2, info
    assert info["totals"]["packets"] == final.stored, (info["totals"], final.stored)
    seqs = sent_sequences(tapdeck, store, prometheus_run.tmp)
    # (Sequence numbers start at 0 for each sender: the 4000, then the trickle.)
    sent, trickle_sent = prometheus_run.sent, prometheus_run.trickle_sent
    assert sorted(seqs) == sorted([*range(sent), *range(trickle_sent)]), len(seqs)
    r = tapdeck.verify(store)
    assert r.returncode == 0, r.describe()


def test_token_is_required_and_rotated_by_sighup(tapdeck, link, start, tmp_path):
    """With metrics-token-file every route answers 401 (WWW-Authenticate: Bearer) without
    the exact token, 200 with it, also from the other namespace (listen 0.0.0.0);
    `tapdeck status` exits 1 in one line without the token file, 0 with it. Rewriting the
    file and SIGHUP rotates the token (before the fix in this branch the reload said
    "nothing changed" and the old token stayed valid). Since issue 31 the metrics token opens
    /metrics and /healthz only (403 elsewhere), and tokens have 16 characters at least: the
    status API and `tapdeck status` take a token-file token, rotated the same way."""
    first, second = "first-token-0123456789", "second-token-0123456789"
    first_ops, second_ops = "first-ops-0123456789", "second-ops-0123456789"
    token_file = tmp_path / "token"
    token_file.write_text(first + "\n")
    ops_file = tmp_path / "tokens"
    ops_file.write_text(f"ops {first_ops}\n")
    port = free_port(link.cap)
    cfg = write_config(
        tmp_path / "tapdeck.toml",
        service_config(
            link,
            tmp_path / "S",
            port,
            listen=f"0.0.0.0:{port}",
            **{"metrics-token-file": str(token_file), "token-file": str(ops_file)},
        ),
    )
    s = start(cfg, token=first)
    s.wait_recording()
    for path in ("/metrics", "/healthz", "/api/v1/status"):
        status, headers, body = s.get(path, token=None)
        assert status == 401 and headers.get("www-authenticate") == "Bearer", (
            path,
            status,
            body,
        )
        assert b"tapdeck_" not in body and b"healthy" not in body
        assert s.get(path, token=first + "X")[0] == 401
        assert s.get(path, token=first[:-1])[0] == 401
        if path == "/api/v1/status":
            assert s.get(path)[0] == 403, "the metrics token got the status"
            assert s.get(path, token=first_ops)[0] == 200
        else:
            assert s.get(path)[0] == 200
    # From the other namespace, over the veth: `listen = 0.0.0.0` is reachable, and only
    # with the token.
    st, _, _ = http_request(link.gen, port, "/metrics", host=CAP_ADDR)
    assert st == 401
    st, _, body = http_request(
        link.gen,
        port,
        "/metrics",
        host=CAP_ADDR,
        headers={"Authorization": f"Bearer {first}"},
    )
    assert st == 200 and b"tapdeck_build_info" in body

    status_cmd = [
        *in_ns(link.cap),
        tapdeck.bin,
        "status",
        "--listen",
        f"127.0.0.1:{port}",
    ]
    r = run(status_cmd)
    assert r.returncode == 1, r.describe()
    assert "wants a token: pass --token-file" in one_error_line(r.stderr)
    r = run([*status_cmd, "--token-file", ops_file])
    assert r.returncode == 0, r.describe()
    assert re.match(
        r"tapdeck \S+ at recording: healthy\n  packets: seen \d+  stored \d+", r.out
    ), r.out
    r = run([*status_cmd, "--token-file", ops_file, "--json"])
    assert r.returncode == 0 and json.loads(r.out)["health"]["healthy"] is True, (
        r.describe()
    )

    # A rotated token: the file is rewritten (same path) and SIGHUP makes it the token.
    mark = len(s.log_text())
    token_file.write_text(second + "\n")
    s.proc.send_signal(signal.SIGHUP)
    s.wait_log("re-read; now in effect: metrics-token-file", after=mark)
    assert s.get("/metrics", token=first)[0] == 401
    assert s.get("/metrics", token=second)[0] == 200
    # The token file's token, likewise.
    mark = len(s.log_text())
    ops_file.write_text(f"ops {second_ops}\n")
    s.proc.send_signal(signal.SIGHUP)
    s.wait_log("re-read; now in effect: token-file", after=mark)
    r = run([*status_cmd, "--token-file", ops_file])
    assert r.returncode == 0, r.describe()
    # An old token file: the answer says the token was refused, not that none was sent.
    old = tmp_path / "old-token"
    old.write_text(f"ops {first_ops}\n")
    r = run([*status_cmd, "--token-file", old])
    assert r.returncode == 1, r.describe()
    assert f"refused the token in {old}" in one_error_line(r.stderr)
    s.stop()


# --------------------------------------------------------------------------------------
# 4. SIGHUP: a retention limit changed live
# --------------------------------------------------------------------------------------


def store_bytes(store: Path) -> int:
    """Bytes of data files (complete, being written, their index sidecars)."""
    return sum(
        p.stat().st_size
        for p in store.iterdir()
        if p.is_file() and re.search(r"\.pcapng(\.idx)?(\.partial)?$", p.name)
    )


def test_sighup_lowers_max_bytes_live(tapdeck, link, procs, start, tmp_path):
    """max-bytes 64 MiB → 1 MiB by rewriting the file and SIGHUP: logged as in effect,
    retention deletes the oldest files at once (counted in tapdeck_files_deleted_total and
    _bytes_deleted_total) down to the limit; `threads`, changed too, is logged as kept until
    a restart (one stream still); a file that does not load changes nothing and the log says
    why, with its line."""
    store = tmp_path / "S"
    keys = service_config(
        link,
        store,
        free_port(link.cap),
        codec="none",
        **{"max-bytes": "64MiB", "rotate-size": "256KiB", "min-keep": 0},
    )
    cfg = write_config(tmp_path / "tapdeck.toml", keys)
    s = start(cfg)
    s.wait_recording()
    assert "keeping the store under 64.0 MiB" in s.log_text()
    sent = send(link, procs, 6000, size=1000, pps=6000)
    before = s.wait_settled(sent)
    files = data_files(store)
    assert len(files) >= 20, files
    assert before.total("tapdeck_files_deleted_total") == 0
    assert store_bytes(store) > 5 * MiB

    # 1 MiB now; and a key that needs a restart.
    mark = len(s.log_text())
    write_config(cfg, {**keys, "max-bytes": "1MiB", "threads": 2})
    s.proc.send_signal(signal.SIGHUP)
    s.wait_log("re-read; now in effect: max-bytes", after=mark)
    log = s.wait_log(
        f"SIGHUP: changed in {cfg} but kept until a restart: threads", after=mark
    )
    assert f"SIGHUP: {cfg} re-read; now in effect: max-bytes\n" in log[mark:], log[
        mark:
    ]
    # Retention counts the open file by the bytes written to it; on disk an O_DIRECT file
    # is padded to the block size until it is finalized, hence the slack.
    wait_for(
        lambda: store_bytes(store) <= MiB + O_DIRECT_SLACK,
        10,
        "the store to shrink to 1 MiB",
    )
    complete = sum(
        p.stat().st_size
        for p in store.iterdir()
        if re.search(r"\.pcapng(\.idx)?$", p.name)
    )
    assert complete <= MiB, complete
    after = s.scrape()
    deleted = after.total("tapdeck_files_deleted_total")
    assert deleted > 0 and deleted == len(files) - len(data_files(store)), (
        deleted,
        files,
    )
    assert after.total("tapdeck_bytes_deleted_total") > 4 * MiB
    # The survivors are the newest files, and threads stayed 1 (one stream).
    survivors = data_files(store)
    assert survivors == files[-len(survivors) :], (survivors, files)
    assert {
        dict(ls)["stream"] for ls in after.series("tapdeck_packets_seen_total")
    } == {"0"}
    assert after.unbalanced() == []
    # A broken file on SIGHUP changes nothing, and says why in one line naming the line.
    text = cfg.read_text()
    at = text.splitlines().index('max-bytes = "1MiB"') + 1
    for broken, line, says in (
        (
            text + 'max-byts = "1MiB"\n',
            len(text.splitlines()) + 1,
            (
                "unknown key `max-byts` (not a `tapdeck record` option nor a serve setting); "
                "did you mean `max-bytes`?"
            ),
        ),
        (
            text.replace('max-bytes = "1MiB"', 'max-bytes = "lots"'),
            at,
            "key `max-bytes`: lots: not a size (e.g. 4MiB, 10G, 123456)",
        ),
    ):
        mark = len(s.log_text())
        cfg.write_text(broken)
        s.proc.send_signal(signal.SIGHUP)
        log = s.wait_log("nothing changed", after=mark)
        assert (
            f"ERROR SIGHUP: {cfg}, line {line}: {says}; nothing changed\n" in log[mark:]
        ), log[mark:]
    assert s.scrape().total("tapdeck_files_deleted_total") == deleted
    s.stop()
    r = tapdeck.verify(store)
    assert r.returncode == 0, r.describe()


# --------------------------------------------------------------------------------------
# 5. kill -9 and a restart
# --------------------------------------------------------------------------------------


def test_kill_9_then_restart_continues_the_store(tapdeck, link, procs, start, tmp_path):
    """kill -9 mid-traffic, then the same config again: the leftover `.partial` is
    finalized (one log line), file sequence numbers continue 1..n, `verify` passes, the
    restart's files hold exactly what its metrics said was stored, the crashed run's files
    at least what it had reported stored, and no datagram is stored twice."""
    store = tmp_path / "S"
    cfg = write_config(
        tmp_path / "tapdeck.toml",
        service_config(
            link, store, free_port(link.cap), codec="none", **{"rotate-size": "1MiB"}
        ),
    )
    first = start(cfg)
    first.wait_recording()
    sender = start_sender(link, procs, 40000, size=500, pps=5000)
    wait_for(
        lambda: (
            first.scrape().total("tapdeck_files_written_total") >= 2
            and len(partial_files(store)) == 1
        ),
        20,
        "two files complete and one open",
        0.1,
    )
    last = first.scrape()
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=10)
    complete_before = {p.name: seq_of(p) for p in data_files(store)}
    (partial,) = partial_files(store)
    finalized = partial.name[1:].removesuffix(".partial")

    second = start(cfg)
    log = second.wait_log("was left incomplete by an earlier run; finalized as")
    assert (
        f"{partial} was left incomplete by an earlier run; finalized as {store / finalized}"
        in log
    ), log
    second.wait_recording()
    sent = sender_done(sender, timeout=QUICK)
    settled = second.wait_settled(1)
    assert settled.stored > 0
    wait_for(
        lambda: second.scrape().stored == settled.stored, 5, "nothing more to arrive"
    )
    stored_after_restart = second.scrape().stored
    err = second.stop()
    assert summary_stored(err) == stored_after_restart, err[-2000:]

    r = tapdeck.verify(store)
    assert r.returncode == 0, r.describe()
    files = data_files(store)
    # Sequence numbers continue: 1..n, no gap, none reused, the restart's after the crash's.
    seqs = sorted(seq_of(p) for p in files)
    assert seqs == list(range(1, len(files) + 1)), [p.name for p in files]
    run1 = set(complete_before) | {finalized}
    assert min(seq_of(p) for p in files if p.name not in run1) > max(
        seq_of(store / n) for n in run1
    )
    per_file = {
        Path(f["path"]).name: f["packets"] for f in tapdeck.info(store)["files"]
    }
    assert set(per_file) == {p.name for p in files}
    before = sum(n for name, n in per_file.items() if name in run1)
    after = sum(n for name, n in per_file.items() if name not in run1)
    # What the restart stored is what its files hold; what the crash left holds at least
    # what the first run had reported stored when it was killed.
    assert after == stored_after_restart, (after, stored_after_restart)
    assert before >= last.stored, (before, last.stored)
    # No datagram twice; those missing were sent while nothing captured.
    got = sent_sequences(tapdeck, store, tmp_path)
    assert len(got) == len(set(got)), "a datagram was stored twice"
    assert set(got) <= set(range(sent))
    total = tapdeck.info(store)["totals"]["packets"]
    assert total == before + after
    print(
        f"kill -9 at {last.stored} stored; {sent} sent, {len(got)} stored, {before} in the "
        f"crashed run's files, {after} after the restart"
    )


# --------------------------------------------------------------------------------------
# 6. sd_notify, under the unit's user, capabilities and NoNewPrivileges
# --------------------------------------------------------------------------------------


def unit_settings() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            k, v = line.split("=", 1)
            out.setdefault(k.strip(), []).append(v.strip())
    return out


@contextlib.contextmanager
def throwaway_user(procs):
    """A throwaway system user standing in for the unit's User= (removed afterwards)."""
    name = f"tds{os.getpid() % 100000}"
    r = run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ]
    )
    assert r.returncode == 0, r.describe()
    try:
        yield pwd.getpwnam(name)
    finally:
        # userdel refuses while the user runs a process: the test's go first (by pid), and a
        # busy /etc/passwd lock is waited for.
        kill_all(procs)
        deadline = time.monotonic() + 15
        while (r := run(["userdel", name])).returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert r.returncode == 0, f"could not remove the test user {name}: {r.describe()}"


@contextlib.contextmanager
def shared_directory():
    """A directory outside pytest's (0700) tree, that the unit's user can reach."""
    d = Path(tempfile.mkdtemp(prefix="tapdeck-serve-e2e-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


CAP_BITS = {"CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_IPC_LOCK": 14}


def test_the_unit_is_a_notify_service_with_only_its_capabilities():
    unit = unit_settings()
    assert unit["Type"] == ["notify"] and unit["User"] == ["tapdeck"], unit
    caps = unit["AmbientCapabilities"][0].split()
    assert unit["CapabilityBoundingSet"][0].split() == caps
    assert unit["NoNewPrivileges"] == ["yes"]
    exec_start = shlex.split(unit["ExecStart"][0])
    assert exec_start[0] == "/usr/local/bin/tapdeck", exec_start
    assert exec_start[exec_start.index("--config") + 1]


@pytest.fixture(scope="module")
def unit_run(tapdeck_bin):
    """The unit's ExecStart (our binary and config in place of the installed ones) under its
    User (a throwaway system user), capabilities, NoNewPrivileges and UMask, with systemd's
    NOTIFY_SOCKET and WATCHDOG_USEC, recording datagrams and then stopped by SIGTERM: the
    notifications it sent, its process status while it ran, its exit and its store. (The
    unit's LimitMEMLOCK and LimitNICE are not applied: raising hard limits needs
    CAP_SYS_RESOURCE, which this test environment may lack; CAP_IPC_LOCK covers the staging
    pool's lock.)"""
    need("setpriv", "useradd", "userdel")
    procs = []
    with shared_directory() as shared:
        with module_link(procs) as lk, throwaway_user(procs) as user:
            facts = run_as_the_unit(tapdeck_bin, lk, procs, user, shared)
        yield facts  # the store stays for the claims


def run_as_the_unit(tapdeck_bin, link, procs, unit_user, shared_dir) -> SimpleNamespace:
    unit = unit_settings()
    caps = unit["AmbientCapabilities"][0].split()
    umask = unit["UMask"][0]
    # The unit's ExecStart, with our binary and config in place of the installed ones.
    exec_start = shlex.split(unit["ExecStart"][0])
    config_at = exec_start.index("--config") + 1
    facts = SimpleNamespace(user=unit_user, caps=caps)

    store = facts.store = shared_dir / "store"
    store.mkdir(mode=0o750)
    os.chown(store, unit_user.pw_uid, unit_user.pw_gid)
    port = free_port(link.cap)
    cfg = write_config(shared_dir / "tapdeck.toml", service_config(link, store, port))
    # A copy the unit's user can reach: the checkout may sit in a directory only root can
    # enter (root's home, `mktemp -d`), as the installed binary never does.
    binary = shared_dir / "tapdeck"
    shutil.copy2(tapdeck_bin, binary)
    command = [binary, *exec_start[1:]]
    command[config_at] = cfg
    notify_path = shared_dir / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify_path))
    notify_path.chmod(0o666)
    sock.settimeout(0.2)
    messages = facts.messages = []  # (when, what)

    def drain(until, timeout, what):
        def got():
            try:
                messages.append((time.monotonic(), sock.recv(4096).decode()))
            except TimeoutError:
                pass
            return until()

        return wait_for(got, timeout, what, interval=0)

    capset = ",".join("+" + c.lower().removeprefix("cap_") for c in caps)
    prefix = [
        "setpriv",
        f"--reuid={unit_user.pw_uid}",
        f"--regid={unit_user.pw_gid}",
        "--clear-groups",
        f"--inh-caps=-all,{capset}",
        f"--ambient-caps=-all,{capset}",
        f"--bounding-set=-all,{capset}",
        "--no-new-privs",
        "--",
    ]
    env = dict(os.environ, NOTIFY_SOCKET=str(notify_path), WATCHDOG_USEC="2000000")
    try:
        s = Served(
            tapdeck_bin,
            procs,
            shared_dir,
            config=cfg,
            ns=link.cap,
            prefix=prefix,
            command=command,
            env=env,
            umask=umask,
            name="unit",
        )
        t0 = time.monotonic()
        drain(lambda: any("READY=1" in m for _, m in messages), 15, "READY=1")
        facts.ready = next(t for t, m in messages if "READY=1" in m)
        facts.status = proc_status(s.pid)
        facts.sent = send(link, procs, 3000, size=600, pps=3000)
        s.wait_settled(facts.sent)
        # WATCHDOG=1 every WATCHDOG_USEC/2 while capture progresses: at least 4 in ~4 s.
        drain(
            lambda: sum(1 for t, m in messages if "WATCHDOG=1" in m and t > facts.ready) >= 4,
            10,
            "four WATCHDOG=1 after READY=1",
        )
        s.proc.send_signal(signal.SIGTERM)
        drain(lambda: any("STOPPING=1" in m for _, m in messages), 15, "STOPPING=1")
        facts.returncode = wait_exit(s.proc, QUICK)
        facts.log = s.log_text()
        print(
            f"sd_notify after {facts.ready - t0:.2f} s: "
            + " | ".join(m.strip() for _, m in messages)
        )
    finally:
        sock.close()
    return facts


def test_ready_once_recording(unit_run):
    assert "STATUS=recording" in next(m for _, m in unit_run.messages if "READY=1" in m)


def test_the_process_has_the_units_identity(unit_run):
    """The user, exactly the unit's capabilities (effective, permitted, ambient and
    bounding), no new privileges."""
    st, user = unit_run.status, unit_run.user
    assert st["Uid"].split() == [str(user.pw_uid)] * 4, st["Uid"]
    assert st["Gid"].split() == [str(user.pw_gid)] * 4, st["Gid"]
    want = sum(1 << CAP_BITS[c] for c in unit_run.caps)
    for field in ("CapEff", "CapPrm", "CapAmb", "CapBnd"):
        assert int(st[field], 16) == want, (field, st[field])
    assert st["NoNewPrivs"] == "1"


def test_watchdog_every_second_while_capturing(unit_run):
    pings = [t for t, m in unit_run.messages if "WATCHDOG=1" in m and t > unit_run.ready]
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert max(gaps) < 1.6, gaps  # every second, with room for a loaded machine


def test_sigterm_says_stopping_and_exits_0(unit_run):
    assert any("STOPPING=1" in m for _, m in unit_run.messages)
    assert unit_run.returncode == 0, unit_run.log[-3000:]


def test_the_store_belongs_to_the_units_user(unit_run):
    """Everything in the store belongs to the unit's user, the data not readable by
    others; every datagram sent is stored."""
    store, user = unit_run.store, unit_run.user
    files = data_files(store)
    assert files
    for p in [store, *store.iterdir()]:
        st = p.stat()
        assert (st.st_uid, st.st_gid) == (user.pw_uid, user.pw_gid), p
        if p.is_file():
            assert stat.S_IMODE(st.st_mode) & 0o027 == 0, (p, oct(st.st_mode))
    err = unit_run.log
    assert "accounting: seen = stored + dropped holds" in err, err
    assert summary_stored(err) >= unit_run.sent


# --------------------------------------------------------------------------------------
# 7. A full data directory: /healthz 503
# --------------------------------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path, request):
    """An 8 MiB ext4 filesystem, loop-mounted in tmp_path and unmounted by a finalizer."""
    return loop_ext4(tmp_path, request, 8 * MiB)


def fill(fs: Path, leave: int) -> Path:
    """A file taking all but `leave` bytes of the filesystem."""
    filler = fs / "filler"
    free = os.statvfs(fs).f_bavail * os.statvfs(fs).f_frsize
    with open(filler, "wb") as f:
        f.write(os.urandom(1024) * ((free - leave) // 1024))
        f.flush()
        os.fsync(f.fileno())
    return filler


def full_disk_service(link, procs, start, tmp_path, fs):
    data = fs / "d"
    data.mkdir()
    keys = service_config(
        link,
        tmp_path / "S",
        free_port(link.cap),
        codec="none",
        dir=[str(data)],
        # No minute cuts: closing a file is a write, which would retry the directory.
        **{"rotate-size": "1MiB", "rotate-interval": 0, "health-max-drops": 1_000_000},
    )
    cfg = write_config(tmp_path / "tapdeck.toml", keys)
    filler = fill(fs, 2 * MiB)
    s = start(cfg)
    s.wait_recording()
    assert s.health()[0] == 200
    send(link, procs, 5000, size=1000, pps=5000)

    def failing():
        status, doc = s.health()
        return (status, doc) if status == 503 else None

    _, doc = wait_for(failing, 15, "/healthz to say 503", 0.1)
    return s, cfg, keys, data, filler, doc


def test_full_data_dir_makes_healthz_503_until_space_returns(
    tapdeck, link, procs, start, tmp_path, small_fs
):
    """(a) The only data directory, on an 8 MiB ext4 with retention off, fills: /healthz
    503 naming it, tapdeck_data_dir_up 0, the loss counted as write_error drops and the
    accounting balanced; `tapdeck status` says FAILING and exits 1. Space returns and
    packets flow: 200 again. (b) Those drops over health-max-drops (0, set by SIGHUP) make
    it 503 with that reason alone; raised again, 200."""
    s, cfg, keys, data, filler, doc = full_disk_service(
        link, procs, start, tmp_path, small_fs
    )
    assert (
        doc["healthy"] is False and doc["data_dirs_up"] == 0 and doc["data_dirs"] == 1
    ), doc
    assert doc["reasons"] == [
        f"every data directory is failing ({data}): packets are being dropped"
    ], doc
    m = wait_for(
        lambda: (x := s.scrape()).in_flight == 0 and x, 10, "nothing in flight"
    )
    assert m.series("tapdeck_data_dir_up") == {frozenset({("dir", str(data))}): 0.0}
    assert m.total("tapdeck_packets_dropped_total", cause="write_error") > 0
    assert m.total("tapdeck_packets_dropped_total", cause="kernel") == 0
    assert m.total("tapdeck_packets_dropped_total", cause="staging_full") == 0
    assert m.total("tapdeck_write_errors_total") > 0
    assert m.total("tapdeck_healthy") == 0.0
    assert m.unbalanced() == []
    r = run(
        [*in_ns(link.cap), tapdeck.bin, "status", "--listen", f"127.0.0.1:{s.port}"]
    )
    assert (
        r.returncode == 1 and f"FAILING dir {data}:" in r.out and "UNHEALTHY" in r.out
    ), r.describe()

    # Space returns; the next packets are written and the directory is up again.
    filler.unlink()
    sender = start_sender(link, procs, 400, size=500, pps=100)

    def healthy():
        status, doc = s.health()
        return doc if status == 200 else None

    doc = wait_for(healthy, 15, "/healthz to say 200 again", 0.1)
    assert doc["data_dirs_up"] == 1 and doc["dropped_last_minute"] > 0, doc
    s.wait_log(f"data directory {data} is writable again after")
    assert s.scrape().series("tapdeck_data_dir_up") == {
        frozenset({("dir", str(data))}): 1.0
    }

    # (b) The drops of the last minute over health-max-drops: 503 with that reason alone.
    mark = len(s.log_text())
    write_config(cfg, {**keys, "health-max-drops": 0})
    s.proc.send_signal(signal.SIGHUP)
    s.wait_log("now in effect: health-max-drops", after=mark)
    status, doc = s.health()
    assert status == 503 and doc["data_dirs_up"] == 1, doc
    (reason,) = doc["reasons"]
    dropped = doc["dropped_last_minute"]
    assert (
        reason
        == f"{dropped} packets dropped in the last minute (health-max-drops is 0)"
    ), doc
    assert s.scrape().total("tapdeck_healthy") == 0.0
    mark = len(s.log_text())
    write_config(cfg, {**keys, "health-max-drops": dropped})
    s.proc.send_signal(signal.SIGHUP)
    s.wait_log("now in effect: health-max-drops", after=mark)
    assert s.health()[0] == 200
    sender_done(sender, timeout=QUICK)
    err = s.stop()
    assert (
        f"data directory {data}: writing" in err and "No space left on device" in err
    ), err
    assert partial_files(data) == []
    r = tapdeck.verify(tmp_path / "S")
    assert r.returncode == 0, r.describe()


def test_a_quiet_link_sees_its_data_dir_come_back(
    link, procs, start, tmp_path, small_fs
):
    s, _, _, _, filler, _ = full_disk_service(link, procs, start, tmp_path, small_fs)
    wait_for(lambda: s.scrape().in_flight == 0, 10, "nothing in flight")
    filler.unlink()
    wait_for(
        lambda: s.health()[0] == 200,
        6,
        "/healthz 200 on a quiet link (3 retry periods)",
        0.2,
    )


# --------------------------------------------------------------------------------------
# SIGUSR1 on a quiet link
# --------------------------------------------------------------------------------------


def test_sigusr1_on_a_quiet_link_completes_the_file(
    tapdeck, link, procs, start, tmp_path
):
    store = tmp_path / "S"
    # No minute cuts, which do complete a file on a quiet link.
    s = start(service_config(link, store, free_port(link.cap), **{"rotate-interval": 0}))
    s.wait_recording()
    sent = send(link, procs, 500, size=300)
    s.wait_settled(sent)
    s.proc.send_signal(signal.SIGUSR1)
    s.wait_log("SIGUSR1: starting new files")
    wait_for(
        lambda: s.scrape().total("tapdeck_files_written_total") == 1,
        5,
        "the file to be completed on a quiet link",
    )


# --------------------------------------------------------------------------------------
# 8. Hostile clients
# --------------------------------------------------------------------------------------


def raw_exchange(ns, port, payload: bytes, *, timeout=5.0) -> bytes:
    """Sends `payload` on a fresh connection (as much as the server takes) and returns what
    comes back until the server closes or `timeout`."""

    def go():
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
            try:
                c.sendall(payload)
            except OSError:
                pass  # the server may stop reading (and close) before the end
            got = b""
            try:
                while chunk := c.recv(65536):
                    got += chunk
                    if len(got) > 1 << 20:
                        break
            except OSError:
                pass
            return got

    return call_in_ns(ns, go)


def status_of(answer: bytes) -> int | None:
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", answer)
    return int(m.group(1)) if m else None


@pytest.fixture(scope="module")
def hostile_run(tapdeck_bin, tmp_path_factory):
    """While serve records: garbage, a 100 KB request line, 1 MB of headers, six other
    methods, paths with `..`, then 30 slowloris connections dripping a header byte every
    half second and 200 idle ones, which the server must shed itself (header timeout, 10 s)
    while the clients keep them open. What it answered, what it held, and how it was after.
    What the slots cost: while they are held, every other client (Prometheus too) is
    turned away; the numbers are printed (`-s`)."""
    procs = []
    tmp = tmp_path_factory.mktemp("hostile")
    with module_link(procs) as lk:
        return attack(starter(tapdeck_bin, lk, procs, tmp), lk, procs, tmp)


def attack(start, link, procs, tmp_path) -> SimpleNamespace:
    s = start(service_config(link, tmp_path / "S", free_port(link.cap)))
    s.wait_recording()
    sender = start_sender(link, procs, 60000, size=300, pps=2000)
    wait_for(lambda: s.scrape().stored > 1000, 10, "the recording to run")
    facts = SimpleNamespace(rss0=int(proc_status(s.pid)["VmRSS"].split()[0]) * 1024,
                            fds0=open_fds(s.pid))
    ns, port = link.cap, s.port
    rng = random.Random(8)

    # Garbage, a 100 KB request line, 1 MB of headers.
    facts.garbage = [raw_exchange(ns, port, rng.randbytes(rng.randrange(1, 8192)))
                     for _ in range(20)]
    facts.long_line = raw_exchange(
        ns, port, b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    huge = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1000) for i in range(1000))
    facts.huge_headers = raw_exchange(
        ns, port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + huge + b"\r\n"
    )
    # Other methods and escaping paths, with this host's name as `Host` (without tokens a
    # foreign one gets 421 whatever the method or path, since issue 31).
    facts.methods = {
        method: raw_exchange(
            ns,
            port,
            f"{method} /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode(),
        )
        for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE")
    }
    facts.paths = {
        path: raw_exchange(
            ns,
            port,
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode(),
        )
        for path in ESCAPING_PATHS
    }
    facts.metrics_after_garbage = s.get("/metrics", timeout=2)[0]
    hold_slots(s, ns, port, facts)
    # Afterwards: prompt answers, the recording intact and balanced, memory and descriptors
    # back where they were.
    t = time.monotonic()
    facts.metrics_after_slots = s.get("/metrics", timeout=2)[0]
    facts.answer_seconds = time.monotonic() - t
    sender.send_signal(signal.SIGTERM)
    sent = sender_done(sender)
    facts.scrape = s.wait_settled(sent)
    facts.rss1 = int(proc_status(s.pid)["VmRSS"].split()[0]) * 1024
    facts.fds_back = eventually(lambda: open_fds(s.pid) <= facts.fds0 + 1, 5)
    answers = {"garbage": {status_of(a) for a in facts.garbage},
               "100 KB request line": status_of(facts.long_line),
               "1 MB of headers": status_of(facts.huge_headers),
               **{p: status_of(a) for p, a in facts.paths.items()}}
    print(
        f"hostile: {facts.held_max} descriptors held at most (the cap is 64 connections), all "
        f"shed after {facts.shed_after:.1f} s; {facts.refused} health probes refused "
        f"meanwhile; RSS {facts.rss0 / MiB:.0f} -> {facts.rss1 / MiB:.0f} MiB; answers "
        f"{answers}"
    )
    s.stop()
    return facts


ESCAPING_PATHS = (
    "/../metrics",
    "/metrics/../../../etc/passwd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "/..%2f..%2fetc%2fpasswd",
    "//etc/passwd",
    "/healthz/..",
    "/api/v1/../../etc/passwd",
)


def hold_slots(s, ns, port, facts):
    """200 idle connections and 30 that send their headers a byte at a time (slowloris),
    until the server has closed them all itself: the most descriptors it held, how long
    shedding took, how many health probes were turned away meanwhile."""

    def open_idle(n):
        return [
            socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(n)
        ]

    # The slow ones first, so that they hold connection slots; then more idle ones than
    # there are slots.
    slow = call_in_ns(ns, open_idle, 30)
    for c in slow:
        c.sendall(b"GET /metrics HTTP/1.1\r\n")
    idle = call_in_ns(ns, open_idle, 200)
    t0 = time.monotonic()
    facts.held_max = 0
    facts.refused = 0

    def slow_alive() -> int:
        alive = 0
        for c in slow:
            try:
                c.sendall(b"X")
                alive += 1
            except OSError:
                pass
        return alive

    # The server must shed them itself (header timeout), while the clients keep them open.
    def shed():
        facts.held_max = max(facts.held_max, open_fds(s.pid) - facts.fds0)
        try:
            if s.get("/healthz", timeout=1)[0] != 200:
                facts.refused += 1
        except OSError:
            facts.refused += 1
        return slow_alive() == 0 and open_fds(s.pid) <= facts.fds0 + 2

    wait_for(
        shed, 30, "the server to close the idle and slowloris connections", interval=0.5
    )
    facts.shed_after = time.monotonic() - t0
    for c in idle + slow:
        c.close()


def eventually(cond, timeout: float, interval: float = 0.05) -> bool:
    """Whether `cond()` holds within `timeout` seconds (a claim a test asserts later)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def test_garbage_and_oversized_requests_are_refused(hostile_run):
    """Garbage, a 100 KB request line, 1 MB of headers: refused, never a 200."""
    for answer in hostile_run.garbage:
        assert status_of(answer) in (None, 400), answer[:200]
    answer = hostile_run.long_line
    assert status_of(answer) in (None, 400, 414, 431), answer[:200]
    answer = hostile_run.huge_headers
    assert status_of(answer) in (None, 400, 431), answer[:200]


def test_other_methods_get_405_and_nothing(hostile_run):
    for method, answer in hostile_run.methods.items():
        assert status_of(answer) == 405, (method, answer[:200])
        assert b"tapdeck_packets" not in answer


def test_escaping_paths_leak_nothing(hostile_run):
    for path, answer in hostile_run.paths.items():
        assert status_of(answer) in (400, 404), (path, answer[:200])
        assert b"root:" not in answer
    assert hostile_run.metrics_after_garbage == 200


def test_slowloris_and_idle_clients_hold_at_most_the_connection_cap(hostile_run):
    """The server holds at most its 64 connection slots and closes them itself (the wait
    for that is the fixture's)."""
    held_max = hostile_run.held_max
    assert held_max <= 64 + 2, (
        f"{held_max} descriptors held: the 64-connection cap leaks"
    )


def test_after_the_attack_the_service_answers_at_once_and_recorded_everything(hostile_run):
    assert hostile_run.metrics_after_slots == 200
    assert hostile_run.answer_seconds < 1.0
    scrape = hostile_run.scrape
    assert (
        scrape.unbalanced() == [] and scrape.total("tapdeck_packets_dropped_total") == 0
    )


def test_after_the_attack_memory_and_descriptors_are_back(hostile_run):
    rss0, rss1 = hostile_run.rss0, hostile_run.rss1
    assert rss1 - rss0 < 50 * MiB, (rss0, rss1)
    assert hostile_run.fds_back, "the descriptors were not released within 5 s"
