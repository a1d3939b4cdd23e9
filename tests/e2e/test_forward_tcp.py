"""IPFIX over TCP and TLS end to end (RFC 7011 §10.4): `tapdeck export --to tcp://…|tls://…`
in one network namespace, `tapdeck collect --listen tcp://…|tls://…` in another, over a veth
pair the test makes and removes.

    netns G (tcpreplay) gen ─veth─ cap  netns E (export -i cap; tcpdump reference)
                                        ipxup 198.18.61.1 ─veth─ ipxdn 198.18.61.2  netns C (collect)

Oracles: the replayed pcap and a tcpdump capture on the exporter's interface (same kernel
timestamps); the exporter's and the collector's counts must agree exactly, since over TCP the
exporter counts only what the collector's host acknowledged. Certificates are made here with
the `openssl` CLI.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

import fwdtools
import pytest
from conftest import QUICK, gen_packets, need, read_packets, run, wait_for, write_pcap
from fwdtools import last_stats, ledger, sh, start_collector, stop

SNAP = 128
PORT = 4739
E_ADDR = "198.18.61.1"
C_ADDR = "198.18.61.2"


class Net(fwdtools.Namespaces):
    """The namespaces and veth pairs of the drawing above (names start with `ipx`)."""

    def __init__(self):
        super().__init__("ipx", ("g", "e", "c"))

    def build(self):
        self.pair(self.ns["g"], "gen", self.ns["e"], "cap", fwdtools.JUMBO)
        self.pair(self.ns["e"], "ipxup", self.ns["c"], "ipxdn", fwdtools.JUMBO)
        self.address(self.ns["e"], "ipxup", f"{E_ADDR}/24")
        self.address(self.ns["c"], "ipxdn", f"{C_ADDR}/24")


@pytest.fixture
def net(procs):
    need("tcpreplay", "tcpdump")
    n = Net()
    yield n
    fwdtools.kill_all(procs)
    n.close()


def openssl(*args, cwd: Path):
    r = run(["openssl", *map(str, args)], timeout=60)
    assert r.returncode == 0, r.describe()


def make_ca(d: Path, name: str):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", d / f"{name}.key", "-out", d / f"{name}.pem", "-days", "2",
            "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def make_leaf(d: Path, name: str, ca: str, ext: str):
    (d / f"{name}.ext").write_text(ext)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", d / f"{name}.key", "-out", d / f"{name}.csr", "-subj", f"/CN={name}",
            cwd=d)
    openssl("x509", "-req", "-in", d / f"{name}.csr", "-CA", d / f"{ca}.pem", "-CAkey",
            d / f"{ca}.key", "-CAcreateserial", "-out", d / f"{name}.pem", "-days", "2",
            "-extfile", d / f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA, the collector's certificate for its address, a client certificate of the CA,
    and a rogue CA with its own client certificate."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI")
    d = tmp_path_factory.mktemp("pki")
    make_ca(d, "ca")
    make_ca(d, "rogue-ca")
    make_leaf(d, "collector", "ca", f"subjectAltName=IP:{C_ADDR}\nbasicConstraints=CA:FALSE\n"
              "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    client = ("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
              "extendedKeyUsage=clientAuth\n")
    make_leaf(d, "exporter", "ca", client)
    make_leaf(d, "rogue", "rogue-ca", client)
    return d


def collector_tls(pki):
    return ["--tls-cert", pki / "collector.pem", "--tls-key", pki / "collector.key",
            "--tls-client-ca", pki / "ca.pem"]


def exporter_tls(pki, who="exporter"):
    return ["--tls-cert", pki / f"{who}.pem", "--tls-key", pki / f"{who}.key", "--tls-ca",
            pki / "ca.pem"]


def stop_collector(p, log: Path) -> str:
    """SIGINT: it closes every connection cleanly (the exporter answers), then exits 0."""
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=QUICK)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"the collector did not stop within {QUICK}s:\n{log.read_text()[-2000:]}")
    text = log.read_text(errors="replace")
    assert p.returncode == 0, text[-2000:]
    assert "panicked" not in text
    return text


def captured(path) -> int:
    try:
        return len(read_packets(path))
    except Exception:  # noqa: BLE001 (a record being written)
        return 0


def stop_reference(dump, ref, n):
    """tcpdump hands over its ring's blocks late: wait until it has written all `n`."""
    wait_for(lambda: captured(ref) >= n, 10, "tcpdump to write every replayed frame")
    dump.send_signal(signal.SIGINT)
    dump.wait(timeout=QUICK)


