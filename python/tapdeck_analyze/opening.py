"""Opening a dataset: the checks (version, completeness, range), the engine that serves its
views, and the key that decrypts names. Sits above `dataset`, `engine` and `names`, which
do not import it."""

from pathlib import Path

from .dataset import Dataset, Filters, incompleteness, present_tables, read_meta
from .engine import DuckDBEngine, SparkEngine
from .errors import DatasetError, IncompleteDatasetError
from .names import key_for
from .times import format_time, parse_time


def open_dataset(
    path,
    start=None,
    end=None,
    client: str | None = None,
    server: str | None = None,
    op: str | None = None,
    engine: str = "duckdb",
    master: str | None = None,
    require_packets: bool = True,
    key=None,
    allow_incomplete: bool = False,
) -> Dataset:
    """Opens the dataset at `path` for analysis.

    `start` and `end` are nanoseconds since the epoch or strings in `tapdeck extract`'s formats;
    the range is [start, end). Raises DatasetError (one line) for a missing or partial dataset, a
    newer schema version, or an empty range. `key` is the key file the dataset's names were
    encrypted with (checked against its key id): `files` then shows the names decrypted.
    An incomplete dataset (a conversion not finished or interrupted) raises
    IncompleteDatasetError, unless `allow_incomplete`: then `Dataset.incomplete` says why.
    """
    path = Path(path)
    meta = read_meta(path)
    # Before the engine reads any file: an unfinished conversion may have partial files.
    incomplete = incompleteness(path, meta)
    if incomplete and not allow_incomplete:
        raise IncompleteDatasetError(
            f"{incomplete}; finish the conversion (all --shard runs), or pass --allow-incomplete"
        )
    start_ns = _as_ns(start, "--start")
    end_ns = _as_ns(end, "--end")
    if start_ns is not None and end_ns is not None and start_ns >= end_ns:
        raise DatasetError("--start must be before --end: the range [start, end) is empty")
    ds = Dataset(path, meta, start_ns, end_ns, Filters(client, server, op))
    ds.incomplete = incomplete
    ds.tables_present = present_tables(path)
    if key is not None:
        ds.name_key = key_for(meta, key)
    if engine == "duckdb":
        ds.engine = DuckDBEngine(ds)
    elif engine == "spark":
        ds.engine = SparkEngine(ds, master)
    else:
        raise DatasetError(f"unknown engine '{engine}' (duckdb or spark)")
    if require_packets:
        _check_not_empty(ds)
    return ds


def _check_not_empty(ds: Dataset) -> None:
    if ds.scalar("SELECT count(*) FROM (SELECT 1 FROM ranged_packets LIMIT 1) AS t"):
        return
    if ds.start_ns is None and ds.end_ns is None:
        raise DatasetError(f"{ds.path}: the dataset holds no packets")
    span = ds.query("SELECT min(time_ns) AS lo, max(time_ns) AS hi FROM raw_packets").to_pylist()
    lo, hi = span[0]["lo"], span[0]["hi"]
    where = f"it spans {format_time(lo)} to {format_time(hi)}" if lo is not None else "it is empty"
    raise DatasetError(f"no packets {ds.describe_range()} in {ds.path} ({where})")


def _as_ns(value, what: str) -> int | None:
    if value is None or isinstance(value, int):
        return value
    try:
        return parse_time(str(value))
    except ValueError as e:
        raise DatasetError(f"{what}: {e}") from e


def as_dataset(ds_or_path, **options) -> Dataset:
    """An analysis' first argument: an open Dataset, or a path to open with `options`."""
    if isinstance(ds_or_path, Dataset):
        return ds_or_path
    return open_dataset(ds_or_path, **options)
