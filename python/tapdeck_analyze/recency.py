"""recency: how recently the data a read asks for was accessed before, and what an LRU read
cache of each size would have hit.

Accesses are NFS READ and WRITE calls (first transmissions), in time order, over 4 KiB blocks
(file handle, offset div 4096). The hit ratios come from exact LRU stack distances (Mattson et
al.), computed in one pass with a Fenwick tree: a block's distance is the number of distinct
blocks touched since its previous access, plus one, and an LRU cache of C blocks hits exactly
when the distance is at most C. Reads and writes both move blocks to the top of the stack; only
reads are counted, and a read hits only when all its blocks hit. Single-node only.
"""

import math

import pyarrow as pa

from . import plots, units
from .analysis import Analysis, Tables
from .files import ACCESSES
from .opening import as_dataset
from .reduce import QUANTILES, TOP, Shown

BLOCK = 4096
MIB = 1 << 20

# Edges of the recency histogram in seconds: 1 µs to about 11 days, two bins per decade.
EDGES_S = [10.0**e for e in [x / 2 for x in range(-12, 13)]]


def _accesses(ds) -> list[tuple]:
    rows = ds.query(f"""
WITH {ACCESSES}
SELECT time_ns, fh, operation, "offset", "count"
FROM accesses
WHERE fh IS NOT NULL AND "offset" IS NOT NULL AND "count" IS NOT NULL
ORDER BY time_ns, transaction_id
""")
    return list(
        zip(
            *(
                rows.column(c).to_pylist()
                for c in ("time_ns", "fh", "operation", "offset", "count")
            ),
            strict=True,
        )
    )


