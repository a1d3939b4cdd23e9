"""The engines that run the analyses' SQL: DuckDB (embedded, default) and Apache Spark.

Analyses are written once, in DuckDB's dialect, using only constructs that sqlglot transpiles
to Spark SQL; the Spark engine transpiles each query before running it. See README.md.
Both implement `dataset.Engine`, what a Dataset asks of its engine.
"""

import os
import sys

import pyarrow as pa

from . import schema
from .dataset import Dataset, check_file_versions, empty_select, table_files
from .errors import DatasetError


def _sql_list(files) -> str:
    return "[" + ", ".join("'" + str(f).replace("'", "''") + "'" for f in files) + "]"


class DuckDBEngine:
    """Serves the dataset's views in an embedded DuckDB (a new in-memory connection unless
    `con` is given)."""

    name = "duckdb"

    def __init__(self, ds: Dataset, con=None):
        import duckdb

        self.con = con or duckdb.connect()
        if sys.stderr.isatty():
            self.con.execute("SET enable_progress_bar = true")
        raw = {}
        all_files = []
        for name, sch in schema.TABLES.items():
            files = table_files(ds.path, name)
            all_files += files
            hive = "true" if name in schema.TIMED_TABLES else "false"
            raw[name] = (
                f"SELECT * FROM read_parquet({_sql_list(files)}, hive_partitioning = {hive}, "
                "union_by_name = true)"
                if files
                else empty_select(sch)
            )
        for name, sch in schema.CATALOG.items():
            file = ds.path / "catalog" / f"{name}.parquet"
            raw[name] = (
                f"SELECT * FROM read_parquet('{file}')" if file.exists() else empty_select(sch)
            )
        self._check_files(all_files)
        for name, sql in raw.items():
            self.con.execute(f"CREATE VIEW raw_{name} AS {sql}")
            self._add_missing_columns(ds, name, sql)
        self._check_columns(ds)
        for name, sql in ds.view_sql().items():
            self.con.execute(f"CREATE VIEW {name} AS {sql}")

    def _check_files(self, files) -> None:
        import duckdb

        if not files:
            return
        try:
            rows = self.con.execute(
                "SELECT file_name, decode(value) FROM parquet_kv_metadata("
                f"{_sql_list(files)}) WHERE decode(key) = 'tapdeck.schema_version'"
            ).fetchall()
        except duckdb.Error as e:
            raise DatasetError(
                f"unreadable Parquet file (partly written?): {_first_line(e)}"
            ) from e
        versions = {str(f): None for f in files}
        versions.update({f: v for f, v in rows})
        check_file_versions(versions)

    def _add_missing_columns(self, ds: Dataset, name: str, sql: str) -> None:
        """Older files lack the columns added since (union_by_name fills them where only some
        files do); when none of a table's files has one, the view adds it as null."""
        if not ds.tables_present.get(name):
            return
        have = {r[0] for r in self.con.execute(f"DESCRIBE raw_{name}").fetchall()}
        missing = [c for c in schema.ADDED_COLUMNS.get(name, []) if c not in have]
        if missing:
            sch = {**schema.TABLES, **schema.CATALOG}[name]
            nulls = ", ".join(
                f"CAST(NULL AS {schema.duckdb_type(sch.field(c).type)}) AS {c}" for c in missing
            )
            self.con.execute(f"CREATE OR REPLACE VIEW raw_{name} AS SELECT *, {nulls} FROM ({sql})")

    def _check_columns(self, ds: Dataset) -> None:
        for name, sch in {**schema.TABLES, **schema.CATALOG}.items():
            if not ds.tables_present.get(name):
                continue
            have = {r[0]: r[1] for r in self.con.execute(f"DESCRIBE raw_{name}").fetchall()}
            for f in sch:
                want = schema.duckdb_type(f.type)
                got = have.get(f.name)
                if got is None:
                    raise DatasetError(f"{ds.path / name}: no column {f.name} ({want})")
                if got.replace("INTEGER", "INT") != want:
                    raise DatasetError(
                        f"{ds.path / name}: column {f.name} is {got}, the contract says {want}"
                    )

    def query(self, sql: str) -> pa.Table:
        import duckdb

        try:
            return self.con.sql(sql).to_arrow_table()
        except duckdb.Error as e:
            raise QueryError(_first_line(e)) from e


