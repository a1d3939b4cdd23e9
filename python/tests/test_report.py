"""The report's parts on the hand-computed NFS fixture (conftest.small_nfs): headlines, human
units, the reduced tables and the summary's drop counts."""

import datetime as dt
import re

import pyarrow as pa
import pytest

import tapdeck_analyze
from tapdeck_analyze import open_dataset, units
from tapdeck_analyze.analyses import ANALYSES, Analysis, run, table_names
from tapdeck_analyze.reduce import TOP, shown
from tapdeck_analyze.report import capture_counts, write_report

# The analyses whose headline is a sentence on this fixture (the others have nothing to say of
# it, or say it without a full stop).
SENTENCES = {"rates", "burstiness", "sizes", "nfs_latency", "nfs_ops", "rpc_matching", "files",
             "recency"}  # fmt: skip


@pytest.fixture(scope="module")
def tables(nfs_ds):
    return {name: run(a, nfs_ds) for name, a in ANALYSES.items()}


def test_every_analysis_has_a_headline(tables):
    for name, analysis in ANALYSES.items():
        assert analysis.headline is not None, name
        text = analysis.headline(tables[name])
        if name in SENTENCES:
            assert text and text.endswith("."), (name, text)
        assert text is None or "\n" not in text, (name, text)
        assert not re.search(r"\de[+-]\d|\d{10}", text or ""), (name, text)


def test_headlines_say_the_fixtures_numbers(tables):
    h = {name: ANALYSES[name].headline(tables[name]) for name in ANALYSES}
    # GETATTR: latencies 2, 4 and 9 ms (nearest rank: median 4, p99 9), one retransmit
    assert h["nfs_latency"] == (
        "v3 GETATTR (3 calls): median 4 ms, p99 9 ms; 1 retransmitted call."
    )
    # one READ unanswered, one reply without its call, 10 transactions: 2 / 20
    assert h["rpc_matching"] == (
        "1 call without reply and 1 reply without call in 10 transactions: about 10 % of RPC "
        "messages missed."
    )
    # 11 operations (3 GETATTR, 3 READ, WRITE, LOOKUP, COMPOUND + SEQUENCE, PUTFH, READ);
    # 8192 + 4096 + 50 bytes read, 1000 written, LOOKUP failed
    assert h["nfs_ops"] == (
        "11 NFS operations, 27 % of them v3 GETATTR; 12 KiB read, 1000 B written; 1 error reply."
    )
    # file aa moved 12288 of the 13338 bytes; one of four reads continued the previous one
    assert h["files"] == (
        "3 files read or written; the busiest, …/data/a.bin, moved 12 KiB (92 %); "
        "25 % of reads sequential."
    )


def test_every_display_names_a_table_of_its_analysis():
    # a misspelt table name would silently fall back to the default display
    for analysis in ANALYSES.values():
        assert set(analysis.shown) <= set(table_names(analysis)), analysis.name


def test_every_analysis_is_a_function_of_the_package():
    # README's "From Python": `from tapdeck_analyze import NAME` is the analysis' main table
    for name, analysis in ANALYSES.items():
        assert getattr(tapdeck_analyze, name) is analysis.main, name


def test_any_analysis_headline_is_in_the_summary(nfs_path, tmp_path, monkeypatch):
    """An analysis added to ANALYSES (as the new ones are) shows its headline with no code in
    the report: in the findings and atop its section, its table reduced to the first rows."""

    def main(ds):
        return pa.table({"addr": [f"198.18.0.{i}" for i in range(30)], "bytes": list(range(30))})

    fake = Analysis("zz_new", main, "How to read it.", headline=lambda t: "Found 30 hosts.")
    monkeypatch.setitem(ANALYSES, "zz_new", fake)
    page = write_report(open_dataset(nfs_path), tmp_path / "r").read_text()
    summary = page[page.index("<div id=summary>") : page.index("</div>")]
    assert "<li><a href='#zz_new'>zz_new</a>: Found 30 hosts.</li>" in summary
    section = page[page.index("<section id='zz_new'") :]
    assert "<p class=headline>Found 30 hosts.</p>" in section
    assert section.count("<tr>") == 1 + TOP and "The first 10 of 30 rows." in section
    assert (tmp_path / "r" / "zz_new.csv").read_text().count("\n") == 31


def test_a_failing_headline_does_not_sink_the_report(nfs_path, tmp_path, monkeypatch):
    def broken(t):
        raise KeyError("nope")

    monkeypatch.setattr(ANALYSES["sizes"], "headline", broken)
    page = write_report(open_dataset(nfs_path), tmp_path / "r").read_text()
    assert "sizes</a>: (no headline: KeyError" in page