def replay(net, pcap, pps):
    r = sh("ip", "netns", "exec", net.ns["g"], "tcpreplay", "-q", "-i", "gen", f"--pps={pps}",
           str(pcap), timeout=120)
    assert r.returncode == 0, r.describe()


def stored(tapdeck, store, tmp_path) -> list:
    out = tmp_path / f"{Path(store).name}.pcapng"
    r = tapdeck("extract", store, "-w", out)
    assert r.returncode == 0, r.describe()
    return read_packets(out)


def check_exact(tapdeck, store, tmp_path, ref, final, frames):
    """The store holds exactly the reference capture's packets cut to SNAP, and the
    exporter's acknowledged counts are the collector's."""
    reference = read_packets(ref)
    assert [p.data for p in reference] == [f.data for f in frames], "tcpdump saw the replay"
    want = Counter((p.ts_ns, p.data[:SNAP], p.orig_len) for p in reference)
    got = stored(tapdeck, store, tmp_path)
    assert Counter((p.ts_ns, p.data, p.orig_len) for p in got) == want
    assert tapdeck("verify", store).returncode == 0
    [s] = ledger(store)["streams"]
    [c] = final["collectors"]
    assert s["exporter"] == E_ADDR
    assert (c["packets"], c["records"]) == (s["packets"], s["records"]) == (len(frames), c["records"])
    assert (s["lost"], s["duplicates"], s["malformed"], s["no_template"]) == (0, 0, 0, 0), s
    assert final["observed"] == final["sent"] == len(frames) and final["not_sent"] == 0, final


@pytest.mark.parametrize("scheme", ["tcp", "tls"])
def test_stream_forwarding_stores_exactly_what_was_sent(tapdeck, net, procs, tmp_path, pki,
                                                         scheme):
    """Every replayed frame reaches the store as its first 128 bytes with its kernel
    timestamp and length; the exporter's acknowledged packet and record counts equal the
    collector's ledger, and nothing is left unaccounted."""
    frames = gen_packets(3000, seed=61)
    src = write_pcap(tmp_path / "frames.pcap", frames)
    store = tmp_path / "store"
    clog = tmp_path / "collector.log"
    tls_c = collector_tls(pki) if scheme == "tls" else []
    tls_e = exporter_tls(pki) if scheme == "tls" else []
    col = start_collector(tapdeck, net, "c", f"{scheme}://{C_ADDR}:{PORT}", store, procs,
                          "--allow", E_ADDR, *tls_c, log=clog)
    ref = tmp_path / "ref.pcap"
    dump = net.tcpdump("e", tmp_path / "cap.log", "-i", "cap", "-s", "0", "-U",
                       "--time-stamp-precision", "nano", "-w", ref)
    procs.append(dump)
    stats = tmp_path / "export.jsonl"
    exp = fwdtools.start_exporter(tapdeck, net, stats, procs, str(SNAP), "--to",
                                  f"{scheme}://{C_ADDR}:{PORT}", *tls_e)
    wait_for(lambda: last_stats(stats)["collectors"][0]["connects"] == 1, 10,
             "the exporter to connect")
    replay(net, src, 3000)
    wait_for(lambda: last_stats(stats)["sent"] >= len(frames), 20,
             "the collector to acknowledge every packet")
    err = stop(exp)
    assert "accounting: observed = sent + not sent holds" in err, err
    final = last_stats(stats)
    stop_reference(dump, ref, len(frames))
    stop_collector(col, clog)
    check_exact(tapdeck, store, tmp_path, ref, final, frames)
    assert final["collectors"][0]["connects"] == 1
    assert final["collectors"][0]["disconnects"] == 0


