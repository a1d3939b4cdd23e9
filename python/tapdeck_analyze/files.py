"""files: per file handle, what the traffic reveals about the file and how it was accessed.

Names come from LOOKUP/CREATE/… replies (`nfs_names`), the directory path from following each
name's directory handle upwards as far as lookups reveal it. Names stay as stored: in an
anonymized dataset they are ciphertext (see README: decryption is not implemented yet).
An access is sequential when its offset is the end (offset + count) of the previous access of
the same kind (read or write) to the same file.
"""

import pyarrow as pa

from .dataset import as_dataset

ACCESSES = """
accesses AS (
  SELECT transaction_id, min(time_ns) AS time_ns, min(fh) AS fh, min(operation) AS operation,
         min("offset") AS "offset", min("count") AS "count"
  FROM nfs_rw
  WHERE direction = 'call'
  GROUP BY transaction_id
)"""


def files(ds_or_path) -> pa.Table:
    """One row per file handle read or written: fh, name, path, ftype, size, first_access_ns,
    last_access_ns, reads, writes, bytes_read, bytes_written, sequential_reads,
    sequential_writes; ordered by bytes moved, most first."""
    ds = as_dataset(ds_or_path)
    table = ds.query(f"""
WITH {ACCESSES},
ordered AS (
  SELECT fh, operation, time_ns, "offset", "count",
         lag("offset" + "count") OVER (PARTITION BY fh, operation ORDER BY time_ns, transaction_id)
           AS previous_end
  FROM accesses
),
first_replies AS (
  SELECT file_id, record, transaction_id
  FROM rpc WHERE direction = 'reply' AND NOT retransmit
),
moved AS (
  SELECT w.fh,
         sum(CASE WHEN w.operation = 'READ' THEN w.bytes ELSE 0 END) AS bytes_read,
         sum(CASE WHEN w.operation = 'WRITE' THEN w.bytes ELSE 0 END) AS bytes_written
  FROM nfs_rw AS w
  JOIN first_replies AS r
    ON r.file_id = w.file_id AND r.record = w.record AND r.transaction_id = w.transaction_id
  WHERE w.direction = 'reply'
  GROUP BY w.fh
),
usage AS (
  SELECT fh, min(time_ns) AS first_access_ns, max(time_ns) AS last_access_ns,
         sum(CASE WHEN operation = 'READ' THEN 1 ELSE 0 END) AS reads,
         sum(CASE WHEN operation = 'WRITE' THEN 1 ELSE 0 END) AS writes,
         sum(CASE WHEN operation = 'READ' AND "offset" = previous_end THEN 1 ELSE 0 END)
           AS sequential_reads,
         sum(CASE WHEN operation = 'WRITE' AND "offset" = previous_end THEN 1 ELSE 0 END)
           AS sequential_writes
  FROM ordered
  GROUP BY fh
),
attrs AS (
  SELECT fh, arg_max(ftype, time_ns) AS ftype, arg_max(size, time_ns) AS size
  FROM nfs_attrs WHERE size IS NOT NULL GROUP BY fh
),
names AS (
  SELECT fh, arg_max(name, time_ns) AS name
  FROM nfs_names WHERE fh IS NOT NULL AND name IS NOT NULL GROUP BY fh
)
SELECT u.fh, n.name, a.ftype, a.size, u.first_access_ns, u.last_access_ns,
       CAST(u.reads AS BIGINT) AS reads, CAST(u.writes AS BIGINT) AS writes,
       CAST(coalesce(m.bytes_read, 0) AS BIGINT) AS bytes_read,
       CAST(coalesce(m.bytes_written, 0) AS BIGINT) AS bytes_written,
       CAST(u.sequential_reads AS BIGINT) AS sequential_reads,
       CAST(u.sequential_writes AS BIGINT) AS sequential_writes
FROM usage AS u
LEFT JOIN moved AS m ON m.fh = u.fh
LEFT JOIN attrs AS a ON a.fh = u.fh
LEFT JOIN names AS n ON n.fh = u.fh
ORDER BY coalesce(m.bytes_read, 0) + coalesce(m.bytes_written, 0) DESC, u.fh
""")
    parents = ds.query("""
SELECT fh, arg_max(dir_fh, time_ns) AS dir_fh, arg_max(name, time_ns) AS name
FROM nfs_names WHERE fh IS NOT NULL AND name IS NOT NULL
GROUP BY fh
""").to_pylist()
    links = {r["fh"]: (r["dir_fh"], r["name"]) for r in parents}
    paths = [directory_path(fh, links) for fh in table.column("fh").to_pylist()]
    return table.add_column(2, "path", pa.array(paths, pa.string()))


def directory_path(fh: str, links: dict[str, tuple[str, str]]) -> str | None:
    """The path of `fh` as far up as names are known (`…/` marks an unknown ancestor)."""
    parts, seen = [], set()
    while fh in links and fh not in seen:
        seen.add(fh)
        fh, name = links[fh]
        parts.append(name)
    if not parts:
        return None
    prefix = "" if fh is None else "…/"
    return prefix + "/".join(reversed(parts))
