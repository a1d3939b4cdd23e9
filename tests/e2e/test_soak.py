"""The soak harness works and its checks are real: `bench/soak.py --duration 60` runs
`tapdeck serve` on a veth end in a namespace of its own under steady traffic, with
retention churning, and passes. Asserted on what happened (files written and deleted,
samples taken, every document balanced), never on a rate: the machine may be busy."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, run

DURATION = 60
TOOLS = ("ip", "ethtool")


def missing_reason() -> str | None:
    if os.geteuid() != 0:
        return "the soak needs root (network namespace, veth pair, live capture)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"the soak needs {', '.join(missing)}"
    return None


pytestmark = pytest.mark.skipif(
    missing_reason() is not None, reason=missing_reason() or ""
)


def test_soak_one_minute(tapdeck_bin, tmp_path):
    env = {**os.environ, "TAPDECK_BIN": str(tapdeck_bin)}
    out, work = tmp_path / "results", tmp_path / "work"
    cmd = [sys.executable, REPO / "bench" / "soak.py", "--duration", str(DURATION)]
    cmd += ["--out", out, "--work", work]
    p = subprocess.run(
        [str(c) for c in cmd],
        check=False,
        capture_output=True,
        text=True,
        timeout=DURATION + 50,
        env=env,
    )
    [result] = out.glob("soak-*.json.gz")
    with gzip.open(result, "rt") as f:
        res = json.load(f)
    failed = [c for c in res.get("checks", []) if not c["ok"]]
    assert p.returncode == 0, (failed, res.get("error"), p.stderr[-3000:])
    assert res["passed"] and not failed and "error" not in res
    s = res["summary"]

    # The run did what a soak is for: traffic for the whole duration, files rotated at
    # 1 MiB and deleted by max-bytes, the store in bounds.
    assert s["generator_s"] >= DURATION - 1
    assert s["sent"] > 0 and s["seen"] == s["interface_rx_packets"]
    assert s["files_written"] >= 20, s["files_written"]
    assert s["files_deleted"] > 0, s["files_deleted"]
    assert s["store_bytes_max"] <= res["params"]["max_bytes"] + 2 * (1 << 20)

    # Sampled once a second, and every sample checked the balance in its own document.
    samples = res["samples"]
    assert len(samples) >= 50 and s["samples"] == len(samples)
    assert all("balance" in x and x["balance"] == 0 and x["rows_ok"] for x in samples)
    assert all(x["rss_kb"] > 0 and x["fds"] > 0 and x["cpu_s"] >= 0 for x in samples)
    assert samples[-1]["seen"] > samples[0]["seen"]
    assert len(res["scrapes"]) >= 10 and all(x["balance"] == 0 for x in res["scrapes"])
    assert res["request_failures"] == []

    # The end: SIGTERM drained to exit 0, nothing in flight, every file verifies, and
    # the files left are what was written minus what retention deleted.
    assert res["serve_exit"]["returncode"] == 0
    final = res["final_stats"]
    assert final["final"] and final["totals"]["in_flight"] == 0
    t = final["totals"]
    assert t["seen"] == t["stored"] + sum(t["dropped"].values())
    assert res["verify"]["returncode"] == 0
    assert res["store_files"] == final["files_written"] - final["files_deleted"]
    names = {c["name"] for c in res["checks"]}
    assert any(n.startswith("VmRSS grows") for n in names)
    assert "open fds flat after warm-up" in names

    md = result.with_name(result.name.removesuffix(".json.gz") + ".md").read_text()
    assert "Verdict: **passed**" in md and "| open fds" in md
    if res.get("plot"):
        assert (out / res["plot"]).stat().st_size > 0

    # Nothing left behind: namespace, veth, processes, scratch.
    assert res["netns"] not in run(["ip", "netns", "list"]).out
    links = run(["ip", "-br", "link"]).out
    assert not any(name in links for name in res["links"]), links
    assert not os.path.exists(f"/proc/{res['serve_pid']}")
    assert not work.exists() or not any(work.iterdir())
