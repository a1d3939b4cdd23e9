"""nfs_ops: the NFS operation mix (calls, bytes read and written) overall, per minute, per client
and per server; error statuses per operation; requests outstanding over time.

An operation is counted once per transaction (retransmissions of a call are not new calls);
bytes are those the server's first reply returned (READ) or acknowledged writing (WRITE).
"""

from functools import partial

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .nfs_latency import TRANSACTIONS, operation_label
from .opening import as_dataset
from .reduce import busiest, ranked
from .sqlkit import MINUTE_NS, bucket

# nfsstat3 / nfsstat4 names of the statuses seen most (RFC 1813, RFC 8881); NFSv2's nfsstat
# (RFC 1094) uses the same numbers, plus 99 WFLUSH.
STATUS_NAMES = {1: "PERM", 2: "NOENT", 5: "IO", 6: "NXIO", 13: "ACCES", 17: "EXIST",
                18: "XDEV", 20: "NOTDIR", 21: "ISDIR", 22: "INVAL", 27: "FBIG", 28: "NOSPC",
                30: "ROFS", 31: "MLINK", 63: "NAMETOOLONG", 66: "NOTEMPTY", 69: "DQUOT",
                70: "STALE", 99: "WFLUSH", 10001: "BADHANDLE", 10002: "NOT_SYNC", 10003: "BAD_COOKIE",
                10004: "NOTSUPP", 10005: "TOOSMALL", 10006: "SERVERFAULT", 10008: "JUKEBOX",
                10011: "EXPIRED", 10013: "GRACE", 10022: "STALE_CLIENTID",
                10023: "STALE_STATEID", 10025: "BAD_STATEID", 10052: "BADSESSION",
                10053: "BADSLOT"}  # fmt: skip

# Operations (one row per transaction and operation position) and bytes moved per transaction.
OPS = """
op_calls AS (
  SELECT transaction_id, op_index, min(time_ns) AS time_ns,
         min(client_addr) AS client_addr, min(server_addr) AS server_addr,
         min(nfs_version) AS nfs_version, min(operation) AS operation
  FROM nfs_ops
  WHERE direction = 'call'
  GROUP BY transaction_id, op_index
),
first_replies AS (
  SELECT file_id, record, transaction_id, client_addr, server_addr
  FROM rpc WHERE direction = 'reply' AND NOT retransmit
),
moved AS (
  SELECT w.time_ns, r.client_addr, r.server_addr, w.nfs_version, w.operation,
         CASE WHEN w.operation = 'READ' THEN w.bytes ELSE 0 END AS bytes_read,
         CASE WHEN w.operation = 'WRITE' THEN w.bytes ELSE 0 END AS bytes_written
  FROM nfs_rw AS w
  JOIN first_replies AS r
    ON r.file_id = w.file_id AND r.record = w.record AND r.transaction_id = w.transaction_id
  WHERE w.direction = 'reply'
),
activity AS (
  SELECT time_ns, client_addr, server_addr, nfs_version, operation, 1 AS calls,
         0 AS bytes_read, 0 AS bytes_written
  FROM op_calls
  UNION ALL
  SELECT time_ns, client_addr, server_addr, nfs_version, operation, 0, bytes_read, bytes_written
  FROM moved
)"""

_SUMS = """CAST(sum(calls) AS BIGINT) AS calls,
       CAST(sum(bytes_read) AS BIGINT) AS bytes_read,
       CAST(sum(bytes_written) AS BIGINT) AS bytes_written"""


def nfs_ops(ds_or_path) -> pa.Table:
    """Overall: nfs_version, operation, calls, bytes_read, bytes_written, call_share; ordered by
    calls, most first."""
    ds = as_dataset(ds_or_path)
    return ds.query(f"""
WITH {OPS}
SELECT nfs_version, operation, {_SUMS},
       sum(calls) / CAST(sum(sum(calls)) OVER () AS DOUBLE) AS call_share
FROM activity
GROUP BY nfs_version, operation
ORDER BY calls DESC, nfs_version, operation
""")


def per_minute(ds_or_path, interval_ns: int = MINUTE_NS) -> pa.Table:
    """interval_start_ns, nfs_version, operation, calls, bytes_read, bytes_written."""
    ds = as_dataset(ds_or_path)
    return ds.query(f"""
WITH {OPS}
SELECT {bucket("time_ns", interval_ns)} AS interval_start_ns, nfs_version, operation, {_SUMS}
FROM activity
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
""")


