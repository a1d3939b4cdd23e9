"""Network namespaces and veth pairs: the one way the end-to-end tests (tests/e2e) and the live
benchmarks (bench/) make them.

Importing: tests/e2e/conftest.py puts tests/ on sys.path; a bench script does
`sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))`. Nothing here
imports pytest: a command that fails raises `CommandError`, which a test reports as its
failure and a benchmark as its error.

- `Lab`: the namespaces and veth pairs it made, removed by `close()` (also after an
  exception or a signal: a topology is built in `build()` under the same guard). Every link
  is set up the same way: IPv6 off unless asked for (no router solicitations or DAD frames:
  only the test's traffic crosses it), the MTU given, GRO/GSO/TSO and UDP segmentation off
  (otherwise the kernel merges segments and the stored frames never crossed the wire; an
  exporter's UDP GSO buffer is cut into datagrams at its own device, as on a NIC without
  USO), with a warning when an offload stays on.
- `Link`: the common case, two namespaces joined by one veth with an IPv4 address at each end.
- `in_ns(ns)`: the argv prefix that runs a command in namespace `ns` (None: where we are);
  `run_in(ns, *cmd)`: such a command run, its output captured; `call_in_ns(ns, fn)`: a
  Python function run there (sockets it makes live there); `free_port(ns)`: a TCP port free
  on 127.0.0.1 there.
- `unique_tag()`: a part of names that a concurrent run (of another test file, or of the
  same one) does not share: namespace names are global, device names inside a namespace
  are not.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

OFFLOADS = (
    "generic-receive-offload",
    "large-receive-offload",
    "tcp-segmentation-offload",
    "generic-segmentation-offload",
)
TIMEOUT = 60  # seconds for any one setup command


class CommandError(RuntimeError):
    """A setup command failed: the command, its exit status and its standard error."""


def sh(cmd, check=True, timeout=None, **kw) -> subprocess.CompletedProcess:
    """Runs `cmd` (text output captured); CommandError if it fails."""
    cmd = [str(c) for c in cmd]
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise CommandError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-1500:]}")
    return p


def _setup(cmd, check=True, **kw) -> subprocess.CompletedProcess:
    """A setup command: bounded by TIMEOUT."""
    return sh(cmd, check, timeout=TIMEOUT, **kw)


def in_ns(ns: str | None) -> list[str]:
    """Command prefix that runs in namespace `ns` (None: the current namespace)."""
    return ["ip", "netns", "exec", ns] if ns else []


def run_in(ns: str | None, *args, timeout=TIMEOUT, **kw) -> subprocess.CompletedProcess:
    """A command in namespace `ns` (None: here), its output captured, its status not
    checked (the caller asserts on it)."""
    return subprocess.run([*in_ns(ns), *map(str, args)], capture_output=True, timeout=timeout,
                          check=False, **kw)


def _netns_arg(ns: str | None) -> list[str]:
    return ["netns", ns] if ns else []


_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000


def call_in_ns(ns: str | None, fn, *args):
    """`fn(*args)` in a new thread that has joined namespace `ns` (setns acts on the calling
    thread only), so the sockets it makes live there; returns its result or raises its
    exception. With `ns` None it is just a call."""
    if ns is None:
        return fn(*args)
    out: dict = {}

    def body():
        fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns {ns}: {os.strerror(err)}")
        finally:
            os.close(fd)
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 (re-raised in the caller's thread)
            out["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def free_port(ns: str | None = None) -> int:
    """A TCP port nothing listens on at 127.0.0.1 in namespace `ns` (None: here)."""

    def pick():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    return call_in_ns(ns, pick)


def unique_tag() -> str:
    """Seven digits: this process and a random part (two runs in one process differ too)."""
    return f"{os.getpid() % 10000:04d}{random.randrange(1000):03d}"


def netns_exists(name: str) -> bool:
    return os.path.exists(f"/run/netns/{name}")


class Lab:
    """Namespaces and veth pairs, removed by `close()`. With `keys`, it makes the namespaces
    `prefix + tag + key` (their names in `self.ns[key]`) and then calls `build()`, where a
    subclass lays out its topology; if anything fails half way, what was made is removed.
    Used as a context manager, it closes on exit."""

    def __init__(self, prefix: str = "td", keys=(), *, ipv6: bool = False):
        self.tag = unique_tag()
        self.ns: dict[str, str] = {}
        self.namespaces: list[str] = []
        self.root_links: list[str] = []
        try:
            for k in keys:
                self.ns[k] = self.add_ns(f"{prefix}{self.tag}{k}", ipv6=ipv6)
            self.build()
        except BaseException:
            self.close()
            raise

    def build(self):
        """A subclass's topology (links, addresses, routes)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def add_ns(self, name: str, *, ipv6: bool = False) -> str:
        """A namespace `name` with its loopback up (and IPv6 off unless `ipv6`)."""
        _setup(["ip", "netns", "add", name])
        self.namespaces.append(name)
        if not ipv6:
            _setup(in_ns(name) + ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                                  "net.ipv6.conf.default.disable_ipv6=1"], check=False)
        _setup(["ip", "-n", name, "link", "set", "lo", "up"])
        return name

    def pair(self, a_ns, a, b_ns, b, mtu: int = 1500, *, ipv6: bool = False):
        """A veth pair a <-> b, each end made directly in its namespace (None: this one), up,
        offloads off."""
        _setup(["ip", "link", "add", a, *_netns_arg(a_ns), "type", "veth", "peer", "name", b,
                *_netns_arg(b_ns)])
        self.root_links += [dev for ns, dev in ((a_ns, a), (b_ns, b)) if ns is None]
        for ns, dev in ((a_ns, a), (b_ns, b)):
            if not ipv6:
                _setup(in_ns(ns) + ["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"],
                       check=False)
            _setup(in_ns(ns) + ["ip", "link", "set", dev, "mtu", str(mtu), "up"])
            self.offloads_off(ns, dev)

    @staticmethod
    def offloads_off(ns, dev):
        if shutil.which("ethtool") is None:
            print(f"netlab: warning: no ethtool: {dev} keeps its offloads", file=sys.stderr)
            return
        _setup(in_ns(ns) + ["ethtool", "-K", dev, "gro", "off", "gso", "off", "tso", "off",
                            "tx-udp-segmentation", "off"], check=False)
        feats = _setup(in_ns(ns) + ["ethtool", "-k", dev]).stdout
        on = [f for f in OFFLOADS if re.search(rf"^{f}: on", feats, re.MULTILINE)]
        if on:
            print(f"netlab: warning: {dev} still has {', '.join(on)} on", file=sys.stderr,
                  flush=True)

    def address(self, ns, dev, cidr, *extra):
        _setup(in_ns(ns) + ["ip", "addr", "add", cidr, "dev", dev, *extra])

    def route(self, ns, *args):
        _setup(in_ns(ns) + ["ip", "route", "add", *args])

    def sysctl(self, ns, *settings):
        _setup(in_ns(ns) + ["sysctl", "-qw", *settings])

    def nft(self, ns, rules: str):
        _setup(in_ns(ns) + ["nft", "-f", "-"], input=rules)

    def rx(self, ns, dev) -> dict:
        """The link's receive counters: {"packets": …, "dropped": …, …}."""
        out = _setup(in_ns(ns) + ["ip", "-s", "-j", "link", "show", "dev", dev]).stdout
        return json.loads(out)[0]["stats64"]["rx"]

    def wait_carrier(self, ns, dev, timeout: float = 10.0):
        deadline = time.monotonic() + timeout
        while "LOWER_UP" not in _setup(in_ns(ns) + ["ip", "link", "show", "dev", dev]).stdout:
            if time.monotonic() > deadline:
                raise CommandError(f"{dev} in {ns} has no carrier after {timeout} s")
            time.sleep(0.05)

    def popen(self, ns, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw):
        """A process in namespace `ns` (a key of `self.ns`, a name, or None)."""
        ns = self.ns.get(ns, ns)
        return subprocess.Popen([*in_ns(ns), *map(str, args)], stdout=stdout, stderr=stderr,
                                **kw)

    def kill_inside(self):
        """Kills (by pid) whatever still runs in this lab's namespaces."""
        for ns in self.namespaces:
            if not netns_exists(ns):
                continue
            for pid in _setup(["ip", "netns", "pids", ns], check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass

    def close(self):
        """Removes what this lab made (a namespace takes its veth ends and their peers along)."""
        for dev in self.root_links:
            _setup(["ip", "link", "del", dev], check=False)
        for ns in reversed(self.namespaces):
            _setup(["ip", "netns", "del", ns], check=False)
        self.root_links, self.namespaces = [], []


class Link(Lab):
    """Namespaces `a` and `b` (`self.a`, `self.b`) joined by one veth, device `dev_a` in a
    (address `addr_a`/24) and `dev_b` in b. With `ipv6`, IPv6 stays on (the caller adds
    IPv6 addresses)."""

    def __init__(self, prefix: str, dev_a: str, addr_a: str, dev_b: str, addr_b: str, *,
                 mtu: int = 1500, ipv6: bool = False):
        self.dev_a, self.dev_b = dev_a, dev_b
        self.addr_a, self.addr_b = addr_a, addr_b
        self.mtu, self.ipv6 = mtu, ipv6
        super().__init__(prefix, ("a", "b"), ipv6=ipv6)

    @property
    def a(self) -> str:
        return self.ns["a"]

    @property
    def b(self) -> str:
        return self.ns["b"]

    def build(self):
        self.pair(self.a, self.dev_a, self.b, self.dev_b, self.mtu, ipv6=self.ipv6)
        self.address(self.a, self.dev_a, f"{self.addr_a}/24")
        self.address(self.b, self.dev_b, f"{self.addr_b}/24")
