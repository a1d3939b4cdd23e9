"""Numbers as a reader reads them: bytes in KiB/MiB/GiB, durations in µs/ms/s/min/h, rates in
bit/s with SI prefixes and packets/s, fractions in percent, 64-bit ids as hex, counts with
thousands separators; never in exponent notation.

`size`, `duration`, `rate` and `percent` word the one-line findings (headlines); `column_value`
formats a result column by its name (the analyses name their columns by unit: `_ns`, `_s`,
`_bps`, `_pps`, `bytes`, `share`, …), so any analysis' table, a new one included, is shown in
human units without code of its own."""

import datetime as dt

from .times import format_time


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
    for limit, div, unit in ((1e-6, 1e-9, "ns"), (1e-3, 1e-6, "µs"), (1, 1e-3, "ms"),
                             (60, 1, "s"), (3600, 60, "min"), (86400, 3600, "h")):  # fmt: skip
        if a < limit:
            return f"{_num(s / div)} {unit}"
    return f"{_num(s / 86400)} d"


def rate(bps: float) -> str:
    """1.5e8 → '150 Mbit/s'."""
    for div, unit in ((1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if abs(bps) >= div:
            return f"{_num(bps / div)} {unit}"
    return f"{bps:.0f} bit/s" if abs(bps) >= 1 or bps == 0 else f"{number(bps)} bit/s"


def packet_rate(pps: float) -> str:
    """1234.5 → '1,234 packets/s'."""
    return f"{number(pps)} packets/s"


def percent(fraction: float) -> str:
    """0.734 → '73 %'; keeps decimals where rounding would say 0 % or 100 % wrongly."""
    p = 100 * fraction
    if 0 < p < 1:
        return f"{number(p)} %"
    if 99 < p < 100:
        return f"{p:.1f} %"
    return f"{p:.0f} %"


def count(n) -> str:
    return f"{n:,}"


def counted(n: int, one: str, many: str | None = None) -> str:
    """3, 'call' → '3 calls'; 1, 'reply', 'replies' → '1 reply'."""
    return f"{count(n)} {one if n == 1 else many or one + 's'}"


def number(v: float) -> str:
    """Three significant digits, never in exponent notation: 0.00239, 4.22, 1,234, 42,200,000;
    below 0.001 only that it is."""
    if v == 0:
        return "0"
    if abs(v) < 0.001:
        return "< 0.001" if v > 0 else "> -0.001"
    r = float(f"{v:.3g}")
    return f"{r:,.0f}" if abs(r) >= 1000 else f"{r:f}".rstrip("0").rstrip(".")


def hex_id(v: int) -> str:
    """A 64-bit id (a hash stored as a signed int64) as 16 hex digits, never negative."""
    return f"{v & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def _num(x: float) -> str:
    """Three significant digits at most, no trailing zeros: 1.5, 15, 150, 1500."""
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) < 0.01:
        return number(x)
    return f"{x:.3g}" if abs(x) >= 1 else f"{x:.2g}"


# 64-bit hashes, shown as hex; and numbers that are names, not amounts (no separators).
_ID_COLUMNS = ("transaction_id", "flow_id", "xid")
_LABELS = ("port", "version", "status", "protocol", "interface", "file_id", "link_type", "vlan",
           "rank", "op_index", "program", "procedure", "uid", "gid", "stream", "seq")  # fmt: skip


def _is_instant(name: str) -> bool:
    if not name.endswith("_ns"):
        return False
    return name == "time_ns" or any(w in name for w in ("start", "first", "last", "access", "end"))


def column_value(name: str, value, tz: dt.tzinfo = dt.timezone.utc, time_digits: int = 3) -> str:
    """`value` of column `name` in human units."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if _is_instant(name) and isinstance(value, int):
            return format_time(value, tz, time_digits)
        if name in _ID_COLUMNS or name.endswith("_id") and abs(value) >= 2**31:
            return hex_id(int(value))
        if name.endswith("_ns"):
            return duration(value / 1e9)
        if name.endswith("_s"):
            return duration(value)
        if name.endswith("_bps"):
            return rate(value)
        if name.endswith("_pps"):
            return packet_rate(value)
        if name in ("wire_len", "cap_len"):  # packet lengths, read to the byte
            return f"{int(value):,} B"
        if "bytes" in name or name in ("size", "offset", "count"):
            return size(value)
        if any(w in name for w in ("share", "fraction", "ratio", "loss")):
            return f"{number(value * 100)} %"  # three digits in a table, where columns compare
        if isinstance(value, int):
            return str(value) if any(w in name for w in _LABELS) else count(value)
        return number(value)
    if (name == "fh" or name.endswith("_fh")) and len(value) > 16:
        return value[:16] + "…"  # a file handle is known by its start; the CSV has it whole
    return str(value)


def column_label(name: str) -> str:
    """A column's header without the unit its values now carry: `p99_s` → `p99`,
    `window_start_ns` → `window start`, `max_bps` → `max bits`."""
    for suffix, label in (("_bps", " bits"), ("_pps", " packets"), ("_ns", ""), ("_s", "")):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)] + label
            break
    return name.replace("_", " ")
