"""A/B verdicts: each figure's change head / base, its interval, and pass / REGRESSION.

Times: the paired Wilcoxon interval of the log-ratios (llmperf.gate.paired). Counters: the
range of head / base - 1 over every run of each side, so a counter that does not move gives
a zero-width interval and any move past the tolerance (0 by default) fails; a counter that
did vary between runs of one side only fails when even its most favourable reading does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from llmperf.gate.ab_figures import Figure
from llmperf.gate.compare import IMPROVED, PASS, REGRESSION, WITHIN_NOISE
from llmperf.gate.paired import paired_change
from llmperf.measure.catalog import HIGHER

_SLACK = 1e-9  # a change of exactly the tolerance passes


@dataclass(frozen=True)
class ABResult:
    figure: Figure
    base: tuple[float, ...]  # one value per pair
    head: tuple[float, ...]
    point: float  # head / base - 1
    low: float
    high: float
    tolerance: float  # a fraction, >= 0
    verdict: str

    @property
    def is_regression(self) -> bool:
        return self.verdict == REGRESSION

    def to_dict(self) -> dict:
        return {"figure": self.figure.name, "direction": self.figure.direction,
                "timed": self.figure.timed, "base": list(self.base), "head": list(self.head),
                "change": self.point, "low": self.low, "high": self.high,
                "tolerance": self.tolerance, "verdict": self.verdict}


def _relative(head: float, base: float) -> float:
    if head == base:
        return 0.0
    if base == 0:
        return math.copysign(math.inf, head)
    return head / base - 1.0


def judge_figure(figure: Figure, base: Sequence[float], head: Sequence[float],
                 tolerance: float) -> ABResult:
    if figure.timed:
        change = paired_change(base, head)
        point, low, high = change.point, change.low, change.high
    else:
        point = _relative(median(head), median(base))
        low = _relative(min(head), max(base))
        high = _relative(max(head), min(base))
    return ABResult(figure, tuple(base), tuple(head), point, low, high, tolerance,
                    verdict(figure.direction, point, low, high, tolerance))


def verdict(direction: str, point: float, low: float, high: float, tolerance: float) -> str:
    """REGRESSION when even the favourable end of the interval is worse than the tolerance."""
    worse = -1.0 if direction == HIGHER else 1.0
    best_case, worst_case = sorted((worse * low, worse * high))
    limit = tolerance + _SLACK
    if best_case > limit:
        return REGRESSION
    if worst_case < -limit:
        return IMPROVED
    if abs(worse * point) > limit:
        return WITHIN_NOISE
    return PASS


def change_text(value: float) -> str:
    return f"{value * 100:+.1f}%" if math.isfinite(value) else ("+inf" if value > 0 else "-inf")
