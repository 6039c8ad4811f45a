"""Arrival processes: when each request is meant to arrive, in seconds from the start of
the measured load. One function per process, picked by name from `ARRIVALS`."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from llmperf.run.config import ArrivalConfig
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


ARRIVALS: dict[str, ArrivalProcess] = {
    "offline": ArrivalProcess(offline_times),
    "constant": ArrivalProcess(constant_times, needs_rate=True),
    "poisson": ArrivalProcess(poisson_times, needs_rate=True),
    "gamma": ArrivalProcess(gamma_times, needs_rate=True),
    "closed": ArrivalProcess(offline_times, closed_loop=True),
    "trace": ArrivalProcess(trace_times, needs_trace=True),
}
