"""Plots for the report (matplotlib, Agg backend: no display needed)."""

import datetime as dt

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from . import units  # noqa: E402

matplotlib.rcParams["svg.hashsalt"] = "tapdeck"  # stable SVG ids, so reports diff cleanly


def close(fig) -> None:
    plt.close(fig)


def _times(ns_values, tz):
    return [dt.datetime.fromtimestamp(v / 1e9, tz) for v in ns_values]


def _time_axis(ax, x) -> None:
    """A time axis that stays readable when every point has the same time (matplotlib would
    otherwise span years around it)."""
    if x and min(x) == max(x):
        ax.set_xlim(min(x) - dt.timedelta(seconds=30), max(x) + dt.timedelta(seconds=30))
    if x and max(x) - min(x) < dt.timedelta(days=1):
        import matplotlib.dates as mdates

        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=x[0].tzinfo))


def _human(axis, fmt) -> None:
    """Tick labels in human units (12 Mbit/s, 3 ms, 4 MB), not 1e8 offsets or powers of ten."""
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    axis.set_minor_formatter(NullFormatter())


def _empty(title: str):
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.text(0.5, 0.5, "no data in this range", ha="center", va="center")
    ax.set_axis_off()
    ax.set_title(title)
    return fig


def figures(name: str, tables: dict, tz) -> dict:
    """The figures of one analysis, by file name (none for an analysis without a plot here)."""
    draw = globals().get(f"_{name}")
    return draw(tables, tz) if draw else {}


def _rates(t, tz):
    rows = t["rates"].to_pylist()
    if not rows:
        return {"rates": _empty("rates")}
    fig, ax = plt.subplots(figsize=(9, 4))
    x = _times([r["window_start_ns"] for r in rows], tz)
    if len(rows) > 1:  # the last window drawn to its end
        x.append(x[-1] + (x[-1] - x[-2]))
    for col, style in (("max_bps", "r.-"), ("mean_bps", "k.-"), ("min_bps", "b.-")):
        y = [r[col] for r in rows]
        y = y + y[-1:] if len(rows) > 1 else y
        ax.plot(x, y, style, label=col.split("_")[0], drawstyle="steps-post", markersize=3)
    _time_axis(ax, x)
    _human(ax.yaxis, units.rate)
    ax.set_ylabel("rate")
    ax.set_title("rate per window: min, mean and max of the samples")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    return {"rates": fig}


def _burstiness(t, tz):
    rows = t["burstiness_distribution"].to_pylist()
    if not rows:
        return {"burstiness": _empty("burstiness")}
    fig, ax = plt.subplots(figsize=(7, 5))
    for scale in sorted({r["scale_s"] for r in rows}):
        pts = [r for r in rows if r["scale_s"] == scale and r["bps"] > 0]
        total = sum(r["intervals"] for r in rows if r["scale_s"] == scale)
        above, xs, ys = total, [], []
        for r in pts:
            xs.append(r["bps"])
            ys.append(above / total)
            above -= r["intervals"]
        zero = next((r["intervals"] for r in rows if r["scale_s"] == scale and r["bps"] == 0), 0)
        ys = [y - zero / total for y in ys]
        if xs:
            ax.step(xs, ys, where="post", marker=".", label=units.duration(scale))
    ax.set_xscale("log")
    ax.set_yscale("log")
    _human(ax.xaxis, units.rate)
    _human(ax.yaxis, units.percent)
    ax.set_xlabel("rate in an interval")
    ax.set_ylabel("fraction of intervals at or above")
    ax.set_title("burstiness: CCDF of the rate per time scale")
    ax.legend()
    fig.tight_layout()
    return {"burstiness": fig}


