"""A dataset as the analyses see it: its directory and description, the time range and the
common filters, and the SQL views an engine serves (`opening.py` opens one).

Every analysis reads the views `packets`, `rpc`, `nfs_ops`, `nfs_rw`, `nfs_attrs`, `nfs_names`,
`mount`, `nlm_ops`, `capture_stats`, `sources` and `row_groups`. The views already hold the time range and
the filters, so an analysis never repeats them. The range filters on `time_ns` (and on the hive
partition `hour`), which the engines push down into the Parquet scan: only the files and row
groups whose statistics overlap the range are read.
"""

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from . import schema
from .errors import DatasetError, IncompleteDatasetError
from .names import NameKey
from .times import NS, format_time

__all__ = ["DatasetError", "IncompleteDatasetError"]  # re-exported: raised with a Dataset


@dataclass
class Filters:
    client: str | None = None
    server: str | None = None
    op: str | None = None

    def any(self) -> bool:
        return any((self.client, self.server, self.op))


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _hour(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns // NS, dt.timezone.utc).strftime("%Y-%m-%dT%H")


class Engine(Protocol):
    """What serves a dataset's views (`Dataset.view_sql`) and runs the analyses' queries over
    them: engine.DuckDBEngine (embedded, the default) and engine.SparkEngine."""

    name: str  # "duckdb" or "spark", as `--engine` names it

    def query(self, sql: str) -> pa.Table:
        """Runs one query, written in DuckDB's dialect, and returns its result as Arrow; raises
        engine.QueryError when the query fails."""
        ...


@dataclass
class Dataset:
    """An opened dataset: its directory, `dataset.json`, the range and filters, and an engine."""

    path: Path
    meta: dict
    start_ns: int | None = None
    end_ns: int | None = None
    filters: Filters = field(default_factory=Filters)
    engine: Engine | None = None  # set by opening.open_dataset once the views are known
    tables_present: dict[str, bool] = field(default_factory=dict)
    name_key: NameKey | None = None  # decrypts names (files) when the key is given
    incomplete: str | None = None  # why the dataset is incomplete, when opened anyway

    def query(self, sql: str) -> pa.Table:
        """Runs one query (written in DuckDB's dialect) and returns its result as Arrow."""
        return self.engine.query(sql)

    def scalar(self, sql: str):
        t = self.query(sql)
        return t.column(0)[0].as_py() if t.num_rows else None

    def time_span(self) -> tuple[int | None, int | None]:
        row = self.query("SELECT min(time_ns) AS lo, max(time_ns) AS hi FROM packets").to_pylist()
        return row[0]["lo"], row[0]["hi"]

    # -- views ---------------------------------------------------------------------------------

    def range_conditions(self, time: str) -> list[str]:
        """SQL conditions that put column `time` (ns) in the range [start, end), for analyses
        that place a row by another time than its own (a reply by its call's)."""
        return self._range(time)

    def _range(self, time: str = "time_ns") -> list[str]:
        conds = []
        if self.start_ns is not None:
            conds.append(f"{time} >= {self.start_ns}")
        if self.end_ns is not None:
            conds.append(f"{time} < {self.end_ns}")
        return conds

    def _hours(self) -> list[str]:
        conds = []
        if self.start_ns is not None:
            conds.append(f"hour >= '{_hour(self.start_ns)}'")
        if self.end_ns is not None:
            conds.append(f"hour <= '{_hour(self.end_ns - 1)}'")
        return conds

    def view_sql(self) -> dict[str, str]:
        """The SELECT behind every view, in DuckDB's dialect, over the raw tables `raw_<name>`."""
        f = self.filters
        views = {}
        for name in schema.TIMED_TABLES:
            conds = self._range() + (self._hours() if self.tables_present.get(name) else [])
            views[f"ranged_{name}"] = _select(f"raw_{name}", conds)

        hosts = []
        if f.client:
            hosts.append(f"client_addr = {_quote(f.client)}")
        if f.server:
            hosts.append(f"server_addr = {_quote(f.server)}")
        op = []
        if f.op:
            op.append(
                f"(procedure_name = {_quote(f.op)} OR transaction_id IN "
                f"(SELECT transaction_id FROM ranged_nfs_ops WHERE operation = {_quote(f.op)}))"
            )
        views["rpc"] = _select("ranged_rpc", hosts + op)
        views["nfs_ops"] = _select(
            "ranged_nfs_ops", hosts + ([f"operation = {_quote(f.op)}"] if f.op else [])
        )
        in_rpc = ["transaction_id IN (SELECT transaction_id FROM rpc)"] if f.any() else []
        for name in ("nfs_rw", "nfs_attrs", "nfs_names"):
            extra = [f"operation = {_quote(f.op)}"] if f.op and name == "nfs_rw" else []
            views[name] = _select(f"ranged_{name}", in_rpc + extra)
        views["mount"] = _select("ranged_mount", hosts)
        views["nlm_ops"] = _select("ranged_nlm_ops", hosts)
        host = []
        for addr in (f.client, f.server):
            if addr:
                host.append(f"(src_addr = {_quote(addr)} OR dst_addr = {_quote(addr)})")
        views["packets"] = _select("ranged_packets", host)
        overlap = []
        if self.start_ns is not None:
            overlap.append(f"last_time_ns >= {self.start_ns}")
        if self.end_ns is not None:
            overlap.append(f"first_time_ns < {self.end_ns}")
        views["capture_stats"] = _select("raw_capture_stats", overlap)
        views["sources"] = _select("raw_sources", overlap)
        views["row_groups"] = "SELECT * FROM raw_row_groups"
        return views

    def describe_range(self) -> str:
        lo = format_time(self.start_ns) if self.start_ns is not None else "the beginning"
        hi = format_time(self.end_ns) if self.end_ns is not None else "the end"
        return f"from {lo} to {hi}"


def _select(source: str, conds: list[str]) -> str:
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    return f"SELECT * FROM {source}{where}"


def empty_select(sch: pa.Schema) -> str:
    """A query with the columns of a table and no rows, for a table the dataset lacks."""
    cols = ", ".join(f"CAST(NULL AS {schema.duckdb_type(f.type)}) AS {f.name}" for f in sch)
    return f"SELECT {cols} WHERE 1 = 0"


def table_files(path: Path, name: str) -> list[Path]:
    return sorted(p for p in (path / name).rglob("*.parquet") if not p.name.startswith("."))


def read_meta(path: Path) -> dict:
    """Reads and checks `dataset.json`; raises DatasetError with one line on anything wrong."""
    if not path.exists():
        raise DatasetError(f"{path}: no such dataset (make one with `tapdeck convert`)")
    if not path.is_dir():
        raise DatasetError(f"{path}: not a dataset directory")
    meta_path = path / "dataset.json"
    if not meta_path.exists():
        raise DatasetError(
            f"{path}: not a complete tapdeck dataset (no dataset.json: "
            "not converted, or the conversion has not finished)"
        )
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"{meta_path}: unreadable ({e})") from e
    version = meta.get("schema_version") if isinstance(meta, dict) else None
    if not isinstance(version, int):
        raise DatasetError(f"{meta_path}: no schema_version")
    _check_version(version, str(meta_path))
    return meta


