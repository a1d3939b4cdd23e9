"""nfs_latency: server response time per NFS version and operation.

A transaction's latency runs from the first transmission of its call (`first_time_ns`, which
retransmissions share) to its first reply. NFSv2 and NFSv3 are counted per procedure; NFSv4 per COMPOUND
(and NULL) and per operation the reply carries, each operation taking its COMPOUND's latency.
Retransmitted calls and duplicate replies are counted apart and change no latency. A transaction
belongs to the time range by its call.
"""

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .opening import as_dataset
from .reduce import busiest, ranked
from .sqlkit import MINUTE_NS, bucket, percentiles_disc

NFS_PROGRAM = 100003

# One row per NFS transaction whose first call is in range: its first call time, first reply
# time, retransmitted calls and duplicate replies. The converter flags repeats (`retransmit`),
# so the first call and first reply are found by filters; only the few repeats are grouped.
TRANSACTIONS = f"""
calls AS (
  SELECT transaction_id, version AS nfs_version, procedure_name AS operation,
         first_time_ns AS first_call_ns
  FROM rpc
  WHERE direction = 'call' AND program = {NFS_PROGRAM} AND NOT retransmit
),
replies AS (
  SELECT transaction_id, time_ns AS first_reply_ns
  FROM rpc
  WHERE direction = 'reply' AND program = {NFS_PROGRAM} AND matched AND NOT retransmit
),
repeats AS (
  SELECT transaction_id,
         sum(CASE WHEN direction = 'call' THEN 1 ELSE 0 END) AS retransmits,
         sum(CASE WHEN direction = 'reply' THEN 1 ELSE 0 END) AS duplicate_replies
  FROM rpc
  WHERE retransmit AND program = {NFS_PROGRAM}
  GROUP BY transaction_id
),
transactions AS (
  SELECT c.transaction_id, c.nfs_version, c.operation, c.first_call_ns, r.first_reply_ns,
         r.first_reply_ns - c.first_call_ns AS latency_ns,
         coalesce(x.retransmits, 0) AS retransmits,
         coalesce(x.duplicate_replies, 0) AS duplicate_replies
  FROM calls AS c
  LEFT JOIN replies AS r ON r.transaction_id = c.transaction_id
  LEFT JOIN repeats AS x ON x.transaction_id = c.transaction_id
)"""


def per_operation(ds) -> str:
    """CTEs ending in `per_operation`: one row per answered transaction (its first reply, which
    carries its first call's time in `first_time_ns`, so no join with the calls), one per
    unanswered call, and one per transaction with repeats (retransmitted calls, duplicate
    replies); then each NFSv4 operation of a first reply under the operation's name. A
    transaction is in the time range by its first call."""
    in_range = " AND ".join(ds.range_conditions("first_time_ns")) or "TRUE"
    return f"""
first_replies AS (
  SELECT transaction_id, version AS nfs_version, procedure_name AS operation,
         first_time_ns AS first_call_ns, time_ns AS first_reply_ns,
         time_ns - first_time_ns AS latency_ns
  FROM rpc
  WHERE direction = 'reply' AND program = {NFS_PROGRAM} AND matched AND NOT retransmit
    AND {in_range}
),
repeats AS (
  SELECT transaction_id, version AS nfs_version, procedure_name AS operation,
         sum(CASE WHEN direction = 'call' THEN 1 ELSE 0 END) AS retransmits,
         sum(CASE WHEN direction = 'reply' THEN 1 ELSE 0 END) AS duplicate_replies
  FROM rpc
  WHERE retransmit AND program = {NFS_PROGRAM} AND {in_range}
  GROUP BY transaction_id, version, procedure_name
),
per_operation AS (
  SELECT nfs_version, operation, first_call_ns, latency_ns,
         0 AS retransmits, 0 AS duplicate_replies
  FROM first_replies
  UNION ALL
  SELECT version, procedure_name, first_time_ns, NULL, 0, 0
  FROM rpc
  WHERE direction = 'call' AND program = {NFS_PROGRAM} AND NOT retransmit AND NOT matched
  UNION ALL
  SELECT nfs_version, operation, NULL, NULL, retransmits, duplicate_replies
  FROM repeats
  UNION ALL
  SELECT 4, o.operation, f.first_call_ns, f.latency_ns,
         coalesce(x.retransmits, 0), coalesce(x.duplicate_replies, 0)
  FROM nfs_ops AS o
  JOIN (SELECT * FROM first_replies WHERE nfs_version = 4) AS f
    ON o.transaction_id = f.transaction_id AND o.time_ns = f.first_reply_ns
  LEFT JOIN repeats AS x ON x.transaction_id = o.transaction_id
  WHERE o.direction = 'reply' AND o.nfs_version = 4
)"""


