"""What the report shows of a result table: what a reader uses (quantiles of a distribution,
the busiest intervals of a time series, the top rows of a ranking). The whole table is written
beside the page as CSV and Parquet, and the page links it.

`shown` knows the tables of the analyses by name; any other table (a new analysis') is shown
as a time series if it has an interval column, else by its first rows (the analyses order their
tables by what matters most)."""

from dataclasses import dataclass, field

from . import units

TOP = 10

# The column that says how busy an interval of a time series was.
BUSIEST_BY = {
    "rates": "max_bps",
    "nfs_latency_over_time": "max_s",
    "nfs_ops_per_minute": "calls",
    "nfs_ops_outstanding": "max_outstanding",
    "rpc_matching_per_minute": "unmatched_calls",
}
TIME_COLUMNS = ("interval_start_ns", "window_start_ns")
QUANTILES = {"p10": 0.1, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p90": 0.9, "p99": 0.99}


@dataclass
class Shown:
    rows: list[dict]
    columns: list[str]
    note: str = ""  # what was left out, before the links to the whole table
    omitted: bool = field(default=False)  # the table is the plot's data only: no rows shown


def shown(name: str, table) -> Shown:
    rows, columns = table.to_pylist(), table.column_names
    special = _SPECIAL.get(name)
    if special:
        return special(rows, columns)
    time = next((c for c in TIME_COLUMNS if c in columns), None)
    if time and len(rows) > TOP:
        return _busiest(rows, columns, time, BUSIEST_BY.get(name))
    return _first(rows, columns)


def _first(rows, columns) -> Shown:
    if len(rows) <= TOP:
        return Shown(rows, columns)
    return Shown(rows[:TOP], columns, f"The first {TOP} of {len(rows):,} rows.")


def _busiest(rows, columns, time: str, metric: str | None) -> Shown:
    if metric is None:  # the first number after the time
        metric = next(
            (c for c in columns if c != time and isinstance(rows[0][c], (int, float))), time
        )
    top = sorted(rows, key=lambda r: (r[metric] is None, -(r[metric] or 0), r[time]))[:TOP]
    top.sort(key=lambda r: r[time])
    label = metric.replace("_", " ")
    return Shown(top, columns, f"The {TOP} rows of {len(rows):,} with the highest {label}.")


def _sizes(rows, columns) -> Shown:
    if not rows:
        return Shown([], ["quantile", "wire_len"])
    out = [
        {
            "quantile": q,
            "wire_len": next(r["wire_len"] for r in rows if r["cumulative_fraction"] >= p - 1e-12),
        }  # fmt: skip
        for q, p in QUANTILES.items()
    ]
    out.append({"quantile": "max", "wire_len": rows[-1]["wire_len"]})
    common = sorted(rows, key=lambda r: r["rank"])[:5]
    note = "Most common sizes: " + ", ".join(
        f"{r['wire_len']:,} B ({r['fraction']:.1%})" for r in common
    )
    return Shown(out, ["quantile", "wire_len"], f"Packet sizes on the wire. {note}.")


def _recency_distribution(rows, columns) -> Shown:
    out = []
    for level in dict.fromkeys(r["level"] for r in rows):
        bins = [r for r in rows if r["level"] == level]
        never = next((r for r in bins if r["lower_s"] is None), None)
        row = {"level": level, "never_accessed_fraction": never["cumulative_fraction"] if never
               else 0.0}  # fmt: skip
        for q in ("p50", "p90", "p99"):
            hit = next((r for r in bins if r["cumulative_fraction"] >= QUANTILES[q] - 1e-12),
                       None)  # fmt: skip
            # within the bin: at most its upper edge (null when never accessed before)
            row[f"{q}_upto_s"] = hit["upper_s"] if hit and hit["lower_s"] is not None else None
        out.append(row)
    cols = ["level", "never_accessed_fraction", "p50_upto_s", "p90_upto_s", "p99_upto_s"]
    note = (
        "Time since the same file or block was last accessed, at a read: quantiles as the upper "
        "edge of their histogram bin (empty when the read's data was never accessed before)."
    )
    return Shown(out, cols, note)


def _recency(rows, columns) -> Shown:
    if len(rows) <= TOP:
        return Shown(rows, columns)
    step = -(-len(rows) // (TOP - 1))
    picked = rows[:-1:step] + rows[-1:]
    return Shown(
        picked, columns, f"{len(picked)} of {len(rows)} cache sizes, the last the working set."
    )


def _ranked(by: str, what: str):
    """The TOP rows with the most `by` (ties in the table's order)."""

    def reduce(rows, columns) -> Shown:
        if len(rows) <= TOP:
            return Shown(rows, columns)
        top = sorted(rows, key=lambda r: -(r[by] or 0))[:TOP]
        return Shown(top, columns, f"The {TOP} {what} of {len(rows):,} with the most {by}.")

    return reduce


def _burstiness(rows, columns) -> Shown:
    keep = ["scale_s", "intervals", "empty_intervals", "p50_bps", "p90_bps", "p99_bps",
            "max_bps", "p50_pps", "p99_pps", "max_pps", "below_resolution"]  # fmt: skip
    note = ""
    if rows:
        resolution = units.duration(rows[0]["resolution_ns"] / 1e9)
        note = f"Timestamps resolve {resolution}; p99.9 and p99.99 are in the whole table."
    return Shown(rows, [c for c in keep if c in columns], note)


def _drops(rows, columns) -> Shown:
    causes = ("kernel_dropped", "staging_dropped", "write_dropped", "if_dropped", "forward_lost")
    total = {id(r): sum(r[c] or 0 for c in causes) for r in rows}
    if len(rows) <= TOP:
        return Shown(rows, columns)
    top = sorted(rows, key=lambda r: -total[id(r)])[:TOP]
    top.sort(key=lambda r: (r["file_id"], r["interface"]))
    return Shown(top, columns, f"The {TOP} files of {len(rows):,} with the most drops.")


def _plot_data(rows, columns) -> Shown:
    return Shown([], columns, f"The data behind the plot ({len(rows):,} rows).", omitted=True)


_SPECIAL = {
    "sizes": _sizes,
    "burstiness_distribution": _plot_data,
    "recency": _recency,
    "recency_distribution": _recency_distribution,
    "burstiness": _burstiness,
    "nfs_latency": _ranked("calls", "operations"),
    "nfs_ops_per_client": _ranked("calls", "rows"),
    "nfs_ops_per_server": _ranked("calls", "rows"),
    "rpc_matching_drops": _drops,
}
