#!/usr/bin/env bash
# Runs the unit tests of every crate that holds `unsafe` code of ours under valgrind (Miri
# cannot be installed here, and cannot run FFI-heavy code anyway): an invalid read or write,
# a use of uninitialised memory or a bad free in the capture ring, the staging pool, the
# O_DIRECT buffer, the sockets or the locks fails the run. Called by scripts/test.sh, after
# `cargo test --release`, whose test binaries it reuses (built with the same command, so
# nothing is compiled again).
set -euo pipefail
cd "$(dirname "$0")/.."
# crate, and the tests of it to run (empty: all). tapdeck-store's one unsafe call is the
# store lock's flock(2); its other tests (extract, index, repair: safe Rust over the zstd
# and lz4 libraries) took six minutes under valgrind and check nothing of ours that is
# unsafe. tapdeck-pcap forbids unsafe code.
crates=(
  "tapdeck-recorder:"
  "tapdeck-capture:"
  "tapdeck-forward:"
  "tapdeck-store:lock::"
)
executables=$(cargo test --workspace --release --locked --no-run --message-format=json 2>/dev/null |
  python3 -c "
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m.get('executable') and m['profile']['test'] \
            and m['target']['kind'] == ['lib']:
        print(m['target']['name'], m['executable'])")
for entry in "${crates[@]}"; do
  crate=${entry%%:*}
  filter=${entry#*:}
  bin=$(awk -v lib="${crate//-/_}" '$1 == lib { print $2 }' <<<"$executables")
  if [[ -z "$bin" ]]; then
    echo "valgrind: no unit-test binary for $crate" >&2
    exit 1
  fi
  echo "valgrind: $crate${filter:+ ($filter)}" >&2
  # Tests that time themselves against the wall clock cannot hold under valgrind's
  # slowdown (20-50x); they run natively in `cargo test`.
  valgrind --error-exitcode=99 --quiet "$bin" --test-threads=2 -q --skip a_rate_paces ${filter:+"$filter"}
done
