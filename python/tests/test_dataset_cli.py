"""Opening datasets (bad input: one clear line), time formats, the CLI and the report."""

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import S
from datasetbuilder import T0, DatasetBuilder

from tapdeck_analyze import DatasetError, IncompleteDatasetError, open_dataset
from tapdeck_analyze.analyses import ANALYSES, table_names
from tapdeck_analyze.cli import main
from tapdeck_analyze.times import format_time, parse_duration, parse_time


def test_parse_time_matches_tapdeck_extract():
    assert parse_time("1795413454.5") == 1795413454_500_000_000
    assert parse_time("1795413454.000000001") == 1795413454_000_000_001
    assert parse_time("2026-11-23T08:00:00Z") == T0
    assert parse_time("2026-11-23T09:00:00.25+01:00") == T0 + S // 4
    assert parse_time("2026-11-23 08:00:00z") == T0
    for bad in ("yesterday", "2026-11-23T08:00:00", "2026-02-30T00:00:00Z", "1.0000000001",
                "2026-11-23T24:00:00Z", "1969-12-31T23:59:59Z"):  # fmt: skip
        with pytest.raises(ValueError, match="is not a time"):
            parse_time(bad)
    assert format_time(T0 + 5) == "2026-11-23T08:00:00.000000005Z"


def test_parse_duration():
    assert [parse_duration(d) for d in ("100us", "1ms", "1s", "1min", "1h", "2.5s")] == [
        100_000, 1_000_000, S, 60 * S, 3600 * S, 2_500_000_000]  # fmt: skip
    with pytest.raises(ValueError):
        parse_duration("5 parsecs")


def small(tmp_path, **kw):
    b = DatasetBuilder()
    b.packet(T0, 100)
    b.packet(T0 + 3600 * S, 100)
    return b.write(tmp_path / "ds", **kw)


def test_missing_and_partial_datasets(tmp_path):
    with pytest.raises(DatasetError, match="no such dataset"):
        open_dataset(tmp_path / "nothing")
    path = small(tmp_path)
    (path / "dataset.json").unlink()
    with pytest.raises(DatasetError, match="no dataset.json"):
        open_dataset(path)
    path = small(tmp_path)
    part = next((path / "packets").rglob("*.parquet"))
    part.write_bytes(part.read_bytes()[:50])
    with pytest.raises(DatasetError, match="unreadable Parquet file"):
        open_dataset(path)


def test_newer_schema_versions(tmp_path):
    path = small(tmp_path, schema_version=2)
    with pytest.raises(DatasetError, match="schema version 2 is newer"):
        open_dataset(path)
    path = small(tmp_path / "b", file_version={"packets": 3})
    with pytest.raises(DatasetError, match=r"part-000000-0.parquet: schema version 3 is newer"):
        open_dataset(path)


def test_column_type_checked(tmp_path):
    path = small(tmp_path)
    part = next((path / "packets").rglob("*.parquet"))
    t = pq.read_table(part)
    t = t.set_column(t.schema.get_field_index("wire_len"), "wire_len",
                     t.column("wire_len").cast("int64"))  # fmt: skip
    pq.write_table(t, part)
    with pytest.raises(DatasetError, match="wire_len is BIGINT, the contract says INT"):
        open_dataset(path)


def test_time_range_and_hour_partitions(tmp_path):
    path = small(tmp_path)
    assert {p.parent.name for p in (path / "packets").rglob("*.parquet")} == {
        "hour=2026-11-23T08", "hour=2026-11-23T09"}  # fmt: skip
    ds = open_dataset(path, start="2026-11-23T08:30:00Z")
    assert ds.scalar("SELECT count(*) FROM packets") == 1
    ds = open_dataset(path, end=T0 + 1)
    assert ds.scalar("SELECT count(*) FROM packets") == 1
    with pytest.raises(DatasetError, match="no packets from .*it spans"):
        open_dataset(path, start=T0 + 1, end=T0 + 2)
    with pytest.raises(DatasetError, match="range \\[start, end\\) is empty"):
        open_dataset(path, start=T0, end=T0)
    # the range reaches the Parquet scan, where row-group statistics prune
    plan = ds.query("EXPLAIN SELECT sum(wire_len) FROM packets").column(1)[0].as_py()
    scan = plan[plan.index("READ_PARQUET") :]
    assert "Files: 1/2" in scan  # the hour partition left out the other file
    ds = open_dataset(path, start=T0 + 1)
    plan = ds.query("EXPLAIN SELECT sum(wire_len) FROM packets").column(1)[0].as_py()
    assert f"Filters: time_ns >= {T0 + 1}" in plan[plan.index("READ_PARQUET") :]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "tapdeck_analyze.cli", *map(str, args)],
                          capture_output=True, text=True)  # fmt: skip


