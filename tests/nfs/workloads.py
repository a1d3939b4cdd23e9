"""Client workloads for the NFS rig: varied, deterministic, checked.

Each workload drives libnfs-utils (nfs-cp, nfs-ls, nfs-cat) and rpcinfo from the client
namespace and checks every outcome: expected successes succeed, expected errors fail, every file
a client wrote is on the server's disk byte for byte, and every read returns the bytes on disk.
File contents are half random, half zeros (seeded), like the rest of tapdeck's test traffic.

NFSv4 writes stay small: libnfs 4.0 against nfs-ganesha 4.3 fails NFSv4 writes from about
4000 bytes on (the client gives up before sending a WRITE), so large writes go over NFSv3 and
NFSv4 carries small writes, lookups, listings and (large) reads. README.md lists the operations
each workload produces, as counted by tshark.

"concurrent" runs six workers at once (NFSv3 and NFSv4 over TCP, a 22 MB write, NULL calls
over UDP), every libnfs command as PID 1 of its own PID namespace: libnfs derives its first
xid from the PID and the time, so the same xids then appear on several connections at once
(and sometimes twice on one reused port pair), the case a converter's call/reply pairing
must get right. With ordinary PIDs no xid appears on two connections (see PIDNS below).
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("v3", "v4", "mixed", "concurrent")

# Export-relative path -> size of the files a workload writes through NFS.
V3_WRITES = {
    "w3/empty.bin": 0,
    "w3/one.bin": 1,
    "w3/sub/three_k.bin": 3000,
    "w3/sub/odd.bin": 65_537,
    "w3/sub/deep/hundred_k.bin": 100_000,
    "w3/big.bin": 1_100_000,  # more than one 1 MiB WRITE
}
V4_WRITES = {
    "w4/zero.bin": 0,
    "w4/one.bin": 1,
    "w4/sub/small.bin": 200,
    "w4/sub/kilo.bin": 1000,
}
# nfs-cp from the server to the server (read then write through the client).
V3_COPY = ("seed/seed.bin", "w3/seed_copy.bin")
# Written on the server side before the clients start: something to list and read.
SEED_FILES = {
    "seed/seed.bin": 200_000,
    "seed/big.bin": 1_200_000,
    "tree/a/b/c/leaf.txt": 17,
    "tree/a/b/mid.txt": 300,
    "tree/a/top.txt": 5,
}
MANY_FILES = 120  # in many/: more entries than one READDIRPLUS reply holds
DIRS = ("w3/sub/deep", "w4/sub", "tree/a/b/c", "tree/empty_dir", "many")
MISSING = ("missing.bin", "tree/a/none.txt", "no/such/dir")


def half_random(rng: random.Random, n: int) -> bytes:
    h = n // 2
    return rng.randbytes(h) + bytes(n - h)


@dataclass
class Step:
    what: str
    args: list[str]
    returncode: int
    ok_expected: bool


@dataclass
class WorkloadResult:
    kind: str
    steps: list[Step] = field(default_factory=list)
    # Export-relative path -> the bytes a client wrote (by NFS version).
    written: dict[int, dict[str, bytes]] = field(default_factory=lambda: {3: {}, 4: {}})
    # (version, export-relative path, bytes) of every read of a whole file, in order (an
    # nfs-cp from the server to the server reads too).
    read: list[tuple[int, str, bytes]] = field(default_factory=list)
    # (version, export-relative path) of every access that had to fail.
    missing: list[tuple[int, str]] = field(default_factory=list)


def populate(export_dir: Path, seed: int = 7) -> None:
    """Writes the seed tree on the server side (idempotent: same seed, same bytes)."""
    rng = random.Random(seed)
    for d in ("w3", "w4"):  # nfs-cp refuses to write over files of an earlier run
        shutil.rmtree(export_dir / d, ignore_errors=True)
    for d in DIRS:
        (export_dir / d).mkdir(parents=True, exist_ok=True)
    for rel, size in SEED_FILES.items():
        p = export_dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(half_random(rng, size))
    for i in range(MANY_FILES):
        (export_dir / "many" / f"file_with_a_longish_name_{i:04d}.dat").write_bytes(
            half_random(rng, i * 13))


class _Runner:
    def __init__(self, rig, result: WorkloadResult, seed: int, *, prefix: tuple = ()):
        self.rig = rig
        self.result = result
        self.rng = random.Random(seed)
        self.local = rig.workdir / "client"
        self.local.mkdir(exist_ok=True)
        # Put before every client command (the concurrent workload's own PID namespace).
        self.prefix = tuple(prefix)

    def step(self, what: str, *args, ok: bool = True):
        from .rig import RigError

        r = self.rig.run(*self.prefix, *args, check=False)
        self.result.steps.append(Step(what, r.args, r.returncode, ok))
        if ok and r.returncode != 0:
            raise RigError(f"workload step '{what}' failed:\n{r.describe()}")
        if not ok and r.returncode == 0:
            raise RigError(f"workload step '{what}' should have failed but did not:\n"
                           f"{r.describe()}")
        return r

    def write(self, version: int, rel: str, size: int) -> None:
        from .rig import RigError

        data = half_random(self.rng, size)
        src = self.local / f"v{version}_{rel.replace('/', '_')}"
        src.write_bytes(data)
        self.step(f"v{version} write {rel} ({size} B)", "nfs-cp", src,
                  self.rig.url(rel, version))
        on_disk = (self.rig.export_dir / rel).read_bytes()
        if on_disk != data:
            raise RigError(f"v{version} write of {rel}: the server holds {len(on_disk)} bytes "
                           f"that differ from the {len(data)} written")
        self.result.written[version][rel] = data

    def copy(self, version: int, src: str, dst: str) -> None:
        from .rig import RigError

        self.step(f"v{version} copy {src} to {dst}", "nfs-cp", self.rig.url(src, version),
                  self.rig.url(dst, version))
        data = (self.rig.export_dir / src).read_bytes()
        if (self.rig.export_dir / dst).read_bytes() != data:
            raise RigError(f"v{version} copy of {src} to {dst}: the copy differs")
        self.result.written[version][dst] = data
        self.result.read.append((version, src, data))

    def read(self, version: int, rel: str, *, via_cp: bool = False) -> None:
        from .rig import RigError

        if via_cp:
            dst = self.local / f"read_v{version}_{rel.replace('/', '_')}"
            dst.unlink(missing_ok=True)
            self.step(f"v{version} nfs-cp {rel} to a local file", "nfs-cp",
                      self.rig.url(rel, version), dst)
            got = dst.read_bytes()
        else:
            got = self.step(f"v{version} cat {rel}", "nfs-cat", self.rig.url(rel, version)).stdout
        want = (self.rig.export_dir / rel).read_bytes()
        if got != want:
            raise RigError(f"v{version} read of {rel}: got {len(got)} bytes, the server holds "
                           f"{len(want)} different ones")
        self.result.read.append((version, rel, got))

    def listing(self, version: int, rel: str, *, recursive: bool = False) -> None:
        from .rig import RigError

        args = ["nfs-ls", *(["-R"] if recursive else []), self.rig.url(rel, version)]
        out = self.step(f"v{version} ls {'-R ' if recursive else ''}{rel or '/'}", *args).stdout
        names = {line.split()[-1] for line in out.decode(errors="replace").splitlines()
                 if line.strip()}
        want = {p.name for p in (self.rig.export_dir / rel).iterdir()}
        if not recursive and not want <= names:
            raise RigError(f"v{version} ls {rel}: missing {sorted(want - names)[:5]}")

    def missing(self, version: int, rel: str) -> None:
        tool = "nfs-ls" if rel.endswith("dir") else "nfs-cat"
        self.step(f"v{version} {tool} of missing {rel}", tool, self.rig.url(rel, version),
                  ok=False)
        self.result.missing.append((version, rel))


def _v3(r: _Runner) -> None:
    ip = r.rig.server_ip
    # portmap DUMP over TCP; NULL calls to NFSv3 and MOUNTv3 over UDP (with rpcbind lookups).
    r.step("portmap dump", "rpcinfo", "-p", ip)
    r.step("NFSv3 NULL over UDP", "rpcinfo", "-u", ip, "nfs", "3")
    r.step("MOUNTv3 NULL over UDP", "rpcinfo", "-u", ip, "mountd", "3")
    r.step("MOUNT EXPORT (list exports)", "nfs-ls", "-D", f"nfs://{ip}")
    r.listing(3, "")
    r.listing(3, "tree", recursive=True)
    r.listing(3, "many")
    for rel, size in V3_WRITES.items():
        r.write(3, rel, size)
    for rel in V3_WRITES:
        r.read(3, rel)
    r.read(3, "w3/big.bin", via_cp=True)
    r.read(3, "seed/seed.bin")
    # nfs-cp creates exclusively: writing over an existing file fails with NFS3ERR_EXIST.
    r.step("v3 nfs-cp onto an existing file", "nfs-cp", r.local / "v3_w3_one.bin",
           r.rig.url("w3/sub/three_k.bin"), ok=False)
    r.copy(3, *V3_COPY)
    r.read(3, V3_COPY[1])
    for rel in MISSING:
        r.missing(3, rel)


def _v4(r: _Runner) -> None:
    r.listing(4, "")
    r.listing(4, "tree", recursive=True)
    r.listing(4, "many")
    for rel, size in V4_WRITES.items():
        r.write(4, rel, size)
    for rel in V4_WRITES:
        r.read(4, rel)
    r.read(4, "seed/seed.bin")
    r.read(4, "seed/big.bin", via_cp=True)
    r.read(4, "tree/a/b/c/leaf.txt")
    for rel in MISSING:
        r.missing(4, rel)


# ---- concurrent ------------------------------------------------------------------------

# Every client command of the concurrent workload runs as PID 1 of a PID namespace of its
# own. libnfs 4.0 starts each RPC context's xids at
#   salt + (uint32)rpc_current_time() + (getpid() << 16)
# (rpc_current_time: monotonic milliseconds; salt: 0, 1 << 24, ... per context in a process)
# and counts up by one per call. With ordinary PIDs, processes differ by 65 536 xids per PID,
# so two connections practically never share an xid (a run of this workload without PID
# namespaces: none of its 3177 xids on two connections). With PID 1 everywhere, commands started
# a few milliseconds apart draw from the same xid range, so the same xid appears on several
# TCP connections at once, the case where a converter pairing by xid alone (or by xid and
# addresses but not ports) goes wrong. `--kill-child`: the command dies with unshare.
PIDNS = ("unshare", "--pid", "--fork", "--kill-child")
# NFSv4 clients name themselves by PID ("Libnfs ... pid:N"): two at once with PID 1 would be
# one client to the server and break each other's state, so one NFSv4 worker keeps ordinary
# PIDs; the other runs its commands one after another as PID 1.
OWN_PIDS = ("v4_small",)
CONCURRENT_DIRS = ("c3/big", "c3/small", "c4/small")
CONCURRENT_V3_BIG = 1_500_000  # two WRITEs (and READs) each, 1 MiB and 0.45 MB
# 21 WRITE calls on one connection: more than 16 MiB of one direction of a connection
# follows its first WRITE (a converter that buffers the bytes behind a hole, up to a bound,
# shows itself when a test cuts a segment there).
CONCURRENT_V3_HUGE = 22_000_000
CONCURRENT_SMALL = 48  # small files per small-file worker
CONCURRENT_DEADLINE = 120.0  # seconds for the whole workload
COMMAND_JOIN = 70.0  # longer than rig.COMMAND_TIMEOUT: a worker's last command ends by then


def _concurrent_workers(seed: int) -> dict[str, Callable[[_Runner], None]]:
    """name -> function(_Runner): the workers, run at the same time, each a sequence of
    client commands (each command its own process and TCP connection(s))."""
    rng = random.Random(seed)
    small_sizes = [rng.randrange(0, 3001) for _ in range(CONCURRENT_SMALL)]
    tiny_sizes = [rng.randrange(0, 1001) for _ in range(CONCURRENT_SMALL)]

    def v3_big(r):  # large WRITEs and READs over NFSv3 (messages of ~700 segments)
        r.write(3, "c3/big/huge.bin", CONCURRENT_V3_HUGE)
        for i in range(2):
            r.write(3, f"c3/big/big{i}.bin", CONCURRENT_V3_BIG)
        for i in range(2):
            r.read(3, f"c3/big/big{i}.bin")
        r.read(3, "seed/big.bin")

    def v3_small(r):  # many short NFSv3 commands: portmap, MOUNT, LOOKUP, CREATE, WRITE...
        for i, n in enumerate(small_sizes):
            r.write(3, f"c3/small/f{i:02d}.bin", n)
            r.read(3, f"c3/small/f{i:02d}.bin")
        r.missing(3, "c3/small/none.bin")

    def v4_read(r):  # NFSv4 COMPOUNDs: large READs, listings, small reads
        r.read(4, "seed/big.bin")
        r.listing(4, "tree", recursive=True)
        r.listing(4, "many")
        for rel in list(SEED_FILES)[:4] + ["seed/big.bin"]:
            r.read(4, rel)
        for i in range(0, MANY_FILES, 3):
            r.read(4, f"many/file_with_a_longish_name_{i:04d}.dat")

    def v4_small(r):  # small NFSv4 writes (libnfs fails above ~3.5 KB) read back
        for i, n in enumerate(tiny_sizes):
            r.write(4, f"c4/small/g{i:02d}.bin", n)
            r.read(4, f"c4/small/g{i:02d}.bin")
        r.missing(4, "c4/small/none.bin")

    def v3_list(r):  # listings and attribute-heavy NFSv3 traffic, and a big read
        for _ in range(5):
            r.listing(3, "many")
            r.listing(3, "tree", recursive=True)
        r.read(3, "seed/seed.bin")
        r.read(3, "seed/big.bin")

    def udp(r):  # NFSv3 and MOUNTv3 NULL calls over UDP (with rpcbind GETADDRs)
        ip = r.rig.server_ip
        for _ in range(24):
            r.step("NFSv3 NULL over UDP", "rpcinfo", "-u", ip, "nfs", "3")
            r.step("MOUNTv3 NULL over UDP", "rpcinfo", "-u", ip, "mountd", "3")

    return {"v3_big": v3_big, "v3_small": v3_small, "v4_read": v4_read,
            "v4_small": v4_small, "v3_list": v3_list, "udp": udp}


def _concurrent(rig, result: WorkloadResult, seed: int) -> None:
    """Runs the workers in threads, all at once; waits for all (bounded), then raises the
    first failure. A failure stops the other workers at their next command."""
    import threading
    import time

    from .rig import RigError

    for d in CONCURRENT_DIRS:
        shutil.rmtree(rig.export_dir / d.split("/")[0], ignore_errors=True)
    for d in CONCURRENT_DIRS:
        (rig.export_dir / d).mkdir(parents=True, exist_ok=True)
    failures: list[BaseException] = []
    stop = threading.Event()

    class _Stopped(Exception):
        pass

    class _Worker(_Runner):
        def step(self, what, *args, ok=True):
            if stop.is_set():
                raise _Stopped()
            return super().step(what, *args, ok=ok)

    def body(name, fn, i):
        try:
            fn(_Worker(rig, result, seed * 100 + i, prefix=() if name in OWN_PIDS else PIDNS))
        except _Stopped:
            pass
        except BaseException as e:  # reported after the join
            failures.append(RigError(f"concurrent worker {name}: {e}"))
            stop.set()

    workers = _concurrent_workers(seed)
    threads = [threading.Thread(target=body, args=(n, f, i), name=f"nfs-{n}", daemon=True)
               for i, (n, f) in enumerate(workers.items())]
    for t in threads:
        t.start()
    deadline = time.monotonic() + CONCURRENT_DEADLINE
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        stop.set()
        for t in threads:  # each command has its own time limit (rig.run)
            t.join(COMMAND_JOIN)
        raise RigError(f"the concurrent workload did not finish within {CONCURRENT_DEADLINE}s")
    if failures:
        raise failures[0]


def run(rig, kind: str, *, seed: int = 7) -> WorkloadResult:
    """Runs workload `kind` against a started rig; raises RigError on any unexpected outcome."""
    if kind not in KINDS:
        raise ValueError(f"unknown workload {kind!r}; one of {', '.join(KINDS)}")
    populate(rig.export_dir, seed)
    result = WorkloadResult(kind)
    r = _Runner(rig, result, seed + 1)
    if kind in ("v3", "mixed"):
        _v3(r)
    if kind in ("v4", "mixed"):
        _v4(r)
    if kind == "mixed":
        r.read(4, "w3/sub/deep/hundred_k.bin")
        r.read(3, "w4/sub/kilo.bin")
    if kind == "concurrent":
        _concurrent(rig, result, seed)
    return result
