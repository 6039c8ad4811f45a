"""What the load generator itself cost, and why a request went out late when it did.

A `CpuMeter` is read on the event loop's thread when the measured phase starts and when it
ends. It takes three clocks of the process it runs in (Linux):

    process CPU   time.process_time(): every thread of the process (the loop, the telemetry
                  sampler, the /metrics scraper, the progress display)
    loop CPU      time.thread_time() on the loop's thread: asyncio runs there alone, so its
                  share of the window is the share of the one core the client can use
    idle spin     of the loop CPU, what the loop spent spinning before a send with nothing
                  else to run (loadgen.py, `_sleep_until`): it would give that to any work,
                  so the loop's busy share, the one weighed against a core, leaves it out
    run-queue wait  /proc/thread-self/schedstat's second field: the loop's thread was
                  runnable but another thread or process held the core

From them, with the records, `client_summary` gives the run's figures and
`llmperf/measure/validity.py` the verdict on the client: its own CPU was the limit (the loop
near a whole core), the host was contended (the loop waiting to run while its own CPU was
low), or the connection pool was exhausted (every connection busy). A request is late when
its client delay — intended arrival to its last byte written (HTTP), else to its hand-off
to the engine — passes `scenario.validity.max_client_delay_s`; the verdict counts the late
share of requests, not a p99, which over a few dozen requests is their maximum.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmperf.measure.metrics import distribution
from llmperf.measure.records import RequestRecord
from llmperf.measure.steady import in_flight_curve

SCHEDSTAT = Path("/proc/thread-self/schedstat")


def _runqueue_wait_s() -> float | None:
    try:
        return int(SCHEDSTAT.read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class ProcessCpu:
    """One load-generator process over the measured phase."""

    role: str  # "loadgen", "worker N" or "coordinator"
    window_s: float
    process_cpu_s: float
    loop_cpu_s: float
    loop_wait_s: float | None  # None where schedstat cannot be read
    loop_spin_s: float = 0.0  # of loop_cpu_s, the idle spin (0 in records written before it)

    @property
    def loop_share(self) -> float:
        """The loop's busy share of the window: its CPU less its idle spin."""
        return (self.loop_cpu_s - self.loop_spin_s) / self.window_s if self.window_s > 0 else 0.0

    @property
    def spin_share(self) -> float:
        return self.loop_spin_s / self.window_s if self.window_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProcessCpu:
        return cls(**d)


class CpuMeter:
    """Read `start()` and `stop()` on the thread that runs the load generator's loop."""

    def __init__(self, role: str = "loadgen") -> None:
        self.role = role
        self._start: tuple[float, float, float, float | None] | None = None

    @staticmethod
    def _read() -> tuple[float, float, float, float | None]:
        return time.perf_counter(), time.process_time(), time.thread_time(), _runqueue_wait_s()

    def start(self) -> None:
        self._start = self._read()

    def stop(self, spin_s: float = 0.0) -> ProcessCpu | None:
        """The window's figures; `spin_s`, the loop's idle spin over it (a wall-clock sum),
        is held to the loop's CPU: a turn preempted yet short enough to count was no CPU."""
        if self._start is None:
            return None
        (t0, p0, l0, w0), (t1, p1, l1, w1) = self._start, self._read()
        wait = None if w0 is None or w1 is None else w1 - w0
        return ProcessCpu(self.role, t1 - t0, p1 - p0, l1 - l0, wait, min(spin_s, l1 - l0))


def client_delay_s(record: RequestRecord) -> float:
    """Intended arrival to the last byte written (HTTP), else to the hand-off to the engine;
    less the time a new connection took to open (the network's and the server's, not the
    client's), and less the wait for a slot under arrival.max_concurrency (the cap's, on
    purpose): the delay counts from the later of the intended arrival and the slot's release."""
    ready_s = record.arrival_s + record.client_queue_s
    if record.written_s is None:
        return max(record.dispatch_s - ready_s, 0.0)
    return max(record.written_s - ready_s - (record.connect_s or 0.0), 0.0)


def max_in_flight(records: list[RequestRecord]) -> int:
    """The most requests in flight at once (dispatched, not ended)."""
    return max((n for _, n in in_flight_curve(records)), default=0)


def client_summary(processes: list[ProcessCpu], records: list[RequestRecord],
                   loop_lag_s: list[float], max_delay_s: float) -> dict[str, Any]:
    """The client's figures: its CPU (all its processes), the busiest loop's busy share of a
    core and its idle spin's share, its run-queue wait, each request's client delay with the
    share past `max_delay_s`, and the share of event-loop lag probes past it too (a late loop
    stamps receipts late)."""
    measured = [r for r in records if not r.warmup]
    late_probes = sum(lag > max_delay_s for lag in loop_lag_s)
    delays = [client_delay_s(r) for r in measured]
    late = [r for r, d in zip(measured, delays, strict=True) if d > max_delay_s]
    pool_late = [r for r in late if (r.pool_wait_s or 0.0) > max_delay_s]
    cpu_s = sum(p.process_cpu_s for p in processes)
    busiest = max(processes, key=lambda p: p.loop_share, default=None)
    waits = [p.loop_wait_s / p.window_s for p in processes if p.loop_wait_s is not None and p.window_s > 0]
    return {
        "client_cpu_s": cpu_s if processes else None,
        "client_cpu_per_request_s": cpu_s / len(measured) if processes and measured else None,
        "client_cpu_share": busiest.loop_share if busiest else None,
        "client_spin_share": busiest.spin_share if busiest else None,
        "client_process_cpu_share": (
            cpu_s / max(p.window_s for p in processes) if processes and busiest.window_s > 0 else None
        ),
        "client_runqueue_wait_share": max(waits) if waits else None,
        "client_processes": [p.to_dict() for p in processes],
        "client_delay_s": distribution(delays),
        "client_late_fraction": len(late) / len(measured) if measured else None,
        "client_pool_late_fraction": len(pool_late) / len(measured) if measured else None,
        "client_max_in_flight": max_in_flight(measured) if measured else None,
        "event_loop_late_fraction": late_probes / len(loop_lag_s) if loop_lag_s else None,
        "event_loop_late_probes": late_probes,
    }
