"""rates: packets/s and bits/s in samples, summarised per window as min, mean and max.

As in Figure 1 of the HP paper: one-minute samples, summarised per hour. Samples with no
packets count as zero rates (between the first and last packet), so a quiet minute shows as a
minimum of 0 rather than disappearing.
"""

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .errors import DatasetError
from .opening import as_dataset
from .reduce import busiest
from .times import parse_duration

COLUMNS = [
    "window_start_ns",
    "samples",
    "packets",
    "bytes",
    "min_pps",
    "mean_pps",
    "max_pps",
    "min_bps",
    "mean_bps",
    "max_bps",
]


# What `by` may name: the packets columns that split the traffic into series.
BY_COLUMNS = ("interface", "direction")


def _ns(value) -> int:
    return value if isinstance(value, int) else parse_duration(value)


def _by_columns(by: str | None) -> list[str]:
    """`interface`, `direction` or `interface,direction` as a list of columns."""
    cols = [c.strip() for c in by.split(",")] if by else []
    if any(c not in BY_COLUMNS for c in cols) or len(set(cols)) != len(cols):
        raise DatasetError("--by is interface, direction or interface,direction (or nothing)")
    return cols


def rates(
    ds_or_path, sample="1min", window="1h", align: str = "epoch", by: str | None = None
) -> pa.Table:
    """One row per window (and per `by` group: `interface`, `direction` or
    `interface,direction`, which then lead the row): window_start_ns, samples (sample intervals
    between the first and last packet), packets, bytes, and min/mean/max of packets/s and bits/s
    over the window's samples. `align` is `epoch` (intervals start at multiples of their length
    since the epoch) or `first` (at the first packet, as tshark's io,stat). Packets of unknown
    direction (`direction` null) form a series of their own."""
    ds = as_dataset(ds_or_path)
    sample_ns, window_ns = _ns(sample), _ns(window)
    if sample_ns < 100_000:
        raise DatasetError("--sample must be at least 100us")
    if window_ns % sample_ns:
        raise DatasetError("--window must be a whole number of samples")
    if align not in ("epoch", "first"):
        raise DatasetError("--align is epoch or first")
    by_cols = _by_columns(by)
    k = window_ns // sample_ns
    origin = "SELECT 0 AS o" if align == "epoch" else "SELECT min(time_ns) AS o FROM packets"
    g = "".join(f"{c}, " for c in by_cols)
    table = ds.query(f"""
WITH origin AS ({origin}),
samples AS (
  SELECT {g}(p.time_ns - origin.o) // {sample_ns} AS sample,
         count(*) AS packets, sum(p.wire_len) AS bytes
  FROM packets AS p CROSS JOIN origin
  GROUP BY {g}(p.time_ns - origin.o) // {sample_ns}
),
span AS (SELECT min(sample) AS first_sample, max(sample) AS last_sample FROM samples),
windows AS (
  SELECT {g}sample // {k} AS w,
         count(*) AS busy_samples,
         sum(packets) AS packets, sum(bytes) AS bytes,
         min(packets) AS min_packets, max(packets) AS max_packets,
         min(bytes) AS min_bytes, max(bytes) AS max_bytes
  FROM samples
  GROUP BY {g}sample // {k}
),
sized AS (
  SELECT windows.*,
         least(span.last_sample, w * {k} + {k - 1}) - greatest(span.first_sample, w * {k}) + 1
           AS samples
  FROM windows CROSS JOIN span
)
SELECT {g}w * {window_ns} + origin.o AS window_start_ns,
       samples,
       CAST(packets AS BIGINT) AS packets,
       CAST(bytes AS BIGINT) AS bytes,
       CASE WHEN busy_samples < samples THEN 0 ELSE min_packets END * 1e9 / {sample_ns} AS min_pps,
       packets * 1e9 / (samples * {sample_ns}) AS mean_pps,
       max_packets * 1e9 / {sample_ns} AS max_pps,
       CASE WHEN busy_samples < samples THEN 0 ELSE min_bytes END * 8e9 / {sample_ns} AS min_bps,
       bytes * 8e9 / (samples * {sample_ns}) AS mean_bps,
       max_bytes * 8e9 / {sample_ns} AS max_bps
FROM sized CROSS JOIN origin
ORDER BY {g}window_start_ns
""")
    return _fill_empty_windows(table, window_ns, sample_ns, by_cols)


