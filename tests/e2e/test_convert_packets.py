"""`tapdeck convert` and the packets table on the public corpus (no root needed).

- The whole corpus (tcpdump-tests and pcapng-test-vectors) converts in one run without a panic;
  files that cannot be read at all are named in one error line (then every file is tried on
  its own); per source, catalog/sources.packets and the packets rows equal capinfos' count.
- For every packet of every file capinfos and tshark read, the packets row's
  time_ns, wire_len, cap_len, ip_version, outermost addresses, protocol, ports, TCP
  flags/seq/ack, VLAN and fragment flag equal tshark's fields. The normalisations follow
  crates/decode/tests/tshark_oracle.rs: the outermost value of tshark's lists, IP version
  from the order in frame.protocols, IP reassembly off, the IPv6 protocol only without
  extension headers, the outermost VLAN tag only before any non-link layer, packets tshark
  calls malformed or whose IP header is cut by the snap length skipped, no transport for
  IPv6 jumbograms, ports only when the outermost transport is TCP/UDP, SunATM lengths with
  the 4-byte pseudo-header tshark leaves out. In deliberately malformed files (oobr, overflow,
  invalid, ... in the name) a null is allowed (not decodable) and times are not compared
  (invalid sub-second fields are read differently); whatever the converter did decode must
  equal tshark's.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import CORPUS, SLOW, run
from convtools import convert, table

TCPDUMP = CORPUS / "tcpdump-tests"
VECTORS = CORPUS / "pcapng-test-vectors"

FIELDS = ["frame.time_epoch", "frame.len", "frame.cap_len", "frame.protocols", "vlan.id",
          "ieee8021ad.id", "ip.src", "ip.dst", "ip.proto", "ip.flags.mf", "ip.frag_offset",
          "ip.hdr_len", "ipv6.src", "ipv6.dst", "ipv6.nxt", "ipv6.plen", "ipv6.fraghdr.offset",
          "ipv6.fraghdr.more", "tcp.srcport", "tcp.dstport", "tcp.seq", "tcp.ack",
          "tcp.flags", "udp.srcport", "udp.dstport", "_ws.expert.message",
          "_ws.malformed"]
# Link types crates/decode dissects (the others give rows with null IP and transport fields).
DECODED_LINKS = {0, 1, 9, 12, 14, 50, 100, 101, 104, 107, 108, 113, 123, 129, 178, 226, 228, 229,
                 239, 242, 258, 276}
# Dissected too, but tshark 4.0 has no dissector for them: compared with tcpdump instead.
TCPDUMP_ONLY_LINKS = {8: "SLIP", 281: "Broadcom tag", 282: "Broadcom tag, prepended"}
# Deliberately malformed files (fuzzer and bug-report cases): tshark judges their damaged
# headers and invalid timestamps in its own way.
MALFORMED = re.compile(r"oobr|overflow|invalid|crash|segfault|asan|kday|overrun")
LINK_LAYERS = {"eth", "ethertype", "sll", "sll2", "null", "raw", "loop", "vlan", "ieee8021ad",
               "pktap", "nflog", "ppp", "pppoes", "pppoe", "chdlc", "fr", "ipnet"}


def corpus_or_skip():
    if not TCPDUMP.is_dir():
        pytest.skip(f"corpus {TCPDUMP} absent")


def tshark_rows(path) -> list[dict]:
    args = ["tshark", "-r", path, "-n", "-o", "tcp.relative_sequence_numbers:FALSE",
            "-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE", "-T", "fields",
            "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=,"]
    for f in FIELDS:
        args += ["-e", f]
    r = run(args, timeout=SLOW)
    lines = r.out.splitlines()
    return [dict(zip(FIELDS, line.split("\t"))) for line in lines]


def capinfos_counts(paths) -> dict[str, int]:
    r = run(["capinfos", "-c", "-T", "-r", "-M", *paths], timeout=SLOW)
    out = {}
    for line in r.out.splitlines():
        p, _, n = line.rpartition("\t")
        if n.isdigit():
            out[str(Path(p).resolve())] = int(n)
    return out


def first(s: str) -> str:
    return s.split(",")[0] if s else ""


def num(s: str):
    s = first(s)
    if not s:
        return None
    try:
        return int(s, 16) if s.startswith("0x") else int(s)
    except ValueError:
        return None


def epoch_ns(s: str) -> int:
    sec, _, frac = s.partition(".")
    return int(sec) * 10**9 + int((frac + "000000000")[:9])


def expected(t: dict):
    """The row tshark's fields describe, as (comparable fields, skip reason or None)."""
    want = {"time_ns": epoch_ns(t["frame.time_epoch"]), "wire_len": int(t["frame.len"]),
            "cap_len": int(t["frame.cap_len"])}
    if t["_ws.malformed"] or "Malformed" in t["_ws.expert.message"]:
        return want, "malformed"
    protos = t["frame.protocols"].split(":")
    outer_tagged = False
    for p in protos:
        if p not in LINK_LAYERS:
            break
        outer_tagged |= p in ("vlan", "ieee8021ad")
    want["vlan"] = None
    if outer_tagged:
        want["vlan"] = num(t["ieee8021ad.id"]) if t["ieee8021ad.id"] else num(t["vlan.id"])
    ips = [i for i, p in enumerate(protos) if p in ("ip", "ipv6")]
    if not ips:
        return want, None
    if any(p not in LINK_LAYERS for p in protos[1:ips[0]]):
        return want, "IP inside an encapsulation the converter does not parse"
    v6 = protos[ips[0]] == "ipv6"
    want["ip_version"] = 6 if v6 else 4
    if v6:
        want["src_addr"], want["dst_addr"] = first(t["ipv6.src"]), first(t["ipv6.dst"])
        nxt = num(t["ipv6.nxt"])
        if nxt is not None and nxt not in (0, 43, 44, 51, 60):
            want["protocol"] = nxt
        second = ips[1] if len(ips) > 1 else len(protos)
        frag = "ipv6.fraghdr" in protos[:second] and (
            num(t["ipv6.fraghdr.more"]) == 1 or (num(t["ipv6.fraghdr.offset"]) or 0) != 0)
        want["ip_fragment"] = frag
        if num(t["ipv6.plen"]) == 0:
            return want, None  # jumbogram: tshark 4.0 does not dissect the transport
    else:
        want["src_addr"], want["dst_addr"] = first(t["ip.src"]), first(t["ip.dst"])
        want["protocol"] = num(t["ip.proto"])
        want["ip_fragment"] = num(t["ip.flags.mf"]) == 1 or (num(t["ip.frag_offset"]) or 0) != 0
        if want["ip_fragment"] and (num(t["ip.frag_offset"]) or 0) != 0:
            return want, None  # no transport header in a later fragment
    after = protos[ips[0] + 1:]
    nxt_layer = next((p for p in after if p not in ("ipv6.hopopts", "ipv6.routing",
                                                     "ipv6.dstopts", "ipv6.fraghdr")), None)
    if nxt_layer == "tcp" and want.get("protocol") in (6, None):
        want.update(src_port=num(t["tcp.srcport"]), dst_port=num(t["tcp.dstport"]),
                    tcp_seq=num(t["tcp.seq"]), tcp_ack=num(t["tcp.ack"]),
                    tcp_flags=num(t["tcp.flags"]))
    elif nxt_layer in ("udp", "udplite") and want.get("protocol") in (17, 136, None):
        want.update(src_port=num(t["udp.srcport"]), dst_port=num(t["udp.dstport"]))
    return want, None


