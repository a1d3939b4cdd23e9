"""sizes: packet sizes (by size and by rank, as in the T-Labs paper's Figure 3), the protocol
mix, top talkers and top flows by bytes. Sizes are lengths on the wire."""

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .opening import as_dataset
from .reduce import QUANTILES, Shown
from .sqlkit import first_row

PROTOCOL_NAMES = {1: "ICMP", 2: "IGMP", 6: "TCP", 17: "UDP", 47: "GRE", 50: "ESP", 58: "ICMPv6",
                  132: "SCTP"}  # fmt: skip


def sizes(ds_or_path) -> pa.Table:
    """One row per wire length: wire_len, packets, bytes, fraction (of packets), cumulative
    fraction (by size), rank (1 = the most frequent size; ties by size); ordered by size."""
    ds = as_dataset(ds_or_path)
    return ds.query("""
WITH by_size AS (
  SELECT wire_len, count(*) AS packets, CAST(sum(wire_len) AS BIGINT) AS bytes
  FROM packets GROUP BY wire_len
)
SELECT wire_len, packets, bytes,
       packets / CAST(sum(packets) OVER () AS DOUBLE) AS fraction,
       sum(packets) OVER (ORDER BY wire_len ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
         / CAST(sum(packets) OVER () AS DOUBLE) AS cumulative_fraction,
       CAST(row_number() OVER (ORDER BY packets DESC, wire_len) AS BIGINT) AS rank
FROM by_size
ORDER BY wire_len
""")


def protocols(ds_or_path) -> pa.Table:
    """The protocol mix: ip_version, protocol, protocol_name, packets, bytes, packet_share,
    byte_share; ordered by bytes, most first."""
    ds = as_dataset(ds_or_path)
    names = " ".join(f"WHEN {n} THEN '{s}'" for n, s in PROTOCOL_NAMES.items())
    return ds.query(f"""
WITH mix AS (
  SELECT ip_version, protocol, count(*) AS packets, CAST(sum(wire_len) AS BIGINT) AS bytes
  FROM packets GROUP BY ip_version, protocol
)
SELECT ip_version, protocol,
       CASE WHEN protocol IS NULL THEN 'non-IP'
            ELSE coalesce(CASE protocol {names} END, concat('IP protocol ', CAST(protocol AS VARCHAR)))
       END AS protocol_name,
       packets, bytes,
       packets / CAST(sum(packets) OVER () AS DOUBLE) AS packet_share,
       bytes / CAST(sum(bytes) OVER () AS DOUBLE) AS byte_share
FROM mix
ORDER BY bytes DESC, packets DESC, ip_version, protocol
""")


def talkers(ds_or_path, top: int = 20) -> pa.Table:
    """The `top` addresses by bytes sent plus received: addr, packets_sent, bytes_sent,
    packets_received, bytes_received, bytes_total."""
    ds = as_dataset(ds_or_path)
    return ds.query(f"""
WITH ends AS (
  SELECT src_addr AS addr, 1 AS packets_sent, wire_len AS bytes_sent,
         0 AS packets_received, 0 AS bytes_received
  FROM packets WHERE src_addr IS NOT NULL
  UNION ALL
  SELECT dst_addr, 0, 0, 1, wire_len FROM packets WHERE dst_addr IS NOT NULL
)
SELECT addr,
       CAST(sum(packets_sent) AS BIGINT) AS packets_sent,
       CAST(sum(bytes_sent) AS BIGINT) AS bytes_sent,
       CAST(sum(packets_received) AS BIGINT) AS packets_received,
       CAST(sum(bytes_received) AS BIGINT) AS bytes_received,
       CAST(sum(bytes_sent + bytes_received) AS BIGINT) AS bytes_total
FROM ends
GROUP BY addr
ORDER BY bytes_total DESC, addr
LIMIT {int(top)}
""")


def flows(ds_or_path, top: int = 20) -> pa.Table:
    """The `top` flows (both directions of a connection) by bytes: flow_id, protocol, addr_a,
    port_a (the sender of the flow's first packet), addr_b, port_b, packets, bytes,
    first_time_ns, last_time_ns."""
    ds = as_dataset(ds_or_path)
    # The first packet (by time, then file and record, so ties go the same way on both engines)
    # gives the flow's direction: all its columns from that one packet.
    first = first_row(["protocol", "src_addr", "src_port", "dst_addr", "dst_port"],
                      "time_ns", "file_id", "record")  # fmt: skip
    return ds.query(f"""
WITH per_flow AS (
  SELECT flow_id, {first} AS pkt,
         count(*) AS packets, CAST(sum(wire_len) AS BIGINT) AS bytes,
         min(time_ns) AS first_time_ns, max(time_ns) AS last_time_ns
  FROM packets
  WHERE flow_id IS NOT NULL
  GROUP BY flow_id
)
SELECT f.flow_id, f.pkt.protocol AS protocol,
       f.pkt.src_addr AS addr_a, f.pkt.src_port AS port_a,
       f.pkt.dst_addr AS addr_b, f.pkt.dst_port AS port_b,
       f.packets, f.bytes, f.first_time_ns, f.last_time_ns
FROM per_flow AS f
ORDER BY f.bytes DESC, f.flow_id
LIMIT {int(top)}
""")


# -- in the report ---------------------------------------------------------------------------


def headline(t: Tables) -> str | None:
    rows = t["sizes"].to_pylist()
    if not rows:
        return None
    median = next(r["wire_len"] for r in rows if r["cumulative_fraction"] >= 0.5)
    common = min(rows, key=lambda r: r["rank"])
    text = (
        f"Median packet {units.size(median)}; the most common size is "
        f"{units.size(common['wire_len'])} ({units.percent(common['fraction'])} of packets)"
    )
    protocols = t.get("sizes_protocols")
    top = protocols.to_pylist()[0] if protocols is not None and protocols.num_rows else None
    if top:
        text += f"; {top['protocol_name']} carries {units.percent(top['byte_share'])} of the bytes"
    return text + "."


def plot(t: Tables, tz):
    rows = t["sizes"].to_pylist()
    if not rows:
        return plots.empty("sizes")
    fig, (a, b) = plots.subplots(1, 2, figsize=(10, 4))
    a.step([r["wire_len"] for r in rows], [r["cumulative_fraction"] for r in rows], where="post")
    plots.human(a.xaxis, units.size)
    a.set_xlabel("length on the wire")
    a.set_ylabel("cumulative fraction of packets")
    a.set_title("by size")
    ranked = sorted(rows, key=lambda r: r["rank"])
    b.loglog([r["rank"] for r in ranked], [r["fraction"] for r in ranked], "o-", markersize=3)
    b.set_xlabel("rank of the size")
    b.set_ylabel("fraction of packets")
    b.set_title("by rank")
    fig.tight_layout()
    return fig


def shown_quantiles(rows, columns) -> Shown:
    """The packet sizes as quantiles, and the most common sizes."""
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


ANALYSIS = Analysis(
    "sizes",
    sizes,
    "Packet sizes on the wire: the cumulative curve shows which sizes carry the "
    "packets, the rank plot how few sizes dominate; protocols, talkers and flows show "
    "where the bytes go.",
    parts={"protocols": protocols, "talkers": talkers, "flows": flows},
    headline=headline,
    plot=plot,
    shown={"sizes": shown_quantiles},
)