def _sizes(t, tz):
    rows = t["sizes"].to_pylist()
    if not rows:
        return {"sizes": _empty("sizes")}
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.step([r["wire_len"] for r in rows], [r["cumulative_fraction"] for r in rows], where="post")
    _human(a.xaxis, units.size)
    a.set_xlabel("length on the wire")
    a.set_ylabel("cumulative fraction of packets")
    a.set_title("by size")
    ranked = sorted(rows, key=lambda r: r["rank"])
    b.loglog([r["rank"] for r in ranked], [r["fraction"] for r in ranked], "o-", markersize=3)
    b.set_xlabel("rank of the size")
    b.set_ylabel("fraction of packets")
    b.set_title("by rank")
    fig.tight_layout()
    return {"sizes": fig}


def _nfs_latency(t, tz):
    rows = t["nfs_latency_over_time"].to_pylist()
    if not rows:
        return {"nfs_latency": _empty("NFS latency")}
    fig, ax = plt.subplots(figsize=(9, 4))
    for key in sorted({(r["nfs_version"], r["operation"]) for r in rows}):
        pts = [r for r in rows if (r["nfs_version"], r["operation"]) == key]
        ax.plot(_times([r["interval_start_ns"] for r in pts], tz), [r["mean_s"] for r in pts],
                "o-", markersize=3, label=f"v{key[0]} {key[1]}")  # fmt: skip
    ax.set_yscale("log")
    _human(ax.yaxis, units.duration)
    ax.set_ylabel("mean latency")
    _time_axis(ax, _times([r["interval_start_ns"] for r in rows], tz))
    ax.set_title("NFS latency over time, busiest operations")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    return {"nfs_latency": fig}


def _nfs_ops(t, tz):
    rows = t["nfs_ops"].to_pylist()
    if not rows:
        return {"nfs_ops": _empty("NFS operations")}
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    top = rows[:15]
    a.barh([f"v{r['nfs_version']} {r['operation']}" for r in top][::-1],
           [r["calls"] for r in top][::-1])  # fmt: skip
    a.set_xlabel("calls")
    a.set_title("operation mix")
    out = t["nfs_ops_outstanding"].to_pylist()
    b.step(_times([r["interval_start_ns"] for r in out], tz),
           [r["max_outstanding"] for r in out], where="post")  # fmt: skip
    _time_axis(b, _times([r["interval_start_ns"] for r in out], tz))
    b.set_ylabel("max outstanding requests")
    b.set_title("outstanding requests")
    fig.autofmt_xdate()
    fig.tight_layout()
    return {"nfs_ops": fig}


def _rpc_matching(t, tz):
    rows = t["rpc_matching_per_minute"].to_pylist()
    if not rows:
        return {"rpc_matching": _empty("RPC matching")}
    fig, ax = plt.subplots(figsize=(9, 4))
    x = _times([r["interval_start_ns"] for r in rows], tz)
    ax.plot(x, [r["unmatched_calls"] for r in rows], "o-", label="calls without reply")
    ax.plot(x, [r["unmatched_replies"] for r in rows], "s-", label="replies without call")
    _time_axis(ax, x)
    ax.set_ylabel("per minute")
    ax.set_title("unmatched RPC messages")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    return {"rpc_matching": fig}


def _files(t, tz):
    rows = t["files"].to_pylist()[:20]
    if not rows:
        return {"files": _empty("files")}
    fig, ax = plt.subplots(figsize=(9, 5))
    labels = [(r["path"] or r["name"] or r["fh"][:16]) for r in rows][::-1]
    ax.barh(labels, [r["bytes_read"] for r in rows][::-1], label="read")
    ax.barh(labels, [r["bytes_written"] for r in rows][::-1],
            left=[r["bytes_read"] for r in rows][::-1], label="written")  # fmt: skip
    _human(ax.xaxis, units.size)
    ax.set_xlabel("bytes moved")
    ax.set_title("files by bytes moved")
    ax.legend()
    fig.tight_layout()
    return {"files": fig}


