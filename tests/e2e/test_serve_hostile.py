"""`tapdeck serve` against hostile clients (issue 31). Each claim attacks a real `serve
--no-capture` over real sockets on this host's loopback; "another host" is another address
of 127.0.0.0/8 (a socket bound to 127.0.0.2 before it connects).

- Rebinding: without tokens, a `Host` that is not this host's gets 421 on every route (a
  web page whose name was rebound to 127.0.0.1 reads nothing); with tokens, `allowed-hosts`
  is the list of names a request may use.
- Slow bodies: 64 body-less `POST /login`s held open cannot keep a request with a token
  from its answer; addresses of one IPv6 /64 share one address's connections (in a network
  namespace: root); a connection that shows no token lives 15 s; a body that does not come
  gets 408; a body over 4 KiB gets 413.
- Weak tokens: a 3-character metrics token is refused at start; the metrics token opens
  `/metrics` and `/healthz` and nothing else (no packets, no login); a token file others
  can read is warned about.
- Guessing: wrong tokens from one address are answered slower and slower (and the log says
  so once); other addresses, and a session cookie, are not slowed.
- Sessions: the login cookie is an opaque, expiring session id, never the token
  (`__Host-` prefixed over TLS); a reload that removes (or changes) its token revokes it,
  and so does logging out.
- Cross-site: a login, and a request the cookie authenticates, from another site get 403.
- Logs: a newline in a request's values never starts a log line; a long filter is logged
  cut, with its length and hash.
- Overview cost: 20 page loads at once over a store of 1,000 files do not stall a query.
- Nits: the bearer scheme in any case; `nosniff` on every answer.
- Fuzzing: a few thousand mutated request lines and headers (seeded; `TAPDECK_FUZZ_SEED`
  replays a run) find no panic, and the service answers afterwards.

The oracle is the wire: status lines, headers and bodies as a client receives them, and the
service's log.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import ssl
import threading
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import netlab
import pytest
from conftest import (
    data_files,
    gen_packets,
    kill_all,
    need,
    one_error_line,
    run,
    wait_for,
    write_pcap,
)
from netlab import call_in_ns, free_port, run_in
from served import Served, write_config

ALICE = "alice-" + "a1" * 12
BOB = "bob-" + "b2" * 12
CAROL = "carol-" + "c3" * 12
# A token whose percent-encoding differs from itself: the cookie must hold neither.
ODD = "odd+/=:%token!-0123456789"
METRICS = "metrics-" + "m4" * 10
COOKIE = "tapdeck_session"
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"


# --------------------------------------------------------------------------------------
# Requests, from any loopback address
# --------------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes
    seconds: float

    def set_cookies(self) -> list[str]:
        return self.headers.get_all("Set-Cookie") or []

    def json(self):
        return json.loads(self.body)


def request(
    port,
    path,
    *,
    method="GET",
    token=None,
    cookie=None,
    headers=None,
    body=None,
    source="127.0.0.1",
    timeout=5.0,
) -> Answer:
    """One request on a fresh connection from `source`; `headers` may replace `Host`."""
    headers = dict(headers or {})
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if cookie is not None:
        headers["Cookie"] = cookie
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        data = r.read()
        return Answer(r.status, r.headers, data, time.monotonic() - t0)
    finally:
        c.close()


def login(port, token, *, headers=None, source="127.0.0.1", timeout=5.0) -> Answer:
    """`POST /login` with the form a browser sends."""
    return request(
        port,
        "/login",
        method="POST",
        body=urllib.parse.urlencode({"token": token}),
        headers={"Content-Type": "application/x-www-form-urlencoded", **(headers or {})},
        source=source,
        timeout=timeout,
    )


def session_of(answer: Answer) -> tuple[str, dict[str, str]]:
    """The session cookie a login set: (`NAME=VALUE` to send back, its attributes with
    lowercase names)."""
    (cookie,) = [c for c in answer.set_cookies() if c.startswith(COOKIE + "=")]
    pair, *attrs = [part.strip() for part in cookie.split(";")]
    return pair, {a.split("=", 1)[0].lower(): a.partition("=")[2] for a in attrs}


def connect_from(source: str, port: int, timeout: float = 2.0) -> socket.socket:
    c = socket.socket()
    c.bind((source, 0))
    c.settimeout(timeout)
    c.connect(("127.0.0.1", port))
    return c


def read_until_closed(c: socket.socket, limit: float) -> tuple[bytes, bool]:
    """What the server sends until it closes, or until `limit` seconds: (bytes, closed)."""
    got = b""
    deadline = time.monotonic() + limit
    while (left := deadline - time.monotonic()) > 0:
        c.settimeout(left)
        try:
            piece = c.recv(65536)
        except TimeoutError:
            return got, False
        except ConnectionError:
            return got, True
        if not piece:
            return got, True
        got += piece
    return got, False


def status_of(answer: bytes) -> int | None:
    m = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
    return int(m.group(1)) if m else None


# --------------------------------------------------------------------------------------
# The served store
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory, tapdeck) -> Path:
    d = tmp_path_factory.mktemp("store")
    pcap = write_pcap(d / "orig.pcap", gen_packets(2000, seed=31))
    r = tapdeck.record(d / "S", "-r", pcap)
    assert r.returncode == 0, r.describe()
    return d / "S"


def write_tokens(path: Path, pairs: dict[str, str]) -> Path:
    path.write_text("".join(f"{name} {token}\n" for name, token in pairs.items()))
    path.chmod(0o600)  # readable by others is warned about, which is not these tests' point
    return path


@pytest.fixture
def serve(tapdeck_bin, procs, tmp_path, store):
    """serve(config keys, store=) → `serve --config C --no-capture STORE` on a free port of
    127.0.0.1, once it says it is serving."""
    count = [0]

    def start(keys: dict | None = None, *, on=None) -> Served:
        count[0] += 1
        cfg = write_config(
            tmp_path / f"serve{count[0]}.toml",
            {"listen": f"127.0.0.1:{free_port()}", **(keys or {})},
        )
        s = Served(
            tapdeck_bin,
            procs,
            tmp_path,
            "--no-capture",
            on or store,
            config=cfg,
            name=f"serve{count[0]}",
        )
        s.wait_log("read-only on", timeout=15)
        return s

    return start


@pytest.fixture
def tokens(tmp_path) -> Path:
    return write_tokens(tmp_path / "tokens", {"alice": ALICE, "bob": BOB})


# --------------------------------------------------------------------------------------
# Rebinding
# --------------------------------------------------------------------------------------

ROUTES = ["/api/v1/files", "/api/v1/packets", "/", "/login", "/metrics"]


def test_rebinding_a_foreign_host_gets_421_without_tokens(serve, store):
    """No token: a page on another site whose name was rebound to 127.0.0.1 sends its own
    name as `Host`, and gets 421 and nothing of the store, on every route."""
    s = serve()
    port = s.port
    foreign = [
        f"attacker.example:{port}",
        "attacker.example",
        f"127.0.0.1.attacker.example:{port}",
        f"localhost.attacker.example:{port}",
    ]
    for host in foreign:
        for path in ROUTES:
            a = request(port, path, headers={"Host": host})
            assert a.status == 421, f"Host {host!r}, {path}: {a.status} {a.body[:200]!r}"
            assert PCAPNG_MAGIC not in a.body[:8] and b".pcapng" not in a.body, (
                f"Host {host!r}, {path}: the 421 carried the store: {a.body[:200]!r}"
            )
    # This host's own names: served (the login form has nothing to do without tokens and
    # sends the browser to the page).
    for host in (
        f"127.0.0.1:{port}",
        f"localhost:{port}",
        "localhost",
        f"[::1]:{port}",
        f"127.0.0.2:{port}",
    ):
        for path in ROUTES:
            a = request(port, path, headers={"Host": host})
            want = (301, 302, 303, 307) if path == "/login" else (200,)
            assert a.status in want, f"Host {host!r}, {path}: {a.status} {a.body[:200]!r}"
    # No Host at all (HTTP/1.0): served.
    c = connect_from("127.0.0.1", port)
    try:
        c.sendall(b"GET /api/v1/files HTTP/1.0\r\n\r\n")
        answer, _ = read_until_closed(c, 5)
    finally:
        c.close()
    assert status_of(answer) == 200, answer[:300]
    assert s.proc.poll() is None


def test_rebinding_with_tokens_only_allowed_hosts_are_served(serve, tokens):
    """With a token file and `allowed-hosts`, a listed name (any port, any case) is served
    with a token, any other `Host` gets 421 even with the token. Without `allowed-hosts` the
    token is the check (a proxy's name is not known)."""
    s = serve({"token-file": str(tokens), "allowed-hosts": ["tap.example.org"]})
    port = s.port
    for host in (
        f"tap.example.org:{port}",
        "tap.example.org",
        f"TAP.Example.ORG:{port}",
        "tap.example.org:443",
    ):
        for path in ("/api/v1/files", "/metrics", "/"):
            a = request(port, path, token=ALICE, headers={"Host": host})
            assert a.status == 200, f"Host {host!r}, {path}: {a.status} {a.body[:200]!r}"
    for host in (
        f"attacker.example:{port}",
        f"tap.example.org.attacker.example:{port}",
        f"eviltap.example.org:{port}",
    ):
        for path in ("/api/v1/files", "/api/v1/packets", "/metrics", "/"):
            a = request(port, path, token=ALICE, headers={"Host": host})
            assert a.status == 421, f"Host {host!r}, {path}: {a.status} {a.body[:200]!r}"
            assert PCAPNG_MAGIC not in a.body[:8]
    plain = serve({"token-file": str(tokens)})
    a = request(
        plain.port, "/api/v1/files", token=ALICE, headers={"Host": f"tap.example.org:{plain.port}"}
    )
    assert a.status == 200, (a.status, a.body[:200])


# --------------------------------------------------------------------------------------
# Slow bodies
# --------------------------------------------------------------------------------------


def login_head(port: int, length: int) -> bytes:
    return (
        f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


@pytest.mark.parametrize("sources", ["four-other-addresses", "one-address"])
def test_slow_bodies_64_bodyless_logins_do_not_lock_out_a_token(serve, tokens, sources):
    """64 connections each send a `POST /login` head promising 100 bytes and send none,
    and stay open: from 127.0.0.2..127.0.0.5 (16 each, every slot), or all from 127.0.0.1
    (the address the token comes from). A request with a token is answered 200 within 2 s,
    at once and again 3 s later while they still hang."""
    s = serve({"token-file": str(tokens)})
    port = s.port
    if sources == "one-address":
        addresses = ["127.0.0.1"] * 64
    else:
        addresses = [f"127.0.0.{2 + i % 4}" for i in range(64)]
    held = []
    try:
        for address in addresses:
            c = connect_from(address, port)
            held.append(c)
            c.sendall(login_head(port, 100))
        for wait in (0.5, 3.0):
            time.sleep(wait)
            a = request(port, "/api/v1/files", token=ALICE, timeout=5)
            print(f"{sources}: a token's request answered {a.status} in {a.seconds:.3f} s")
            assert a.status == 200 and a.seconds < 2.0, (a.status, a.seconds, a.body[:200])
    finally:
        for c in held:
            c.close()
    s.alive()


def test_ipv6_addresses_of_one_64_share_one_address_s_connections(
    tapdeck_bin, procs, tmp_path, store, tokens
):
    """Over IPv6 a client has a /64 to pick source addresses from: 40 body-less logins from
    40 addresses of one /64 keep at most 16 connections (one address's share; the server
    closes the oldest), and a token from another /64 is answered 200 within 2 s. In a
    namespace of its own, whose loopback holds the addresses."""
    need()
    with netlab.Lab("tdh6", ["x"], ipv6=True) as lab:
        ns = lab.ns["x"]
        try:
            addrs = [f"fd00:31:1::{i:x}" for i in range(1, 41)]
            batch = "".join(f"addr add {a}/128 dev lo\n" for a in [*addrs, "fd00:31:2::1"])
            r = run_in(ns, "ip", "-6", "-batch", "-", input=batch, text=True)
            assert r.returncode == 0, r.stderr
            port = free_port()
            s = Served(tapdeck_bin, procs, tmp_path, "--listen", f"[::1]:{port}",
                       "--token-file", tokens, "--no-capture", store, ns=ns)  # fmt: skip
            s.wait_log("read-only on", timeout=15)
            call_in_ns(ns, one_64_shares_connections, port, addrs)
        finally:
            kill_all(procs)  # before its namespace goes


def one_64_shares_connections(port: int, addrs: list[str]) -> None:
    head = login_head(port, 100).replace(b"Host: 127.0.0.1", b"Host: [::1]")
    held = []
    try:
        for a in addrs:
            c = socket.socket(socket.AF_INET6)
            c.bind((a, 0))
            c.settimeout(2)
            c.connect(("::1", port))
            c.sendall(head)
            held.append(c)
        time.sleep(0.5)
        still_open = 0
        for c in held:
            c.settimeout(0.05)
            try:
                still_open += c.recv(1) != b""
            except TimeoutError:
                still_open += 1  # nothing came, nothing closed
            except ConnectionError:
                pass
        print(f"ipv6: {still_open} of {len(held)} connections of one /64 held open")
        assert still_open <= 16, f"{still_open} connections from one /64 held: not one address"
        t0 = time.monotonic()
        c = http.client.HTTPConnection("::1", port, timeout=5, source_address=("fd00:31:2::1", 0))
        try:
            c.request("GET", "/api/v1/files", headers={"Authorization": f"Bearer {ALICE}"})
            status = c.getresponse().status
        finally:
            c.close()
        took = time.monotonic() - t0
        assert status == 200 and took < 2.0, (status, took)
    finally:
        for c in held:
            c.close()


def keep_alive_request(c: socket.socket, request: bytes) -> int | None:
    """One request on an open connection and its answer read whole (by Content-Length):
    its status, or None once the server has closed the connection."""
    try:
        c.sendall(request)
        got = b""
        while b"\r\n\r\n" not in got:
            piece = c.recv(65536)
            if not piece:
                return None
            got += piece
    except ConnectionError:
        return None
    head, _, body = got.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length: *(\d+)", head)
    need_bytes = int(m.group(1)) if m else 0
    while len(body) < need_bytes:
        piece = c.recv(65536)
        if not piece:
            return None
        body += piece
    return status_of(head)


def test_an_unproven_connection_lives_15_s_a_proven_one_lives_on(serve, tokens):
    """Two keep-alive connections ask for /favicon.ico (no token needed) every second; the
    first never shows a token and is closed by the server after about 15 s, the second
    showed one at its start and still answers then."""
    s = serve({"token-file": str(tokens)})
    host = f"Host: 127.0.0.1:{s.port}\r\n"
    favicon = f"GET /favicon.ico HTTP/1.1\r\n{host}\r\n".encode()
    proof = f"GET /healthz HTTP/1.1\r\n{host}Authorization: Bearer {ALICE}\r\n\r\n".encode()
    unproven, proven = connect_from("127.0.0.1", s.port), connect_from("127.0.0.1", s.port)
    t0 = time.monotonic()
    try:
        assert keep_alive_request(proven, proof) == 200
        closed_after = None
        while time.monotonic() - t0 < 20:
            for c in (unproven, proven):
                c.settimeout(3)
            if keep_alive_request(unproven, favicon) is None:
                closed_after = time.monotonic() - t0
                break
            assert keep_alive_request(proven, favicon) == 204
            time.sleep(1)
        print(f"unproven: closed after {closed_after:.1f} s" if closed_after else "unproven: open")
        assert closed_after is not None and 13 < closed_after < 18, closed_after
        assert keep_alive_request(proven, favicon) == 204, "the proven connection was closed"
    finally:
        unproven.close()
        proven.close()


def test_a_slow_body_gets_408_and_a_big_one_413(serve, tokens):
    """A body that does not arrive within 5 s of its head: 408 (or the connection closed),
    and closed, within the body timeout and a margin. A body that arrives in pieces within
    it is read. A body over 4 KiB: 413."""
    s = serve({"token-file": str(tokens)})
    port = s.port
    c = connect_from("127.0.0.1", port)
    try:
        c.sendall(login_head(port, 100) + b"token=abc")
        t0 = time.monotonic()
        answer, closed = read_until_closed(c, 12)
        took = time.monotonic() - t0
    finally:
        c.close()
    print(f"slow body: {status_of(answer)} and closed={closed} after {took:.2f} s")
    assert closed, f"the connection was still open {took:.1f} s after an unfinished body"
    assert status_of(answer) in (408, None), answer[:300]
    assert took < 5 + 3, f"the body timeout took {took:.1f} s"

    # In two pieces a second apart: a slow but honest client logs in.
    body = urllib.parse.urlencode({"token": ALICE}).encode()
    c = connect_from("127.0.0.1", port)
    try:
        c.sendall(login_head(port, len(body)) + body[:10])
        time.sleep(1)
        c.sendall(body[10:])
        answer, _ = read_until_closed(c, 3)
    finally:
        c.close()
    assert status_of(answer) == 303, answer[:300]

    big = ("token=" + "x" * 5000).encode()
    c = connect_from("127.0.0.1", port)
    try:
        c.sendall(login_head(port, len(big)) + big)
        answer, _ = read_until_closed(c, 5)
    finally:
        c.close()
    assert status_of(answer) == 413, answer[:300]
    s.alive()


# --------------------------------------------------------------------------------------
# Weak tokens
# --------------------------------------------------------------------------------------


def test_a_3_character_metrics_token_is_refused_at_start(tapdeck, store, tmp_path):
    short = tmp_path / "metrics-token"
    short.write_text("abc\n")
    short.chmod(0o600)
    for flags in (["--check"], []):
        r = tapdeck(
            "serve",
            *flags,
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--metrics-token-file",
            short,
            "--no-capture",
            store,
            timeout=20,
        )
        assert r.returncode != 0, f"serve {flags} took a 3-character token: {r.describe()}"
        line = one_error_line(r.stderr)
        assert f"{short}:1:" in line and "3 characters" in line and "16" in line, line


def test_the_metrics_token_opens_only_metrics_and_healthz(serve, store, tmp_path):
    """The metrics token (Prometheus') scrapes and probes; every other route answers 403
    with it, nothing of the store, and `/login` takes it for no session."""
    metrics = tmp_path / "metrics-token"
    metrics.write_text(METRICS + "\n")
    metrics.chmod(0o600)
    s = serve({"metrics-token-file": str(metrics)})
    port = s.port
    for path in ("/metrics", "/healthz"):
        a = request(port, path, token=METRICS)
        assert a.status == 200, (path, a.status, a.body[:200])
    for path in (
        "/api/v1/packets",
        "/api/v1/packets?filter=udp",
        "/api/v1/count",
        "/api/v1/files",
        "/api/v1/info",
        "/api/v1/stats",
        "/api/v1/status",
        "/",
    ):
        a = request(port, path, token=METRICS)
        assert a.status == 403, f"{path} with the metrics token: {a.status} {a.body[:200]!r}"
        assert PCAPNG_MAGIC not in a.body[:8] and str(store).encode() not in a.body, (
            f"{path}: the 403 carried the store: {a.body[:200]!r}"
        )
        if path.startswith("/api/"):
            assert "opens only /metrics and /healthz" in a.json()["error"], a.body
    a = login(port, METRICS)
    assert a.status == 403, (a.status, a.body[:200])
    assert not any(c.startswith(COOKIE) for c in a.set_cookies()), a.set_cookies()


def test_a_token_file_others_can_read_is_warned_about(serve, tmp_path):
    """A token file readable by every user: a warning naming it at start, and again at a
    reload that finds it so; the service runs."""
    tokens = write_tokens(tmp_path / "tokens", {"alice": ALICE})
    tokens.chmod(0o644)
    s = serve({"token-file": str(tokens)})
    log = s.wait_log("can be read by other users", timeout=5)
    warnings = [x for x in log.splitlines() if "can be read by other users" in x]
    assert len(warnings) == 1 and str(tokens) in warnings[0], warnings
    write_tokens(tokens, {"alice": ALICE, "bob": BOB}).chmod(0o604)
    mark = len(log)
    s.proc.send_signal(signal.SIGHUP)
    s.wait_log("now in effect: token-file", after=mark)
    log = s.wait_log("can be read by other users", after=mark, timeout=5)
    assert str(tokens) in log[mark:], log[mark:]
    assert request(s.port, "/api/v1/files", token=BOB).status == 200


# --------------------------------------------------------------------------------------
# Guessing
# --------------------------------------------------------------------------------------


def test_guessing_wrong_logins_from_one_address_are_answered_slower(serve, tokens):
    """Wrong logins from 127.0.0.1, one after another, for 6 s at most: fewer than 50 are
    answered (50 take at least several seconds), and the log says once that the address is
    answered slower. Meanwhile a token from 127.0.0.2, and a session cookie from 127.0.0.1
    itself, are answered within 1 s."""
    s = serve({"token-file": str(tokens)})
    port = s.port
    pair, _ = session_of(login(port, BOB))
    meanwhile = {}

    def others():
        time.sleep(3)  # well into the backoff
        meanwhile["token elsewhere"] = request(
            port, "/api/v1/files", token=ALICE, source="127.0.0.2"
        )
        meanwhile["cookie here"] = request(port, "/api/v1/files", cookie=pair)

    t = threading.Thread(target=others)
    t.start()
    answered = []
    t0 = time.monotonic()
    try:
        while len(answered) < 50 and time.monotonic() - t0 < 6:
            a = login(port, f"guess-{len(answered):04d}-0123456789abcdef", timeout=10)
            assert a.status == 401 and not a.set_cookies(), (a.status, a.set_cookies())
            answered.append(a.seconds)
    finally:
        t.join(timeout=20)
    took = time.monotonic() - t0
    print(
        f"guessing: {len(answered)} wrong logins answered in {took:.1f} s; the last "
        f"took {answered[-1]:.2f} s"
    )
    assert len(answered) < 50, (
        f"50 wrong logins were answered in {took:.1f} s: guessing is not slowed"
    )
    assert set(meanwhile) == {"token elsewhere", "cookie here"}, meanwhile
    for what, a in meanwhile.items():
        assert a.status == 200 and a.seconds < 1.0, (what, a.status, a.seconds)
    log = s.wait_log("answering it slower")
    lines = [line for line in log.splitlines() if "answering it slower" in line]
    assert len(lines) == 1 and "127.0.0.1" in lines[0], lines


# --------------------------------------------------------------------------------------
# Sessions
# --------------------------------------------------------------------------------------


def test_the_session_cookie_is_an_opaque_id_not_the_token(serve, tmp_path):
    """A login sets `tapdeck_session=<64 hex>` (Path=/, HttpOnly, SameSite=Strict,
    Max-Age=43200): not the token, raw or encoded; a new id per login; it opens the API and
    the page. The token itself, or a made-up id, as the cookie: 401."""
    tokens = write_tokens(tmp_path / "tokens", {"alice": ALICE, "odd": ODD})
    s = serve({"token-file": str(tokens)})
    port = s.port
    first = None
    for token in (ODD, ALICE, ALICE):
        a = login(port, token)
        assert a.status == 303 and a.headers["Location"] == "/", (a.status, a.headers)
        header = " ".join(a.set_cookies())
        for form in {
            token,
            urllib.parse.quote(token, safe=""),
            urllib.parse.quote_plus(token),
            urllib.parse.quote(token),
        }:
            assert form not in header, f"the cookie holds the token ({form!r}): {header}"
        pair, attrs = session_of(a)
        assert re.fullmatch(rf"{COOKIE}=[0-9a-fA-F]{{64}}", pair), pair
        assert attrs.get("path") == "/" and "httponly" in attrs, attrs
        assert attrs.get("samesite", "").lower() == "strict", attrs
        assert attrs.get("max-age") == "43200" and "secure" not in attrs, attrs
        assert pair != first, "two logins got the same session id"
        first = pair
        a = request(port, "/api/v1/files", cookie=pair)
        assert a.status == 200 and isinstance(a.json(), list), (a.status, a.body[:200])
        assert request(port, "/", cookie=pair).status == 200
    for cookie in (
        f"{COOKIE}={ALICE}",
        f"tapdeck_token={ALICE}",
        f"{COOKIE}={random.Random(1).randbytes(32).hex()}",
    ):
        assert request(port, "/api/v1/files", cookie=cookie).status == 401, cookie


def test_a_session_ends_after_its_lifetime(serve, tokens):
    """`session-lifetime = "3s"`: the cookie says Max-Age=3, and the session is refused
    (401) once 3 s have passed, not before 2."""
    s = serve({"token-file": str(tokens), "session-lifetime": "3s"})
    port = s.port
    a = login(port, ALICE)
    since = time.monotonic()
    pair, attrs = session_of(a)
    assert attrs.get("max-age") == "3", attrs
    assert request(port, "/api/v1/files", cookie=pair).status == 200
    wait_for(
        lambda: request(port, "/api/v1/files", cookie=pair).status == 401,
        10,
        "the session to end after its 3 s",
        interval=0.2,
    )
    lived = time.monotonic() - since
    assert lived > 2.0, f"the session ended after {lived:.1f} s, before its lifetime"


def test_a_session_is_revoked_when_its_token_leaves_the_file(serve, tmp_path):
    """SIGHUP after rewriting the token file: the sessions of a removed token and of a
    changed one answer 401; a remaining token's session keeps working."""
    tokens = write_tokens(tmp_path / "tokens", {"alice": ALICE, "bob": BOB, "carol": CAROL})
    s = serve({"token-file": str(tokens)})
    port = s.port
    sessions = {
        name: session_of(login(port, token))[0]
        for name, token in (("alice", ALICE), ("bob", BOB), ("carol", CAROL))
    }
    for name, pair in sessions.items():
        assert request(port, "/api/v1/files", cookie=pair).status == 200, name
    new_carol = "carol-new-" + "d5" * 10
    write_tokens(tokens, {"bob": BOB, "carol": new_carol})
    mark = len(s.log_text())
    s.proc.send_signal(signal.SIGHUP)
    s.wait_log("now in effect: token-file", after=mark)
    assert request(port, "/api/v1/files", cookie=sessions["alice"]).status == 401, (
        "a removed token's session still works"
    )
    assert request(port, "/api/v1/files", cookie=sessions["carol"]).status == 401, (
        "a changed token's session still works"
    )
    assert request(port, "/api/v1/files", cookie=sessions["bob"]).status == 200, (
        "the reload revoked the session of a token that stayed"
    )
    pair, _ = session_of(login(port, new_carol))
    assert request(port, "/api/v1/files", cookie=pair).status == 200


def test_logging_out_ends_the_session(serve, tokens):
    s = serve({"token-file": str(tokens)})
    port = s.port
    pair, _ = session_of(login(port, ALICE))
    assert request(port, "/api/v1/files", cookie=pair).status == 200
    a = request(port, "/logout", method="POST", cookie=pair)
    assert a.status in (302, 303), (a.status, a.body[:200])
    assert any("Max-Age=0" in c for c in a.set_cookies()), a.set_cookies()
    assert request(port, "/api/v1/files", cookie=pair).status == 401, (
        "the session still works after logging out"
    )


@pytest.fixture
def self_signed(tmp_path) -> tuple[Path, Path]:
    """(certificate, key) for IP 127.0.0.1, made by the openssl CLI."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    r = run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
             "-days", "2", "-subj", "/CN=tapdeck-test", "-addext",
             "subjectAltName=IP:127.0.0.1"])  # fmt: skip
    assert r.returncode == 0, r.describe()
    return cert, key


def test_over_tls_the_session_cookie_is_host_prefixed_and_secure(serve, tokens, self_signed):
    """Over HTTPS the cookie is `__Host-tapdeck_session` (Secure, Path=/, no Domain): a
    browser sends it to this origin only, not to other services on the host's other
    ports. The same origin is `https://127.0.0.1:PORT` there."""
    cert, key = self_signed
    s = serve({"token-file": str(tokens), "tls-cert": str(cert), "tls-key": str(key)})
    context = ssl.create_default_context(cafile=str(cert))

    def go(method, path, headers, body=None):
        c = http.client.HTTPSConnection("127.0.0.1", s.port, timeout=5, context=context)
        try:
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            r.read()
            return r.status, r.headers.get_all("Set-Cookie") or []
        finally:
            c.close()

    form = {
        "Content-Type": "application/x-www-form-urlencoded",
        "Origin": f"https://127.0.0.1:{s.port}",
        "Sec-Fetch-Site": "same-origin",
    }
    status, cookies = go("POST", "/login", form, urllib.parse.urlencode({"token": ALICE}))
    assert status == 303, (status, cookies)
    (cookie,) = cookies
    pair, *attrs = [x.strip() for x in cookie.split(";")]
    assert re.fullmatch(r"__Host-tapdeck_session=[0-9a-fA-F]{64}", pair), cookie
    names = {a.split("=", 1)[0].lower() for a in attrs}
    assert {"secure", "httponly", "path"} <= names and "domain" not in names, cookie
    assert "Path=/" in attrs, cookie
    assert go("GET", "/api/v1/files", {"Cookie": pair})[0] == 200
    # Over TLS, the plain-HTTP origin is another one.
    foreign = dict(form, Origin=f"http://127.0.0.1:{s.port}")
    status, cookies = go("POST", "/login", foreign, urllib.parse.urlencode({"token": ALICE}))
    assert status == 403 and not cookies, (status, cookies)


# --------------------------------------------------------------------------------------
# Cross-site requests
# --------------------------------------------------------------------------------------


def foreign_origins(port: int) -> list[dict[str, str]]:
    """Headers a browser sends from another site (or an opaque origin)."""
    return [
        {"Origin": "https://evil.example"},
        {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "null"},
        {"Origin": f"http://127.0.0.1:{port + 1}"},
        {"Origin": f"https://127.0.0.1:{port}"},
    ]


def test_cross_site_logins_are_refused(serve, tokens):
    s = serve({"token-file": str(tokens)})
    port = s.port
    for headers in foreign_origins(port):
        a = login(port, ALICE, headers=headers)
        assert a.status == 403, f"a login with {headers}: {a.status}"
        assert not a.set_cookies(), f"a login with {headers} set {a.set_cookies()}"
    same = {"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"}
    a = login(port, ALICE, headers=same)
    assert a.status == 303 and session_of(a), (a.status, a.set_cookies())


def test_cross_site_cookie_requests_are_refused_and_bearer_ones_are_not(serve, tokens):
    s = serve({"token-file": str(tokens)})
    port = s.port
    same = {"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"}
    pair, _ = session_of(login(port, ALICE, headers=same))
    for headers in foreign_origins(port):
        for path in ("/api/v1/files", "/api/v1/packets", "/"):
            a = request(port, path, cookie=pair, headers=headers)
            assert a.status == 403, f"{path} with the cookie and {headers}: {a.status}"
            assert PCAPNG_MAGIC not in a.body[:8]
        a = request(port, "/logout", method="POST", cookie=pair, headers=headers)
        assert a.status == 403, f"a logout with {headers}: {a.status}"
    # Not from another site: the same origin, a typed address (`none`), no header at all.
    for headers in (same, {"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}, {}):
        a = request(port, "/api/v1/files", cookie=pair, headers=headers)
        assert a.status == 200, f"the cookie with {headers}: {a.status} {a.body[:200]!r}"
    # A bearer header is no browser's ambient credential: not checked.
    for headers in foreign_origins(port):
        a = request(port, "/api/v1/files", token=BOB, headers=headers)
        assert a.status == 200, f"a bearer request with {headers}: {a.status}"


# --------------------------------------------------------------------------------------
# Logs
# --------------------------------------------------------------------------------------

FORGED = "2026-12-07T00:00:00Z INFO forged line"


def test_request_values_forge_no_log_line(serve, tokens):
    """`start`, `end`, `filter` and `format` holding a newline and a fake log line: the line
    is logged escaped (`\\n`), never as a line of its own. A 60,000-character filter (a
    request head holds 64 KiB) is logged cut: under 1 KB, with its length and sha256."""
    s = serve({"token-file": str(tokens)})
    port = s.port
    for key in ("start", "end", "filter", "format"):
        for evil in ("x\n" + FORGED, "x\r\n" + FORGED):
            for path in ("/api/v1/packets", "/api/v1/count", "/api/v1/stats"):
                a = request(port, f"{path}?{urllib.parse.urlencode({key: evil})}", token=ALICE)
                assert a.status < 500, (path, key, a.status, a.body[:200])
    wait_for(lambda: "x\\n" + FORGED in s.log_text(), 5, "the escaped value in the log")
    log = s.log_text()
    assert "panicked" not in log
    lines = log.split("\n")
    assert not [line for line in lines if line.lstrip("\r").startswith(FORGED[:20])], (
        "a request's value started a log line:\n" + log[-3000:]
    )
    for line in lines:
        for m in re.finditer(re.escape(FORGED), line):
            assert line[: m.start()].endswith("\\n"), f"unescaped in the log: {line!r}"

    big = "udp" + " " * 30000 + "and" + " " * 30000 + "len > 0"
    digest = hashlib.sha256(big.encode()).hexdigest()[:12]
    mark = len(log)
    for path, who in (("/api/v1/count", "count by alice"), ("/api/v1/packets", "query by alice")):
        a = request(
            port, f"{path}?{urllib.parse.urlencode({'filter': big})}", token=ALICE, timeout=30
        )
        assert a.status == 200, (path, a.status, a.body[:200])
        wait_for(lambda who=who, mark=mark: who in s.log_text()[mark:], 5, f"the {who} log line")
        (line,) = [x for x in s.log_text()[mark:].splitlines() if who in x]
        assert len(line.encode()) < 1024, f"{len(line)} characters logged: {line[:300]}..."
        assert f"{len(big)} characters" in line and f"sha256 {digest}" in line, line
        mark = len(s.log_text())


# --------------------------------------------------------------------------------------
# Overview cost
# --------------------------------------------------------------------------------------


def test_20_page_loads_over_1000_files_do_not_stall_a_query(serve, tapdeck, tokens, tmp_path):
    """A store of 1,000 files (one per second of packet time). A filtered query alone, then
    the same query while 20 clients (from four addresses) load the page over and over: the
    answer is whole (the same bytes), within 5 s (or five times the query alone, on a busy
    machine), and every page load is 200."""
    pcap = write_pcap(tmp_path / "spread.pcap", gen_packets(5000, seed=7, duration_ns=1010 * 10**9))
    big = tmp_path / "thousand"
    t0 = time.monotonic()
    r = tapdeck("record", "-r", pcap, "--store", big, "-q", "--rotate-interval", "1",
                "--chunk-size", "1MiB", "--staging", "32MiB", timeout=60)  # fmt: skip
    assert r.returncode == 0, r.describe()
    files = len(data_files(big))
    print(f"overview: {files} files made in {time.monotonic() - t0:.1f} s")
    assert files >= 1000, files
    s = serve({"token-file": str(tokens)}, on=big)
    port = s.port
    path = "/api/v1/packets?" + urllib.parse.urlencode({"filter": "udp and port 53"})
    alone = request(port, path, token=ALICE, timeout=30)
    assert alone.status == 200 and alone.body.startswith(PCAPNG_MAGIC), alone.status

    loads: list[tuple[int, float]] = []
    stop = threading.Event()
    start = threading.Barrier(21)

    def load_pages(i):
        start.wait()
        while not stop.is_set():
            try:
                a = request(port, "/", token=ALICE, source=f"127.0.0.{2 + i % 4}", timeout=30)
                loads.append((a.status, a.seconds))
            except (OSError, http.client.HTTPException) as e:
                loads.append((repr(e), 0.0))
            # A breath between loads, as a person's browser takes: a page that costs little
            # leaves the CPU to the query (which runs at idle priority); one that re-reads
            # 1,000 files keeps both cores busy whatever the pause.
            time.sleep(0.02)

    threads = [threading.Thread(target=load_pages, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    try:
        start.wait()
        time.sleep(0.5)  # the page loads under way
        loaded = request(port, path, token=ALICE, timeout=30)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    slowest = max(x[1] for x in loads) if loads else 0
    print(
        f"overview: the query took {alone.seconds:.2f} s alone, {loaded.seconds:.2f} s "
        f"during {len(loads)} page loads (the slowest {slowest:.2f} s)"
    )
    assert loaded.status == 200 and loaded.body == alone.body, (
        f"the query's answer under page loads differs: {loaded.status}, "
        f"{len(loaded.body)} bytes against {len(alone.body)}"
    )
    # Queries run at idle priority: on a machine busy with other work, the query alone is
    # slow too, and the bound grows with it. (Before the listing was cached: 13 to 25 s,
    # against 0.1 s alone.)
    bound = max(5.0, 5 * alone.seconds)
    assert loaded.seconds < bound, (
        f"the query took {loaded.seconds:.1f} s under page loads, {alone.seconds:.2f} s alone"
    )
    bad = Counter(st for st, _ in loads if st != 200)
    assert len(loads) >= 20 and not bad, (len(loads), bad)


# --------------------------------------------------------------------------------------
# Nits
# --------------------------------------------------------------------------------------


def test_the_bearer_scheme_is_any_case_and_every_answer_says_nosniff(serve, tokens):
    s = serve({"token-file": str(tokens)})
    port = s.port
    for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
        a = request(port, "/api/v1/files", headers={"Authorization": f"{scheme} {ALICE}"})
        assert a.status == 200, (scheme, a.status)
    answers = {
        "200 json": request(port, "/api/v1/files", token=ALICE),
        "400 json": request(port, "/api/v1/count?start=yesterday", token=ALICE),
        "401": request(port, "/api/v1/files"),
        "401 page": request(port, "/"),
        "200 page": request(port, "/", token=ALICE),
        "200 metrics": request(port, "/metrics", token=ALICE),
        "404": request(port, "/nothing-here", token=ALICE),
    }
    open_service = serve()
    answers["421"] = request(
        open_service.port, "/api/v1/files", headers={"Host": "attacker.example"}
    )
    for what, a in answers.items():
        assert a.headers.get("X-Content-Type-Options") == "nosniff", (what, a.status, a.headers)


# --------------------------------------------------------------------------------------
# Fuzzing
# --------------------------------------------------------------------------------------

FUZZ_SECONDS = 25
FUZZ_TARGET = 6000

# fmt: off
FUZZ_PATHS = ["/", "/login", "/logout", "/metrics", "/healthz", "/favicon.ico",
              "/assets/tapdeck.js", "/assets/nope", "/api/v1/status", "/api/v1/packets",
              "/api/v1/count", "/api/v1/stats", "/api/v1/files", "/api/v1/info", "/api/v2/x"]
FUZZ_METHODS = ["GET"] * 10 + ["POST"] * 4 + ["HEAD", "OPTIONS", "PUT", "DELETE", "PATCH"]
FUZZ_QUERY = {
    "start": ["", "0", "-1", "now", "yesterday", "2026-11-21T00:00:00Z", "1795413430",
              "99999999999999999999", "1e308", "NaN", "2026-13-45T99:99:99Z"],
    "end": ["", "0", "now", "1795413431.5", "18446744073709551616", "-9223372036854775808"],
    "filter": ["", "udp", "tcp port 80", "host 127.0.0.1", "not", "((((", "udp and", "len >",
               "ip6 and tcp", "port 99999", "ether host zz", "\0", "vlan 5000"],
    "format": ["", "pcap", "pcapng", "PCAP", "json", "pcapng\0"],
    "step": ["", "60", "90", "0", "-60", "1e9", "600"],
}
# fmt: on


def fuzz_text(rng: random.Random, length: int) -> str:
    """Random characters weighted toward the ones parsers trip on (latin-1: each one byte)."""
    pool = "aZ09-._~%/?#&=+;:,@[]!$'()* \t\0\r\n\"\\<>{}|^`" + "".join(map(chr, range(0x80, 0x100)))
    return "".join(rng.choice(pool) for _ in range(length))


def fuzz_obs_text(rng: random.Random, length: int) -> str:
    """What a header value may hold: visible ASCII, spaces and bytes 0x80-0xff."""
    pool = [chr(c) for c in range(0x20, 0x7F)] + [chr(c) for c in range(0x80, 0x100)]
    return "".join(rng.choice(pool) for _ in range(length))


@dataclass
class FuzzRequest:
    """A request in parts, well formed until a mutation breaks one of them."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes
    eol: str = "\r\n"

    def encode(self) -> bytes:
        line = f"{self.method} {self.target} {self.version}".rstrip(" ")
        head = self.eol.join([line, *(f"{k}: {v}" for k, v in self.headers)])
        return (head + self.eol + self.eol).encode("latin-1") + self.body


def fuzz_target(rng: random.Random) -> str:
    """A known path, its characters sometimes %-escaped, with a query of odd values."""
    target = rng.choice(FUZZ_PATHS)
    if rng.random() < 0.15:
        target = "".join(f"%{ord(c):02X}" if rng.random() < 0.3 else c for c in target)
    if rng.random() < 0.5:
        pairs = []
        for _ in range(rng.randrange(1, 5)):
            key = rng.choice([*FUZZ_QUERY, "x"])
            value = rng.choice(FUZZ_QUERY.get(key, [""]) + [fuzz_text(rng, rng.randrange(12))])
            pairs.append(f"{key}={urllib.parse.quote(value, safe='')}")
        target += "?" + "&".join(pairs)
    return target


def fuzz_headers(rng: random.Random, port: int, session: str) -> list[tuple[str, str]]:
    """Well-formed headers with values a hostile client would pick."""
    # fmt: off
    hosts = [f"127.0.0.1:{port}"] * 6 + [
        "localhost", f"attacker.example:{port}", "", "[::1]", f"127.0.0.1:{port}, evil",
        "a" * 300, "127.0.0.1:99999999", "[::1", "localhost:", ":80", "127.0.0.1.evil",
        "\x80\xff", "LOCALHOST", "127.000.000.001", "0x7f.1", "2130706433"]
    choices = {
        "Authorization": [f"Bearer {ALICE}"] * 3 + [
            f"bearer {BOB}", f"BEARER {ALICE}", "Bearer", "Bearer ", "Bearer wrong-0123456789ab",
            "Basic YWxhZGRpbjpvcGVuc2VzYW1l", "Bearer " + "A" * 5000, "Bearer \x80\xff",
            f"Bearer {ALICE} {ALICE}", f"Bearer  {ALICE}"],
        "Cookie": [session] * 3 + [
            f"{COOKIE}=" + "0" * 64, f"{COOKIE}=%zz", COOKIE, ";;;;", f"a=b; {session}; x",
            f"{COOKIE}=x; {session}", f"{COOKIE}={ALICE}", f"{COOKIE}=" + "f" * 5000,
            f"tapdeck_token={ALICE}", "\x80=\xff"],
        "Origin": ["null", f"http://127.0.0.1:{port}", "https://evil.example", "", "http://",
                   "\x80", f"http://127.0.0.1:{port}/x", f"HTTP://127.0.0.1:{port}"],
        "Sec-Fetch-Site": ["cross-site", "same-site", "same-origin", "none", "", "\xff"],
        "Content-Type": ["application/x-www-form-urlencoded", "application/json",
                         "multipart/form-data; boundary=", "", "text/plain; charset=\xff"],
        "Accept": ["application/openmetrics-text; version=1.0.0", "*/*", "text/html"],
        "Connection": ["close", "keep-alive", "upgrade", "Upgrade, HTTP2-Settings"],
        "Upgrade": ["h2c", "websocket"],
        "Expect": ["100-continue", "nonsense"],
    }
    # fmt: on
    out = [("Host", rng.choice(hosts))] if rng.random() < 0.95 else []
    for name, values in choices.items():
        if rng.random() < 0.3:
            out.append((name, rng.choice(values)))
    if rng.random() < 0.2:
        out.append((f"X-{rng.randrange(1000)}", fuzz_obs_text(rng, rng.randrange(40))))
    return out


def fuzz_body(rng: random.Random, req: FuzzRequest) -> None:
    """A body with a Content-Length that fits it (or none)."""
    if req.target.startswith("/login") and rng.random() < 0.7:
        token = rng.choice([ALICE, "wrong", "", "%zz", "x" * 5000, fuzz_text(rng, 20)])
        req.body = ("token=" + urllib.parse.quote(token)).encode()
    elif req.method == "POST" or rng.random() < 0.1:
        req.body = fuzz_text(rng, rng.randrange(0, 64)).encode("latin-1")
    if req.body:
        req.headers.append(("Content-Length", str(len(req.body))))


# Defects, by part of the request (`{n}`: the body's length).
# fmt: off
BAD_METHODS = ["get", "G ET", "GET\0", "\0", "", "BREW", "M" * 300, "GET\x85", "CONNECT", "TRACE"]
BAD_VERSIONS = ["HTTP/2.0", "HTTP/0.9", "HTTP/1.2", "HTTP/9.9", "HTTP/1", "http/1.1",
                "HTTP/1.1\0", "", "HTTP/1.1 x", "HTTP/" + "1" * 50, "HTTP/1.1\xff"]
BAD_ESCAPES = ["%", "%Z9", "%00", "%c0%ae", "%2e%2e%2f", "%ff%fe", "%25"]
DOT_SEGMENTS = ["/./", "/../", "//", "/.../", "/%2e/"]
ODD_TARGETS = ["http://127.0.0.1{t}", "http://evil.example{t}", "*", "", "?", "//evil.example/",
               "http://[::1]{t}"]
BAD_NAMES = ["Bad Name", "a:b", "", "X-\x80", "Host ", "\tX", "Content-Length\0", "Host"]
CONTROLS = ["\0", "a\rb", "a\nb", "\x7f"]
BAD_LENGTHS = ["-1", "+{n}", "1e3", "99999999999999999999", " {n}", "{n}, {n}", "0x10", "",
               "\xff"]
CODINGS = ["chunked", "chunked, gzip", "gzip", "identity", "xchunked"]
# fmt: on


def mutate(rng: random.Random, req: FuzzRequest) -> None:
    """One defect: in the request line, a header or the framing of the body."""
    n = len(req.body)
    where = rng.randrange(len(req.headers) + 1)
    match rng.randrange(16):
        case 0:
            req.method = rng.choice(BAD_METHODS)
        case 1:
            req.version = rng.choice(BAD_VERSIONS)
        case 2:
            req.target += rng.choice(BAD_ESCAPES)
        case 3:
            req.target = req.target.replace("/", rng.choice(DOT_SEGMENTS))
        case 4:
            req.target += "/" + "a" * rng.choice([100, 4000, 20000, 70000])  # overlong
        case 5:
            req.target = rng.choice(ODD_TARGETS).format(t=req.target)
        case 6:
            at = rng.randrange(len(req.target) + 1)
            req.target = req.target[:at] + fuzz_text(rng, rng.randrange(1, 8)) + req.target[at:]
        case 7:
            name = rng.choice([*BAD_NAMES, "X-" + fuzz_text(rng, rng.randrange(1, 10))])
            req.headers.insert(where, (name, fuzz_text(rng, rng.randrange(0, 40))))
        case 8:
            req.headers.insert(where, ("X-Folded", "a\r\n folded"))  # obs-fold
        case 9:
            req.headers.insert(where, ("X-Ctl", rng.choice(CONTROLS)))
        case 10:
            req.headers += [("Transfer-Encoding", "chunked"), ("Content-Length", str(n))]
        case 11:
            req.headers += [("Content-Length", str(n)), ("Content-Length", str(n + 1))]
        case 12:
            req.headers.append(("Content-Length", rng.choice(BAD_LENGTHS).format(n=n)))
        case 13:
            req.headers = [h for h in req.headers if h[0] != "Content-Length"]
            req.headers.append(("Transfer-Encoding", rng.choice(CODINGS)))
            chunked = f"{n:x}\r\n".encode() + req.body + b"\r\n0\r\n\r\n"
            req.body = rng.choice([chunked, b"zz\r\n" + req.body, req.body])
        case 14:
            req.eol = "\n"
        case _:
            # A length the body never reaches: the server waits (the client gives up first).
            req.headers = [h for h in req.headers if h[0] != "Content-Length"]
            req.headers.append(("Content-Length", str(n + 50)))


def fuzz_request(rng: random.Random, port: int, session: str) -> bytes:
    """Half the requests are well formed (they reach the routes, tokens, sessions and
    cross-site checks with hostile values); the others carry one to three defects."""
    req = FuzzRequest(
        rng.choice(FUZZ_METHODS),
        fuzz_target(rng),
        rng.choice(["HTTP/1.1"] * 5 + ["HTTP/1.0"]),
        fuzz_headers(rng, port, session),
        b"",
    )
    fuzz_body(rng, req)
    if rng.random() < 0.5:
        for _ in range(rng.randrange(1, 4)):
            mutate(rng, req)
    payload = req.encode()
    roll = rng.random()
    if roll < 0.03:
        payload += payload  # pipelined twice
    elif roll < 0.05:
        payload = payload[: rng.randrange(len(payload))]  # cut anywhere
    return payload


def fuzz_exchange(port: int, payload: bytes, source: str) -> int | None:
    """Sends `payload` from `source`; the status of the first answer (or None) within a
    short wait. The connection is closed either way."""
    try:
        c = connect_from(source, port, timeout=1.0)
    except OSError:
        return None
    try:
        c.settimeout(0.4)
        try:
            c.sendall(payload)
        except OSError:
            pass  # the server may stop reading (and close) before the end
        got = b""
        try:
            while b"\r\n" not in got and len(got) < 4096:
                piece = c.recv(4096)
                if not piece:
                    break
                got += piece
        except OSError:
            pass
        return status_of(got)
    finally:
        c.close()


def test_fuzzing_request_lines_and_headers_finds_no_panic(serve, tokens):
    """Two services, one without tokens (the Host check) and one with a token file (tokens,
    sessions, the cross-site checks), take a few thousand mutated requests from many
    addresses (so no address reaches the guessing backoff) in about 25 s: afterwards both
    are alive, their logs hold no panic, and a valid request is answered 200."""
    seed = int(os.environ.get("TAPDECK_FUZZ_SEED", random.SystemRandom().randrange(2**32)))
    print(f"fuzz seed {seed} (TAPDECK_FUZZ_SEED={seed} replays it)")
    rng = random.Random(seed)
    open_service = serve()
    token_service = serve({"token-file": str(tokens)})
    session, _ = session_of(login(token_service.port, ALICE))
    jobs = []
    for i in range(FUZZ_TARGET):
        s = open_service if i % 2 else token_service
        payload = fuzz_request(rng, s.port, session)
        source = f"127.{rng.randrange(1, 250)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        jobs.append((s.port, payload, source))
    statuses: Counter = Counter()
    t0 = time.monotonic()
    sent = 0
    with ThreadPoolExecutor(max_workers=16) as pool:
        for start in range(0, len(jobs), 200):
            batch = jobs[start : start + 200]
            statuses.update(pool.map(lambda job: fuzz_exchange(*job), batch))
            sent += len(batch)
            open_service.alive()
            token_service.alive()
            if time.monotonic() - t0 > FUZZ_SECONDS:
                break
    took = time.monotonic() - t0
    print(f"fuzz: {sent} requests in {took:.1f} s; answers {dict(statuses.most_common())}")
    assert sent >= 1000, f"only {sent} requests in {took:.0f} s"
    for s in (open_service, token_service):
        s.alive()
        log = s.log_text()
        assert "panicked" not in log and "overflow" not in log, log[-3000:]
    assert request(open_service.port, "/api/v1/files").status == 200
    assert request(token_service.port, "/api/v1/files", token=BOB).status == 200
