"""DuckDB and Spark give the same tables, with the same Arrow schemas (column names, types and
nullability), for every analysis: the same SQL, transpiled by sqlglot. Runs on the hand-made
fixture, on `multi_client` (several clients and servers, one xid on several connections,
NULL attributes, ties), on `v2_beside_v3_v4` (NFSv2 rows among v3 and v4) and on `file_workload` (the
file analyses' mtimes, streams, tied instants and a WAN what-if), all four in one dataset (each
alone with TAPDECK_SPARK_EACH=1), and with TAPDECK_SPARK_DATASET=DIR on that dataset too (e.g. a real
`tapdeck convert` output; ../tests/e2e/test_analyze_engines.py does it on the NFS rig's).

Needs pyspark >= 4.0 and Java 17; skipped without pyspark, or with TAPDECK_SPARK=0. Spark
takes about 20 s to start here, the whole file about 100 s."""

import os

import pytest
from conftest import file_workload, multi_client, small_nfs, v2_beside_v3_v4
from datasetbuilder import DatasetBuilder

from tapdeck_analyze import open_dataset
from tapdeck_analyze.analyses import engine_differences

# Spark plans for big data: 200 shuffle partitions and Java code generated (and compiled) for
# every query. On these few rows that overhead was the test's time; without it the file ran in
# 103 s instead of 154. The answers do not depend on either (the interpreted operators are
# Spark's reference). ../tests/e2e/test_analyze_engines.py keeps Spark's defaults. Read when
# the session starts, so it must be set before the first test opens one.
os.environ.setdefault(
    "PYSPARK_SUBMIT_ARGS",
    "--conf spark.sql.shuffle.partitions=2 --conf spark.sql.codegen.wholeStage=false"
    " --conf spark.sql.codegen.factoryMode=NO_CODEGEN pyspark-shell",
)

pytestmark = pytest.mark.skipif(
    os.environ.get("TAPDECK_SPARK") == "0", reason="TAPDECK_SPARK=0: Spark comparison skipped"
)

FIXTURES = {
    "small_nfs": small_nfs,
    "multi_client": multi_client,
    "v2": v2_beside_v3_v4,
    "files": file_workload,
}


def all_fixtures(b: DatasetBuilder) -> None:
    """Every fixture's rows in one dataset: the engines must agree on it as on each alone
    (agreement, not the fixtures' expected answers, is what this file checks). Spark's cost
    is per query, not per row: one dataset takes a quarter of the four's time."""
    for fixture in FIXTURES.values():
        fixture(b)


# By default the four fixtures run as one dataset (about 70 s instead of 300 s of the
# suite's time); TAPDECK_SPARK_EACH=1 runs each alone too, to tell which one disagrees.
DATASETS = (
    ["all"]
    + (list(FIXTURES) if os.environ.get("TAPDECK_SPARK_EACH") == "1" else [])
    + (["env"] if os.environ.get("TAPDECK_SPARK_DATASET") else [])
)
FIXTURES_AND_ALL = {**FIXTURES, "all": all_fixtures}


@pytest.fixture(scope="module")
def engines():
    """(duckdb, spark) datasets by path; one Spark session serves all (getOrCreate)."""
    pytest.importorskip("pyspark", minversion="4.0")
    opened = {}

    def open_both(path):
        if path not in opened:
            opened[path] = (open_dataset(path), open_dataset(path, engine="spark"))
        return opened[path]

    return open_both


@pytest.mark.parametrize("dataset", DATASETS)
def test_duckdb_and_spark_agree(dataset, engines, tmp_path):
    if dataset == "env":
        path = os.environ["TAPDECK_SPARK_DATASET"]
    else:
        b = DatasetBuilder()
        FIXTURES_AND_ALL[dataset](b)
        path = b.write(tmp_path / "ds", rows_per_group=4)
    duck, spark = engines(path)
    assert_engines_agree(duck, spark)


def assert_engines_agree(duck, spark):
    diffs, _ = engine_differences(duck, spark)
    assert not diffs, "\n".join(diffs)
