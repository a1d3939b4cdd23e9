"""One exit-code convention for `tapdeck` and `tapdeck-analyze`: 0 ok, 1 failure, 2 usage
error (the command line cannot be run as written), stated at the end of every `--help`."""

from __future__ import annotations

import shutil

import pytest
from conftest import one_error_line

# extract states its own statuses (3: the output is whole but for the damage it reports).
SUBCOMMANDS = ("record", "export", "collect", "verify", "merge", "info", "convert", "decrypt",
               "keygen")  # fmt: skip


def test_every_help_states_the_exit_codes(tapdeck):
    for args in ((), *((s,) for s in SUBCOMMANDS)):
        r = tapdeck(*args, "--help")
        assert r.returncode == 0, r.describe()
        assert "Exit status: 0 ok, 1 failure, 2 usage error" in " ".join(r.out.split()), args


def test_record_usage_errors_exit_2(tapdeck, tmp_path):
    # clap's own checks
    r = tapdeck("record", "--store", tmp_path / "s", "--no-such-flag")
    assert r.returncode == 2, r.describe()
    r = tapdeck("record", "--store", tmp_path / "s", "-r", "x.pcap", "--synthetic", "64")
    assert r.returncode == 2, r.describe()
    # the command's own: no source; live-only flags without -i
    r = tapdeck.record(tmp_path / "s")
    assert r.returncode == 2, r.describe()
    assert one_error_line(r.stderr) == (
        "tapdeck: say where packets come from: -i IF, -r FILE or --synthetic PROFILE")
    r = tapdeck.record(tmp_path / "s", "--synthetic", "64", "--filter", "tcp")
    assert r.returncode == 2, r.describe()
    assert "add -i IF" in one_error_line(r.stderr)
    assert not (tmp_path / "s").exists(), "a usage error must not create the store"


def test_record_failure_exits_1(tapdeck, tmp_path):
    r = tapdeck.record(tmp_path / "s", "-r", tmp_path / "no-such.pcap")
    assert r.returncode == 1, r.describe()
    assert "no-such.pcap" in one_error_line(r.stderr)
    r = tapdeck.record(tmp_path / "s", "--synthetic", "64", "--rotate-size", "lots")
    assert r.returncode == 1, r.describe()
    assert "--rotate-size lots: not a size" in one_error_line(r.stderr)


def test_analyze_passes_its_usage_error_through(tapdeck):
    if not shutil.which("tapdeck-analyze"):
        pytest.skip("tapdeck-analyze is not installed")
    r = tapdeck("analyze", "run", "rates")
    assert r.returncode == 2 and "usage: tapdeck-analyze run" in r.stderr, r.describe()
