#!/usr/bin/env python3
"""Makes a capture of real NFS traffic in one command (root):

    tests/nfs/make_capture.py OUT.pcap [--workload v3|v4|mixed] [--tool tcpdump|tapdeck]

Starts the rig (see README.md), runs the workload while capturing the veth, checks the
workload's outcomes, prints the NFS operation counts tshark finds, and removes the rig.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nfs import oracle  # noqa: E402
from nfs.rig import NfsRig, RigError, unavailable_reason  # noqa: E402
from nfs.workloads import KINDS  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="capture file to write")
    ap.add_argument("--workload", choices=KINDS, default="mixed")
    ap.add_argument("--tool", choices=("tcpdump", "tapdeck"), default="tcpdump",
                    help="recorder: tcpdump (pcap) or $TAPDECK_BIN record (pcapng)")
    ap.add_argument("--snaplen", type=int, default=0, help="bytes kept per packet (0: all)")
    ap.add_argument("--seed", type=int, default=7, help="seed of the file contents")
    ap.add_argument("--no-counts", action="store_true", help="skip the tshark summary")
    args = ap.parse_args()
    reason = unavailable_reason()
    if reason:
        print(f"make_capture: {reason}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="tdnfs-") as tmp:
            with NfsRig(Path(tmp)) as rig:
                with rig.capture(args.out, tool=args.tool, snaplen=args.snaplen):
                    result = rig.workload(args.workload, seed=args.seed)
    except RigError as e:
        print(f"make_capture: {e}", file=sys.stderr)
        return 1
    print(f"make_capture: {args.out}: workload {args.workload}, {len(result.steps)} client "
          f"commands, {time.monotonic() - t0:.1f} s", file=sys.stderr)
    if not args.no_counts:
        msgs = oracle.rpc_messages(args.out)
        print(json.dumps({"messages": len(msgs), "unmatched": len(oracle.unmatched(msgs)),
                          "calls": dict(sorted(oracle.op_counts(msgs).items()))}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
