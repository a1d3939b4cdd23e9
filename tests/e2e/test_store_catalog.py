"""The store catalog and file summaries (issue 32, item 2): a filtered extract reads the
catalog, opens only the files whose summary can match, and writes what reading every file
(`--no-index`) writes; the catalog stays right across kill -9 of the recorder and of
`tapdeck index`, a moved store, an old-format store that `tapdeck index` upgrades, and a
lost catalog.

Oracles: strace for the data files opened; `extract --no-index` (which opens every file and
ignores the catalog) for the bytes; tcpdump on the generated trace for the packet count;
the stock `zstd` tool and conftest's strict reader for what each file holds, against which
every catalog entry (parsed here from the documented layout) is checked.
"""

from __future__ import annotations

import random
import re
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest
from conftest import (
    Pkt,
    data_files,
    decompress,
    gen_packets,
    need,
    opened_data_files,
    read_packets,
    run,
    tcpdump_lines,
    tcpdump_packets,
    write_pcap,
)

T0 = 1_795_413_454_000_000_000
SEC = 10**9
RARE = "198.18.77.7"


def trace_with_rare_host(path: Path, n: int = 20_000, span_s: int = 100) -> Path:
    """`n` packets over `span_s` seconds among a few dozen hosts, and 20 packets from RARE
    at second 42 (its packets' source address patched in)."""
    packets = gen_packets(n, start_ns=T0, duration_ns=span_s * SEC, seed=3)
    rare = []
    for i, p in enumerate(packets[:20]):
        data = bytearray(p.data)
        data[26:30] = bytes(int(x) for x in RARE.split("."))
        rare.append(Pkt(p.linktype, T0 + 42 * SEC + i * 1000, p.orig_len, bytes(data)))
    return write_pcap(path, sorted(packets + rare, key=lambda p: p.ts_ns))


def record(tapdeck, pcap: Path, store: Path, *extra) -> None:
    r = tapdeck("record", "-r", pcap, "--store", store, "-q", "--rotate-interval", "1", *extra,
                timeout=120)  # fmt: skip
    assert r.returncode == 0, r.describe()


def extract(tapdeck, store: Path, out: Path, filt: str, *extra, strace: Path | None = None):
    """Runs extract (under strace when asked); returns (stderr, data files opened)."""
    args = [tapdeck.bin, "extract", store, "-f", filt, "-w", out, "--explain", *extra]
    if strace is not None:
        args = ["strace", "-f", "-e", "trace=openat,open", "-o", strace, *args]
    r = run(args, timeout=120)
    assert r.returncode == 0, r.describe()
    opened = opened_data_files(strace.read_text()) if strace is not None else set()
    return r.stderr, opened


def skipped_by_catalog(stderr: str) -> int:
    m = re.search(r"store catalog: \d+ entries consulted [^;]*; (\d+) more files skipped", stderr)
    assert m, stderr
    return int(m.group(1))


# --------------------------------------------------------------------------------------
# The catalog as documented (crates/store/src/catalog.rs), parsed independently
# --------------------------------------------------------------------------------------


def parse_catalog(path: Path) -> tuple[dict[str, dict], int]:
    """Entries by name (the last record of a name wins) and the bytes that were not a whole
    record. Checksums are not checked here (no XXH32 in the standard library): a torn
    record is one whose length runs past the end or whose body does not parse."""
    buf = path.read_bytes()
    assert buf[:8] == b"TDCT\x01\0\0\0", buf[:8]
    entries, at, skipped = {}, 8, 0
    while at < len(buf):
        ok = False
        if buf[at : at + 4] == b"TDCR" and at + 8 <= len(buf):
            (length,) = struct.unpack_from("<I", buf, at + 4)
            body = buf[at + 8 : at + 8 + length]
            if len(body) == length and at + 12 + length <= len(buf) and body[:1] == b"\x01":
                (name_len,) = struct.unpack_from("<H", body, 1)
                name = body[3 : 3 + name_len].decode()
                size, first, last, packets, slen = struct.unpack_from(
                    "<QQQQI", body, 3 + name_len
                )
                if 3 + name_len + 36 + slen == length:
                    entries[name] = {"size": size, "first": first, "last": last,
                                     "packets": packets, "summary": slen}  # fmt: skip
                    at += 12 + length
                    ok = True
        if not ok:
            nxt = buf.find(b"TDCR", at + 1)
            nxt = len(buf) if nxt < 0 else nxt
            skipped += nxt - at
            at = nxt
    return entries, skipped


