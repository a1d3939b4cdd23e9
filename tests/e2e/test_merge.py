"""`tapdeck merge` and multi-store `extract` on recorded stores, without a network (the live
split is tests/e2e/test_split_merge.py).

Three stores recorded with `record -r` from generated pcaps (several files and chunks each):
a and b overlap in time, c starts after a gap. Oracles: mergecap (Wireshark's chronological
merge) for the plain merge, and a merge computed here in Python for offsets, dedup and
filters. Packets are compared by timestamp (ns), original length and bytes.
"""

from __future__ import annotations

import json

import pytest
from conftest import Pkt, gen_packets, one_error_line, read_packets, run, write_pcap

T0 = 1_795_413_454_000_000_000  # 2026-11-23T05:57:34Z
S = 10**9


def record(tapdeck, store, pcap):
    r = tapdeck.record(store, "-r", pcap, "--staging", "32MiB", "--chunk-size", "512KiB",
                       "--rotate-size", "1MiB")
    assert r.returncode == 0, r.describe()


@pytest.fixture(scope="module")
def stores(tapdeck, tmp_path_factory):
    base = tmp_path_factory.mktemp("merge")
    traces = {
        "a": gen_packets(3000, start_ns=T0, duration_ns=3 * S, seed=21),
        "b": gen_packets(2000, start_ns=T0 + S // 2, duration_ns=3 * S, seed=22,
                         sizes=(60, 1514)),
        "c": gen_packets(500, start_ns=T0 + 10 * S, duration_ns=S, seed=23),
    }
    out = {}
    for name, packets in traces.items():
        pcap = write_pcap(base / f"{name}.pcap", packets)
        record(tapdeck, base / name, pcap)
        out[name] = (base / name, pcap, packets)
    stamps = [p.ts_ns for _, _, ps in out.values() for p in ps]
    assert len(set(stamps)) == len(stamps), "the generator made a tie; change a seed"
    return base, out


def key(p: Pkt):
    return (p.ts_ns, p.orig_len, p.data)


def extract(tapdeck, out, *stores, bpf=""):
    r = tapdeck("extract", *stores, "-f", bpf, "-w", out, timeout=120)
    assert r.returncode == 0, r.describe()
    return read_packets(out)


def merge(tapdeck, out, *args) -> dict:
    r = tapdeck("merge", *args, "--out", out, "--json", timeout=120)
    assert r.returncode == 0, r.describe()
    return json.loads(r.stdout)


def python_merge(*inputs):
    """Stable merge of (packets, offset) lists by corrected time, ties to the earlier input."""
    tagged = [(p.ts_ns + off, i, n, Pkt(p.linktype, p.ts_ns + off, p.orig_len, p.data))
              for i, (ps, off) in enumerate(inputs) for n, p in enumerate(ps)]
    return [t[3] for t in sorted(tagged, key=lambda t: t[:3])]


