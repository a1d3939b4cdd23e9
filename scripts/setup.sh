#!/usr/bin/env bash
# Installs every system package tapdeck's build, tests, demo and benchmarks use, then builds
# the release binary. Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  libpcap-dev      # BPF filters are compiled by libpcap
  tcpdump tshark   # oracles in tests, peers in benchmarks
  wireshark-common # capinfos, editcap, mergecap
  zstd lz4         # the stock tools our files must decompress with
  gzip bzip2 xz-utils # how archives of old traces are compressed (tests/e2e/test_compressed_inputs.py)
  iproute2         # network namespaces and veth pairs for tests and the demo
  e2fsprogs mount  # loop-mounted small ext4 filesystems (tests/e2e/test_store_chaos.py)
  valgrind         # the unit tests of crates with unsafe code (scripts/valgrind.sh)
  nftables         # the symmetric-hash split over monitors (tests/e2e/test_split_merge.py)
  iputils-ping
  ethtool          # GRO/GSO off on capture interfaces
  procps
  tcpreplay        # generator for bench/capture.py (dumpcap comes with wireshark-common)
  netsniff-ng      # peer recorder in bench/capture.py
  libfixbuf-tools  # ipfixDump, the second IPFIX oracle in crates/ipfix tests
  nfs-ganesha nfs-ganesha-vfs rpcbind libnfs-utils # real NFS traffic: tests/nfs rig
  chromium chromium-driver # headless check of the analysis report (tests/e2e)
  prometheus       # promtool checks deploy/'s rules and config (tests/e2e/test_deploy.py);
                   # where systemd runs, Debian's package also starts a Prometheus on :9090
  systemd          # systemd-analyze verifies deploy/tapdeck.service
  openssl curl     # certificates and TLS clients of tests/e2e/test_serve_auth.py
  strace           # counts the files a windowed query opens (tests/e2e/test_time_pruning.py)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer for it.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python3 -m pytest --version >/dev/null 2>&1 || python3 -m pip install -q pytest
# Selenium drives Debian's chromium (through chromium-driver) in the web page's tests.
python3 -c "import selenium" >/dev/null 2>&1 || python3 -m pip install -q "selenium>=4.20"
# the analysis package (python/) with its test tools (pytest, ruff; scapy refragments
# captures in tests/e2e) and PySpark, so that the tests compare every analysis on DuckDB
# and Spark (Java 17 is on our machines)
python3 -c "import tapdeck_analyze, ruff, pyspark, scapy" >/dev/null 2>&1 ||
  python3 -m pip install -q -e "python[dev,spark]"

cargo build --release --locked -q
echo "setup: built $(pwd)/target/release/tapdeck" >&2
