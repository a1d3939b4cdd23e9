"""Decryption of the names that `tapdeck convert --key KEYFILE` encrypted (`nfs_names.name`,
`to_name`, `mount.dirpath`), as `tapdeck decrypt` does; the format is crates/anon/README.md's:

- the key file is text: `#` and blank lines ignored, a `tapdeck-anon-key 1` line, `names
  aes-256-siv <128 hex digits>` and `addresses crypto-pan <64 hex digits>`, in any order; it must
  not be readable or writable by group or others;
- the key id is the first 8 bytes (16 hex digits) of SHA-256 over `tapdeck-anon key id v1\\0`,
  the names key and the addresses key; `dataset.json` records it as `key_id`;
- a name is `~` + unpadded base64url of AES-256-SIV (RFC 5297) of the name padded to a multiple
  of 16 bytes (ISO/IEC 7816-4: 0x80 then zeros), with the one associated-data string
  `tapdeck-anon name v1`; a path encrypts each `/`-separated component on its own.
"""

import base64
import hashlib
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from .errors import DatasetError

LABEL = b"tapdeck-anon name v1"
KEY_ID_LABEL = b"tapdeck-anon key id v1\0"


@dataclass(frozen=True)
class NameKey:
    """The names key of a key file (and the file's key id)."""

    names: bytes
    key_id: str
    origin: str = ""

    def decrypt(self, s: str | None) -> str | None:
        """One encrypted name or path back to text; values that are not encrypted (no `~`)
        stay as they are. Bytes that are not UTF-8 are shown as \\xNN escapes."""
        if s is None:
            return None
        return "/".join(self._component(c) for c in s.split("/"))

    def decrypt_bytes(self, s: str) -> bytes:
        return b"/".join(self._component_bytes(c) for c in s.split("/"))

    def _component(self, c: str) -> str:
        if not c.startswith("~"):
            return c
        return self._component_bytes(c).decode("utf-8", errors="backslashreplace")

    def _component_bytes(self, c: str) -> bytes:
        if not c.startswith("~"):
            return c.encode()
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESSIV

        body = c[1:]
        try:
            if not re.fullmatch(r"[A-Za-z0-9_-]*", body):
                raise ValueError("not base64url")
            ct = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            padded = AESSIV(self.names).decrypt(ct, [LABEL])
        except (ValueError, InvalidTag):
            raise DatasetError(
                f'"{c}" does not decrypt with the key {self.origin}: wrong key file, or the '
                "name was altered"
            ) from None
        end = padded.rstrip(b"\0")
        if not end.endswith(b"\x80") or len(padded) % 16:
            raise DatasetError(f'"{c}": bad padding after decryption (not a tapdeck name)')
        return end[:-1]


def load_key(path) -> NameKey:
    """Reads a key file; every problem is a DatasetError of one line naming the file."""
    path = Path(path)
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise DatasetError(f"key file {path}: not a regular file")
        if st.st_mode & 0o077:
            raise DatasetError(
                f"key file {path}: readable or writable by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):04o}); run chmod 600 {path}"
            )
        text = path.read_text()
    except OSError as e:
        raise DatasetError(f"key file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise DatasetError(f"key file {path}: not a text file") from None
    header, keys = False, {}
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words == ["tapdeck-anon-key", "1"]:
            header = True
        elif len(words) == 3 and (words[0], words[1]) in (
            ("names", "aes-256-siv"),
            ("addresses", "crypto-pan"),
        ):
            want = 128 if words[0] == "names" else 64
            if len(words[2]) != want or not re.fullmatch(r"[0-9a-fA-F]+", words[2]):
                raise DatasetError(f"key file {path}, line {n}: expected {want} hex digits")
            keys[words[0]] = bytes.fromhex(words[2])
        else:
            raise DatasetError(f"key file {path}, line {n}: not a tapdeck key line")
    if not header or set(keys) != {"names", "addresses"}:
        raise DatasetError(
            f"key file {path}: not a tapdeck key file (needs 'tapdeck-anon-key 1', a names "
            "and an addresses line)"
        )
    digest = hashlib.sha256(KEY_ID_LABEL + keys["names"] + keys["addresses"]).digest()
    return NameKey(keys["names"], digest[:8].hex(), str(path))


def key_for(meta: dict, path) -> NameKey:
    """The key in `path`, checked against the dataset's `key_id`."""
    key = load_key(path)
    want = meta.get("key_id")
    if not want:
        raise DatasetError("the dataset's names are not encrypted (no key_id in dataset.json)")
    if want != key.key_id:
        raise DatasetError(
            f"key file {path} has key id {key.key_id}, the dataset was encrypted with {want}: "
            "wrong key file"
        )
    return key
