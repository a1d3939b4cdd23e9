"""The `tapdeck-analyze` command: a thin layer over the analysis functions."""

import argparse
import sys

from . import output
from .analyses import ANALYSES
from .engine import QueryError
from .errors import DatasetError, IncompleteDatasetError
from .opening import open_dataset
from .times import TimeFormatError, zone
from .wan_whatif import DEFAULT_BANDWIDTH, DEFAULT_RTT

PROG = "tapdeck-analyze"

# The convention `tapdeck` follows too. The dataset and the time range are arguments: one that
# names nothing analyzable (no dataset, a newer schema, an empty range) is a usage error.
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_STATUS = (
    "Exit status: 0 ok, 1 failure (a query failed, the dataset's conversion is unfinished), "
    "2 usage error (unknown, missing or malformed arguments, or a DATASET or time range "
    "that holds nothing to analyze)."
)


def _common(p: argparse.ArgumentParser, engine: bool = True) -> None:
    p.add_argument(
        "dataset", metavar="DATASET", help="the dataset directory (tapdeck convert --out)"
    )
    p.add_argument(
        "--start",
        metavar="TIME",
        help="first time to include: RFC 3339 (2026-11-23T05:57:34.5Z) or epoch seconds",
    )
    p.add_argument("--end", metavar="TIME", help="times at or after this are left out")
    p.add_argument("--client", metavar="ADDR", help="only RPCs from this client (and its packets)")
    p.add_argument("--server", metavar="ADDR", help="only RPCs to this server (and its packets)")
    p.add_argument("--op", metavar="NAME", help="only this NFS operation, e.g. READ")
    p.add_argument("--tz", metavar="ZONE", help="time zone for displayed times (default UTC)")
    p.add_argument("--key", metavar="KEYFILE",
                   help="the key file of `tapdeck convert --key`: files shows names decrypted")  # fmt: skip
    p.add_argument("--allow-incomplete", action="store_true",
                   help="analyze a dataset whose conversion has not finished (with a warning)")  # fmt: skip
    if engine:
        p.add_argument("--engine", choices=["duckdb", "spark"], default="duckdb")
        p.add_argument("--master", metavar="URL", help="Spark master (default local[2])")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Analyses of a tapdeck dataset (packets, RPC and NFS tables in Parquet): "
        "rates, burstiness, sizes, NFS latency and operations, RPC matching, files, recency, "
        "file sizes and ages, sequentiality, top talkers and files, a WAN what-if.",
        epilog=EXIT_STATUS,
    )
    sub = ap.add_subparsers(dest="command", required=True)

    rp = sub.add_parser(
        "report", help="run every analysis; write tables, plots and report.html", epilog=EXIT_STATUS
    )
    _common(rp)
    rp.add_argument("--out", required=True, metavar="DIR", help="directory for the report")

    run = sub.add_parser("run", help="run one analysis and print its table", epilog=EXIT_STATUS)
    run.add_argument("name", choices=sorted(ANALYSES), metavar="NAME",
                     help="one of: " + ", ".join(ANALYSES))  # fmt: skip
    _common(run)
    run.add_argument("--part", metavar="PART",
                     help="another table of the analysis, e.g. sizes --part protocols")  # fmt: skip
    run.add_argument("--format", choices=["table", "csv", "json", "parquet"], default="table")
    run.add_argument("--sample", default="1min", help="rates: sample length (100us … 1h)")
    run.add_argument("--window", default="1h", help="rates: window over which samples summarise")
    run.add_argument("--align", choices=["epoch", "first"], default="epoch",
                     help="rates: intervals start at epoch multiples or the first packet")  # fmt: skip
    run.add_argument("--by", choices=["interface", "direction", "interface,direction"],
                     help="rates: one series per interface, direction (in, out, or unknown) "
                          "or both")  # fmt: skip
    run.add_argument("--bandwidth", default=DEFAULT_BANDWIDTH, metavar="RATE",
                     help="wan_whatif: link bandwidth, e.g. 100Mbit/s, 1.5Gbit/s "
                          f"(default {DEFAULT_BANDWIDTH})")  # fmt: skip
    run.add_argument("--rtt", default=DEFAULT_RTT, metavar="DURATION",
                     help=f"wan_whatif: round-trip time the link adds, e.g. 30ms (default {DEFAULT_RTT})")  # fmt: skip

    sq = sub.add_parser(
        "sql", help="ad-hoc SQL over the dataset's tables (as views)", epilog=EXIT_STATUS
    )
    _common(sq)
    sq.add_argument("query", metavar="SQL")
    sq.add_argument("--format", choices=["table", "csv", "json", "parquet"], default="table")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        tz = zone(args.tz)
        ds = open_dataset(
            args.dataset,
            start=args.start,
            end=args.end,
            client=args.client,
            server=args.server,
            op=args.op,
            engine=args.engine,
            master=args.master,
            require_packets=args.command != "sql",
            key=args.key,
            allow_incomplete=args.allow_incomplete,
        )
        if ds.incomplete:
            print(f"{PROG}: WARNING: {ds.incomplete}; the results leave those sources out",
                  file=sys.stderr)  # fmt: skip
        if args.command == "report":
            from .report import write_report

            path = write_report(ds, args.out, tz=tz, progress=sys.stderr.isatty())
            print(path)
        elif args.command == "run":
            table = _run(ds, args)
            output.write(table, args.format, sys.stdout.buffer, tz)
        else:
            table = ds.query(args.query)
            output.write(table, args.format, sys.stdout.buffer, tz)
    except IncompleteDatasetError as e:
        # not a usage error: the dataset is valid, only not finished yet
        print(f"{PROG}: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except (DatasetError, TimeFormatError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except QueryError as e:
        print(f"{PROG}: query failed: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except BrokenPipeError:
        return EXIT_OK
    return EXIT_OK


def _run(ds, args):
    analysis = ANALYSES[args.name]
    if args.part:
        if args.part not in analysis.parts:
            parts = ", ".join(analysis.parts) or "none"
            raise DatasetError(f"{args.name} has no part '{args.part}' (parts: {parts})")
    options = {o: getattr(args, o) for o in analysis.options}
    if args.part:
        return analysis.parts[args.part](ds, **options)
    return analysis.main(ds, **options)


if __name__ == "__main__":
    sys.exit(main())
