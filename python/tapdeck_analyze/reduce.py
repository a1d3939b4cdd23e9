"""What the report shows of a result table: what a reader uses (quantiles of a distribution,
the busiest intervals of a time series, the top rows of a ranking). The whole table is written
beside the page as CSV and Parquet, and the page links it.

A `Display` reduces a table's rows; each analysis names the displays of its tables
(`Analysis.shown`), built from the ones here or its own. Any other table (a new analysis') is
shown as a time series if it has an interval column, else by its first rows (the analyses
order their tables by what matters most)."""

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

TOP = 10

TIME_COLUMNS = ("interval_start_ns", "window_start_ns")
QUANTILES = {"p10": 0.1, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p90": 0.9, "p99": 0.99}


@dataclass
class Shown:
    rows: list[dict]
    columns: list[str]
    note: str = ""  # what was left out, before the links to the whole table
    omitted: bool = field(default=False)  # the table is the plot's data only: no rows shown


# A table's rows and column names -> what the report shows of them.
Display = Callable[[list[dict], list[str]], Shown]


def shown(table: pa.Table, display: Display | None = None) -> Shown:
    """What the report shows of `table`: its analysis' `display` of it, else the default."""
    return (display or DEFAULT)(table.to_pylist(), table.column_names)


def first(rows, columns) -> Shown:
    if len(rows) <= TOP:
        return Shown(rows, columns)
    return Shown(rows[:TOP], columns, f"The first {TOP} of {len(rows):,} rows.")


def busiest(metric: str | None = None) -> Display:
    """A time series (a table with a column of TIME_COLUMNS): its TOP rows with the highest
    `metric` (the column that says how busy an interval was; by default the first number after
    the time), in time order. Short tables and tables without a time column: the first rows."""

    def display(rows, columns) -> Shown:
        time = next((c for c in TIME_COLUMNS if c in columns), None)
        if time and len(rows) > TOP:
            return _busiest(rows, columns, time, metric)
        return first(rows, columns)

    return display


def _busiest(rows, columns, time: str, metric: str | None) -> Shown:
    if metric is None:  # the first number after the time
        metric = next(
            (c for c in columns if c != time and isinstance(rows[0][c], (int, float))), time
        )
    top = sorted(rows, key=lambda r: (r[metric] is None, -(r[metric] or 0), r[time]))[:TOP]
    top.sort(key=lambda r: r[time])
    label = metric.replace("_", " ")
    return Shown(top, columns, f"The {TOP} rows of {len(rows):,} with the highest {label}.")


DEFAULT = busiest()


def ranked(by: str, what: str) -> Display:
    """The TOP rows with the most `by` (ties in the table's order)."""

    def display(rows, columns) -> Shown:
        if len(rows) <= TOP:
            return Shown(rows, columns)
        top = sorted(rows, key=lambda r: -(r[by] or 0))[:TOP]
        return Shown(top, columns, f"The {TOP} {what} of {len(rows):,} with the most {by}.")

    return display


def plot_data(rows, columns) -> Shown:
    """A table that is the data behind a plot: no rows shown, only the links."""
    return Shown([], columns, f"The data behind the plot ({len(rows):,} rows).", omitted=True)
