"""Robust statistics, pure: quantiles, median, MAD and the robust z-score.

robust z = (x − median) / (1.4826 · MAD): 1.4826 · MAD estimates the standard
deviation of normal data, so z reads like a z-score, but one outlier cannot
move the median or the MAD the way it moves a mean and a standard deviation
(Iglewicz and Hoaglin, "How to Detect and Handle Outliers", 1993; their
threshold for a "modified z" is 3.5).

MAD = 0 (at least half the values equal) would divide by zero. Then the scale
is 1.2533 · the mean absolute deviation from the median (the same consistency
for normal data); when that is 0 too, every value is the median and z is 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

MAD_TO_SIGMA: Final = 1.4826
MEAN_AD_TO_SIGMA: Final = 1.253314


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile (0 ≤ q ≤ 1) of sorted values, linear between closest ranks (numpy's default)."""
    if not sorted_values:
        return math.nan
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return quantile(sorted(values), 0.5)


def mad(values: Sequence[float], center: float | None = None) -> float:
    """Median absolute deviation from ``center`` (default the median)."""
    if not values:
        return math.nan
    c = median(values) if center is None else center
    return median([abs(v - c) for v in values])


def robust_scale(values: Sequence[float]) -> float:
    """The σ estimate robust z divides by: 1.4826 · MAD, else 1.2533 · mean AD, else 0."""
    if not values:
        return 0.0
    c = median(values)
    m = mad(values, c)
    if m > 0:
        return MAD_TO_SIGMA * m
    mean_ad = sum(abs(v - c) for v in values) / len(values)
    return MEAN_AD_TO_SIGMA * mean_ad


def robust_z(x: float, center: float, scale: float) -> float:
    """(x − center) / scale; 0 when scale is 0 and x is the center, ±inf when only x differs."""
    if scale > 0:
        return (x - center) / scale
    if x == center:
        return 0.0
    return math.inf if x > center else -math.inf