def _fill_empty_windows(
    table: pa.Table, window_ns: int, sample_ns: int, by_cols: list[str]
) -> pa.Table:
    """Adds the windows in which no packet fell (zero rates), so that a gap shows as a gap."""
    rows = table.to_pylist()
    if not rows:
        return table

    def group(r) -> tuple:
        return tuple(r[c] for c in by_cols)

    def order(r) -> tuple:
        # As the query's ORDER BY: nulls after values, per column.
        return tuple((r[c] is None, r[c]) for c in by_cols) + (r["window_start_ns"],)

    have = {(group(r), r["window_start_ns"]) for r in rows}
    groups = {group(r) for r in rows}
    first = min(r["window_start_ns"] for r in rows)
    last = max(r["window_start_ns"] for r in rows)
    added = []
    for grp in groups:
        for start in range(first, last + 1, window_ns):
            if (grp, start) not in have:
                row = dict.fromkeys(table.column_names, 0)
                row.update(window_start_ns=start, samples=window_ns // sample_ns)
                row.update(zip(by_cols, grp, strict=True))
                for c in COLUMNS[4:]:
                    row[c] = 0.0
                added.append(row)
    if not added:
        return table
    rows += added
    rows.sort(key=order)
    return pa.Table.from_pylist(rows, schema=table.schema)


# -- in the report ---------------------------------------------------------------------------


def headline(t: Tables) -> str | None:
    rows = [r for r in t["rates"].to_pylist() if r["samples"]]
    if not rows or not any(r["packets"] for r in rows):
        return None
    samples = sum(r["samples"] for r in rows)
    mean_bps = sum(r["mean_bps"] * r["samples"] for r in rows) / samples
    mean_pps = sum(r["mean_pps"] * r["samples"] for r in rows) / samples
    peak = max(rows, key=lambda r: r["max_bps"])
    text = f"{units.rate(mean_bps)} ({units.packet_rate(mean_pps)}) on average"
    if samples > 1 and mean_bps:
        text += (
            f"; the busiest sample reached {units.rate(peak['max_bps'])} "
            f"({units.packet_rate(peak['max_pps'])}), {units.number(peak['max_bps'] / mean_bps)}× the mean"
        )
    return text + "."


def plot(t: Tables, tz):
    rows = t["rates"].to_pylist()
    if not rows:
        return plots.empty("rates")
    fig, ax = plots.subplots(figsize=(9, 4))
    x = plots.times([r["window_start_ns"] for r in rows], tz)
    if len(rows) > 1:  # the last window drawn to its end
        x.append(x[-1] + (x[-1] - x[-2]))
    for col, style in (("max_bps", "r.-"), ("mean_bps", "k.-"), ("min_bps", "b.-")):
        y = [r[col] for r in rows]
        y = y + y[-1:] if len(rows) > 1 else y
        ax.plot(x, y, style, label=col.split("_")[0], drawstyle="steps-post", markersize=3)
    plots.time_axis(ax, x)
    plots.human(ax.yaxis, units.rate)
    ax.set_ylabel("rate")
    ax.set_title("rate per window: min, mean and max of the samples")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


ANALYSIS = Analysis(
    "rates",
    rates,
    "Each window shows the lowest, mean and highest rate of its samples: a max far above "
    "the mean means short busy periods that the mean hides.",
    options=("sample", "window", "align", "by"),
    headline=headline,
    plot=plot,
    shown={"rates": busiest("max_bps")},
)
