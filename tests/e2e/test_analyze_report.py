"""`tapdeck-analyze` report, bad input and name decryption on real conversions (issues 6, 18):

- the report of a converted NFSv3+v4 trace opens in headless Chromium (Debian's `chromium`),
  and the rendered DOM has the summary and, for every analysis, a section with its plot (an
  <img> of a PNG beside the page) and its table(s) with rows; every link and image is a file
  beside the page (it opens from its directory, no server); a screenshot is taken and must
  not be blank;
- in headless Chromium driven by Selenium at 1280x800, the summary (trace, packets, drops by
  cause, retention, RPC matching) and every analysis' headline lie within the first viewport
  (DOM bounding boxes), every image loaded, and report.html is under 300 KB; the summary's
  packets and first/last packet times are tshark's;
- a store recorded with staging-full drops and retention deletions (and one whose retention
  held writing, so chunks were lost as write errors), converted: `capture_stats` carries each
  cause per file exactly as `tapdeck info --json` counts the file's drops and, summed, as the
  recorder's final stats record counts them; retention's deleted files and bytes as the stats
  record says; the report's summary shows those numbers;
- bad input on a real dataset (missing, partial, a newer schema version, an empty time range):
  exit status 2 and one line on stderr, no traceback;
- `files --key` shows names decrypted in Python (AES-SIV, `cryptography`) exactly as `tapdeck
  decrypt` decrypts them, and as a conversion without the key stores them; a wrong key is one
  line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from anatools import analyze, analyze_cli
from conftest import REPO, SLOW, final_stats, run, wait_for
from convtools import convert_ok, table

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
ANALYSES = ["rates", "burstiness", "sizes", "nfs_latency", "nfs_ops", "rpc_matching", "files",
            "recency"]
MAX_PAGE = 300_000
SUMMARY = ["Trace", "Packets stored", "Dropped by the capture", "Deleted by retention",
           "RPC matching", "Capture loss estimated from RPCs"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """An nfsgen trace: NFSv3 and NFSv4.0 clients, names in LOOKUP/CREATE/OPEN."""
    base = tmp_path_factory.mktemp("analyze-report")
    pcap = base / "nfs.pcap"
    r = run([sys.executable, REPO / "bench" / "nfsgen.py", pcap, "--transactions", "1500",
             "--clients", "4", "--v4-share", "0.5", "--think-us", "20000", "--seed", "9"],
            timeout=SLOW)
    assert r.returncode == 0, r.describe()
    return pcap


@pytest.fixture(scope="module")
def dataset(trace, tapdeck):
    ds = trace.parent / "ds"
    convert_ok(tapdeck, ds, trace)
    return ds


@pytest.fixture(scope="module")
def report(dataset):
    out = dataset.parent / "report"
    r = analyze_cli("report", dataset, "--out", out)
    assert r.returncode == 0, r.describe()
    page = out / "report.html"
    assert r.out.strip() == str(page)
    return page


# ---- the report in Chromium ----------------------------------------------------------------

class Sections(HTMLParser):
    """Per <section id=NAME>: count of <img>, <table>, and <td> cells and the images' sources;
    the summary table's row headers; every href and src."""

    def __init__(self):
        super().__init__()
        self.sections: dict[str, dict] = {}
        self.current = None
        self.summary: list[str] = []
        self.links: list[str] = []
        self.in_th = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.links += [a[k] for k in ("href", "src") if a.get(k)]
        if tag == "section":
            self.current = a.get("id")
            self.sections[self.current] = {"img": 0, "table": 0, "td": 0, "srcs": []}
        elif self.current:
            if tag in ("img", "table", "td"):
                self.sections[self.current][tag] += 1
            if tag == "img":
                self.sections[self.current]["srcs"].append(a.get("src"))
        elif tag == "th":
            self.in_th = True

    def handle_endtag(self, tag):
        if tag == "section":
            self.current = None
        if tag == "th":
            self.in_th = False

    def handle_data(self, data):
        if self.in_th and not self.current and data.strip():
            self.summary.append(data.strip())


def chromium(*args, timeout=120):
    user = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"chromium-profile-{os.getpid()}")
    return run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", f"--user-data-dir={user}", *args],
               timeout=timeout)


