#!/usr/bin/env python3
"""Synthetic, protocol-correct NFS trace generator (benchmark input with known latencies).

    python3 bench/nfsgen.py OUT.pcap --transactions N [--seed S] [--clients C] [--servers 1|2]
                            [--latency-us OP=MEAN,v4:OP=MEAN,...] [--latency-dist exp|fixed]
                            [--think-us MEAN] [--v4-share F] [--start EPOCH_SECONDS]

Writes a classic pcap (nanosecond timestamps, Ethernet/IPv4/TCP) of C clients (198.18.1.x…)
talking to one or two servers (198.18.0.1, 198.18.0.2) on port 2049, and OUT.truth.json beside it.

* TCP: every connection opens with SYN (MSS option 1448) / SYN-ACK / ACK and closes with
  FIN-ACK / FIN-ACK / ACK; sequence and acknowledgement numbers follow the byte streams
  (an ACK carries everything the peer sent before it); data segments carry at most MSS = 1448
  bytes; the receiver of a multi-segment message sends a pure ACK every second segment.
  IPv4 ids count per direction, DF set; IP and TCP checksums are correct.
* RPC: ONC RPC v2 over TCP with record marks, AUTH_SYS credentials. Each client is NFSv3 or
  NFSv4.0 (--v4-share of them v4). NFSv3: GETATTR, LOOKUP, ACCESS, READ, WRITE, READDIRPLUS,
  CREATE, REMOVE, COMMIT. NFSv4.0 COMPOUNDs: PUTFH+GETATTR, PUTFH+READ, PUTFH+WRITE,
  PUTFH+LOOKUP+GETFH+GETATTR, PUTFH+OPEN+GETFH+GETATTR, PUTFH+CLOSE. READ/WRITE sizes 4, 8,
  32 or 64 KiB (payload half random, half zeros); 20 % of the calls are READ or WRITE.
* Traffic: each connection runs rounds: the client sends a batch of 1–4 calls at once (one
  send, so small calls share a segment and a WRITE spans several), the server answers each
  after its injected latency (replies in the order they become ready, serialised on the
  connection: a reply that has to wait for the previous one is later, and the truth records
  the latency that actually resulted), then the client thinks (exponential, --think-us) and
  starts the next round.
* Latency: from the packet that completes the call (its last segment) to the packet that
  completes the reply (its last segment) — what tshark's rpc.time and the dataset's
  first_time_ns/time_ns measure. Per operation (v3 procedure; v4 COMPOUND kind, named by its
  main operation: GETATTR, READ, WRITE, LOOKUP, OPEN, CLOSE) exponential (or fixed) with the
  given mean, at least 20 µs plus the reply's transfer time.
* OUT.truth.json: per NFS version and operation, as nfs_latency counts them (v3 per
  procedure; v4 per COMPOUND and per operation inside it, each taking its COMPOUND's
  latency): calls, mean_s, min_s, max_s (and latencies_ns when N <= --exact-max), plus the
  nominal means, packets, RPC messages and the time span.

Generation is vectorised per chunk with numpy (headers, checksums, sequence numbers); the
Python loop runs per transaction and per packet only to encode messages and join buffers.
"""

import argparse
import gc
import heapq
import json
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np

MSS = 1448
SEG_GAP_NS = 1200  # between back-to-back segments of one send (~10 Gb/s)
ACK_DELAY_NS = 600  # a pure ACK follows the segment it acknowledges by this much (< SEG_GAP_NS)
MIN_TURN_NS = 20_000  # least server time between a call and its reply
NFS_PORT = 2049
NFS_PROG = 100003

# Nominal mean server latency per operation, microseconds.
DEFAULT_LATENCY_US = {
    (3, "GETATTR"): 150, (3, "LOOKUP"): 250, (3, "ACCESS"): 120, (3, "READ"): 800,
    (3, "WRITE"): 1500, (3, "READDIRPLUS"): 1200, (3, "CREATE"): 2000, (3, "REMOVE"): 1800,
    (3, "COMMIT"): 5000,
    (4, "GETATTR"): 200, (4, "READ"): 900, (4, "WRITE"): 1700, (4, "LOOKUP"): 300,
    (4, "OPEN"): 2500, (4, "CLOSE"): 400,
}
# Operation mix: metadata-heavy, as in the HP traces (GETATTR/LOOKUP/ACCESS dominate calls)
V3_MIX = {"GETATTR": 30, "LOOKUP": 20, "ACCESS": 18, "READ": 13, "WRITE": 7, "READDIRPLUS": 3,
          "CREATE": 3, "REMOVE": 3, "COMMIT": 3}
V4_MIX = {"GETATTR": 36, "LOOKUP": 20, "READ": 14, "WRITE": 8, "OPEN": 11, "CLOSE": 11}
V4_OPS = {"GETATTR": ["PUTFH", "GETATTR"], "READ": ["PUTFH", "READ"], "WRITE": ["PUTFH", "WRITE"],
          "LOOKUP": ["PUTFH", "LOOKUP", "GETFH", "GETATTR"],
          "OPEN": ["PUTFH", "OPEN", "GETFH", "GETATTR"], "CLOSE": ["PUTFH", "CLOSE"]}
V3_PROC = {"GETATTR": 1, "LOOKUP": 3, "ACCESS": 4, "READ": 6, "WRITE": 7, "CREATE": 8,
           "REMOVE": 12, "READDIRPLUS": 17, "COMMIT": 21}
