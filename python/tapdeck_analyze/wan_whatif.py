"""wan_whatif: what the traced workload would meet if the clients reached their servers over a
WAN link of a given bandwidth and added round-trip time.

Demand: per minute (epoch-aligned), the bytes on the wire of packets to the RPC servers (any
address that answered or was sent an RPC call) and from them; the link is full duplex, so a
minute is over capacity when either direction needs more bits per second than the bandwidth.
Minutes are counted from the first to the last minute with a packet, empty ones included.

Delay: every RPC call (first transmission; an NFSv4 COMPOUND is one call) pays the added round
trip once. Each call is treated as synchronous for its client: its extra round trip delays
that client's next call, so a client's work stretches by calls × rtt. That overstates the cost
for clients that keep several calls outstanding (read-ahead, write-behind) and ignores the
time to send the bytes at the link's bandwidth and any queueing.
"""

import datetime as dt
import re

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .errors import DatasetError
from .opening import as_dataset
from .sqlkit import MINUTE_NS, bucket
from .times import TimeFormatError, parse_duration

DEFAULT_BANDWIDTH = "100Mbit/s"
DEFAULT_RTT = "30ms"

_BANDWIDTH = re.compile(r"(\d+)(?:\.(\d+))?\s*([kmgt]?)(?:bit/s|bps|bit|b/s)?", re.IGNORECASE)
_PREFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_bandwidth(value) -> int:
    """Bits per second of `100Mbit/s`, `1.5Gbps`, `512kbit/s` or a plain number (bit/s); SI
    prefixes (k = 1000). Bytes (`MB/s`) are refused rather than guessed."""
    if isinstance(value, int) and not isinstance(value, bool):
        bps = value
    else:
        s = str(value).strip()
        m = _BANDWIDTH.fullmatch(s)
        if not m or "B" in s.replace("bps", ""):
            raise DatasetError(
                f"--bandwidth '{value}' is not a bandwidth: use bits per second with an SI "
                "prefix, e.g. 100Mbit/s, 1.5Gbit/s, 512kbit/s"
            )
        whole, frac, prefix = m.group(1), m.group(2) or "", m.group(3).lower()
        scale = _PREFIX[prefix]
        bps = int(whole) * scale + int(frac or 0) * scale // 10 ** len(frac)
    if bps <= 0:
        raise DatasetError(f"--bandwidth '{value}' must be positive")
    return bps


def _rtt_ns(value) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise DatasetError("--rtt must not be negative")
        return value
    if str(value).strip() in ("0", "0s", "0ms"):
        return 0
    try:
        return parse_duration(str(value))
    except TimeFormatError as e:
        raise DatasetError(f"--rtt: {e}") from e


# Packets to and from the RPC servers, per minute and direction.
DEMAND = f"""
servers AS (SELECT DISTINCT server_addr AS addr FROM rpc WHERE server_addr IS NOT NULL),
directed AS (
  SELECT p.time_ns,
         CASE WHEN s.addr IS NOT NULL THEN p.wire_len ELSE 0 END AS to_server,
         CASE WHEN c.addr IS NOT NULL THEN p.wire_len ELSE 0 END AS from_server
  FROM packets AS p
  LEFT JOIN servers AS s ON s.addr = p.dst_addr
  LEFT JOIN servers AS c ON c.addr = p.src_addr
  WHERE s.addr IS NOT NULL OR c.addr IS NOT NULL
),
minutes AS (
  SELECT {bucket("time_ns", MINUTE_NS)} AS minute_start_ns,
         sum(to_server) AS to_server_bytes, sum(from_server) AS from_server_bytes
  FROM directed GROUP BY 1
)"""

# First transmissions of RPC calls, with the first reply's time where there is one.
CALLS = """
first_calls AS (
  SELECT transaction_id, client_addr, program_name, version, procedure_name, first_time_ns
  FROM rpc WHERE direction = 'call' AND NOT retransmit
),
first_replies AS (
  SELECT transaction_id, time_ns AS reply_ns
  FROM rpc WHERE direction = 'reply' AND matched AND NOT retransmit
),
calls AS (
  SELECT c.transaction_id, c.client_addr, c.program_name, c.version, c.procedure_name,
         c.first_time_ns AS call_ns, r.reply_ns, r.reply_ns - c.first_time_ns AS latency_ns
  FROM first_calls AS c LEFT JOIN first_replies AS r ON r.transaction_id = c.transaction_id
)"""


