"""The analyses by name: what `run` and `report` call, and the sentence that tells how to read
each one."""

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from . import headlines

# Modules by name: the package re-exports each analysis function under its module's name.
burstiness, files, nfs_latency, nfs_ops, rates, recency, rpc_matching, sizes = (
    importlib.import_module(f"tapdeck_analyze.{m}")
    for m in ("burstiness", "files", "nfs_latency", "nfs_ops", "rates", "recency", "rpc_matching",
              "sizes")
)  # fmt: skip
file_age, file_sizes, sequentiality, top, wan_whatif = (
    importlib.import_module(f"tapdeck_analyze.{m}")
    for m in ("file_age", "file_sizes", "sequentiality", "top", "wan_whatif")
)


@dataclass
class Analysis:
    name: str
    main: Callable
    how_to_read: str
    parts: dict[str, Callable] = field(default_factory=dict)
    options: tuple[str, ...] = ()  # keyword options of the main table and of every part
    # The report's one-line finding: takes `run`'s tables (by result name) and returns a short
    # sentence in human units, or None when the tables hold nothing worth saying.
    headline: Callable[[dict], str | None] | None = None


ANALYSES = {
    a.name: a
    for a in [
        Analysis(
            "rates",
            rates.rates,
            "Each window shows the lowest, mean and highest rate of its samples: a max far above "
            "the mean means short busy periods that the mean hides.",
            options=("sample", "window", "align", "by"),
            headline=headlines.rates,
        ),
        Analysis(
            "burstiness",
            burstiness.burstiness,
            "For each time scale, the rate that intervals of that length exceed only 50 %, 10 %, "
            "1 % … of the time; the further the curves spread at short scales, the burstier the "
            "traffic (scales flagged below the timestamp resolution are not meaningful).",
            parts={"distribution": burstiness.burstiness_distribution},
            headline=headlines.burstiness,
        ),
        Analysis(
            "sizes",
            sizes.sizes,
            "Packet sizes on the wire: the cumulative curve shows which sizes carry the "
            "packets, the rank plot how few sizes dominate; protocols, talkers and flows show "
            "where the bytes go.",
            parts={"protocols": sizes.protocols, "talkers": sizes.talkers, "flows": sizes.flows},
            headline=headlines.sizes,
        ),
        Analysis(
            "nfs_latency",
            nfs_latency.nfs_latency,
            "Server response time per operation from the first call to the first reply; p99 far "
            "above p50 means a slow tail, and retransmits or duplicate replies point at loss or "
            "an overloaded server.",
            parts={"over_time": nfs_latency.latency_over_time},
            headline=headlines.nfs_latency,
        ),
        Analysis(
            "nfs_ops",
            nfs_ops.nfs_ops,
            "Which NFS operations the clients use and how many bytes they move; per minute, per "
            "host, the errors, and the requests still waiting for a reply.",
            parts={
                "per_minute": nfs_ops.per_minute,
                "per_client": lambda ds: nfs_ops.per_host(ds, "client"),
                "per_server": lambda ds: nfs_ops.per_host(ds, "server"),
                "errors": nfs_ops.errors,
                "outstanding": nfs_ops.outstanding,
            },
            headline=headlines.nfs_ops,
        ),
        Analysis(
            "rpc_matching",
            rpc_matching.rpc_matching,
            "Calls without a reply and replies without a call: on a lossless capture both are "
            "zero (except calls in the last moments), so they estimate how many messages the "
            "capture missed, beside the drops the recorder counted.",
            parts={"per_minute": rpc_matching.per_minute, "drops": rpc_matching.capture_drops},
            headline=headlines.rpc_matching,
        ),
        Analysis(
            "files",
            files.files,
            "The files read and written most, with how sequentially they were accessed: "
            "sequential reads near reads − 1 mean streaming access.",
            headline=headlines.files,
        ),
        Analysis(
            "recency",
            recency.recency,
            "The fraction of reads (and of bytes read) an LRU cache of each size would have "
            "served; where the curve flattens, a bigger cache stops helping.",
            parts={"distribution": recency.recency_distribution},
            headline=headlines.recency,
        ),
        Analysis(
            "file_sizes",
            file_sizes.file_sizes,
            "How many files fall in each size bucket (their last size seen) and how many of the "
            "bytes read and written go to files of that size: where the byte curve rises, the "
            "data lives; a file count and a byte count far apart mean many small files and a "
            "few big ones that carry the traffic.",
            headline=file_sizes.headline,
        ),
        Analysis(
            "file_age",
            file_age.file_age,
            "Time since the file's last change (its mtime in the attributes) when it is read "
            "or written, and when the trace first touches it: small ages mean fresh data (a "
            "cache must follow changes), large ages data that is old and stable.",
            parts={"distribution": file_age.age_distribution},
            headline=file_age.headline,
        ),
        Analysis(
            "sequentiality",
            sequentiality.sequentiality,
            "Per file and client, the share of reads and writes that start where the previous "
            "one ended, and how long such runs last: high shares and long runs mean streaming "
            "access that read-ahead and large transfers serve well.",
            parts={"runs": sequentiality.run_lengths},
            headline=sequentiality.headline,
        ),
        Analysis(
            "top",
            top.top,
            "The clients, servers and files with the most NFS calls and the most bytes, with "
            "their share of the total: a few names with most of the share are where tuning or "
            "a problem matters most.",
            headline=top.headline,
        ),
        Analysis(
            "wan_whatif",
            wan_whatif.wan_whatif,
            "The traffic put on a WAN link of the given bandwidth and added round trip: the "
            "share of minutes whose demand exceeds the link, and how much longer calls and "
            "each client's work would take if every call waited one more round trip.",
            parts={
                "per_minute": wan_whatif.per_minute,
                "per_client": wan_whatif.per_client,
                "per_operation": wan_whatif.per_operation,
            },
            options=("bandwidth", "rtt"),
            headline=wan_whatif.headline,
        ),
    ]
}


def run(analysis: Analysis, ds, **options) -> dict:
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
