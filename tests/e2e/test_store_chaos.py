"""Chaos (issue 15): 20 `kill -9` at random moments, startup included, into one store on a
loop-mounted 256 MiB ext4 filesystem, rotating every 1 MiB while retention (--max-bytes
48 MiB, --min-keep 0) deletes files all the time. After each kill: every completed file
verifies, no completed file disappears unless retention logged its deletion, and the
store's files (partial ones too) stay under the limit plus what one run may hold in
flight. At the end a clean run finalizes what the last crash left, and the extract of the
whole store is in time order and holds what `info` counts.

Root only (mount). Bounded: each run lives at most a few seconds; no network (synthetic).
"""

from __future__ import annotations

import random
import re
import time

import pytest
from conftest import data_files, loop_ext4, partial_files, read_packets

MiB = 1 << 20
MAX_BYTES = 48 * MiB
# A run may hold beyond --max-bytes, at most, what it appended to its open file and has
# not yet counted (one chunk being written) plus one file's sidecar: 2 MiB is generous.
SLACK = 2 * MiB
KILLS = 20


@pytest.fixture
def ext4(tmp_path, request):
    return loop_ext4(tmp_path, request, 256 * MiB)


def store_bytes(store) -> int:
    return sum(p.stat().st_size for p in store.iterdir()
               if p.is_file() and re.search(r"\.pcapng(\.lz4)?(\.idx)?(\.partial)?$", p.name))


def test_twenty_kills_with_retention_churning(tapdeck, procs, ext4):
    store = ext4 / "S"
    args = ["record", "--store", store, "--synthetic", "1514", "--rate", "20000",
            "--codec", "lz4", "--staging", "32MiB", "--chunk-size", "512KiB",
            "--rotate-size", "1MiB", "--max-bytes", "48MiB", "--min-keep", "0",
            "--stats-interval", "0.2", "--flush-interval", "0.2", "--log", "debug"]
    rng = random.Random(20261125)
    verified: set = set()
    complete: set = set()
    deleted_total = 0
    largest = 0
    for i in range(KILLS):
        p = tapdeck.popen(*args)
        procs.append(p)
        # Anywhere from during start-up recovery to a few seconds in.
        time.sleep(rng.uniform(0.0, 2.5))
        p.kill()
        assert p.wait(timeout=10) == -9, f"kill {i}: the recorder had exited by itself"
        _, err = p.communicate()
        err = err.decode(errors="replace")
        assert "panicked" not in err, err[-3000:]
        # Each deleted file is logged at debug level (info has a summary a minute), before
        # its unlink: a file named here may still be there if the kill fell between.
        deleted = set(re.findall(r"retention deletes (\S+) \(", err))
        deleted_total += len(deleted)
        now = set(data_files(store))
        vanished = {f for f in complete - now if str(f) not in deleted}
        assert not vanished, f"kill {i}: completed files lost: {sorted(vanished)}"
        for f in sorted(now - verified):
            v = tapdeck.verify(f)
            assert v.returncode == 0, f"kill {i}: {v.describe()}"
            verified.add(f)
        complete = now
        size = store_bytes(store)
        largest = max(largest, size)
        assert size <= MAX_BYTES + SLACK, f"kill {i}: the store holds {size} bytes"
        assert len(partial_files(store)) <= 1, f"kill {i}: {partial_files(store)}"

    r = tapdeck.record(store, *args[3:], "--duration", "0.5")
    assert r.returncode == 0, r.describe()
    assert partial_files(store) == []
    assert store_bytes(store) <= MAX_BYTES + SLACK
    assert deleted_total > 0, "retention never deleted anything: the test did not churn"
    v = tapdeck.verify(store)
    assert v.returncode == 0, v.describe()
    out = ext4 / "all.pcapng"
    x = tapdeck.extract(store, out)
    assert x.returncode == 0, x.describe()
    ts = [pkt.ts_ns for pkt in read_packets(out)]
    assert len(ts) == tapdeck.info(store)["totals"]["packets"] > 0
    back = sum(1 for a, b in zip(ts, ts[1:]) if b < a)
    print(f"chaos: {KILLS} kills, {len(verified)} completed files verified, {deleted_total} "
          f"deleted by retention, largest store {largest / MiB:.1f} MiB (limit 48), "
          f"{len(ts)} packets extracted from {len(data_files(store))} files")
    assert back == 0, f"{back} backward time steps across {len(data_files(store))} files"
