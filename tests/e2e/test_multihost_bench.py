"""The multi-host benchmark's harness works: `bench/multihost.py --quick` runs end to end (its
own namespaces, veth pairs and nftables split, removed afterwards) and writes results whose
counts add up. It asserts nothing about speed: the machine may be busy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, run

TOOLS = (
    "ip",
    "nft",
    "tcpreplay",
    "trafgen",
    "tcpdump",
    "taskset",
    "ethtool",
    "capinfos",
)
KDDI_TOOLS = {"tapdeck record", "tapdeck export", "tapdeck export --no-gso", "tcpdump"}
SWEEP_SETUPS = {
    (m, f, t)
    for m, f in ((1, False), (1, True), (2, False))
    for t in ("tapdeck record", "tcpdump")
}


def missing_reason() -> str | None:
    if os.geteuid() != 0:
        return "the benchmark needs root (network namespaces, veth pairs, nftables)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return (
            f"the benchmark needs {', '.join(missing)} (scripts/setup.sh installs them)"
        )
    return None


pytestmark = pytest.mark.skipif(
    missing_reason() is not None, reason=missing_reason() or ""
)


def check_row(r: dict) -> None:
    assert r["offered"] > 0, r
    assert r["offered"] >= r["stored"] >= 0, r
    assert r["offered"] >= r["received"] >= r["stored"], r
    assert r["ratio"] == pytest.approx(r["stored"] / r["offered"])
    for name, p in r["processes"].items():
        assert p["returncode"] == 0, (name, p)
        assert p["cpu_total_s"] > 0 and p["cpu_s"] >= 0 and p["cpu_window_s"] >= 0, (
            name,
            p,
        )
    assert r["capture_cpu_s"] >= 0 and r["capture_cpu_pct"] >= 0
    for cpu in ("cpu0", "cpu1"):
        assert r["kernel"][cpu]["softirq"] >= 0 and f"softirq_pct_{cpu}" in r


def check_accounting(r: dict) -> None:
    """What each tool says it stored is what was read back from its output."""
    for name, p in r["processes"].items():
        d = p["details"]
        if p["kind"] == "record":
            assert d["tool_stored"] == p["stored"], (name, d)
        elif p["kind"] == "collect":
            assert (
                d["packets"] == p["stored"] and d["malformed"] == d["no_template"] == 0
            ), d
        elif p["kind"] == "export":
            assert d["final"] and d["observed"] == d["sent"] + d["not_sent"], d


def test_quick_run_writes_consistent_results(tapdeck_bin, tmp_path):
    env = {**os.environ, "TAPDECK_BIN": str(tapdeck_bin)}
    cmd = [
        sys.executable,
        REPO / "bench" / "multihost.py",
        "--quick",
        "--work",
        tmp_path / "work",
        "--results",
        tmp_path / "results",
    ]
    p = subprocess.run(
        [str(c) for c in cmd],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    [out] = (tmp_path / "results").glob("multihost-*.json")
    res = json.loads(out.read_text())
    assert res["failed"] == [] and not res.get("interrupted"), res["failed"]

    kddi = [r for r in res["rows"] if r["experiment"] == "kddi"]
    sweep = [r for r in res["rows"] if r["experiment"] == "sweep"]
    assert {r["tool"] for r in kddi} == KDDI_TOOLS and len(kddi) == len(KDDI_TOOLS)
    assert {(r["monitors"], r["filter"], r["tool"]) for r in sweep} == SWEEP_SETUPS
    assert len(sweep) == len(SWEEP_SETUPS)
    for r in res["rows"]:
        check_row(r)
        check_accounting(r)
    for tool in ("tapdeck export", "tapdeck export --no-gso"):
        export = next(r for r in kddi if r["tool"] == tool)
        assert export["collector_cpu_s"] >= 0 and "tapdeck collect" in export["processes"]
    assert res["filter"]["instructions"] >= 40
    assert res["filter"]["passed"] == res["filter"]["frames"] > 0
    assert res["merge_check"]["equal"], res["merge_check"]
    assert (len(res["kddi"]), len(res["sweep"])) == (len(KDDI_TOOLS), 6)

    md = out.with_suffix(".md").read_text()
    assert "Two cores measure contention, not scaling" in md
    assert f"{res['filter']['instructions']} BPF instructions" in md
    assert "tdmh" not in run(["ip", "netns", "list"]).out
