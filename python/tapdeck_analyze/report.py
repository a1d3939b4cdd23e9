"""The report: every analysis as Parquet and CSV, its plots as PNG and SVG, and report.html, a
small page that opens from its directory without a server: a summary screen first (the trace,
what the capture stored and dropped by cause, RPC matching, and each analysis' headline), then
a section per analysis with its plot (an <img> of the PNG beside the page, linking the SVG) and
what a reader uses of its tables (reduce.py), linking the whole tables."""

import datetime as dt
import html
import sys
import time
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from . import plots, units
from .analyses import ANALYSES, run
from .dataset import Dataset
from .reduce import Display, shown
from .times import format_time

CAUSES = {
    "kernel_dropped": "kernel",
    "staging_dropped": "staging pool full",
    "write_dropped": "write errors",
    "if_dropped": "interface",
    "forward_lost": "forwarding",
}


def capture_counts(rows: list[dict]) -> dict:
    """Drops by cause and retention deletions over `capture_stats` rows; None where no row
    says. Rows of tapdeck files hold each file's own counts (they add up); a pcapng statistics
    block is cumulative since its capture began, so of those the largest per interface."""
    out = {}
    for col in ["received", *CAUSES, "files_deleted", "bytes_deleted"]:
        own = [r[col] for r in rows if r["source"] != "isb" and r.get(col) is not None]
        last: dict = {}
        for r in rows:
            if r["source"] == "isb" and r.get(col) is not None:
                key = (r["interface_name"], r["link_type"])
                last[key] = max(last.get(key, 0), r[col])
        out[col] = sum(own) + sum(last.values()) if own or last else None
    return out


def summary(ds: Dataset) -> dict:
    """The numbers at the top of the report."""
    p = ds.query(
        "SELECT count(*) AS packets, CAST(sum(wire_len) AS BIGINT) AS bytes, "
        "min(time_ns) AS first_ns, max(time_ns) AS last_ns FROM packets"
    ).to_pylist()[0]
    stats = ds.query("SELECT * FROM capture_stats").to_pylist()
    m = ds.query("""
SELECT CAST(sum(CASE WHEN direction = 'call' AND NOT matched THEN 1 ELSE 0 END) AS BIGINT) AS u_calls,
       CAST(sum(CASE WHEN direction = 'reply' AND NOT matched THEN 1 ELSE 0 END) AS BIGINT) AS u_replies,
       count(DISTINCT transaction_id) AS transactions
FROM rpc WHERE direction = 'call' AND NOT retransmit OR direction = 'reply' AND NOT retransmit
""").to_pylist()[0]
    unmatched = (m["u_calls"] or 0) + (m["u_replies"] or 0)
    return {
        "dataset": str(ds.path),
        "incomplete": ds.incomplete,
        "range": ds.describe_range(),
        **p,
        **capture_counts(stats),
        "rpc_transactions": m["transactions"],
        "unmatched_calls": m["u_calls"] or 0,
        "unmatched_replies": m["u_replies"] or 0,
        "estimated_rpc_loss": unmatched / (2 * m["transactions"]) if m["transactions"] else None,
    }


def _options(ds: Dataset, name: str) -> dict:
    """rates in the report: the paper's 1 min samples in 1 h windows when the data spans hours,
    finer ones for shorter traces (else a short trace is one window of one sample)."""
    if name != "rates":
        return {}
    first, last = ds.time_span()
    span = (last - first) if first is not None else 0
    if span >= 2 * 3600 * 10**9:
        return {}
    if span >= 2 * 60 * 10**9:
        return {"sample": "1s", "window": "1min"}
    if span >= 20 * 10**9:
        return {"sample": "100ms", "window": "1s"}
    return {"sample": "10ms", "window": "100ms"}


def _headline(analysis, tables) -> str | None:
    """The analysis' headline; a headline that fails says so rather than failing the report."""
    if analysis.headline is None:
        return None
    try:
        return analysis.headline(tables)
    except Exception as e:  # noqa: BLE001 - one analysis' sentence must not sink the report
        return f"(no headline: {type(e).__name__}: {e})"


