"""The analyses by name, in the report's order: what `run` and `report` call.

Each analysis is one module that ends with `ANALYSIS = Analysis(...)` (analysis.py): its
tables, headline, plot and how the report shows its tables. A new analysis is such a module,
named once in MODULES."""

import importlib

from .analysis import Analysis, Tables

# The package re-exports each analysis' main function under its module's name (`from
# tapdeck_analyze import rates` is the function), so the modules are imported by name.
MODULES = (
    "rates", "burstiness", "sizes", "nfs_latency", "nfs_ops", "rpc_matching", "files", "recency",
    "file_sizes", "file_age", "sequentiality", "top", "wan_whatif",
)  # fmt: skip

ANALYSES: dict[str, Analysis] = {
    a.name: a for a in (importlib.import_module(f"{__package__}.{m}").ANALYSIS for m in MODULES)
}


def run(analysis: Analysis, ds, **options) -> Tables:
    """Every table of `analysis` on `ds` (an analysis' `options` go to its main table and its
    parts), by result name as `table_names` gives them."""
    tables = {analysis.name: analysis.main(ds, **options)}
    for part, fn in analysis.parts.items():
        tables[f"{analysis.name}_{part}"] = fn(ds, **options)
    return tables


def table_names(analysis: Analysis) -> list[str]:
    """The result names of an analysis: its own and `<name>_<part>` for each part."""
    return [analysis.name] + [f"{analysis.name}_{p}" for p in analysis.parts]


def engine_differences(first, second, options: dict | None = None) -> tuple[list[str], int]:
    """Runs every analysis on two engines' views of one dataset and compares their tables:
    the same Arrow schemas and the same rows in order (floats within 1e-9 relative). Returns
    the differences found (empty when the engines agree) and how many tables had rows.
    `options`: per analysis name, options for its main table."""
    diffs, with_rows = [], 0
    for analysis in ANALYSES.values():
        opts = (options or {}).get(analysis.name, {})
        a_tables, b_tables = run(analysis, first, **opts), run(analysis, second, **opts)
        for name, a in a_tables.items():
            b = b_tables[name]
            if not a.schema.equals(b.schema, check_metadata=True):
                diffs.append(f"{name}: schema {a.schema} != {b.schema}")
                continue
            a_rows, b_rows = a.to_pylist(), b.to_pylist()
            if len(a_rows) != len(b_rows):
                diffs.append(f"{name}: {len(a_rows)} rows != {len(b_rows)}")
                continue
            for ra, rb in zip(a_rows, b_rows, strict=True):
                if not all(_same(ra[k], rb[k]) for k in ra):
                    diffs.append(f"{name}: {ra} != {rb}")
                    break
            with_rows += bool(a_rows)
    return diffs, with_rows


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))
    return a == b
