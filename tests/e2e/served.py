"""A served store: one `tapdeck serve` process and the HTTP requests a test makes to it, shared
by test_serve.py, test_serve_auth.py, test_web.py, test_query_api.py and test_query_limits.py.

`Served` starts the process (in a network namespace or here; recording or `--no-capture`),
sends its standard error to a file the test reads while it runs, knows its port (from
`--listen` or the config's `listen`), and asks it things from where it runs: `get` (a token,
an Accept header, TLS), `health`, `status`, `scrape` (the metrics as samples), waits
(`wait_log`, `wait_answering`, `wait_recording`, `wait_settled`) and `stop` (SIGTERM: it must
drain, summarize and exit 0). Every wait has a deadline. `write_config` writes a TOML config
from a dict.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import QUICK, SUMMARY_LINE, wait_for
from netlab import call_in_ns, in_ns


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a TOML basic string for the paths and sizes used here


def write_config(path: Path, keys: dict) -> Path:
    path.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in keys.items()))
    return path


def http_request(ns, port, path, *, method="GET", headers=None, host="127.0.0.1",
                 timeout=5.0, context=None, source=None):
    """(status, headers with lowercase names, body) of one request made from inside
    namespace `ns` (None: here), from address `source` (None: the kernel's choice); HTTPS
    with `context`."""
    bind = (source, 0) if source else None

    def go():
        if context is None:
            c = http.client.HTTPConnection(host, port, timeout=timeout, source_address=bind)
        else:
            c = http.client.HTTPSConnection(host, port, timeout=timeout, context=context,
                                            source_address=bind)
        try:
            c.request(method, path, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    return call_in_ns(ns, go)


def parse_metrics(text: str) -> dict[tuple[str, frozenset], float]:
    """Samples of a text-format scrape: (name, labels) → value."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)", line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


class Scrape:
    def __init__(self, text: str):
        self.text = text
        self.samples = parse_metrics(text)

    def total(self, name: str, **labels) -> float:
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= ls)

    def series(self, name: str) -> dict[frozenset, float]:
        return {ls: v for (n, ls), v in self.samples.items() if n == name}

    def unbalanced(self) -> list:
        """Per stream and interface, seen = stored + dropped (every cause) + in flight."""
        bad = []
        for ls, seen in self.series("tapdeck_packets_seen_total").items():
            key = dict(ls)
            rest = (
                self.total("tapdeck_packets_stored_total", **key)
                + self.total("tapdeck_packets_dropped_total", **key)
                + self.total("tapdeck_packets_in_flight", **key)
            )
            if seen != rest:
                bad.append((key, seen, rest))
        return bad

    @property
    def stored(self) -> int:
        return int(self.total("tapdeck_packets_stored_total"))

    @property
    def in_flight(self) -> int:
        return int(self.total("tapdeck_packets_in_flight"))


def listen_port(args: list[str], config: Path | None) -> int:
    """The port `serve` listens on: `--listen` wins over the config's `listen`."""
    if "--listen" in args:
        listen = args[args.index("--listen") + 1]
    else:
        (line,) = [x for x in config.read_text().splitlines() if x.startswith("listen = ")]
        listen = json.loads(line.split(" = ", 1)[1])
    return int(listen.rsplit(":", 1)[1])


