"""sequentiality: per file and client, how often a read (or write) continues where the previous
one ended, and how long the runs of such accesses are.

Accesses are READ and WRITE calls (first transmissions) with a file handle, offset and count,
in the order of their calls (time, then transaction id). Within one file, one client and one
kind (read or write), an access is sequential when its offset is the previous access's offset
plus its count. A run is a maximal sequence of accesses each sequential to the one before; an
access that continues nothing starts a new run, so a run's length is at least 1.
"""

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .files import ACCESSES
from .opening import as_dataset
from .sqlkit import POWERS_OF_TWO, floor_edge, next_edge

STREAM = "a.fh, c.client_addr, a.operation"

RUNS = f"""
{ACCESSES},
calls AS (
  SELECT transaction_id, client_addr FROM rpc WHERE direction = 'call' AND NOT retransmit
),
ordered AS (
  SELECT {STREAM}, a.time_ns, a.transaction_id,
         CASE WHEN a."offset" = lag(a."offset" + a."count")
                     OVER (PARTITION BY {STREAM} ORDER BY a.time_ns, a.transaction_id)
              THEN 1 ELSE 0 END AS sequential
  FROM accesses AS a JOIN calls AS c ON c.transaction_id = a.transaction_id
  WHERE a.fh IS NOT NULL AND a."offset" IS NOT NULL AND a."count" IS NOT NULL
),
numbered AS (
  SELECT fh, client_addr, operation, sequential,
         sum(1 - sequential) OVER (PARTITION BY fh, client_addr, operation
                                   ORDER BY time_ns, transaction_id
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run
  FROM ordered
),
runs AS (
  SELECT fh, client_addr, operation, run, count(*) AS length, sum(sequential) AS sequential
  FROM numbered GROUP BY fh, client_addr, operation, run
)"""


def sequentiality(ds_or_path) -> pa.Table:
    """One row per file, client and kind (READ or WRITE): fh, client_addr, operation, accesses,
    sequential, sequential_fraction (of the accesses that have a previous one: null for a
    single access), runs, longest_run; ordered by accesses, most first."""
    ds = as_dataset(ds_or_path)
    return ds.query(f"""
WITH {RUNS}
SELECT fh, client_addr, operation,
       CAST(sum(length) AS BIGINT) AS accesses, CAST(sum(sequential) AS BIGINT) AS sequential,
       sum(sequential) / CAST(nullif(sum(length) - 1, 0) AS DOUBLE) AS sequential_fraction,
       count(*) AS runs, CAST(max(length) AS BIGINT) AS longest_run
FROM runs
GROUP BY fh, client_addr, operation
ORDER BY accesses DESC, fh, client_addr, operation
""")


def run_lengths(ds_or_path) -> pa.Table:
    """The run-length distribution per kind: operation, length_lower, length_upper (exclusive;
    power-of-two buckets 1, 2–3, 4–7 …), runs, accesses (in those runs), run_fraction,
    access_fraction and cumulative_access_fraction (of the kind's accesses, by length)."""
    ds = as_dataset(ds_or_path)
    lengths = POWERS_OF_TWO[1:]
    per_op = "PARTITION BY operation"
    return ds.query(f"""
WITH {RUNS},
buckets AS (
  SELECT operation, {floor_edge("length", lengths)} AS lower, count(*) AS runs,
         sum(length) AS accesses
  FROM runs GROUP BY 1, 2
)
SELECT operation, lower AS length_lower, {next_edge("lower", lengths)} AS length_upper,
       runs, CAST(accesses AS BIGINT) AS accesses,
       runs / CAST(sum(runs) OVER ({per_op}) AS DOUBLE) AS run_fraction,
       accesses / CAST(sum(accesses) OVER ({per_op}) AS DOUBLE) AS access_fraction,
       sum(accesses) OVER ({per_op} ORDER BY lower
                           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
         / CAST(sum(accesses) OVER ({per_op}) AS DOUBLE) AS cumulative_access_fraction
FROM buckets
ORDER BY operation, lower
""")


# -- in the report ---------------------------------------------------------------------------


def headline(tables: Tables) -> str | None:
    """'92 % of reads and 40 % of writes continue the previous one (same file and client);
    runs average 12 reads and 1.5 writes'."""
    rows = tables["sequentiality"].to_pylist()
    shares, means = [], []
    for op, noun in (("READ", "reads"), ("WRITE", "writes")):
        mine = [r for r in rows if r["operation"] == op]
        after_first = sum(r["accesses"] - 1 for r in mine)
        if after_first:
            seq = sum(r["sequential"] for r in mine)
            shares.append(f"{units.percent(seq / after_first)} of {noun}")
        if mine:
            runs = sum(r["runs"] for r in mine)
            mean = sum(r["accesses"] for r in mine) / runs
            means.append(f"{mean:.3g} {noun}")
    if not means:
        return None
    text = f"Runs of sequential accesses average {' and '.join(means)}"
    if shares:
        text = (f"{' and '.join(shares)} continue the previous one (same file and client); "
                f"runs average {' and '.join(means)}")  # fmt: skip
    return text[0].upper() + text[1:]


def plot(t: Tables, tz):
    rows = t["sequentiality_runs"].to_pylist()
    if not rows:
        return plots.empty("sequentiality")
    fig, ax = plots.subplots(figsize=(7, 4))
    lengths = sorted({r["length_lower"] for r in rows})
    ops = sorted({r["operation"] for r in rows})
    width = 0.8 / len(ops)
    for i, op in enumerate(ops):
        share = {r["length_lower"]: r["access_fraction"] for r in rows if r["operation"] == op}
        ax.bar([k + i * width for k in range(len(lengths))],
               [share.get(n, 0) for n in lengths], width, label=op)  # fmt: skip
    ax.set_xticks([k + width * (len(ops) - 1) / 2 for k in range(len(lengths))],
                  [f"{n}–{2 * n - 1}" if n > 1 else "1" for n in lengths])  # fmt: skip
    ax.set_xlabel("run length (consecutive sequential accesses)")
    ax.set_ylabel("fraction of accesses")
    ax.set_title("sequential runs per file and client")
    ax.legend()
    fig.tight_layout()
    return fig


ANALYSIS = Analysis(
    "sequentiality",
    sequentiality,
    "Per file and client, the share of reads and writes that start where the previous "
    "one ended, and how long such runs last: high shares and long runs mean streaming "
    "access that read-ahead and large transfers serve well.",
    parts={"runs": run_lengths},
    headline=headline,
    plot=plot,
)