@pytest.mark.parametrize(
    "name, value, text",
    [
        ("max_bps", 12_345_678.9, "12.3 Mbit/s"),
        ("mean_pps", 1234.5, "1,230 packets/s"),
        ("p99_s", 0.00342, "3.42 ms"),
        ("mean_s", 2.5e-7, "250 ns"),
        ("bytes_read", 123_456_789, "118 MiB"),
        ("cache_bytes", 4 * 2**30, "4 GiB"),
        ("wire_len", 1514, "1,514 B"),
        ("call_share", 0.4567, "45.7 %"),
        ("transaction_id", -2, "fffffffffffffffe"),
        ("flow_id", 10605, "000000000000296d"),
        ("server_port", 2049, "2049"),
        ("calls", 123456, "123,456"),
        ("resolution_ns", 1000, "1 µs"),
        ("time_ns", 1795420800_123456789, "2026-11-23T09:00:00.123+01:00"),
        ("below_resolution", True, "yes"),
        ("fh", "ab" * 32, "abababababababab…"),
        ("mean_pps", 2.39e-6, "< 0.001 packets/s"),
        ("max_bps", 999.6, "1000 bit/s"),
        ("span_s", 4.3e9, "49769 d"),
        ("estimated_loss", 0.00012, "0.012 %"),
    ],
)
def test_human_units(name, value, text):
    berlin = dt.timezone(dt.timedelta(hours=1))  # a fixed zone: no tzdata needed
    got = units.column_value(name, value, berlin)
    assert got == text, (name, got)


def test_distributions_are_reduced_to_quantiles_and_top_rows():
    # 1000 packet sizes 1..1000, one packet each: p50 is 500, p99 990
    n = 1000
    sizes = pa.Table.from_pylist([
        dict(wire_len=i, packets=1, bytes=i, fraction=1 / n, cumulative_fraction=i / n,
             rank=i) for i in range(1, n + 1)
    ])  # fmt: skip
    s = shown(sizes, ANALYSES["sizes"].shown["sizes"])
    q = {r["quantile"]: r["wire_len"] for r in s.rows}
    assert q == {"p10": 100, "p25": 250, "p50": 500, "p75": 750, "p90": 900, "p99": 990,
                 "max": 1000}  # fmt: skip
    # a time series: the busiest intervals, in time order
    series = pa.Table.from_pylist(
        [dict(interval_start_ns=i, calls=(i * 7) % 31) for i in range(100)]
    )
    s = shown(series)  # as a new analysis' table is shown
    want = sorted(range(100), key=lambda i: (-((i * 7) % 31), i))[:TOP]
    assert [r["interval_start_ns"] for r in s.rows] == sorted(want)
    # a ranking: its first rows
    ranked = pa.Table.from_pylist([dict(addr=str(i), bytes=1000 - i) for i in range(50)])
    assert [r["addr"] for r in shown(ranked).rows] == [str(i) for i in range(TOP)]


def test_capture_counts_add_tapdeck_files_and_take_the_last_statistics_block():
    def row(source, name, **kw):
        base = dict(source=source, interface_name=name, link_type=1, kernel_dropped=None,
                    staging_dropped=None, write_dropped=None, if_dropped=None,
                    forward_lost=None, files_deleted=None, bytes_deleted=None)  # fmt: skip
        return {**base, **kw}

    rows = [
        row("tapdeck", "eth0", received=100, kernel_dropped=1, staging_dropped=10,
            write_dropped=0, files_deleted=3, bytes_deleted=3000),  # fmt: skip
        row("tapdeck", "eth0", received=50, kernel_dropped=2, staging_dropped=5, write_dropped=4),
        # two files of one dumpcap capture: cumulative counts
        row("isb", "eth1", received=70, kernel_dropped=7, if_dropped=1),
        row("isb", "eth1", received=90, kernel_dropped=9, if_dropped=1),
    ]  # fmt: skip
    assert capture_counts(rows) == {
        "received": 100 + 50 + 90, "kernel_dropped": 1 + 2 + 9, "staging_dropped": 15,
        "write_dropped": 4, "if_dropped": 1, "forward_lost": None, "files_deleted": 3,
        "bytes_deleted": 3000,
    }  # fmt: skip


def test_summary_text_is_escaped(nfs_path, tmp_path):
    # 20 packets in 64 s: "< 0.001 packets/s" would be a broken tag if not escaped
    page = write_report(open_dataset(nfs_path), tmp_path / "r").read_text()
    row = re.search(r"<th>Packets stored</th><td>([^<]*)</td>", page)[1]
    assert row == "20, 4.88 KiB on the wire; on average 625 bit/s, 0.312 packets/s"
    # 2 packets in 31 years: "< 0.001 packets/s", escaped
    from tapdeck_analyze.report import _html

    causes = ["received", "kernel_dropped", "staging_dropped", "write_dropped", "if_dropped",
              "forward_lost", "files_deleted", "bytes_deleted", "estimated_rpc_loss"]  # fmt: skip
    tiny = {"first_ns": 0, "last_ns": 10**18, "packets": 2, "bytes": 100, "range": "all",
            "dataset": "d", "incomplete": None, "rpc_transactions": 0, "unmatched_calls": 0,
            "unmatched_replies": 0, **dict.fromkeys(causes)}  # fmt: skip
    page = _html(tiny, [], dt.timezone.utc)
    assert (
        "<td>2, 100 B on the wire; on average &lt; 0.001 bit/s, &lt; 0.001 packets/s</td>" in page
    )


def test_page_has_no_raw_numbers(nfs_path, tmp_path):
    page = write_report(open_dataset(nfs_path), tmp_path / "r").read_text()
    cells = re.findall(r"<td>([^<]*)</td>", page)
    assert cells
    for c in cells:
        assert not re.search(r"\de[+-]\d", c), c  # no 1e+06
        if not re.fullmatch(r"[0-9a-f]{16}|\d{4}-\d\d-\d\dT.*", c):  # ids, times
            assert not re.search(r"\d{10}", c.replace(",", "")), c  # no ns integers
        assert not re.match(r"-\d", c), c  # no negative ids
