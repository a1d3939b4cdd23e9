"""An NLM v4 / NSM v1 client over libnfs (ctypes), run inside the rig's client namespace by
make_nlm_capture.py: real lock requests to nfs-ganesha's lock manager and real status
monitor calls to rpc.statd, so that the capture holds NLM and NSM messages from real servers.

    python3 nlm_client.py SERVER_IP EXPORT

Prints one JSON line per request: procedure and the status libnfs decoded from the reply.
libnfs 4.0 has no headers in Debian's runtime package; the structures below follow its
nlm/nlm.x and nsm/nsm.x (bool_t is an int, hyper a 64-bit integer, strings char *).
"""

import ctypes as C
import json
import os
import select
import sys
import time

lib = C.CDLL("libnfs.so.13")
RPC_CB = C.CFUNCTYPE(None, C.c_void_p, C.c_int, C.c_void_p, C.c_void_p)
lib.rpc_init_context.restype = C.c_void_p
lib.nfs_init_context.restype = C.c_void_p
lib.nfs_get_rpc_context.restype = C.c_void_p
lib.rpc_get_error.restype = C.c_char_p
lib.nfs_get_error.restype = C.c_char_p
lib.nfs_get_fh.restype = C.c_void_p
for f in ("rpc_connect_program_async", "rpc_service", "rpc_get_fd", "rpc_which_events",
          "rpc_nlm4_test_async", "rpc_nlm4_lock_async", "rpc_nlm4_unlock_async",
          "rpc_nlm4_cancel_async",
          "rpc_nsm1_stat_async", "rpc_nsm1_mon_async", "rpc_nsm1_unmon_async",
          "rpc_nsm1_notify_async", "rpc_nsm1_unmonall_async"):
    getattr(lib, f).restype = C.c_int


class Opaque(C.Structure):
    _fields_ = [("len", C.c_uint), ("val", C.c_char_p)]


class RawFh(C.Structure):
    """struct nfs_fh as nfs_get_fh returns it (val as an address: a c_char_p field would stop
    at the first zero byte)."""
    _fields_ = [("len", C.c_int), ("val", C.c_void_p)]


class Lock4(C.Structure):
    _fields_ = [("caller_name", C.c_char_p), ("fh", Opaque), ("oh", C.c_char_p),
                ("svid", C.c_uint), ("l_offset", C.c_uint64), ("l_len", C.c_uint64)]


class TestArgs(C.Structure):
    _fields_ = [("cookie", Opaque), ("exclusive", C.c_int), ("lock", Lock4)]


class LockArgs(C.Structure):
    _fields_ = [("cookie", Opaque), ("block", C.c_int), ("exclusive", C.c_int),
                ("lock", Lock4), ("reclaim", C.c_int), ("state", C.c_int)]


class CancArgs(C.Structure):
    _fields_ = [("cookie", Opaque), ("block", C.c_int), ("exclusive", C.c_int),
                ("lock", Lock4)]


class UnlockArgs(C.Structure):
    _fields_ = [("cookie", Opaque), ("lock", Lock4)]


class Res(C.Structure):
    """NLM4_LOCKres / CANCres / UNLOCKres, and the head of NLM4_TESTres."""
    _fields_ = [("cookie", Opaque), ("status", C.c_int)]


class MyId(C.Structure):
    _fields_ = [("my_name", C.c_char_p), ("my_prog", C.c_int), ("my_vers", C.c_int),
                ("my_proc", C.c_int)]


class MonId(C.Structure):
    _fields_ = [("mon_name", C.c_char_p), ("my_id", MyId)]


class MonArgs(C.Structure):
    _fields_ = [("mon_id", MonId), ("priv", C.c_char * 16)]


class StatArgs(C.Structure):
    _fields_ = [("mon_name", C.c_char_p)]


class NotifyArgs(C.Structure):
    _fields_ = [("mon_name", C.c_char_p), ("state", C.c_int)]


class StatRes(C.Structure):
    _fields_ = [("res", C.c_int), ("state", C.c_int)]