def write_report(ds: Dataset, out, tz: dt.tzinfo = dt.timezone.utc, progress: bool = False) -> Path:
    """Runs every analysis on `ds`, writes everything into `out`, returns report.html's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sections = []
    for i, analysis in enumerate(ANALYSES.values(), 1):
        began = time.monotonic()
        if progress:
            print(f"[{i}/{len(ANALYSES)}] {analysis.name} …", file=sys.stderr, end="", flush=True)
        options = _options(ds, analysis.name)
        tables = run(analysis, ds, **options)
        for name, table in tables.items():
            pq.write_table(table, out / f"{name}.parquet")
            pacsv.write_csv(table, out / f"{name}.csv")
        images = []
        if analysis.plot is not None:
            fig = analysis.plot(tables, tz)
            fig.savefig(out / f"{analysis.name}.png", dpi=100)
            fig.savefig(out / f"{analysis.name}.svg")
            images.append(analysis.name)
            plots.close(fig)
        sections.append((analysis, tables, images, _headline(analysis, tables)))
        if progress:
            print(f" {time.monotonic() - began:.1f} s", file=sys.stderr)
    page = _html(summary(ds), sections, tz)
    path = out / "report.html"
    path.write_text(page)
    return path


def _table_html(name: str, table, display: Display | None, tz) -> str:
    s = shown(table, display)
    links = f"<a href='{name}.csv'>CSV</a> · <a href='{name}.parquet'>Parquet</a>"
    total = f"{table.num_rows:,} rows"
    if s.omitted or not table.num_rows:
        note = s.note if table.num_rows else "No rows."
        return f"<p class=more>{html.escape(note)} {total}: {links}</p>"
    head = "".join(f"<th>{html.escape(units.column_label(c))}</th>" for c in s.columns)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(units.column_value(c, r[c], tz))}</td>" for c in s.columns)
        + "</tr>"
        for r in s.rows
    )
    note = f"{html.escape(s.note)} " if s.note else ""
    return (
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        f"<p class=more>{note}Whole table, {total}: {links}</p>"
    )


def _share(f: float) -> str:
    """A loss in the summary, to three digits (0.0123 %, 96.9 %)."""
    return f"{units.number(f * 100)} %"


def _count(v) -> str:
    return "not recorded" if v is None else units.count(v)


def _summary_rows(s: dict, tz) -> list[tuple[str, str]]:
    first, last = s["first_ns"], s["last_ns"]
    span = (last - first) / 1e9 if first is not None else 0
    rows = []
    if first is not None:
        rows.append(("Trace", f"{format_time(first, tz, 3)} – {format_time(last, tz, 3)} "
                              f"({units.duration(span)})"))  # fmt: skip
    if s["range"] != "from the beginning to the end":
        rows.append(("Range asked", s["range"]))
    rate = ""
    if span > 0:
        rate = (f"; on average {units.rate(s['bytes'] * 8 / span)}, "
                f"{units.packet_rate(s['packets'] / span)}")  # fmt: skip
    rows.append(("Packets stored",
                 f"{units.count(s['packets'])}, {units.size(s['bytes'] or 0)} on the wire{rate}"))  # fmt: skip
    causes = " · ".join(f"{label} {_count(s[c])}" for c, label in CAUSES.items())
    known = [s[c] for c in CAUSES if s[c] is not None]
    # What the capture saw, where it says (files retention deleted are no longer stored here).
    seen = s["received"] or s["packets"] + sum(known)
    total = ""
    if known and seen:
        dropped = sum(known)
        total = f"{units.count(dropped)} of {units.count(seen)} seen ({_share(dropped / seen)}): "
    if not known:
        causes = "not recorded (the traces carry no capture statistics)"
    rows.append(("Dropped by the capture", f"{total}{causes}"))
    deleted = "not recorded"
    if s["files_deleted"] is not None:
        deleted = f"{units.count(s['files_deleted'])} files, {units.size(s['bytes_deleted'] or 0)}"
    rows.append(("Deleted by retention", deleted))
    loss = s["estimated_rpc_loss"]
    rows.append((
        "RPC matching",
        f"{units.count(s['rpc_transactions'])} transactions; "
        f"{units.count(s['unmatched_calls'])} calls without reply, "
        f"{units.count(s['unmatched_replies'])} replies without call",
    ))  # fmt: skip
    rows.append(("Capture loss estimated from RPCs",
                 "no RPCs" if loss is None else _share(loss)))  # fmt: skip
    return rows


def _html(s: dict, sections, tz) -> str:
    summary_rows = "".join(
        f"<tr><th>{k}</th><td>{html.escape(v)}</td></tr>" for k, v in _summary_rows(s, tz)
    )
    findings = "".join(
        f"<li><a href='#{a.name}'>{a.name}</a>: {html.escape(h or 'nothing to report.')}</li>"
        for a, _, _, h in sections
    )
    # An incomplete dataset (opened with --allow-incomplete) says so before anything else.
    warning = ""
    if s["incomplete"]:
        warning = (
            f"<p class=incomplete><strong>Incomplete dataset:</strong> "
            f"{html.escape(s['incomplete'])}. Every number below leaves those sources out.</p>"
        )
    body = []
    for analysis, tables, images, headline in sections:
        imgs = "".join(f"<a href='{n}.svg'><img src='{n}.png' alt='{n} plot'></a>" for n in images)
        lead = f"<p class=headline>{html.escape(headline)}</p>" if headline else ""
        tables_html = "".join(
            f"<h3>{html.escape(name)}</h3>{_table_html(name, t, analysis.shown.get(name), tz)}"
            for name, t in tables.items()
        )
        body.append(
            f"<section id='{analysis.name}' class=analysis><h2>{analysis.name}</h2>{lead}"
            f"<p class=read>{html.escape(analysis.how_to_read)}</p>"
            f"<div class=plot>{imgs}</div>{tables_html}</section>"
        )
    return f"""<!DOCTYPE html>
<html lang=en><head><meta charset=utf-8><title>tapdeck report</title>
<style>
body {{ font-family: sans-serif; margin: 1em 2em; max-width: 1200px; }}
h1 {{ font-size: 1.4em; margin: 0.2em 0; }}
.dataset {{ color: #555; margin: 0 0 0.6em; font-size: 0.9em; }}
table {{ border-collapse: collapse; font-size: 0.85em; margin-bottom: 0.3em;
         display: block; overflow-x: auto; max-width: 100%; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
th {{ background: #f3f3f3; }}
#summary table th, #summary table td {{ text-align: left; }}
#summary h2 {{ font-size: 1.1em; margin: 0.6em 0 0.2em; }}
#findings {{ margin: 0; padding-left: 1.2em; font-size: 0.9em; }}
#findings li {{ margin: 0.1em 0; }}
.plot img {{ max-width: 100%; height: auto; }}
.headline {{ font-weight: bold; }}
.read {{ font-style: italic; }}
.more {{ color: #666; font-size: 0.85em; margin-top: 0; }}
.incomplete {{ background: #fdd; border: 2px solid #c00; padding: 0.5em 1em; font-size: 1.2em; }}
</style></head><body>
<h1>tapdeck report</h1>
<p class=dataset>{html.escape(s["dataset"])}</p>
{warning}
<div id=summary>
<table class=summary>{summary_rows}</table>
<h2>Findings</h2>
<ul id=findings>{findings}</ul>
</div>
{"".join(body)}
</body></html>
"""
