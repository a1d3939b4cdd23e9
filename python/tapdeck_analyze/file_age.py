"""file_age: how long before each read and write the file was last modified, and how old files
are when the trace first reads or writes them.

An access is a READ or WRITE call (its first transmission). Its age is the call's time minus
the modification time (`mtime_ns`) of the latest attributes of that file seen at or before the
call (any operation, any version; ties by file and record): the last change the traffic had
shown when the client asked. A file's first access is its first read or write in the range.
An access with no attributes of its file before it has no age (`unknown`); like every
analysis it sees only the time range, so attributes from before `--start` do not count. The modification
time is the server's clock, the access time the capture's: a server clock ahead of the
capture, or a change the trace did not show, can make an age negative (its own bucket).
"""

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .files import ACCESSES
from .opening import as_dataset
from .sqlkit import floor_edge, latest, next_edge, percentiles_disc

MS, S = 1_000_000, 1_000_000_000
# Histogram edges (ns): 0, 1 ms, 10 ms, 100 ms, 1 s, 10 s, 1 min, 10 min, 1 h, 1 d, 1 week,
# 30 d, 365 d. Negative ages have no lower edge.
EDGES_NS = [0, MS, 10 * MS, 100 * MS, S, 10 * S, 60 * S, 600 * S, 3600 * S, 86400 * S,
            7 * 86400 * S, 30 * 86400 * S, 365 * 86400 * S]  # fmt: skip

EVENTS = ("read", "write", "first_access")

# One row per event: `read` and `write` for every access, `first_access` for each file's first;
# age_ns null when no attributes came before the access.
AGES = f"""
{ACCESSES},
events AS (
  SELECT fh, time_ns, 0 AS kind, CAST(NULL AS BIGINT) AS transaction_id,
         CAST(NULL AS VARCHAR) AS operation
  FROM nfs_attrs WHERE fh IS NOT NULL AND mtime_ns IS NOT NULL
  UNION ALL
  SELECT fh, time_ns, 1, transaction_id, operation FROM accesses WHERE fh IS NOT NULL
),
as_of AS (
  -- the instant of the latest attributes up to each access (attribute rows sort before
  -- accesses of the same instant); a scalar running max, much cheaper than one over structs
  SELECT fh, time_ns, kind, transaction_id, operation,
         max(CASE WHEN kind = 0 THEN time_ns END)
           OVER (PARTITION BY fh ORDER BY time_ns, kind
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS attrs_ns
  FROM events
),
at_instant AS (
  -- one mtime per handle and instant: rows of one instant ordered by file and record
  SELECT fh, time_ns, {latest("mtime_ns", "file_id", "record")} AS mtime_ns
  FROM nfs_attrs WHERE fh IS NOT NULL AND mtime_ns IS NOT NULL
  GROUP BY fh, time_ns
),
aged AS (
  SELECT a.operation, a.time_ns - m.mtime_ns AS age_ns,
         row_number() OVER (PARTITION BY a.fh ORDER BY a.time_ns, a.transaction_id) AS nth
  FROM as_of AS a LEFT JOIN at_instant AS m ON m.fh = a.fh AND m.time_ns = a.attrs_ns
  WHERE a.kind = 1
),
ages AS (
  SELECT CASE WHEN operation = 'READ' THEN 'read' ELSE 'write' END AS event, age_ns FROM aged
  UNION ALL
  SELECT 'first_access', age_ns FROM aged WHERE nth = 1
)"""

_EVENT_ORDER = (
    "CASE event " + " ".join(f"WHEN '{e}' THEN {i}" for i, e in enumerate(EVENTS)) + " END"
)


