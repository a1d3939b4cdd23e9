"""Helpers shared by the forwarding tests (`test_export_collect.py`, `test_forward_*.py`):
their namespaces (tests/netlab.py with tcpdump), shell commands with time limits, starting a
collector and an exporter in a namespace, stopping a process with SIGINT and reading what it
left."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import netlab
import pytest
from conftest import QUICK, kill_all, run, wait_for  # noqa: F401 (kill_all: for the tests)


def sh(*args, check=True, timeout=QUICK):
    return run([*args], check=check, timeout=timeout)


JUMBO = 9000  # the forwarding links' MTU: a corpus NFS frame is 8014 bytes


class Namespaces(netlab.Lab):
    """netlab's namespaces `prefix + tag + key` and veth pairs, removed on close; subclasses
    lay out their topology in `build` (links with the JUMBO MTU). Offloads are off, as on a
    NIC without them: the exporter's UDP GSO sends are then cut into datagrams at the sending
    device, and tcpdump sees the datagrams the wire carries rather than one merged buffer."""

    def ns_sh(self, ns, *args, check=True, timeout=QUICK):
        return sh("ip", "netns", "exec", ns, *args, check=check, timeout=timeout)

    def tcpdump(self, ns, log: Path, *args):
        """A tcpdump in `ns`, returned once it listens."""
        with open(log, "wb") as err:
            p = self.popen(ns, "tcpdump", *args, stdout=subprocess.DEVNULL, stderr=err)
        wait_for(lambda: b"listening on" in log.read_bytes() or p.poll() is not None, 10,
                 "tcpdump to listen")
        assert p.poll() is None, log.read_text()
        return p


def start_collector(tapdeck, net, ns, listen, store, procs, *extra, log: Path | None = None,
                    staging="64MiB", chunk="1MiB", flush="0.2", stdout=subprocess.DEVNULL):
    """`tapdeck collect --listen LISTEN --store STORE *extra` in namespace `ns` of `net`,
    with small pools, zstd:1, no O_DIRECT and stats every 0.3 s. Returned once ready: with
    `log` (its standard error appended there), when it says it is collecting; without, when
    its manifest is written (its sockets are bound before the recorder starts)."""
    args = [tapdeck.bin, "collect", "--listen", listen, "--store", store, "--stats-interval",
            "0.3", "--flush-interval", flush, "--codec", "zstd:1", "--staging", staging,
            "--chunk-size", chunk, "--no-direct", *extra]
    if log is None:
        p = net.popen(ns, *args, stdout=stdout)
        procs.append(p)
        wait_for(lambda: (Path(store) / "manifest.json").exists() or p.poll() is not None, 10,
                 "the collector to start")
        assert p.poll() is None, p.communicate()[1].decode()
        return p
    with open(log, "ab") as err:
        p = net.popen(ns, *args, stdout=stdout, stderr=err)
    procs.append(p)
    wait_for(lambda: b"collecting IPFIX on" in log.read_bytes() or p.poll() is not None, 10,
             "the collector to listen")
    assert p.poll() is None, log.read_text()
    return p


def reference(net, tmp_path, procs):
    """tcpdump on the exporter namespace's `cap` interface into `ref.pcap` (nanosecond
    times, whole frames): the oracle of what the exporter saw. Returns (path, process)."""
    ref = tmp_path / "ref.pcap"
    dump = net.tcpdump("e", tmp_path / "cap.log", "-i", "cap", "-s", "0", "-U",
                       "--time-stamp-precision", "nano", "-w", ref)
    procs.append(dump)
    return ref, dump


def start_exporter(tapdeck, net, stats, procs, snap, *args):
    """`tapdeck export` on the exporter namespace's `cap` interface, once it has written its
    first stats record."""
    p = net.popen("e", tapdeck.bin, "export", "-i", "cap", "--snaplen", snap, "--stats", stats,
                  "--stats-interval", "0.2", "--template-interval", "0.5", *args,
                  stdout=subprocess.DEVNULL)
    procs.append(p)
    wait_for(lambda: Path(stats).exists() and "\n" in Path(stats).read_text() or p.poll() is not None,
             10, "the exporter's first stats record")
    assert p.poll() is None, p.communicate()[1].decode()
    return p


def last_stats(path) -> dict:
    """The last complete record: the writer may be mid-line when we read."""
    text = Path(path).read_text()
    return [json.loads(x) for x in text[:text.rfind("\n") + 1].splitlines() if x.strip()][-1]


def stop(p, timeout=QUICK) -> str:
    """SIGINT, then its stderr; it must exit 0 without a panic."""
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        pytest.fail(f"{p.args} did not stop within {timeout}s:\n{err.decode()[-2000:]}")
    err = err.decode(errors="replace")
    assert p.returncode == 0, err
    assert "panicked" not in err
    return err


def ledger(store) -> dict:
    return json.loads((Path(store) / "collector.json").read_text())


def ledger_packets(store) -> int:
    """The packets a collector's ledger says its store holds; 0 before its first save."""
    try:
        return sum(s["packets"] for s in ledger(store)["streams"])
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def ledger_records(store) -> int:
    """The records a collector's ledger accounts for, received or counted lost."""
    try:
        return sum(s["records"] + s["lost"] for s in ledger(store)["streams"])
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def wait_stored(store, n: int):
    """Waits until a UDP collector's ledger holds `n` packets: stopped sooner, a loaded
    collector leaves datagrams unread in its socket. A timeout means datagrams were lost."""
    wait_for(lambda: ledger_packets(store) >= n, 20,
             f"the collector to store {n} packets (a shortfall: datagrams lost)")