def test_report_renders_every_section_with_plot_and_table(report, tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/setup.sh installs it)")
    out = report.parent
    dom = chromium("--dump-dom", report.as_uri())
    assert dom.returncode == 0, dom.describe()
    parsed = Sections()
    parsed.feed(dom.out)
    assert [s for s in parsed.sections if s in ANALYSES] == ANALYSES
    for name, counts in parsed.sections.items():
        assert counts["img"] >= 1, (name, counts)
        for src in counts["srcs"]:
            assert (out / src).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", (name, src)
        assert counts["table"] >= 1 and counts["td"] >= 2, (name, counts)
    assert parsed.summary == SUMMARY
    # Everything the page refers to lies beside it: it opens from its directory.
    for link in parsed.links:
        if link.startswith("#"):
            continue
        assert "/" not in link and ":" not in link, f"not a file beside the page: {link}"
        assert (out / link).stat().st_size > 0, link
    for name in ANALYSES:
        for ext in ("parquet", "csv"):
            assert (out / f"{name}.{ext}").stat().st_size > 0
            assert f"{name}.{ext}" in parsed.links, f"the page does not link {name}.{ext}"
    shot = tmp_path / "report.png"
    s = chromium(f"--screenshot={shot}", "--window-size=1400,6000", report.as_uri())
    assert s.returncode == 0 and shot.stat().st_size > 50_000, s.describe()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def browser(width, height):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--disable-background-networking", "--disable-component-update",
              "--disable-sync", "--allow-file-access-from-files"]:
        opts.add_argument(a)
    # Selenium is given the driver: it must not look for one on the Internet.
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    # The viewport itself (a window's size includes the browser's own bars).
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1,
                            "mobile": False})  # fmt: skip
    return driver


def tshark_first_last(pcap) -> tuple[int, int, int]:
    """(packets, first and last capture time in ns) as tshark reads the trace."""
    r = run(["tshark", "-r", pcap, "-n", "-T", "fields", "-e", "frame.time_epoch"], timeout=SLOW)
    assert r.returncode == 0, r.describe()
    times = []
    for line in r.out.split():
        sec, _, frac = line.partition(".")
        times.append(int(sec) * 10**9 + int((frac + "000000000")[:9]))
    return len(times), min(times), max(times)


def utc_ms(ns: int) -> str:
    import datetime as dt

    t = dt.datetime.fromtimestamp(ns // 10**9, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % 10**9 // 10**6:03d}Z"


@pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="chromium and chromium-driver are not installed (scripts/setup.sh installs them)",
)
def test_summary_and_headlines_fill_the_first_screen_of_a_small_page(report, trace):
    from selenium.webdriver.common.by import By

    size = report.stat().st_size
    assert size < MAX_PAGE, f"report.html is {size} bytes, over {MAX_PAGE}"
    driver = browser(1280, 800)
    try:
        driver.set_page_load_timeout(30)
        driver.get(report.as_uri())
        wait_for(lambda: driver.execute_script(
            "return document.readyState === 'complete' && "
            "[...document.images].every(i => i.complete)"), 30,
            "the page and its images to load")  # fmt: skip
        view = driver.execute_script("return [window.innerWidth, window.innerHeight]")
        assert view == [1280, 800], f"the viewport is {view}, not 1280x800"
        broken = driver.execute_script(
            "return [...document.images].filter(i => !i.naturalWidth).map(i => i.src)")
        assert not broken, f"images that did not load from the directory: {broken}"
        assert driver.execute_script("return document.images.length") >= len(ANALYSES)

        def bottom(el):
            return driver.execute_script("return arguments[0].getBoundingClientRect().bottom", el)

        summary = driver.find_element(By.ID, "summary")
        assert 0 < bottom(summary) <= view[1], (
            f"the summary ends at {bottom(summary)} px, below the first screen ({view[1]} px)")
        rows = {tr.find_element(By.TAG_NAME, "th").text: tr.find_element(By.TAG_NAME, "td").text
                for tr in summary.find_elements(By.CSS_SELECTOR, "table tr")}  # fmt: skip
        assert list(rows) == SUMMARY
        findings = summary.find_elements(By.CSS_SELECTOR, "#findings li")
        names = [li.text.split(":")[0] for li in findings]
        assert [n for n in names if n in ANALYSES] == ANALYSES, names
        for li in findings:
            assert li.is_displayed() and 0 < bottom(li) <= view[1], li.text
            assert len(li.text) > len(li.text.split(":")[0]) + 10, li.text
        # Independent numbers: tshark's packet count and first and last packet.
        packets, first, last = tshark_first_last(trace)
        assert rows["Packets stored"].startswith(f"{packets:,},"), rows["Packets stored"]
        assert rows["Trace"].startswith(f"{utc_ms(first)} – {utc_ms(last)}"), rows["Trace"]
        # nfsgen loses nothing: every RPC matched, no capture statistics in a classic pcap.
        assert re.match(r"\d[\d,]* transactions; 0 calls without reply, 0 replies without",
                        rows["RPC matching"]), rows["RPC matching"]  # fmt: skip
        assert "not recorded" in rows["Dropped by the capture"]
        text = {li.text.split(":")[0]: li.text for li in findings}
        assert text["rpc_matching"].startswith("rpc_matching: Every call and reply of")
    finally:
        driver.quit()


