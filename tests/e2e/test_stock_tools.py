"""Files stay standard: stock `zstd -dc` / `lz4 -dc` (or nothing, for plain files) turn each
stored file into a pcapng or pcap that tcpdump and tshark read without a warning, with the
expected number of packets and the original packets' bytes and times."""

from __future__ import annotations

import pytest

from conftest import (
    clean_stderr,
    data_files,
    gen_packets,
    read_packets,
    run,
    write_pcap,
)

N = 8000


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    base = tmp_path_factory.mktemp("stock")
    packets = gen_packets(N, seed=21)
    return write_pcap(base / "orig.pcap", packets), packets


def record(tapdeck, tmp_path, src, *args):
    store = tmp_path / "S"
    r = tapdeck.record(store, "-r", src, "--staging", "16MiB", "--chunk-size", "512KiB",
                       "--rotate-size", "3MiB", *args)
    assert r.returncode == 0, r.describe()
    return store


def decompressed(path, tmp_path) -> bytes:
    if path.name.endswith(".zst"):
        r = run(["zstd", "-dc", path], timeout=60)
    elif path.name.endswith(".lz4"):
        r = run(["lz4", "-dc", path], timeout=60)
    else:
        return path.read_bytes()
    assert r.returncode == 0, r.describe()
    assert clean_stderr(r.stderr) == [], r.stderr
    return r.stdout


def check_with_stock_tools(store, tmp_path, packets, fmt):
    files = data_files(store)
    assert len(files) >= 2
    got = []
    for i, f in enumerate(files):
        plain = tmp_path / f"plain{i}.{fmt}"
        plain.write_bytes(decompressed(f, tmp_path))
        head = plain.read_bytes()[:4]
        assert head == (b"\x0a\x0d\x0d\x0a" if fmt == "pcapng" else b"\x4d\x3c\xb2\xa1")
        td = run(["tcpdump", "-r", plain, "-nn", "-q"], timeout=60)
        assert td.returncode == 0 and clean_stderr(td.stderr) == [], td.describe()
        ts = run(["tshark", "-r", plain, "-n"], timeout=60)
        assert ts.returncode == 0 and clean_stderr(ts.stderr) == [], ts.describe()
        assert len(td.out.splitlines()) == len(ts.out.splitlines())
        got += read_packets(plain)
        # Through a pipe, as the manual says: `zstd -dc FILE | tcpdump -r -`.
        if f.suffix in (".zst", ".lz4"):
            tool = "zstd" if f.suffix == ".zst" else "lz4"
            p = run(["bash", "-c", f"set -o pipefail; {tool} -dc {f} | tcpdump -r - -nn -q"], timeout=60)
            assert p.returncode == 0 and p.out == td.out, p.describe()
    assert len(got) == len(packets)
    assert [(p.ts_ns, p.orig_len, p.data) for p in got] == \
        [(p.ts_ns, p.orig_len, p.data) for p in packets]


@pytest.mark.parametrize("codec,fmt,suffix", [
    ("zstd:6,zstd:1,lz4,raw", "pcapng", ".pcapng.zst"),
    ("lz4", "pcapng", ".pcapng.lz4"),
    ("none", "pcapng", ".pcapng"),
    ("zstd:6,zstd:1,lz4,raw", "pcap", ".pcap.zst"),
    ("lz4", "pcap", ".pcap.lz4"),
    ("none", "pcap", ".pcap"),
])
def test_stock_tools_read_stored_files(tapdeck, tmp_path, source, codec, fmt, suffix):
    src, packets = source
    store = record(tapdeck, tmp_path, src, "--codec", codec, "--format", fmt)
    files = data_files(store)
    assert files and all(f.name.endswith(suffix) for f in files), [f.name for f in files]
    if codec == "none":
        # Plain files keep their chunk index in a sidecar, never inside the capture file.
        assert all((f.parent / (f.name + ".idx")).exists() for f in files)
    check_with_stock_tools(store, tmp_path, packets, fmt)


def test_mixed_lz4_and_zstd_frames_in_one_file(tapdeck, tmp_path):
    """A ladder that mixes zstd and lz4 chunks within one .zst file: `zstd -dc` still reads
    it whole. The rung chosen depends on the live backlog (a file source always gets the
    strongest codec), so a paced synthetic source is recorded with a few thresholds until
    one file holds both kinds (checked with `info --json`)."""
    for i, threshold in enumerate(["0.1", "0.05", "0.15", "0.08", "0.2", "0.12", "0.06", "0.3"]):
        store = tmp_path / f"t{i}"
        r = tapdeck.record(store, "--synthetic", "1514", "--count", "20000", "--rate", "40000",
                           "--staging", "16MiB", "--chunk-size", "512KiB",
                           "--codec", f"zstd:1@{threshold},lz4", "--log", "error")
        assert r.returncode == 0, r.describe()
        mixed = [f for f in tapdeck.info(store)["files"]
                 if "lz4x" in f["codecs"] and "zstd:1x" in f["codecs"]]
        if mixed:
            break
    else:
        pytest.fail("no threshold gave a file with both zstd and lz4 chunks")
    v = tapdeck.verify(store)
    assert v.returncode == 0, v.describe()
    for f in mixed:
        path = store / f["name"]
        assert path.name.endswith(".pcapng.zst")
        plain = tmp_path / "mixed.pcapng"
        plain.write_bytes(decompressed(path, tmp_path))
        td = run(["tcpdump", "-r", plain, "-nn", "-q"], timeout=60)
        assert td.returncode == 0 and clean_stderr(td.stderr) == [], td.describe()
        ts = run(["tshark", "-r", plain, "-n"], timeout=60)
        assert ts.returncode == 0 and clean_stderr(ts.stderr) == [], ts.describe()
        assert len(td.out.splitlines()) == len(ts.out.splitlines()) == f["packets"]
        assert len(read_packets(plain)) == f["packets"]