def test_cli_errors_are_one_line(tmp_path):
    path = small(tmp_path)
    newer = small(tmp_path / "newer", schema_version=9)
    for args in (("run", "rates", tmp_path / "none"), ("run", "rates", newer),
                 ("run", "rates", path, "--start", "2030-01-01T00:00:00Z"),
                 ("run", "rates", path, "--start", "soon"),
                 ("run", "rates", path, "--sample", "1 fortnight")):  # fmt: skip
        r = run_cli(*args)
        assert r.returncode == 2, r
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "Traceback" not in r.stderr and r.stderr.startswith("tapdeck-analyze: ")


def test_cli_run_and_sql(nfs_path, capsysbinary):
    assert main(["run", "nfs_latency", str(nfs_path), "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsysbinary.readouterr().out.splitlines()]
    assert rows[0]["operation"] == "GETATTR" and rows[0]["calls"] == 3
    assert main(["run", "sizes", str(nfs_path), "--part", "protocols", "--format", "csv"]) == 0
    assert capsysbinary.readouterr().out.startswith(b'"ip_version","protocol"')
    assert main(["sql", str(nfs_path), "SELECT count(*) AS n FROM rpc WHERE matched"]) == 0
    assert capsysbinary.readouterr().out.split() == [
        b"n",
        b"18",
    ]  # 9 call and 9 reply rows with a partner
    assert main(["run", "rates", str(nfs_path), "--sample", "1s", "--window", "1min",
                 "--tz", "Europe/Berlin"]) == 0  # fmt: skip
    assert b"2026-11-23T09:00:00.000000000+01:00" in capsysbinary.readouterr().out


def test_report(nfs_path, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", str(nfs_path), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out / "report.html")
    page = (out / "report.html").read_text()
    for analysis in ANALYSES.values():
        for name in table_names(analysis):
            assert (out / f"{name}.parquet").exists() and (out / f"{name}.csv").exists()
            assert f"<a href='{name}.csv'>CSV</a>" in page, name
        assert (out / f"{analysis.name}.png").exists() and (out / f"{analysis.name}.svg").exists()
        start = page.index(f"<section id='{analysis.name}'")
        section = page[start : page.index("</section>", start)]
        assert f"<img src='{analysis.name}.png'" in section and "<table>" in section, analysis.name
    assert "Capture loss estimated from RPCs" in page and "<svg" not in page
    assert pq.read_table(out / "nfs_latency.parquet").num_rows == 8


INCOMPLETE = {"complete": False, "missing_sources": ["/traces/2.pcapng", "/traces/3.pcapng"]}


def test_incomplete_dataset_is_refused_by_every_command(tmp_path):
    path = small(tmp_path, meta=INCOMPLETE)
    # the catalog lists /traces/0.pcapng; with the two missing ones, 3 sources in all
    want = (f"tapdeck-analyze: {path} is incomplete: 2 of 3 sources not converted yet (e.g. "
            "/traces/2.pcapng); finish the conversion (all --shard runs), or pass "
            "--allow-incomplete\n")  # fmt: skip
    for args in (("report", path, "--out", tmp_path / "report"), ("run", "rates", path),
                 ("sql", path, "SELECT 1 AS one")):  # fmt: skip
        r = run_cli(*args)
        assert (r.returncode, r.stderr, r.stdout) == (1, want, ""), args
    assert not (tmp_path / "report").exists()
    with pytest.raises(IncompleteDatasetError, match="2 of 3 sources not converted yet"):
        open_dataset(path)


def test_incomplete_dataset_is_refused_before_its_files_are_read(tmp_path):
    """An interrupted conversion may leave a partly written file: the answer is still that the
    dataset is incomplete, not that a file is unreadable."""
    path = small(tmp_path, meta={"complete": False})
    part = next((path / "packets").rglob("*.parquet"))
    part.write_bytes(part.read_bytes()[:50])
    want = (f"tapdeck-analyze: {path} is incomplete: its conversion has not finished or was "
            "interrupted; finish the conversion (all --shard runs), or pass --allow-incomplete\n")  # fmt: skip
    r = run_cli("run", "rates", path)
    assert (r.returncode, r.stderr) == (1, want)


def test_allow_incomplete_warns_and_the_report_says_so(tmp_path):
    path = small(tmp_path, meta=INCOMPLETE)
    warning = (f"tapdeck-analyze: WARNING: {path} is incomplete: 2 of 3 sources not converted "
               "yet (e.g. /traces/2.pcapng); the results leave those sources out\n")  # fmt: skip
    r = run_cli("sql", path, "SELECT count(*) AS n FROM packets", "--format", "csv",
                "--allow-incomplete")  # fmt: skip
    assert (r.returncode, r.stderr, r.stdout) == (0, warning, '"n"\n2\n')
    out = tmp_path / "report"
    r = run_cli("report", path, "--out", out, "--allow-incomplete")
    assert (r.returncode, r.stderr, r.stdout) == (0, warning, f"{out / 'report.html'}\n")
    page = (out / "report.html").read_text()
    banner = page.index("<p class=incomplete><strong>Incomplete dataset:</strong>")
    assert banner < page.index("<table class=summary>")
    assert "2 of 3 sources not converted yet (e.g. /traces/2.pcapng)" in page[banner:]
    ds = open_dataset(path, allow_incomplete=True)
    assert (
        ds.incomplete
        == f"{path} is incomplete: 2 of 3 sources not converted yet (e.g. /traces/2.pcapng)"
    )


def test_complete_datasets_and_older_ones_without_the_keys_are_read(tmp_path):
    for meta in ({}, {"complete": True, "missing_sources": []}):
        path = small(tmp_path / str(len(meta)), meta=meta)
        assert open_dataset(path).incomplete is None
        r = run_cli("sql", path, "SELECT count(*) AS n FROM packets", "--format", "csv")
        assert (r.returncode, r.stderr, r.stdout) == (0, "", '"n"\n2\n')


@pytest.mark.parametrize("meta, message", [
    ({"complete": "no"}, "complete is 'no', not true or false"),
    ({"complete": False, "missing_sources": "/traces/2.pcapng"},
     "missing_sources is not a list of paths"),
])  # fmt: skip
def test_bad_completeness_keys_are_one_line(tmp_path, meta, message):
    path = small(tmp_path, meta=meta)
    r = run_cli("run", "rates", path)
    assert (r.returncode, r.stderr) == (2, f"tapdeck-analyze: {path / 'dataset.json'}: {message}\n")


def test_usage_errors_exit_2(tmp_path):
    r = run_cli("run", "rates")
    assert r.returncode == 2 and "usage: tapdeck-analyze run" in r.stderr
    r = run_cli("sql", small(tmp_path), "SELECT 1", "--no-such-flag")
    assert r.returncode == 2 and "unrecognized arguments: --no-such-flag" in r.stderr


def test_a_failure_exits_1(tmp_path):
    r = run_cli("sql", small(tmp_path), "SELECT no_such_column FROM packets")
    assert r.returncode == 1, r
    assert r.stderr.startswith("tapdeck-analyze: query failed: ") and "Traceback" not in r.stderr


def test_every_help_states_the_exit_codes():
    for args in ((), ("run",), ("sql",), ("report",)):
        r = run_cli(*args, "--help")
        assert r.returncode == 0
        assert "Exit status: 0 ok, 1 failure" in " ".join(r.stdout.split()), args


def test_catalog_of_an_older_converter_reads(tmp_path):
    """Converters before issue 13 wrote catalog/sources' transaction_offset (ids were per-file
    offsets then): a column the schema no longer names is ignored, not an error."""
    path = small(tmp_path)
    f = path / "catalog" / "sources.parquet"
    t = pq.read_table(f)
    t = t.append_column("transaction_offset", pa.array([0] * t.num_rows, pa.int64()))
    pq.write_table(t.replace_schema_metadata(t.schema.metadata), f)
    ds = open_dataset(path)
    got = ds.query("SELECT path FROM sources")
    assert got.to_pylist() == [{"path": "/traces/0.pcapng"}]
