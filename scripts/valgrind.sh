#!/usr/bin/env bash
# Runs the unit tests of every crate that holds `unsafe` code under valgrind (Miri cannot be
# installed here, and cannot run FFI-heavy code anyway): an invalid read or write, a use of
# uninitialised memory or a bad free in the capture ring, the staging pool, the O_DIRECT
# buffer, the sockets or the locks fails the run. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
crates=(tapdeck-recorder tapdeck-capture tapdeck-store tapdeck-forward tapdeck-pcap)
for crate in "${crates[@]}"; do
  lib=${crate//-/_}
  bins=$(cargo test -p "$crate" --lib --no-run --message-format=json 2>/dev/null | python3 -c "
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m.get('executable') and m['target']['name'] == '$lib':
        print(m['executable'])")
  for bin in $bins; do
    echo "valgrind: $crate" >&2
    # Tests that time themselves against the wall clock cannot hold under valgrind's
    # slowdown (20-50x); they run natively in `cargo test`.
    valgrind --error-exitcode=99 --quiet "$bin" --test-threads=2 -q --skip a_rate_paces
  done
done
