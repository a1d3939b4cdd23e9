"""A real NFS server and user-space clients in two network namespaces, for tests and benchmarks.

    with NfsRig(tmpdir) as rig:
        with rig.capture(tmpdir / "nfs.pcap"):
            rig.run("nfs-cat", rig.url("seed/seed.bin"))

Layout (one rig at a time on a machine: the namespace, interface names and addresses are fixed
so that a crashed run's leftovers can be found and removed by the next one):

    netns tdnfs-srv: tdnfs-s 198.18.7.1/24   rpcbind + nfs-ganesha (VFS FSAL, exports WORKDIR/export)
         |  veth (GRO/GSO/TSO off, so captured frames are the frames on the wire)
    netns tdnfs-cli: tdnfs-c 198.18.7.2/24   libnfs-utils clients (nfs-cp, nfs-ls, nfs-cat), rpcinfo,
                                             and the capture (tcpdump or `tapdeck record`) on tdnfs-c,
                                             which sees both directions

Nothing touches the root namespace's network. rpcbind and ganesha run in a private mount
namespace with a tmpfs over /run, so rpcbind's /run/rpcbind.sock and lock never meet the host's
or a previous rig's; ganesha's pid file, log, config and NFSv4 recovery directory live in WORKDIR.
The server has no grace period (Graceless), so NFSv4 OPENs work at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import netlab  # tests/netlab.py: whoever imports the rig has tests/ on sys.path

SERVER_NS = "tdnfs-srv"
CLIENT_NS = "tdnfs-cli"
SERVER_IF = "tdnfs-s"
CLIENT_IF = "tdnfs-c"
# 198.18.7.0/24: inside the benchmarking range 198.18.0.0/15 and used by no other test.
SERVER_IP = "198.18.7.1"
CLIENT_IP = "198.18.7.2"
PREFIX = 24
EXPORT_PSEUDO = "/export"

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
COMMAND_TIMEOUT = 60.0
# Held while a rig exists, so that a second rig on the machine (another test session) waits
# for the first instead of taking its leftovers for a crashed run's and killing them.
LOCK_PATH = Path("/run/lock/tdnfs-rig.lock")
LOCK_TIMEOUT = 300.0

TOOLS = ("ip", "ethtool", "unshare", "rpcbind", "rpcinfo", "ganesha.nfsd", "nfs-cp", "nfs-ls",
         "nfs-cat", "tcpdump")


class RigError(RuntimeError):
    """The rig could not be built or a command in it failed; the message says why."""


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def unavailable_reason() -> str | None:
    """Why a rig cannot run here (None if it can): tests skip with this message."""
    if os.geteuid() != 0:
        return "the NFS rig needs root (network namespaces, veth pairs, mounts)"
    missing = missing_tools()
    if missing:
        return (f"the NFS rig needs {', '.join(missing)} (scripts/setup.sh installs nfs-ganesha, "
                "nfs-ganesha-vfs, rpcbind and libnfs-utils)")
    return None


@dataclass
class Completed:
    args: list[str]
    returncode: int
    stdout: bytes
    stderr: str
    seconds: float

    def describe(self) -> str:
        return (f"$ {shlex.join(self.args)}\nexit {self.returncode} after {self.seconds:.2f}s\n"
                f"stderr: {self.stderr[-2000:]}")


def _sh(args, *, timeout=COMMAND_TIMEOUT, check=True, input=None) -> Completed:
    args = [str(a) for a in args]
    t0 = time.monotonic()
    try:
        p = subprocess.run(args, input=input, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise RigError(f"timed out after {timeout}s: {shlex.join(args)}") from e
    r = Completed(args, p.returncode, p.stdout, p.stderr.decode(errors="replace"),
                  time.monotonic() - t0)
    if check and r.returncode != 0:
        raise RigError(f"command failed:\n{r.describe()}")
    return r


def _netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def _kill_pids(pids: list[int], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM, then SIGKILL what is still there after `timeout`."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)]:
            return
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def remove_leftovers() -> None:
    """Kills the processes of a previous rig's namespaces (found by namespace, killed by pid)
    and deletes the namespaces; their veth pair goes with them."""
    for ns in (SERVER_NS, CLIENT_NS):
        if not _netns_exists(ns):
            continue
        r = _sh(["ip", "netns", "pids", ns], check=False)
        pids = [int(p) for p in r.stdout.split() if p.isdigit()]
        _kill_pids(pids)
        _sh(["ip", "netns", "del", ns], check=False)


def ganesha_config(workdir: Path, export_dir: Path) -> str:
    """NFSv3 and NFSv4.0 over TCP and UDP, no Kerberos, no grace period, root not squashed.
    Mount_Path_Pseudo lets NFSv3 MOUNT the same /export path that NFSv4 sees."""
    return f"""\
