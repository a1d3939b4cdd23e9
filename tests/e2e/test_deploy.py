"""The deployment files in deploy/: alerting rules, Prometheus config, systemd unit, example
config and installer. Nothing here starts `tapdeck serve` or touches the real system: the
rules are checked by promtool (syntax, and unit tests on synthetic series), the unit by
`systemd-analyze verify`, the config against the flags the binary really has, and the
installer by installing into a temporary root directory."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tomllib
from pathlib import Path

import pytest
from conftest import QUICK, REPO, run

DEPLOY = REPO / "deploy"

# Keys of `tapdeck serve` itself; every other config key is a `tapdeck record` flag.
SERVE_KEYS = {
    "listen",
    "metrics-token-file",
    "token-file",
    "tls-cert",
    "tls-key",
    "tls-client-ca",
    "allowed-hosts",
    "session-lifetime",
    "log-format",
    "log-level",
    "health-stall",
    "health-max-drops",
    "min-horizon",
    "query-max-concurrent",
    "query-max-bytes",
    "query-max-seconds",
}
# Record flags that make no sense for a service: listed in the example, commented out.
RECORD_ONLY = {
    "read",
    "synthetic",
    "rate",
    "rate-schedule",
    "count",
    "duration",
    "discard",
    "bench-disk-limit",
    "bench-fixed-codec",
}
# Record flags that must stay out of the service's config: the unit already runs as tapdeck,
# which cannot switch users.
NOT_UNDER_SYSTEMD = {"user"}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"needs {name} (scripts/setup.sh installs it)")
    return path


# --------------------------------------------------------------------------------------
# Prometheus
# --------------------------------------------------------------------------------------


def test_rules_are_valid():
    r = run([tool("promtool"), "check", "rules", DEPLOY / "tapdeck.rules.yml"])
    assert r.returncode == 0, r.describe()
    assert "SUCCESS: 6 rules found" in r.out, r.describe()


def test_rules_unit_tests_pass():
    """Each alert fires on synthetic series when it should and stays silent when it
    should not (deploy/tapdeck.rules.test.yml says which case is which)."""
    r = run([tool("promtool"), "test", "rules", DEPLOY / "tapdeck.rules.test.yml"])
    assert r.returncode == 0, r.describe()
    assert "SUCCESS" in r.out, r.describe()


def test_prometheus_config_is_valid(tmp_path):
    """The example as shipped, and with its commented `authorization` block turned on
    (promtool also checks that the credentials file exists)."""
    promtool = tool("promtool")
    text = (DEPLOY / "prometheus.yml").read_text()
    shutil.copy(DEPLOY / "tapdeck.rules.yml", tmp_path)
    assert re.search(r"job_name: tapdeck\b", text)
    assert '"127.0.0.1:9780"' in text
    assert 'up{job="tapdeck"}' in (DEPLOY / "tapdeck.rules.yml").read_text()

    plain = tmp_path / "prometheus.yml"
    plain.write_text(text)
    r = run([promtool, "check", "config", plain])
    assert r.returncode == 0, r.describe()
    assert "1 rule files found" in r.out, r.describe()

    token = tmp_path / "tapdeck.token"
    token.write_text("secret\n")
    authorized, n = re.subn(
        r"(?m)^(\s*)# (authorization:|  type:|  credentials_file:)", r"\1\2", text
    )
    assert n == 3, "the authorization block is no longer three commented lines"
    authorized = authorized.replace("/etc/prometheus/tapdeck.token", str(token))
    with_token = tmp_path / "with-token.yml"
    with_token.write_text(authorized)
    r = run([promtool, "check", "config", with_token])
    assert r.returncode == 0, r.describe()


# --------------------------------------------------------------------------------------
# systemd
# --------------------------------------------------------------------------------------


def unit_settings(text: str) -> dict[str, str]:
    """Section.Key -> value of a unit file (each key appears once in ours)."""
    out, section = {}, ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        assert f"{section}.{key}" not in out, f"{key} twice in [{section}]"
        out[f"{section}.{key}"] = value
    return out


def test_unit_has_the_contracted_settings():
    s = unit_settings((DEPLOY / "tapdeck.service").read_text())
    caps = {"CAP_NET_RAW", "CAP_NET_ADMIN", "CAP_IPC_LOCK"}
    assert set(s["Service.AmbientCapabilities"].split()) == caps
    assert set(s["Service.CapabilityBoundingSet"].split()) == caps
    expected = {
        "Type": "notify",
        "NotifyAccess": "main",
        "WatchdogSec": "30",
        "Restart": "on-failure",
        "RestartSec": "2",
        "ExecStart": "/usr/local/bin/tapdeck serve --config /etc/tapdeck/tapdeck.toml",
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "User": "tapdeck",
        "Group": "tapdeck",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "ReadWritePaths": "/var/lib/tapdeck",
        "KillSignal": "SIGTERM",
    }
    got = {k: s.get(f"Service.{k}") for k in expected}
    assert got == expected
    assert int(s["Service.TimeoutStopSec"]) >= 60, "too short to drain the staging pool"
    assert s["Service.LimitMEMLOCK"] == "4G", (
        "the default staging pool is at most 2 GiB"
    )


def test_unit_verifies(tmp_path, tapdeck_bin):
    """`systemd-analyze verify` on a copy whose ExecStart is the built binary.

    Without systemd as PID 1 (containers, CI) it still loads the unit in a test manager:
    it parses every line (unknown sections and keys, values that do not parse: one
    warning each, `FILE:LINE: ...`, exit status still 0) and checks that the commands
    exist and are executable (exit status 1 if not). It does not check that the user
    exists, that the config file is there, that capability names are real, or that
    the service starts, notifies and passes its watchdog: nothing here runs it. A broken
    copy is verified too, to show that this systemd-analyze reports what we look for."""
    analyze = tool("systemd-analyze")
    text = (DEPLOY / "tapdeck.service").read_text()
    exec_start = "ExecStart=/usr/local/bin/tapdeck "
    assert exec_start in text
    unit = tmp_path / "tapdeck.service"
    unit.write_text(text.replace(exec_start, f"ExecStart={tapdeck_bin} "))

    def complaints(path: Path) -> tuple[int, list[str]]:
        r = run([analyze, "verify", "--man=no", path])
        lines = (r.stderr + r.out).splitlines()
        return r.returncode, [line for line in lines if path.name in line]

    code, lines = complaints(unit)
    assert code == 0 and not lines, "\n".join(lines)

    broken = tmp_path / "tapdeck-broken.service"
    broken.write_text(
        unit.read_text().replace("WatchdogSec=30", "WatchdogSec=30x\nBogus=1")
    )
    _, lines = complaints(broken)
    assert any("Unknown key" in line for line in lines), lines
    assert any("WatchdogSec" in line or "30x" in line for line in lines), lines


# --------------------------------------------------------------------------------------
# The example config
# --------------------------------------------------------------------------------------

# An option line of clap's help: `  -i, --interface <IF>` or `      --threads <N>`.
HELP_FLAG = re.compile(r"^\s+(?:-\w, )?--([a-z][a-z0-9-]*)", re.MULTILINE)
# A key commented out in the example: `# key = value` at the start of a line.
COMMENTED_KEY = re.compile(r"^# ?([a-z][a-z0-9-]*) = ", re.MULTILINE)


def help_flags(tapdeck, *command) -> set[str]:
    r = tapdeck(*command, "--help")
    assert r.returncode == 0, r.describe()
    return set(HELP_FLAG.findall(r.out))


def record_keys(tapdeck) -> set[str]:
    """`record`'s own long flags: those of `record --help` less the global ones."""
    return help_flags(tapdeck, "record") - help_flags(tapdeck)