@pytest.fixture(scope="module")
def corpus_dataset(tapdeck, tmp_path_factory):
    corpus_or_skip()
    ds = tmp_path_factory.mktemp("convert-corpus") / "ds"
    r, rep = convert(tapdeck, ds, TCPDUMP, VECTORS if VECTORS.is_dir() else TCPDUMP,
                     timeout=SLOW)
    assert "panicked" not in r.stderr and "RUST_BACKTRACE" not in r.stderr, r.describe()
    assert r.returncode in (0, 1), r.describe()
    return ds, r, rep


def test_whole_corpus_converts_without_panic(corpus_dataset, tapdeck, tmp_path):
    """One run over every corpus file: exit 0 and a report, or (if a file cannot be read at
    all) exit 1 with one clear line; then each file on its own must give exit 0 or 1, never
    a panic."""
    _ds, r, rep = corpus_dataset
    if r.returncode == 0:
        n = len(list(TCPDUMP.iterdir())) + (len(list(VECTORS.rglob("*.pcap*")))
                                            if VECTORS.is_dir() else 0)
        assert rep["sources"] == rep["converted"] >= n - 5, rep
        assert rep["counts"]["packets"] == rep["counts"]["rows.packets"]
        return
    lines = [line for line in r.stderr.splitlines() if line.startswith("tapdeck:")]
    assert len(lines) == 1, r.describe()
    files = sorted(TCPDUMP.iterdir())

    def one(p):
        out = tmp_path / f"one-{p.name}"
        return p, *convert(tapdeck, out, p)

    with ThreadPoolExecutor(3) as pool:
        for p, res, _ in pool.map(one, files):
            assert "panicked" not in res.stderr, res.describe()
            assert res.returncode in (0, 1), res.describe()


