"""burstiness: the distribution of the rate over all intervals of a time scale, as in the HP
paper's Figure 2.

For each scale, the intervals run from the first packet to the last; empty intervals are
counted (not materialised) as intervals with rate 0. Percentiles are exact nearest-rank over
all intervals. The scales are rolled up from the finest one, so packets are grouped once.
"""

import math
from functools import reduce

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .opening import as_dataset
from .reduce import Shown, plot_data
from .sqlkit import PERCENTILES, nearest_rank
from .times import parse_duration

DEFAULT_SCALES = ["100us", "1ms", "10ms", "100ms", "1s"]


def _scales_ns(scales) -> list[int]:
    return sorted({s if isinstance(s, int) else parse_duration(s) for s in scales})


def _intervals_sql(scales_ns: list[int]) -> str:
    """CTE `intervals`: (scale_ns, packets, bytes, n) with n intervals of that size, the empty
    intervals included as packets = bytes = 0."""
    base = reduce(math.gcd, scales_ns)
    per_scale = "\nUNION ALL\n".join(
        f"""  SELECT {s} AS scale_ns, i * {base} // {s} AS i, sum(packets) AS packets,
         sum(bytes) AS bytes
  FROM fine GROUP BY i * {base} // {s}"""
        for s in scales_ns
    )
    counts = "\nUNION ALL\n".join(
        f"  SELECT {s} AS scale_ns, (last_ns - first_ns) // {s} + 1 AS total FROM span"
        for s in scales_ns
    )
    return f"""
span AS (SELECT min(time_ns) AS first_ns, max(time_ns) AS last_ns FROM packets),
fine AS (
  SELECT (p.time_ns - span.first_ns) // {base} AS i, count(*) AS packets, sum(p.wire_len) AS bytes
  FROM packets AS p CROSS JOIN span
  GROUP BY (p.time_ns - span.first_ns) // {base}
),
busy AS (
{per_scale}
),
totals AS (
{counts}
),
intervals AS (
  SELECT scale_ns, packets, bytes, 1 AS n FROM busy
  UNION ALL
  SELECT t.scale_ns, 0 AS packets, 0 AS bytes, t.total - b.busy AS n
  FROM totals AS t JOIN (SELECT scale_ns, count(*) AS busy FROM busy GROUP BY scale_ns) AS b
    ON b.scale_ns = t.scale_ns
  WHERE t.total > b.busy
)"""


def burstiness(ds_or_path, scales=DEFAULT_SCALES) -> pa.Table:
    """One row per scale: scale_s, intervals, empty_intervals, p50/p90/p99/p99_9/p99_99/max of
    packets/s (`*_pps`) and bits/s (`*_bps`), resolution_ns (the timestamps' apparent resolution)
    and below_resolution (the scale is no longer than that resolution: read with care)."""
    ds = as_dataset(ds_or_path)
    scales_ns = _scales_ns(scales)
    pick = {**PERCENTILES, "max": 10000}
    pkt = nearest_rank("intervals", ["scale_ns"], "packets", pick, weight="n", prefix="pk_")
    byt = nearest_rank("intervals", ["scale_ns"], "bytes", pick, weight="n", prefix="by_")
    cols = []
    for name in pick:
        cols.append(f"pk.pk_{name} * 1e9 / s.scale_ns AS {name}_pps")
    for name in pick:
        cols.append(f"bt.by_{name} * 8e9 / s.scale_ns AS {name}_bps")
    select_cols = ",\n       ".join(cols)
    return ds.query(f"""
WITH {_intervals_sql(scales_ns)},
resolution AS (
  SELECT min(CASE WHEN time_ns % 1000000000 = 0 THEN 1000000000
                  WHEN time_ns % 1000000 = 0 THEN 1000000
                  WHEN time_ns % 1000 = 0 THEN 1000
                  ELSE 1 END) AS resolution_ns
  FROM packets
),
sizes AS (
  SELECT scale_ns, CAST(sum(n) AS BIGINT) AS intervals,
         CAST(sum(CASE WHEN packets = 0 THEN n ELSE 0 END) AS BIGINT) AS empty_intervals
  FROM intervals GROUP BY scale_ns
),
pk AS ({pkt}),
bt AS ({byt})
SELECT s.scale_ns / 1e9 AS scale_s, s.intervals, s.empty_intervals,
       {select_cols},
       r.resolution_ns,
       s.scale_ns <= r.resolution_ns AS below_resolution
FROM sizes AS s
JOIN pk ON pk.scale_ns = s.scale_ns
JOIN bt ON bt.scale_ns = s.scale_ns
CROSS JOIN resolution AS r
ORDER BY s.scale_ns
""")


