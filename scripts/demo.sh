#!/usr/bin/env bash
# The main job, end to end on an embedded default: build, make a test network in a
# namespace, generate traffic on it (including a real NFS session), record it live, and run
# every later stage (verify, extract, info, convert to a Parquet dataset, analyze into a
# report); then print where the results are.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

out=${TAPDECK_DEMO_OUT:-$PWD/out/demo}
bin=$PWD/target/release/tapdeck
ns=tapdeck-demo
rm -rf "$out" && mkdir -p "$out"

cleanup() {
  [[ -n "${capture_pid:-}" ]] && kill "$capture_pid" 2>/dev/null || true
  [[ -n "${record_pid:-}" ]] && kill "$record_pid" 2>/dev/null || true
  [[ -n "${sink_pid:-}" ]] && kill "$sink_pid" 2>/dev/null || true
  ip link del td-demo0 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
cleanup

echo "== test network: veth td-demo0 (198.18.0.1) <-> namespace $ns (198.18.0.2)"
ip netns add "$ns"
ip link add td-demo0 type veth peer name td-demo1
ip link set td-demo1 netns "$ns"
ip addr add 198.18.0.1/24 dev td-demo0
ip link set td-demo0 up
ip -n "$ns" addr add 198.18.0.2/24 dev td-demo1
ip -n "$ns" link set td-demo1 up
ip -n "$ns" link set lo up
# Segmentation offloads merge packets the wire never carried; capture sees real frames only.
ethtool -K td-demo0 gro off gso off tso off >/dev/null 2>&1 || true

echo "== NFS: a real session (nfs-ganesha and libnfs clients in namespaces of their own), captured"
python3 tests/nfs/make_capture.py "$out/nfs-session.pcap" --workload mixed --no-counts >"$out/nfs-session.log" 2>&1 \
  || { tail -5 "$out/nfs-session.log"; exit 1; }
echo "   $(capinfos -c -M "$out/nfs-session.pcap" | awk '/Number of packets/ {print $NF}') packets of NFSv3/v4, MOUNT and portmap traffic"

echo "== service: tapdeck serve records td-demo0 live (the same pipeline as record -i), from a config file"
listen=127.0.0.1:19780
cat >"$out/tapdeck.toml" <<CONF
# every key: deploy/tapdeck.toml
interface = ["td-demo0"]
store = "$out/store"
rotate-interval = 60
staging = "256MiB"
listen = "$listen"
CONF
"$bin" serve --config "$out/tapdeck.toml" 2>"$out/serve.log" &
record_pid=$!
tcpdump -i td-demo0 -s 0 -w "$out/link.pcap" -U -q 2>/dev/null &
capture_pid=$!
# Ready when /healthz says so (recording, capture progressing, store writable).
for _ in $(seq 100); do
  curl -sf "http://$listen/healthz" >/dev/null && break
  sleep 0.1
done
curl -sf "http://$listen/healthz" >/dev/null || { cat "$out/serve.log"; exit 1; }
echo "   http://$listen/healthz: $(curl -s "http://$listen/healthz")"

echo "== traffic: UDP size mix + one TCP transfer + the NFS session replayed, from the namespace"
echo "   recorded live on td-demo0 by the service, and by tcpdump as a reference"
python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('198.18.0.1', 5001)); s.listen(1); s.settimeout(60)
c, _ = s.accept()
while c.recv(1 << 16): pass
" &
sink_pid=$!
sleep 0.5
ip netns exec "$ns" python3 scripts/traffic.py 198.18.0.1 --count 20000 --rate 10000 --tcp-bytes 4000000
ip netns exec "$ns" ping -c 5 -i 0.2 -q 198.18.0.1 >/dev/null
ip netns exec "$ns" tcpreplay -q -i td-demo1 --mbps 200 "$out/nfs-session.pcap" >/dev/null
sleep 1
echo "== scrape: http://$listen/metrics (OpenMetrics; saved as metrics.txt), and tapdeck status"
curl -s "http://$listen/metrics" >"$out/metrics.txt"
grep -E '^tapdeck_packets_(seen|stored)_total|^tapdeck_packets_in_flight|^tapdeck_files_written_total|cause="kernel"' "$out/metrics.txt" | sed 's/^/   /'
"$bin" status --listen "$listen" | sed 's/^/   /' || true
echo "== query: the service answers while it records (tapdeck query, and the web page at http://$listen/)"
"$bin" query "$listen" -w "$out/query.pcapng" udp and dst port 9
echo "   tcpdump reads $(tcpdump -r "$out/query.pcapng" 2>/dev/null | wc -l) packets from query.pcapng"
curl -s "http://$listen/api/v1/stats" >"$out/timeline.json"
echo "   /api/v1/stats (the page's per-minute timeline): $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sum(p['stored'] for p in d['points']), 'packets stored in', len(d['points']), 'minute(s)')" "$out/timeline.json")"
# The page as a browser draws it (the chart is drawn by its script from /api/v1/stats).
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1500 \
  --virtual-time-budget=5000 --user-data-dir="$out/.chromium" --screenshot="$out/page.png" \
  "http://$listen/" >/dev/null 2>&1 && echo "   the web page, as headless Chromium drew it: page.png" || true
