"""DuckDB and Spark give the same tables for every analysis but recency (same SQL, transpiled
by sqlglot). Spark takes about a minute to start here, so this runs only with TAPDECK_SPARK=1.
TAPDECK_SPARK_DATASET=DIR compares on that dataset (e.g. a real `tapdeck convert` output)
instead of the hand-made fixture."""

import os

import pytest
from conftest import small_nfs
from datasetbuilder import DatasetBuilder

from tapdeck_analyze import open_dataset
from tapdeck_analyze.analyses import ANALYSES

pytestmark = pytest.mark.skipif(
    not os.environ.get("TAPDECK_SPARK"), reason="set TAPDECK_SPARK=1 to compare with Spark"
)


def test_duckdb_and_spark_agree(tmp_path):
    pytest.importorskip("pyspark")
    path = os.environ.get("TAPDECK_SPARK_DATASET")
    if not path:
        b = DatasetBuilder()
        small_nfs(b)
        path = b.write(tmp_path / "ds", rows_per_group=4)
    duck, spark = open_dataset(path), open_dataset(path, engine="spark")
    for analysis in ANALYSES.values():
        if analysis.name == "recency":
            continue
        for name, fn in {analysis.name: analysis.main, **analysis.parts}.items():
            d, s = fn(duck).to_pylist(), fn(spark).to_pylist()
            assert len(d) == len(s), (analysis.name, name)
            for rd, rs in zip(d, s, strict=True):
                assert rd.keys() == rs.keys(), (analysis.name, name)
                for k in rd:
                    assert same(rd[k], rs[k]), (analysis.name, name, k, rd, rs)


def same(a, b) -> bool:
    """Identical, floats within 1e-9 relative (the issue's definition of the same results)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))
    return a == b