def incompleteness(path: Path, meta: dict) -> str | None:
    """Why the dataset is incomplete, in one line, or None. The converter writes `complete`
    (false until every source, of every `--shard` run, is converted) and `missing_sources`
    (the sources with no converted rows yet) into dataset.json; a dataset without these keys
    was written before them, by a conversion that had finished."""
    complete = meta.get("complete", True)
    missing = meta.get("missing_sources", [])
    where = path / "dataset.json"
    if not isinstance(complete, bool):
        raise DatasetError(f"{where}: complete is {complete!r}, not true or false")
    if not isinstance(missing, list) or not all(isinstance(m, str) for m in missing):
        raise DatasetError(f"{where}: missing_sources is not a list of paths")
    if complete and not missing:
        return None
    if not missing:
        return f"{path} is incomplete: its conversion has not finished or was interrupted"
    total = _source_count(path, missing)
    of = f" of {total}" if total else ""
    noun = "source" if len(missing) == 1 and not total else "sources"
    return f"{path} is incomplete: {len(missing)}{of} {noun} not converted yet (e.g. {missing[0]})"


def _source_count(path: Path, missing: list[str]) -> int | None:
    """All sources: those in the catalog and the missing ones (the catalog may or may not list
    a source before its rows are written). None when the catalog cannot be read."""
    import pyarrow.parquet as pq

    try:
        paths = pq.read_table(path / "catalog" / "sources.parquet", columns=["path"])
    except (OSError, pa.ArrowException):
        return None
    return len(set(paths.column("path").to_pylist()) | set(missing))


def _check_version(version: int, where: str) -> None:
    if version > schema.SCHEMA_VERSION:
        raise DatasetError(
            f"{where}: schema version {version} is newer than this tapdeck-analyze reads "
            f"({schema.SCHEMA_VERSION}); upgrade tapdeck-analyze"
        )
    if version < 1:
        raise DatasetError(f"{where}: schema version {version} is not a tapdeck schema version")


def check_file_versions(versions: dict[str, bytes | None]) -> None:
    """Checks `tapdeck.schema_version` of every data file (file path → value or None)."""
    for file, value in sorted(versions.items()):
        if value is None:
            raise DatasetError(f"{file}: no tapdeck.schema_version in the file's metadata")
        try:
            version = int(value)
        except ValueError as e:
            raise DatasetError(f"{file}: tapdeck.schema_version {value!r} is not a number") from e
        _check_version(version, file)


def present_tables(path: Path) -> dict[str, bool]:
    """Which tables have files: a table without any reads as empty."""
    present = {name: bool(table_files(path, name)) for name in schema.TABLES}
    for name in schema.CATALOG:
        present[name] = (path / "catalog" / f"{name}.parquet").exists()
    return present
