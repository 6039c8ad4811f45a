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
    GC pauses     Python's garbage collections in the process (gc.callbacks), each one a
                  stop of the loop, whichever thread ran it: their sum and the longest

From them, with the records, `client_summary` gives the run's figures and
`llmperf/measure/validity.py` the verdict on the client: its own CPU was the limit (the loop
near a whole core), the host was contended (the loop waiting to run while its own CPU was
low), or the connection pool was exhausted (every connection busy). A request is late when
its client delay — intended arrival to its last byte written (HTTP), else to its hand-off
to the engine — passes `scenario.validity.max_client_delay_s`; the verdict counts the late
share of requests, not a p99, which over a few dozen requests is their maximum.
"""

from __future__ import annotations

import gc
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
    gc_pause_s: float = 0.0  # the process's garbage collections over the window, summed
    gc_max_pause_s: float = 0.0  # and the longest (0 in records written before them)

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


class GcPauses:
    """Times every garbage collection of this process while installed (gc.callbacks): a
    collection holds the GIL, so the loop stops for it whichever thread runs it."""

    def __init__(self) -> None:
        self.total_s = self.max_s = 0.0
        self._since: float | None = None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._since = time.perf_counter()
        elif self._since is not None:
            pause = time.perf_counter() - self._since
            self.total_s += pause
            self.max_s = max(self.max_s, pause)
            self._since = None

    def install(self) -> None:
        gc.callbacks.append(self)

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


class CpuMeter:
    """Read `start()` and `stop()` on the thread that runs the load generator's loop."""

    def __init__(self, role: str = "loadgen") -> None:
        self.role = role
        self._start: tuple[float, float, float, float | None] | None = None
        self._gc = GcPauses()

    @staticmethod
    def _read() -> tuple[float, float, float, float | None]:
        return time.perf_counter(), time.process_time(), time.thread_time(), _runqueue_wait_s()

    def start(self) -> None:
        self._gc.remove()
        self._gc = GcPauses()
        self._gc.install()
        self._start = self._read()

    def stop(self, spin_s: float = 0.0) -> ProcessCpu | None:
        """The window's figures; `spin_s`, the loop's idle spin over it (a wall-clock sum),
        is held to the loop's CPU: a turn preempted yet short enough to count was no CPU."""
        if self._start is None:
            return None
        (t0, p0, l0, w0), (t1, p1, l1, w1) = self._start, self._read()
        self._gc.remove()
        wait = None if w0 is None or w1 is None else w1 - w0
        return ProcessCpu(self.role, t1 - t0, p1 - p0, l1 - l0, wait, min(spin_s, l1 - l0),
                          self._gc.total_s, self._gc.max_s)


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


def stall_s(records: list[RequestRecord], delays: list[float], bound_s: float) -> float:
    """A lower bound on how long the client's loops stood still: each worker's late requests
    (client delay past `bound_s`) in runs of consecutive ones, in the order they were due, each
    run counted by its longest delay (one stall of 50 ms makes five requests 10 ms apart late
    by 50 to 10 ms: 50 ms)."""
    due: dict[int, list[tuple[float, float]]] = {}
    for record, delay in zip(records, delays, strict=True):
        due.setdefault(record.worker, []).append((record.arrival_s + record.client_queue_s, delay))
    total = 0.0
    for items in due.values():
        items.sort()
        longest = 0.0
        for _, delay in items:
            if delay > bound_s:
                longest = max(longest, delay)
            else:
                total, longest = total + longest, 0.0
        total += longest
    return total


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
    window_s = max((p.window_s for p in processes), default=0.0)
    senders = [p for p in processes if p.role != "coordinator"]  # the loops that send
    return {
        "client_cpu_s": cpu_s if processes else None,
        "client_cpu_per_request_s": cpu_s / len(measured) if processes and measured else None,
        "client_cpu_share": busiest.loop_share if busiest else None,
        "client_spin_share": busiest.spin_share if busiest else None,
        "client_process_cpu_share": cpu_s / window_s if window_s > 0 else None,
        "client_runqueue_wait_share": max(waits) if waits else None,
        "client_stall_share": (stall_s(measured, delays, max_delay_s) / window_s
                               if window_s else None),
        "client_runqueue_wait_total_share": (
            sum(p.loop_wait_s for p in senders) / window_s
            if window_s and all(p.loop_wait_s is not None for p in senders) else None),
        "client_gc_pause_share": max((p.gc_pause_s / p.window_s for p in senders
                                      if p.window_s > 0), default=None),
        "client_gc_max_pause_s": max((p.gc_max_pause_s for p in senders), default=None),
        "client_processes": [p.to_dict() for p in processes],
        "client_delay_s": distribution(delays),
        "client_late_fraction": len(late) / len(measured) if measured else None,
        "client_pool_late_fraction": len(pool_late) / len(measured) if measured else None,
        "client_max_in_flight": max_in_flight(measured) if measured else None,
        "event_loop_late_fraction": late_probes / len(loop_lag_s) if loop_lag_s else None,
        "event_loop_late_probes": late_probes,
    }
