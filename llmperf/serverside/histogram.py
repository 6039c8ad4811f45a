"""Prometheus histograms over a window: the delta of two scrapes, its mean and its quantiles.

A quantile comes from the buckets alone, as Prometheus's `histogram_quantile` computes it:
find the bucket where the rank falls and interpolate linearly inside it (the first bucket
starts at 0; a rank in the +Inf bucket gives the highest finite bound). It is an estimate
whose error is up to a bucket's width; the mean (sum / count) is exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Histogram:
    bounds: tuple[float, ...]  # bucket upper bounds, ascending, ending with +Inf
    cumulative: tuple[float, ...]  # observations <= each bound
    sum: float
    count: float

    @classmethod
    def from_buckets(cls, buckets: Iterable[tuple[float, float]], sum_: float, count: float):
        pairs = sorted(buckets)
        if not pairs or pairs[-1][0] != math.inf:
            pairs.append((math.inf, count))
        return cls(tuple(b for b, _ in pairs), tuple(c for _, c in pairs), sum_, count)

    def minus(self, earlier: Histogram) -> Histogram:
        """The observations made after `earlier`. A server restarted in between (its counts
        went down) has only what it saw since: this histogram as is."""
        if self.count < earlier.count or self.bounds != earlier.bounds:
            return self
        return Histogram(
            self.bounds,
            tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
            self.sum - earlier.sum,
            self.count - earlier.count,
        )

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0 <= q <= 1) interpolated inside its bucket; None when empty."""
        total = self.cumulative[-1]
        if total <= 0:
            return None
        rank = q * total
        lower_bound, lower_count = 0.0, 0.0
        for bound, cumulative in zip(self.bounds, self.cumulative, strict=True):
            if cumulative >= rank and cumulative > lower_count:
                if math.isinf(bound):
                    return lower_bound  # beyond the last finite bound: that bound is all we know
                return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                    cumulative - lower_count
                )
            lower_bound, lower_count = bound, cumulative
        return lower_bound


QUANTILES = {"median": 0.5, "p90": 0.9, "p99": 0.99}


def stats(h: Histogram) -> dict[str, float | None]:
    """count, mean (exact) and median/p90/p99 (interpolated from the buckets)."""
    out: dict[str, float | None] = {"count": h.count, "mean": h.mean}
    out.update({name: h.quantile(q) for name, q in QUANTILES.items()})
    return out