def wait(rpc, done, what, timeout=10.0):
    """Runs the context's event loop until `done` is set; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not done:
        if time.monotonic() > deadline:
            sys.exit(f"nlm_client: no answer to {what} within {timeout}s")
        fd = lib.rpc_get_fd(C.c_void_p(rpc))
        ev = lib.rpc_which_events(C.c_void_p(rpc))
        p = select.poll()
        p.register(fd, ev)
        revents = sum(e for _, e in p.poll(100)) or 0
        if lib.rpc_service(C.c_void_p(rpc), revents) < 0:
            sys.exit(f"nlm_client: {what}: {lib.rpc_get_error(C.c_void_p(rpc))}")


def connect(server, prog, vers):
    rpc = lib.rpc_init_context()
    done = []

    @RPC_CB
    def cb(_rpc, status, _data, _priv):
        done.append(status)

    if lib.rpc_connect_program_async(C.c_void_p(rpc), server.encode(), prog, vers, cb, None):
        sys.exit(f"nlm_client: connect {prog}: {lib.rpc_get_error(C.c_void_p(rpc))}")
    wait(rpc, done, f"connect to {prog} v{vers}")
    if done[0] != 0:
        sys.exit(f"nlm_client: connect {prog}: {lib.rpc_get_error(C.c_void_p(rpc))}")
    return rpc, cb


def call(rpc, fn, args, name, res_type=None):
    out = {}
    done = []

    @RPC_CB
    def cb(_rpc, status, data, _priv):
        out["rpc_status"] = status
        if status == 0 and res_type is not None and data:
            r = res_type.from_address(data)
            out.update({k: getattr(r, k) for k, _ in res_type._fields_ if k != "cookie"})
        done.append(1)

    if fn(C.c_void_p(rpc), cb, C.byref(args), None):
        sys.exit(f"nlm_client: {name}: {lib.rpc_get_error(C.c_void_p(rpc))}")
    wait(rpc, done, name)
    print(json.dumps({"call": name, **out}), flush=True)
    return out


def file_handle(server, export, name):
    """Creates `name` in the export over NFSv3 and returns its handle."""
    nfs = lib.nfs_init_context()
    if lib.nfs_mount(C.c_void_p(nfs), server.encode(), export.encode()):
        sys.exit(f"nlm_client: mount: {lib.nfs_get_error(C.c_void_p(nfs))}")
    fh = C.c_void_p()
    if lib.nfs_creat(C.c_void_p(nfs), f"/{name}".encode(), 0o644, C.byref(fh)):
        sys.exit(f"nlm_client: creat: {lib.nfs_get_error(C.c_void_p(nfs))}")
    lib.nfs_close(C.c_void_p(nfs), fh)
    if lib.nfs_open(C.c_void_p(nfs), f"/{name}".encode(), os.O_RDWR, C.byref(fh)):
        sys.exit(f"nlm_client: open: {lib.nfs_get_error(C.c_void_p(nfs))}")
    raw = RawFh.from_address(lib.nfs_get_fh(fh))
    return C.string_at(raw.val, raw.len)


def lock(fh, oh, svid, offset, length, host=b"tdnlm-client"):
    return Lock4(host, Opaque(len(fh), fh), oh, svid, offset, length)


def cookie(n):
    b = n.to_bytes(4, "big")
    return Opaque(4, b)


def main():
    server, export = sys.argv[1], sys.argv[2]
    fh = file_handle(server, export, "locked.bin")
    print(json.dumps({"fh": fh.hex()}), flush=True)
    rpc, _keep = connect(server, 100021, 4)
    a, b = b"owner-a@tdnlm", b"owner-b@tdnlm"
    call(rpc, lib.rpc_nlm4_test_async, TestArgs(cookie(1), 1, lock(fh, a, 101, 0, 100)),
         "TEST free", Res)
    call(rpc, lib.rpc_nlm4_lock_async,
         LockArgs(cookie(2), 0, 1, lock(fh, a, 101, 0, 100), 0, 3), "LOCK a", Res)
    call(rpc, lib.rpc_nlm4_test_async, TestArgs(cookie(3), 1, lock(fh, b, 202, 50, 10)),
         "TEST conflicting", Res)
    call(rpc, lib.rpc_nlm4_lock_async,
         LockArgs(cookie(4), 0, 0, lock(fh, b, 202, 50, 10), 0, 3), "LOCK b shared", Res)
    # A range past 4 GiB: only NLM v4's 64-bit offsets can say it.
    call(rpc, lib.rpc_nlm4_lock_async,
         LockArgs(cookie(5), 0, 0, lock(fh, b, 202, 1 << 40, 0), 0, 3), "LOCK b high", Res)
    call(rpc, lib.rpc_nlm4_cancel_async,
         CancArgs(cookie(6), 0, 1, lock(fh, b, 202, 50, 10)), "CANCEL b", Res)
    call(rpc, lib.rpc_nlm4_unlock_async, UnlockArgs(cookie(7), lock(fh, a, 101, 0, 100)),
         "UNLOCK a", Res)
    call(rpc, lib.rpc_nlm4_unlock_async, UnlockArgs(cookie(8), lock(fh, b, 202, 1 << 40, 0)),
         "UNLOCK b", Res)
    stat, _keep2 = connect(server, 100024, 1)
    call(stat, lib.rpc_nsm1_stat_async, StatArgs(b"tdnlm-client"), "SM_STAT", StatRes)
    call(stat, lib.rpc_nsm1_mon_async,
         MonArgs(MonId(b"tdnlm-client", MyId(b"tdnlm-server", 100021, 4, 16)), b"\0" * 16),
         "SM_MON", StatRes)
    call(stat, lib.rpc_nsm1_unmon_async,
         MonId(b"tdnlm-client", MyId(b"tdnlm-server", 100021, 4, 16)), "SM_UNMON", StatRes)
    call(stat, lib.rpc_nsm1_unmonall_async, MyId(b"tdnlm-server", 100021, 4, 16),
         "SM_UNMON_ALL", StatRes)
    call(stat, lib.rpc_nsm1_notify_async, NotifyArgs(b"tdnlm-client", 5), "SM_NOTIFY")
    os._exit(0)


if __name__ == "__main__":
    main()
