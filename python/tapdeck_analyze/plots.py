"""What the analyses' plots share (matplotlib, Agg backend: no display needed): figures, time
axes, ticks in human units, the figure for no data. Each analysis draws its own plot in its
module (`Analysis.plot`).

matplotlib is imported on the first figure, not with the package: `tapdeck-analyze run` and
`sql` draw nothing and start faster without it."""

from __future__ import annotations

import datetime as dt
import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@functools.cache
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "tapdeck"  # stable SVG ids, so reports diff cleanly
    return plt


def subplots(*args, **kwargs):
    """`matplotlib.pyplot.subplots`: a figure and its axes."""
    return _pyplot().subplots(*args, **kwargs)


def close(fig: Figure) -> None:
    _pyplot().close(fig)


def times(ns_values, tz) -> list[dt.datetime]:
    return [dt.datetime.fromtimestamp(v / 1e9, tz) for v in ns_values]


def time_axis(ax, x) -> None:
    """A time axis that stays readable when every point has the same time (matplotlib would
    otherwise span years around it)."""
    if x and min(x) == max(x):
        ax.set_xlim(min(x) - dt.timedelta(seconds=30), max(x) + dt.timedelta(seconds=30))
    if x and max(x) - min(x) < dt.timedelta(days=1):
        import matplotlib.dates as mdates

        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=x[0].tzinfo))


def human(axis, fmt) -> None:
    """Tick labels in human units (12 Mbit/s, 3 ms, 4 MB), not 1e8 offsets or powers of ten."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    axis.set_minor_formatter(NullFormatter())


def empty(title: str) -> Figure:
    """The figure of a table without rows."""
    fig, ax = subplots(figsize=(8, 3))
    ax.text(0.5, 0.5, "no data in this range", ha="center", va="center")
    ax.set_axis_off()
    ax.set_title(title)
    return fig