def example() -> tuple[dict, dict[str, str]]:
    """The example's keys in force (parsed by tomllib) and those commented out (line)."""
    text = (DEPLOY / "tapdeck.toml").read_text()
    active = tomllib.loads(text)
    commented = {}
    for m in COMMENTED_KEY.finditer(text):
        line = text[m.start() : text.index("\n", m.start())]
        assert m.group(1) not in commented, f"{m.group(1)} commented out twice"
        commented[m.group(1)] = line.lstrip("# ")
    return active, commented


def test_config_documents_every_key(tapdeck):
    """Every record flag and serve key is in the example, once, in force or commented
    out (so `record --help` gaining a flag fails this test until it is documented);
    nothing else is; uncommenting any key still gives valid TOML."""
    active, commented = example()
    record = record_keys(tapdeck)
    assert {"interface", "store", "max-bytes", "min-free", "codec"} <= record
    assert not set(active) & set(commented), "a key both in force and commented out"
    assert set(active) | set(commented) == record | SERVE_KEYS
    assert not set(active) & (RECORD_ONLY | NOT_UNDER_SYSTEMD)
    for key, line in commented.items():
        assert key in tomllib.loads(line), line
    assert active["interface"] == ["eth1"]
    assert active["store"] == "/var/lib/tapdeck/store"
    assert active["listen"] == "127.0.0.1:9780"


def test_config_values_are_accepted(tapdeck, tmp_path):
    """The example's record values (and its commented-out examples) as flags. `record`
    checks its options (sizes, codec ladder, CPU lists, format, headers, ...) with the
    same code that checks a config file's, before it opens the interface, so the only
    complaint may be that the interface does not exist. `user`, `dir` and `stats` are
    used only after that (they are moved into tmp_path anyway): for them this shows
    nothing. Nothing is captured or written."""
    active, commented = example()
    values = {k: v for k, v in active.items() if k not in SERVE_KEYS}
    for key, line in commented.items():
        if key not in SERVE_KEYS | RECORD_ONLY:
            values.update(tomllib.loads(line))
    values["interface"] = ["tapdeck-none0"]
    values["store"] = str(tmp_path / "store")
    values["dir"] = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    values["stats"] = str(tmp_path / "stats.jsonl")
    args = []
    for key, value in values.items():
        for v in value if isinstance(value, list) else [value]:
            if v is True:
                args.append(f"--{key}")
            elif v is not False:
                args.append(f"--{key}={v}")  # (--headers takes its value only so)
    r = tapdeck("record", *args, timeout=QUICK)
    assert r.returncode == 1, r.describe()
    assert "tapdeck: no interface named tapdeck-none0" in r.stderr, r.describe()
    assert not (tmp_path / "store").exists()


