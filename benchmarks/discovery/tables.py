"""Markdown cells of the discovery benchmark's reports (their tables: :func:`benchmarks.tables.table`)."""

from __future__ import annotations

import math

from ..faithfulness.records import Interval


def cell(interval: Interval) -> str:
    """Mean with its 95 % interval; n/a when undefined.

    >>> cell(Interval(0.5, 0.25, 0.75)), cell(Interval(1.0, 1.0, 1.0)), cell(Interval(math.nan, math.nan, math.nan))
    ('0.50 [0.25, 0.75]', '1.00', 'n/a')
    """
    if math.isnan(interval.mean):
        return "n/a"
    if interval.low == interval.high == interval.mean:
        return f"{interval.mean:.2f}"
    return f"{interval.mean:.2f} [{interval.low:.2f}, {interval.high:.2f}]"
