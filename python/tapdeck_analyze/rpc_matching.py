"""rpc_matching: calls with no reply and replies with no call, the capture-loss estimate the
HP authors used, beside the drop counters the capture itself recorded (`capture_stats`).

Calls are counted per transaction (a retransmitted call is one call); replies without their
duplicates. A call near the end of the capture may be unmatched only because its reply came
after the capture stopped.
"""

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .opening import as_dataset
from .reduce import TOP, Shown, busiest
from .sqlkit import MINUTE_NS, bucket

MESSAGES = """
messages AS (
  SELECT transaction_id, direction, client_addr, server_addr, transport, time_ns, matched
  FROM rpc
  WHERE direction = 'call' OR NOT retransmit
),
transactions AS (
  SELECT transaction_id, client_addr, server_addr, transport, min(time_ns) AS time_ns,
         max(CASE WHEN direction = 'call' THEN 1 ELSE 0 END) AS has_call,
         max(CASE WHEN direction = 'reply' THEN 1 ELSE 0 END) AS has_reply,
         max(CASE WHEN direction = 'call' AND NOT matched THEN 1 ELSE 0 END) AS unmatched_call,
         max(CASE WHEN direction = 'reply' AND NOT matched THEN 1 ELSE 0 END) AS unmatched_reply
  FROM messages
  GROUP BY transaction_id, client_addr, server_addr, transport
)"""

_SUMS = """CAST(sum(has_call) AS BIGINT) AS calls,
       CAST(sum(has_reply) AS BIGINT) AS replies,
       CAST(sum(unmatched_call) AS BIGINT) AS unmatched_calls,
       CAST(sum(unmatched_reply) AS BIGINT) AS unmatched_replies,
       CAST(sum(unmatched_call + unmatched_reply) AS DOUBLE) / (2 * count(*)) AS estimated_loss"""


def rpc_matching(ds_or_path) -> pa.Table:
    """Per client/server pair and transport: calls, replies, unmatched_calls, unmatched_replies,
    estimated_loss (missing messages over the messages the seen transactions had: unmatched /
    (2 · transactions)); ordered by unmatched messages, most first."""
    ds = as_dataset(ds_or_path)
    return ds.query(f"""
WITH {MESSAGES}
SELECT client_addr, server_addr, transport,
       {_SUMS}
FROM transactions
GROUP BY client_addr, server_addr, transport
ORDER BY unmatched_calls + unmatched_replies DESC, client_addr, server_addr, transport
""")


def per_minute(ds_or_path, interval_ns: int = MINUTE_NS) -> pa.Table:
    """Per minute (of a transaction's first message): calls, replies, unmatched_calls,
    unmatched_replies, estimated_loss."""
    ds = as_dataset(ds_or_path)
    return ds.query(f"""
WITH {MESSAGES}
SELECT {bucket("time_ns", interval_ns)} AS interval_start_ns,
       {_SUMS}
FROM transactions
GROUP BY 1
ORDER BY 1
""")


def capture_drops(ds_or_path) -> pa.Table:
    """The capture's own counters per source file and interface (`capture_stats`, the files
    overlapping the time range)."""
    ds = as_dataset(ds_or_path)
    return ds.query("""
SELECT file_id, interface, interface_name, first_time_ns, last_time_ns, packets,
       kernel_dropped, staging_dropped, write_dropped, if_dropped, forward_lost, source
FROM capture_stats
ORDER BY file_id, interface
""")


# -- in the report ---------------------------------------------------------------------------


def headline(t: Tables) -> str | None:
    rows = t["rpc_matching"].to_pylist()
    if not rows:
        return None
    calls = sum(r["unmatched_calls"] for r in rows)
    replies = sum(r["unmatched_replies"] for r in rows)
    # A transaction has its call, or is a reply without one.
    transactions = sum(r["calls"] + r["unmatched_replies"] for r in rows)
    if not calls and not replies:
        return f"Every call and reply of {units.count(transactions)} RPC transactions matched."
    # The table's estimate over all pairs: unmatched / (2 · transactions).
    loss = (calls + replies) / (2 * transactions)
    return (
        f"{units.counted(calls, 'call')} without reply and "
        f"{units.counted(replies, 'reply', 'replies')} without call "
        f"in {units.counted(transactions, 'transaction')}: about {units.percent(loss)} of RPC "
        "messages missed."
    )


def plot(t: Tables, tz):
    rows = t["rpc_matching_per_minute"].to_pylist()
    if not rows:
        return plots.empty("RPC matching")
    fig, ax = plots.subplots(figsize=(9, 4))
    x = plots.times([r["interval_start_ns"] for r in rows], tz)
    ax.plot(x, [r["unmatched_calls"] for r in rows], "o-", label="calls without reply")
    ax.plot(x, [r["unmatched_replies"] for r in rows], "s-", label="replies without call")
    plots.time_axis(ax, x)
    ax.set_ylabel("per minute")
    ax.set_title("unmatched RPC messages")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def shown_drops(rows, columns) -> Shown:
    """The files with the most drops, by file and interface."""
    causes = ("kernel_dropped", "staging_dropped", "write_dropped", "if_dropped", "forward_lost")
    total = {id(r): sum(r[c] or 0 for c in causes) for r in rows}
    if len(rows) <= TOP:
        return Shown(rows, columns)
    top = sorted(rows, key=lambda r: -total[id(r)])[:TOP]
    top.sort(key=lambda r: (r["file_id"], r["interface"]))
    return Shown(top, columns, f"The {TOP} files of {len(rows):,} with the most drops.")


ANALYSIS = Analysis(
    "rpc_matching",
    rpc_matching,
    "Calls without a reply and replies without a call: on a lossless capture both are "
    "zero (except calls in the last moments), so they estimate how many messages the "
    "capture missed, beside the drops the recorder counted.",
    parts={"per_minute": per_minute, "drops": capture_drops},
    headline=headline,
    plot=plot,
    shown={
        "rpc_matching_per_minute": busiest("unmatched_calls"),
        "rpc_matching_drops": shown_drops,
    },
)
