"""Times and durations as the command line writes them, parsed exactly to integer nanoseconds.

`parse_time` accepts what `tapdeck extract --start/--end` accepts (crates/store/src/extract.rs):
RFC 3339 with up to nine fraction digits and `Z` or a `±HH:MM` offset, or decimal seconds
since the epoch. No floats on the way, so `1795413454.000000001` stays exact.
"""

import calendar
import datetime as dt
import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

NS = 1_000_000_000

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)
_EPOCH = re.compile(r"(\d+)(?:\.(\d*))?")


class TimeFormatError(ValueError):
    pass


def _bad(s: str, why: str) -> TimeFormatError:
    return TimeFormatError(
        f"'{s}' is not a time: {why}; use RFC 3339 (2026-11-23T05:57:34.5Z) "
        "or seconds since the epoch (1795413454.5)"
    )


def _fraction_ns(digits: str) -> int:
    return int(digits.ljust(9, "0")) if digits else 0


def parse_time(s: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time or decimal epoch seconds."""
    s = s.strip()
    if m := _EPOCH.fullmatch(s):
        secs, frac = m.group(1), m.group(2) or ""
        if len(frac) > 9:
            raise _bad(s, "more than nine fraction digits, or not digits")
        return int(secs) * NS + _fraction_ns(frac)
    m = _RFC3339.fullmatch(s)
    if not m:
        raise _bad(s, "expected YYYY-MM-DDTHH:MM:SS followed by Z or a UTC offset")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac = m.group(7) or ""
    if len(frac) > 9:
        raise _bad(s, "one to nine fraction digits")
    if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year, month)[1]:
        raise _bad(s, "no such date")
    if hour > 23 or minute > 59 or second > 59:
        raise _bad(s, "no such time of day")
    offset = 0
    if m.group(9):
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 23 or om > 59:
            raise _bad(s, "bad UTC offset")
        offset = (1 if m.group(9) == "+" else -1) * (oh * 3600 + om * 60)
    days = (dt.date(year, month, day) - dt.date(1970, 1, 1)).days
    secs = days * 86400 + hour * 3600 + minute * 60 + second - offset
    if secs < 0:
        raise _bad(s, "before 1970")
    return secs * NS + _fraction_ns(frac)


_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": NS,
    "min": 60 * NS,
    "m": 60 * NS,
    "h": 3600 * NS,
    "d": 86400 * NS,
}
_DURATION = re.compile(r"(\d+)(?:\.(\d+))?\s*(ns|us|µs|ms|s|min|m|h|d)")


def parse_duration(s: str) -> int:
    """Nanoseconds of a duration such as `100us`, `1ms`, `2.5s`, `1min`, `1h`."""
    m = _DURATION.fullmatch(s.strip())
    if not m:
        raise TimeFormatError(
            f"'{s}' is not a duration: use a number and a unit (ns, us, ms, s, min, h, d), "
            "e.g. 100us, 1ms, 1s, 1min, 1h"
        )
    whole, frac, unit = m.group(1), m.group(2) or "", m.group(3)
    unit_ns = _UNITS[unit]
    ns = int(whole) * unit_ns + int(frac or 0) * unit_ns // 10 ** len(frac)
    if frac and int(frac) * unit_ns % 10 ** len(frac):
        raise TimeFormatError(f"'{s}' is not a whole number of nanoseconds")
    if ns <= 0:
        raise TimeFormatError(f"'{s}': a duration must be positive")
    return ns


def format_duration(ns: int) -> str:
    """The shortest exact spelling of a duration: 100us, 1ms, 60s → 1min."""
    for unit in ("d", "h", "min", "s", "ms", "us"):
        if ns % _UNITS[unit] == 0:
            return f"{ns // _UNITS[unit]}{unit}"
    return f"{ns}ns"


def zone(name: str | None) -> dt.tzinfo:
    if name is None or name.upper() == "UTC":
        return dt.timezone.utc
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise TimeFormatError(f"'{name}' is not a time zone (e.g. UTC, Europe/Berlin)") from e


def format_time(ns: int | None, tz: dt.tzinfo = dt.timezone.utc, digits: int = 9) -> str:
    """RFC 3339 with `digits` fraction digits in the given zone."""
    if ns is None:
        return ""
    secs, frac = divmod(ns, NS)
    t = dt.datetime.fromtimestamp(secs, tz)
    text = t.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        text += "." + f"{frac:09d}"[:digits]
    off = t.strftime("%z")
    return text + ("Z" if off == "+0000" and tz is dt.timezone.utc else f"{off[:3]}:{off[3:]}")
