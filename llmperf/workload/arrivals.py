"""Arrival processes: when each request is meant to arrive, in seconds from the start of
the measured load. One function per process, picked by name from `ARRIVALS`; the
scenario's `arrival` options (`ArrivalConfig`) are declared here, beside them."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from llmperf.errors import ConfigError
from llmperf.options import check_positive, option
from llmperf.registry import Registry

if TYPE_CHECKING:
    from llmperf.workload.trace import TraceRow


def offline_times(
    arrival: ArrivalConfig, rng: np.random.Generator, trace: list[TraceRow]
) -> Iterator[float]:
    """Everything at t=0 (MLPerf Offline): the engine sees the whole queue at once."""
    return itertools.repeat(0.0)


def constant_times(
    arrival: ArrivalConfig, rng: np.random.Generator, trace: list[TraceRow]
) -> Iterator[float]:
    gap_s = 1.0 / arrival.rate_rps
    return (i * gap_s for i in itertools.count())


def poisson_times(
    arrival: ArrivalConfig, rng: np.random.Generator, trace: list[TraceRow]
) -> Iterator[float]:
    """Exponential gaps of mean 1/rate; the first request arrives at t=0."""
    t = 0.0
    while True:
        yield t
        t += rng.exponential(1.0 / arrival.rate_rps)


def gamma_times(
    arrival: ArrivalConfig, rng: np.random.Generator, trace: list[TraceRow]
) -> Iterator[float]:
    """Gamma gaps with shape b (burstiness) and mean 1/rate: CV = 1/sqrt(b).

    b = 1 is Poisson; b < 1 is burstier (clumps and lulls); b > 1 is smoother.
    """
    shape = arrival.burstiness
    scale = 1.0 / (arrival.rate_rps * shape)
    t = 0.0
    while True:
        yield t
        t += rng.gamma(shape, scale)


def ramp_times(
    arrival: ArrivalConfig, rng: np.random.Generator, trace: list[TraceRow]
) -> Iterator[float]:
    """A rate that rises from `ramp_start_rps` to `rate_rps` over `ramp_duration_s`, then holds.

    Linear (`ramp_steps` null) or in `ramp_steps` equal steps whose rates run evenly from
    the start rate to the end rate. Request k arrives when the expected count of arrivals,
    the integral of the rate from 0, reaches k: the gaps follow the rate without noise, so
    the rate at which a run saturates is read off the schedule.
    """
    for k in itertools.count():
        yield ramp_time_of(arrival, float(k))


def ramp_rate_at(arrival: ArrivalConfig, t_s: float) -> float:
    """The ramp's intended rate at `t_s` seconds after the measured phase began."""
    r0, r1, d = arrival.ramp_start_rps, arrival.rate_rps, arrival.ramp_duration_s
    if t_s >= d:
        return r1
    if arrival.ramp_steps is None:
        return r0 + (r1 - r0) * t_s / d
    n = arrival.ramp_steps
    step = min(int(t_s / (d / n)), n - 1)
    return r0 + (r1 - r0) * step / (n - 1) if n > 1 else r1


def ramp_time_of(arrival: ArrivalConfig, count: float) -> float:
    """When the ramp's cumulative expected arrivals reach `count` (inverse of its integral)."""
    r0, r1, d = arrival.ramp_start_rps, arrival.rate_rps, arrival.ramp_duration_s
    if arrival.ramp_steps is None:
        ramp_total = (r0 + r1) * d / 2
        if count >= ramp_total:
            return d + (count - ramp_total) / r1
        slope = (r1 - r0) / d  # count = r0 t + slope t^2 / 2
        if slope == 0:
            return count / r0
        return (-r0 + np.sqrt(r0 * r0 + 2 * slope * count)) / slope
    n = arrival.ramp_steps
    width_s = d / n
    t_s, left = 0.0, count
    for step in range(n):
        rate = r0 + (r1 - r0) * step / (n - 1) if n > 1 else r1
        if step == n - 1:  # the last step's rate holds after the ramp
            return t_s + left / rate
        if rate * width_s >= left and rate > 0:
            return t_s + left / rate
        t_s, left = t_s + width_s, left - rate * width_s
    raise AssertionError("unreachable: the last step returns")