def _recency(t, tz):
    rows = t["recency"].to_pylist()
    if not rows or not rows[0]["reads"]:
        return {"recency": _empty("recency")}
    fig, ax = plt.subplots(figsize=(7, 4))
    x = [r["cache_bytes"] for r in rows]
    ax.plot(x, [r["hit_ratio"] for r in rows], "o-", label="requests")
    ax.plot(x, [r["byte_hit_ratio"] for r in rows], "s-", label="bytes")
    ax.set_xscale("log", base=2)
    _human(ax.xaxis, units.size)
    ax.set_xlabel("LRU cache size")
    ax.set_ylabel("hit ratio")
    ax.set_ylim(0, 1)
    ax.set_title("read cache hit ratio")
    ax.legend()
    fig.tight_layout()
    return {"recency": fig}


def _file_sizes(t, tz):
    rows = [r for r in t["file_sizes"].to_pylist() if r["size_lower_bytes"] is not None]
    if not rows:
        return {"file_sizes": _empty("file sizes")}
    fig, ax = plt.subplots(figsize=(7, 4))
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
    return {"file_sizes": fig}


def _file_age(t, tz):
    rows = [r for r in t["file_age_distribution"].to_pylist() if r["lower_s"] is not None]
    if not rows:
        return {"file_age": _empty("file age")}
    fig, ax = plt.subplots(figsize=(7, 4))
    for event in ("read", "write", "first_access"):
        pts = [r for r in rows if r["event"] == event]
        if pts:  # from 0 at the first bucket's lower edge to each bucket's upper edge
            x = [pts[0]["lower_s"] or 1e-4] + [r["upper_s"] or r["lower_s"] * 10 for r in pts]
            y = [0.0] + [r["cumulative_fraction"] for r in pts]
            ax.plot(x, y, marker=".", label=event.replace("_", " "))
    ax.set_xscale("log")
    ax.set_xlabel("time since the last change (s, bucket upper bound)")
    ax.set_ylabel("cumulative fraction of accesses")
    ax.set_ylim(0, 1.02)
    ax.set_title("file age at access")
    ax.legend()
    fig.tight_layout()
    return {"file_age": fig}


def _sequentiality(t, tz):
    rows = t["sequentiality_runs"].to_pylist()
    if not rows:
        return {"sequentiality": _empty("sequentiality")}
    fig, ax = plt.subplots(figsize=(7, 4))
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
    return {"sequentiality": fig}


def _top(t, tz):
    rows = t["top"].to_pylist()
    if not rows:
        return {"top": _empty("top")}
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    for ax, kind in zip(axes, ("client", "server", "file"), strict=True):
        mine = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["bytes_rank"])[:10]
        labels = [r["file_name"] or r["name"][:12] for r in mine][::-1]
        ax.barh(labels, [(r["bytes_read"] + r["bytes_written"]) / 2**20 for r in mine][::-1])
        ax.set_xlabel("MiB read and written")
        ax.set_title(f"top {kind}s by bytes")
    fig.tight_layout()
    return {"top": fig}


def _wan_whatif(t, tz):
    rows = t["wan_whatif_per_minute"].to_pylist()
    if not rows:
        return {"wan_whatif": _empty("WAN what-if")}
    capacity = t["wan_whatif"].to_pylist()[0]["bandwidth_bps"]
    fig, ax = plt.subplots(figsize=(9, 4))
    x = _times([r["minute_start_ns"] for r in rows], tz)
    over = ["tab:red" if r["over_capacity"] else "tab:blue" for r in rows]
    ax.bar(x, [r["demand_bps"] / 1e6 for r in rows], width=1 / 1440, align="edge", color=over,
           label="demand per minute (busier direction)")  # fmt: skip
    ax.axhline(capacity / 1e6, color="k", linestyle="--", label="link bandwidth")
    _time_axis(ax, x)
    minute = dt.timedelta(minutes=1)
    ax.set_xlim(x[0] - minute / 4, x[-1] + minute * 5 / 4)  # whole bars, also a single one
    ax.set_ylim(bottom=0)
    ax.set_ylabel("Mbit/s")
    ax.set_title("WAN what-if: per-minute demand against the link")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    return {"wan_whatif": fig}
