"""Writing result tables: aligned text for a terminal, CSV, JSON lines, Parquet."""

import datetime as dt
import io
import json

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from . import units


def display_value(name: str, value, tz: dt.tzinfo) -> str:
    """A value as the terminal table shows it: in human units (units.py), times to the ns."""
    return units.column_value(name, value, tz, time_digits=9)


def text_table(table: pa.Table, tz: dt.tzinfo = dt.timezone.utc, limit: int | None = None) -> str:
    names = table.column_names
    rows = table.to_pylist()[:limit] if limit else table.to_pylist()
    cells = [[display_value(n, r[n], tz) for n in names] for r in rows]
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    numeric = [pa.types.is_integer(f.type) or pa.types.is_floating(f.type) for f in table.schema]

    def line(values):
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out = [line(names)] + [line(c) for c in cells]
    if limit and table.num_rows > limit:
        out.append(f"… {table.num_rows - limit} more rows")
    return "\n".join(out) + "\n"


def write(table: pa.Table, fmt: str, stream, tz: dt.tzinfo = dt.timezone.utc) -> None:
    """Writes `table` to a binary stream in `fmt` (table, csv, json, parquet)."""
    if fmt == "table":
        stream.write(text_table(table, tz).encode())
    elif fmt == "csv":
        buf = io.BytesIO()
        pacsv.write_csv(table, buf)
        stream.write(buf.getvalue())
    elif fmt == "json":
        for row in table.to_pylist():
            stream.write((json.dumps(row) + "\n").encode())
    elif fmt == "parquet":
        buf = io.BytesIO()
        pq.write_table(table, buf)
        stream.write(buf.getvalue())
    else:
        raise ValueError(f"unknown format {fmt}")
