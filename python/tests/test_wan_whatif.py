"""wan_whatif against a computation written here in plain Python over the dataset's Parquet
files, on conftest's `file_workload` (v2, v3, v4; retransmitted and unanswered calls, a
client with one call, packets between other hosts, an empty minute, a heavy minute), with
the bandwidth and round trip given as the CLI gives them; bad options are one line."""

import json
import subprocess
import sys
from collections import defaultdict

import pytest
from conftest import MS, ONE_ACCESS_CLIENT, S, assert_rows, parquet_rows
from datasetbuilder import T0, DatasetBuilder

from tapdeck_analyze import wan_whatif
from tapdeck_analyze.cli import main
from tapdeck_analyze.errors import DatasetError
from tapdeck_analyze.wan_whatif import parse_bandwidth, per_client, per_minute, per_operation

MINUTE = 60 * S


def expected(path, bps: int, rtt_ns: int) -> dict[str, list[dict]]:
    rpc = parquet_rows(path, "rpc")
    servers = {r["server_addr"] for r in rpc if r["server_addr"] is not None}
    packets = parquet_rows(path, "packets")
    minutes = defaultdict(lambda: [0, 0])
    for p in packets:
        m = p["time_ns"] // MINUTE * MINUTE
        if p["dst_addr"] in servers:
            minutes[m][0] += p["wire_len"]
        if p["src_addr"] in servers:
            minutes[m][1] += p["wire_len"]
    first = min(p["time_ns"] for p in packets) // MINUTE
    span_minutes = max(p["time_ns"] for p in packets) // MINUTE - first + 1
    per_min = [dict(minute_start_ns=m, to_server_bytes=to, from_server_bytes=frm,
                    demand_bps=max(to, frm) * 8 / 60, utilization=max(to, frm) * 8 / (60 * bps),
                    over_capacity=max(to, frm) * 8 > bps * 60)
               for m, (to, frm) in sorted(minutes.items())]  # fmt: skip

    calls = [r for r in rpc if r["direction"] == "call" and not r["retransmit"]]
    reply = {r["transaction_id"]: r["time_ns"] for r in rpc
             if r["direction"] == "reply" and r["matched"] and not r["retransmit"]}  # fmt: skip
    clients = defaultdict(list)
    for c in calls:
        clients[c["client_addr"]].append(c)
    per_cl = []
    for addr, cs in clients.items():
        start = min(c["time_ns"] for c in cs)
        end = max([c["time_ns"] for c in cs] + [reply[c["transaction_id"]] for c in cs
                                                if c["transaction_id"] in reply])  # fmt: skip
        span, added = end - start, len(cs) * rtt_ns
        per_cl.append(dict(client_addr=addr, calls=len(cs), span_s=span / 1e9,
                           added_s=added / 1e9, whatif_span_s=(span + added) / 1e9,
                           slowdown=(span + added) / span if span else None))  # fmt: skip
    per_cl.sort(key=lambda r: (-r["calls"], r["client_addr"]))

    ops = defaultdict(list)
    for c in calls:
        key = (c["program_name"], c["version"], c["procedure_name"])
        t = c["transaction_id"]
        ops[key].append(reply[t] - c["time_ns"] if t in reply else None)
    per_op = []
    for (prog, version, op), lat in ops.items():
        known = [x for x in lat if x is not None]
        mean = sum(known) / len(known) if known else None
        per_op.append(dict(
            program_name=prog, version=version, operation=op, calls=len(lat),
            answered=len(known), mean_latency_s=None if mean is None else mean / 1e9,
            added_s=len(lat) * rtt_ns / 1e9,
            whatif_mean_latency_s=None if mean is None else (mean + rtt_ns) / 1e9,
            latency_factor=(mean + rtt_ns) / mean if mean else None,
        ))  # fmt: skip
    per_op.sort(key=lambda r: (-r["calls"], r["program_name"], r["version"], r["operation"]))

    demand = [max(to, frm) for to, frm in minutes.values()]
    over = sum(1 for r in per_min if r["over_capacity"])
    slowdowns = [r["slowdown"] for r in per_cl if r["slowdown"] is not None]
    summary = dict(
        bandwidth_bps=bps, added_rtt_s=rtt_ns / 1e9, minutes=span_minutes,
        minutes_over_capacity=over, over_capacity_fraction=over / span_minutes,
        peak_demand_bps=max(demand) * 8 / 60, mean_demand_bps=sum(demand) * 8 / (span_minutes * 60),
        calls=len(calls), clients=len(clients), added_s=len(calls) * rtt_ns / 1e9,
        max_client_added_s=max(r["calls"] for r in per_cl) * rtt_ns / 1e9,
        max_client_slowdown=max(slowdowns),
    )  # fmt: skip
    return dict(summary=[summary], per_minute=per_min, per_client=per_cl, per_operation=per_op)