IO_SIZES = [4096, 8192, 32768, 65536]  # READ/WRITE sizes (--io-kib), chosen uniformly

u32 = struct.Struct(">I").pack
u64 = struct.Struct(">Q").pack
U32 = struct.Struct(">I")
CALL_HDR = struct.Struct(">IIIIIII")  # record mark, xid, CALL, rpcvers 2, prog, vers, proc
REPLY_HDR = struct.Struct(">IIIIIII")  # record mark, xid, REPLY, MSG_ACCEPTED, verf 0/0, SUCCESS
FATTR3 = struct.Struct(">IIIIIQQIIQQIIIIII")
WCC_ATTR = struct.Struct(">QIIII")
FATTR4_NUM = struct.Struct(">IQQQQQII")  # type, change, size, fsid major/minor, fileid, mode, nlink
TIME4 = struct.Struct(">qI")

# pcap record header + Ethernet + IPv4 + TCP (without options): 70 bytes, one numpy record each
HDR_DT = np.dtype({
    "names": ["ts_sec", "ts_frac", "incl", "orig", "eth", "vhl", "tos", "ip_len", "ip_id", "frag",
              "ttl", "proto", "ip_sum", "src", "dst", "sport", "dport", "seq", "ack", "off_flags",
              "win", "tcp_sum", "urg"],
    "formats": ["<u4", "<u4", "<u4", "<u4", ("u1", (14,)), "u1", "u1", ">u2", ">u2", ">u2", "u1",
                "u1", ">u2", ">u4", ">u4", ">u2", ">u2", ">u4", ">u4", ">u2", ">u2", ">u2", ">u2"],
    "offsets": [0, 4, 8, 12, 16, 30, 31, 32, 34, 36, 38, 39, 40, 42, 46, 50, 52, 54, 58, 62, 64,
                66, 68],
    "itemsize": 70,
})
HDR = 70
FRAME_OVERHEAD = 54  # Ethernet + IPv4 + TCP header bytes in a frame

MSS_OPTION = [b"\x02\x04\x05\xa8"]  # SYN and SYN-ACK: MSS 1448
NOTHING = []
# send kinds
DATA, SYN, SYNACK, FIN_C, FIN_S, LAST_ACK = 0, 1, 2, 3, 4, 5
FLAG_FIN, FLAG_SYN, FLAG_PSH, FLAG_ACK = 0x01, 0x02, 0x08, 0x10


def xdr_opaque(b: bytes) -> bytes:
    return u32(len(b)) + b + b"\0" * (-len(b) % 4)


def ip4(a: str) -> int:
    return int.from_bytes(bytes(int(x) for x in a.split(".")), "big")


class Files:
    """A population of directories and files with their handles, names and attributes,
    pre-encoded in the XDR forms every operation needs."""

    def __init__(self, rng: np.random.Generator, ndirs: int, nfiles: int, t0: int):
        self.ndirs, self.nfiles = ndirs, nfiles
        sec = t0 // 1_000_000_000 - 86400
        self.fh, self.fh_x, self.name_x, self.fattr3, self.post_op, self.wcc, self.fattr4 = \
            [], [], [], [], [], [], []
        self.size, self.fileid, self.dir_of = [], [], []
        for i in range(ndirs + nfiles):
            is_dir = i < ndirs
            fileid = 1000 + i
            size = 4096 if is_dir else int(rng.choice([0, 4096, 65536, 1 << 20, 16 << 20, 256 << 20]))
            fh = b"\x01\x00\x07\x01" + struct.pack(">IQ", 0x5EED, fileid) + \
                bytes(rng.integers(0, 256, 16, dtype=np.uint8))
            name = f"dir{i:04d}" if is_dir else f"file-{i:06d}.dat"
            mtime = sec + int(rng.integers(0, 86400))
            typ, mode, nlink = (2, 0o755, 2) if is_dir else (1, 0o644, 1)
            uid = gid = 1000
            fa3 = FATTR3.pack(typ, mode, nlink, uid, gid, size, size, 0, 0, 0x5EED, fileid,
                              mtime, 0, mtime, 0, mtime, 0)
            a4 = (FATTR4_NUM.pack(typ, mtime, size, 0x5EED, 0, fileid, mode, nlink)
                  + xdr_opaque(b"1000") + xdr_opaque(b"1000") + u64(size)
                  + TIME4.pack(mtime, 0) + TIME4.pack(mtime, 0) + TIME4.pack(mtime, 0))
            self.fh.append(fh)
            self.fh_x.append(xdr_opaque(fh))
            self.name_x.append(xdr_opaque(name.encode()))
            self.fattr3.append(fa3)
            self.post_op.append(u32(1) + fa3)
            self.wcc.append(u32(1) + WCC_ATTR.pack(size, mtime, 0, mtime, 0) + u32(1) + fa3)
            self.fattr4.append(BITMAP4 + xdr_opaque(a4))
            self.size.append(size)
            self.fileid.append(fileid)
            self.dir_of.append(0 if is_dir else int(rng.integers(0, ndirs)))


# GETATTR bitmap: type, change, size, fsid, fileid | mode, numlinks, owner, owner_group,
# space_used, time_access, time_metadata, time_modify
BITMAP4 = u32(2) + u32((1 << 1) | (1 << 3) | (1 << 4) | (1 << 8) | (1 << 20)) + \
    u32((1 << 1) | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 13) | (1 << 15) | (1 << 20) | (1 << 21))
