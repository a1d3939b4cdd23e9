"""The report's one-sentence finding of each analysis (`Analysis.headline`): each takes `run`'s
tables by result name and returns a short sentence in human units, or None when the tables hold
nothing worth saying."""

from . import units
from .units import duration, percent, size


def rates(t: dict) -> str | None:
    rows = [r for r in t["rates"].to_pylist() if r["samples"]]
    if not rows or not any(r["packets"] for r in rows):
        return None
    samples = sum(r["samples"] for r in rows)
    mean_bps = sum(r["mean_bps"] * r["samples"] for r in rows) / samples
    mean_pps = sum(r["mean_pps"] * r["samples"] for r in rows) / samples
    peak = max(rows, key=lambda r: r["max_bps"])
    text = f"{units.rate(mean_bps)} ({units.packet_rate(mean_pps)}) on average"
    if samples > 1 and mean_bps:
        text += (
            f"; the busiest sample reached {units.rate(peak['max_bps'])} "
            f"({units.packet_rate(peak['max_pps'])}), {units.number(peak['max_bps'] / mean_bps)}× the mean"
        )
    return text + "."


def burstiness(t: dict) -> str | None:
    rows = [r for r in t["burstiness"].to_pylist() if not r["below_resolution"]]
    if not rows:
        return None
    r = rows[0]  # the finest meaningful scale shows the bursts best
    scale = duration(r["scale_s"])
    p99 = units.rate(r["p99_bps"])
    busiest = units.rate(r["max_bps"])
    if not r["p50_bps"]:
        empty = r["empty_intervals"] / r["intervals"] if r["intervals"] else 0
        tail = f"1 % exceed {p99}" if r["p99_bps"] else f"the busiest reached {busiest}"
        return f"At {scale}, {percent(empty)} of intervals are empty; {tail}."
    return (
        f"At {scale}, 1 % of intervals exceed {p99}, {units.number(r['p99_bps'] / r['p50_bps'])}× the "
        f"median ({units.rate(r['p50_bps'])}); the busiest reached {busiest}."
    )


def sizes(t: dict) -> str | None:
    rows = t["sizes"].to_pylist()
    if not rows:
        return None
    median = next(r["wire_len"] for r in rows if r["cumulative_fraction"] >= 0.5)
    common = min(rows, key=lambda r: r["rank"])
    text = (
        f"Median packet {size(median)}; the most common size is {size(common['wire_len'])} "
        f"({percent(common['fraction'])} of packets)"
    )
    protocols = t.get("sizes_protocols")
    top = protocols.to_pylist()[0] if protocols is not None and protocols.num_rows else None
    if top:
        text += f"; {top['protocol_name']} carries {percent(top['byte_share'])} of the bytes"
    return text + "."


def nfs_latency(t: dict) -> str | None:
    rows = [r for r in t["nfs_latency"].to_pylist() if r["calls"]]
    if not rows:
        return None
    busiest = max(rows, key=lambda r: r["calls"])
    text = (
        f"{_op(busiest)} ({_n(busiest['calls'], 'call')}): median "
        f"{duration(busiest['p50_s'])}, p99 {duration(busiest['p99_s'])}"
    )
    slowest = max(rows, key=lambda r: r["p99_s"])
    if slowest is not busiest:
        text += f"; slowest p99: {_op(slowest)} {duration(slowest['p99_s'])}"
    retransmits = sum(r["retransmits"] for r in t["nfs_latency"].to_pylist())
    if retransmits:
        text += f"; {_n(retransmits, 'retransmitted call')}"
    return text + "."


def nfs_ops(t: dict) -> str | None:
    rows = t["nfs_ops"].to_pylist()
    calls = sum(r["calls"] for r in rows)
    if not calls:
        return None
    top = rows[0]
    read = sum(r["bytes_read"] for r in rows)
    written = sum(r["bytes_written"] for r in rows)
    text = (
        f"{units.count(calls)} NFS operations, {percent(top['call_share'])} of them "
        f"{_op(top)}; {size(read)} read, {size(written)} written"
    )
    errors = t.get("nfs_ops_errors")
    failed = sum(r["replies"] for r in errors.to_pylist()) if errors is not None else 0
    if failed:
        text += f"; {_n(failed, 'error reply', 'error replies')}"
    return text + "."


def rpc_matching(t: dict) -> str | None:
    rows = t["rpc_matching"].to_pylist()
    if not rows:
        return None
    calls = sum(r["unmatched_calls"] for r in rows)
    replies = sum(r["unmatched_replies"] for r in rows)
    # A transaction has its call, or is a reply without one.
    transactions = sum(r["calls"] + r["unmatched_replies"] for r in rows)
    if not calls and not replies:
        return f"Every call and reply of {units.count(transactions)} RPC transactions matched."
    # The table's estimate over all pairs: unmatched / (2 · transactions).
    loss = (calls + replies) / (2 * transactions)
    return (
        f"{_n(calls, 'call')} without reply and {_n(replies, 'reply', 'replies')} without call "
        f"in {_n(transactions, 'transaction')}: about {percent(loss)} of RPC messages missed."
    )


def files(t: dict) -> str | None:
    rows = t["files"].to_pylist()
    if not rows:
        return None
    moved = [r["bytes_read"] + r["bytes_written"] for r in rows]
    total = sum(moved)
    top = rows[0]
    name = top["path"] or top["name"] or f"handle {top['fh'][:12]}…"
    text = f"{_n(len(rows), 'file')} read or written"
    if total:
        text += f"; the busiest, {name}, moved {size(moved[0])} ({percent(moved[0] / total)})"
    reads = sum(r["reads"] for r in rows)
    sequential = sum(r["sequential_reads"] for r in rows)
    if reads:
        text += f"; {percent(sequential / reads)} of reads sequential"
    return text + "."


def recency(t: dict) -> str | None:
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
        f"An LRU cache of {size(enough['cache_bytes'])} would serve "
        f"{percent(enough['hit_ratio'])} of reads; the whole working set "
        f"({size(whole['cache_bytes'])}) {percent(best)}."
    )


def _n(n: int, one: str, many: str | None = None) -> str:
    return f"{units.count(n)} {one if n == 1 else many or one + 's'}"


def _op(r: dict) -> str:
    return f"v{r['nfs_version']} {r['operation']}"


HEADLINES = {
    "rates": rates,
    "burstiness": burstiness,
    "sizes": sizes,
    "nfs_latency": nfs_latency,
    "nfs_ops": nfs_ops,
    "rpc_matching": rpc_matching,
    "files": files,
    "recency": recency,
}
