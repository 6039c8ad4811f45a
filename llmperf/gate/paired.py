"""The paired statistic of A/B mode: Wilcoxon signed-rank interval of the paired log-ratios.

Each pair runs base and head back to back, so what the machine did during the pair slows
both alike; the log of head / base per pair removes it. The effect is the Hodges-Lehmann
estimate of the log-ratios' centre (the median of all Walsh averages (r_i + r_j) / 2,
i <= j) and its interval is the exact Wilcoxon signed-rank confidence interval: the k-th
smallest and k-th largest Walsh averages, k from the exact null distribution of the
signed-rank statistic. Distribution-free (only symmetry of the log-ratios about their
centre), robust to a pair hit by a neighbour's burst, and deterministic: no resampling, no
seed. Reported as a fractional change, exp(log-ratio) - 1.

A two-sided 90% interval has one-sided 95% ends, which is what the verdict uses. It needs
at least 5 pairs (with 4, even the most extreme outcome has probability 2 x 1/16 > 10%).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

CONFIDENCE = 0.90
MIN_PAIRS = 5


@dataclass(frozen=True)
class PairedChange:
    """head / base - 1: the Hodges-Lehmann point and its Wilcoxon interval."""

    point: float
    low: float
    high: float
    num_pairs: int


@cache
def _signed_rank_counts(n: int) -> tuple[int, ...]:
    """counts[w] = how many of the 2^n sign patterns give a signed-rank sum W+ = w."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for rank in range(1, n + 1):
        for w in range(len(counts) - 1, rank - 1, -1):
            counts[w] += counts[w - rank]
    return tuple(counts)


def critical_count(n: int, confidence: float = CONFIDENCE) -> int:
    """k: the interval runs from the k-th smallest to the k-th largest Walsh average.

    k is the largest count with P(W+ <= k - 1) <= (1 - confidence) / 2 under the null
    (0: no interval at this confidence, too few pairs).
    """
    counts = _signed_rank_counts(n)
    alpha_half = (1.0 - confidence) / 2 * 2**n
    below, c = 0, 0
    while below + counts[c] <= alpha_half:
        below += counts[c]
        c += 1
    return c


def walsh_averages(values: Sequence[float]) -> list[float]:
    n = len(values)
    return sorted((values[i] + values[j]) / 2 for i in range(n) for j in range(i, n))


def paired_change(base: Sequence[float], head: Sequence[float],
                  confidence: float = CONFIDENCE) -> PairedChange:
    """The change head / base - 1 over pairs (base[i], head[i]), all values > 0."""
    if len(base) != len(head):
        raise ValueError(f"{len(base)} base values but {len(head)} head values")
    n = len(base)
    if n < MIN_PAIRS:
        raise ValueError(f"a paired interval needs at least {MIN_PAIRS} pairs, got {n}")
    if min(*base, *head) <= 0:
        raise ValueError("paired log-ratios need figures > 0")
    ratios = [math.log(h / b) for b, h in zip(base, head, strict=True)]
    walsh = walsh_averages(ratios)
    k = critical_count(n, confidence)
    m = len(walsh)
    point = (walsh[(m - 1) // 2] + walsh[m // 2]) / 2
    low, high = walsh[k - 1], walsh[m - k]
    return PairedChange(math.expm1(point), math.expm1(low), math.expm1(high), n)