@pytest.mark.parametrize("bandwidth, bps, rtt, rtt_ns", [
    ("20kbit/s", 20_000, "30ms", 30 * MS),
    ("1.5Gbps", 1_500_000_000, "250us", 250_000),
])  # fmt: skip
def test_wan_whatif_equals_an_independent_computation(files_path, files_ds, bandwidth, bps,
                                                      rtt, rtt_ns):  # fmt: skip
    want = expected(files_path, bps, rtt_ns)
    opts = dict(bandwidth=bandwidth, rtt=rtt)
    assert_rows(wan_whatif(files_ds, **opts), want["summary"])
    assert_rows(per_minute(files_ds, **opts), want["per_minute"])
    assert_rows(per_client(files_ds, **opts), want["per_client"])
    assert_rows(per_operation(files_ds, **opts), want["per_operation"])
    s = want["summary"][0]
    # the fixture's edges: a minute with no traffic, traffic between other hosts left out, NFSv2,
    # v3 and v4 calls, and (at 20 kbit/s) some minutes over capacity and some not
    assert s["minutes"] > len(want["per_minute"])
    assert sum(r["to_server_bytes"] for r in want["per_minute"]) < sum(
        p["wire_len"] for p in parquet_rows(files_path, "packets"))  # fmt: skip
    assert {r["version"] for r in want["per_operation"]} == {2, 3, 4}
    if bps == 20_000:
        assert 0 < s["minutes_over_capacity"] < s["minutes"]
    one = [r for r in want["per_client"] if r["client_addr"] == ONE_ACCESS_CLIENT]
    assert one[0]["calls"] == 1 and one[0]["slowdown"] == pytest.approx(
        (2 * MS + rtt_ns) / (2 * MS)
    )


def test_unanswered_single_call_has_no_slowdown(tmp_path):
    b = DatasetBuilder()
    b.nfs(T0, None, op="GETATTR", version=2, transport="udp")
    b.nfs(T0 + S, T0 + S + 4 * MS, op="GETATTR", client="10.0.0.3")
    rows = {
        r["client_addr"]: r for r in per_client(b.write(tmp_path / "ds"), rtt="1ms").to_pylist()
    }
    assert rows["10.0.0.1"]["span_s"] == 0 and rows["10.0.0.1"]["slowdown"] is None
    assert rows["10.0.0.3"]["slowdown"] == pytest.approx(5 / 4)


def test_parse_bandwidth():
    assert parse_bandwidth("100Mbit/s") == 100_000_000
    assert parse_bandwidth("1.5Gbps") == 1_500_000_000
    assert parse_bandwidth("512kbit/s") == 512_000
    assert parse_bandwidth("2000") == 2000
    assert parse_bandwidth(" 10 Gbit ") == 10_000_000_000
    for bad in ("fast", "10MB/s", "0", "-5Mbit/s", "1.5.2G", ""):
        with pytest.raises(DatasetError, match="--bandwidth"):
            parse_bandwidth(bad)


def test_cli_options_reach_the_main_table_and_the_parts(files_path, capsysbinary):
    args = ["run", "wan_whatif", str(files_path), "--bandwidth", "2Mbit/s", "--rtt", "5ms",
            "--format", "json"]  # fmt: skip
    assert main(args) == 0
    row = json.loads(capsysbinary.readouterr().out)
    assert (row["bandwidth_bps"], row["added_rtt_s"]) == (2_000_000, 0.005)
    assert main(args + ["--part", "per_client"]) == 0
    rows = [json.loads(line) for line in capsysbinary.readouterr().out.splitlines()]
    assert all(r["added_s"] == pytest.approx(r["calls"] * 0.005) for r in rows)
    assert main(args + ["--part", "per_minute"]) == 0
    rows = [json.loads(line) for line in capsysbinary.readouterr().out.splitlines()]
    assert all(r["utilization"] == pytest.approx(r["demand_bps"] / 2e6) for r in rows)


@pytest.mark.parametrize("option, value", [("--bandwidth", "fast"), ("--bandwidth", "10MB/s"),
                                           ("--rtt", "soon"), ("--rtt", "-1ms")])  # fmt: skip
def test_bad_options_are_one_line(files_path, option, value):
    r = subprocess.run([sys.executable, "-m", "tapdeck_analyze.cli", "run", "wan_whatif",
                        str(files_path), f"{option}={value}"], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2, r
    assert len(r.stderr.strip().splitlines()) == 1 and option in r.stderr, r.stderr