def test_packet_counts_equal_capinfos(corpus_dataset):
    """catalog/sources.packets and the number of packets rows per file equal capinfos -c for
    every corpus file capinfos can read."""
    ds, r, _rep = corpus_dataset
    if r.returncode != 0:
        pytest.skip("the whole-corpus run failed (see the test above)")
    import pyarrow.parquet as pq

    sources = pq.read_table(Path(ds) / "catalog" / "sources.parquet").to_pylist()
    by_path = {s["path"]: s for s in sources}
    want = capinfos_counts([str(p) for p in sorted(TCPDUMP.iterdir())])
    assert len(want) > 700
    rows = defaultdict(int)
    for f in table(ds, "capture_stats"):
        rows[f["file_id"]] += f["packets"]
    con = __import__("duckdb").connect()
    per_file = dict(con.execute(
        f"select file_id, count(*) from read_parquet('{ds}/packets/**/*.parquet') "
        "group by file_id").fetchall())
    bad = []
    for path, n in want.items():
        s = by_path.get(path)
        got = None if s is None else (s["packets"], per_file.get(s["file_id"], 0),
                                      rows[s["file_id"]])
        if got != (n, n, n):
            bad.append((Path(path).name, got, n))
    assert not bad, f"{len(bad)} files differ (sources, rows, capture_stats vs capinfos): {bad[:10]}"
    assert sum(want.values()) > 9000


@pytest.fixture(scope="module")
def field_comparison(corpus_dataset, tmp_path_factory):
    """(per-packet comparison results) over every corpus file capinfos and tshark read;
    mergecap -a concatenates them into one pcapng, so tshark starts once."""
    ds, r, _rep = corpus_dataset
    if r.returncode != 0:
        pytest.skip("the whole-corpus run failed")
    import pyarrow.parquet as pq

    sources = {s["path"]: s for s in
               pq.read_table(Path(ds) / "catalog" / "sources.parquet").to_pylist()}
    links = {c["file_id"]: c["link_type"] for c in table(ds, "capture_stats")}
    counts = capinfos_counts([str(p) for p in sorted(TCPDUMP.iterdir())])
    files = [p for p in sorted(counts) if counts[p] > 0]
    merged = tmp_path_factory.mktemp("corpus-merged") / "corpus.pcapng"
    m = run(["mergecap", "-a", "-F", "pcapng", "-w", merged, *files], timeout=SLOW)
    assert m.returncode == 0, m.describe()
    theirs_all = tshark_rows(merged)
    assert len(theirs_all) == sum(counts[p] for p in files), "tshark rows vs capinfos"
    rows = defaultdict(dict)
    for row in table(ds, "packets"):
        rows[row["file_id"]][row["record"]] = row
    res = {"diffs": [], "undecoded_links": Counter(), "files": len(files), "compared": 0,
           "skipped": Counter(), "fields": Counter()}
    at = 0
    for p in files:
        fid = sources[p]["file_id"]
        got = rows[fid]
        theirs = theirs_all[at:at + counts[p]]
        at += counts[p]
        name = Path(p).name
        if len(got) != len(theirs):
            res["diffs"].append(f"{name}: {len(got)} rows, tshark {len(theirs)} packets")
            continue
        for i, t in enumerate(theirs, 1):
            want, skip = expected(t)
            g = got[i]
            if links.get(fid) == 123:  # SunATM: tshark's lengths leave out the 4-byte pseudo-header
                want["wire_len"] += 4
                want["cap_len"] += 4
            keys = ["time_ns", "wire_len", "cap_len"]
            if skip:
                res["skipped"][skip] += 1
            elif MALFORMED.search(name):
                # What we decoded must be right; a null (not decodable) is allowed, and so
                # is another reading of an invalid sub-second timestamp field.
                res["skipped"]["malformed file: nulls and times not compared"] += 1
                keys = ["wire_len", "cap_len"] + [
                    k for k in want if k not in ("time_ns", "wire_len", "cap_len")
                    and g[k] is not None and want[k] not in (None, "")
                    and links.get(fid) in DECODED_LINKS]
            elif links.get(fid) not in DECODED_LINKS:
                res["skipped"]["link type not dissected"] += 1
                if "src_addr" in want:
                    res["undecoded_links"][(links.get(fid), name)] += 1
            elif "src_addr" in want and g["ip_version"] is None and g["cap_len"] < 60:
                res["skipped"]["IP header cut by the snap length"] += 1
            else:
                keys = list(want)
            if MALFORMED.search(name):
                keys = [k for k in keys if k != "time_ns"]
            res["compared"] += 1
            for k in keys:
                res["fields"][k] += 1
                if g[k] != want[k]:
                    res["diffs"].append(f"{name} #{i}: {k} ours {g[k]!r} tshark {want[k]!r}")
    print(f"{len(files)} files, {res['compared']} packets; fields {dict(res['fields'])}; "
          f"skipped {dict(res['skipped'])}")
    return res


