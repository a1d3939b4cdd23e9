"""recency: exact LRU hit ratios against a brute-force LRU simulation."""

import random
from collections import OrderedDict

import pytest
from datasetbuilder import T0, DatasetBuilder

from tapdeck_analyze import recency
from tapdeck_analyze.recency import BLOCK, blocks_of, recency_distribution


def simulate_lru(accesses, capacity):
    """Plain LRU cache of `capacity` blocks; returns (read hits, bytes of read hits)."""
    cache = OrderedDict()
    hits = hit_bytes = 0
    for op, fh, offset, count in accesses:
        blocks = [(fh, b) for b in blocks_of(offset, count)]
        all_hit = True
        for key in blocks:
            if key in cache:
                cache.move_to_end(key)
            else:
                all_hit = False
                cache[key] = True
                if len(cache) > capacity:
                    cache.popitem(last=False)
        if op == "READ" and all_hit:
            hits += 1
            hit_bytes += count
    return hits, hit_bytes


def test_hit_ratios_equal_lru_simulation(tmp_path):
    rng = random.Random(11)
    b = DatasetBuilder()
    accesses = []
    t = T0
    for _ in range(900):
        op = rng.choice(["READ", "READ", "READ", "WRITE"])
        fh = rng.choice(["f1", "f2", "f3", "f4"])
        offset = rng.randint(0, 300) * 1024
        count = rng.choice([1, 4096, 8192, 20000, 65536])
        accesses.append((op, fh, offset, count))
        t += 1000
        b.nfs(t, t + 500, op=op, fh=fh, offset=offset, count=count)
    rows = recency(b.write(tmp_path / "ds")).to_pylist()
    working_set = len({(fh, x) for _, fh, o, c in accesses for x in blocks_of(o, c)})
    assert rows[-1]["cache_blocks"] == working_set
    assert rows[0]["cache_bytes"] == 1 << 20
    for row in rows:
        hits, hit_bytes = simulate_lru(accesses, row["cache_blocks"])
        assert (row["hit_reads"], row["hit_bytes"]) == (hits, hit_bytes), row
    # smaller caches than 1 MiB are not reported, but the computation holds for them too
    from tapdeck_analyze.recency import read_stack_distances

    dists = read_stack_distances([(0, fh, op, o, c) for op, fh, o, c in accesses])
    for cap in (1, 2, 5, 17, 64):
        assert sum(1 for _, d in dists if d <= cap) == simulate_lru(accesses, cap)[0]


def test_recency_distribution(tmp_path):
    b = DatasetBuilder()
    b.nfs(T0, T0 + 10, op="WRITE", fh="f", offset=0, count=BLOCK)
    b.nfs(T0 + 2_000_000, T0 + 2_000_010, op="READ", fh="f", offset=0, count=2 * BLOCK)
    rows = recency_distribution(b.write(tmp_path / "ds")).to_pylist()
    file_rows = [r for r in rows if r["level"] == "file"]
    # one read, 2 ms after the write to the same file
    assert [(r["lower_s"], r["reads"]) for r in file_rows] == [(None, 0), (10**-3, 1)]
    block_rows = [r for r in rows if r["level"] == "block"]
    # block 0 was written 2 ms before, block 1 never accessed
    assert [(r["lower_s"], r["reads"]) for r in block_rows] == [(None, 1), (10**-3, 1)]
    assert block_rows[-1]["cumulative_fraction"] == pytest.approx(1)
