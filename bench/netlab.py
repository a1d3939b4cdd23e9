"""Network namespaces and veth pairs for the live benchmarks (capture.py, multihost.py).

A Lab remembers every namespace and root-namespace link it made, so that `close()` removes
exactly those, also after an exception or a signal. Every link is set up the same way: IPv6
off (no router solicitations or DAD frames: only the generator's frames cross it), the MTU
given, GRO/GSO/TSO off (otherwise the kernel merges segments and the stored frames
never crossed the wire), with a warning when an offload stays on.
"""

import json
import re
import subprocess
import sys

OFFLOADS = (
    "generic-receive-offload",
    "large-receive-offload",
    "tcp-segmentation-offload",
    "generic-segmentation-offload",
)


def sh(cmd, check=True, **kw):
    p = subprocess.run(
        [str(c) for c in cmd], check=False, capture_output=True, text=True, **kw
    )
    if check and p.returncode != 0:
        raise RuntimeError(
            f"{' '.join(map(str, cmd))} failed ({p.returncode}): {p.stderr.strip()[-1500:]}"
        )
    return p


def in_ns(ns):
    """Command prefix that runs in namespace `ns` (None: the root namespace)."""
    return ["ip", "netns", "exec", ns] if ns else []


def netns_arg(ns):
    return ["netns", ns] if ns else []


class Lab:
    def __init__(self):
        self.namespaces = []
        self.root_links = []

    def add_ns(self, name):
        sh(["ip", "netns", "add", name])
        self.namespaces.append(name)
        sh(
            in_ns(name)
            + [
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
            check=False,
        )
        sh(["ip", "-n", name, "link", "set", "lo", "up"])
        return name

    def pair(self, a_ns, a, b_ns, b, mtu=1500):
        """A veth pair a <-> b, each end made directly in its namespace (None: root)."""
        sh(
            [
                "ip",
                "link",
                "add",
                a,
                *netns_arg(a_ns),
                "type",
                "veth",
                "peer",
                "name",
                b,
                *netns_arg(b_ns),
            ]
        )
        self.root_links += [dev for ns, dev in ((a_ns, a), (b_ns, b)) if ns is None]
        for ns, dev in ((a_ns, a), (b_ns, b)):
            sh(
                in_ns(ns) + ["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"],
                check=False,
            )
            sh(in_ns(ns) + ["ip", "link", "set", dev, "mtu", str(mtu), "up"])
            sh(
                in_ns(ns)
                # tx-udp-segmentation off too, as on a NIC without USO: an exporter's UDP
                # GSO buffer is cut into datagrams at its device (its own cost), not carried
                # whole to the collector's namespace.
                + ["ethtool", "-K", dev, "gro", "off", "gso", "off", "tso", "off",
                   "tx-udp-segmentation", "off"],
                check=False,
            )
            feats = sh(in_ns(ns) + ["ethtool", "-k", dev]).stdout
            on = [f for f in OFFLOADS if re.search(rf"^{f}: on", feats, re.MULTILINE)]
            if on:
                print(
                    f"netlab: warning: {dev} still has {', '.join(on)} on",
                    file=sys.stderr,
                    flush=True,
                )

    def address(self, ns, dev, cidr):
        sh(in_ns(ns) + ["ip", "addr", "add", cidr, "dev", dev])

    def nft(self, ns, rules):
        sh(in_ns(ns) + ["nft", "-f", "-"], input=rules)

    def rx(self, ns, dev):
        """The link's receive counters: {"packets": …, "dropped": …, …}."""
        out = sh(in_ns(ns) + ["ip", "-s", "-j", "link", "show", "dev", dev]).stdout
        return json.loads(out)[0]["stats64"]["rx"]

    def close(self):
        """Removes what this lab made (a namespace takes its veth ends and their peers along)."""
        for dev in self.root_links:
            sh(["ip", "link", "del", dev], check=False)
        for ns in reversed(self.namespaces):
            sh(["ip", "netns", "del", ns], check=False)
        self.root_links, self.namespaces = [], []
