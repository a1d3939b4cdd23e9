"""A recorder that shares its CPUs: busy loops at nice 0 beside it, the compressors at nice 19.

On a machine whose CPUs others take, the compressors get almost none; the default ladder
must then store at least what plain writing (`--codec none`) stores under the same hog,
not less: the writer takes chunks the compressors are late with and writes them raw
(`late` in the stats), instead of waiting behind them while the staging pool fills.

Both runs go side by side in time (ladder, raw, ladder, raw), each under the same hog of
one busy loop per CPU; the verdict is on packet counts from the final stats records. The
margin, 0.05 on the means of the two runs, is wider than the benchmark's target (0.02, on
medians of three): in a full CI run one ladder run stored 0.967 against raw's 1.0, its first
chunks waiting out their deadlines before the controller learnt that the compressor starves. Before the writer took
late chunks at all, the ladder stored 0.40 of what raw stored here.
"""

from __future__ import annotations

import os
import signal
import subprocess



from conftest import final_stats

# 1514-byte frames at 150,000 a second (227 MB/s) onto a disk throttled to 400 MB/s: raw
# keeps up, and a starved compressor holding the 32 MiB pool's chunks would not.
RATE = 150_000
SECONDS = 5
MARGIN = 0.05


def _hogs(n: int) -> list[subprocess.Popen]:
    # Pure CPU loops at nice 0, each in a process group of its own that the test kills whole
    # (killing `timeout` alone would leave its shell spinning); `timeout` bounds them should
    # the test die first.
    return [subprocess.Popen(["timeout", "-s", "KILL", "120", "sh", "-c", "while :; do :; done"],
                             start_new_session=True)
            for _ in range(n)]


def _record(tapdeck, store, *extra):
    r = tapdeck.record(store, "--synthetic", "1514", "--rate", str(RATE), "--duration",
                       str(SECONDS), "--staging", "32MiB", "--bench-disk-limit", "400MB",
                       "--stats-interval", "1", "--log", "warn", *extra, timeout=120)
    assert r.returncode == 0, r.describe()
    last = final_stats(store)
    t = last["totals"]
    assert t["seen"] == t["stored"] + sum(t["dropped"].values()), "the counts must balance"
    return t["stored"] / t["seen"], last


def test_the_ladder_stores_what_raw_stores_when_others_take_the_cpu(tapdeck, tmp_path):
    hogs = _hogs(os.cpu_count() or 2)
    try:
        runs = {"ladder": [], "raw": []}
        for i in range(2):
            for name, extra in (("ladder", ()), ("raw", ("--codec", "none"))):
                store = tmp_path / f"{name}{i}"
                runs[name].append(_record(tapdeck, store, *extra))
    finally:
        for h in hogs:
            os.killpg(h.pid, signal.SIGKILL)
            h.wait()
    ladder = [f for f, _ in runs["ladder"]]
    raw = [f for f, _ in runs["raw"]]
    reasons = [set(v) for _, last in runs["ladder"] for v in last["ladder"].values()]
    # A failure means the ladder lost packets that plain writing kept: chunks waited for
    # starved compressors while the disk idled. Means of the two runs each, so that one
    # unlucky run (a scheduler's whim in its first second) does not decide alone.
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert mean(ladder) >= mean(raw) - MARGIN, f"ladder stored {ladder}, raw {raw}; reasons {reasons}"