@pytest.mark.parametrize("scheme", ["tcp", "tls"])
def test_collector_restart_loses_nothing_within_the_buffer(tapdeck, net, procs, tmp_path, pki,
                                                           scheme):
    """The collector stops between two halves of a replay and starts again later on the same
    store: the exporter queues the second half meanwhile (well within --buffer), reconnects
    and sends it; the store holds every packet exactly once and the counts still agree."""
    frames = gen_packets(4000, seed=62)
    half = len(frames) // 2
    first = write_pcap(tmp_path / "first.pcap", frames[:half])
    second = write_pcap(tmp_path / "second.pcap", frames[half:])
    store = tmp_path / "store"
    clog = tmp_path / "collector.log"
    tls_c = collector_tls(pki) if scheme == "tls" else []
    tls_e = exporter_tls(pki) if scheme == "tls" else []
    col = start_collector(tapdeck, net, "c", f"{scheme}://{C_ADDR}:{PORT}", store, procs,
                          *tls_c, log=clog)
    ref = tmp_path / "ref.pcap"
    dump = net.tcpdump("e", tmp_path / "cap.log", "-i", "cap", "-s", "0", "-U",
                       "--time-stamp-precision", "nano", "-w", ref)
    procs.append(dump)
    stats = tmp_path / "export.jsonl"
    exp = fwdtools.start_exporter(tapdeck, net, stats, procs, str(SNAP), "--to",
                                  f"{scheme}://{C_ADDR}:{PORT}", "--buffer", "8MiB", *tls_e)
    replay(net, first, 4000)
    wait_for(lambda: last_stats(stats)["sent"] >= half, 20, "the first half acknowledged")
    stop_collector(col, clog)

    def link_down():
        c = last_stats(stats)["collectors"][0]
        return c["disconnects"] >= 1 and c["connects"] == c["disconnects"]

    # A late reconnect can reach the stopping collector's listener before it closes, and
    # dies with it: the link counts as down once every connection it made has ended.
    wait_for(link_down, 10, "the exporter to see the collector's close (no live connection)")
    replay(net, second, 4000)
    wait_for(lambda: last_stats(stats)["observed"] >= len(frames), 20,
             "the exporter to read the second half")
    s = last_stats(stats)
    assert s["sent"] == half and s["buffered"] == len(frames) - half, s
    col = start_collector(tapdeck, net, "c", f"{scheme}://{C_ADDR}:{PORT}", store, procs,
                          *tls_c, log=clog)
    wait_for(lambda: last_stats(stats)["sent"] >= len(frames), 30,
             "the queued half acknowledged after the restart")
    err = stop(exp)
    assert "accounting: observed = sent + not sent holds" in err, err
    final = last_stats(stats)
    stop_reference(dump, ref, len(frames))
    stop_collector(col, clog)
    c = final["collectors"][0]
    # One connection per collector run, plus any the dying listener took (each ended).
    assert c["connects"] == c["disconnects"] + 1 and c["disconnects"] >= 1, c
    assert (c["over_buffer"], c["unconfirmed"]) == (0, 0), c
    check_exact(tapdeck, store, tmp_path, ref, final, frames)