def test_merge_equals_mergecap_and_the_report_adds_up(tapdeck, stores, tmp_path):
    _, s = stores
    out = tmp_path / "abc"
    report = merge(tapdeck, out, s["a"][0], s["b"][0], s["c"][0])
    got = extract(tapdeck, tmp_path / "abc.pcapng", out)
    want_file = tmp_path / "mergecap.pcapng"
    r = run(["mergecap", "-w", want_file, s["a"][1], s["b"][1], s["c"][1]], timeout=120)
    assert r.returncode == 0, r.describe()
    want = read_packets(want_file)
    assert len(got) == 5500
    assert [key(p) for p in got] == [key(p) for p in want]
    assert tapdeck.verify(out).returncode == 0

    total_bytes = sum(p.orig_len for _, _, ps in s.values() for p in ps)
    assert report["packets_written"] == 5500 and report["duplicates"] == 0
    for inp, name in zip(report["inputs"], "abc"):
        ps = s[name][2]
        assert inp["label"] == name
        assert inp["packets"] == inp["merged"]["packets"] == len(ps)
        assert inp["files"] >= (2 if name != "c" else 1)
        assert inp["merged"]["wire_bytes"] == sum(p.orig_len for p in ps)
        assert inp["first_ts_ns"] == ps[0].ts_ns and inp["last_ts_ns"] == ps[-1].ts_ns
        assert inp["packet_share"] == pytest.approx(len(ps) / 5500)
        assert inp["byte_share"] == pytest.approx(inp["merged"]["wire_bytes"] / total_bytes)
    spans = {(x["a"], x["b"]): x for x in report["spans"]}
    a, b, c = s["a"][2], s["b"][2], s["c"][2]
    assert spans[("a", "b")]["overlap_ns"] == min(a[-1].ts_ns, b[-1].ts_ns) - b[0].ts_ns
    assert spans[("a", "c")]["gap_ns"] == c[0].ts_ns - a[-1].ts_ns
    assert spans[("b", "c")]["gap_ns"] == c[0].ts_ns - b[-1].ts_ns

    # info names where a merged store's packets came from.
    info = tapdeck.info(out)
    assert [(i["label"], i["packets"]) for i in info["merge"]["inputs"]] == [
        ("a", 3000), ("b", 2000), ("c", 500)]
    assert info["totals"]["packets"] == 5500
    r = tapdeck("info", out)
    assert "merged from 3 stores:" in r.out and "  b " in r.out

    # The text report says the same in lines a person reads.
    r = tapdeck("merge", s["a"][0], s["c"][0], "--out", tmp_path / "ac", timeout=120)
    assert r.returncode == 0, r.describe()
    assert "accounting: merged 3500 + duplicates 0 = 3500 of 3500 packets" in r.out
    assert f"spans: a and c leave a gap of {(c[0].ts_ns - a[-1].ts_ns) / 1e9:.6f} s" in r.out


def test_offsets_move_one_store_exactly(tapdeck, stores, tmp_path):
    _, s = stores
    out = tmp_path / "shifted"
    report = merge(tapdeck, out, s["a"][0], s["b"][0], "--offset", f"{s['b'][0]}=-250ms",
                   "--offset", f"{s['a'][0]}=+7")
    got = extract(tapdeck, tmp_path / "shifted.pcapng", out)
    want = python_merge((s["a"][2], 7), (s["b"][2], -250_000_000))
    assert [key(p) for p in got] == [key(p) for p in want]
    assert [i["offset_ns"] for i in report["inputs"]] == [7, -250_000_000]
    manifest = json.loads((out / "manifest.json").read_text())
    assert [i["offset_ns"] for i in manifest["merge"]["inputs"]] == [7, -250_000_000]
    # --start/--end select by corrected time, in merge and in extract alike.
    lo, hi = want[100].ts_ns, want[900].ts_ns
    windowed = merge(tapdeck, tmp_path / "win", s["a"][0], s["b"][0], "--offset",
                     f"{s['b'][0]}=-250ms", "--offset", f"{s['a'][0]}=+7", "--start",
                     f"{lo // S}.{lo % S:09d}", "--end", f"{hi // S}.{hi % S:09d}")
    assert windowed["packets_written"] == 800
    r = tapdeck("extract", s["a"][0], s["b"][0], "-f", "udp", "--offset", f"{s['b'][0]}=-250ms",
                "--offset", f"{s['a'][0]}=+7", "--start", f"{lo // S}.{lo % S:09d}", "--end",
                f"{hi // S}.{hi % S:09d}", "-w", tmp_path / "x.pcapng", timeout=120)
    assert r.returncode == 0, r.describe()
    assert [key(p) for p in read_packets(tmp_path / "x.pcapng")] == [
        key(p) for p in want[100:900] if p.data[23] == 17]


