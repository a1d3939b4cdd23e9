"""The report: every analysis as Parquet and CSV, its plots as PNG and SVG, and one
self-contained report.html (plots inlined as SVG, no external files) with a summary on top."""

import datetime as dt
import html
import sys
import time
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from . import plots
from .analyses import ANALYSES, run
from .dataset import Dataset
from .output import display_value
from .times import format_time

ROWS_SHOWN = 30


def summary(ds: Dataset) -> dict:
    """The numbers at the top of the report."""
    p = ds.query(
        "SELECT count(*) AS packets, CAST(sum(wire_len) AS BIGINT) AS bytes, "
        "min(time_ns) AS first_ns, max(time_ns) AS last_ns FROM packets"
    ).to_pylist()[0]
    drops = ds.query("""
SELECT CAST(sum(kernel_dropped) AS BIGINT) AS kernel_dropped,
       CAST(sum(staging_dropped) AS BIGINT) AS staging_dropped,
       CAST(sum(write_dropped) AS BIGINT) AS write_dropped,
       CAST(sum(if_dropped) AS BIGINT) AS if_dropped,
       CAST(sum(forward_lost) AS BIGINT) AS forward_lost,
       count(*) AS interfaces
FROM capture_stats""").to_pylist()[0]
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
        **drops,
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
    return {"sample": "100ms", "window": "1s"}


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
        svgs = []
        for name, fig in plots.figures(analysis.name, tables, tz).items():
            fig.savefig(out / f"{name}.png", dpi=100)
            fig.savefig(out / f"{name}.svg")
            svgs.append((out / f"{name}.svg").read_text())
            plots.close(fig)
        sections.append((analysis, tables, svgs))
        if progress:
            print(f" {time.monotonic() - began:.1f} s", file=sys.stderr)
    page = _html(summary(ds), sections, tz)
    path = out / "report.html"
    path.write_text(page)
    return path


def _table_html(table, tz) -> str:
    names = table.column_names
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    body = []
    for row in table.to_pylist()[:ROWS_SHOWN]:
        cells = "".join(f"<td>{html.escape(display_value(n, row[n], tz))}</td>" for n in names)
        body.append(f"<tr>{cells}</tr>")
    more = ""
    if table.num_rows > ROWS_SHOWN:
        more = f"<p class=more>{table.num_rows - ROWS_SHOWN} more rows in the CSV and Parquet files.</p>"
    if not table.num_rows:
        more = "<p class=more>No rows.</p>"
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}"


def _fmt(v) -> str:
    if v is None:
        return "not recorded"
    if isinstance(v, float):
        return f"{v:.3%}"
    return f"{v:,}"


def _html(s: dict, sections, tz) -> str:
    first = format_time(s["first_ns"], tz, 6) if s["first_ns"] is not None else "–"
    last = format_time(s["last_ns"], tz, 6) if s["last_ns"] is not None else "–"
    duration = (s["last_ns"] - s["first_ns"]) / 1e9 if s["first_ns"] is not None else 0
    items = [
        ("Dataset", html.escape(s["dataset"])),
        ("Time range asked", html.escape(s["range"])),
        ("First and last packet", f"{first} – {last} ({duration:,.3f} s)"),
        ("Packets", _fmt(s["packets"])),
        ("Bytes on the wire", _fmt(s["bytes"])),
        ("Timestamp source", "not recorded in schema version 1"),
        ("Capture drops: kernel / staging / write / interface",
         " / ".join(_fmt(s[k]) for k in ("kernel_dropped", "staging_dropped", "write_dropped",
                                         "if_dropped"))),
        ("Forwarding loss", _fmt(s["forward_lost"])),
        ("Files deleted by retention", "not recorded in schema version 1"),
        ("RPC transactions", _fmt(s["rpc_transactions"])),
        ("Unmatched calls / replies", f"{_fmt(s['unmatched_calls'])} / {_fmt(s['unmatched_replies'])}"),
        ("Estimated loss from unmatched RPCs", _fmt(s["estimated_rpc_loss"])),
    ]  # fmt: skip
    summary_rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in items)
    # An incomplete dataset (opened with --allow-incomplete) says so before anything else.
    warning = ""
    if s["incomplete"]:
        warning = (
            f"<p class=incomplete><strong>Incomplete dataset:</strong> "
            f"{html.escape(s['incomplete'])}. Every number below leaves those sources out.</p>"
        )
    toc = " · ".join(f"<a href='#{a.name}'>{a.name}</a>" for a, _, _ in sections)
    body = []
    for analysis, tables, svgs in sections:
        plots_html = "".join(f"<div class=plot>{_strip_xml_header(svg)}</div>" for svg in svgs)
        tables_html = "".join(
            f"<h3>{html.escape(name)}</h3>{_table_html(t, tz)}" for name, t in tables.items()
        )
        body.append(
            f"<section id='{analysis.name}' class=analysis><h2>{analysis.name}</h2>"
            f"<p class=read>{html.escape(analysis.how_to_read)}</p>{plots_html}{tables_html}</section>"
        )
    return f"""<!DOCTYPE html>
<html lang=en><head><meta charset=utf-8><title>tapdeck report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1200px; }}
table {{ border-collapse: collapse; font-size: 0.85em; margin-bottom: 1em; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
th {{ background: #f3f3f3; }}
.summary th {{ text-align: left; }}
.plot svg {{ max-width: 100%; height: auto; }}
.read {{ font-style: italic; }}
.more {{ color: #666; font-size: 0.85em; }}
.incomplete {{ background: #fdd; border: 2px solid #c00; padding: 0.5em 1em; font-size: 1.2em; }}
</style></head><body>
<h1>tapdeck report</h1>
{warning}
<table class=summary>{summary_rows}</table>
<p>{toc}</p>
{"".join(body)}
</body></html>
"""


def _strip_xml_header(svg: str) -> str:
    i = svg.find("<svg")
    return svg[i:] if i >= 0 else svg
