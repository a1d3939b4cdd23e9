#!/usr/bin/env python3
"""Makes a capture of real NLM v4 and NSM traffic (root):

    tests/nfs/make_nlm_capture.py OUT.pcap

The rig (README.md) with nfs-ganesha's lock manager on (Enable_NLM) and rpc.statd beside it in
the server namespace; nlm_client.py (libnfs's NLM and NSM clients) takes, tests, conflicts
with and releases locks on a file of the export, then asks statd STAT, MON and NOTIFY.
tests/captures/nlm_v4.pcap was made with it (see the README there).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nfs import rig as rigmod  # noqa: E402
from nfs.rig import NfsRig, RigError, unavailable_reason  # noqa: E402

# The rig's server script with rpc.statd started after rpcbind (ganesha's lock manager asks
# it to monitor each client before it grants a lock).
STATD_SCRIPT = rigmod.SERVER_SCRIPT.replace(
    "ganesha.nfsd -F",
    'mkdir -p "$W/statd/sm" "$W/statd/sm.bak" && rpc.statd -F -d -L -P "$W/statd" -n tdnlm-server 2> "$W/statd.log" &\n'
    'echo $! > "$W/statd.pid"\nganesha.nfsd -F', 1)


class NlmRig(NfsRig):
    def _make_dirs(self) -> None:
        super()._make_dirs()
        conf = self.workdir / "ganesha.conf"
        conf.write_text(conf.read_text().replace("Enable_NLM = false;", "Enable_NLM = true;"))

    def _start_server(self) -> None:
        saved = rigmod.SERVER_SCRIPT
        rigmod.SERVER_SCRIPT = STATD_SCRIPT
        try:
            super()._start_server()
        finally:
            rigmod.SERVER_SCRIPT = saved

    def close(self) -> None:
        pid = self._pid("statd.pid")
        if pid and self._server is not None:
            rigmod._kill_pids([pid])
        super().close()


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1]).resolve()
    reason = unavailable_reason()
    if reason:
        print(f"make_nlm_capture: {reason}", file=sys.stderr)
        return 2
    client = Path(__file__).with_name("nlm_client.py")
    try:
        with tempfile.TemporaryDirectory(prefix="tdnlm-") as tmp:
            with NlmRig(Path(tmp)) as rig:
                with rig.capture(out):
                    r = rig.run("python3", str(client), rig.server_ip, "/export", check=False,
                                timeout=60)
                print(r.stdout.decode(), end="")
                if r.returncode:
                    print(r.describe(), file=sys.stderr)
                    print(rig.server_log_tail(), file=sys.stderr)
                    print((Path(tmp) / "statd.log").read_text(errors="replace")[-3000:],
                          file=sys.stderr)
                    return 1
    except RigError as e:
        print(f"make_nlm_capture: {e}", file=sys.stderr)
        return 1
    subprocess.run(["tshark", "-n", "-r", str(out), "-Y", "nlm || stat"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
