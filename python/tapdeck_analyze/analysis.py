"""What one analysis is: its tables, and how the report words, plots and shows them.

Each analysis module (rates.py, nfs_latency.py, …) holds the whole analysis: the functions
that return its tables (SQL over the dataset's views), its headline, its plot and how the
report reduces its tables, and ends with one `ANALYSIS = Analysis(...)` naming them.
`analyses.py` lists the modules; the CLI and the report take everything from that list.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from .reduce import Display

if TYPE_CHECKING:  # matplotlib is imported only when a plot is drawn (plots.py)
    from matplotlib.figure import Figure

# `run`'s tables of one analysis, by result name: the analysis' name for its main table,
# `<name>_<part>` for each part.
Tables = dict[str, pa.Table]


@dataclass
class Analysis:
    name: str
    main: Callable[..., pa.Table]
    how_to_read: str  # the report's sentence on how to read the analysis
    parts: dict[str, Callable[..., pa.Table]] = field(default_factory=dict)
    options: tuple[str, ...] = ()  # keyword options of the main table and of every part
    # The report's one-line finding: a short sentence in human units, or None when the tables
    # hold nothing worth saying.
    headline: Callable[[Tables], str | None] | None = None
    # The report's figure, saved as `<name>.png` and `<name>.svg`; times shown in the zone.
    plot: Callable[[Tables, dt.tzinfo], Figure] | None = None
    # How the report reduces a table (by result name) to what a reader uses; a table not
    # named here is shown as reduce.py's default does (busiest intervals, or first rows).
    shown: dict[str, Display] = field(default_factory=dict)