NFS_CORE_PARAM {{
    Protocols = 3, 4;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = true;
    Bind_addr = {SERVER_IP};
    Mount_Path_Pseudo = true;
}}
NFS_KRB5 {{ Active_krb5 = false; }}
NFSV4 {{
    Graceless = true;
    # Each libnfs command is a new NFSv4 client: a lease shorter than the time between its
    # SETCLIENTID_CONFIRM and its OPEN on a loaded machine fails the OPEN with
    # NFS4ERR_EXPIRED (seen with a 1 s lease).
    Grace_Period = 15;
    Lease_Lifetime = 15;
    RecoveryBackend = fs;
    RecoveryRoot = {workdir / "recovery"};
    Only_Numeric_Owners = true;
    Allow_Numeric_Owners = true;
}}
LOG {{ Default_Log_Level = EVENT; }}
EXPORT {{
    Export_Id = 1;
    Path = {export_dir};
    Pseudo = {EXPORT_PSEUDO};
    Protocols = 3, 4;
    Transports = UDP, TCP;
    Access_Type = RW;
    Squash = None;
    SecType = sys;
    FSAL {{ Name = VFS; }}
}}
"""


# Runs inside `ip netns exec SERVER_NS unshare --mount`: a private /run for rpcbind, then both
# daemons in the foreground as children of this shell, which exits once both have.
SERVER_SCRIPT = """\
set -u
mount -t tmpfs -o size=1m,mode=755 tdnfs-run /run || exit 90
mkdir -p /run/rpcbind
rpcbind -f &
echo $! > "$W/rpcbind.pid"
i=0
while [ ! -S /run/rpcbind.sock ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
ganesha.nfsd -F -f "$W/ganesha.conf" -L "$W/ganesha.log" -p "$W/ganesha.pid" -N NIV_EVENT &
echo $! > "$W/ganesha.shpid"
wait
"""


class NfsRig:
    """Builds the namespaces and the server on enter, tears everything down on exit (also after
    a failure). Only one rig may exist at a time; tests using it must not run in parallel."""

    def __init__(self, workdir, *, start_timeout: float = START_TIMEOUT,
                 lock_timeout: float = LOCK_TIMEOUT):
        self.workdir = Path(workdir).resolve()
        self.export_dir = self.workdir / "export"
        self.start_timeout = start_timeout
        self.lock_timeout = lock_timeout
        self._lock = None
        self.server_ip = SERVER_IP
        self.client_ip = CLIENT_IP
        self.capture_if = CLIENT_IF
        self._server: subprocess.Popen | None = None

    # ---- life cycle --------------------------------------------------------------------

    def __enter__(self) -> NfsRig:
        reason = unavailable_reason()
        if reason:
            raise RigError(reason)
        try:
            self._take_lock()
            remove_leftovers()
            self._make_dirs()
            self._make_network()
            self._start_server()
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _take_lock(self) -> None:
        """Waits (at most lock_timeout) until no other rig on the machine holds the lock."""
        LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
        f = open(LOCK_PATH, "a")  # held (and locked) until close()
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock = f
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    f.close()
                    raise RigError(f"another NFS rig holds {LOCK_PATH} for more than "
                                   f"{self.lock_timeout}s") from None
                time.sleep(0.2)

    def close(self) -> None:
        """Stops ganesha (cleanly, so it unregisters from rpcbind), then rpcbind, then deletes
        the namespaces, and lets the next rig start. Safe to call twice."""
        if self._server is not None:
            pids = [p for p in (self._pid("ganesha.shpid"), self._pid("ganesha.pid")) if p]
            _kill_pids(sorted(set(pids)))
            pid = self._pid("rpcbind.pid")
            if pid:
                _kill_pids([pid])
            try:
                self._server.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait(timeout=STOP_TIMEOUT)
            self._server = None
        if self._lock is not None:
            remove_leftovers()
            self._lock.close()  # releases the lock
            self._lock = None

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.workdir / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _make_dirs(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name in ("rpcbind.pid", "ganesha.pid", "ganesha.shpid"):
            (self.workdir / name).unlink(missing_ok=True)
        (self.workdir / "recovery").mkdir(exist_ok=True)
        self.export_dir.mkdir(exist_ok=True)
        (self.workdir / "ganesha.conf").write_text(ganesha_config(self.workdir, self.export_dir))

    def _make_network(self) -> None:
        """The two namespaces and their veth, made as every test's are (tests/netlab.py:
        offloads off, so the capture never sees 64 KB TCP "frames"), under the rig's fixed
        names (one rig at a time, see the lock) and with IPv6 left on, as the daemons
        expect. Removed by `remove_leftovers`, which kills what runs in them first."""
        lab = netlab.Lab()
        try:
            for ns in (SERVER_NS, CLIENT_NS):
                lab.add_ns(ns, ipv6=True)
            lab.pair(SERVER_NS, SERVER_IF, CLIENT_NS, CLIENT_IF, ipv6=True)
            for ns, dev, ip in ((SERVER_NS, SERVER_IF, SERVER_IP),
                                (CLIENT_NS, CLIENT_IF, CLIENT_IP)):
                lab.address(ns, dev, f"{ip}/{PREFIX}")
        except netlab.CommandError as e:
            raise RigError(str(e)) from e

    def _start_server(self) -> None:
        env = dict(os.environ, W=str(self.workdir))
        with open(self.workdir / "server.out", "wb") as out:
            self._server = subprocess.Popen(
                ["ip", "netns", "exec", SERVER_NS, "unshare", "--mount", "--propagation",
                 "private", "sh", "-c", SERVER_SCRIPT],
                env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def _wait_ready(self) -> None:
        """Until NFSv3 and NFSv4 NULL calls over TCP are answered (rpcinfo asks rpcbind for the
        port, so rpcbind and ganesha's registration are checked too)."""
        deadline = time.monotonic() + self.start_timeout
        last = None
        while time.monotonic() < deadline:
            if self._server.poll() is not None:
                raise RigError(f"the NFS server exited ({self._server.returncode}) at start\n"
                               + self.server_log_tail())
            r3 = self.run("rpcinfo", "-t", SERVER_IP, "nfs", "3", check=False, timeout=5)
            r4 = self.run("rpcinfo", "-t", SERVER_IP, "nfs", "4", check=False, timeout=5)
            if r3.returncode == 0 and r4.returncode == 0:
                return
            last = r3 if r3.returncode else r4
            time.sleep(0.2)
        raise RigError(f"the NFS server did not answer within {self.start_timeout}s\n"
                       f"{last.describe() if last else ''}\n{self.server_log_tail()}")

    def server_log_tail(self, lines: int = 30) -> str:
        out = []
        for name in ("server.out", "ganesha.log"):
            p = self.workdir / name
            if p.exists():
                tail = p.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {p} (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(out)

    # ---- clients -----------------------------------------------------------------------

    def url(self, path: str = "", version: int = 3) -> str:
        """nfs:// URL of `path` inside the export, for libnfs-utils."""
        u = f"nfs://{SERVER_IP}{EXPORT_PSEUDO}"
        if path:
            u += "/" + path.lstrip("/")
        return u + ("?version=4" if version == 4 else "")

    def run(self, *cmd, timeout: float = COMMAND_TIMEOUT, check: bool = True,
            input: bytes | None = None) -> Completed:
        """Runs a command in the client namespace; raises RigError on failure if `check`."""
        return _sh(["ip", "netns", "exec", CLIENT_NS, *cmd], timeout=timeout, check=check,
                   input=input)

    # ---- capture -----------------------------------------------------------------------

    @contextlib.contextmanager
    def capture(self, path, *, tool: str = "tcpdump", snaplen: int = 0,
                tapdeck_bin: str | None = None):
        """Captures the veth (both directions) into `path` while the block runs.

        tool="tcpdump": `tcpdump -i tdnfs-c -s SNAPLEN -w PATH` (pcap, µs timestamps).
        tool="tapdeck": `tapdeck record -i tdnfs-c` into a store beside `path`, extracted to
        `path` (pcapng) on exit; the binary is `tapdeck_bin` or $TAPDECK_BIN.
        On exit the recorder is stopped with SIGINT and waited for, so the file is complete."""
        path = Path(path).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        if tool == "tcpdump":
            yield from self._capture_tcpdump(path, snaplen)
        elif tool == "tapdeck":
            binary = tapdeck_bin or os.environ.get("TAPDECK_BIN")
            if not binary:
                raise RigError("capture(tool='tapdeck') needs tapdeck_bin or $TAPDECK_BIN")
            yield from self._capture_tapdeck(path, snaplen, Path(binary))
        else:
            raise RigError(f"unknown capture tool {tool!r}")

    def _capture_tcpdump(self, path: Path, snaplen: int):
        err = path.with_name(path.name + ".tcpdump.log")
        # -Z root: pytest's tmp dirs are 0700, tcpdump's default user could not write there.
        # --immediate-mode: otherwise packets wait in a half-full ring block for up to a
        # second, and those still waiting when tcpdump is stopped are lost.
        # -B 65536 (KiB): the concurrent workload's 22 MB write crosses the veth faster than
        # tcpdump drains the default 2 MiB ring; 64 MiB holds a whole burst.
        with open(err, "wb") as log:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", CLIENT_NS, "tcpdump", "-i", CLIENT_IF, "-s",
                 str(snaplen), "--immediate-mode", "-B", "65536", "-U", "-n", "-Z", "root",
                 "-w", str(path)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        try:
            self._wait_text(err, "listening on", proc, "tcpdump")
            yield path
            self._settle()
        finally:
            self._stop(proc, "tcpdump", err)
        text = err.read_text(errors="replace")
        counts = dict((what, int(n)) for n, what in re.findall(
            r"^(\d+) packets? (captured|received by filter|dropped by kernel)", text, re.M))
        if proc.returncode != 0 or len(counts) != 3:
            raise RigError(f"tcpdump did not finish cleanly ({proc.returncode}):\n{text[-2000:]}")
        if counts["dropped by kernel"] or counts["captured"] != counts["received by filter"]:
            raise RigError(f"the capture {path} is incomplete: {counts}")

    def _capture_tapdeck(self, path: Path, snaplen: int, binary: Path):
        store = path.with_name(path.name + ".store")
        shutil.rmtree(store, ignore_errors=True)
        err = path.with_name(path.name + ".tapdeck.log")
        args = [binary, "record", "-i", CLIENT_IF, "--store", store, "-q", "--codec", "none",
                "--staging", "64MiB", "--ring-blocks", "8", "--ring-block-size", "1MiB"]
        if snaplen:
            args += ["--snaplen", str(snaplen)]
        with open(err, "wb") as log:
            proc = subprocess.Popen(["ip", "netns", "exec", CLIENT_NS, *map(str, args)],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=log)
        try:
            # The recorder writes its manifest once the sockets are open; give it a moment more.
            deadline = time.monotonic() + 15
            while not (store / "manifest.json").exists() and time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RigError(f"tapdeck record exited at start:\n{err.read_text()[-2000:]}")
                time.sleep(0.05)
            time.sleep(0.5)
            yield path
            self._settle()
        finally:
            self._stop(proc, "tapdeck record", err)
        if proc.returncode != 0:
            raise RigError(f"tapdeck record failed ({proc.returncode}):\n{err.read_text()[-2000:]}")
        _sh([binary, "extract", store, "-w", path], timeout=120)

    @staticmethod
    def _settle() -> None:
        # Last ACKs and FINs of the clients' connections are still on their way.
        time.sleep(0.3)

    @staticmethod
    def _wait_text(log: Path, text: str, proc: subprocess.Popen, what: str,
                   timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in log.read_text(errors="replace"):
                return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RigError(f"{what} did not start:\n{log.read_text(errors='replace')[-2000:]}")

    @staticmethod
    def _stop(proc: subprocess.Popen, what: str, log: Path) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired as e:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)
            raise RigError(f"{what} ignored SIGINT for 30 s:\n{log.read_text()[-2000:]}") from e

    # ---- workloads ---------------------------------------------------------------------

    def workload(self, kind: str, *, seed: int = 7):
        """Runs a varied client workload ("v3", "v4" or "mixed"); see workloads.py."""
        from . import workloads

        return workloads.run(self, kind, seed=seed)