def nfs_latency(ds_or_path) -> pa.Table:
    """Columns: nfs_version, operation, calls (answered), min_s, mean_s, max_s, p50_s, p90_s,
    p99_s (nearest rank), retransmits, duplicate_replies; ordered by version and operation."""
    ds = as_dataset(ds_or_path)
    return ds.query(f"""
WITH {per_operation(ds)},
summary AS (
  SELECT nfs_version, operation,
         count(latency_ns) AS calls,
         min(latency_ns) AS lo, avg(latency_ns) AS mean, max(latency_ns) AS hi,
         {percentiles_disc("latency_ns", (0.5, 0.9, 0.99))} AS q,
         sum(retransmits) AS retransmits, sum(duplicate_replies) AS duplicate_replies
  FROM per_operation
  GROUP BY nfs_version, operation
)
SELECT nfs_version, operation, calls,
       lo / 1e9 AS min_s, mean / 1e9 AS mean_s, hi / 1e9 AS max_s,
       q[1] / 1e9 AS p50_s, q[2] / 1e9 AS p90_s, q[3] / 1e9 AS p99_s,
       CAST(retransmits AS BIGINT) AS retransmits,
       CAST(duplicate_replies AS BIGINT) AS duplicate_replies
FROM summary
ORDER BY nfs_version, operation
""")


def latency_over_time(ds_or_path, top: int = 5, interval_ns: int = MINUTE_NS) -> pa.Table:
    """Per minute (by call time), the answered calls and mean and max latency of the `top`
    busiest operations: columns interval_start_ns, nfs_version, operation, calls, mean_s, max_s."""
    ds = as_dataset(ds_or_path)
    return ds.query(f"""
WITH {per_operation(ds)},
busiest AS (
  SELECT nfs_version, operation
  FROM per_operation WHERE latency_ns IS NOT NULL
  GROUP BY nfs_version, operation
  ORDER BY count(*) DESC, nfs_version, operation
  LIMIT {int(top)}
)
SELECT {bucket("p.first_call_ns", interval_ns)} AS interval_start_ns,
       p.nfs_version, p.operation,
       count(*) AS calls,
       avg(p.latency_ns) / 1e9 AS mean_s,
       max(p.latency_ns) / 1e9 AS max_s
FROM per_operation AS p
JOIN busiest AS b ON b.nfs_version = p.nfs_version AND b.operation = p.operation
WHERE p.latency_ns IS NOT NULL
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
""")


# -- in the report ---------------------------------------------------------------------------


def operation_label(r: dict) -> str:
    """A row's NFS version and operation as the report names them: 'v3 GETATTR'."""
    return f"v{r['nfs_version']} {r['operation']}"


def headline(t: Tables) -> str | None:
    rows = [r for r in t["nfs_latency"].to_pylist() if r["calls"]]
    if not rows:
        return None
    busiest = max(rows, key=lambda r: r["calls"])
    text = (
        f"{operation_label(busiest)} ({units.counted(busiest['calls'], 'call')}): median "
        f"{units.duration(busiest['p50_s'])}, p99 {units.duration(busiest['p99_s'])}"
    )
    slowest = max(rows, key=lambda r: r["p99_s"])
    if slowest is not busiest:
        text += f"; slowest p99: {operation_label(slowest)} {units.duration(slowest['p99_s'])}"
    retransmits = sum(r["retransmits"] for r in t["nfs_latency"].to_pylist())
    if retransmits:
        text += f"; {units.counted(retransmits, 'retransmitted call')}"
    return text + "."


def plot(t: Tables, tz):
    rows = t["nfs_latency_over_time"].to_pylist()
    if not rows:
        return plots.empty("NFS latency")
    fig, ax = plots.subplots(figsize=(9, 4))
    for key in sorted({(r["nfs_version"], r["operation"]) for r in rows}):
        pts = [r for r in rows if (r["nfs_version"], r["operation"]) == key]
        ax.plot(plots.times([r["interval_start_ns"] for r in pts], tz), [r["mean_s"] for r in pts],
                "o-", markersize=3, label=f"v{key[0]} {key[1]}")  # fmt: skip
    ax.set_yscale("log")
    plots.human(ax.yaxis, units.duration)
    ax.set_ylabel("mean latency")
    plots.time_axis(ax, plots.times([r["interval_start_ns"] for r in rows], tz))
    ax.set_title("NFS latency over time, busiest operations")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


ANALYSIS = Analysis(
    "nfs_latency",
    nfs_latency,
    "Server response time per operation from the first call to the first reply; p99 far "
    "above p50 means a slow tail, and retransmits or duplicate replies point at loss or "
    "an overloaded server.",
    parts={"over_time": latency_over_time},
    headline=headline,
    plot=plot,
    shown={
        "nfs_latency": ranked("calls", "operations"),
        "nfs_latency_over_time": busiest("max_s"),
    },
)
