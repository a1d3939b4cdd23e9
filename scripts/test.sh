#!/usr/bin/env bash
# Sets everything up and runs every test: formatting and lints, the unit and integration
# tests of every crate (those of crates with unsafe code under valgrind too), the end-to-end
# suite against the real binary, and (where a nightly toolchain with cargo-fuzz is present)
# a short fuzzing run of every parser.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

echo "== structure: typed errors, short functions, no module cycles" >&2
python3 scripts/check_structure.py
echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy" >&2
cargo clippy --workspace --all-targets --locked -q -- -D warnings -D clippy::undocumented_unsafe_blocks
echo "== cargo test (release profile)" >&2
# In the release profile: the dependencies setup.sh built for the binary serve the tests too
# (a debug build of them took 7 of the suite's 47 minutes), and the tests run the code we ship.
cargo test --workspace --release --locked -q
echo "== valgrind: unit tests of the crates with unsafe code" >&2
bash scripts/valgrind.sh

if [[ -z "${CI:-}" ]] && cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "== fuzz smoke (30 s per target)" >&2
  bash fuzz/run.sh 30
fi

echo "== python: ruff and the analysis tests" >&2
python3 -m ruff check python
python3 -m ruff format --check python
python3 -m pytest python/tests -q -p no:cacheprovider --durations=10

echo "== end-to-end tests" >&2
export TAPDECK_BIN="$PWD/target/release/tapdeck"
python3 -m pytest tests -q -p no:cacheprovider --durations=30