def wait_exit(proc: subprocess.Popen, timeout: float) -> int:
    """The exit status of a process whose output goes to files; killed if it overstays."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"{proc.args} did not exit within {timeout} s")


class Served:
    """One `tapdeck serve ARGS` (with `config`, `--config CONFIG` first) in namespace `ns`
    (None: here); killed at the test's end through `procs`. `token` and `context` (TLS)
    are what `get` sends unless told otherwise. `command` replaces `tapdeck serve ...` (the
    unit's ExecStart), `prefix` goes before it (setpriv), `umask` is set on the way."""

    def __init__(self, tapdeck_bin, procs, workdir: Path, *args, config: Path | None = None,
                 ns: str | None = None, token=None, context=None, name="serve",
                 command=None, prefix=(), env=None, umask=None):
        self.ns, self.config, self.token, self.context = ns, config, token, context
        args = [str(a) for a in args]
        self.port = listen_port(args, config)
        self.log = workdir / f"{name}.stderr"
        head = ["--config", config] if config is not None else []
        command = command or [tapdeck_bin, "serve", *head, *args]
        argv = [*in_ns(ns), *prefix, *map(str, command)]
        if umask is not None:
            # Every program on the way execs the next, so the pid stays serve's.
            argv = ["sh", "-c", f'umask {umask}; exec "$@"', "sh", *argv]
        with open(self.log, "wb") as err, open(workdir / f"{name}.stdout", "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, env=env)
        procs.append(self.proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> None:
        assert self.proc.poll() is None, (
            f"serve exited {self.proc.returncode}:\n{self.log_text()[-3000:]}"
        )

    def wait_log(self, needle: str, timeout: float = 10, after: int = 0) -> str:
        """Waits for `needle` in the log (from character `after` on); returns the log."""

        def seen():
            text = self.log_text()
            if needle in text[after:]:
                return text
            self.alive()
            return None

        return wait_for(seen, timeout, f"{needle!r} in the log of serve")

    def get(self, path, *, token=..., accept=None, headers=None, context=..., timeout=10.0,
            method="GET", source=None):
        """(status, headers with lowercase names, body) of one request (from address
        `source`: wrong tokens from one address are answered slower and slower)."""
        headers = dict(headers or {})
        token = self.token if token is ... else token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if accept:
            headers["Accept"] = accept
        context = self.context if context is ... else context
        return http_request(self.ns, self.port, path, method=method, headers=headers,
                            timeout=timeout, context=context, source=source)

    def get_json(self, path, **kw):
        status, _, body = self.get(path, **kw)
        assert status == 200, (path, status, body[:300])
        return json.loads(body)

    def scrape(self, accept=None) -> Scrape:
        status, _, body = self.get("/metrics", accept=accept)
        assert status == 200, (status, body[:300])
        return Scrape(body.decode())

    def health(self) -> tuple[int, dict]:
        status, _, body = self.get("/healthz")
        return status, json.loads(body)

    def status(self) -> dict:
        return self.get_json("/api/v1/status")

    def wait_answering(self, timeout=20) -> None:
        """Until /healthz answers 200 (a read-only service: once it reads its stores)."""

        def ready():
            self.alive()
            try:
                return self.get("/healthz")[0] == 200
            except OSError:
                return False

        wait_for(ready, timeout, "serve to answer /healthz with 200", interval=0.1)

    def wait_recording(self, timeout=15) -> None:
        def ready():
            self.alive()
            try:
                status, doc = self.health()
            except OSError:
                return None
            return status == 200 and doc["phase"] == "recording"

        wait_for(ready, timeout, "serve to say it is recording (/healthz 200)", interval=0.1)

    def wait_settled(self, at_least: int, timeout=20) -> Scrape:
        """A scrape once `at_least` packets are stored and nothing is in flight."""
        last = []

        def settled():
            last[:] = [self.scrape()]
            s = last[0]
            return s if s.stored >= at_least and s.in_flight == 0 else None

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if got := settled():
                return got
            time.sleep(0.1)
        s = last[0]
        drops = {
            c: s.total("tapdeck_packets_dropped_total", cause=c)
            for c in ("kernel", "staging_full", "write_error")
        }
        pytest.fail(
            f"timed out after {timeout}s waiting for {at_least} packets stored, none in "
            f"flight: seen {s.total('tapdeck_packets_seen_total'):.0f}, stored {s.stored}, "
            f"in flight {s.in_flight}, dropped {drops}"
        )

    def terminate(self, timeout=QUICK) -> int:
        """SIGTERM; its exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return wait_exit(self.proc, timeout)

    def stop(self, timeout=QUICK) -> str:
        """SIGTERM: drains, prints its summary and exits 0; returns its standard error."""
        rc = self.terminate(timeout)
        err = self.log_text()
        assert rc == 0, f"serve exited {rc} after SIGTERM:\n{err[-3000:]}"
        assert "panicked" not in err, err
        assert any(SUMMARY_LINE.match(line) for line in err.splitlines()), err[-2000:]
        assert "accounting: seen = stored + dropped holds" in err, err[-2000:]
        return err