def check_entries_against_files(store: Path, tmp: Path, allowed_missing: int = 0) -> None:
    """Every catalog entry of a file in the store says what the file holds (size, first and
    last packet time, packets); finished files without an entry are at most
    `allowed_missing` (one finished at the moment of a kill)."""
    entries, _ = parse_catalog(store / "catalog.tdc")
    files = data_files(store)
    missing = [f.name for f in files if f.name not in entries]
    assert len(missing) <= allowed_missing, missing
    for f in files:
        e = entries.get(f.name)
        if e is None:
            continue
        pk = read_packets(decompress(f, tmp / (f.name + ".pcapng")))
        want = (f.stat().st_size, min(p.ts_ns for p in pk), max(p.ts_ns for p in pk), len(pk))
        got = (e["size"], e["first"], e["last"], e["packets"])
        assert got == want, f"{f.name}: catalog {got}, file {want}"


def same_as_reading_everything(tapdeck, store: Path, tmp: Path, filt: str) -> str:
    """Extract with the catalog and with --no-index give the same bytes; returns the
    stderr of the first."""
    a, b = tmp / "with.pcapng", tmp / "without.pcapng"
    stderr, _ = extract(tapdeck, store, a, filt)
    extract(tapdeck, store, b, filt, "--no-index")
    assert a.read_bytes() == b.read_bytes(), f"{filt}: the catalog changed the answer"
    return stderr


# --------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rare_trace(tmp_path_factory) -> Path:
    return trace_with_rare_host(tmp_path_factory.mktemp("catalog") / "in.pcap")


def test_a_rare_host_opens_only_the_file_that_holds_it(tapdeck, rare_trace, tmp_path):
    """100 files of one second each; the rare host is in one. Its extract opens that file
    only (strace), skips 99 by the catalog, and writes what --no-index and tcpdump find."""
    need("strace", "tcpdump")
    store = tmp_path / "S"
    record(tapdeck, rare_trace, store)
    files = data_files(store)
    assert len(files) >= 100, len(files)
    stderr, opened = extract(tapdeck, store, tmp_path / "o.pcapng", f"host {RARE}",
                             strace=tmp_path / "st.log")  # fmt: skip
    print(f"rare host: {len(opened)} of {len(files)} data files opened; {stderr.splitlines()[-1]}")
    assert len(opened) == 1, sorted(opened)
    assert skipped_by_catalog(stderr) == len(files) - 1, stderr
    # --explain names each file the catalog skipped, and why.
    why = "skipped by the store catalog: its summary shows no packet can match the filter"
    assert stderr.count(why) == len(files) - 1, stderr
    stderr = same_as_reading_everything(tapdeck, store, tmp_path, f"host {RARE}")
    # tcpdump decodes the same packets, byte for byte, from the trace and from the answer.
    want = tcpdump_lines(rare_trace, f"host {RARE}")
    got = tcpdump_lines(tmp_path / "with.pcapng", f"host {RARE}")
    assert got == want and tcpdump_packets(got) == 20, (tcpdump_packets(want), tcpdump_packets(got))
    # A common host, and a window with a host: the same answers as reading everything.
    same_as_reading_everything(tapdeck, store, tmp_path, "udp port 53")
    start, end = T0 + 30 * SEC, T0 + 50 * SEC
    a, b = tmp_path / "w1.pcapng", tmp_path / "w2.pcapng"
    window = ["--start", f"{start // SEC}", "--end", f"{end // SEC}"]
    extract(tapdeck, store, a, f"host {RARE} or tcp", *window)
    extract(tapdeck, store, b, f"host {RARE} or tcp", *window, "--no-index")
    assert a.read_bytes() == b.read_bytes()
    check_entries_against_files(store, tmp_path)


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory) -> Path:
    """500 files' worth: a recorder takes about half a second writing them, time for
    kills to fall among rotations."""
    return trace_with_rare_host(tmp_path_factory.mktemp("long") / "in.pcap", 100_000, 500)


