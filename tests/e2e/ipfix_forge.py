"""Forged IPFIX for the hostile-network tests, written independently of tapdeck (from RFC 7011
and docs/ipfix.md), sent through a raw socket with any source address and port: what anyone
on a network without source filtering can do.

    python3 ipfix_forge.py MODE --src EXPORTER --dst COLLECTOR [--port 4739] [--count N] ...

Modes:
  headers     16-byte message headers (no set) with far-apart sequence numbers
  restart     "restart" messages: an exporter statistics record with a later start time
  templates   template sets of many template ids, each message from a new source port
  domains     one header-only message per new observation domain
  interfaces  packet reports on a new interface id in every message (templates included)
  names       interface options records (template 259) naming new interface ids
  data        valid data: templates and --per packet reports of --size random octets each,
              sequence numbers in line (a flood from an allowed exporter of its own)
Prints the number of datagrams sent.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import time

NTP_OFFSET = 2_208_988_800


def header(seq: int, domain: int, body: bytes) -> bytes:
    return struct.pack(">HHIII", 10, 16 + len(body), int(time.time()), seq & 0xFFFFFFFF,
                       domain & 0xFFFFFFFF) + body


def set_(set_id: int, records: bytes) -> bytes:
    return struct.pack(">HH", set_id, 4 + len(records)) + records


def packet_template(tid: int = 256) -> bytes:
    fields = [(325, 8), (10, 4), (302, 4), (312, 2), (315, 65535)]
    return struct.pack(">HH", tid, len(fields)) + b"".join(struct.pack(">HH", *f) for f in fields)


def stats_template(tid: int = 258) -> bytes:
    fields = [(144, 4), (302, 4), (160, 8), (41, 8), (42, 8), (164, 8), (167, 8), (318, 8),
              (319, 8)]
    return struct.pack(">HHH", tid, len(fields), 2) + b"".join(
        struct.pack(">HH", *f) for f in fields)


def interface_template(tid: int = 259) -> bytes:
    fields = [(10, 4), (82, 65535), (83, 65535), (408, 2)]
    return struct.pack(">HHH", tid, len(fields), 1) + b"".join(
        struct.pack(">HH", *f) for f in fields)


def report(ts_ns: int, iface: int, data: bytes) -> bytes:
    sec, ns = divmod(ts_ns, 1_000_000_000)
    frac = -(-(ns << 32) // 1_000_000_000)
    return struct.pack(">IIIIH", sec + NTP_OFFSET, frac, iface, 1, len(data)) + varlen(data)


def varlen(b: bytes) -> bytes:
    """RFC 7011 §7: one length octet below 255, else 255 and two length octets."""
    if len(b) < 255:
        return bytes([len(b)]) + b
    return b"\xff" + struct.pack(">H", len(b)) + b


def udp_ip(src: str, sport: int, dst: str, dport: int, payload: bytes) -> bytes:
    udp = struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload  # checksum 0: none
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    return ip + udp  # the kernel fills in the IP checksum with IP_HDRINCL


def messages(mode: str, count: int, domain: int, start_ms: int, per: int = 8, size: int = 1000):
    """(source port, message) pairs."""
    now_ns = time.time_ns()
    if mode == "data":
        # Random payloads: a store compresses them no better than the disk takes them.
        for i in range(count):
            blob = os.urandom(per * size)
            recs = b"".join(report(now_ns + i * per + k, 0, blob[k * size:(k + 1) * size])
                            for k in range(per))
            yield 45000, header(i * per, domain, set_(2, packet_template()) + set_(256, recs))
        return
    if mode == "headers":
        for i in range(count):
            yield 40000 + i % 7, header(0x4000_0000 + i * 0x0100_0003, domain, b"")
    elif mode == "restart":
        body = set_(3, stats_template())
        for i in range(count):
            rec = struct.pack(">II", 4242, 1) + struct.pack(">7Q", start_ms + 1000 * (i + 1), 0, 0,
                                                            0, 0, 0, 0)
            yield 41000 + i, header(i * 3, domain, body + set_(258, rec))
    elif mode == "templates":
        per = 60  # 60 templates of 5 fields: 1444 octets
        for i in range(count):
            recs = b"".join(packet_template(256 + (i * per + k) % 65280) for k in range(per))
            yield 20000 + i % 40000, header(0, domain, set_(2, recs))
    elif mode == "domains":
        for i in range(count):
            yield 42000, header(0, 1000 + i, b"")
    elif mode == "interfaces":
        for i in range(count):
            body = set_(2, packet_template()) + set_(256, report(now_ns + i, 1000 + i, b"\x00" * 60))
            yield 43000, header(i * 1, domain, body)
    elif mode == "names":
        per = 40
        for i in range(count):
            recs = b"".join(
                struct.pack(">I", 1000 + i * per + k) + varlen(b"evil%d" % (i * per + k))
                + varlen(b"x" * 16) + struct.pack(">H", 1) for k in range(per))
            yield 44000, header(0, domain, set_(3, interface_template()) + set_(259, recs))
    else:
        raise SystemExit(f"unknown mode {mode}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--port", type=int, default=4739)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--domain", type=int, default=1)
    ap.add_argument("--start-ms", type=int, default=int(time.time() * 1000))
    ap.add_argument("--per", type=int, default=8, help="data: packet reports per message")
    ap.add_argument("--size", type=int, default=1000, help="data: octets per report")
    ap.add_argument("--pps", type=float, default=0, help="rate limit (0: as fast as possible)")
    a = ap.parse_args()
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    sent = 0
    t0 = time.monotonic()
    for sport, m in messages(a.mode, a.count, a.domain, a.start_ms, a.per, a.size):
        while True:
            try:
                s.sendto(udp_ip(a.src, sport, a.dst, a.port, m), (a.dst, 0))
                break
            except BlockingIOError:
                time.sleep(0.001)
            except OSError as e:  # ENOBUFS under a flood: wait and send again
                if e.errno != 105:
                    raise
                time.sleep(0.001)
        sent += 1
        if a.pps:
            ahead = sent / a.pps - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
    print(sent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
