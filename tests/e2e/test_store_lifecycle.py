"""A store across runs, crashes and readers (issue 15), recorder side.

(a) While a recorder runs, its store is locked: a second recorder is refused with one line
    naming the holder, `verify --repair` refuses to touch the live file (and the recording
    survives it), `verify` and `info` call the open file "being written", not incomplete.
(b) Two clean runs and five kill -9 restarts into one store: every restart finalizes what
    the crash left before it records (and says so), no file name or (stream, sequence) is
    ever reused, no completed file is lost, and the extract of the whole store is in time
    order.

Synthetic sources only (no network). Waits are on stats records and files, with deadlines.
"""

from __future__ import annotations

import random
import signal

from conftest import (
    data_files,
    dropped_total,
    finish,
    partial_files,
    read_packets,
    stats_records,
    stored_so_far,
    wait_for,
)
from conftest import (
    start_recording as start,
)


def seq_of(path) -> tuple[int, int]:
    """(stream, sequence) from a data file name `TIME-sSS-NNNNNN.ext`."""
    _, s, n = path.name.rsplit("-", 2)
    return int(s[1:]), int(n.split(".")[0])


def test_a_recording_store_is_locked_and_its_open_file_is_live(tapdeck, procs, tmp_path):
    store = tmp_path / "S"
    p = start(tapdeck, procs, store, "--synthetic", "1514", "--rate", "5000",
              "--rotate-size", "64MiB")
    wait_for(lambda: stored_so_far(store) > 2000 and partial_files(store), 20,
             "packets stored and a file open")
    live = partial_files(store)[0]

    second = tapdeck.record(store, "--synthetic", "64", "--duration", "1")
    assert second.returncode != 0, "a second recorder was let into a locked store"
    assert f"is being recorded by pid {p.pid} (" in second.stderr, second.describe()
    assert "choose another store" in second.stderr, second.describe()

    r = tapdeck.verify(store, repair=True)
    assert r.returncode == 1 and "not repairing live files" in r.stderr, r.describe()
    r = tapdeck.verify(live, repair=True)
    assert r.returncode == 1 and "not repairing live files" in r.stderr, r.describe()
    assert p.poll() is None, "the recording did not survive verify --repair"
    assert live.exists(), "verify --repair touched the live file"

    # Live reads: what was stored a few flush intervals ago is in the extract already.
    rec0 = stats_records(store)[-1]
    wait_for(lambda: stats_records(store)[-1]["elapsed_s"] > rec0["elapsed_s"] + 1.0, 20,
             "a stats record a second (five flush intervals) later")
    out = tmp_path / "live.pcapng"
    x = tapdeck.extract(store, out)
    assert x.returncode == 0, x.describe()
    got = read_packets(out)
    assert len(got) >= rec0["totals"]["stored"] > 0, (len(got), rec0["totals"])
    # ... and no more than the writer counted (a stats record written after the extract).
    rec1 = stats_records(store)[-1]
    later = wait_for(lambda: [r for r in stats_records(store)
                              if r["elapsed_s"] > rec1["elapsed_s"] + 0.4], 20,
                     "a stats record written after the extract")
    assert len(got) <= later[0]["totals"]["stored"], (len(got), later[0]["totals"])
    assert [pk.ts_ns for pk in got] == sorted(pk.ts_ns for pk in got)
    assert p.poll() is None and live.exists(), "reading disturbed the recording"

    v = tapdeck.verify(store)
    assert v.returncode == 0, v.describe()
    assert "being written by pid" in v.out and "incomplete" not in v.stderr, v.describe()
    info = tapdeck.info(store)
    assert [e["path"] for e in info["being_written"]] == [str(live)], info
    assert info["incomplete"] == [], info

    p.send_signal(signal.SIGINT)
    rc, _, err = finish(p, timeout=30)
    assert rc == 0, err
    assert partial_files(store) == []
    assert tapdeck.verify(store).returncode == 0
    # Every stats record balances with what is in flight; the last has nothing in flight.
    recs = stats_records(store)
    for rec in recs:
        t = rec["totals"]
        assert t["seen"] == t["stored"] + dropped_total(rec) + t["in_flight"], rec
    assert recs[-1]["final"] and recs[-1]["totals"]["in_flight"] == 0, recs[-1]