# Per client: calls, the traced span (first call to last call or reply) and the stretch.
_PER_CLIENT = """
client_spans AS (
  SELECT client_addr, count(*) AS calls,
         greatest(max(call_ns), coalesce(max(reply_ns), 0)) - min(call_ns) AS span_ns
  FROM calls GROUP BY client_addr
),
per_client AS (
  SELECT client_addr, calls, span_ns / 1e9 AS span_s, calls * {rtt_ns} / 1e9 AS added_s,
         (span_ns + calls * {rtt_ns}) / CAST(nullif(span_ns, 0) AS DOUBLE) AS slowdown
  FROM client_spans
)"""


def wan_whatif(ds_or_path, bandwidth=DEFAULT_BANDWIDTH, rtt=DEFAULT_RTT) -> pa.Table:
    """One row: bandwidth_bps, added_rtt_s, minutes, minutes_over_capacity,
    over_capacity_fraction, peak_demand_bps and mean_demand_bps (the busier direction per
    minute; the mean over all minutes), calls, clients, added_s (calls × rtt, all clients),
    max_client_added_s, max_client_slowdown (the largest ratio of a client's stretched to its
    traced span)."""
    ds = as_dataset(ds_or_path)
    bps, rtt_ns = parse_bandwidth(bandwidth), _rtt_ns(rtt)
    return ds.query(f"""
WITH {DEMAND},
{CALLS},
span AS (
  SELECT ({bucket("max(time_ns)", MINUTE_NS)} - {bucket("min(time_ns)", MINUTE_NS)})
           // {MINUTE_NS} + 1 AS minutes
  FROM packets
),
demand AS (
  SELECT sum(CASE WHEN greatest(to_server_bytes, from_server_bytes) * 8 > {bps * 60}
                  THEN 1 ELSE 0 END) AS over,
         max(greatest(to_server_bytes, from_server_bytes)) AS peak_bytes,
         sum(greatest(to_server_bytes, from_server_bytes)) AS all_bytes
  FROM minutes
),
{_PER_CLIENT.format(rtt_ns=rtt_ns)},
delay AS (
  SELECT sum(calls) AS calls, count(*) AS clients, max(calls) AS max_client_calls,
         max(slowdown) AS max_slowdown
  FROM per_client
)
SELECT CAST({bps} AS BIGINT) AS bandwidth_bps, {rtt_ns} / 1e9 AS added_rtt_s,
       CAST(span.minutes AS BIGINT) AS minutes,
       CAST(coalesce(demand.over, 0) AS BIGINT) AS minutes_over_capacity,
       coalesce(demand.over, 0) / CAST(span.minutes AS DOUBLE) AS over_capacity_fraction,
       demand.peak_bytes * 8 / CAST(60 AS DOUBLE) AS peak_demand_bps,
       coalesce(demand.all_bytes, 0) * 8 / CAST(span.minutes * 60 AS DOUBLE) AS mean_demand_bps,
       CAST(coalesce(delay.calls, 0) AS BIGINT) AS calls, delay.clients,
       coalesce(delay.calls, 0) * {rtt_ns} / 1e9 AS added_s,
       delay.max_client_calls * {rtt_ns} / 1e9 AS max_client_added_s,
       delay.max_slowdown AS max_client_slowdown
FROM span CROSS JOIN demand CROSS JOIN delay
""")


def per_minute(ds_or_path, bandwidth=DEFAULT_BANDWIDTH, rtt=DEFAULT_RTT) -> pa.Table:
    """Minutes with traffic to or from the servers: minute_start_ns, to_server_bytes,
    from_server_bytes, demand_bps (the busier direction), utilization (demand over bandwidth),
    over_capacity. (`rtt` is checked only: the parts take the analysis' options.)"""
    ds = as_dataset(ds_or_path)
    bps = parse_bandwidth(bandwidth)
    _rtt_ns(rtt)
    return ds.query(f"""
WITH {DEMAND}
SELECT minute_start_ns, CAST(to_server_bytes AS BIGINT) AS to_server_bytes,
       CAST(from_server_bytes AS BIGINT) AS from_server_bytes,
       greatest(to_server_bytes, from_server_bytes) * 8 / CAST(60 AS DOUBLE) AS demand_bps,
       greatest(to_server_bytes, from_server_bytes) * 8 / CAST({bps * 60} AS DOUBLE) AS utilization,
       greatest(to_server_bytes, from_server_bytes) * 8 > {bps * 60} AS over_capacity
FROM minutes
ORDER BY minute_start_ns
""")


