"""SQL fragments shared by the analyses, in the portable subset both engines run."""

# Percentiles as parts per 10 000 so that ranks are computed with integers only.
PERCENTILES = {"p50": 5000, "p90": 9000, "p99": 9900, "p99_9": 9990, "p99_99": 9999}


def nearest_rank(
    source: str,
    groups: list[str],
    value: str,
    percentiles: dict[str, int],
    weight: str = "1",
    prefix: str = "",
    suffix: str = "",
) -> str:
    """Exact nearest-rank percentiles of `value` per group of `source` (a table or CTE name).

    The p-th percentile is the smallest value whose cumulative count reaches ceil(p·n), the
    definition in the HP papers and in most textbooks. Comparing `cum · 10000 >= p · n` keeps
    it in integers, so DuckDB and Spark give the same row, and values may carry a weight (a
    count of identical intervals) instead of being repeated.
    """
    g = ", ".join(groups)
    gsel = g + ", " if groups else ""
    part = f"PARTITION BY {g} " if groups else ""
    picks = ",\n       ".join(
        f"min(CASE WHEN cum * 10000 >= {p} * total THEN v END) AS {prefix}{name}{suffix}"
        for name, p in percentiles.items()
    )
    group_by = f"\nGROUP BY {g}" if groups else ""
    return f"""
SELECT {gsel}{picks}
FROM (
  SELECT {gsel}v,
         sum(n) OVER ({part}ORDER BY v ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cum,
         sum(n) OVER ({part.strip()}) AS total
  FROM (SELECT {gsel}{value} AS v, sum({weight}) AS n FROM {source} GROUP BY {gsel}{value}) AS w
) AS c{group_by}"""


def percentile_disc(value: str, p: float) -> str:
    """The exact nearest-rank p-th percentile of `value` as an aggregate (nulls ignored): the
    smallest value whose cumulative count reaches ceil(p·n). DuckDB's quantile_disc and
    Spark's percentile_disc (what sqlglot makes of it) both pick that value; one sort per
    group instead of a window over every row. tests/test_nfs.py checks it against
    `nearest_rank` and a brute-force computation."""
    return f"quantile_disc({value}, {p!r})"


def percentiles_disc(value: str, ps) -> str:
    """`percentile_disc` for several p at once, as a list (index it from 1): one collection
    and sort of the group's values instead of one per percentile."""
    return f"quantile_disc({value}, [{', '.join(repr(float(p)) for p in ps)}])"


def latest(value: str, *order: str) -> str:
    """The aggregate: `value` of the row with the greatest (`order`…, `value`), rows whose value
    is NULL left out. DuckDB's arg_max skips NULL values but Spark's MAX_BY does not, so NULLs
    are filtered explicitly; the value is the last key so that rows tied on `order` give the
    same answer on both engines. The `order` keys must not be NULL."""
    return f"arg_max({value}, {_key(*order, value)}) FILTER (WHERE {value} IS NOT NULL)"


def first_row(columns: list[str], *order: str) -> str:
    """The aggregate: a struct of `columns` (NULLs kept) from the row with the smallest
    (`order`…), which must identify one row: all columns come from the same row, on both
    engines."""
    row = ", ".join(f"{c} := {c}" for c in columns)
    return f"arg_min(struct_pack({row}), {_key(*order)})"


def last_row(columns: list[str], *order: str) -> str:
    """As `first_row`, from the row with the greatest (`order`…)."""
    return "arg_max" + first_row(columns, *order).removeprefix("arg_min")


def _key(*exprs: str) -> str:
    """Several sort keys as one value that both engines order field by field (a struct)."""
    return "struct_pack(" + ", ".join(f"k{i} := {e}" for i, e in enumerate(exprs)) + ")"


def bucket(time: str, width_ns: int, origin: str | int = 0) -> str:
    """Start time of the interval of `width_ns` (counted from `origin`) that holds `time`."""
    if origin == 0:
        return f"({time} // {width_ns} * {width_ns})"
    return f"(({time} - {origin}) // {width_ns} * {width_ns} + {origin})"


MINUTE_NS = 60_000_000_000


def floor_edge(value: str, edges: list[int]) -> str:
    """The greatest of `edges` (ascending integers) at or below `value`; NULL below the first
    edge or for a NULL value. A CASE of integer comparisons, so that both engines put a value
    on an edge in the same bucket (a float log would not)."""
    whens = " ".join(f"WHEN {value} >= {e} THEN {e}" for e in reversed(edges))
    return f"(CASE {whens} END)"


def next_edge(lower: str, edges: list[int]) -> str:
    """The edge after `lower` (one of `edges`): a bucket's exclusive upper bound; NULL for the
    last edge."""
    whens = " ".join(f"WHEN {a} THEN {b}" for a, b in zip(edges, edges[1:], strict=False))
    return f"(CASE {lower} {whens} END)"


# 0, then powers of two: the buckets [0, 1), [1, 2), [2, 4) … of sizes and run lengths.
POWERS_OF_TWO = [0] + [1 << k for k in range(63)]
