#!/usr/bin/env bash
# Runs every fuzz target for N seconds (default 60) with seeds from the shared corpus and
# from files the recorder writes. Needs a nightly toolchain and cargo-fuzz.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
corpus=../../shared/corpus
mkdir -p corpus/trace_reader corpus/trace_tail corpus/container corpus/trailer corpus/dissect corpus/wire_views corpus/tcp_rpc corpus/name_cipher corpus/rpc_message corpus/ipfix_decode corpus/collect_intake corpus/ip_fragments corpus/flow_index corpus/sidecar corpus/request_head
if [[ -d $corpus ]]; then
  find "$corpus" \( -name '*.pcap' -o -name '*.pcapng' \) -size -256k -exec cp -n {} corpus/trace_reader/ \; 2>/dev/null || true
  # trace_tail reads a 4-byte offset first, then the capture.
  for f in corpus/trace_reader/*; do
    [[ -e corpus/trace_tail/$(basename "$f") ]] || { printf '\x40\x00\x00\x00'; cat "$f"; } >"corpus/trace_tail/$(basename "$f")"
  done
fi
if [[ -x ../target/release/tapdeck && -z "$(ls corpus/container)" ]]; then
  tmp=$(mktemp -d)
  for codec in "zstd:3" lz4 "zstd:1@0.0001,lz4"; do
    ../target/release/tapdeck record --synthetic mix --count 800 --chunk-size 512KiB --staging 4MiB \
      --codec "$codec" --store "$tmp/s" -q --log error >/dev/null 2>&1 || true
  done
  find "$tmp/s" -name '*.pcap*' -size -2M -exec cp {} corpus/container/ \;
  rm -rf "$tmp"
fi
if [[ -z "$(ls corpus/collect_intake)" ]]; then
  # Seeds: templates, reports, a gap, a replay, an unknown template, a cut message, a restart,
  # from three exporters (see the target for the framing).
  python3 - <<'PY' || true
import struct, sys
sys.path.insert(0, "../tests/e2e")
from test_export_collect import ipfix_message
def framed(msg, peer):
    for k in range(16):
        n = len(msg) + 4096 * k
        if n < 65536 and (n >> 8) % 3 == peer:
            return struct.pack(">H", n) + msg
    raise ValueError(len(msg))
good = [(1_795_400_000_123_456_789 + i, bytes([i]) * (40 + 30 * i)) for i in range(4)]
m0 = ipfix_message(0, templates=True, reports=good)
m1 = ipfix_message(4, templates=False, reports=good[:2])
m2 = ipfix_message(9, templates=False, reports=good[:1], domain=2)
bad = ipfix_message(0, templates=False, reports=good[:1], template_id=300)
seeds = {"one": framed(m0, 0), "restart": framed(m0, 0) + framed(m1, 0) + framed(m0, 1),
         "mixed": b"".join([framed(m0, 0), framed(m1, 0), framed(m1, 0), framed(m2, 1),
                            framed(m0, 2), framed(bad, 0), framed(m1[:-5], 0)])}
for name, data in seeds.items():
    open(f"corpus/collect_intake/seed-{name}", "wb").write(data)
PY
fi
if [[ -z "$(ls corpus/flow_index)" ]]; then
  # Seeds: a filter with an index body to be sealed (mode 2: packets 3, IPv4 flag, two IPv4
  # addresses, TCP port 80, VLAN 100), and one Ethernet/IPv4/TCP frame for the builder.
  python3 - <<'PY' || true
f = b"host 10.0.0.1 and (tcp port 80 or vlan 100)"
body = b"TDFI\x01\x03\x01" + bytes([4, 0x81, 0x80, 0x80, 0x50, 0, 0, 0, 0, 2, 80, 0, 0, 2, 100])
open("corpus/flow_index/seed-decode", "wb").write(bytes([2, len(f)]) + f + body)
eth = bytes(12) + b"\x08\x00" + bytes([0x45, 0, 0, 40, 0, 1, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2])
eth += bytes([0x9c, 0x40, 0, 80]) + bytes(8) + bytes([0x50]) + bytes(7)
open("corpus/flow_index/seed-build", "wb").write(bytes([1, 0, len(eth)]) + eth)
PY
fi
if [[ -x ../target/release/tapdeck && -z "$(ls corpus/sidecar)" ]]; then
  # Seeds: the sidecars `tapdeck index` writes for a few small traces, with the switch byte
  # 0 (their own checksum kept).
  tmp=$(mktemp -d)
  for f in $(ls corpus/trace_reader/* 2>/dev/null | head -20); do
    cp "$f" "$tmp/t.pcap"
    ../target/release/tapdeck index "$tmp/t.pcap" >/dev/null 2>&1 &&
      { printf '\x00'; cat "$tmp/t.pcap.tdx"; } >"corpus/sidecar/$(basename "$f").tdx"
    rm -f "$tmp/t.pcap" "$tmp/t.pcap.tdx"
  done
  rm -rf "$tmp"
fi
for target in trace_reader trace_tail container trailer dissect wire_views tcp_rpc name_cipher rpc_message ipfix_decode collect_intake ip_fragments flow_index sidecar request_head; do
  echo "fuzz: $target for $seconds s" >&2
  cargo +nightly fuzz run "$target" "corpus/$target" -- -max_total_time="$seconds" -rss_limit_mb=2048 2>&1 | tail -3
done
