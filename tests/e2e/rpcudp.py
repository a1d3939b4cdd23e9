"""A small NFSv3-over-UDP peer for the fragment tests: well-formed ONC RPC calls and replies
whose datagrams (8–32 KB WRITE calls and READ replies) the kernel fragments on a veth.

    python3 rpcudp.py server ADDR PORT SECONDS       # answers NULL, READ and WRITE
    python3 rpcudp.py client ADDR PORT N SEED LOG    # N calls, one at a time; LOG: JSON lines

The client logs each message it sent or received: xid, direction, procedure, message length
(the UDP payload) and data length, the ground truth the converted rows are checked against.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import sys
import time

NFS, V3 = 100003, 3
NULL, READ, WRITE = 0, 6, 7
FH = bytes(range(32))


def call(xid: int, proc: int, args: bytes) -> bytes:
    cred = struct.pack(">II", 0, len(b"frag")) + b"frag" + struct.pack(">III", 0, 0, 0)
    head = struct.pack(">IIIIII", xid, 0, 2, NFS, V3, proc)
    return head + struct.pack(">II", 1, len(cred)) + cred + struct.pack(">II", 0, 0) + args


def reply(xid: int, body: bytes) -> bytes:
    return struct.pack(">IIIIII", xid, 1, 0, 0, 0, 0) + body


def opaque(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b + bytes(-len(b) % 4)


def serve(addr: str, port: int, seconds: float) -> None:
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.bind((addr, port))
    s.settimeout(0.5)
    end = time.time() + seconds
    while time.time() < end:
        try:
            m, peer = s.recvfrom(65535)
        except TimeoutError:
            continue
        xid, _, _, _, _, proc = struct.unpack_from(">IIIIII", m)
        if proc == NULL:
            body = b""
        elif proc == READ:
            # fh (len 32) after the 8-word header with a 24-byte cred and an empty verifier.
            count = struct.unpack_from(">I", m, 40 + 24 + 4 + 32 + 8)[0]
            data = random.Random(xid).randbytes(count)
            body = struct.pack(">III", 0, 0, count) + struct.pack(">I", 0) + opaque(data)
        elif proc == WRITE:
            count = struct.unpack_from(">I", m, 40 + 24 + 4 + 32 + 8)[0]
            body = struct.pack(">IIIII", 0, 0, 0, count, 2) + bytes(8)
        else:
            continue
        s.sendto(reply(xid, body), peer)


def client(addr: str, port: int, n: int, seed: int, log: str) -> None:
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.connect((addr, port))
    s.settimeout(2)
    rng = random.Random(seed)
    with open(log, "a") as out:
        for i in range(n):
            xid = (seed << 16) + i + 1
            proc = (NULL, READ, WRITE)[i % 3]
            size = rng.randrange(8192, 32769)
            fh = opaque(FH)
            if proc == NULL:
                args, size = b"", 0
            elif proc == READ:
                args = fh + struct.pack(">QI", i * 65536, size)
            else:
                data = rng.randbytes(size // 2) + bytes(size - size // 2)
                args = fh + struct.pack(">QII", i * 65536, size, 2) + opaque(data)
            m = call(xid, proc, args)
            s.send(m)
            rec = {"xid": xid, "procedure": proc, "direction": "call", "len": len(m),
                   "data_len": size if proc == WRITE else None}
            out.write(json.dumps(rec) + "\n")
            try:
                r = s.recv(65535)
            except TimeoutError:
                continue
            rec = {"xid": xid, "procedure": proc, "direction": "reply", "len": len(r),
                   "data_len": size if proc == READ else None}
            out.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
