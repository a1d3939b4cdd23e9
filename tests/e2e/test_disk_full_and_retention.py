"""A full disk, and retention (--max-bytes, --min-free), on a 24 MiB tmpfs.

Needs root (to mount); skipped otherwise. The tmpfs is mounted inside tmp_path and
unmounted by a finalizer. tmpfs refuses O_DIRECT, so the recorder writes buffered there.
"""

from __future__ import annotations

import os
import subprocess

import pytest

import signal
from pathlib import Path

from conftest import (
    data_files,
    dropped_total,
    final_stats,
    finish,
    partial_files,
    run,
    stats_records,
    wait_for,
)

MiB = 1 << 20
TMPFS_SIZE = 24 * MiB
# ~60 MiB of capture data, offered at a rate lz4 keeps up with on two cores.
SIXTY_MIB = ["--synthetic", "1514", "--count", "40000", "--rate", "40000"]
BASE = ["--staging", "32MiB", "--chunk-size", "1MiB", "--log", "error"]
COMMON = ["--codec", "lz4", *BASE]


@pytest.fixture
def tmpfs(tmp_path, request):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", mnt])
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")

    def unmount():
        if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)

    request.addfinalizer(unmount)
    st = os.statvfs(mnt)
    assert st.f_blocks * st.f_frsize == TMPFS_SIZE
    return mnt