def test_dedup_drops_exactly_the_other_monitors_copies(tapdeck, stores, tmp_path):
    _, s = stores
    a = s["a"][2]
    # A second monitor saw every third frame of a, 300 ns later, plus frames of its own.
    copies = [Pkt(p.linktype, p.ts_ns + 300, p.orig_len, p.data) for p in a[::3]]
    own = gen_packets(200, start_ns=T0 + 1, duration_ns=3 * S, seed=24)
    mirror = sorted(copies + own, key=lambda p: p.ts_ns)
    pcap = write_pcap(tmp_path / "mirror.pcap", mirror)
    record(tapdeck, tmp_path / "mirror", pcap)

    out = tmp_path / "dedup"
    report = merge(tapdeck, out, s["a"][0], tmp_path / "mirror", "--dedup")
    assert report["duplicates"] == len(copies)
    assert report["inputs"][1]["merged"]["duplicates"] == len(copies)
    assert report["inputs"][1]["merged"]["packets"] == len(own)
    assert report["inputs"][0]["merged"]["duplicates"] == 0
    got = extract(tapdeck, tmp_path / "dedup.pcapng", out)
    assert [key(p) for p in got] == [key(p) for p in python_merge((a, 0), (own, 0))]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["merge"]["dedup_window_ns"] == 1_000_000
    assert [i["duplicates"] for i in manifest["merge"]["inputs"]] == [0, len(copies)]
    # A window narrower than the 300 ns between the copies keeps them all.
    narrow = merge(tapdeck, tmp_path / "narrow", s["a"][0], tmp_path / "mirror", "--dedup",
                   "--dedup-window", "299ns")
    assert narrow["duplicates"] == 0
    assert narrow["packets_written"] == len(a) + len(mirror)
    edge = merge(tapdeck, tmp_path / "edge", s["a"][0], tmp_path / "mirror", "--dedup",
                 "--dedup-window", "300ns")
    assert edge["duplicates"] == len(copies)


@pytest.mark.parametrize("args, says", [
    (["{a}", "--out", "{a}"], "is one of the inputs"),
    (["{a}", "--out", "{existing}"], "already holds a store"),
    (["{a}", "--offset", "{tmp}/nope=5", "--out", "{tmp}/o"], "is not one of the stores given"),
    (["{a}", "--offset", "{a}=5x", "--out", "{tmp}/o"], "--offset"),
    (["{tmp}/missing", "--out", "{tmp}/o"], "not a store directory"),
    (["{a}", "--dedup", "--dedup-window=-5", "--out", "{tmp}/o"], "must not be negative"),
])
def test_bad_arguments_get_one_line(tapdeck, stores, tmp_path, args, says):
    _, s = stores
    subst = {"a": s["a"][0], "existing": s["b"][0], "tmp": tmp_path}
    r = tapdeck("merge", *[a.format(**subst) for a in args])
    assert r.returncode != 0
    assert says in one_error_line(r.stderr), r.stderr


def test_extract_of_two_stores_wants_the_filter_with_f(tapdeck, stores, tmp_path):
    _, s = stores
    r = tapdeck("extract", s["a"][0], s["b"][0], "-w", tmp_path / "x.pcapng")
    assert r.returncode != 0
    assert "give the filter with -f" in one_error_line(r.stderr)
    assert not (tmp_path / "x.pcapng").exists()


def test_convert_merge_converts_the_merge_and_follows_its_inputs(tapdeck, stores, tmp_path):
    from convtools import table

    _, s = stores
    ds = tmp_path / "ds"

    def convert(*names) -> dict:
        r = tapdeck("convert", *[s[n][0] for n in names], "--merge", "--out", ds, "--json",
                    "-q", timeout=120)
        assert r.returncode == 0, r.describe()
        return json.loads(r.stdout)

    def rows_by_time():
        return sorted((r["time_ns"], r["interface"], r["wire_len"])
                      for r in table(ds, "packets"))

    def want(*names):
        # One interface per input in the merged store: its position among the inputs.
        return sorted((p.ts_ns, i, p.orig_len) for i, n in enumerate(names) for p in s[n][2])

    first = convert("a", "b")
    assert first["counts"]["packets"] == 5000
    assert rows_by_time() == want("a", "b")
    again = convert("a", "b")
    assert (again["converted"], again["skipped"]) == (0, first["sources"])
    # Another set of inputs: merged again, and the dataset holds the new merge only.
    convert("a", "c")
    assert rows_by_time() == want("a", "c")
