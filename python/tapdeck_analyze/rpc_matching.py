"""rpc_matching: calls with no reply and replies with no call, the capture-loss estimate the
HP authors used, beside the drop counters the capture itself recorded (`capture_stats`).

Calls are counted per transaction (a retransmitted call is one call); replies without their
duplicates. A call near the end of the capture may be unmatched only because its reply came
after the capture stopped.
"""

import pyarrow as pa

from .opening import as_dataset
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
