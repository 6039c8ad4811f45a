"""Where the next trial goes: bracket the capacity, then close in on it.

    bracket    from the start value, multiply by `growth` until a trial fails (or divide
               until one passes): the capacity lies between the highest pass (lo) and the
               lowest failure (hi)
    close in   each next value, in order of preference:
               - the served rate of an overloaded failure (a queue that grew: the engine
                 served less than was offered), when it lies inside (lo, hi): the rate the
                 engine can carry is the likeliest place for the SLO to break
               - regula falsi on the trials' scores (headroom > 0, overrun < 0, as a
                 fraction of the limit), kept `edge` of the gap away from both ends so a
                 flat side (all headroom below the knee) cannot stall it
               - the geometric midpoint, when a score says nothing (a run stopped early)
    stop       when (hi - lo) / hi <= tolerance (concurrency: when hi - lo <= 1), or after
               `max_trials`; the capacity reported is lo, so it is never above the truth
               by more than the tolerance allows
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from llmperf.errors import ConfigError

OVERS = ("rate", "concurrency")
MODES = ("capacity", "sweep")
_EDGE = 0.05  # regula falsi stays this fraction of the gap inside it
_OVERLOADED = 0.95  # served / offered below this: the trial's queue grew


@dataclass
class SearchConfig:
    mode: str = "capacity"  # capacity: the SLO search; sweep: llmperf/search/sweep.py
    rates: int = 8  # sweep: rates between the synchronous and the throughput trial
    over: str | None = None  # rate | concurrency; null: concurrency for closed loops, else rate
    start: float | None = None  # first value; null: the scenario's rate_rps or concurrency
    growth: float = 2.0  # bracketing factor
    tolerance: float = 0.04  # stop once (hi - lo) / hi is this small
    max_trials: int = 8
    output_dir: str | None = None  # null: reports/searches/<time>

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError("search.mode", self.mode, "unknown search mode", MODES)
        if self.rates < 1:
            raise ConfigError("search.rates", self.rates, "must be >= 1")
        if self.over is not None and self.over not in OVERS:
            raise ConfigError("search.over", self.over, "unknown search variable", OVERS)
        if self.start is not None and self.start <= 0:
            raise ConfigError("search.start", self.start, "must be > 0")
        if self.growth <= 1:
            raise ConfigError("search.growth", self.growth, "must be > 1")
        if not 0 < self.tolerance < 1:
            raise ConfigError("search.tolerance", self.tolerance, "must be in (0, 1)")
        if self.max_trials < 2:
            raise ConfigError("search.max_trials", self.max_trials, "must be >= 2")


@dataclass
class Trial:
    """One run of the search, as the strategy needs it."""

    value: float  # offered rate (req/s) or concurrency
    passed: bool
    score: float  # > 0 headroom, < 0 overrun (see SloTargets.margin)
    served_rps: float | None  # completed requests per second
    saturated: bool = False  # stopped early by the over-saturation detector
    interrupted: bool = False  # SIGINT: the search stops after this trial
    misses: list[str] = field(default_factory=list)
    run_dir: str = ""
    goodput_rps: float | None = None
    slo_attainment: float | None = None


def bracket(trials: list[Trial]) -> tuple[float | None, float | None]:
    """(highest passing value, lowest failing value above it); None where not found yet."""
    passes = [t.value for t in trials if t.passed]
    lo = max(passes) if passes else None
    fails = [t.value for t in trials if not t.passed and (lo is None or t.value > lo)]
    return lo, (min(fails) if fails else None)


def converged(lo: float | None, hi: float | None, config: SearchConfig, integer: bool) -> bool:
    if lo is None or hi is None:
        return False
    if integer:
        return hi - lo <= 1
    return (hi - lo) / hi <= config.tolerance


def next_value(trials: list[Trial], config: SearchConfig, integer: bool) -> float | None:
    """The next value to try, or None when the search is done."""
    if len(trials) >= config.max_trials:
        return None
    lo, hi = bracket(trials)
    if converged(lo, hi, config, integer):
        return None
    if hi is None:
        value = lo * config.growth
    elif lo is None:
        value = hi / config.growth
        if integer and value < 1:
            return None  # even one request in flight fails
    else:
        value = _inside(trials, lo, hi, integer)
    value = _rounded(value, integer, lo, hi)
    if value is None or any(math.isclose(value, t.value) for t in trials):
        return None
    return value


def _inside(trials: list[Trial], lo: float, hi: float, integer: bool) -> float:
    gap = hi - lo
    served = [
        t.served_rps
        for t in trials
        if not integer and not t.passed and t.served_rps and t.served_rps < _OVERLOADED * t.value
    ]
    for estimate in sorted(served):
        far_from_tried = all(abs(estimate - t.value) > 0.02 * t.value for t in trials)
        if lo + _EDGE * gap < estimate < hi - _EDGE * gap and far_from_tried:
            return estimate
    t_lo = next(t for t in trials if t.passed and t.value == lo)
    t_hi = next(t for t in trials if not t.passed and t.value == hi)
    if t_hi.saturated or t_lo.score <= t_hi.score:
        return math.sqrt(lo * hi)
    value = lo + gap * t_lo.score / (t_lo.score - t_hi.score)
    return min(max(value, lo + _EDGE * gap), hi - _EDGE * gap)


def _rounded(value: float, integer: bool, lo: float | None, hi: float | None) -> float | None:
    if not integer:
        return value
    rounded = float(max(1, round(value)))
    if lo is not None and rounded <= lo:
        rounded = lo + 1
    if hi is not None and rounded >= hi:
        return None
    return rounded
