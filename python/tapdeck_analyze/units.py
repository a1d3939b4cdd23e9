"""Numbers as a reader reads them: bytes as KB/MB/GB, durations as µs/ms/s, rates as packets/s
and Mbit/s, fractions as percentages, 64-bit ids as hex, counts with thousands separators.

`column_value` picks the unit from a result column's name (the analyses name their columns by
unit: `_ns`, `_s`, `_bps`, `_pps`, `bytes`, `share`, …), so any analysis' table, a new one
included, is shown in human units without code of its own."""

import datetime as dt

from .times import format_time


def count(n) -> str:
    return f"{n:,}"


def number(v: float) -> str:
    """Three significant digits, never in exponent notation: 0.00239, 4.22, 1,234, 42,200,000;
    below 0.001 only that it is."""
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) < 0.001:
        return "< 0.001" if v > 0 else "> -0.001"
    r = float(f"{v:.3g}")
    return f"{r:,.0f}" if abs(r) >= 1000 else f"{r:f}".rstrip("0").rstrip(".")


def _scaled(value: float, units: list[tuple[float, str]], sep: str = " ") -> str:
    """`value` in the largest unit it reaches, three significant digits."""
    for factor, name in units:
        if abs(value) >= factor:
            return f"{number(value / factor)}{sep}{name}"
    factor, name = units[-1]
    return f"{number(value / factor)}{sep}{name}"


def size(n) -> str:
    """Bytes: 512 B, 1,514 B, 15.2 KB, 12.3 MB, 4.1 GB (decimal, as link rates are)."""
    if abs(n) < 10_000:
        return f"{int(n):,} B" if float(n).is_integer() else f"{number(n)} B"
    return _scaled(n, [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB")])


def bits_rate(bps) -> str:
    return _scaled(bps, [(1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s"), (1, "bit/s")])


def packet_rate(pps) -> str:
    if abs(pps) >= 1000:
        return f"{pps:,.0f} packets/s"
    return f"{number(pps)} packets/s"


def seconds(s) -> str:
    """A duration: 850 ns, 42 µs, 1.25 ms, 3.4 s, 12 min, 5.1 h."""
    if s == 0:
        return "0 s"
    if abs(s) >= 2 * 365 * 86400:
        return f"{number(s / (365.25 * 86400))} years"
    if abs(s) >= 2 * 86400:
        return f"{number(s / 86400)} days"
    if abs(s) >= 7200:
        return f"{number(s / 3600)} h"
    if abs(s) >= 120:
        return f"{number(s / 60)} min"
    return _scaled(s, [(1, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")])


def percent(f) -> str:
    if f == 0 or f == 1:
        return f"{f * 100:.0f} %"
    return f"{number(f * 100)} %"


def hex_id(v: int) -> str:
    """A 64-bit id (a hash stored as a signed int64) as 16 hex digits, never negative."""
    return f"{v & 0xFFFF_FFFF_FFFF_FFFF:016x}"


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
            return seconds(value / 1e9)
        if name.endswith("_s"):
            return seconds(value)
        if name.endswith("_bps"):
            return bits_rate(value)
        if name.endswith("_pps"):
            return packet_rate(value)
        if "bytes" in name or name in ("wire_len", "cap_len", "size", "offset", "count"):
            return size(value)
        if any(w in name for w in ("share", "fraction", "ratio", "loss")):
            return percent(value)
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