def trace_times(
    arrival: ArrivalConfig, rng: np.random.Generator, trace: list[TraceRow]
) -> Iterator[float]:
    """The trace's timestamps relative to its first row, sped up by `trace_speedup`."""
    if not trace:
        return iter(())
    first_s = trace[0].timestamp_s
    return ((row.timestamp_s - first_s) / arrival.trace_speedup for row in trace)


@dataclass(frozen=True)
class ArrivalProcess:
    times: Callable[..., Iterator[float]]
    needs_rate: bool = False
    needs_trace: bool = False
    closed_loop: bool = False  # a request is sent when a slot frees, not at a time


ARRIVALS: Registry[ArrivalProcess] = Registry(
    "arrival process",
    {
        "offline": ArrivalProcess(offline_times),
        "constant": ArrivalProcess(constant_times, needs_rate=True),
        "poisson": ArrivalProcess(poisson_times, needs_rate=True),
        "gamma": ArrivalProcess(gamma_times, needs_rate=True),
        "closed": ArrivalProcess(offline_times, closed_loop=True),
        "trace": ArrivalProcess(trace_times, needs_trace=True),
        "ramp": ArrivalProcess(ramp_times, needs_rate=True),
    },
)


@dataclass
class ArrivalConfig:
    """`scenario.arrival`: when requests are sent."""

    process: str = option("poisson", "offline | constant | poisson | gamma | closed | trace | ramp")
    rate_rps: float | None = option(1.0, "constant, poisson, gamma: mean requests per second; ramp: the rate it rises to")
    burstiness: float = option(1.0, "gamma shape b: gap CV = 1/sqrt(b); 1 is Poisson, < 1 burstier")
    concurrency: int | None = option(None, "closed: requests kept in flight at all times")
    trace_path: str | None = option(None, "trace: JSONL or CSV (timestamp ms, input_length, output_length, hash_ids)")
    trace_speedup: float = option(1.0, "trace: replay this many times faster")
    ramp_start_rps: float = option(0.0, "ramp: the rate at t=0; rate_rps is the rate it rises to")
    ramp_duration_s: float | None = option(None, "ramp: seconds from the start rate to rate_rps")
    ramp_steps: int | None = option(None, "ramp: null rises linearly; n rises in n equal steps")
    max_concurrency: int | None = option(None, "open loops: at most this many requests in flight; a request due while they are waits (its client_queue_s), its TTFT still counted from its intended arrival")

    def __post_init__(self) -> None:
        ARRIVALS.check("process", self.process)
        kind = ARRIVALS.get(self.process)
        check_positive(self, "rate_rps", "burstiness", "concurrency", "trace_speedup",
                       "max_concurrency")
        if kind.closed_loop and self.max_concurrency is not None:
            raise ConfigError("max_concurrency", self.max_concurrency,
                              "the closed loop holds its concurrency itself; cap an open process")
        if kind.needs_rate and self.rate_rps is None:
            raise ConfigError(
                "rate_rps", None, f"arrival process {self.process!r} needs a rate > 0"
            )
        if kind.closed_loop and self.concurrency is None:
            raise ConfigError("concurrency", None, "the closed loop needs a concurrency >= 1")
        if kind.needs_trace and not self.trace_path:
            raise ConfigError("trace_path", self.trace_path, "the trace process needs a trace file")
        check_positive(self, "ramp_start_rps", allow_none=False, strict=False)
        check_positive(self, "ramp_duration_s", "ramp_steps")
        if self.process == "ramp" and self.ramp_duration_s is None:
            raise ConfigError("ramp_duration_s", None, "the ramp process needs a duration > 0")