def parse_group_heads(path: Path) -> list[dict]:
    """The groups' heads as documented (docs/store-format.md, `catalog.tdg`), in order;
    checksums are not checked (no XXH32 here)."""
    buf = path.read_bytes()
    assert buf[:8] == b"TDCG\x01\0\0\0", buf[:8]
    groups, at = [], 8
    while at < len(buf):
        assert buf[at : at + 4] == b"TDGR", at
        (head_len,) = struct.unpack_from("<I", buf, at + 4)
        h = at + 8
        n, k4, k6, cover_from, cover_to, first, last, slices_at = struct.unpack_from(
            "<IIIQQQQQ", buf, h
        )
        k = k4 + k6
        p = h + 52
        members = []
        for _ in range(n):
            (name_len,) = struct.unpack_from("<H", buf, p)
            name = buf[p + 2 : p + 2 + name_len].decode()
            offset, length, size, mfirst, mlast, packets = struct.unpack_from(
                "<QIQQQQ", buf, p + 2 + name_len
            )
            members.append({"name": name, "offset": offset, "len": length, "size": size,
                            "first": mfirst, "last": mlast, "packets": packets})  # fmt: skip
            p += 2 + name_len + 44
        assert p + 4 * k == h + head_len, "the head ends with one checksum per slice"
        total = 8 + head_len + 4 + 12
        assert struct.unpack_from("<Q", buf, at + total - 12)[0] == total
        assert buf[at + total - 4 : at + total] == b"TDGE"
        groups.append({"blocks": k, "covers": (cover_from, cover_to), "first": first,
                       "last": last, "slices_at": slices_at, "members": members})  # fmt: skip
        at += total
    return groups


def test_a_store_of_many_files_is_queried_through_the_catalogs_groups(tapdeck, long_trace,
                                                                      tmp_path):  # fmt: skip
    """500 files: the recorder groups the catalog's records 128 at a time as it appends
    them (catalog.tdg heads, catalog.tds slices, as documented); a rare-host extract reads
    only the records past the last group and the one whose slice may hold the host, opens
    one data file, and writes what --no-index writes; a window alone reads no grouped
    record. A failure means the groups' layout, their coverage or the lookup through them
    is wrong."""
    need("strace")
    store = tmp_path / "S"
    record(tapdeck, long_trace, store)
    files = data_files(store)
    entries, _ = parse_catalog(store / "catalog.tdc")
    groups = parse_group_heads(store / "catalog.tdg")
    # 128 records a group as the recorder appends them; a compaction (the recorder's, as
    # the catalog grows) groups every record, the last run too however short.
    assert len(files) >= 500 and len(groups) >= len(entries) // 128, (len(files), len(groups))
    slices = (store / "catalog.tds").read_bytes()
    assert slices[:8] == b"TDCS\x01\0\0\0"
    names = {f.name for f in files}
    covered_to = 8
    for g in groups:
        assert 0 < len(g["members"]) <= 128 and g["covers"][0] == covered_to, g["covers"]
        covered_to = g["covers"][1]
        for m in g["members"]:
            assert m["name"] in names and entries[m["name"]]["packets"] == m["packets"], m
        assert g["slices_at"] + g["blocks"] * len(g["members"]) * 32 <= len(slices)
    grouped = sum(len(g["members"]) for g in groups)
    stderr, opened = extract(tapdeck, store, tmp_path / "o.pcapng", f"host {RARE}",
                             strace=tmp_path / "st.log")  # fmt: skip
    m = re.search(r"store catalog: (\d+) entries consulted \((\d+) read whole, the rest settled "
                  r"by the member lists and address slices of (\d+) groups\)", stderr)  # fmt: skip
    assert m, stderr
    consulted, read_whole, n_groups = map(int, m.groups())
    print(f"{consulted} entries, {read_whole} read whole, {n_groups} groups, {len(opened)} opened")
    assert (consulted, n_groups) == (len(entries), len(groups))
    assert read_whole <= len(entries) - grouped + 1, "only the ungrouped and the holder"
    assert len(opened) == 1, sorted(opened)
    same_as_reading_everything(tapdeck, store, tmp_path, f"host {RARE}")
    # A 20-second window with no filter: the heads settle every grouped file.
    start = T0 + 200 * SEC
    window = ["--start", f"{start // SEC}", "--end", f"{start // SEC + 20}"]
    r = run([tapdeck.bin, "extract", store, "-w", tmp_path / "w.pcapng", "--explain", *window],
            timeout=120)  # fmt: skip
    assert r.returncode == 0, r.describe()
    m = re.search(r"entries consulted \((\d+) read whole", r.stderr)
    assert m and int(m.group(1)) == len(entries) - grouped, r.stderr


