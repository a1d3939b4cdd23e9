"""Client workloads for the NFS rig: varied, deterministic, checked.

Each workload drives libnfs-utils (nfs-cp, nfs-ls, nfs-cat) and rpcinfo from the client
namespace and checks every outcome: expected successes succeed, expected errors fail, every file
a client wrote is on the server's disk byte for byte, and every read returns the bytes on disk.
File contents are half random, half zeros (seeded), like the rest of tapdeck's test traffic.

NFSv4 writes stay small: libnfs 4.0 against nfs-ganesha 4.3 fails NFSv4 writes from about
4000 bytes on (the client gives up before sending a WRITE), so large writes go over NFSv3 and
NFSv4 carries small writes, lookups, listings and (large) reads. README.md lists the operations
each workload produces, as counted by tshark.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("v3", "v4", "mixed")

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
    def __init__(self, rig, result: WorkloadResult, seed: int):
        self.rig = rig
        self.result = result
        self.rng = random.Random(seed)
        self.local = rig.workdir / "client"
        self.local.mkdir(exist_ok=True)

    def step(self, what: str, *args, ok: bool = True):
        from .rig import RigError

        r = self.rig.run(*args, check=False)
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
    return result
