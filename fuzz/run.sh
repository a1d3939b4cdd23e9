#!/usr/bin/env bash
# Runs every fuzz target for N seconds (default 60) with seeds from the shared corpus and
# from files the recorder writes. Needs a nightly toolchain and cargo-fuzz.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
corpus=../../shared/corpus
mkdir -p corpus/trace_reader corpus/container corpus/dissect corpus/tcp_rpc corpus/name_cipher corpus/rpc_message corpus/ipfix_decode corpus/collect_intake
if [[ -d $corpus ]]; then
  find "$corpus" \( -name '*.pcap' -o -name '*.pcapng' \) -size -256k -exec cp -n {} corpus/trace_reader/ \; 2>/dev/null || true
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
for target in trace_reader container dissect tcp_rpc name_cipher rpc_message ipfix_decode collect_intake; do
  echo "fuzz: $target for $seconds s" >&2
  cargo +nightly fuzz run "$target" "corpus/$target" -- -max_total_time="$seconds" -rss_limit_mb=2048 2>&1 | tail -3
done
