#!/usr/bin/env python3
"""Bounded test traffic for the demo and benchmarks: UDP datagrams of a realistic size mix
(payloads half random, half zeros, each distinct) and one TCP transfer, sent only to an
address of the benchmarking range 198.18.0.0/15."""

import argparse
import ipaddress
import os
import random
import socket
import time

BENCH_NET = ipaddress.ip_network("198.18.0.0/15")


def sizes(rng: random.Random):
    """UDP payload sizes whose frames peak near 64, 576 and 1500 bytes."""
    while True:
        r = rng.random()
        if r < 0.5:
            yield rng.randint(8, 22)
        elif r < 0.65:
            yield 576 - 42
        elif r < 0.7:
            yield rng.randint(23, 1377)
        else:
            yield rng.randint(1378, 1458)


def payload(seq: int, n: int) -> bytes:
    head = seq.to_bytes(8, "big")[: min(8, n)]
    half = max(0, n // 2 - len(head))
    return head + os.urandom(half) + bytes(n - len(head) - half)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dest", help="destination address inside 198.18.0.0/15")
    ap.add_argument("--count", type=int, default=20000, help="UDP datagrams to send")
    ap.add_argument("--rate", type=float, default=5000, help="datagrams per second")
    ap.add_argument("--tcp-bytes", type=int, default=2_000_000, help="bytes of one TCP transfer to port 5001 (0: none)")
    args = ap.parse_args()
    if ipaddress.ip_address(args.dest) not in BENCH_NET:
        raise SystemExit(f"traffic.py: {args.dest} is outside 198.18.0.0/15; refusing to send")
    rng = random.Random(1)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    start = time.monotonic()
    for seq, n in zip(range(args.count), sizes(rng)):
        due = start + seq / args.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        udp.sendto(payload(seq, n), (args.dest, 9 + seq % 8))
    if args.tcp_bytes:
        with socket.create_connection((args.dest, 5001), timeout=10) as tcp:
            sent = 0
            while sent < args.tcp_bytes:
                chunk = payload(sent, min(65536, args.tcp_bytes - sent))
                tcp.sendall(chunk)
                sent += len(chunk)
    print(f"traffic.py: sent {args.count} UDP datagrams and {args.tcp_bytes} TCP bytes to {args.dest}")


if __name__ == "__main__":
    main()