# ---- a store's drops and retention in capture_stats and the summary -------------------------

# A synthetic source faster than an 8 MiB pool drains: staging-full drops in every run. Small
# files and --max-bytes make retention delete files while it records; with --max-bytes 3MiB
# it can only keep the limit by deleting the newest files, so it holds writing and chunks are
# lost as write errors. Every case records plain files (--codec none): how much a compressed
# run stores depends on the ladder's choices, and compressed at 8:1 a run could fit the limit
# and delete nothing; plain, each case writes several times the limit.
OVERLOAD = ["--synthetic", "64", "--staging", "8MiB", "--chunk-size", "512KiB",
            "--rotate-size", "1MiB", "--min-keep", "0", "--log", "error"]
STORES = {
    "pcapng": ["--count", "3000000", "--max-bytes", "4MiB", "--codec", "none"],
    "pcap": ["--count", "3000000", "--max-bytes", "4MiB", "--format", "pcap", "--codec", "none"],
    "held": ["--count", "1000000", "--max-bytes", "3MiB", "--codec", "none"],
}


@pytest.mark.parametrize("kind", list(STORES))
def test_capture_stats_carry_every_drop_cause_and_retention(kind, tapdeck, tmp_path):
    store, ds = tmp_path / "S", tmp_path / "ds"
    r = tapdeck.record(store, *OVERLOAD, *STORES[kind])
    assert r.returncode == 0, r.describe()
    last = final_stats(store)
    dropped = last["totals"]["dropped"]
    assert dropped["staging_full"] > 0, "the pool kept up: the test did not overload it"
    assert last["files_deleted"] > 0, "retention deleted nothing: the store stayed too small"
    convert_ok(tapdeck, ds, store)
    rows = table(ds, "capture_stats")
    sources = {s["file_id"]: s["path"]
               for s in pq.read_table(ds / "catalog" / "sources.parquet").to_pylist()}  # fmt: skip
    assert rows and all(r["source"] == "tapdeck" for r in rows), rows
    causes = ("kernel_dropped", "staging_dropped", "write_dropped")
    assert all(r[c] is not None for r in rows for c in causes), rows
    # Per file, the drops `tapdeck info` counts for it (its own, not since the run began).
    info = tapdeck.info(store)
    per_file = {str(Path(f["path"]).resolve()): f["drops"] for f in info["files"]}
    got = {sources[r["file_id"]]: sum(r[c] for c in causes) for r in rows}
    assert got == per_file
    assert sum(got.values()) == info["totals"]["drops"]
    total = {c: sum(r[c] for r in rows) for c in causes}
    if kind == "held":
        # Chunks refused while no file could be written are counted by the recorder only.
        assert total["write_dropped"] > 0, "retention never held writing: no write errors"
        assert total["write_dropped"] <= dropped["write_error"]
    else:
        assert total == {"kernel_dropped": dropped["kernel"],
                         "staging_dropped": dropped["staging_full"],
                         "write_dropped": dropped["write_error"]}  # fmt: skip
    deleted = [(r["files_deleted"], r["bytes_deleted"]) for r in rows
               if r["files_deleted"] is not None]  # fmt: skip
    assert deleted == [(last["files_deleted"], last["bytes_deleted"])]
    # The report's summary says the same.
    a = analyze_cli("report", ds, "--out", tmp_path / "report")
    assert a.returncode == 0, a.describe()
    page = (tmp_path / "report" / "report.html").read_text()
    line = re.search(r"<th>Dropped by the capture</th><td>([^<]*)</td>", page)[1]
    seen = sum(r["received"] for r in rows)
    if kind != "held":
        assert seen == last["totals"]["seen"]
    assert line == (f"{sum(total.values()):,} of {seen:,} seen "
                    f"({sum(total.values()) / seen * 100:.3g} %): kernel {total['kernel_dropped']:,}"
                    f" · staging pool full {total['staging_dropped']:,} · write errors "
                    f"{total['write_dropped']:,} · interface not recorded · forwarding not "
                    "recorded"), line  # fmt: skip
    retention = re.search(r"<th>Deleted by retention</th><td>([^<]*)</td>", page)[1]
    assert retention.startswith(f"{last['files_deleted']:,} files, "), retention


