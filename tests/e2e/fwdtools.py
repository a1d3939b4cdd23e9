"""Helpers shared by the forwarding tests (`test_export_collect.py`, `test_forward_hostile.py`):
shell commands with time limits, starting an exporter in a namespace, stopping a process with
SIGINT and reading what it left."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import QUICK, kill_all, run, wait_for  # noqa: F401 (kill_all: for the tests)


def sh(*args, check=True, timeout=QUICK):
    return run([*args], check=check, timeout=timeout)


def start_exporter(tapdeck, net, stats, procs, snap, *args):
    """`tapdeck export` on the exporter namespace's `cap` interface, once it has written its
    first stats record."""
    p = net.popen("e", tapdeck.bin, "export", "-i", "cap", "--snaplen", snap, "--stats", stats,
                  "--stats-interval", "0.2", "--template-interval", "0.5", *args,
                  stdout=subprocess.DEVNULL)
    procs.append(p)
    wait_for(lambda: Path(stats).exists() and Path(stats).read_text().strip() or p.poll() is not None,
             10, "the exporter's first stats record")
    assert p.poll() is None, p.communicate()[1].decode()
    return p


def last_stats(path) -> dict:
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()][-1]


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
