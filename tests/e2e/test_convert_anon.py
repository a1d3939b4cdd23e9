"""`tapdeck convert --key K [--anonymize-ips]`, `tapdeck keygen` and `tapdeck decrypt`.

On the rig's mixed NFS capture (marked `nfs`), converted plainly and with a key, row by row:
names in nfs_names (name, to_name) and mount.dirpath are encrypted (never the plain text;
equal names give equal ciphertexts, different names different ones), and `tapdeck decrypt`
gives back exactly the plain conversion's names; addresses are mapped one to one, differ from
the originals, and keep the common prefix length of every pair (checked on the rig's
addresses and on the many IPv4/IPv6 addresses of corpus files); file handles, xids and ids
are untouched. Converting into the same dataset with another key, without a key, or without
--anonymize-ips fails with one clear error line.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
from pathlib import Path

import pytest
from conftest import CORPUS, one_error_line
from convtools import convert, convert_ok, nfs_captures, table

TCPDUMP = CORPUS / "tcpdump-tests"


@pytest.fixture(scope="module")
def keys(tapdeck, tmp_path_factory):
    base = tmp_path_factory.mktemp("keys")
    out = []
    for name in ("k1", "k2"):
        r = tapdeck("keygen", base / name)
        assert r.returncode == 0, r.describe()
        assert (base / name).stat().st_mode & 0o077 == 0, "a key file is private"
        out.append(base / name)
    r = tapdeck("keygen", base / "k1")
    assert r.returncode != 0, "keygen overwrote a key"
    one_error_line(r.stderr)
    return out


def row_key(r):
    # Flow and transaction ids hash the (anonymized) addresses, so that they reveal nothing
    # the address columns do not: they differ, but must map one to one (see aligned).
    return tuple((k, v) for k, v in sorted(r.items())
                 if k not in ("name", "to_name", "dirpath", "client_addr", "server_addr",
                              "src_addr", "dst_addr", "flow_id", "transaction_id"))


def aligned(plain_rows, anon_rows):
    """Pairs (plain row, anonymized row): equal in every column anonymization leaves alone,
    and transaction ids that map one to one (the same rows share an id in both)."""
    assert len(plain_rows) == len(anon_rows)
    a = sorted(plain_rows, key=lambda r: repr(row_key(r)))
    b = sorted(anon_rows, key=lambda r: repr(row_key(r)))
    ids: dict = {}
    for x, y in zip(a, b):
        assert row_key(x) == row_key(y), (x, y)
        if "transaction_id" in x:
            assert ids.setdefault(x["transaction_id"], y["transaction_id"]) == \
                y["transaction_id"], ("an id maps to two ids", x, y)
    assert len(set(ids.values())) == len(ids), "two ids map to one"
    return list(zip(a, b))


def common_prefix(a: str, b: str) -> int:
    x, y = ipaddress.ip_address(a), ipaddress.ip_address(b)
    if x.version != y.version:
        return -1
    bits = 32 if x.version == 4 else 128
    diff = int(x) ^ int(y)
    return bits - diff.bit_length()


def check_address_map(mapping: dict[str, str]):
    assert mapping
    assert len(set(mapping.values())) == len(mapping), "two addresses map to one"
    same = [a for a, b in mapping.items() if a == b]
    assert not same, f"addresses left as they were: {same[:5]}"
    for a, b in mapping.items():
        assert ipaddress.ip_address(a).version == ipaddress.ip_address(b).version
    bad = [(a, b) for a, b in itertools.combinations(sorted(mapping), 2)
           if common_prefix(a, b) != common_prefix(mapping[a], mapping[b])]
    assert not bad, f"{len(bad)} pairs whose common prefix changed, e.g. {bad[:3]}"


def add_pairs(mapping, pairs):
    for plain, anon in pairs:
        if plain is None:
            assert anon is None
            continue
        assert mapping.setdefault(plain, anon) == anon, f"{plain} mapped two ways"


@pytest.fixture(scope="module")
def nfs_pair(tapdeck, keys, tmp_path_factory):
    pcap = nfs_captures(tmp_path_factory)["mixed"]
    base = tmp_path_factory.mktemp("anon-nfs")
    convert_ok(tapdeck, base / "plain", pcap)
    convert_ok(tapdeck, base / "anon", pcap, args=("--key", keys[0], "--anonymize-ips"))
    convert_ok(tapdeck, base / "names", pcap, args=("--key", keys[0]))
    return pcap, base


@pytest.mark.nfs
def test_names_are_encrypted_and_decrypt_back(nfs_pair, tapdeck, keys):
    _pcap, base = nfs_pair
    plain_to_cipher: dict[str, str] = {}
    n = 0
    for t, cols in (("nfs_names", ("name", "to_name")), ("mount", ("dirpath",))):
        for p, a in aligned(table(base / "plain", t), table(base / "anon", t)):
            for c in cols:
                if p[c] is None:
                    assert a[c] is None
                    continue
                n += 1
                assert a[c] != p[c], f"{t}.{c} {p[c]!r} stored in the clear"
                assert plain_to_cipher.setdefault(p[c], a[c]) == a[c], \
                    f"{p[c]!r} encrypted two ways"
    assert n > 300 and len(plain_to_cipher) > 150
    assert len(set(plain_to_cipher.values())) == len(plain_to_cipher), "two names, one cipher"
    assert any(p.startswith("/") for p in plain_to_cipher), "MOUNT paths are included"
    ciphers = sorted(plain_to_cipher.values())
    r = tapdeck("decrypt", "--key", keys[0], input="\n".join(ciphers).encode() + b"\n")
    assert r.returncode == 0, r.describe()
    back = r.stdout.decode().split("\n")[:-1]
    inverse = {c: p for p, c in plain_to_cipher.items()}
    assert back == [inverse[c] for c in ciphers]
    # As arguments too, and with the wrong key: one error line.
    r = tapdeck("decrypt", "--key", keys[0], *ciphers[:3])
    assert r.stdout.decode().split("\n")[:3] == [inverse[c] for c in ciphers[:3]]
    r = tapdeck("decrypt", "--key", keys[1], ciphers[0])
    assert r.returncode != 0
    one_error_line(r.stderr)
    # A key without --anonymize-ips: names encrypted the same way, addresses kept.
    same = aligned(table(base / "anon", "nfs_names"), table(base / "names", "nfs_names"))
    assert all(a["name"] == b["name"] for a, b in same)
    rows = table(base / "names", "rpc")
    assert {r["client_addr"] for r in rows} == {"198.18.7.2"}


@pytest.mark.nfs
def test_rig_addresses_are_mapped(nfs_pair):
    _pcap, base = nfs_pair
    mapping: dict[str, str] = {}
    for t, cols in (("rpc", ("client_addr", "server_addr")), ("nfs_ops", ("client_addr",
                    "server_addr")), ("mount", ("client_addr", "server_addr")),
                    ("packets", ("src_addr", "dst_addr"))):
        for p, a in aligned(table(base / "plain", t), table(base / "anon", t)):
            add_pairs(mapping, ((p[c], a[c]) for c in cols))
    assert {"198.18.7.1", "198.18.7.2"} <= set(mapping)  # and IPv6 multicast (MLD)
    check_address_map(mapping)
    ds = json.loads((base / "anon" / "dataset.json").read_text())
    assert ds["key_id"] and ds["addresses_anonymized"] is True
    raw = (base / "anon" / "dataset.json").read_text()
    assert "198.18.7" not in raw


@pytest.mark.nfs
def test_no_plain_address_in_a_capture_cut_mid_message(tapdeck, keys, tmp_path_factory):
    from convtools import messages, read_pcap_records, write_records

    pcap = nfs_captures(tmp_path_factory)["mixed"]
    msgs = messages(pcap)
    big = next(m for m in msgs if len(m["segments"]) > 20)
    header, recs, _ = read_pcap_records(pcap)
    base = tmp_path_factory.mktemp("anon-cut")
    cut = write_records(base / "cut.pcap", header,
                        recs[:big["segments"][len(big["segments"]) // 2]])
    convert_ok(tapdeck, base / "ds", cut, args=("--key", keys[0], "--anonymize-ips"))
    leaks = [r for r in table(base / "ds", "rpc")
             if r["client_addr"].startswith("198.18.7.") or r["server_addr"].startswith("198.18.7.")]
    assert not leaks, f"{len(leaks)} rpc rows with plain addresses, e.g. {leaks[0]}"


def test_corpus_addresses_keep_their_prefixes(tapdeck, keys, tmp_path):
    """Many IPv4 and IPv6 addresses (the whole tcpdump corpus in one run): the map is one to
    one, no address stays, and every pair keeps its common prefix length."""
    if not TCPDUMP.is_dir():
        pytest.skip(f"corpus {TCPDUMP} absent")
    # The whole corpus, twice: generous time for a loaded 2-core machine.
    convert_ok(tapdeck, tmp_path / "plain", TCPDUMP, timeout=600)
    convert_ok(tapdeck, tmp_path / "anon", TCPDUMP, args=("--key", keys[1], "--anonymize-ips"),
               timeout=600)
    mapping: dict[str, str] = {}
    for p, a in aligned(table(tmp_path / "plain", "packets"), table(tmp_path / "anon",
                                                                     "packets")):
        add_pairs(mapping, ((p["src_addr"], a["src_addr"]), (p["dst_addr"], a["dst_addr"])))
    v4 = [a for a in mapping if ":" not in a]
    v6 = [a for a in mapping if ":" in a]
    assert len(v4) > 400 and len(v6) > 100, (len(v4), len(v6))
    check_address_map(mapping)


def test_another_key_into_the_same_dataset_fails(tapdeck, keys, tmp_path):
    """One dataset, one anonymization: another key, no key, or a key without
    --anonymize-ips (after one with it) is refused with one error line, and nothing of the
    dataset changes."""
    if not TCPDUMP.is_dir():
        pytest.skip(f"corpus {TCPDUMP} absent")
    src = sorted(TCPDUMP.glob("*nfs*.pcap"))[:2]
    ds = tmp_path / "ds"
    convert_ok(tapdeck, ds, src[0], args=("--key", keys[0], "--anonymize-ips"))
    before = {p: p.read_bytes() for p in sorted(ds.rglob("*")) if p.is_file()}
    for args in (("--key", keys[1], "--anonymize-ips"), (), ("--key", keys[0])):
        r, _ = convert(tapdeck, ds, src[1], args=args)
        assert r.returncode == 1, r.describe()
        line = one_error_line(r.stderr)
        assert "anonymization" in line or "key" in line, line
        assert str(ds) in line, line
    after = {p: p.read_bytes() for p in sorted(ds.rglob("*")) if p.is_file()}
    assert before == after, "a refused run changed the dataset"
    r, _ = convert(tapdeck, ds, src[1], args=("--anonymize-ips",))
    assert r.returncode != 0, "--anonymize-ips needs --key"
    r, _ = convert(tapdeck, tmp_path / "other", src[1], args=("--key", tmp_path / "nokey"))
    assert r.returncode == 1
    line = one_error_line(r.stderr)
    assert "keygen" in line, line
    assert not Path(tmp_path / "other" / "dataset.json").exists()
