#!/usr/bin/env bash
# perf profile of `tapdeck record` under trafgen's 64-byte load on a veth pair (the far end
# in a namespace made here, removed at the end): where the recorder's CPU per packet goes.
#   MODE="--codec none" bench/profile_capture.sh   (default; or "--headers --codec none", ...)
# Writes /tmp/tapdeck-capture.perf; read it with `perf report -i /tmp/tapdeck-capture.perf`.
set -euo pipefail
BIN=${TAPDECK_BIN:-$(dirname "$0")/../target/release/tapdeck}
MODE=${MODE:---codec none}
NS=tdperf$$ CAP=tdpc$$ GEN=tdpg$$
WORK=$(mktemp -d)
cleanup() { ip netns del "$NS" 2>/dev/null || true; ip link del "$CAP" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
ip netns add "$NS"
ip link add "$CAP" type veth peer name "$GEN"
ip link set "$GEN" netns "$NS"
ip link set "$CAP" up
ip netns exec "$NS" ip link set "$GEN" up
cat > "$WORK/tg64.cfg" <<'X'
{
  eth(da=02:00:00:00:00:02, sa=02:00:00:00:00:01, type=0x0800),
  ipv4(sa=198.18.0.1, da=198.19.0.1, ttl=64),
  udp(sp=dinc(1024, 5119), dp=5001, csum=0),
  dinc(0, 255), drnd(10), fill(0x00, 11)
}
X
# shellcheck disable=SC2086
taskset -c 1 "$BIN" record -i "$CAP" --store "$WORK/store" $MODE -q --log warn \
  --stats "$WORK/stats" --stats-interval 1 &
REC=$!
sleep 2
perf record -F 2000 -g -p "$REC" -o /tmp/tapdeck-capture.perf -- sleep 20 >/dev/null 2>&1 &
PERF=$!
ip netns exec "$NS" timeout -s INT 22 taskset -c 0 trafgen --cpus 1 --notouch-irq --no-cpu-stats \
  -i "$WORK/tg64.cfg" -o "$GEN" 2>&1 | grep -E "packets outgoing" || true
wait "$PERF" || true
kill -INT "$REC"; wait "$REC" || true
perf report -i /tmp/tapdeck-capture.perf --no-children --sort comm,dso,sym 2>/dev/null | grep -E '^ +[0-9]' | head -20