def test_runs_and_crashes_continue_the_store_in_time_order(tapdeck, procs, tmp_path):
    store = tmp_path / "S"
    args = ["--synthetic", "64", "--rate", "40000", "--rotate-size", "1MiB"]
    for _ in range(2):
        r = tapdeck.record(store, *args, "--duration", "1.5")
        assert r.returncode == 0, r.describe()
    rng = random.Random(15)
    complete = set(data_files(store))
    for i in range(5):
        earlier = len(stats_records(store))  # stats.jsonl is appended to by every run
        p = start(tapdeck, procs, store, *args)
        # Killed at a random moment after this run stored something of its own.
        target = rng.randint(2_000, 60_000)

        def this_run_stored():
            recs = stats_records(store)[earlier:]
            return recs[-1]["totals"]["stored"] if recs else 0

        wait_for(lambda: p.poll() is not None or this_run_stored() > target,  # noqa: B023
                 30, f"run {i}: {target} packets stored")
        assert p.poll() is None, finish(p)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        _, err = p.communicate()
        if i > 0:
            # This run began by finalizing what the previous crash left.
            assert b"left incomplete by an earlier run; finalized" in err or \
                b"left empty by an earlier run; removed" in err, err.decode()[-2000:]
        now = set(data_files(store))
        assert complete <= now, f"completed files lost: {complete - now}"
        complete = now
    r = tapdeck.record(store, *args, "--duration", "0.5")
    assert r.returncode == 0, r.describe()
    assert "left incomplete by an earlier run; finalized" in r.stderr or \
        "left empty by an earlier run; removed" in r.stderr, r.describe()
    assert partial_files(store) == []
    files = data_files(store)
    assert complete <= set(files)
    keys = [seq_of(f) for f in files]
    assert len(set(keys)) == len(keys), f"a (stream, sequence) was reused: {sorted(keys)}"
    v = tapdeck.verify(store)
    assert v.returncode == 0, v.describe()

    out = tmp_path / "all.pcapng"
    x = tapdeck.extract(store, out)
    assert x.returncode == 0, x.describe()
    ts = [p.ts_ns for p in read_packets(out)]
    info = tapdeck.info(store)
    assert len(ts) == info["totals"]["packets"] > 0
    back = sum(1 for a, b in zip(ts, ts[1:]) if b < a)
    assert back == 0, f"{back} backward time steps in the extract of {len(files)} files"


def test_info_counts_each_runs_drops_once(tapdeck, tmp_path):
    """Files carry their run's cumulative counters; `info` tells runs apart by the run
    start each file records, so two runs' drops add up to what their stats say, even when
    the second run's first file already counts more drops than the first run's last (which
    the old heuristic, "a smaller total means a restart", took for the same run)."""
    store = tmp_path / "S"
    common = ["--synthetic", "1514", "--rate", "40000", "--codec", "none",
              "--staging", "32MiB", "--chunk-size", "1MiB", "--rotate-size", "2MiB"]
    # Run A: over its --max-bytes after 6 MiB; the rest is refused (files are too young
    # for retention to delete) and counted.
    a = tapdeck.record(store, *common, "--count", "20000", "--max-bytes", "6MiB")
    assert a.returncode == 0, a.describe()
    # Every drop is logged within a second, by cause (alerts without a metrics system).
    assert "packets (write_error) in the last" in a.stderr, a.describe()
    held = sum(f.stat().st_size for f in data_files(store))
    # Run B: no room for a single chunk more; all 40,000 are refused, in its first file,
    # and a run that could store nothing exits 1.
    b = tapdeck.record(store, *common, "--count", "40000", "--max-bytes", str(held + 512 * 1024))
    assert b.returncode == 1 and "no packet could be written" in b.stderr, b.describe()
    finals = [r for r in stats_records(store) if r.get("final")]
    assert len(finals) == 2
    drops = [dropped_total(r) for r in finals]
    assert drops[1] > drops[0] > 0, drops
    assert tapdeck.info(store)["totals"]["drops"] == sum(drops)