# ---- bad input -----------------------------------------------------------------------------

def one_line(r) -> str:
    assert r.returncode == 2, r.describe()
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tapdeck-analyze: "), r.stderr
    return lines[0]


def test_bad_input_on_a_real_dataset(dataset, tmp_path):
    line = one_line(analyze_cli("run", "rates", tmp_path / "nothing"))
    assert "nothing" in line
    # partial: dataset.json is written last, so a conversion cut short has none
    partial = tmp_path / "partial"
    shutil.copytree(dataset, partial)
    (partial / "dataset.json").unlink()
    assert "dataset.json" in one_line(analyze_cli("run", "nfs_latency", partial))
    # a data file cut in the middle
    cut = tmp_path / "cut"
    shutil.copytree(dataset, cut)
    victim = sorted((cut / "rpc").rglob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    assert victim.name in one_line(analyze_cli("run", "nfs_latency", cut))
    # a newer schema version
    newer = tmp_path / "newer"
    shutil.copytree(dataset, newer)
    meta = json.loads((newer / "dataset.json").read_text())
    meta["schema_version"] += 1
    (newer / "dataset.json").write_text(json.dumps(meta))
    assert "schema" in one_line(analyze_cli("run", "rates", newer))
    # an empty time range: after the last packet, and start after end
    first = analyze("rates", dataset)[0]["window_start_ns"]
    assert one_line(analyze_cli("run", "rates", dataset, "--start", "2030-01-01T00:00:00Z"))
    assert one_line(analyze_cli("run", "rates", dataset, "--start", str(first // 10**9 + 10),
                                "--end", str(first // 10**9 + 5)))
    assert one_line(analyze_cli("report", dataset, "--out", tmp_path / "r",
                                "--start", "2030-01-01T00:00:00Z"))


# ---- names decrypted with the key ----------------------------------------------------------

def test_files_decrypts_names_like_tapdeck_decrypt(trace, dataset, tapdeck, tmp_path):
    key, other = tmp_path / "K", tmp_path / "K2"
    for k in (key, other):
        assert tapdeck("keygen", k).returncode == 0
    enc = tmp_path / "enc"
    convert_ok(tapdeck, enc, trace, args=("--key", key))
    plain = analyze("files", dataset)
    hidden = analyze("files", enc)
    shown = analyze("files", enc, "--key", key)
    assert [r["fh"] for r in plain] == [r["fh"] for r in hidden] == [r["fh"] for r in shown]
    names = [r["name"] for r in hidden if r["name"]]
    assert len(names) > 10 and all(n.startswith("~") for n in names)
    ref = tapdeck("decrypt", "--key", key, *names)
    assert ref.returncode == 0, ref.describe()
    assert ref.out.splitlines() == [r["name"] for r in shown if r["name"]]
    assert [(r["name"], r["path"]) for r in shown] == [(r["name"], r["path"]) for r in plain]
    # paths start with "…/" where lookups do not reveal the whole path: not a name
    paths = [r["path"].removeprefix("…/") for r in hidden if r["path"]]
    ref = tapdeck("decrypt", "--key", key, *paths)
    assert ref.returncode == 0, ref.describe()
    assert ref.out.splitlines() == [r["path"].removeprefix("…/") for r in shown if r["path"]]
    line = one_line(analyze_cli("run", "files", enc, "--key", other))
    assert "wrong key" in line
    assert "not encrypted" in one_line(analyze_cli("run", "files", dataset, "--key", key))
