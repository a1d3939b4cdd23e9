"""Issue 15, the readers' side: a store that survives restarts, damage, moves and copies.

No network: `record --synthetic` and `record -r` of generated pcaps. Oracles: tshark (packet
times of the extract, read independently of our code), our struct-based reader in conftest,
and the packet counts `info` gives before the damage.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from conftest import (
    QUICK,
    SLOW,
    data_files,
    gen_packets,
    one_error_line,
    read_packets,
    run,
    write_pcap,
)

T0 = 1_795_413_454_000_000_000  # 2026-11-23T05:57:34Z
ZSTD_MAGIC = bytes.fromhex("28b52ffd")


def tshark_times(path) -> list[int]:
    """Packet times (ns) as tshark reads them, independently of our reader."""
    r = run(["tshark", "-r", path, "-T", "fields", "-e", "frame.time_epoch"], timeout=SLOW)
    assert r.returncode == 0, r.describe()
    out = []
    for line in r.out.split():
        secs, _, frac = line.partition(".")
        out.append(int(secs) * 10**9 + int(frac.ljust(9, "0")[:9]))
    return out


def backward_jumps(times: list[int]) -> int:
    return sum(1 for a, b in zip(times, times[1:]) if b < a)


def total_packets(tapdeck, store, *extra) -> int:
    r = tapdeck("info", "--json", store, *extra)
    assert r.returncode == 0, r.describe()
    return json.loads(r.stdout)["totals"]["packets"]


def test_two_runs_extract_and_merge_in_time_order(tapdeck, tmp_path):
    """Recorders before issue 15 restarted each run's sequence numbers at 1 (names collide
    in stream and sequence; today's runs continue the store's sequence, see
    test_store_lifecycle.py): such a store, made here by moving a second run's files into
    the first run's store, still extracts and merges in time order."""
    if shutil.which("tshark") is None:
        pytest.skip("needs tshark")
    store = tmp_path / "S"
    for s in (store, tmp_path / "S2"):
        r = tapdeck.record(s, "--synthetic", "64", "--rate", "40000", "--duration", "2",
                           "--rotate-size", "1MiB", "--chunk-size", "512KiB",
                           "--flush-interval", "0.2")
        assert r.returncode == 0, r.describe()
    for f in data_files(tmp_path / "S2"):
        f.rename(store / f.name)
    files = data_files(store)
    keys = [f.name.split("-", 1)[1] for f in files]  # sSS-SEQUENCE.EXT
    assert len(keys) > len(set(keys)), f"the runs' names do not collide: {keys}"
    held = total_packets(tapdeck, store)

    out = tmp_path / "all.pcapng"
    x = tapdeck.extract(store, out)
    assert x.returncode == 0, x.describe()
    times = tshark_times(out)
    assert len(times) == held
    assert backward_jumps(times) == 0

    merged = tmp_path / "M"
    m = tapdeck("merge", store, "-o", merged, timeout=SLOW)
    assert m.returncode == 0, m.describe()
    out2 = tmp_path / "merged.pcapng"
    x = tapdeck.extract(merged, out2)
    assert x.returncode == 0, x.describe()
    times2 = tshark_times(out2)
    assert times2 == times


@pytest.fixture
def damaged_store(tapdeck, tmp_path):
    """A store of several files of several chunks from a generated pcap (times known)."""
    packets = gen_packets(12000, start_ns=T0, duration_ns=60 * 10**9, seed=15)
    src = write_pcap(tmp_path / "orig.pcap", packets)
    store = tmp_path / "S"
    r = tapdeck.record(store, "-r", src, "--staging", "32MiB", "--chunk-size", "512KiB",
                       "--rotate-size", "2MiB", "--codec", "zstd:1")
    assert r.returncode == 0, r.describe()
    files = data_files(store)
    assert len(files) >= 4, files
    return store, files, packets


def frame_offsets(path) -> list[int]:
    """Where each zstd frame starts (the stored files' frames are zstd here)."""
    data = path.read_bytes()
    out, at = [], data.find(ZSTD_MAGIC)
    while at >= 0:
        out.append(at)
        at = data.find(ZSTD_MAGIC, at + 1)
    return out


def seconds(ns: int) -> str:
    """Exact decimal seconds for --start/--end (a float would round the nanoseconds)."""
    return f"{ns // 10**9}.{ns % 10**9:09d}"


def info_rows(tapdeck, store) -> dict:
    r = tapdeck("info", "--json", store)
    assert r.returncode == 0, r.describe()
    return {row["name"]: row for row in json.loads(r.stdout)["files"]}