def burstiness_distribution(ds_or_path, scales=DEFAULT_SCALES) -> pa.Table:
    """The whole distribution behind `burstiness`, for CCDF plots: scale_s, bps (bits/s of an
    interval), intervals (how many intervals had that rate), ordered by scale and rate."""
    ds = as_dataset(ds_or_path)
    return ds.query(f"""
WITH {_intervals_sql(_scales_ns(scales))}
SELECT scale_ns / 1e9 AS scale_s, bytes * 8e9 / scale_ns AS bps,
       CAST(sum(n) AS BIGINT) AS intervals
FROM intervals
GROUP BY scale_ns, bytes
ORDER BY scale_ns, bytes
""")


# -- in the report ---------------------------------------------------------------------------


def headline(t: Tables) -> str | None:
    rows = [r for r in t["burstiness"].to_pylist() if not r["below_resolution"]]
    if not rows:
        return None
    r = rows[0]  # the finest meaningful scale shows the bursts best
    scale = units.duration(r["scale_s"])
    p99 = units.rate(r["p99_bps"])
    busiest = units.rate(r["max_bps"])
    if not r["p50_bps"]:
        empty = r["empty_intervals"] / r["intervals"] if r["intervals"] else 0
        tail = f"1 % exceed {p99}" if r["p99_bps"] else f"the busiest reached {busiest}"
        return f"At {scale}, {units.percent(empty)} of intervals are empty; {tail}."
    return (
        f"At {scale}, 1 % of intervals exceed {p99}, {units.number(r['p99_bps'] / r['p50_bps'])}× the "
        f"median ({units.rate(r['p50_bps'])}); the busiest reached {busiest}."
    )


def plot(t: Tables, tz):
    rows = t["burstiness_distribution"].to_pylist()
    if not rows:
        return plots.empty("burstiness")
    fig, ax = plots.subplots(figsize=(7, 5))
    for scale in sorted({r["scale_s"] for r in rows}):
        pts = [r for r in rows if r["scale_s"] == scale and r["bps"] > 0]
        total = sum(r["intervals"] for r in rows if r["scale_s"] == scale)
        above, xs, ys = total, [], []
        for r in pts:
            xs.append(r["bps"])
            ys.append(above / total)
            above -= r["intervals"]
        zero = next((r["intervals"] for r in rows if r["scale_s"] == scale and r["bps"] == 0), 0)
        ys = [y - zero / total for y in ys]
        if xs:
            ax.step(xs, ys, where="post", marker=".", label=units.duration(scale))
    ax.set_xscale("log")
    ax.set_yscale("log")
    plots.human(ax.xaxis, units.rate)
    plots.human(ax.yaxis, units.percent)
    ax.set_xlabel("rate in an interval")
    ax.set_ylabel("fraction of intervals at or above")
    ax.set_title("burstiness: CCDF of the rate per time scale")
    ax.legend()
    fig.tight_layout()
    return fig


def shown_scales(rows, columns) -> Shown:
    """The main table without the rarest percentiles, which the whole table keeps."""
    keep = ["scale_s", "intervals", "empty_intervals", "p50_bps", "p90_bps", "p99_bps",
            "max_bps", "p50_pps", "p99_pps", "max_pps", "below_resolution"]  # fmt: skip
    note = ""
    if rows:
        resolution = units.duration(rows[0]["resolution_ns"] / 1e9)
        note = f"Timestamps resolve {resolution}; p99.9 and p99.99 are in the whole table."
    return Shown(rows, [c for c in keep if c in columns], note)


ANALYSIS = Analysis(
    "burstiness",
    burstiness,
    "For each time scale, the rate that intervals of that length exceed only 50 %, 10 %, "
    "1 % … of the time; the further the curves spread at short scales, the burstier the "
    "traffic (scales flagged below the timestamp resolution are not meaningful).",
    parts={"distribution": burstiness_distribution},
    headline=headline,
    plot=plot,
    shown={"burstiness": shown_scales, "burstiness_distribution": plot_data},
)
