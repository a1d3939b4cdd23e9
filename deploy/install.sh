#!/usr/bin/env bash
# Installs tapdeck as a systemd service (docs/deploy.md). Run as root:
#
#   deploy/install.sh [--prefix DIR] [BINARY]
#
# BINARY defaults to target/release/tapdeck of this checkout. --prefix installs into the
# root directory DIR instead of / (for packaging and tests): the user and group go into
# DIR/etc/passwd and DIR/etc/group (useradd --prefix; they must exist), and systemd is not
# told. Safe to run again: it changes only what differs, and never touches an existing
# /etc/tapdeck/tapdeck.toml.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root=/
binary="$here/../target/release/tapdeck"
while (($#)); do
  case "$1" in
    --prefix) root="${2:?--prefix needs a directory}"; shift 2 ;;
    --prefix=*) root="${1#--prefix=}"; shift ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "install: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) binary="$1"; shift ;;
  esac
done
say() { echo "install: $*"; }
die() { echo "install: $*" >&2; exit 1; }

[[ $EUID -eq 0 ]] || die "run as root (it creates a system user and root-owned files)"
[[ -x "$binary" ]] || die "no tapdeck binary at $binary: build it (cargo build --release) or name it"
root="$(cd "$root" 2>/dev/null && pwd)" || die "--prefix: no directory $root"
r="${root%/}" # prefix for paths: "" for /
if [[ -n "$r" ]]; then
  [[ -f "$r/etc/passwd" && -f "$r/etc/group" ]] ||
    die "--prefix $root: needs $root/etc/passwd and $root/etc/group for the tapdeck user"
  account=(--prefix "$root")
else
  account=()
fi

# The account: a system user and group, no login, no home directory.
if ! grep -q '^tapdeck:' "$r/etc/group"; then
  groupadd "${account[@]}" --system tapdeck
  say "created group tapdeck"
fi
if ! grep -q '^tapdeck:' "$r/etc/passwd"; then
  useradd "${account[@]}" --system --gid tapdeck --no-create-home \
    --home-dir /var/lib/tapdeck --shell /usr/sbin/nologin --comment "tapdeck packet recorder" tapdeck
  say "created user tapdeck"
fi
# Numeric ids from the root's own files: under --prefix the names mean nothing to this host.
uid="$(awk -F: '$1 == "tapdeck" { print $3 }' "$r/etc/passwd")"
gid="$(awk -F: '$1 == "tapdeck" { print $3 }' "$r/etc/group")"

# Directory DIR with owner and mode, made or corrected.
directory() {
  local dir="$1" owner="$2" mode="$3"
  if [[ ! -d "$dir" ]]; then
    install -d -o "${owner%:*}" -g "${owner#*:}" -m "$mode" "$dir"
    say "created $dir"
  elif [[ "$(stat -c '%u:%g %a' "$dir")" != "$owner ${mode#0}" ]]; then
    chown "$owner" "$dir"
    chmod "$mode" "$dir"
    say "set owner and mode of $dir"
  fi
}
# File DEST from SRC with owner and mode, replaced only when its content differs; by rename,
# so that a running binary is never written over.
file() {
  local src="$1" dest="$2" owner="$3" mode="$4"
  if [[ -f "$dest" ]] && cmp -s "$src" "$dest"; then
    if [[ "$(stat -c '%u:%g %a' "$dest")" != "$owner ${mode#0}" ]]; then
      chown "$owner" "$dest"
      chmod "$mode" "$dest"
      say "set owner and mode of $dest"
    fi
    return
  fi
  install -o "${owner%:*}" -g "${owner#*:}" -m "$mode" "$src" "$dest.install-tmp"
  mv -f "$dest.install-tmp" "$dest"
  say "installed $dest"
}

# The recorded traffic is for user and group tapdeck only.
directory "$r/var/lib/tapdeck" "$uid:$gid" 0750
directory "$r/var/lib/tapdeck/store" "$uid:$gid" 0750
# The config (and a metrics token file beside it) readable by tapdeck, writable by root.
directory "$r/etc/tapdeck" "0:$gid" 0750
if [[ -e "$r/etc/tapdeck/tapdeck.toml" ]]; then
  say "kept $r/etc/tapdeck/tapdeck.toml (never overwritten; the example is deploy/tapdeck.toml)"
else
  file "$here/tapdeck.toml" "$r/etc/tapdeck/tapdeck.toml" "0:$gid" 0640
fi
# System directories are made if missing, never changed.
[[ -d "$r/usr/local/bin" ]] || install -d -m 0755 "$r/usr/local/bin"
file "$binary" "$r/usr/local/bin/tapdeck" 0:0 0755
[[ -d "$r/etc/systemd/system" ]] || install -d -m 0755 "$r/etc/systemd/system"
file "$here/tapdeck.service" "$r/etc/systemd/system/tapdeck.service" 0:0 0644

if [[ -n "$r" ]]; then
  say "installed under $root: systemd not told (run systemctl daemon-reload on the target)"
elif [[ -d /run/systemd/system ]]; then
  systemctl daemon-reload
  say "systemd reloaded"
else
  say "systemd is not running here (not PID 1): run systemctl daemon-reload where it is"
fi

cat <<EOF

Next steps:
  1. Edit $r/etc/tapdeck/tapdeck.toml: interface, store or dir (each dir also goes into
     ReadWritePaths= of the unit: systemctl edit tapdeck), retention, listen.
  2. Turn GRO/LRO off on each capture interface: ethtool -K IF gro off lro off
  3. Listening beyond loopback? Make a token first:
       (umask 027; openssl rand -hex 32 > /etc/tapdeck/metrics.token); chgrp tapdeck /etc/tapdeck/metrics.token
     and set metrics-token-file = "/etc/tapdeck/metrics.token".
  4. systemctl enable --now tapdeck; systemctl status tapdeck
     curl -s 127.0.0.1:9780/healthz; curl -s 127.0.0.1:9780/metrics | grep ^tapdeck_
  5. Point Prometheus at it: deploy/prometheus.yml and deploy/tapdeck.rules.yml.
EOF
