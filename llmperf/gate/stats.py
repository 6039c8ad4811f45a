"""The noise statistic: a bootstrap interval for the change between two medians.

Each side (baseline repeats, current repeats) is resampled with replacement and its median
taken; the change between the two medians (relative or absolute) over NUM_RESAMPLES draws
gives a two-sided percentile interval at CONFIDENCE. Each end of a 90% interval is a one-sided
95% bound, which is what the verdict uses. The seed is fixed, so the same figures always get
the same interval and the same verdict.

A side with a single repeat has no spread of its own; it borrows the other side's (one run
here is assumed as noisy as one run there: same machine, same scenario). With one repeat on
both sides the interval shrinks to the point change and only the tolerance decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.90
NUM_RESAMPLES = 4000
SEED = 0


@dataclass(frozen=True)
class Change:
    """median(current) against median(baseline): a fraction (relative) or in metric units."""

    point: float
    low: float  # bounds of the CONFIDENCE interval
    high: float
    relative: bool

    @property
    def has_noise_band(self) -> bool:
        return self.high > self.low


def median_change(baseline: Sequence[float], current: Sequence[float], relative: bool,
                  confidence: float = CONFIDENCE, num_resamples: int = NUM_RESAMPLES,
                  seed: int = SEED) -> Change:
    """Point change of the medians and its bootstrap interval; relative needs a nonzero baseline."""
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(current, dtype=float)
    rng = np.random.default_rng(seed)
    b_medians = _resampled_medians(b, c, relative, rng, num_resamples)
    c_medians = _resampled_medians(c, b, relative, rng, num_resamples)
    if relative:
        point = np.median(c) / np.median(b) - 1.0
        draws = c_medians / b_medians - 1.0
    else:
        point = np.median(c) - np.median(b)
        draws = c_medians - b_medians
    alpha = 1.0 - confidence
    low, high = np.quantile(draws, [alpha / 2, 1.0 - alpha / 2])
    # One repeat a side leaves every draw equal to the point; keep the bounds exactly on it.
    if not (b.size > 1 or c.size > 1):
        low = high = point
    return Change(float(point), float(low), float(high), relative)


def _resampled_medians(values: np.ndarray, other: np.ndarray, relative: bool,
                       rng: np.random.Generator, num_resamples: int) -> np.ndarray:
    n = values.size
    if n > 1:
        return np.median(values[rng.integers(0, n, size=(num_resamples, n))], axis=1)
    if other.size > 1:
        draws = other[rng.integers(0, other.size, size=num_resamples)]
        centre = np.median(other)
        if relative and centre != 0:
            return values[0] * draws / centre
        return values[0] + draws - centre
    return np.full(num_resamples, values[0])