def test_packet_fields_equal_tshark(field_comparison):
    """Per packet of every corpus file capinfos and tshark read: the packets row equals
    tshark's fields (see the module doc for the normalisations); IP and transport fields for
    the link types crates/decode dissects and files not made to be malformed."""
    res = field_comparison
    f = res["fields"]
    assert res["files"] > 700 and res["compared"] > 9000
    assert f["tcp_seq"] > 1000 and f["src_addr"] > 4000 and f["vlan"] > 4000
    diffs = res["diffs"]
    if diffs:
        by_file = Counter(d.split(":")[0].split(" #")[0] for d in diffs)
        print("differences per file:", by_file.most_common(40))
    assert not diffs, f"{len(diffs)} differences:\n" + "\n".join(diffs[:40])


def test_ip_fields_for_every_link_type_tshark_reads(field_comparison):
    missing = field_comparison["undecoded_links"]
    assert not missing, (f"{sum(missing.values())} IP packets in {len(missing)} files without "
                         f"IP fields: {sorted(missing.items())[:20]}")


TCPDUMP_IP = re.compile(r"\bIP6? (?:truncated-ip6 - \d+ bytes missing!)?([0-9a-f.:]+) > ([0-9a-f.:]+):")


def tcpdump_endpoint(token: str) -> tuple[str, int | None]:
    """tcpdump -n's `addr[.port]`: an IPv4 address has four dotted parts, an IPv6 one none."""
    if ":" in token:
        addr, _, port = token.rpartition(".") if "." in token else (token, "", "")
        return addr, int(port) if port else None
    parts = token.split(".")
    return ".".join(parts[:4]), int(parts[4]) if len(parts) == 5 else None


def test_link_types_only_tcpdump_reads(corpus_dataset):
    """SLIP and the Broadcom switch tags (tshark 4.0 has no dissector for them): for every
    packet of those corpus files where `tcpdump -n` prints an IP line, the packets row's
    addresses are tcpdump's (and its ports, where it prints them); every other row of those
    files has no IP fields."""
    ds, r, _rep = corpus_dataset
    if r.returncode != 0:
        pytest.skip("the whole-corpus run failed")
    import pyarrow.parquet as pq

    sources = {s["file_id"]: s["path"] for s in
               pq.read_table(Path(ds) / "catalog" / "sources.parquet").to_pylist()}
    links = {c["file_id"]: c["link_type"] for c in table(ds, "capture_stats")}
    rows = defaultdict(dict)
    for row in table(ds, "packets"):
        if links.get(row["file_id"]) in TCPDUMP_ONLY_LINKS:
            rows[row["file_id"]][row["record"]] = row
    assert set(links[f] for f in rows) == set(TCPDUMP_ONLY_LINKS), "corpus files of each type"
    compared, diffs = 0, []
    for fid, got in rows.items():
        out = run(["tcpdump", "-n", "-r", sources[fid]], timeout=SLOW)
        lines = [line for line in out.out.splitlines() if line.strip()]
        assert len(lines) == len(got), (sources[fid], len(lines), len(got))
        for i, line in enumerate(lines, 1):
            m = TCPDUMP_IP.search(line)
            g = got[i]
            if m is None:
                if g["ip_version"] is not None and "truncated" not in line and "[|" not in line:
                    diffs.append((Path(sources[fid]).name, i, "IP fields where tcpdump has none"))
                continue
            compared += 1
            (src, sport), (dst, dport) = map(tcpdump_endpoint, m.groups())
            ports = sport is not None and dport is not None
            want = (src, dst) + ((sport, dport) if ports else ())
            have = (g["src_addr"], g["dst_addr"]) + ((g["src_port"], g["dst_port"])
                                                     if ports else ())
            if have != want:
                diffs.append((Path(sources[fid]).name, i, have, want))
    assert compared > 30
    assert not diffs, diffs[:10]
