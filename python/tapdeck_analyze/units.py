"""Numbers as a reader wants them in a one-line finding: bytes in KiB/MiB/GiB, durations in
ms/s/min/h, rates in bit/s with SI prefixes, fractions in percent."""


def size(n: float) -> str:
    """1536 → '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{_num(n)} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def duration(s: float) -> str:
    """0.03 → '30 ms', 7500 → '2.1 h'."""
    a = abs(s)
    if a == 0:
        return "0 s"
    for limit, div, unit in ((1e-3, 1e-6, "µs"), (1, 1e-3, "ms"), (60, 1, "s"),
                             (3600, 60, "min"), (86400, 3600, "h")):  # fmt: skip
        if a < limit:
            return f"{_num(s / div)} {unit}"
    return f"{_num(s / 86400)} d"


def rate(bps: float) -> str:
    """1.5e8 → '150 Mbit/s'."""
    for div, unit in ((1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if abs(bps) >= div:
            return f"{_num(bps / div)} {unit}"
    return f"{bps:.0f} bit/s"


def percent(fraction: float) -> str:
    """0.734 → '73 %'; keeps one decimal where rounding would say 0 % or 100 % wrongly."""
    p = 100 * fraction
    if 0 < p < 1 or 99 < p < 100:
        return f"{p:.1f} %"
    return f"{p:.0f} %"


def _num(x: float) -> str:
    """Three significant digits at most, no trailing zeros: 1.5, 15, 150, 1500."""
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}" if abs(x) >= 1 else f"{x:.2g}"
