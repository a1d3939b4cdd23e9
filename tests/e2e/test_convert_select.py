"""`convert --filter/--start/--end STORE` (issue 17): a conversion of part of a store reads
it as `tapdeck extract` does, through the flow index, and gives the tables a conversion of
`extract --no-index`'s output gives (the oracle: libpcap over every chunk, then the same
converter). The selection is kept and not read again while neither the store nor the
selection changes; a trace file (not a store) is refused in one line.
"""

from __future__ import annotations

import dataclasses
import struct
import subprocess

from conftest import SLOW, _csum, gen_packets, write_pcap
from convtools import convert_ok, table

T0 = 1_795_413_430_000_000_000


def rows_without_source(ds, name):
    # The source file differs (the selection vs the extract's output); nothing else may.
    rows = table(ds, name)
    for r in rows:
        for k in [k for k in r if "source" in k or k in ("file", "file_id", "record")]:
            r.pop(k)
    return rows


def test_convert_with_a_filter_reads_through_the_index_and_matches_extract(
    tapdeck, tmp_path
):
    # Hosts come and go: a few seconds each, so a host filter rules out most chunks.
    packets = []
    for i in range(8):
        part = gen_packets(3000, start_ns=T0 + i * 2 * 10**9, duration_ns=2 * 10**9, seed=i)
        for p in part:
            d = bytearray(p.data)
            d[29] = i  # the source address's last byte: host 198.18.0.i talks in slot i
            d[24:26] = b"\0\0"
            d[24:26] = struct.pack("!H", _csum(bytes(d[14:34])))
            packets.append(dataclasses.replace(p, data=bytes(d)))
    original = write_pcap(tmp_path / "t.pcap", packets)
    store = tmp_path / "S"
    r = tapdeck(
        "record", "-r", original, "--store", store, "-q", "--chunk-size", "512KiB",
        timeout=SLOW,
    )
    assert r.returncode == 0, r.describe()

    flt = "src host 198.18.0.3 and udp"
    start, end = f"{(T0 + 2 * 10**9) / 1e9:.3f}", f"{(T0 + 7_500_000_000) / 1e9:.3f}"
    ds = tmp_path / "DS"
    r = tapdeck(
        "convert", store, "--out", ds, "--json", "-q",
        "--filter", flt, "--start", start, "--end", end,
    )
    assert r.returncode == 0, r.describe()
    said = r.stderr
    assert "skipped by the flow index" in said and "(0 skipped" not in said, (
        f"a one-host filter over a store where hosts come and go skipped no chunk: {said}"
    )

    # The oracle: every chunk read, libpcap deciding, then the same converter.
    sel = tmp_path / "sel.pcapng"
    r = tapdeck(
        "extract", store, "--no-index", "--start", start, "--end", end, "-w", sel, flt
    )
    assert r.returncode == 0, r.describe()
    ds2 = tmp_path / "DS2"
    convert_ok(tapdeck, ds2, sel)
    got = rows_without_source(ds, "packets")
    want = rows_without_source(ds2, "packets")
    assert got and got == want, "convert --filter does not give extract's packets"
    # And the packets are the ones tcpdump selects from the original in that window.
    lines = subprocess.run(
        ["tcpdump", "-r", original, "-nn", "-tt", flt],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    in_window = [
        x for x in lines if float(start) <= float(x.split()[0]) < float(end)
    ]
    assert len(got) == len(in_window), (len(got), len(in_window))

    # Unchanged store and selection: the selection file is not written again.
    selection = ds / "_selected" / "selection.pcapng"
    before = selection.stat().st_mtime_ns
    r = tapdeck(
        "convert", store, "--out", ds, "--json", "-q",
        "--filter", flt, "--start", start, "--end", end,
    )
    assert r.returncode == 0, r.describe()
    assert selection.stat().st_mtime_ns == before, "an unchanged selection was made again"
    # Another filter: made again, and the dataset follows.
    r = tapdeck("convert", store, "--out", ds, "--json", "-q", "--filter", "tcp")
    assert r.returncode == 0, r.describe()
    assert selection.stat().st_mtime_ns != before
    tcp = rows_without_source(ds, "packets")
    n_tcp = len(
        subprocess.run(
            ["tcpdump", "-r", original, "-nn", "tcp"],
            capture_output=True, text=True, check=True,
        ).stdout.splitlines()
    )
    assert len(tcp) == n_tcp


def test_a_selection_from_a_trace_file_converts_what_tcpdump_selects(tapdeck, tmp_path):
    """A plain trace file is selected from as a store is (by its blocks, indexed in memory
    here: it has no sidecar): the packets table holds exactly the packets tcpdump's filter
    selects from the same file. Something that is neither a store nor a capture file is
    refused in one line."""
    packets = gen_packets(100)
    original = write_pcap(tmp_path / "t.pcap", packets)
    want = subprocess.run(["tcpdump", "-r", original, "-nn", "-tt", "udp"], capture_output=True,
                          text=True, timeout=SLOW, check=True).stdout.splitlines()
    assert 0 < len(want) < len(packets), "the filter must select some packets, not all"
    convert_ok(tapdeck, tmp_path / "DS", original, args=("--filter", "udp"))
    assert len(table(tmp_path / "DS", "packets")) == len(want)

    notes = tmp_path / "notes.txt"
    notes.write_text("not a trace\n")
    r = tapdeck("convert", notes, "--out", tmp_path / "DS2", "--filter", "udp")
    assert r.returncode != 0
    err = r.stderr.strip()
    assert err.count("\n") == 0 and "not a pcap or pcapng file" in err, err