def test_the_catalog_is_right_after_kill_9_of_the_recorder(tapdeck, long_trace, tmp_path):
    """The recorder killed at random moments while it writes files: every catalog entry
    still says what its file holds, at most the file finished at the kill lacks one, and
    extracts through the catalog equal --no-index. Seeded (TAPDECK_KILL_SEED replays)."""
    need("zstd")
    import os

    seed = int(os.environ.get("TAPDECK_KILL_SEED", random.randrange(1 << 30)))
    print(f"TAPDECK_KILL_SEED={seed}")
    rng = random.Random(seed)
    killed = 0
    for round_ in range(4):
        store = tmp_path / f"S{round_}"
        # A file per second of packet time: rotations one after another.
        p = subprocess.Popen([tapdeck.bin, "record", "-r", long_trace, "--store", store, "-q",
                              "--rotate-interval", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        # Wait for the first finished files (bounded), then kill at a random moment.
        deadline = time.monotonic() + 30
        while len(data_files(store)) < 3 and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.3))
        p.send_signal(signal.SIGKILL)
        killed += p.wait(timeout=30) == -signal.SIGKILL
        if not (store / "catalog.tdc").exists():
            continue
        check_entries_against_files(store, tmp_path, allowed_missing=1)
        same_as_reading_everything(tapdeck, store, tmp_path, f"host {RARE} or udp port 53")
    # Otherwise the recorders finished before their kills and this tested nothing.
    assert killed >= 1, f"no recorder was killed while running (seed {seed})"


def test_a_moved_store_reads_through_its_catalog(tapdeck, rare_trace, tmp_path):
    """The catalog names files, not paths: a store moved elsewhere still skips by it."""
    need("tcpdump")
    store = tmp_path / "S"
    record(tapdeck, rare_trace, store)
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.move(store, moved)
    stderr = same_as_reading_everything(tapdeck, moved, tmp_path, f"host {RARE}")
    assert skipped_by_catalog(stderr) == len(data_files(moved)) - 1, stderr


def test_an_old_store_is_upgraded_by_index_and_a_lost_catalog_rebuilt(tapdeck, rare_trace,
                                                                       tmp_path):  # fmt: skip
    """A store without flow index (as older recorders wrote, or `--no-flow-index`) reads
    whole (its catalog entries have no summary); `tapdeck index` gives its files chunk
    filters and summaries and rebuilds the catalog, after which the rare host skips the
    rest; kill -9 of `tapdeck index` at random moments leaves a store that reads the same,
    and a rerun completes. A deleted catalog: every file opened, same answer; `index`
    rebuilds it."""
    store = tmp_path / "S"
    record(tapdeck, rare_trace, store, "--no-flow-index")
    files = data_files(store)
    stderr = same_as_reading_everything(tapdeck, store, tmp_path, f"host {RARE}")
    assert skipped_by_catalog(stderr) == 0, stderr
    rng = random.Random(7)
    for _ in range(3):
        p = subprocess.Popen([tapdeck.bin, "index", store], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(rng.uniform(0, 0.4))
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        same_as_reading_everything(tapdeck, store, tmp_path, f"host {RARE}")
    r = tapdeck("index", store, timeout=120)
    assert r.returncode == 0, r.describe()
    assert "rebuilt with" in r.out, r.out
    stderr = same_as_reading_everything(tapdeck, store, tmp_path, f"host {RARE}")
    assert skipped_by_catalog(stderr) == len(files) - 1, stderr
    check_entries_against_files(store, tmp_path)
    entries, skipped = parse_catalog(store / "catalog.tdc")
    assert skipped == 0 and len(entries) == len(files)
    assert all(e["summary"] > 0 for e in entries.values())
    # Lost: read whole, same answer; rebuilt by index (which has nothing else to do).
    (store / "catalog.tdc").unlink()
    stderr = same_as_reading_everything(tapdeck, store, tmp_path, f"host {RARE}")
    assert skipped_by_catalog(stderr) == 0, stderr
    r = tapdeck("index", store, timeout=120)
    assert r.returncode == 0 and "rebuilt with" in r.out, r.describe()
    stderr = same_as_reading_everything(tapdeck, store, tmp_path, f"host {RARE}")
    assert skipped_by_catalog(stderr) == len(files) - 1, stderr