def per_client(ds_or_path, bandwidth=DEFAULT_BANDWIDTH, rtt=DEFAULT_RTT) -> pa.Table:
    """client_addr, calls, span_s (first call to last call or reply), added_s (calls × rtt),
    whatif_span_s, slowdown (whatif over traced span; null for a span of 0); ordered by
    added time, most first."""
    ds = as_dataset(ds_or_path)
    parse_bandwidth(bandwidth)
    rtt_ns = _rtt_ns(rtt)
    return ds.query(f"""
WITH {CALLS},
{_PER_CLIENT.format(rtt_ns=rtt_ns)}
SELECT client_addr, calls, span_s, added_s, span_s + added_s AS whatif_span_s, slowdown
FROM per_client
ORDER BY calls DESC, client_addr
""")


def per_operation(ds_or_path, bandwidth=DEFAULT_BANDWIDTH, rtt=DEFAULT_RTT) -> pa.Table:
    """Per RPC program, version and procedure (NFSv4: COMPOUND): program_name, version,
    operation, calls, answered, mean_latency_s (first call to first reply), added_s
    (calls × rtt), whatif_mean_latency_s, latency_factor (what-if over traced mean)."""
    ds = as_dataset(ds_or_path)
    parse_bandwidth(bandwidth)
    rtt_ns = _rtt_ns(rtt)
    return ds.query(f"""
WITH {CALLS}
SELECT program_name, version, procedure_name AS operation, count(*) AS calls,
       count(latency_ns) AS answered, avg(latency_ns) / 1e9 AS mean_latency_s,
       count(*) * {rtt_ns} / 1e9 AS added_s,
       (avg(latency_ns) + {rtt_ns}) / 1e9 AS whatif_mean_latency_s,
       (avg(latency_ns) + {rtt_ns}) / nullif(avg(latency_ns), 0) AS latency_factor
FROM calls
GROUP BY program_name, version, procedure_name
ORDER BY calls DESC, program_name, version, operation
""")


# -- in the report ---------------------------------------------------------------------------


def headline(tables: Tables) -> str | None:
    """'At 100 Mbit/s, 12 % of minutes exceed capacity (peak 340 Mbit/s); 30 ms more per call
    adds 2.1 min to the busiest client, up to ×1.8 a client's traced time'."""
    rows = tables["wan_whatif"].to_pylist()
    if not rows:
        return None
    r = rows[0]
    text = (f"At {units.rate(r['bandwidth_bps'])}, {units.percent(r['over_capacity_fraction'])}"
            f" of minutes exceed capacity")  # fmt: skip
    if r["peak_demand_bps"] is not None:
        text += f" (peak {units.rate(r['peak_demand_bps'])})"
    if r["calls"]:
        text += (f"; {units.duration(r['added_rtt_s'])} more per call adds "
                 f"{units.duration(r['max_client_added_s'])} to the busiest client")  # fmt: skip
        if r["max_client_slowdown"] is not None:
            text += f", up to ×{r['max_client_slowdown']:.3g} a client's traced time"
    return text


def plot(t: Tables, tz):
    rows = t["wan_whatif_per_minute"].to_pylist()
    if not rows:
        return plots.empty("WAN what-if")
    capacity = t["wan_whatif"].to_pylist()[0]["bandwidth_bps"]
    fig, ax = plots.subplots(figsize=(9, 4))
    x = plots.times([r["minute_start_ns"] for r in rows], tz)
    over = ["tab:red" if r["over_capacity"] else "tab:blue" for r in rows]
    ax.bar(x, [r["demand_bps"] / 1e6 for r in rows], width=1 / 1440, align="edge", color=over,
           label="demand per minute (busier direction)")  # fmt: skip
    ax.axhline(capacity / 1e6, color="k", linestyle="--", label="link bandwidth")
    plots.time_axis(ax, x)
    minute = dt.timedelta(minutes=1)
    ax.set_xlim(x[0] - minute / 4, x[-1] + minute * 5 / 4)  # whole bars, also a single one
    ax.set_ylim(bottom=0)
    ax.set_ylabel("Mbit/s")
    ax.set_title("WAN what-if: per-minute demand against the link")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


ANALYSIS = Analysis(
    "wan_whatif",
    wan_whatif,
    "The traffic put on a WAN link of the given bandwidth and added round trip: the "
    "share of minutes whose demand exceeds the link, and how much longer calls and "
    "each client's work would take if every call waited one more round trip.",
    parts={
        "per_minute": per_minute,
        "per_client": per_client,
        "per_operation": per_operation,
    },
    options=("bandwidth", "rtt"),
    headline=headline,
    plot=plot,
)