def free_bytes(path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def seq(p) -> int:
    return int(p.name.split("-")[2].split(".")[0])


def verify_each(tapdeck, files):
    for f in files:
        v = tapdeck.verify(f)
        assert v.returncode == 0, v.describe()


def disk_errors(stderr: str) -> list[str]:
    """The log lines that open a data directory's failure episode."""
    return [line for line in stderr.splitlines() if "trying it again every" in line]


def test_disk_full_without_retention(tapdeck, tmpfs, tmp_path):
    """Data on the full tmpfs, the store (manifest, stats) elsewhere: the recorder keeps
    capturing to the end, counts what it could not write as write errors, logs the failure
    once, exits 0 and says what was lost; every complete file verifies; the accounting
    balances."""
    store, data = tmp_path / "S", tmpfs / "d"
    r = tapdeck.record(store, "--dir", data, *SIXTY_MIB, *COMMON, "--rotate-size", "4MiB")
    assert r.returncode == 0, r.describe()
    assert len(disk_errors(r.stderr)) == 1, r.describe()
    assert "lost to the disk:" in r.stderr, r.describe()
    files = data_files(data)
    assert len(files) >= 3
    verify_each(tapdeck, files)
    last = final_stats(store)
    t = last["totals"]
    assert t["seen"] == 40000, "capture stopped at the first write error"
    assert t["seen"] == t["stored"] + dropped_total(last), t
    assert t["dropped"]["write_error"] > 0, t
    # What the complete files hold is what was counted as stored, less the complete chunks
    # of the partial file the disk could not finalize (the next run finalizes it).
    info = tapdeck.info(store)
    assert info["totals"]["packets"] <= t["stored"]
    assert info["totals"]["packets"] == sum(f["packets"] for f in info["files"])
    assert len(partial_files(data)) <= 1


def test_disk_full_error_names_the_cause(tapdeck, tmpfs, tmp_path):
    store, data = tmp_path / "S", tmpfs / "d"
    r = tapdeck.record(store, "--dir", data, *SIXTY_MIB, *COMMON, "--rotate-size", "4MiB")
    assert r.returncode == 0, r.describe()
    (line,) = disk_errors(r.stderr)
    assert "No space left on device" in line and str(data) in line, line


def test_disk_full_store_on_the_full_disk(tapdeck, tmpfs):
    """Store and data on the full tmpfs: the error says the disk is full, the run goes on
    to the end and counts its losses; the complete files verify."""
    store = tmpfs / "S"
    r = tapdeck.record(store, *SIXTY_MIB, *COMMON, "--rotate-size", "4MiB")
    assert r.returncode == 0, r.describe()
    (line,) = disk_errors(r.stderr)
    assert "No space left on device" in line, line
    assert "lost to the disk:" in r.stderr, r.describe()
    files = data_files(store)
    assert files
    verify_each(tapdeck, files)


def test_writing_resumes_when_space_returns(tapdeck, procs, tmpfs, tmp_path):
    """A live recording whose disk fills (another file takes the space), then empties: the
    capture never stops, the loss is counted and logged once, writing resumes within the
    retry interval, the file abandoned at the failure is finalized as soon as space is
    back, and the files then hold exactly what the stats say was stored, with the same
    drop counts."""
    store, data = tmp_path / "S", tmpfs / "d"
    data.mkdir()
    filler = tmpfs / "filler"
    with open(filler, "wb") as f:
        f.truncate(0)
        f.write(b"\0" * (free_bytes(tmpfs) - 2 * MiB))
    p = tapdeck.popen("record", "--store", store, "--dir", data, "--synthetic", "1514",
                      "--rate", "5000", "--codec", "none", "--staging", "32MiB", "--chunk-size", "1MiB",
                      "--log", "warn", "--rotate-size", "1MiB",
                      "--stats-interval", "0.2", "--flush-interval", "0.2")
    procs.append(p)

    def last():
        recs = stats_records(store)
        return recs[-1]["totals"] if recs else None

    wait_for(lambda: p.poll() is not None or (last() or {}).get("dropped", {}).get("write_error"),
             30, "write errors once the disk is full")
    assert p.poll() is None, "the recording stopped at a full disk"
    filler.unlink()
    freed_at = last()["stored"]
    wait_for(lambda: p.poll() is not None or last()["stored"] > freed_at + 5000, 30,
             "5000 more packets stored after space was freed")
    p.send_signal(signal.SIGINT)
    rc, _, err = finish(p, timeout=30)
    assert rc == 0, err
    assert len(disk_errors(err)) == 1, err
    assert "is writable again after" in err, err
    assert partial_files(data) == [], "the abandoned file was not finalized when space returned"
    files = data_files(data)
    verify_each(tapdeck, files)
    fin = final_stats(store)
    t = fin["totals"]
    assert t["seen"] == t["stored"] + dropped_total(fin), t
    assert t["dropped"]["write_error"] > 0, t
    info = tapdeck.info(store)
    assert info["totals"]["packets"] == t["stored"], (info["totals"], t)
    assert info["totals"]["drops"] == dropped_total(fin), (info["totals"], t)


def check_retention(tapdeck, store, r):
    assert r.returncode == 0, r.describe()
    last = final_stats(store)
    t = last["totals"]
    assert t["seen"] == 40000
    assert t["seen"] == t["stored"] + dropped_total(last), t
    assert t["dropped"]["write_error"] == 0, t
    assert t["staged_bytes"] > 50 * MiB, "the test did not record ~60 MiB"
    assert last["files_deleted"] > 0, last
    files = data_files(store)
    assert partial_files(store) == []
    assert len(files) == last["files_written"] - last["files_deleted"]
    verify_each(tapdeck, files)
    # The oldest went: what remains is the newest files, in an unbroken run.
    seqs = [seq(f) for f in files]
    assert seqs == list(range(last["files_written"] - len(files) + 1, last["files_written"] + 1)), seqs
    return files, last


def test_max_bytes(tapdeck, tmpfs):
    store = tmpfs / "S"
    r = tapdeck.record(store, *SIXTY_MIB, *COMMON, "--rotate-size", "2MiB", "--max-bytes", "12MiB",
                       "--min-keep", "0")
    files, last = check_retention(tapdeck, store, r)
    size = sum(f.stat().st_size for f in files)
    assert size <= 12 * MiB, size
    assert size > 6 * MiB, f"retention deleted more than needed: {size} bytes left"


def test_min_free(tapdeck, tmpfs):
    store = tmpfs / "S"
    r = tapdeck.record(store, *SIXTY_MIB, *COMMON, "--rotate-size", "2MiB", "--min-free", "8MiB",
                       "--min-keep", "0")
    files, last = check_retention(tapdeck, store, r)
    # Enforced after each file completes; the stats and manifest written afterwards are small.
    assert free_bytes(tmpfs) >= 8 * MiB - 64 * 1024, free_bytes(tmpfs)
    assert free_bytes(tmpfs) < 8 * MiB + 6 * MiB, "retention deleted more than needed"


def test_full_dir_is_skipped_among_several(tapdeck, tmpfs, tmp_path):
    """Two data directories, one on the tiny tmpfs without retention: when it fills, the
    recorder carries on with the other one (a directory that fails is skipped)."""
    store, small, big = tmp_path / "S", tmpfs / "d", tmp_path / "big"
    # Uncompressed, so the 60 MiB surely overflow the tmpfs's half of the round-robin.
    r = tapdeck.record(store, "--dir", small, "--dir", big, "--synthetic", "1514",
                       "--count", "60000", "--rate", "60000", *BASE,
                       "--codec", "none", "--rotate-size", "2MiB")
    assert r.returncode == 0, r.describe()
    last = final_stats(store)
    t = last["totals"]
    assert t["seen"] == t["stored"] + dropped_total(last), t
    assert t["dropped"]["write_error"] == 0, "a chunk was lost instead of going to the other dir"
    on_small, on_big = data_files(small), data_files(big)
    assert on_small and on_big
    verify_each(tapdeck, on_small + on_big)
    info = tapdeck.info(store)
    # The chunks of the abandoned partial file on the full disk are not in a complete file.
    stranded = len(partial_files(small))
    assert stranded <= 1
    if not stranded:
        assert info["totals"]["packets"] == t["stored"]
    # Files after the failure are all on the healthy dir.
    last_small = max(seq(f) for f in on_small)
    after = [f for f in on_big if seq(f) > last_small]
    assert len(after) >= 2, "recording did not continue on the healthy dir"


def test_min_keep_protects_recent_files(tapdeck, tmpfs):
    """With the default --min-keep (10 minutes), a recording over its --max-bytes deletes
    nothing it just wrote: it stops writing, counts the refused packets as write errors,
    says why, and the store stays under its limit."""
    store = tmpfs / "S"
    r = tapdeck.record(store, *SIXTY_MIB, *COMMON, "--rotate-size", "2MiB", "--max-bytes", "12MiB")
    assert r.returncode == 0, r.describe()
    last = final_stats(store)
    assert last["files_deleted"] == 0, last
    assert last["retention_holds"] == 1 and last["retention_refused"] > 0, last
    t = last["totals"]
    assert t["dropped"]["write_error"] > 0 and t["seen"] == t["stored"] + dropped_total(last)
    assert "retention held writing 1 time(s)" in r.stderr, r.describe()
    files = data_files(store)
    assert sum(f.stat().st_size for f in files) <= 12 * MiB
    verify_each(tapdeck, files)


def fill(path, leave: int) -> None:
    """Writes `path` until the filesystem has about `leave` bytes free (as dd would)."""
    with open(path, "wb") as f:
        try:
            while free_bytes(path.parent) > leave:
                f.write(b"\xff" * min(MiB, free_bytes(path.parent) - leave or 1))
                f.flush()
        except OSError:
            pass


def test_a_filled_disk_under_min_free_keeps_the_newest_files(tapdeck, procs, tmpfs):
    """Another program fills the disk during a recording with --min-free: retention deletes
    old files but never the two newest; when that is not enough it stops writing, warns
    once, counts the drops, and resumes when the space comes back."""
    store = tmpfs / "S"
    p = tapdeck.popen("record", "--store", store, "--synthetic", "1514", "--rate", "3000",
                      "--codec", "none", "--staging", "32MiB", "--chunk-size", "1MiB",
                      "--log", "warn", "--rotate-size", "1MiB", "--min-free", "2MiB",
                      "--min-keep", "0", "--stats-interval", "0.2", "--flush-interval", "0.2")
    procs.append(p)
    wait_for(lambda: p.poll() is not None or len(data_files(store)) >= 4, 30, "four files")
    filler = tmpfs / "filler"
    fill(filler, leave=0)

    def last():
        recs = stats_records(store)
        return recs[-1] if recs else {}

    wait_for(lambda: p.poll() is not None or last().get("retention_holds"), 30,
             "retention to hold writing")
    assert p.poll() is None, "the recording stopped"
    # The two newest files that hold packets (rotations while writing is refused make
    # empty files, which are not protected).
    with_packets = [f["path"] for f in tapdeck.info(store)["files"] if f["packets"] > 0]
    newest = [Path(f) for f in with_packets[-2:]]
    assert len(newest) == 2, with_packets
    refused = last()["retention_refused"]
    wait_for(lambda: last()["retention_refused"] > refused, 30, "more refused chunks")
    assert all(f.exists() for f in newest), "retention deleted one of the two newest files"
    filler.unlink()
    stored = last()["totals"]["stored"]
    wait_for(lambda: last()["totals"]["stored"] > stored + 3000, 30, "writing to resume")
    p.send_signal(signal.SIGINT)
    rc, _, err = finish(p, timeout=30)
    assert rc == 0, err
    assert err.count("retention cannot keep --min-free") == 1, err
    assert "writing resumes" in err, err
    fin = final_stats(store)
    t = fin["totals"]
    assert t["seen"] == t["stored"] + dropped_total(fin) and t["dropped"]["write_error"] > 0, t
    assert all(f.exists() for f in newest)
    verify_each(tapdeck, data_files(store))