def test_tls_without_a_trusted_client_certificate_is_refused(tapdeck, net, procs, tmp_path,
                                                             pki):
    """An exporter whose certificate another CA signed, and a client with no certificate at
    all, fail the handshake: nothing is stored, the exporter counts nothing as sent, and the
    collector counts the refusals and logs them once per address."""
    store = tmp_path / "store"
    clog = tmp_path / "collector.log"
    col = start_collector(tapdeck, net, "c", f"tls://{C_ADDR}:{PORT}", store, procs,
                          *collector_tls(pki), log=clog)
    frames = gen_packets(200, seed=63)
    src = write_pcap(tmp_path / "frames.pcap", frames)
    stats = tmp_path / "export.jsonl"
    exp = fwdtools.start_exporter(tapdeck, net, stats, procs, str(SNAP), "--to",
                                  f"tls://{C_ADDR}:{PORT}", *exporter_tls(pki, "rogue"))
    replay(net, src, 2000)
    wait_for(lambda: last_stats(stats)["observed"] >= len(frames), 10, "the exporter to read")

    def handshakes():
        try:
            return ledger(store).get("refused", {}).get(E_ADDR, {}).get("handshakes", 0)
        except (FileNotFoundError, ValueError):
            return 0

    # The exporter retries with backoff: several refusals, one log line.
    wait_for(lambda: handshakes() >= 3, 15, "the collector to refuse three handshakes")
    # A client with no certificate at all (openssl, from the exporter's namespace).
    before = handshakes()
    r = sh("ip", "netns", "exec", net.ns["e"], "openssl", "s_client", "-connect",
           f"{C_ADDR}:{PORT}", "-CAfile", pki / "ca.pem", "-quiet", check=False)
    wait_for(lambda: handshakes() > before, 10, "the certificate-less client to be refused")
    err = stop(exp)
    final = last_stats(stats)
    assert final["sent"] == 0 and final["observed"] == len(frames), final
    assert final["not_sent"] == len(frames), "what never reached the collector is not sent"
    text = stop_collector(col, clog)
    assert text.count(f"TLS handshake with {E_ADDR}") == 1, text
    assert ledger(store)["streams"] == []
    assert stored(tapdeck, store, tmp_path) == []
    assert "connection lost" in err or "cannot connect" in err or "refused" in err, err
    del r


def test_bad_transport_settings_are_one_line_errors(tapdeck, pki, tmp_path):
    """Every wrong combination of transport and TLS options, and a file that is not what its
    option needs, is refused at start in one line naming the option (no namespace needed:
    nothing is opened before the check)."""
    from conftest import one_error_line
    store = tmp_path / "store"
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cases = [
        (["collect", "--listen", "tls://127.0.0.1:0", "--store", store], "--tls-cert is missing"),
        (["collect", "--listen", "127.0.0.1:0", "--store", store, "--tls-cert",
          pki / "collector.pem"], "--tls-cert is for TLS"),
        (["collect", "--listen", "sctp://127.0.0.1:0", "--store", store], "unknown transport"),
        (["collect", "--listen", "tcp://127.0.0.1:0", "--store", store, "--sockets", "2"],
         "--sockets is for UDP"),
        (["collect", "--listen", "tls://127.0.0.1:0", "--store", store, "--tls-cert", junk,
          "--tls-key", pki / "collector.key", "--tls-client-ca", pki / "ca.pem"],
         f"--tls-cert {junk}"),
        (["collect", "--listen", "tls://127.0.0.1:0", "--store", store, "--tls-cert",
          pki / "collector.pem", "--tls-key", pki / "exporter.key", "--tls-client-ca",
          pki / "ca.pem"], "is not the key of the certificate"),
        (["export", "-i", "lo", "--to", "tls://127.0.0.1:9", "--tls-cert", pki / "exporter.pem",
          "--tls-key", pki / "exporter.key"], "--tls-ca is missing"),
        (["export", "-i", "lo", "--to", "tcp://127.0.0.1:9", "--to", "127.0.0.1:9"],
         "the same transport"),
        (["export", "-i", "lo", "--to", "127.0.0.1:9", "--tls-ca", pki / "ca.pem"],
         "--tls-ca is for TLS"),
        (["export", "-i", "lo", "--to", "tcp://127.0.0.1:9", "--mtu", "1500"],
         "--mtu is for UDP"),
    ]
    for args, want in cases:
        r = tapdeck(*args)
        assert r.returncode != 0, args
        line = one_error_line(r.stderr)
        assert want in line, (args, line)
