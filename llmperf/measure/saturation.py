"""The over-saturation detector: tells an open-loop run whose queue grows without bound.

Offered more than it serves, an engine queues the difference: if requests arrive at
rate λ and are served at μ < λ, the requests waiting for their first token grow at
λ - μ per second and each new request's TTFT grows by 1 - μ/λ seconds per second.
Both are the same fraction, `growth = 1 - μ/λ`, read two ways from what the client
sees (no engine counter needed, so it works on every engine):

    waiting growth  least-squares slope of (dispatched - first token received) over the
                    last `window_s`, divided by the arrival rate over that window
    TTFT growth     least-squares slope of TTFT against the time each first token came

A run is saturated when, after at least one full window of measured load, the waiting
count is at least `min_waiting`, the waiting growth is at least `max_growth`, and the
TTFT growth is too (or no first token came in the whole window). A held rate has a
queue that wanders but does not climb, so both slopes stay near 0.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from llmperf.errors import ConfigError
from llmperf.options import check_positive, option


@dataclass
class SaturationConfig:
    """`scenario.saturation`: the over-saturation detector. An open-loop run whose queue
    grows without bound stops early and is marked "saturated at R req/s"."""

    enabled: bool = option(True, "stop an open-loop run whose queue grows without bound")
    window_s: float = option(3.0, "the trailing window the growth is measured over")
    min_waiting: int = option(16, "requests waiting for a first token before a verdict")
    max_growth: float = option(0.1, "waiting (and TTFT) growth, as a fraction of arrivals, that stops it")
    check_interval_s: float = option(0.1, "seconds between checks; at most window_s / 3")

    def __post_init__(self) -> None:
        check_positive(self, "window_s", "max_growth", "check_interval_s", allow_none=False)
        check_positive(self, "min_waiting", allow_none=False)
        if self.check_interval_s * 3 > self.window_s:
            raise ConfigError(
                "check_interval_s", self.check_interval_s, "must be at most window_s / 3"
            )


@dataclass(frozen=True)
class Saturation:
    """Why the run was stopped: when, at what offered rate, and the growth figures."""

    at_s: float  # measured-phase time of the verdict
    rate_rps: float  # intended arrivals per second over the last window
    waiting: int
    waiting_growth: float
    ttft_growth: float | None

    def describe(self) -> str:
        ttft = "n/a" if self.ttft_growth is None else f"{self.ttft_growth:.2f}"
        return (
            f"saturated at {self.rate_rps:.3g} req/s: {self.waiting} requests waiting for a "
            f"first token, growing at {self.waiting_growth:.0%} of arrivals (TTFT growth "
            f"{ttft} s/s) after {self.at_s:.1f} s"
        )


class SaturationDetector:
    """Fed by the load generator (times in seconds from the measured phase's start)."""

    def __init__(self, config: SaturationConfig) -> None:
        self.config = config
        self._arrivals: deque[float] = deque()
        self._first_tokens: deque[tuple[float, float]] = deque()  # (received, ttft)
        self._waiting: deque[tuple[float, int]] = deque()  # (sampled at, waiting)
        self._num_dispatched = 0
        self._num_first = 0  # first token received, or ended without one

    def on_dispatch(self, arrival_s: float) -> None:
        self._num_dispatched += 1
        self._arrivals.append(arrival_s)

    def on_first_token(self, arrival_s: float, received_s: float) -> None:
        self._num_first += 1
        self._first_tokens.append((received_s, received_s - arrival_s))

    def on_end_without_token(self) -> None:
        self._num_first += 1

    def check(self, now_s: float) -> Saturation | None:
        """Sample the waiting count; the verdict once the signs of saturation all hold."""
        window_s = self.config.window_s
        waiting = self._num_dispatched - self._num_first
        self._waiting.append((now_s, waiting))
        for queue in (self._arrivals, self._waiting):
            while queue and _time_of(queue[0]) < now_s - window_s:
                queue.popleft()
        while self._first_tokens and self._first_tokens[0][0] < now_s - window_s:
            self._first_tokens.popleft()
        if now_s < window_s or waiting < self.config.min_waiting or len(self._waiting) < 3:
            return None
        rate_rps = len(self._arrivals) / window_s
        if rate_rps <= 0:
            return None
        waiting_growth = _slope(self._waiting) / rate_rps
        ttft_growth = _slope(self._first_tokens) if len(self._first_tokens) >= 3 else None
        ttft_rising = ttft_growth is None or ttft_growth >= self.config.max_growth
        if waiting_growth >= self.config.max_growth and ttft_rising:
            return Saturation(now_s, rate_rps, waiting, waiting_growth, ttft_growth)
        return None


def _time_of(item: float | tuple[float, int]) -> float:
    return item if isinstance(item, float) else item[0]


def _slope(points: deque) -> float:
    x, y = np.asarray(points, dtype=float).T
    if np.ptp(x) == 0:
        return 0.0
    return float(np.polyfit(x, y, 1)[0])