def file_age(ds_or_path) -> pa.Table:
    """One row per event (read, write, first_access) that occurred: event, accesses, unknown
    (accesses without an age), and the age in seconds over the others: min_s, p10_s, p50_s,
    p90_s (nearest rank), max_s."""
    ds = as_dataset(ds_or_path)
    return ds.query(f"""
WITH {AGES},
summary AS (
  SELECT event, count(*) AS accesses, count(age_ns) AS known,
         min(age_ns) AS lo, max(age_ns) AS hi,
         {percentiles_disc("age_ns", (0.1, 0.5, 0.9))} AS q
  FROM ages GROUP BY event
)
SELECT event, accesses, accesses - known AS unknown,
       lo / 1e9 AS min_s, q[1] / 1e9 AS p10_s, q[2] / 1e9 AS p50_s, q[3] / 1e9 AS p90_s,
       hi / 1e9 AS max_s
FROM summary
ORDER BY {_EVENT_ORDER}
""")


def age_distribution(ds_or_path) -> pa.Table:
    """The ages as a histogram per event: event, lower_s (null: negative ages), upper_s
    (exclusive; null for the last bucket), accesses, fraction and cumulative_fraction (of the
    event's accesses with an age); buckets with accesses only."""
    ds = as_dataset(ds_or_path)
    lower = floor_edge("age_ns", EDGES_NS)
    return ds.query(f"""
WITH {AGES},
buckets AS (
  SELECT event, {lower} AS lower_ns, count(*) AS accesses
  FROM ages WHERE age_ns IS NOT NULL GROUP BY 1, 2
)
SELECT event, lower_ns / 1e9 AS lower_s,
       CASE WHEN lower_ns IS NULL THEN CAST(0 AS DOUBLE) ELSE {next_edge("lower_ns", EDGES_NS)} / 1e9 END
         AS upper_s,
       accesses,
       accesses / CAST(sum(accesses) OVER (PARTITION BY event) AS DOUBLE) AS fraction,
       sum(accesses) OVER (PARTITION BY event ORDER BY lower_ns NULLS FIRST
                           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
         / CAST(sum(accesses) OVER (PARTITION BY event) AS DOUBLE) AS cumulative_fraction
FROM buckets
ORDER BY {_EVENT_ORDER}, lower_ns NULLS FIRST
""")


# -- in the report ---------------------------------------------------------------------------


def headline(tables: Tables) -> str | None:
    """'Median time since the last change: 3.2 d at reads, 1.2 s at writes, 45 d at first
    access'."""
    rows = [r for r in tables["file_age"].to_pylist() if r["p50_s"] is not None]
    if not rows:
        return None
    what = {"read": "at reads", "write": "at writes", "first_access": "at first access"}
    ages = ", ".join(f"{units.duration(r['p50_s'])} {what[r['event']]}" for r in rows)
    return f"Median time since the file's last change: {ages}"


def plot(t: Tables, tz):
    rows = [r for r in t["file_age_distribution"].to_pylist() if r["lower_s"] is not None]
    if not rows:
        return plots.empty("file age")
    fig, ax = plots.subplots(figsize=(7, 4))
    for event in ("read", "write", "first_access"):
        pts = [r for r in rows if r["event"] == event]
        if pts:  # from 0 at the first bucket's lower edge to each bucket's upper edge
            x = [pts[0]["lower_s"] or 1e-4] + [r["upper_s"] or r["lower_s"] * 10 for r in pts]
            y = [0.0] + [r["cumulative_fraction"] for r in pts]
            ax.plot(x, y, marker=".", label=event.replace("_", " "))
    ax.set_xscale("log")
    ax.set_xlabel("time since the last change (s, bucket upper bound)")
    ax.set_ylabel("cumulative fraction of accesses")
    ax.set_ylim(0, 1.02)
    ax.set_title("file age at access")
    ax.legend()
    fig.tight_layout()
    return fig


ANALYSIS = Analysis(
    "file_age",
    file_age,
    "Time since the file's last change (its mtime in the attributes) when it is read "
    "or written, and when the trace first touches it: small ages mean fresh data (a "
    "cache must follow changes), large ages data that is old and stable.",
    parts={"distribution": age_distribution},
    headline=headline,
    plot=plot,
)