def test_corrupt_chunk_is_skipped_and_counted(tapdeck, damaged_store, tmp_path):
    store, files, packets = damaged_store
    rows = info_rows(tapdeck, store)
    victim = files[1]
    # Break the magic of the victim's second packet chunk (frame 0 is the header).
    at = frame_offsets(victim)[2]
    data = bytearray(victim.read_bytes())
    data[at:at + 4] = b"\xee" * 4
    victim.write_bytes(bytes(data))

    out = tmp_path / "o.pcapng"
    x = tapdeck.extract(store, out)
    assert x.returncode == 3, x.describe()
    damaged = [l for l in x.stderr.splitlines() if l.startswith("tapdeck: damaged:")]
    assert len(damaged) == 1, x.stderr
    assert str(victim) in damaged[0] and f"byte offset {at}" in damaged[0], damaged[0]
    lost = int(damaged[0].rsplit(": ", 1)[1].split()[0])
    assert lost > 0
    got = read_packets(out)
    assert len(got) + lost == len(packets), (len(got), lost, len(packets))
    assert f"{lost} packets lost" in x.stderr.splitlines()[-1], x.stderr
    # What was written is exactly the original minus the lost chunk's packets, in order.
    want = {(p.ts_ns, p.data) for p in read_packets(tmp_path / "orig.pcap")}
    assert all((p.ts_ns, p.data) in want for p in got)
    assert backward_jumps([p.ts_ns for p in got]) == 0

    # --strict stops at the defect: one error line naming the file, exit 1.
    x = tapdeck.extract(store, tmp_path / "s.pcapng", "--strict")
    assert x.returncode == 1, x.describe()
    assert str(victim) in one_error_line(x.stderr)

    # A window that does not touch the victim reads nothing of it: exit 0, no damage.
    start = rows[files[2].name]["first_ts_ns"]
    x = tapdeck.extract(store, tmp_path / "w.pcapng", "--start", seconds(start))
    assert x.returncode == 0, x.describe()
    assert "damaged" not in x.stderr and "DAMAGE" not in x.stderr


def test_truncated_file_is_read_and_repaired_up_to_its_last_whole_chunk(
        tapdeck, damaged_store, tmp_path):
    store, files, packets = damaged_store
    rows = info_rows(tapdeck, store)
    victim = files[2]
    offsets = frame_offsets(victim)
    # Cut inside its third packet chunk: the index and everything from that chunk on are
    # lost (frame 0 is the header).
    assert len(offsets) >= 5, offsets
    cut = (offsets[3] + offsets[4]) // 2
    with open(victim, "r+b") as f:
        f.truncate(cut)

    # Windows that do not touch it are not blocked by it.
    before = rows[victim.name]["first_ts_ns"]
    after = rows[files[3].name]["first_ts_ns"]
    for window in (["--end", seconds(before)], ["--start", seconds(after)]):
        x = tapdeck.extract(store, tmp_path / "w.pcapng", *window)
        assert x.returncode == 0, x.describe()

    # The whole store: read with a warning up to the victim's last whole chunk.
    out = tmp_path / "o.pcapng"
    x = tapdeck.extract(store, out)
    assert x.returncode == 3, x.describe()
    damaged = [l for l in x.stderr.splitlines() if l.startswith("tapdeck: damaged:")]
    assert len(damaged) == 1 and str(victim) in damaged[0], x.stderr
    assert "last whole chunk" in damaged[0], damaged[0]
    got = read_packets(out)
    kept = len(got) - (len(packets) - rows[victim.name]["packets"])
    assert 0 < kept < rows[victim.name]["packets"], (kept, rows[victim.name]["packets"])
    assert backward_jumps([p.ts_ns for p in got]) == 0

    # verify names it; verify --repair salvages it; then everything verifies and extracts.
    v = tapdeck.verify(store)
    assert v.returncode == 1 and str(victim) in v.stderr, v.describe()
    v = tapdeck.verify(victim, repair=True)
    assert v.returncode == 0, v.describe()
    assert f"kept its {kept} packets" in v.stderr, v.stderr
    v = tapdeck.verify(store)
    assert v.returncode == 0, v.describe()
    x = tapdeck.extract(store, tmp_path / "r.pcapng")
    assert x.returncode == 0, x.describe()
    assert [(p.ts_ns, p.data) for p in read_packets(tmp_path / "r.pcapng")] == \
        [(p.ts_ns, p.data) for p in got]


def small_store(tapdeck, store, *args, n=3000, seed=16):
    packets = gen_packets(n, start_ns=T0, duration_ns=30 * 10**9, seed=seed)
    src = write_pcap(store.parent / f"{store.name}.pcap", packets)
    r = tapdeck.record(store, "-r", src, "--staging", "32MiB", "--chunk-size", "512KiB",
                       "--rotate-size", "512KiB", *args)
    assert r.returncode == 0, r.describe()
    return packets


def keys(path):
    return [(p.ts_ns, p.data) for p in read_packets(path)]