class QueryError(Exception):
    """A query failed in the engine (a bad ad-hoc query, or a bug)."""


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def to_spark_sql(sql: str) -> str:
    import sqlglot

    tree = sqlglot.parse_one(sql, read="duckdb").transform(_spark_percentile_disc)
    return tree.sql(dialect="spark")


def _spark_percentile_disc(node):
    """DuckDB's `quantile_disc(x, p)` (p a number or a list) as Spark 4 wants it:
    `percentile_disc(p) WITHIN GROUP (ORDER BY x)`, one per p in an array for a list. sqlglot
    writes `percentile_disc(x, p)`, which Spark 4 refuses."""
    from sqlglot import exp

    if not isinstance(node, exp.PercentileDisc) or node.expression is None:
        return node

    def within(p):
        order = exp.Order(expressions=[exp.Ordered(this=node.this.copy(), nulls_first=False)])
        # An anonymous function: sqlglot would otherwise write percentile_approx.
        func = exp.Anonymous(this="percentile_disc", expressions=[p.copy()])
        return exp.WithinGroup(this=func, expression=order)

    p = node.expression
    if isinstance(p, exp.Array):
        return exp.Array(expressions=[within(q) for q in p.expressions])
    return within(p)


def _with_added_columns(df, name: str):
    """Adds as null the columns added since that none of the table's files has."""
    from pyspark.sql import functions as F

    sch = {**schema.TABLES, **schema.CATALOG}[name]
    for c in schema.ADDED_COLUMNS.get(name, []):
        if c not in df.columns:
            df = df.withColumn(c, F.lit(None).cast(_SPARK_TYPES[sch.field(c).type]))
    return df


_SPARK_TYPES = {
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.string(): "string",
    pa.bool_(): "boolean",
}


class SparkEngine:
    """Runs the same queries on PySpark (local mode unless `master` is given)."""

    name = "spark"

    def __init__(self, ds: Dataset, master: str | None = None):
        try:
            import pyspark
            from pyspark.sql import SparkSession
        except ImportError as e:
            raise DatasetError(
                "--engine spark needs pyspark: pip install 'tapdeck-analyze[spark]'"
            ) from e
        if int(pyspark.__version__.split(".")[0]) < 4:  # DataFrame.toArrow came with 4.0
            raise DatasetError(
                f"--engine spark needs pyspark 4.0 or newer, this is {pyspark.__version__}: "
                "pip install 'tapdeck-analyze[spark]'"
            )
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (
            SparkSession.builder.appName("tapdeck-analyze")
            .master(master or "local[2]")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
            .config("spark.sql.ansi.enabled", "false")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
        )
        self.spark = builder.getOrCreate()
        self.spark.sparkContext.setLogLevel("ERROR")
        for name, sch in schema.TABLES.items():
            files = table_files(ds.path, name)
            if files:
                # mergeSchema: files converted before a column was added lack it.
                df = (
                    self.spark.read.option("basePath", str(ds.path / name))
                    .option("mergeSchema", "true")
                    .parquet(*[str(f) for f in files])
                )
                df = _with_added_columns(df, name)
            else:
                df = self.spark.sql(to_spark_sql(empty_select(sch)))
            df.createOrReplaceTempView(f"raw_{name}")
        for name, sch in schema.CATALOG.items():
            file = ds.path / "catalog" / f"{name}.parquet"
            if file.exists():
                df = _with_added_columns(self.spark.read.parquet(str(file)), name)
            else:
                df = self.spark.sql(to_spark_sql(empty_select(sch)))
            df.createOrReplaceTempView(f"raw_{name}")
        for name, sql in ds.view_sql().items():
            self.spark.sql(to_spark_sql(sql)).createOrReplaceTempView(name)

    def query(self, sql: str) -> pa.Table:
        try:
            table = self.spark.sql(to_spark_sql(sql)).toArrow()
        except Exception as e:  # pyspark raises many unrelated classes
            raise QueryError(_first_line(e)) from e
        return _nullable(table)


def _nullable(table: pa.Table) -> pa.Table:
    """Spark marks the columns it knows are never NULL (count(*), …) as not nullable, DuckDB
    marks none: every column nullable, so that both engines give one schema."""
    if all(f.nullable for f in table.schema):
        return table
    fields = [f.with_nullable(True) for f in table.schema]
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))