def per_host(ds_or_path, side: str = "client") -> pa.Table:
    """Per client (or server) address: <side>_addr, nfs_version, operation, calls, bytes_read,
    bytes_written; ordered by address and calls."""
    if side not in ("client", "server"):
        raise ValueError("side is client or server")
    ds = as_dataset(ds_or_path)
    return ds.query(f"""
WITH {OPS}
SELECT {side}_addr, nfs_version, operation, {_SUMS}
FROM activity
GROUP BY 1, 2, 3
ORDER BY 1, calls DESC, 2, 3
""")


def errors(ds_or_path) -> pa.Table:
    """Error statuses per operation (replies other than OK, without duplicates): nfs_version,
    operation, status, status_name, replies."""
    ds = as_dataset(ds_or_path)
    names = " ".join(f"WHEN {n} THEN '{s}'" for n, s in STATUS_NAMES.items())
    return ds.query(f"""
WITH reply_ops AS (
  SELECT DISTINCT transaction_id, op_index, nfs_version, operation, status
  FROM nfs_ops
  WHERE direction = 'reply' AND status <> 0
)
SELECT nfs_version, operation, status,
       coalesce(CASE status {names} END, 'unknown') AS status_name,
       count(*) AS replies
FROM reply_ops
GROUP BY nfs_version, operation, status
ORDER BY replies DESC, nfs_version, operation, status
""")


def outstanding(ds_or_path, interval_ns: int = 1_000_000_000) -> pa.Table:
    """NFS calls sent and not yet answered, per interval (default 1 s) that has a call or a
    reply: interval_start_ns, min_outstanding, max_outstanding. Unanswered calls stay
    outstanding to the end."""
    ds = as_dataset(ds_or_path)
    return ds.query(f"""
WITH {TRANSACTIONS},
events AS (
  SELECT first_call_ns AS t, 1 AS d FROM transactions
  UNION ALL
  SELECT first_reply_ns AS t, -1 AS d FROM transactions WHERE first_reply_ns IS NOT NULL
),
running AS (
  SELECT t, sum(d) OVER (ORDER BY t, d ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS n
  FROM events
)
SELECT {bucket("t", interval_ns)} AS interval_start_ns,
       CAST(min(n) AS BIGINT) AS min_outstanding, CAST(max(n) AS BIGINT) AS max_outstanding
FROM running
GROUP BY 1
ORDER BY 1
""")


# -- in the report ---------------------------------------------------------------------------


def headline(t: Tables) -> str | None:
    rows = t["nfs_ops"].to_pylist()
    calls = sum(r["calls"] for r in rows)
    if not calls:
        return None
    top = rows[0]
    read = sum(r["bytes_read"] for r in rows)
    written = sum(r["bytes_written"] for r in rows)
    text = (
        f"{units.count(calls)} NFS operations, {units.percent(top['call_share'])} of them "
        f"{operation_label(top)}; {units.size(read)} read, {units.size(written)} written"
    )
    error_rows = t.get("nfs_ops_errors")
    failed = sum(r["replies"] for r in error_rows.to_pylist()) if error_rows is not None else 0
    if failed:
        text += f"; {units.counted(failed, 'error reply', 'error replies')}"
    return text + "."


def plot(t: Tables, tz):
    rows = t["nfs_ops"].to_pylist()
    if not rows:
        return plots.empty("NFS operations")
    fig, (a, b) = plots.subplots(1, 2, figsize=(11, 4))
    top = rows[:15]
    a.barh([f"v{r['nfs_version']} {r['operation']}" for r in top][::-1],
           [r["calls"] for r in top][::-1])  # fmt: skip
    a.set_xlabel("calls")
    a.set_title("operation mix")
    out = t["nfs_ops_outstanding"].to_pylist()
    b.step(plots.times([r["interval_start_ns"] for r in out], tz),
           [r["max_outstanding"] for r in out], where="post")  # fmt: skip
    plots.time_axis(b, plots.times([r["interval_start_ns"] for r in out], tz))
    b.set_ylabel("max outstanding requests")
    b.set_title("outstanding requests")
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


ANALYSIS = Analysis(
    "nfs_ops",
    nfs_ops,
    "Which NFS operations the clients use and how many bytes they move; per minute, per "
    "host, the errors, and the requests still waiting for a reply.",
    parts={
        "per_minute": per_minute,
        "per_client": partial(per_host, side="client"),
        "per_server": partial(per_host, side="server"),
        "errors": errors,
        "outstanding": outstanding,
    },
    headline=headline,
    plot=plot,
    shown={
        "nfs_ops_per_minute": busiest("calls"),
        "nfs_ops_per_client": ranked("calls", "rows"),
        "nfs_ops_per_server": ranked("calls", "rows"),
        "nfs_ops_outstanding": busiest("max_outstanding"),
    },
)
