"""files: per file handle, what the traffic reveals about the file and how it was accessed.

Names come from LOOKUP/CREATE/… replies (`nfs_names`), the directory path from following each
name's directory handle upwards as far as lookups reveal it. In an anonymized dataset names
are ciphertext; given the key file (`key=`, `--key`) they are decrypted (names.py).
An access is sequential when its offset is the end (offset + count) of the previous access of
the same kind (read or write) to the same file.
"""

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .names import NameKey, key_for
from .opening import as_dataset
from .sqlkit import last_row, latest

ACCESSES = """
accesses AS (
  SELECT transaction_id, min(time_ns) AS time_ns, min(fh) AS fh, min(operation) AS operation,
         min("offset") AS "offset", min("count") AS "count"
  FROM nfs_rw
  WHERE direction = 'call'
  GROUP BY transaction_id
)"""


# The names a handle is known by. A LOOKUP/CREATE/OPEN… name wins over a READDIR entry (the
# entries include "." and "..", which name the directory and its parent from inside): READDIR
# entries rank below any other name (2^62 ns later than any capture time), and "." and ".."
# are left out (in an encrypted dataset "." is still recognisable: its handle is the directory's).
NAMED = """
named AS (
  SELECT fh, dir_fh, name, file_id, record,
         CASE WHEN operation IN ('READDIR', 'READDIRPLUS') THEN time_ns
              ELSE time_ns + 4611686018427387904 END AS rank_ns
  FROM nfs_names
  WHERE fh IS NOT NULL AND name IS NOT NULL AND name NOT IN ('.', '..')
    AND NOT (operation IN ('READDIR', 'READDIRPLUS') AND fh = dir_fh)
)"""

# How a file handle's rows are ordered to find the latest (`latest`, `last_row`): by time, and
# by file and record between rows of the same instant. The type and the size are each the last
# one known (pre-operation attributes carry a size but no type).
ATTR_ORDER = ("time_ns", "file_id", "record")
NAME_ORDER = ("rank_ns", "file_id", "record")


def files(ds_or_path, key=None) -> pa.Table:
    """One row per file handle read or written: fh, name, path, ftype, size, first_access_ns,
    last_access_ns, reads, writes, bytes_read, bytes_written, sequential_reads,
    sequential_writes; ordered by bytes moved, most first. `key` (a key file's path or a
    NameKey; default: the one the dataset was opened with) decrypts names and paths."""
    ds = as_dataset(ds_or_path)
    if key is not None and not isinstance(key, NameKey):
        key = key_for(ds.meta, key)
    key = key or ds.name_key
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
  SELECT fh, {latest("ftype", *ATTR_ORDER)} AS ftype, {latest("size", *ATTR_ORDER)} AS size
  FROM nfs_attrs GROUP BY fh
),
{NAMED},
names AS (SELECT fh, {latest("name", *NAME_ORDER)} AS name FROM named GROUP BY fh)
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
    # The directory and the name from one row: the row whose name `names` chose (ties on the
    # name broken by the directory).
    link = last_row(["dir_fh", "name"], *NAME_ORDER, "name", "coalesce(dir_fh, '')")
    parents = ds.query(f"""
WITH {NAMED},
links AS (SELECT fh, {link} AS link FROM named GROUP BY fh)
SELECT l.fh, l.link.dir_fh AS dir_fh, l.link.name AS name
FROM links AS l
""").to_pylist()

    def plain(s):
        s = key.decrypt(s) if key else s
        return None if s in (".", "..") else s

    links = {r["fh"]: (r["dir_fh"], plain(r["name"])) for r in parents if plain(r["name"])}
    paths = [directory_path(fh, links) for fh in table.column("fh").to_pylist()]
    if key:
        names = [plain(n) for n in table.column("name").to_pylist()]
        i = table.column_names.index("name")
        table = table.set_column(i, "name", pa.array(names, pa.string()))
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


# -- in the report ---------------------------------------------------------------------------


def headline(t: Tables) -> str | None:
    rows = t["files"].to_pylist()
    if not rows:
        return None
    moved = [r["bytes_read"] + r["bytes_written"] for r in rows]
    total = sum(moved)
    top = rows[0]
    name = top["path"] or top["name"] or f"handle {top['fh'][:12]}…"
    text = f"{units.counted(len(rows), 'file')} read or written"
    if total:
        text += (
            f"; the busiest, {name}, moved {units.size(moved[0])} "
            f"({units.percent(moved[0] / total)})"
        )
    reads = sum(r["reads"] for r in rows)
    sequential = sum(r["sequential_reads"] for r in rows)
    if reads:
        text += f"; {units.percent(sequential / reads)} of reads sequential"
    return text + "."


def plot(t: Tables, tz):
    rows = t["files"].to_pylist()[:20]
    if not rows:
        return plots.empty("files")
    fig, ax = plots.subplots(figsize=(9, 5))
    labels = [(r["path"] or r["name"] or r["fh"][:16]) for r in rows][::-1]
    ax.barh(labels, [r["bytes_read"] for r in rows][::-1], label="read")
    ax.barh(labels, [r["bytes_written"] for r in rows][::-1],
            left=[r["bytes_read"] for r in rows][::-1], label="written")  # fmt: skip
    plots.human(ax.xaxis, units.size)
    ax.set_xlabel("bytes moved")
    ax.set_title("files by bytes moved")
    ax.legend()
    fig.tight_layout()
    return fig


ANALYSIS = Analysis(
    "files",
    files,
    "The files read and written most, with how sequentially they were accessed: "
    "sequential reads near reads − 1 mean streaming access.",
    headline=headline,
    plot=plot,
)
