"""top: the clients, servers and files with the most NFS calls and the most bytes.

Calls are NFS transactions (a retransmission is not a new call; an NFSv4 COMPOUND is one
call); a file's calls are the transactions with an operation on its handle (NFSv4: on the
current filehandle). Bytes are those the first reply to each READ returned and to each WRITE
acknowledged. Each kind lists the union of its top `n` by calls and its top `n` by bytes.
"""

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .files import NAME_ORDER, NAMED
from .opening import as_dataset
from .sqlkit import latest

KINDS = ("client", "server", "file")


def top(ds_or_path, n: int = 10) -> pa.Table:
    """kind (client, server, file), name (address or file handle), file_name (files: the
    latest name known, ciphertext in an anonymized dataset unless opened with the key), calls,
    bytes_read, bytes_written, call_share, byte_share (of the kind's total), calls_rank,
    bytes_rank (1 = most; ties by name); ordered by kind, then calls_rank."""
    ds = as_dataset(ds_or_path)
    per_kind = " UNION ALL ".join(
        f"""
  SELECT '{kind}' AS kind, {col} AS name, count(DISTINCT transaction_id) AS calls,
         sum(bytes_read) AS bytes_read, sum(bytes_written) AS bytes_written
  FROM activity WHERE {col} IS NOT NULL GROUP BY {col}"""
        for kind, col in zip(KINDS, ("client_addr", "server_addr", "fh"), strict=True)
    )
    kind_order = (
        "CASE t.kind " + " ".join(f"WHEN '{k}' THEN {i}" for i, k in enumerate(KINDS)) + " END"
    )
    table = ds.query(f"""
WITH first_replies AS (
  SELECT file_id, record, transaction_id, client_addr, server_addr
  FROM rpc WHERE direction = 'reply' AND NOT retransmit
),
activity AS (
  SELECT transaction_id, client_addr, server_addr, fh, 0 AS bytes_read, 0 AS bytes_written
  FROM nfs_ops WHERE direction = 'call'
  UNION ALL
  SELECT CAST(NULL AS BIGINT), r.client_addr, r.server_addr, w.fh,
         CASE WHEN w.operation = 'READ' THEN coalesce(w.bytes, 0) ELSE 0 END,
         CASE WHEN w.operation = 'WRITE' THEN coalesce(w.bytes, 0) ELSE 0 END
  FROM nfs_rw AS w
  JOIN first_replies AS r
    ON r.file_id = w.file_id AND r.record = w.record AND r.transaction_id = w.transaction_id
  WHERE w.direction = 'reply'
),
per_kind AS ({per_kind}
),
ranked AS (
  SELECT kind, name, calls, bytes_read, bytes_written,
         calls / CAST(nullif(sum(calls) OVER (PARTITION BY kind), 0) AS DOUBLE) AS call_share,
         (bytes_read + bytes_written)
           / CAST(nullif(sum(bytes_read + bytes_written) OVER (PARTITION BY kind), 0) AS DOUBLE)
           AS byte_share,
         row_number() OVER (PARTITION BY kind ORDER BY calls DESC, name) AS calls_rank,
         row_number() OVER (PARTITION BY kind ORDER BY bytes_read + bytes_written DESC, name)
           AS bytes_rank
  FROM per_kind
),
{NAMED},
names AS (SELECT fh, {latest("name", *NAME_ORDER)} AS name FROM named GROUP BY fh)
SELECT t.kind, t.name, CASE WHEN t.kind = 'file' THEN f.name END AS file_name,
       t.calls, CAST(t.bytes_read AS BIGINT) AS bytes_read,
       CAST(t.bytes_written AS BIGINT) AS bytes_written, t.call_share, t.byte_share,
       CAST(t.calls_rank AS BIGINT) AS calls_rank, CAST(t.bytes_rank AS BIGINT) AS bytes_rank
FROM ranked AS t LEFT JOIN names AS f ON f.fh = t.name AND t.kind = 'file'
WHERE t.calls_rank <= {int(n)} OR t.bytes_rank <= {int(n)}
ORDER BY {kind_order}, t.calls_rank
""")
    if ds.name_key:
        i = table.column_names.index("file_name")
        plain = [ds.name_key.decrypt(s) if s else s for s in table.column(i).to_pylist()]
        table = table.set_column(i, "file_name", pa.array(plain, pa.string()))
    return table


# -- in the report ---------------------------------------------------------------------------


def headline(tables: Tables) -> str | None:
    """'Client 10.0.0.1 has 45 % of the calls; server 10.0.0.2 has 60 % of the calls; the
    busiest file (data.bin) takes 30 % of the bytes' (a kind with one name is left out)."""
    rows = tables["top"].to_pylist()
    parts = []
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        if len({r["name"] for r in mine}) < 2 and kind != "file":
            continue  # a single client or server says nothing
        by_bytes = next((r for r in mine if r["bytes_rank"] == 1 and r["byte_share"]), None)
        by_calls = next((r for r in mine if r["calls_rank"] == 1 and r["call_share"]), None)
        if kind == "file":
            if by_bytes:
                label = by_bytes["file_name"] or by_bytes["name"][:16]
                parts.append(
                    f"the busiest file ({label}) takes {units.percent(by_bytes['byte_share'])} of the bytes"
                )
        elif by_calls:
            parts.append(
                f"{kind} {by_calls['name']} has {units.percent(by_calls['call_share'])} of the calls"
            )
    if not parts:
        return None
    text = "; ".join(parts)
    return text[0].upper() + text[1:]


def plot(t: Tables, tz):
    rows = t["top"].to_pylist()
    if not rows:
        return plots.empty("top")
    fig, axes = plots.subplots(1, 3, figsize=(12, 4))
    for ax, kind in zip(axes, ("client", "server", "file"), strict=True):
        mine = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["bytes_rank"])[:10]
        labels = [r["file_name"] or r["name"][:12] for r in mine][::-1]
        ax.barh(labels, [(r["bytes_read"] + r["bytes_written"]) / 2**20 for r in mine][::-1])
        ax.set_xlabel("MiB read and written")
        ax.set_title(f"top {kind}s by bytes")
    fig.tight_layout()
    return fig


ANALYSIS = Analysis(
    "top",
    top,
    "The clients, servers and files with the most NFS calls and the most bytes, with "
    "their share of the total: a few names with most of the share are where tuning or "
    "a problem matters most.",
    headline=headline,
    plot=plot,
)
