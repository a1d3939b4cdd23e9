"""`tapdeck-analyze` report, bad input and name decryption on real conversions (issue 6):

- the report of a converted NFSv3+v4 trace opens in headless Chromium (Debian's `chromium`),
  and the rendered DOM has the summary and, for every analysis, a section with its plot (an
  inline SVG with drawn paths) and its table(s) with rows; a screenshot is taken and must not
  be blank;
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

import pytest
from anatools import analyze, analyze_cli
from conftest import REPO, SLOW, run
from convtools import convert_ok

CHROMIUM = shutil.which("chromium")
ANALYSES = ["rates", "burstiness", "sizes", "nfs_latency", "nfs_ops", "rpc_matching", "files",
            "recency"]


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


# ---- the report in Chromium ----------------------------------------------------------------

class Sections(HTMLParser):
    """Per <section id=NAME>: count of <svg>, <path> inside svgs, <table>, and <td> cells; plus
    the summary table's row headers."""

    def __init__(self):
        super().__init__()
        self.sections: dict[str, dict] = {}
        self.current = None
        self.summary: list[str] = []
        self.in_th = False
        self.depth = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.current = a.get("id")
            self.sections[self.current] = {"svg": 0, "path": 0, "table": 0, "td": 0, "h3": 0}
        elif self.current:
            if tag in ("svg", "path", "table", "td"):
                self.sections[self.current][tag] += 1
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


def test_report_renders_every_section_with_plot_and_table(dataset, tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/setup.sh installs it)")
    r = analyze_cli("report", dataset, "--out", tmp_path / "report")
    assert r.returncode == 0, r.describe()
    page = tmp_path / "report" / "report.html"
    assert r.out.strip() == str(page)
    html = page.read_text()
    external = re.findall(r"""(?:src|href)\s*=\s*["'](?!#|data:)[^"']*""", html)
    assert not external, f"the report must be self-contained: {external[:3]}"
    dom = chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.describe()
    parsed = Sections()
    parsed.feed(dom.out)
    assert list(parsed.sections) == ANALYSES
    for name, counts in parsed.sections.items():
        assert counts["svg"] >= 1 and counts["path"] >= 5, (name, counts)
        assert counts["table"] >= 1 and counts["td"] >= 2, (name, counts)
    for label in ("Packets", "Bytes on the wire", "RPC transactions", "Unmatched calls / replies",
                  "Estimated loss from unmatched RPCs"):
        assert label in parsed.summary, parsed.summary
    for name in ANALYSES:
        for ext in ("parquet", "csv"):
            assert (tmp_path / "report" / f"{name}.{ext}").stat().st_size > 0
    shot = tmp_path / "report.png"
    s = chromium(f"--screenshot={shot}", "--window-size=1400,6000", page.as_uri())
    assert s.returncode == 0 and shot.stat().st_size > 50_000, s.describe()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
