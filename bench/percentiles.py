"""Percentiles of measured samples, the one way every table computes them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], p: int) -> float:
    """The ``p``-th percentile (1 to 99) of ``samples`` by ``statistics.quantiles``
    (inclusive: interpolated between the two nearest samples, never outside their range);
    NaN for no samples. O(n log n): it sorts."""
    if not 1 <= p <= 99:
        raise ValueError(f"percentile must be 1 to 99, not {p}")
    if not samples:
        return math.nan
    if len(samples) == 1:  # quantiles needs two points before Python 3.13
        return float(samples[0])
    return statistics.quantiles(samples, n=100, method="inclusive")[p - 1]
