"""file_sizes: how large the files are, and how the bytes read and written spread over files
by size.

A file's size is the last one its attributes show in the range (`nfs_attrs`, any operation
and version; by time, then file and record). Files whose last known type is not a regular
file (directories, links …) are left out; a file whose type is never given counts. Sizes go
into power-of-two buckets [2^k, 2^(k+1)), plus [0, 1) for empty files. Bytes are those the
first reply to each READ returned and to each WRITE acknowledged, counted under the file's
size bucket; files read or written whose size no attributes show form a bucket of their own
(`size_lower_bytes` null).
"""

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .files import ATTR_ORDER
from .opening import as_dataset
from .sqlkit import POWERS_OF_TWO, floor_edge, latest, next_edge

# Bytes moved per file handle: every file read or written (a call is enough), with the bytes
# of its first replies (READ: returned, WRITE: acknowledged).
MOVED = """
first_replies AS (
  SELECT file_id, record, transaction_id
  FROM rpc WHERE direction = 'reply' AND NOT retransmit
),
accessed AS (
  SELECT fh, 0 AS bytes_read, 0 AS bytes_written
  FROM nfs_rw WHERE direction = 'call' AND fh IS NOT NULL
  UNION ALL
  SELECT w.fh,
         CASE WHEN w.operation = 'READ' THEN coalesce(w.bytes, 0) ELSE 0 END,
         CASE WHEN w.operation = 'WRITE' THEN coalesce(w.bytes, 0) ELSE 0 END
  FROM nfs_rw AS w
  JOIN first_replies AS r
    ON r.file_id = w.file_id AND r.record = w.record AND r.transaction_id = w.transaction_id
  WHERE w.direction = 'reply' AND w.fh IS NOT NULL
),
moved AS (
  SELECT fh, sum(bytes_read) AS bytes_read, sum(bytes_written) AS bytes_written
  FROM accessed GROUP BY fh
)"""


def file_sizes(ds_or_path) -> pa.Table:
    """One row per size bucket holding a file: size_lower_bytes, size_upper_bytes (exclusive;
    both null for files read or written without a known size), files, file_fraction and
    cumulative_file_fraction (among files of known size; null on the unknown row),
    bytes_read, bytes_written, byte_fraction and cumulative_byte_fraction (of all bytes read
    and written, unknown sizes included); ordered by size, the unknown row last."""
    ds = as_dataset(ds_or_path)
    known = "CASE WHEN lower IS NOT NULL THEN files ELSE 0 END"
    return ds.query(f"""
WITH attrs AS (
  SELECT fh, {latest("ftype", *ATTR_ORDER)} AS ftype, {latest("size", *ATTR_ORDER)} AS size
  FROM nfs_attrs WHERE fh IS NOT NULL GROUP BY fh
),
sized AS (
  SELECT fh, size FROM attrs WHERE size IS NOT NULL AND (ftype IS NULL OR ftype = 1)
),
{MOVED},
per_file AS (
  SELECT s.size, coalesce(m.bytes_read, 0) AS bytes_read,
         coalesce(m.bytes_written, 0) AS bytes_written
  FROM sized AS s FULL OUTER JOIN moved AS m ON s.fh = m.fh
),
buckets AS (
  SELECT {floor_edge("size", POWERS_OF_TWO)} AS lower, count(*) AS files,
         sum(bytes_read) AS bytes_read, sum(bytes_written) AS bytes_written
  FROM per_file GROUP BY 1
),
totals AS (
  SELECT lower, files, bytes_read, bytes_written,
         sum({known}) OVER () AS known_files,
         sum({known}) OVER (ORDER BY lower ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
           AS files_so_far,
         sum(bytes_read + bytes_written) OVER () AS all_bytes,
         sum(bytes_read + bytes_written)
           OVER (ORDER BY lower ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS bytes_so_far
  FROM buckets
)
SELECT lower AS size_lower_bytes, {next_edge("lower", POWERS_OF_TWO)} AS size_upper_bytes,
       CAST(files AS BIGINT) AS files,
       CASE WHEN lower IS NOT NULL THEN files / CAST(known_files AS DOUBLE) END AS file_fraction,
       CASE WHEN lower IS NOT NULL THEN files_so_far / CAST(known_files AS DOUBLE) END
         AS cumulative_file_fraction,
       CAST(bytes_read AS BIGINT) AS bytes_read, CAST(bytes_written AS BIGINT) AS bytes_written,
       (bytes_read + bytes_written) / CAST(nullif(all_bytes, 0) AS DOUBLE) AS byte_fraction,
       bytes_so_far / CAST(nullif(all_bytes, 0) AS DOUBLE) AS cumulative_byte_fraction
FROM totals
ORDER BY lower
""")


# -- in the report ---------------------------------------------------------------------------


def headline(tables: Tables) -> str | None:
    """'Half of the 1,234 files are under 16 KiB; 73 % of the bytes read and written go to
    files of 1 GiB or more'."""
    rows = tables["file_sizes"].to_pylist()
    sized = [r for r in rows if r["size_lower_bytes"] is not None]
    parts = []
    if sized:
        median = next(r for r in sized if r["cumulative_file_fraction"] >= 0.5)
        n = sum(r["files"] for r in sized)
        upper = median["size_upper_bytes"]
        under = f"under {units.size(upper)}" if upper else "of 4 EiB or more"
        parts.append(f"half of the {n:,} files are {under}")
    total = sum(r["bytes_read"] + r["bytes_written"] for r in rows)
    if total and sized:
        # the largest size from which on the files took at least half of the bytes
        above, share, lower = 0, None, None
        for r in reversed(sized):
            above += r["bytes_read"] + r["bytes_written"]
            if above * 2 >= total:
                share, lower = above / total, r["size_lower_bytes"]
                break
        if share is not None:
            parts.append(f"{units.percent(share)} of the bytes read and written go to files "
                         f"of {units.size(lower)} or more")  # fmt: skip
    if not parts:
        return None
    text = "; ".join(parts)
    return text[0].upper() + text[1:]


def plot(t: Tables, tz):
    rows = [r for r in t["file_sizes"].to_pylist() if r["size_lower_bytes"] is not None]
    if not rows:
        return plots.empty("file sizes")
    fig, ax = plots.subplots(figsize=(7, 4))
    x = [max(r["size_upper_bytes"] or 2**63, 1) for r in rows]  # a bucket's curve ends at its top
    ax.step(x, [r["cumulative_file_fraction"] for r in rows], where="post", label="files")
    ax.step(x, [r["cumulative_byte_fraction"] for r in rows], where="post",
            label="bytes read and written")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("file size (bytes, bucket upper bound)")
    ax.set_ylabel("cumulative fraction")
    ax.set_ylim(0, 1.02)
    ax.set_title("file sizes: files and bytes by the size of their file")
    ax.legend()
    fig.tight_layout()
    return fig


ANALYSIS = Analysis(
    "file_sizes",
    file_sizes,
    "How many files fall in each size bucket (their last size seen) and how many of the "
    "bytes read and written go to files of that size: where the byte curve rises, the "
    "data lives; a file count and a byte count far apart mean many small files and a "
    "few big ones that carry the traffic.",
    headline=headline,
    plot=plot,
)
