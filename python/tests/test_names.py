"""Name decryption (names.py) against the format of crates/anon/README.md: a key file written
here, names encrypted here with `cryptography`'s AES-SIV as the README describes; the e2e test
tests/e2e/test_analyze_report.py checks against `tapdeck convert --key` and `tapdeck decrypt`."""

import base64
import hashlib
import os

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from tapdeck_analyze.dataset import DatasetError
from tapdeck_analyze.names import key_for, load_key

NAMES, ADDRESSES = bytes(range(64)), bytes(range(100, 132))


def write_key(path, mode=0o600, names=NAMES):
    path.write_text(
        "# a comment\n\ntapdeck-anon-key 1\n"
        f"addresses crypto-pan {ADDRESSES.hex()}\nnames aes-256-siv {names.hex()}\n"
    )
    os.chmod(path, mode)
    return path


def encrypt(name: bytes, key=NAMES) -> str:
    padded = name + b"\x80" + bytes(-(len(name) + 1) % 16)
    ct = AESSIV(key).encrypt(padded, [b"tapdeck-anon name v1"])
    return "~" + base64.urlsafe_b64encode(ct).decode().rstrip("=")


def test_names_and_paths_decrypt(tmp_path):
    key = load_key(write_key(tmp_path / "k"))
    want_id = hashlib.sha256(b"tapdeck-anon key id v1\0" + NAMES + ADDRESSES).digest()[:8].hex()
    assert key.key_id == want_id
    for name in (b"", b"a", b"x" * 15, b"y" * 16, "caf\u00e9.txt".encode(), b"\xff\xfe"):
        assert key.decrypt_bytes(encrypt(name)) == name
    assert len(encrypt(b"a")) == 44
    assert key.decrypt(encrypt(b"\xff")) == "\\xff"
    path = "/" + "/".join(encrypt(c) for c in (b"export", b"tree", b"leaf.bin"))
    assert key.decrypt(path) == "/export/tree/leaf.bin"
    assert key.decrypt("plain") == "plain" and key.decrypt(None) is None
    assert key_for({"key_id": want_id}, tmp_path / "k").key_id == want_id


@pytest.mark.parametrize(
    "setup,message",
    [
        (lambda p: write_key(p, mode=0o644), "chmod 600"),
        (lambda p: p.mkdir(), "not a regular file"),
        (lambda p: None, "No such file"),
        (lambda p: (p.write_text("tapdeck-anon-key 1\nnames aes-256-siv 00\n"), os.chmod(p, 0o600)),
         "line 2"),
    ],
)  # fmt: skip
def test_bad_key_files_are_one_line(tmp_path, setup, message):
    setup(tmp_path / "k")
    with pytest.raises(DatasetError, match=message) as e:
        load_key(tmp_path / "k")
    assert "\n" not in str(e.value)


def test_wrong_key_and_altered_names(tmp_path):
    key = load_key(write_key(tmp_path / "k"))
    with pytest.raises(DatasetError, match="wrong key"):
        key_for({"key_id": "0123456789abcdef"}, tmp_path / "k")
    with pytest.raises(DatasetError, match="not encrypted"):
        key_for({}, tmp_path / "k")
    other = encrypt(b"secret", key=bytes(64))
    with pytest.raises(DatasetError, match="does not decrypt"):
        key.decrypt(other)
    good = encrypt(b"secret")
    with pytest.raises(DatasetError, match="does not decrypt"):
        key.decrypt(good[:-2] + ("A" if good[-2] != "A" else "B") + good[-1])
    with pytest.raises(DatasetError, match="does not decrypt"):
        key.decrypt("~not base64!")