def blocks_of(offset: int, count: int) -> range:
    """The 4 KiB blocks an access touches (a zero-length access touches its offset's block)."""
    return range(offset // BLOCK, (offset + max(count, 1) - 1) // BLOCK + 1)


class _Fenwick:
    def __init__(self, n: int):
        self.tree = [0] * (n + 1)

    def add(self, i: int, delta: int) -> None:
        i += 1
        while i < len(self.tree):
            self.tree[i] += delta
            i += i & -i

    def prefix(self, i: int) -> int:
        """Sum of positions 0..i-1."""
        total = 0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total


def read_stack_distances(accesses) -> list[tuple[int, float]]:
    """For every read: (bytes asked, the largest LRU stack distance among its blocks; inf if
    any block was never accessed before)."""
    total_blocks = sum(len(blocks_of(a[3], a[4])) for a in accesses)
    tree = _Fenwick(total_blocks)
    last: dict[tuple, int] = {}
    pos = 0
    reads = []
    for _t, fh, op, offset, count in accesses:
        worst = 0.0
        for block in blocks_of(offset, count):
            key = (fh, block)
            prev = last.get(key)
            if prev is None:
                worst = math.inf
            else:
                # distinct blocks whose latest access lies after prev: each holds one mark
                worst = max(worst, tree.prefix(pos) - tree.prefix(prev + 1) + 1)
                tree.add(prev, -1)
            tree.add(pos, 1)
            last[key] = pos
            pos += 1
        if op == "READ":
            reads.append((count, worst))
    return reads


def recency(ds_or_path) -> pa.Table:
    """LRU read-cache hit ratios, one row per cache size (1 MiB doubling, then the working set,
    the distinct blocks accessed): cache_bytes, cache_blocks, reads, hit_reads, hit_ratio,
    read_bytes, hit_bytes, byte_hit_ratio."""
    ds = as_dataset(ds_or_path)
    accesses = _accesses(ds)
    reads = read_stack_distances(accesses)
    working_set = len({(fh, b) for _t, fh, _op, o, c in accesses for b in blocks_of(o, c)})
    sizes = []
    blocks = MIB // BLOCK
    while blocks < working_set:
        sizes.append(blocks)
        blocks *= 2
    sizes.append(max(working_set, 1))
    read_bytes = sum(c for c, _ in reads)
    rows = []
    for cache in sizes:
        hits = [(c, d) for c, d in reads if d <= cache]
        hit_bytes = sum(c for c, _ in hits)
        rows.append(
            dict(
                cache_bytes=cache * BLOCK,
                cache_blocks=cache,
                reads=len(reads),
                hit_reads=len(hits),
                hit_ratio=len(hits) / len(reads) if reads else None,
                read_bytes=read_bytes,
                hit_bytes=hit_bytes,
                byte_hit_ratio=hit_bytes / read_bytes if read_bytes else None,
            )
        )
    return pa.Table.from_pylist(rows, schema=_HIT_SCHEMA)


_HIT_SCHEMA = pa.schema(
    [
        ("cache_bytes", pa.int64()),
        ("cache_blocks", pa.int64()),
        ("reads", pa.int64()),
        ("hit_reads", pa.int64()),
        ("hit_ratio", pa.float64()),
        ("read_bytes", pa.int64()),
        ("hit_bytes", pa.int64()),
        ("byte_hit_ratio", pa.float64()),
    ]
)


def recency_distribution(ds_or_path) -> pa.Table:
    """For reads, the time since the same file (`level` file) and the same block (`level`
    block, one value per block a read touches) was last read or written, as a histogram with
    two bins per decade: level, lower_s, upper_s, reads, cumulative_fraction. `lower_s` null
    counts reads of data never accessed before."""
    ds = as_dataset(ds_or_path)
    last_file: dict[str, int] = {}
    last_block: dict[tuple, int] = {}
    samples: dict[str, list[float | None]] = {"file": [], "block": []}
    for t, fh, op, offset, count in _accesses(ds):
        if op == "READ":
            prev = last_file.get(fh)
            samples["file"].append(None if prev is None else (t - prev) / 1e9)
            for b in blocks_of(offset, count):
                prev = last_block.get((fh, b))
                samples["block"].append(None if prev is None else (t - prev) / 1e9)
        last_file[fh] = t
        for b in blocks_of(offset, count):
            last_block[(fh, b)] = t
    rows = []
    for level, values in samples.items():
        if not values:
            continue
        bins = [0] * (len(EDGES_S) + 1)
        never = 0
        for v in values:
            if v is None:
                never += 1
            else:
                bins[sum(1 for e in EDGES_S if v >= e)] += 1
        seen = never
        rows.append(dict(level=level, lower_s=None, upper_s=None, reads=never,
                         cumulative_fraction=seen / len(values)))  # fmt: skip
        for i, n in enumerate(bins):
            if not n:
                continue
            seen += n
            rows.append(
                dict(
                    level=level,
                    lower_s=EDGES_S[i - 1] if i else 0.0,
                    upper_s=EDGES_S[i] if i < len(EDGES_S) else None,
                    reads=n,
                    cumulative_fraction=seen / len(values),
                )
            )
    return pa.Table.from_pylist(rows, schema=_DIST_SCHEMA)


_DIST_SCHEMA = pa.schema(
    [
        ("level", pa.string()),
        ("lower_s", pa.float64()),
        ("upper_s", pa.float64()),
        ("reads", pa.int64()),
        ("cumulative_fraction", pa.float64()),
    ]
)


# -- in the report ---------------------------------------------------------------------------


def headline(t: Tables) -> str | None:
    rows = t["recency"].to_pylist()
    if not rows or not rows[0]["reads"]:
        return None
    whole = rows[-1]
    best = whole["hit_ratio"]
    if not best:
        return f"No read of {units.count(whole['reads'])} asked for data seen before."
    # The smallest cache that gets within 90 % of what the whole working set would hit.
    enough = next(r for r in rows if r["hit_ratio"] >= 0.9 * best)
    return (
        f"An LRU cache of {units.size(enough['cache_bytes'])} would serve "
        f"{units.percent(enough['hit_ratio'])} of reads; the whole working set "
        f"({units.size(whole['cache_bytes'])}) {units.percent(best)}."
    )


def plot(t: Tables, tz):
    rows = t["recency"].to_pylist()
    if not rows or not rows[0]["reads"]:
        return plots.empty("recency")
    fig, ax = plots.subplots(figsize=(7, 4))
    x = [r["cache_bytes"] for r in rows]
    ax.plot(x, [r["hit_ratio"] for r in rows], "o-", label="requests")
    ax.plot(x, [r["byte_hit_ratio"] for r in rows], "s-", label="bytes")
    ax.set_xscale("log", base=2)
    plots.human(ax.xaxis, units.size)
    ax.set_xlabel("LRU cache size")
    ax.set_ylabel("hit ratio")
    ax.set_ylim(0, 1)
    ax.set_title("read cache hit ratio")
    ax.legend()
    fig.tight_layout()
    return fig


def shown_cache_sizes(rows, columns) -> Shown:
    """Cache sizes spread over the table, the last the working set."""
    if len(rows) <= TOP:
        return Shown(rows, columns)
    step = -(-len(rows) // (TOP - 1))
    picked = rows[:-1:step] + rows[-1:]
    return Shown(
        picked, columns, f"{len(picked)} of {len(rows)} cache sizes, the last the working set."
    )


def shown_quantiles(rows, columns) -> Shown:
    """Per level, the share never accessed before and the quantiles of the time since."""
    out = []
    for level in dict.fromkeys(r["level"] for r in rows):
        bins = [r for r in rows if r["level"] == level]
        never = next((r for r in bins if r["lower_s"] is None), None)
        row = {"level": level, "never_accessed_fraction": never["cumulative_fraction"] if never
               else 0.0}  # fmt: skip
        for q in ("p50", "p90", "p99"):
            hit = next((r for r in bins if r["cumulative_fraction"] >= QUANTILES[q] - 1e-12),
                       None)  # fmt: skip
            # within the bin: at most its upper edge (null when never accessed before)
            row[f"{q}_upto_s"] = hit["upper_s"] if hit and hit["lower_s"] is not None else None
        out.append(row)
    cols = ["level", "never_accessed_fraction", "p50_upto_s", "p90_upto_s", "p99_upto_s"]
    note = (
        "Time since the same file or block was last accessed, at a read: quantiles as the upper "
        "edge of their histogram bin (empty when the read's data was never accessed before)."
    )
    return Shown(out, cols, note)


ANALYSIS = Analysis(
    "recency",
    recency,
    "The fraction of reads (and of bytes read) an LRU cache of each size would have "
    "served; where the curve flattens, a bigger cache stops helping.",
    parts={"distribution": recency_distribution},
    headline=headline,
    plot=plot,
    shown={"recency": shown_cache_sizes, "recency_distribution": shown_quantiles},
)