def test_moved_and_copied_stores(tapdeck, tmp_path):
    good, extra = tmp_path / "good", tmp_path / "extra"
    packets = small_store(tapdeck, good, "--dir", good / "d1", "--dir", extra)
    want = [(p.ts_ns, p.data) for p in packets]
    manifest = json.loads((good / "manifest.json").read_text())
    assert manifest["dirs"] == ["d1", str(extra.resolve())], manifest["dirs"]
    assert len(manifest["dir_ids"]) == 2
    assert (good / "d1" / ".tapdeck-dir").is_file() and (extra / ".tapdeck-dir").is_file()

    # Moved: every tool reads it at its new place.
    other = tmp_path / "other"
    good.rename(other)
    assert tapdeck.verify(other).returncode == 0
    x = tapdeck.extract(other, tmp_path / "o.pcapng")
    assert x.returncode == 0, x.describe()
    assert keys(tmp_path / "o.pcapng") == want

    # Copied: the copy reads its own files (damage in the copy shows in the copy only).
    copy = tmp_path / "copy"
    shutil.copytree(other, copy)
    paths = [row["path"] for row in json.loads(tapdeck("info", "--json", copy).stdout)["files"]]
    inside = [p for p in paths if not p.startswith(str(extra))]
    assert inside and all(p.startswith(str(copy)) for p in inside), paths
    victim = data_files(copy / "d1")[0]
    victim.write_bytes(victim.read_bytes()[:-7])
    assert tapdeck.verify(copy).returncode == 1
    assert tapdeck.verify(other).returncode == 0

    # The extra directory moved: one line naming it and how to point at it; then found.
    moved = tmp_path / "disk2"
    extra.rename(moved)
    x = tapdeck.extract(other, tmp_path / "m.pcapng")
    assert x.returncode == 1
    line = one_error_line(x.stderr)
    assert str(extra.resolve()) in line and "--data-dir" in line, line
    x = tapdeck.extract(other, tmp_path / "m.pcapng", "--data-dir", moved)
    assert x.returncode == 0, x.describe()
    assert keys(tmp_path / "m.pcapng") == want
    assert tapdeck.verify(other, "--data-dir", moved).returncode == 0


def test_old_manifest_with_absolute_paths_moves_and_copies(tapdeck, tmp_path):
    """Stores written before the change hold absolute paths and no ids."""
    good = tmp_path / "good"
    small_store(tapdeck, good, n=1500)
    m = json.loads((good / "manifest.json").read_text())
    m["dirs"] = [str(good.resolve())]
    del m["store_id"], m["dir_ids"]
    (good / "manifest.json").write_text(json.dumps(m))
    (good / ".tapdeck-dir").unlink()
    want = total_packets(tapdeck, good)
    copy = tmp_path / "copy"
    shutil.copytree(good, copy)
    rows = json.loads(tapdeck("info", "--json", copy).stdout)["files"]
    assert all(r["path"].startswith(str(copy)) for r in rows), rows
    other = tmp_path / "other"
    good.rename(other)
    assert total_packets(tapdeck, other) == want
    x = tapdeck.extract(other, tmp_path / "o.pcapng")
    assert x.returncode == 0, x.describe()


def test_closed_pipes_not_a_store_and_empty_repaired_files(tapdeck, tmp_path):
    store = tmp_path / "S"
    r = tapdeck.record(store, "--synthetic", "64", "--count", "3000000", "--rotate-size",
                       "1MiB", "--chunk-size", "512KiB")
    assert r.returncode == 0, r.describe()
    assert len(data_files(store)) >= 100
    for cmd in (["info", store], ["info", "--json", store], ["verify", store]):
        p = subprocess.run(["bash", "-c", 'set -o pipefail; "$@" | head -1', "sh",
                            str(tapdeck.bin), *map(str, cmd)],
                           capture_output=True, timeout=QUICK)
        assert p.returncode == 0 and p.stderr == b"", (cmd, p.returncode, p.stderr[-500:])
        assert len(p.stdout.splitlines()) == 1

    # A directory that is not a store.
    empty = tmp_path / "empty"
    empty.mkdir()
    x = tapdeck.extract(empty, tmp_path / "x.pcapng")
    assert x.returncode == 1
    line = one_error_line(x.stderr)
    assert str(empty) in line and "not a tapdeck store" in line, line

    # A partial file holding only its header frame, repaired: "empty", not 1970, no codec.
    first = data_files(store)[0]
    header_end = frame_offsets(first)[1]
    name = first.name.replace("-000001.", "-999999.")
    partial = store / f".{name}.partial"
    partial.write_bytes(first.read_bytes()[:header_end])
    v = tapdeck.verify(partial, repair=True)
    assert v.returncode == 0, v.describe()
    line = [l for l in v.out.splitlines() if name in l][0]
    assert "empty" in line and "1970" not in line and "zstd:0" not in line, line
    r = tapdeck("info", store)
    row = [l for l in r.out.splitlines() if l.startswith(name)][0]
    assert "empty" in row and "1970" not in row and "zstd:0" not in row, row
