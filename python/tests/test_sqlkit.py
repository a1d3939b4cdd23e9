"""The SQL building blocks agree with their definitions."""

import math
import random

import duckdb

from tapdeck_analyze.sqlkit import PERCENTILES, nearest_rank, percentile_disc


def test_percentile_disc_is_the_nearest_rank_for_every_count():
    """quantile_disc picks the ceil(p·n)-th smallest value (nearest rank) for every n up to
    400 and a few large ones, with repeated values too, and agrees with `nearest_rank`."""
    rng = random.Random(3)
    con = duckdb.connect()
    for n in [*range(1, 401), 1000, 9999, 10001]:
        values = [rng.randint(0, n // 3 + 1) for _ in range(n)]
        con.execute("CREATE OR REPLACE TABLE t AS SELECT unnest(?) AS v", [values])
        ordered = sorted(values)
        for name, parts in PERCENTILES.items():
            p = parts / 10000
            want = ordered[max(1, math.ceil(parts * n / 10000)) - 1]
            got = con.execute(f"SELECT {percentile_disc('v', p)} FROM t").fetchone()[0]
            assert got == want, (n, name)
            (ranked,) = con.execute(nearest_rank("t", [], "v", {name: parts})).fetchone()
            assert ranked == want, (n, name)