VERF8 = b"\x00\x00\x00\x00\x5e\xed\x00\x01"
STATEID_OTHER = b"\x5e\xed\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00"


class Payloads:
    """Data for READ replies and WRITE calls: the first half random, the rest zeros."""

    def __init__(self, rng: np.random.Generator):
        self.pool = memoryview(rng.integers(0, 256, 1 << 22, dtype=np.uint8).tobytes())
        self.zeros = memoryview(bytes(1 << 20))

    def get(self, n: int, r: int) -> list:
        """n bytes (a multiple of 4) as parts that share the pool: nothing is copied here."""
        h = n // 2
        o = (r % ((len(self.pool) - h) // 4)) * 4
        return [self.pool[o:o + h], self.zeros[:n - h]]


class Encoder:
    """Encodes one transaction: call and reply messages, with record marks, each as a list of
    parts (bytes and memoryviews of the payload pool) and its length."""

    def __init__(self, files: Files, payloads: Payloads, io_sizes: list):
        self.f, self.p, self.io = files, payloads, io_sizes

    @staticmethod
    def call(xid, vers, proc, cred, args):
        if isinstance(args, bytes):
            n = 24 + len(cred) + len(args)
            return [CALL_HDR.pack(0x80000000 | n, xid, 0, 2, NFS_PROG, vers, proc) + cred + args], n + 4
        n = 24 + len(cred) + sum(map(len, args))
        return [CALL_HDR.pack(0x80000000 | n, xid, 0, 2, NFS_PROG, vers, proc) + cred, *args], n + 4

    @staticmethod
    def reply(xid, res):
        if isinstance(res, bytes):
            n = 24 + len(res)
            return [REPLY_HDR.pack(0x80000000 | n, xid, 1, 0, 0, 0, 0) + res], n + 4
        n = 24 + sum(map(len, res))
        return [REPLY_HDR.pack(0x80000000 | n, xid, 1, 0, 0, 0, 0), *res], n + 4

    def v3(self, op, xid, cred, fi, r, seq):
        """Returns (call bytes, reply bytes) of one NFSv3 operation on file index fi."""
        f = self.f
        if op == "GETATTR":
            args, res = f.fh_x[fi], u32(0) + f.fattr3[fi]
        elif op == "LOOKUP":
            d = f.dir_of[fi]
            args = f.fh_x[d] + f.name_x[fi]
            res = u32(0) + f.fh_x[fi] + f.post_op[fi] + f.post_op[d]
        elif op == "ACCESS":
            args, res = f.fh_x[fi] + u32(0x3F), u32(0) + f.post_op[fi] + u32(0x0D)
        elif op == "READ":
            n = self.io[r % len(self.io)]
            size = f.size[fi]
            off = ((r >> 2) % max(1, size // n)) * n if size > n else 0
            eof = 1 if off + n >= size else 0
            args = f.fh_x[fi] + u64(off) + u32(n)
            res = [u32(0) + f.post_op[fi] + u32(n) + u32(eof) + u32(n), *self.p.get(n, r)]
        elif op == "WRITE":
            n = self.io[r % len(self.io)]
            off = ((r >> 2) % 4096) * n
            stable = 0 if r & 16 else 2  # UNSTABLE or FILE_SYNC
            args = [f.fh_x[fi] + u64(off) + u32(n) + u32(stable) + u32(n), *self.p.get(n, r)]
            res = u32(0) + f.wcc[fi] + u32(n) + u32(stable) + VERF8
        elif op == "READDIRPLUS":
            d = f.dir_of[fi]
            k = 8 + (r % 24)
            parts = [u32(0), f.post_op[d], VERF8]
            base = f.ndirs + (r % max(1, f.nfiles - k))
            for j in range(base, base + k):
                parts += [u32(1), u64(f.fileid[j]), f.name_x[j], u64(j - base + 1), f.post_op[j],
                          u32(1), f.fh_x[j]]
            parts += [u32(0), u32(1)]
            args = f.fh_x[d] + u64(0) + bytes(8) + u32(4096) + u32(32768)
            res = b"".join(parts)
        elif op == "CREATE":
            d = f.dir_of[fi]
            name = xdr_opaque(f"new-{seq:09d}.tmp".encode())
            sattr = u32(1) + u32(0o644) + u32(0) * 5
            args = f.fh_x[d] + name + u32(0) + sattr
            res = u32(0) + u32(1) + f.fh_x[fi] + f.post_op[fi] + f.wcc[d]
        elif op == "REMOVE":
            d = f.dir_of[fi]
            args = f.fh_x[d] + xdr_opaque(f"new-{seq:09d}.tmp".encode())
            res = u32(0) + f.wcc[d]
        elif op == "COMMIT":
            args, res = f.fh_x[fi] + u64(0) + u32(0), u32(0) + f.wcc[fi] + VERF8
        else:
            raise ValueError(op)
        return self.call(xid, 3, V3_PROC[op], cred, args), self.reply(xid, res)

    def v4(self, kind, xid, cred, fi, r, seq):
        """Returns (call bytes, reply bytes) of one NFSv4.0 COMPOUND of the given kind."""
        f = self.f
        put = u32(22) + f.fh_x[fi]
        stateid = u32(1) + STATEID_OTHER
        if kind == "GETATTR":
            ops = [put, u32(9) + BITMAP4]
            res = [u32(22) + u32(0), u32(9) + u32(0) + f.fattr4[fi]]
        elif kind == "READ":
            n = self.io[r % len(self.io)]
            size = f.size[fi]
            off = ((r >> 2) % max(1, size // n)) * n if size > n else 0
            eof = 1 if off + n >= size else 0
            ops = [put, u32(25) + stateid + u64(off) + u32(n)]
            res = [u32(22) + u32(0), [u32(25) + u32(0) + u32(eof) + u32(n), *self.p.get(n, r)]]
        elif kind == "WRITE":
            n = self.io[r % len(self.io)]
            off = ((r >> 2) % 4096) * n
            stable = 0 if r & 16 else 2
            ops = [put, [u32(38) + stateid + u64(off) + u32(stable) + u32(n), *self.p.get(n, r)]]
            res = [u32(22) + u32(0), u32(38) + u32(0) + u32(n) + u32(stable) + VERF8]
        elif kind in ("LOOKUP", "OPEN"):
            d = f.dir_of[fi]
            put = u32(22) + f.fh_x[d]
            if kind == "LOOKUP":
                mid, mid_res = u32(15) + f.name_x[fi], u32(15) + u32(0)
            else:
                owner = xdr_opaque(b"open-id:%08x" % (seq & 0xFFFFFFFF))
                mid = (u32(18) + u32(seq & 0xFFFFFFFF) + u32(1 + (r & 2)) + u32(0) + u64(0x5EED)
                       + owner + u32(0) + u32(0) + f.name_x[fi])
                mid_res = (u32(18) + u32(0) + stateid + u32(1) + u64(seq) + u64(seq + 1) + u32(4)
                           + u32(0) + u32(0))
            ops = [put, mid, u32(10), u32(9) + BITMAP4]
            res = [u32(22) + u32(0), mid_res, u32(10) + u32(0) + f.fh_x[fi],
                   u32(9) + u32(0) + f.fattr4[fi]]
        elif kind == "CLOSE":
            ops = [put, u32(4) + u32(seq & 0xFFFFFFFF) + stateid]
            # the stateid CLOSE returns is deprecated (RFC 7530 16.2.5); send the invalid one (RFC 8881)
            res = [u32(22) + u32(0), u32(4) + u32(0) + u32(0xFFFFFFFF) + bytes(12)]
        else:
            raise ValueError(kind)
        return (self.call(xid, 4, 1, cred, _flat(u32(0) + u32(0) + u32(len(ops)), ops)),
                self.reply(xid, _flat(u32(0) + u32(0) + u32(len(res)), res)))


def _flat(head: bytes, items: list):
    """head + items (bytes, or lists of parts) as bytes when nothing is large, else parts."""
    if all(isinstance(x, bytes) for x in items):
        return b"".join([head, *items])
    parts = [head]
    for x in items:
        if isinstance(x, bytes):
            parts.append(x)
        else:
            parts.extend(x)
    return parts


class Output:
    """The pcap file(s): with `split` set, OUT-000.pcap, OUT-001.pcap, … of about `split`
    packets each (a new file starts at a chunk boundary)."""

    HEADER = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1)  # ns pcap, Ethernet

    def __init__(self, path: Path, split: int | None):
        self.path, self.split, self.files, self.f, self.n = path, split, [], None, 0

    def __enter__(self):
        self._open()
        return self

    def __exit__(self, *exc):
        self.f.close()

    def _open(self):
        p = self.path
        if self.split:
            p = p.with_name(f"{p.name.removesuffix('.pcap')}-{len(self.files):03d}.pcap")
        self.files.append(p)
        self.f = open(p, "wb", buffering=8 << 20)
        self.f.write(self.HEADER)
        self.n = 0

    def write_packets(self, parts, n):
        if self.split and self.n >= self.split:
            self.f.close()
            self._open()
        self.f.writelines(parts)
        self.n += n


class Conn:
    __slots__ = ("idx", "version", "cred", "xid", "off", "isn", "t", "server_free", "seq")

    def __init__(self, idx, version, cred, xid, isn):
        self.idx, self.version, self.cred, self.xid, self.isn = idx, version, cred, xid, isn
        self.off = [0, 0]  # stream bytes sent: client, server
        self.t = 0
        self.server_free = 0
        self.seq = 0


def parse_latencies(spec: str | None) -> dict:
    lat = dict(DEFAULT_LATENCY_US)
    if not spec:
        return lat
    for item in spec.split(","):
        key, _, value = item.partition("=")
        key = key.strip().upper()
        if not value:
            raise SystemExit(f"nfsgen: --latency-us wants OP=MEAN, not {item!r}")
        versions = (3, 4)
        if key.startswith(("V3:", "V4:")):
            versions, key = (int(key[1]),), key[3:]
        hit = False
        for v in versions:
            if (v, key) in lat:
                lat[(v, key)] = float(value)
                hit = True
        if not hit:
            raise SystemExit(f"nfsgen: unknown operation {key!r} in --latency-us "
                             f"(v3: {', '.join(V3_MIX)}; v4: {', '.join(V4_MIX)})")
    return lat


class Generator:
    def __init__(self, args):
        self.a = args
        self.rng = np.random.default_rng(args.seed)
        self.t0 = int(args.start * 1e9)
        self.files = Files(self.rng, 64, 4096, self.t0)
        self.enc = Encoder(self.files, Payloads(self.rng), [k * 1024 for k in args.io_kib])
        self.lat_us = parse_latencies(args.latency_us)
        self.ncli, self.nsrv = args.clients, args.servers
        self.conns = []
        for i in range(args.clients):
            # v4 clients spread evenly among the v3 ones
            version = 4 if int((i + 1) * args.v4_share) > int(i * args.v4_share) else 3
            gi = i + args.client_offset
            machine = xdr_opaque(f"client{gi:03d}".encode())
            body = u32(0x5EED0000 + gi) + machine + u32(1000 + gi) + u32(1000) + u32(1) + u32(1000)
            cred = u32(1) + xdr_opaque(body) + u32(0) + u32(0)
            self.conns.append(Conn(i, version, cred, int(self.rng.integers(1, 1 << 31)),
                                   (int(self.rng.integers(0, 1 << 32)), int(self.rng.integers(0, 1 << 32)))))
        n = len(self.conns)
        # Per (connection, direction): addresses, ports and Ethernet header.
        self.src = np.zeros(2 * n, np.uint32)
        self.dst = np.zeros(2 * n, np.uint32)
        self.sport = np.zeros(2 * n, np.uint16)
        self.dport = np.zeros(2 * n, np.uint16)
        self.eth = np.zeros((2 * n, 14), np.uint8)
        self.isn = np.zeros(2 * n, np.int64)
        self.addrs = []
        for c in self.conns:
            i, gi = c.idx, c.idx + args.client_offset
            cip = f"198.18.{1 + gi // 250}.{1 + gi % 250}"
            sip = f"198.18.0.{1 + gi % self.nsrv}"
            cport = 1023 - gi if gi < 500 else 40000 + gi
            self.addrs.append((cip, cport, sip))
            cmac = bytes([2, 0, 0, 1, gi >> 8 & 255, gi & 255])
            smac = bytes([2, 0, 0, 0, 0, 1 + gi % self.nsrv])
            for d, (s, dd, sp, dp, ms, md) in enumerate([(cip, sip, cport, NFS_PORT, cmac, smac),
                                                          (sip, cip, NFS_PORT, cport, smac, cmac)]):
                k = 2 * i + d
                self.src[k], self.dst[k] = ip4(s), ip4(dd)
                self.sport[k], self.dport[k] = sp, dp
                self.eth[k] = np.frombuffer(md + ms + b"\x08\x00", np.uint8)
                self.isn[k] = c.isn[d]
        self.carry_end = np.zeros(2 * n, np.int64)  # stream bytes already written, per conn/dir
        self.carry_id = (self.rng.integers(0, 65536, 2 * n)).astype(np.int64)
        # per op: [count, sum_ns, min_ns, max_ns, list or None]
        self.truth = {}
        self.exact = args.transactions <= args.exact_max
        self.pending = []  # sends: (start_ns, conn, dir, kind, stream_off, blob)
        self.packets = 0
        self.rpc_messages = 0
        self.payload_bytes = 0
        self.first_ns = None
        self.last_ns = 0
        # Random draws in blocks.
        self._blk = 0
        self._pos = 1 << 30

    def _draws(self):
        if self._pos >= self._blk:
            b = 1 << 16
            rng = self.rng
            self._u = rng.random(b).tolist()
            self._e = rng.exponential(1.0, b).tolist()
            self._r = rng.integers(0, 1 << 30, b).tolist()
            self._files = np.minimum(rng.zipf(1.3, b), self.files.nfiles).tolist()
            self._blk, self._pos = b, 0
        i = self._pos
        self._pos += 1
        return self._u[i], self._e[i], self._r[i], self._files[i]

    def _record(self, key, lat):
        t = self.truth.get(key)
        if t is None:
            t = self.truth[key] = [0, 0, lat, lat, [] if self.exact else None]
        t[0] += 1
        t[1] += lat
        if lat < t[2]:
            t[2] = lat
        if lat > t[3]:
            t[3] = lat
        if t[4] is not None:
            t[4].append(lat)

    def _send(self, start, c, d, kind, parts, length):
        off = c.off[d]
        if kind == DATA:
            c.off[d] += length
        self.pending.append((start, c.idx, d, kind, off, parts, length))

    def _acks(self, c, d, start, nseg):
        """The receiver of a multi-segment send (direction d) acknowledges every second segment."""
        for k in range(1, nseg, 2):
            self._send(start + k * SEG_GAP_NS + ACK_DELAY_NS, c, 1 - d, DATA, NOTHING, 0)

    def open(self, c, t):
        self._send(t, c, 0, SYN, MSS_OPTION, 4)
        self._send(t + 40_000, c, 1, SYNACK, MSS_OPTION, 4)
        self._send(t + 80_000, c, 0, DATA, NOTHING, 0)
        c.t = t + 100_000 + int(self._draws()[1] * self.a.think_us * 1000)

    def close(self, c):
        t = c.t
        self._send(t, c, 0, FIN_C, NOTHING, 0)
        self._send(t + 40_000, c, 1, FIN_S, NOTHING, 0)
        self._send(t + 80_000, c, 0, LAST_ACK, NOTHING, 0)

    def round(self, c, remaining):
        u, e, r, _ = self._draws()
        batch = 1 if u < 0.5 else 2 + int(u * 1000) % 3
        batch = min(batch, remaining)
        mix = self.v4_ops if c.version == 4 else self.v3_ops
        cum = self.v4_cum if c.version == 4 else self.v3_cum
        calls, replies, keys = [], [], []
        for _ in range(batch):
            u, e, r, fi = self._draws()
            op = mix[next(j for j, x in enumerate(cum) if u <= x)]
            c.xid = (c.xid + 1) & 0xFFFFFFFF
            c.seq += 1
            fi = self.files.ndirs + fi - 1
            if c.version == 3:
                call, reply = self.enc.v3(op, c.xid, c.cred, fi, r, c.seq)
            else:
                call, reply = self.enc.v4(op, c.xid, c.cred, fi, r, c.seq)
            mean = self.lat_us[(c.version, op)] * 1000
            lat = mean if self.a.latency_dist == "fixed" else e * mean
            calls.append(call)
            replies.append(reply)
            keys.append((op, lat))
        self.rpc_messages += 2 * batch
        t = c.t
        blob = [p for parts, _ in calls for p in parts]
        blen = sum(n for _, n in calls)
        nseg = -(-blen // MSS)
        self._send(t, c, 0, DATA, blob, blen)
        self._acks(c, 0, t, nseg)
        # Completion time of each call: its last byte's segment.
        end = 0
        ready = []
        for call, reply, (op, lat) in zip(calls, replies, keys, strict=True):
            end += call[1]
            done = t + ((end - 1) // MSS) * SEG_GAP_NS
            rseg = -(-reply[1] // MSS)
            lat = max(int(lat), MIN_TURN_NS + rseg * SEG_GAP_NS)
            ready.append((done + lat, done, rseg, reply, op))
        ready.sort(key=lambda x: x[0])
        free = t + (nseg - 1) * SEG_GAP_NS
        for target, done, rseg, reply, op in ready:
            start = max(target - (rseg - 1) * SEG_GAP_NS, free + SEG_GAP_NS,
                        done + MIN_TURN_NS)
            finish = start + (rseg - 1) * SEG_GAP_NS
            self._send(start, c, 1, DATA, reply[0], reply[1])
            self._acks(c, 1, start, rseg)
            free = finish
            lat = finish - done
            if c.version == 3:
                self._record((3, op), lat)
            else:
                self._record((4, "COMPOUND"), lat)
                for o in V4_OPS[op]:
                    self._record((4, o), lat)
        c.t = free + ACK_DELAY_NS + 5000 + int(self._draws()[1] * self.a.think_us * 1000)
        return batch

    def run(self, out: Path):
        a = self.a
        self.v3_ops, w = list(V3_MIX), np.array(list(V3_MIX.values()), float)
        self.v3_cum = (np.cumsum(w) / w.sum()).tolist()
        self.v3_cum[-1] = 1.0
        self.v4_ops, w = list(V4_MIX), np.array(list(V4_MIX.values()), float)
        self.v4_cum = (np.cumsum(w) / w.sum()).tolist()
        self.v4_cum[-1] = 1.0
        heap = []
        for c in self.conns:
            self.open(c, self.t0 + int(self._draws()[0] * 1e6))
            heap.append((c.t, c.idx))
        heapq.heapify(heap)
        done = 0
        with Output(out, a.split_packets) as f:
            self.output = f
            while done < a.transactions:
                if len(self.pending) >= a.chunk_sends:
                    self.flush(f, heap[0][0])
                t, i = heapq.heappop(heap)
                c = self.conns[i]
                done += self.round(c, a.transactions - done)
                heapq.heappush(heap, (c.t, i))
            for c in self.conns:
                self.close(c)
            self.flush(f, None)

    def flush(self, f, horizon):
        """Writes every pending send that starts before a cut at or before `horizon` (no send
        of any connection straddles the cut); keeps the rest."""
        p = self.pending
        if not p:
            return
        start = np.fromiter((s[0] for s in p), np.int64, len(p))
        blen = np.fromiter((s[6] for s in p), np.int64, len(p))
        kind = np.fromiter((s[3] for s in p), np.int64, len(p))
        nseg = np.where((blen > 0) & (kind == DATA), (blen + MSS - 1) // MSS, 1)
        end = start + (nseg - 1) * SEG_GAP_NS
        order = np.argsort(start, kind="stable")
        if horizon is None:
            take = order
            keep = []
        else:
            s_sorted = start[order]
            runmax = np.maximum.accumulate(end[order])
            ok = np.nonzero((s_sorted[1:] > runmax[:-1]) & (s_sorted[1:] <= horizon))[0]
            if runmax[-1] < horizon:
                cut = len(order)
            elif len(ok):
                cut = ok[-1] + 1
            else:
                return
            take, keep = order[:cut], order[cut:]
        self.pending = [p[i] for i in keep.tolist()] if len(keep) else []
        self.write(f, [p[i] for i in take.tolist()], start[take], kind[take], blen[take], nseg[take])

    def write(self, f, sends, start, kind, blen, nseg):
        n_send = len(sends)
        conn = np.fromiter((s[1] for s in sends), np.int64, n_send)
        d = np.fromiter((s[2] for s in sends), np.int64, n_send)
        soff = np.fromiter((s[4] for s in sends), np.int64, n_send)
        arena = b"".join([x for s in sends for x in s[5]])
        boff = np.zeros(n_send, np.int64)
        np.cumsum(blen[:-1], out=boff[1:])
        # Expand sends into packets.
        n = int(nseg.sum())
        sid = np.repeat(np.arange(n_send), nseg)
        first = np.zeros(n_send, np.int64)
        np.cumsum(nseg[:-1], out=first[1:])
        k = np.arange(n, dtype=np.int64) - first[sid]
        t = start[sid] + k * SEG_GAP_NS
        knd = kind[sid]
        stream = knd == DATA
        plen = np.where(stream, np.minimum(MSS, blen[sid] - k * MSS), blen[sid])
        poff = soff[sid] + k * MSS  # stream offset of the first payload byte
        aoff = boff[sid] + k * MSS  # offset in the arena
        cd = 2 * conn[sid] + d[sid]
        last_seg = k == nseg[sid] - 1
        # Sequence and acknowledgement numbers from the streams, per connection in time order.
        oc = np.lexsort((t, conn[sid]))
        cs = conn[sid][oc]
        big = np.int64(1) << 45
        ends = {}
        for dd in (0, 1):
            v = np.where((d[sid][oc] == dd) & stream[oc] & (plen[oc] > 0), poff[oc] + plen[oc], -1)
            run = np.maximum.accumulate(v + cs * big) - cs * big
            ends[dd] = np.maximum(run, self.carry_end[2 * cs + dd])
        pd = d[sid][oc]
        own_end = np.where(pd == 0, ends[0], ends[1])
        peer_end = np.where(pd == 0, ends[1], ends[0])
        isn_own = self.isn[2 * cs + pd]
        isn_peer = self.isn[2 * cs + 1 - pd]
        ko = knd[oc]
        seq = np.where(stream[oc] & (plen[oc] > 0), isn_own + 1 + poff[oc], isn_own + 1 + own_end)
        ack = isn_peer + 1 + peer_end
        seq = np.where((ko == SYN) | (ko == SYNACK), isn_own, seq)
        seq = np.where(ko == LAST_ACK, seq + 1, seq)
        ack = np.where((ko == FIN_S) | (ko == LAST_ACK), ack + 1, ack)
        ack = np.where(ko == SYN, 0, ack)
        for dd in (0, 1):
            np.maximum.at(self.carry_end, 2 * cs + dd, ends[dd])
        seq_t = np.empty(n, np.int64)
        ack_t = np.empty(n, np.int64)
        seq_t[oc] = seq
        ack_t[oc] = ack
        # IP ids count per connection and direction.
        og = np.lexsort((t, cd))
        g = cd[og]
        newg = np.ones(n, bool)
        newg[1:] = g[1:] != g[:-1]
        gstart = np.maximum.accumulate(np.where(newg, np.arange(n), 0))
        rank = np.arange(n) - gstart
        ipid = np.empty(n, np.int64)
        ipid[og] = (self.carry_id[g] + rank) & 0xFFFF
        np.add.at(self.carry_id, g, 1)
        # Flags.
        flags = np.full(n, FLAG_ACK, np.int64)
        flags = np.where(stream & (plen > 0) & last_seg, FLAG_ACK | FLAG_PSH, flags)
        flags = np.where(knd == SYN, FLAG_SYN, flags)
        flags = np.where(knd == SYNACK, FLAG_SYN | FLAG_ACK, flags)
        flags = np.where((knd == FIN_C) | (knd == FIN_S), FLAG_FIN | FLAG_ACK, flags)
        doff = np.where((knd == SYN) | (knd == SYNACK), 6, 5)
        # Into capture order (time; a stable sort keeps each connection's order).
        o = np.argsort(t, kind="stable")
        t, cd, plen, aoff, seq_t, ack_t = t[o], cd[o], plen[o], aoff[o], seq_t[o], ack_t[o]
        ipid, flags, doff = ipid[o], flags[o], doff[o]
        h = np.zeros(n, HDR_DT)
        h["ts_sec"] = t // 1_000_000_000
        h["ts_frac"] = t % 1_000_000_000
        frame = FRAME_OVERHEAD + plen
        h["incl"] = frame
        h["orig"] = frame
        h["eth"] = self.eth[cd]
        h["vhl"] = 0x45
        h["ip_len"] = frame - 14
        h["ip_id"] = ipid
        h["frag"] = 0x4000
        h["ttl"] = 64
        h["proto"] = 6
        h["src"] = self.src[cd]
        h["dst"] = self.dst[cd]
        h["sport"] = self.sport[cd]
        h["dport"] = self.dport[cd]
        h["seq"] = seq_t & 0xFFFFFFFF
        h["ack"] = ack_t & 0xFFFFFFFF
        h["off_flags"] = (doff << 12) | flags
        h["win"] = 0xFFFF
        # Checksums: one's-complement sums of 16-bit words (every offset and length here is
        # even). The payload sums are taken in the arena's order, where the packets with data
        # tile the arena, over little-endian words; a one's-complement sum is byte-order
        # independent up to a final byte swap (RFC 1071).
        pay = np.zeros(n, np.int64)
        has = plen > 0
        if has.any():
            idx = np.nonzero(has)[0]
            idx = idx[np.argsort(aoff[idx], kind="stable")]
            # every payload offset and length is a multiple of 4: sum 32-bit words, then fold
            words = np.frombuffer(arena, "<u4")
            s = _fold_sum(np.add.reduceat(words, aoff[idx] // 4, dtype=np.uint64).astype(np.int64))
            pay[idx] = ((s & 0xFF) << 8) | (s >> 8)
        w = h.view(np.uint8).reshape(n, HDR).view(">u2")
        ip_sum = w[:, 15:25].sum(axis=1, dtype=np.int64)
        tcp_len = frame - 34
        tcp_sum = (w[:, 21:25].sum(axis=1, dtype=np.int64) + 6 + tcp_len
                   + w[:, 25:35].sum(axis=1, dtype=np.int64) + pay)
        h["ip_sum"] = (~_fold_sum(ip_sum)) & 0xFFFF
        h["tcp_sum"] = (~_fold_sum(tcp_sum)) & 0xFFFF
        # Records: header, then the payload slice of the arena, through a large write buffer.
        hv = memoryview(h.view(np.uint8).reshape(-1))
        av = memoryview(arena)
        parts = []
        app = parts.append
        pos = 0
        for a_, l_ in zip(aoff.tolist(), plen.tolist(), strict=True):
            app(hv[pos:pos + HDR])
            pos += HDR
            if l_:
                app(av[a_:a_ + l_])
        f.write_packets(parts, n)
        self.packets += n
        self.payload_bytes += int(plen.sum())
        if self.first_ns is None:
            self.first_ns = int(t[0])
        self.last_ns = int(t[-1])

    def truth_json(self, out: Path, seconds: float) -> dict:
        ops = {}
        for (v, op), (cnt, tot, lo, hi, lst) in sorted(self.truth.items()):
            e = {"calls": cnt, "mean_s": tot / cnt / 1e9, "min_s": lo / 1e9, "max_s": hi / 1e9}
            if lst is not None:
                e["latencies_ns"] = lst
            ops.setdefault(f"v{v}", {})[op] = e
        return {
            "generator": "bench/nfsgen.py", "command": " ".join(sys.argv),
            "files": [str(p) for p in self.output.files], "transactions": self.a.transactions, "seed": self.a.seed,
            "clients": [{"addr": a, "port": p, "server": s, "nfs_version": c.version}
                        for (a, p, s), c in zip(self.addrs, self.conns, strict=True)],
            "packets": self.packets, "rpc_messages": self.rpc_messages,
            "payload_bytes": self.payload_bytes,
            "first_time_ns": self.first_ns, "last_time_ns": self.last_ns,
            "latency": "from the call's last segment to the reply's last segment",
            "latency_dist": self.a.latency_dist,
            "ops": ops, "generation_s": seconds,
            "injected_mean_s": {f"v{v}:{op}": us / 1e6 for (v, op), us in sorted(self.lat_us.items())},
        }


def _fold_sum(s):
    """Folds sums of 16-bit words into 16 bits (end-around carry)."""
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--transactions", type=int, required=True, help="NFS calls (each answered)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--client-offset", type=int, default=0,
                    help="number the clients from here (addresses, ports), so that several "
                    "generators with different seeds make disjoint traffic to merge or convert together")
    ap.add_argument("--split-packets", type=int, default=None,
                    help="write OUT-000.pcap, OUT-001.pcap, ... of about this many packets each")
    ap.add_argument("--servers", type=int, choices=[1, 2], default=2)
    ap.add_argument("--latency-us", help="mean server latency per operation, e.g. "
                    "'READ=800,v4:OPEN=3000' (OP alone sets v3 and v4)")
    ap.add_argument("--latency-dist", choices=["exp", "fixed"], default="exp")
    ap.add_argument("--io-kib", type=lambda v: [int(x) for x in v.split(",")], default=[4, 8, 32, 64],
                    help="READ/WRITE sizes in KiB, chosen uniformly (default 4,8,32,64; at most 512)")
    ap.add_argument("--think-us", type=float, default=500.0, help="mean client think time per round")
    ap.add_argument("--v4-share", type=float, default=0.5, help="fraction of clients speaking NFSv4.0")
    ap.add_argument("--start", type=float, default=1795420800.0, help="epoch seconds of the first packet")
    ap.add_argument("--exact-max", type=int, default=10000,
                    help="record every latency in the truth file up to this many transactions")
    ap.add_argument("--chunk-sends", type=int, default=20_000, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not all(0 < k <= 512 for k in a.io_kib):
        raise SystemExit("nfsgen: --io-kib sizes are 1..512")
    if a.clients < 1 or a.clients + a.client_offset > 60000 or a.transactions < 1:
        raise SystemExit("nfsgen: need 1..60000 clients (with the offset) and at least one transaction")
    t = time.monotonic()
    gc.disable()  # nothing here is cyclic; the collector only slows the inner loops
    g = Generator(a)
    g.run(a.out)
    seconds = time.monotonic() - t
    truth = g.truth_json(a.out, seconds)
    tp = a.out.with_name(a.out.name.removesuffix(".pcap") + ".truth.json")
    tp.write_text(json.dumps(truth, indent=1) + "\n")
    size = sum(os.path.getsize(p) for p in g.output.files)
    names = str(a.out) if len(g.output.files) == 1 else f"{len(g.output.files)} files {g.output.files[0].name}…"
    print(f"nfsgen: {names}: {g.packets} packets, {a.transactions} transactions, "
          f"{(g.last_ns - g.first_ns) / 1e9:.1f} s of traffic, {size / 1e6:.0f} MB "
          f"in {seconds:.1f} s ({g.packets / seconds / 1e6:.2f} M packets/s); truth in {tp}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