def test_serve_flags_are_config_keys(tapdeck):
    """Once the binary has `serve`: each of its flags is a key of the example."""
    r = tapdeck("serve", "--help")
    if r.returncode != 0:
        pytest.skip("this tapdeck has no `serve` yet")
    active, commented = example()
    # --config names the file; --check and --no-capture are modes: none is a key.
    flags = set(HELP_FLAG.findall(r.out)) - help_flags(tapdeck) - {"config", "check", "no-capture"}
    assert flags <= set(active) | set(commented)


def test_docs_name_every_alert_and_metric():
    docs = (REPO / "docs" / "deploy.md").read_text()
    rules = (DEPLOY / "tapdeck.rules.yml").read_text()
    for alert in re.findall(r"- alert: (\w+)", rules):
        assert f"`{alert}`" in docs, alert
    for metric in set(re.findall(r"\btapdeck_\w+", rules)):
        assert f"`{metric}`" in docs, metric


# --------------------------------------------------------------------------------------
# install.sh
# --------------------------------------------------------------------------------------


def tree(root: Path) -> dict[str, tuple]:
    """Every path under root: type and mode, owner, size, mtime, content hash of files."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            digest = ""
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
            out[str(p.relative_to(root))] = (
                st.st_mode,
                st.st_uid,
                st.st_gid,
                st.st_size,
                st.st_mtime_ns,
                st.st_ino,
                digest,
            )
    return out


def account(root: Path, file: str, name: str) -> list[str]:
    for line in (root / "etc" / file).read_text().splitlines():
        if line.split(":")[0] == name:
            return line.split(":")
    pytest.fail(f"no {name} in {root}/etc/{file}")


def test_install_into_prefix(tmp_path, tapdeck_bin):
    """install.sh --prefix ROOT: the account (useradd --prefix, into ROOT/etc only), the
    directories and files with their owners and modes; a second run changes nothing; an
    edited config survives; a new binary replaces the old by rename. What it cannot show:
    systemctl daemon-reload (never run under --prefix)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (install.sh creates root- and tapdeck-owned files)")
    tool("useradd")
    tool("groupadd")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (root / "etc" / "group").write_text("root:x:0:\n")
    host = {f: Path("/etc", f).read_bytes() for f in ("passwd", "group")}

    def install(binary=tapdeck_bin):
        r = run(
            ["bash", DEPLOY / "install.sh", "--prefix", root, binary], timeout=QUICK
        )
        assert r.returncode == 0, r.describe()
        return r.out

    out = install()
    assert "systemd not told" in out
    user = account(root, "passwd", "tapdeck")
    group = account(root, "group", "tapdeck")
    uid, gid = int(user[2]), int(group[2])
    assert 0 < uid < 1000 and 0 < gid < 1000, "not a system account"
    assert user[3] == group[2] and user[6] == "/usr/sbin/nologin"
    assert {f: Path("/etc", f).read_bytes() for f in host} == host, (
        "changed the host's accounts"
    )

    def owner_mode(rel):
        st = (root / rel).stat()
        return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)

    assert owner_mode("var/lib/tapdeck") == (uid, gid, 0o750)
    assert owner_mode("var/lib/tapdeck/store") == (uid, gid, 0o750)
    assert owner_mode("etc/tapdeck") == (0, gid, 0o750)
    assert owner_mode("etc/tapdeck/tapdeck.toml") == (0, gid, 0o640)
    assert owner_mode("usr/local/bin/tapdeck") == (0, 0, 0o755)
    assert owner_mode("etc/systemd/system/tapdeck.service") == (0, 0, 0o644)
    for installed, source in [
        ("etc/tapdeck/tapdeck.toml", DEPLOY / "tapdeck.toml"),
        ("usr/local/bin/tapdeck", tapdeck_bin),
        ("etc/systemd/system/tapdeck.service", DEPLOY / "tapdeck.service"),
    ]:
        assert (root / installed).read_bytes() == Path(source).read_bytes(), installed

    before = tree(root)
    out = install()
    assert tree(root) == before, "a second run changed something"
    assert not re.search(
        r"^install: (created|installed /|set owner)", out, re.MULTILINE
    ), out

    config = root / "etc" / "tapdeck" / "tapdeck.toml"
    edited = config.read_text().replace('["eth1"]', '["eth7"]')
    config.write_text(edited)
    newer = tmp_path / "tapdeck-new"
    newer.write_text("#!/bin/sh\necho new\n")
    newer.chmod(0o755)
    old_inode = (root / "usr/local/bin/tapdeck").stat().st_ino
    out = install(newer)
    assert "kept" in out and config.read_text() == edited
    assert (root / "usr/local/bin/tapdeck").read_bytes() == newer.read_bytes()
    assert (root / "usr/local/bin/tapdeck").stat().st_ino != old_inode, (
        "written in place"
    )
    assert not list(root.rglob("*.install-tmp"))
