"""The web page of `tapdeck serve` and its timeline (issue 17): `/` in a real browser
(Debian's chromium, headless, driven by Selenium through chromium-driver), and
`/api/v1/stats`, the per-minute counts the page's chart draws.

- The page needs the token: without it a browser gets the login form (401) and nothing
  of the store; a wrong token is refused; the right one gets the page through a cookie.
- The page shows the store and its files, the chart draws points, and the query form
  counts exactly what `tcpdump -r ORIGINAL FILTER` selects and downloads a file that
  tcpdump reads with exactly those packets.
- A recording service keeps the timeline as it records: the minutes add up to what it
  saw and stored, survive a restart (`timeline.jsonl`), and are served read-only after.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request

import netlab
import pytest
from conftest import (
    gen_packets,
    kill_all,
    need,
    tcpdump_lines,
    tcpdump_packets,
    wait_for,
    write_pcap,
)
from netlab import free_port, run_in
from served import Served

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
TOKEN = "web-secret-0123456789"


def get(url, token=None, cookie=None):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if cookie:
        req.add_header("Cookie", cookie)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
    except urllib.error.URLError as e:
        # Not listening (yet): no status.
        return None, {}, str(e).encode()


@pytest.fixture
def served(tapdeck, tmp_path, procs):
    """A store recorded from a generated trace, served read-only with a token file (a
    `NAME TOKEN` line: the metrics token opens no page since issue 31)."""
    original = write_pcap(tmp_path / "original.pcap", gen_packets(4000, seed=17))
    store = tmp_path / "S"
    r = tapdeck(
        "record", "-r", original, "--store", store, "-q", "--stats-interval", "0.05"
    )
    assert r.returncode == 0, r.describe()
    token = tmp_path / "tokens"
    token.write_text(f"web {TOKEN}\n")
    s = Served(tapdeck.bin, procs, tmp_path, "--listen", f"127.0.0.1:{free_port()}",
               "--token-file", token, "--no-capture", store, token=TOKEN)
    base = f"http://{s.addr}"
    wait_for(
        lambda: get(base + "/healthz", TOKEN)[0] == 200,
        20,
        "the read-only service to answer /healthz",
    )
    return {"base": base, "original": original, "store": store, "proc": s.proc}


def test_the_page_and_its_assets_need_the_token(served):
    base = served["base"]
    code, headers, body = get(base + "/")
    assert code == 401, "the page was served without a token"
    text = body.decode()
    assert "action=/login" in text and str(served["store"]) not in text, (
        "a browser without the token must get the login form and nothing of the store"
    )
    assert "default-src 'self'" in headers.get("content-security-policy", ""), headers
    for path in ["/assets/tapdeck.js", "/api/v1/stats", "/api/v1/count", "/api/v1/files"]:
        assert get(base + path)[0] == 401, f"{path} answered without a token"
        assert get(base + path, "wrong-token-0123456789")[0] == 401, path
        assert get(base + path, cookie="tapdeck_session=wrong")[0] == 401, path
        # The cookie holds a session id, not a token (issue 31): the token there is no way in.
        assert get(base + path, cookie=f"tapdeck_session={TOKEN}")[0] == 401, path
    code, _, body = get(base + "/", TOKEN)
    assert code == 200 and str(served["store"]) in body.decode()
    code, headers, body = get(base + "/assets/uPlot.iife.min.js", TOKEN)
    assert code == 200 and b"uPlot" in body and headers["content-type"].startswith(
        "text/javascript"
    )


def test_stats_are_the_stats_records_per_minute(served, tapdeck):
    base = served["base"]
    code, _, body = get(base + "/api/v1/stats", TOKEN)
    assert code == 200, body
    doc = json.loads(body)
    assert doc["step_s"] == 60 and doc["source"] == "files", doc
    # The stats records' final totals, spread over minutes: the sums are the totals.
    final = json.loads(
        (served["store"] / "stats.jsonl").read_text().splitlines()[-1]
    )["totals"]
    points = doc["points"]
    assert points, "no minute of the recording in the last 24 h"
    assert sum(p["seen"] for p in points) == final["seen"] == 4000
    assert sum(p["stored"] for p in points) == final["stored"] == 4000
    assert sum(p["dropped"]["staging_full"] for p in points) == 0
    for bad, why in [
        ("?step=90", "whole number of minutes"),
        ("?start=yesterday", "is not a time"),
        ("?start=2000&end=1000", "start must be before end"),
        ("?start=0&step=60", "larger step"),
    ]:
        code, _, body = get(base + "/api/v1/stats" + bad, TOKEN)
        assert code == 400 and why in json.loads(body)["error"], (bad, body)


def browser(download_dir):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1200,1400",
    ]:
        opts.add_argument(a)
    opts.add_experimental_option(
        "prefs",
        {
            "download.default_directory": str(download_dir),
            "download.prompt_for_download": False,
        },
    )
    # Selenium is given the driver: it must not look for one on the Internet.
    return webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)


@pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="chromium and chromium-driver are not installed (scripts/setup.sh installs them)",
)
def test_the_page_in_a_browser_draws_the_timeline_counts_and_downloads(served, tmp_path):
    from selenium.webdriver.common.by import By

    base = served["base"]
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    driver = browser(downloads)
    try:
        driver.set_page_load_timeout(30)
        driver.get(base + "/")
        # No token yet: the login form, and a wrong token is refused.
        assert driver.find_elements(By.NAME, "token"), driver.page_source[:500]
        driver.find_element(By.NAME, "token").send_keys("not-the-token-0123456789")
        driver.find_element(By.CSS_SELECTOR, "form button").click()
        wait_for(
            lambda: "not one of the service's" in driver.page_source,
            10,
            "the login form to say the token is wrong",
        )
        driver.find_element(By.NAME, "token").send_keys(TOKEN)
        driver.find_element(By.CSS_SELECTOR, "form button").click()
        wait_for(
            lambda: driver.find_elements(By.ID, "chart-packets"),
            10,
            "the page after logging in",
        )
        assert str(served["store"]) in driver.page_source
        files = driver.find_elements(By.CSS_SELECTOR, "#files tr")
        assert len(files) >= 2, "the files table lists no file"

        # The chart: uPlot drew the per-minute points it was given.
        def drawn():
            return driver.execute_script(
                """const c = window.tapdeckCharts || [];
                   if (c.length < 2) return null;
                   const stored = c[0].data[2].filter(v => v != null);
                   const cv = document.querySelector('#chart-packets canvas');
                   const px = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
                   let green = 0;  // the 'stored' series' stroke, #2ca02c
                   for (let i = 0; i < px.length; i += 4)
                     if (Math.abs(px[i] - 44) < 30 && Math.abs(px[i+1] - 160) < 30
                         && Math.abs(px[i+2] - 44) < 30 && px[i+3] > 0) green++;
                   return {sum: stored.reduce((a, b) => a + b, 0), n: stored.length, green};"""
            )

        wait_for(lambda: drawn() is not None, 15, "the charts to be drawn")
        chart = drawn()
        assert chart["n"] >= 1 and chart["sum"] == 4000, chart
        assert chart["green"] > 0, f"the chart drew no point of the stored series: {chart}"
        status = driver.find_element(By.ID, "timeline-status").text
        assert "per 1 min" in status, status

        # The query form: a count, then the download, both against tcpdump.
        flt = "udp and port 53"
        want = tcpdump_lines(served["original"], flt)
        assert want, "the filter selects nothing: a useless check"
        driver.find_element(By.ID, "q-filter").send_keys(flt)
        driver.find_element(By.ID, "count").click()
        result = driver.find_element(By.ID, "q-result")
        wait_for(
            lambda: result.get_attribute("data-packets") is not None,
            30,
            "the count to come back",
        )
        assert int(result.get_attribute("data-packets")) == tcpdump_packets(want), result.text
        driver.find_element(By.ID, "download").click()

        def downloaded():
            # Chromium writes to a hidden temporary or NAME.crdownload, then renames.
            done = [
                p
                for p in downloads.iterdir()
                if p.name.startswith("tapdeck.") and not p.name.endswith(".crdownload")
            ]
            return done[0] if done else None

        wait_for(downloaded, 30, "the browser to finish the download")
        got = downloaded()
        assert tcpdump_lines(got) == want, (
            "the downloaded file is not exactly what tcpdump selects from the original"
        )
    finally:
        driver.quit()


def test_a_recording_service_keeps_its_timeline_across_a_restart(tapdeck, tmp_path, procs):
    need()
    with netlab.Lab("tdweb", ["x"]) as lab:
        try:
            timeline_across_a_restart(tapdeck, tmp_path, procs, lab.ns["x"])
        finally:
            kill_all(procs)  # before their namespace goes


def timeline_across_a_restart(tapdeck, tmp_path, procs, ns):
    store = tmp_path / "S"
    cfg = tmp_path / "t.toml"
    cfg.write_text(
        f'interface = ["lo"]\nstore = "{store}"\nstaging = "32MiB"\nchunk-size = "1MiB"\n'
        f'min-free = "0"\nlisten = "127.0.0.1:9798"\nstats = "{tmp_path / "stats.jsonl"}"\n'
    )

    def api(path):
        r = run_in(ns, "curl", "-s", f"http://127.0.0.1:9798{path}", text=True)
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout else None

    stats = tmp_path / "stats.jsonl"

    def run_once(pings, before, name):
        stats.unlink(missing_ok=True)
        s = Served(tapdeck.bin, procs, tmp_path, config=cfg, ns=ns, name=name)
        wait_for(
            lambda: (api("/healthz") or {}).get("phase") == "recording",
            20,
            "the service to record",
        )
        run_in(ns, "ping", "-c", str(pings), "-i", "0.002", "-q", "127.0.0.1")
        # While it records, the minutes grow with what it sees (every ping is two
        # packets on lo; the service's own HTTP answers add more).
        wait_for(
            lambda: sum(x["seen"] for x in api("/api/v1/stats")["points"])
            >= before + 2 * pings,
            20,
            "the timeline to count the pings while recording",
        )
        # The page says what is recording now: the open file's packets are not in the
        # store's numbers until it is finished.
        page = run_in(ns, "curl", "-s", "http://127.0.0.1:9798/", text=True).stdout
        assert "id=recording>Recording since" in page and "being written" in page, page[-1500:]
        assert s.terminate(timeout=20) == 0
        # After the stop, the file holds exactly the run's final totals.
        final = json.loads(stats.read_text().splitlines()[-1])["totals"]
        return final

    def on_file(key):
        lines = (store / "timeline.jsonl").read_text().splitlines()
        return sum(json.loads(x)[key] for x in lines)

    first = run_once(200, 0, "first")
    assert on_file("seen") == first["seen"] and on_file("stored") == first["stored"], (
        "the timeline file does not hold the run's final totals"
    )
    second = run_once(300, first["seen"], "second")
    both = first["seen"] + second["seen"]
    stored = first["stored"] + second["stored"]
    assert on_file("seen") == both and on_file("stored") == stored, (
        "after a restart the timeline file does not hold both runs' totals"
    )
    assert on_file("dropped_kernel") == 0
    r = tapdeck.verify(store)
    assert r.returncode == 0, f"the store with its timeline does not verify: {r.describe()}"
    # Read-only now: the file is the timeline.
    Served(tapdeck.bin, procs, tmp_path, "--listen", "127.0.0.1:9798", "--no-capture", store,
           ns=ns, name="read-only")
    wait_for(lambda: api("/healthz") is not None, 20, "the read-only service")
    doc = api("/api/v1/stats")
    assert doc["source"] == "files"
    assert sum(x["seen"] for x in doc["points"]) == both
    assert sum(x["stored"] for x in doc["points"]) == stored
    info = api("/api/v1/info")
    assert info["stores"][0]["packets"] == stored, (
        "the timeline's stored packets are not the packets the store holds"
    )


def test_a_window_before_the_retention_horizon_is_refused(served):
    base = served["base"]
    # The store's oldest packet is at conftest's T0 (2026-11-21); a window ending a day
    # before asks for packets no store holds any more.
    code, _, body = get(base + "/api/v1/packets?end=2026-11-20T00:00:00Z", TOKEN)
    assert code == 400, (code, body[:200])
    msg = json.loads(body)["error"]
    assert "retention horizon" in msg and "2026-11-20T00:00:00Z" in msg, msg
    code, _, body = get(base + "/api/v1/count?end=2026-11-20T00:00:00Z", TOKEN)
    assert code == 400 and "retention horizon" in json.loads(body)["error"]


def test_a_named_token_logs_in_through_the_form_and_the_cookie_is_its(
    tapdeck, tmp_path, procs
):
    """`token-file` (NAME TOKEN lines): the form's token becomes the cookie (a session of
    that name's, not the token: issue 31), the cookie opens the page and the API, the log
    names who logged in; a wrong token gets the form again (401) and no cookie; logging out
    forgets it."""
    import http.client

    original = write_pcap(tmp_path / "o.pcap", gen_packets(500, seed=3))
    store = tmp_path / "S"
    assert tapdeck("record", "-r", original, "--store", store, "-q").returncode == 0
    tokens = tmp_path / "tokens"
    tokens.write_text("# who may look\nalice alice-token-0123456789\nbob bob-token-0123456789\n")
    port = free_port()
    s = Served(tapdeck.bin, procs, tmp_path, "--listen", f"127.0.0.1:{port}", "--token-file",
               tokens, "--no-capture", store)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: get(base + "/healthz", "bob-token-0123456789")[0] == 200, 20, "serve")

    def login(token):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("POST", "/login", body=f"token={token}",
                  headers={"Content-Type": "application/x-www-form-urlencoded"})
        r = c.getresponse()
        r.read()
        return r.status, r.getheader("Set-Cookie") or ""

    status, cookie = login("nobody-0123456789")
    assert status == 401 and not cookie, "a wrong token got a cookie"
    status, cookie = login("alice-token-0123456789")
    assert status in (302, 303) and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Secure" not in cookie, "Secure on plain HTTP would make browsers drop it"
    assert "alice-token" not in cookie, "the cookie holds the token"
    pair = cookie.split(";")[0]
    code, _, body = get(base + "/", cookie=pair)
    assert code == 200 and str(store) in body.decode()
    code, _, body = get(base + "/api/v1/count?filter=udp", cookie=pair)
    assert code == 200 and json.loads(body)["packets"] > 0
    wait_for(lambda: "web login by alice" in s.log_text(), 5, "the login in the log")
    wait_for(lambda: "count by alice" in s.log_text(), 5, "the count, by name, in the log")
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", "/logout", headers={"Cookie": pair})
    r = c.getresponse()
    r.read()
    assert "Max-Age=0" in (r.getheader("Set-Cookie") or "")
    # The session itself is gone, not only the browser's copy of it.
    assert get(base + "/api/v1/files", cookie=pair)[0] == 401
