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

The check runs on the load generator's loop every `check_interval_s`, so it costs the same
at any rate: each slope comes from running sums kept as points enter and leave the window
(`WindowFit`), not from the window's points (12,000 first tokens at 4,000 req/s took
np.polyfit 5-15 ms, ten times a second: every send behind it that late).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

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
        self._first_tokens = WindowFit()  # (received, ttft)
        self._waiting = WindowFit()  # (sampled at, waiting)
        self._num_dispatched = 0
        self._num_first = 0  # first token received, or ended without one

    def on_dispatch(self, arrival_s: float) -> None:
        self._num_dispatched += 1
        self._arrivals.append(arrival_s)

    def on_first_token(self, arrival_s: float, received_s: float) -> None:
        self._num_first += 1
        self._first_tokens.append(received_s, received_s - arrival_s)

    def on_end_without_token(self) -> None:
        self._num_first += 1

    def check(self, now_s: float) -> Saturation | None:
        """Sample the waiting count; the verdict once the signs of saturation all hold."""
        window_s = self.config.window_s
        waiting = self._num_dispatched - self._num_first
        self._waiting.append(now_s, waiting)
        while self._arrivals and self._arrivals[0] < now_s - window_s:
            self._arrivals.popleft()
        self._waiting.drop_before(now_s - window_s)
        self._first_tokens.drop_before(now_s - window_s)
        if now_s < window_s or waiting < self.config.min_waiting or len(self._waiting) < 3:
            return None
        rate_rps = len(self._arrivals) / window_s
        if rate_rps <= 0:
            return None
        waiting_growth = self._waiting.slope() / rate_rps
        ttft_growth = self._first_tokens.slope() if len(self._first_tokens) >= 3 else None
        ttft_rising = ttft_growth is None or ttft_growth >= self.config.max_growth
        if waiting_growth >= self.config.max_growth and ttft_rising:
            return Saturation(now_s, rate_rps, waiting, waiting_growth, ttft_growth)
        return None


class WindowFit:
    """The least-squares slope of the points in a sliding window, from running sums updated
    as each point enters and leaves (O(1) a point, none a query). x is counted from the first
    point added, so the sums stay small: an hour into a run at 4,000 points a second over a
    3 s window, the rounding carried by the sums moves the slope by about 1e-5 of itself."""

    def __init__(self) -> None:
        self._points: deque[tuple[float, float]] = deque()
        self._x0: float | None = None
        self._sx = self._sy = self._sxx = self._sxy = 0.0

    def __len__(self) -> int:
        return len(self._points)

    def append(self, x: float, y: float) -> None:
        if self._x0 is None:
            self._x0 = x
        x -= self._x0
        self._points.append((x, y))
        self._sx += x
        self._sy += y
        self._sxx += x * x
        self._sxy += x * y

    def drop_before(self, x: float) -> None:
        """Every point with x before `x` leaves the window."""
        if self._x0 is None:
            return
        cutoff = x - self._x0
        points = self._points
        while points and points[0][0] < cutoff:
            px, py = points.popleft()
            self._sx -= px
            self._sy -= py
            self._sxx -= px * px
            self._sxy -= px * py
        if not points:  # nothing left: start the sums afresh, with no rounding carried over
            self._sx = self._sy = self._sxx = self._sxy = 0.0

    def slope(self) -> float:
        """dy/dx over the window (0 with fewer than two distinct x)."""
        n = len(self._points)
        spread = n * self._sxx - self._sx * self._sx
        if n < 2 or spread <= 1e-12 * max(n * self._sxx, 1e-300):
            return 0.0
        return (n * self._sxy - self._sx * self._sy) / spread