echo "== stop: SIGTERM drains the service"
kill -TERM "$record_pid"; wait "$record_pid"; record_pid=
kill -INT "$capture_pid"; wait "$capture_pid" 2>/dev/null || true; capture_pid=
wait "$sink_pid" 2>/dev/null || true; sink_pid=
grep -v INFO "$out/serve.log" || true
echo "   tcpdump, on the same link, wrote $(tcpdump -r "$out/link.pcap" 2>/dev/null | wc -l) packets"

echo "== record: the tcpdump file replayed into a second store (original timestamps kept)"
"$bin" record -r "$out/link.pcap" --store "$out/replay-store" -q
echo "== record: a million synthetic mixed-size packets offered at 200 kpps (about 140 MB/s)"
"$bin" record --synthetic mix --count 1000000 --rate 200000 --store "$out/synthetic-store" --rotate-size 256MiB -q

echo "== verify"
"$bin" verify "$out/store" "$out/replay-store" "$out/synthetic-store"

echo "== extract: UDP to port 9 from the middle of the capture, as a standard pcapng"
first=$(tcpdump -r "$out/link.pcap" -tt -c 1 2>/dev/null | awk '{print $1}')
start=$(python3 -c "print(f'{$first + 1.0:.6f}')")
end=$(python3 -c "print(f'{$first + 2.0:.6f}')")
"$bin" extract "$out/store" --start "$start" --end "$end" -w "$out/extract.pcapng" udp and dst port 9
echo "   tcpdump reads $(tcpdump -r "$out/extract.pcapng" 2>/dev/null | wc -l) packets from extract.pcapng"
f=$(ls "$out"/store/*.zst | head -1)
echo "   stock zstd -dc $f | tcpdump -r - reads $(zstd -dc "$f" | tcpdump -r - 2>/dev/null | wc -l) packets"

echo "== info"
"$bin" info "$out/store"

echo "== convert: the live store into a Parquet dataset (packets, RPC and NFS tables, catalog)"
"$bin" convert "$out/store" --out "$out/dataset"

echo "== analyze: every analysis, as tables, plots and one HTML report"
"$bin" analyze report "$out/dataset" --out "$out/report"

cat <<EOT

Results:
  $out/store/               the live recording by tapdeck serve (manifest.json, *.pcapng.zst)
  $out/tapdeck.toml         its config; serve.log its log; metrics.txt a scrape of /metrics
  $out/query.pcapng         an answer of its query API (tapdeck query) while it recorded
  $out/page.png             its web page (timeline, query form, files); timeline.json its data
  $out/link.pcap            the same traffic as tcpdump wrote it, for comparison
  $out/replay-store/        link.pcap replayed into a store
  $out/synthetic-store/     the synthetic recording
  $out/extract.pcapng       the extracted window, readable by tcpdump/tshark/Wireshark
  $out/nfs-session.pcap     the real NFS session that was replayed into the link
  $out/dataset/             the Parquet dataset (DuckDB: read_parquet('$out/dataset/rpc/**/*.parquet'))
  $out/report/report.html   the analysis report
EOT
