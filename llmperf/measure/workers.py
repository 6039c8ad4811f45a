"""The load over several worker processes (`scenario.client.workers`).

One asyncio loop in one process tops out at some request rate (its dispatch lag and event-loop
lag say when: llmperf/measure/validity.py). `WorkerPool` splits the load over N processes,
each with its own event loop, its own engine (built again from the run's options: engines
that declare `capabilities.multiprocess`, the HTTP client, reach the same server from another
process; an in-process engine whose options say `copies_serve_alike()`, the synthetic engine
without a concurrency limit, answers in each worker as one shared copy would) and its own
share of the precomputed schedule:

- open loop: request k (in arrival order) goes to worker k mod N, with its intended arrival
  unchanged, so the union of the shares is exactly the one-process schedule;
- closed loop: requests round robin as well, the concurrency split as evenly as it goes;
- warmup requests round robin too (each worker opens its own connections).

**One time base.** The coordinator picks the run's origin as an absolute time,
`time.time_ns()`. Each process converts it once into its own `time.perf_counter()` (the
paired reading of both clocks with the shortest gap, a few microseconds at most) and stamps
everything as seconds from it, so every worker's records, and the coordinator's telemetry and
scrapes, share one clock. After its warmup each worker says it is ready; once all are, the
coordinator sets the measured phase's start a moment ahead (`START_LEAD_S`) and every worker
sleeps until that same instant, so arrival k is `start + arrival_k` whichever worker sends it.

Records come back as requests end, each worker's on a connection of its own to the
coordinator (llmperf/measure/backends/record_stream.py, the Ray backend's transport too), and
go to `on_record` there (requests.jsonl, progress). Each worker dies with the coordinator's
thread that started it (Linux: PR_SET_PDEATHSIG), so a coordinator killed outright leaves no
load running. Stopping: `stop_sending` (a launched server died) and the first
SIGINT reach every worker; a worker whose saturation detector fires (its `min_waiting` is the
run's divided by N: it sees 1/N of the queue) stops the others with the same verdict, its rate
scaled by N. Multi-turn sessions stay in one process: their turns wait on each other's replies.

This module is the coordinator's side; each worker's own is llmperf/measure/worker_process.py.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import pickle
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from llmperf.measure import gc_quiet
from llmperf.measure.backends.plan import LoadParts, LoadPlan
from llmperf.measure.backends.record_stream import RecordStream
from llmperf.measure.client_cpu import CpuMeter
from llmperf.measure.loadgen import LoadResult
from llmperf.measure.records import RequestRecord
from llmperf.measure.saturation import Saturation, SaturationConfig
from llmperf.measure.worker_process import WorkerSpec, child_main, perf_origin

START_LEAD_S = 0.1  # from "all workers ready" to the measured phase's start
READ_WAIT_S = 0.2  # the coordinator looks for a dead worker this often, while others send too


def scaled_saturation(config: SaturationConfig | None, workers: int) -> SaturationConfig | None:
    """Each worker's detector sees 1/N of the queue: its `min_waiting` is the run's over N."""
    if config is None:
        return None
    return replace(config, min_waiting=max(1, math.ceil(config.min_waiting / workers)))


def scaled_verdict(verdict: Saturation, workers: int) -> Saturation:
    """One worker's saturation verdict as the run's: its rate and queue times N."""
    return replace(verdict, rate_rps=verdict.rate_rps * workers, waiting=verdict.waiting * workers)


def split(items: list, workers: int) -> list[list]:
    """Round robin: item k to worker k mod `workers`."""
    return [items[i::workers] for i in range(workers)]


def split_concurrency(concurrency: int, workers: int) -> list[int]:
    return [concurrency // workers + (i < concurrency % workers) for i in range(workers)]


class WorkerPool:
    """Runs the load in `workers` processes; `run` blocks until every worker has ended."""

    def __init__(
        self,
        workers: int,
        engine_options: Any,
        model: str,
        on_record: Callable[[RequestRecord], None],
        saturation: SaturationConfig | None = None,
        record_tokens: bool = False,
        on_measure_start: Callable[[], None] = lambda: None,
        event_loop: str = "auto",
    ) -> None:
        self.workers = workers
        self.event_loop = event_loop
        self.engine_options = engine_options
        self.model = model
        self.on_record = on_record
        self.saturation = saturation
        self.record_tokens = record_tokens
        self.on_measure_start = on_measure_start
        self._controls: list[Any] = []
        self._lock = threading.Lock()
        self.clocks: list = []  # one host, one clock: no offsets to measure
        self.lost: list = []  # a worker that dies ends the run (RuntimeError)

    @classmethod
    def from_options(cls, client: Any, parts: LoadParts) -> WorkerPool:
        """From scenario.client (llmperf/measure/client_options.py) and the run's parts."""
        return cls(client.workers, parts.engine_options, parts.model, parts.on_record,
                   saturation=parts.saturation, record_tokens=parts.record_tokens,
                   on_measure_start=parts.on_measure_start, event_loop=client.event_loop)

    def stop_sending(self, reason: str) -> None:
        """Every worker sends nothing more; what is in flight ends on its own. Any thread."""
        self._tell_all(("stop_sending", reason))

    def interrupt(self) -> None:
        self._tell_all(("interrupt", None))

    def _tell_all(self, message: tuple, but: int | None = None) -> None:
        with self._lock:
            for i, control in enumerate(self._controls):
                if i != but:
                    control.put(message)

    def run(self, plan: LoadPlan) -> LoadResult:
        """The plan's warmup and requests (a list: split before the run) over the workers."""
        warmup, requests = plan.warmup, list(plan.requests)
        concurrency, duration_s = plan.concurrency, plan.duration_s
        ctx = mp.get_context("spawn")  # not fork: the coordinator runs threads (telemetry, HTTP)
        n = self.workers
        origin_unix_ns = time.time_ns()
        origin_s = perf_origin(origin_unix_ns)
        shares = split_concurrency(concurrency, n) if concurrency is not None else [None] * n
        saturation = scaled_saturation(self.saturation, n)
        failures = ctx.Queue()  # a worker that could not reach the stream says why here
        go, start_at = ctx.Event(), ctx.Value("d", 0.0)
        with self._lock:
            self._controls = [ctx.Queue() for _ in range(n)]
        stream = RecordStream("127.0.0.1", n)
        processes = []
        try:
            for i, (w, r) in enumerate(zip(split(warmup, n), split(requests, n), strict=True)):
                spec = WorkerSpec(i, self.engine_options, self.model, w, r, shares[i], duration_s,
                                  saturation, self.record_tokens, origin_unix_ns, self.event_loop)
                p = ctx.Process(target=child_main,
                                args=(os.getpid(), spec, failures, self._controls[i], go, start_at,
                                      (stream.address, stream.authkey)),
                                name=f"llmperf-worker-{i}", daemon=True)
                p.start()
                processes.append(p)
            results, verdict, coordinator = self._collect(stream, failures, processes, go,
                                                          start_at, origin_s)
        finally:
            stream.close()
        _join(processes)
        merged = merge(results, origin_s, origin_unix_ns, start_at.value, verdict)
        cpu = coordinator.stop()  # its thread merges the records; it runs no loop of requests
        merged.client_cpu += [cpu] if cpu is not None else []
        return merged

    def _collect(self, stream: RecordStream, failures, processes: list, go, start_at,
                 origin_s: float) -> tuple[dict[int, LoadResult], Saturation | None, CpuMeter]:
        """Every worker's messages until each has said it is done; the start set once all are
        ready. A worker that fails, or exits without a word, ends the run (RuntimeError)."""
        n = len(processes)
        results: dict[int, LoadResult] = {}
        verdict: Saturation | None = None
        ready = 0
        coordinator = CpuMeter("coordinator")
        refreeze = gc_quiet.Refreezer()
        checked = time.perf_counter()  # when dead workers were last looked for
        with _forward_sigint(self.interrupt), gc_quiet.frozen():
            while len(results) < n:
                if ready == n:
                    refreeze()
                for _, messages in stream.read(READ_WAIT_S):
                    for kind, index, payload in map(pickle.loads, messages):
                        if kind == "records":
                            for record in payload:
                                self.on_record(record)
                        elif kind == "ready":
                            ready += 1
                            if ready == n:
                                gc_quiet.settle()  # before the start: out of the measured phase
                                start_at.value = time.perf_counter() - origin_s + START_LEAD_S
                                go.set()
                                coordinator.start()
                                self.on_measure_start()
                        elif kind == "saturated" and verdict is None:
                            verdict = scaled_verdict(payload, n)
                            self._tell_all(("saturated", verdict), but=index)
                        elif kind == "done":
                            results[index] = payload
                        elif kind == "failed":
                            self.interrupt()
                            _join(processes)
                            raise RuntimeError(f"load worker {index} failed:\n{payload}")
                if time.perf_counter() - checked >= READ_WAIT_S:  # not at every batch
                    checked = time.perf_counter()
                    self._end_if_dead(processes, results, failures, stream)
        return results, verdict, coordinator

    def _end_if_dead(self, processes: list, results: dict, failures, stream: RecordStream) -> None:
        """A worker whose connection ended before its "done" (every byte of it read), or that
        exited without ever connecting, ends the run, with what it said. Looked for while the
        others still send: a worker killed mid-run ends the run then, not at the schedule's end."""
        heard = stream.heard()
        dead = [p for i, p in enumerate(processes) if i not in results and (
            i in stream.closed or (i not in heard and p.exitcode is not None))]
        if not dead:
            return
        self.interrupt()
        _join(processes)
        with contextlib.suppress(queue.Empty):
            _, index, why = failures.get(timeout=0.5)
            raise RuntimeError(f"load worker {index} failed: {why}") from None
        raise RuntimeError(f"load worker {dead[0].name} exited with code {dead[0].exitcode}"
                           ) from None


def merge(results: dict[int, LoadResult], origin_s: float, origin_unix_ns: int, start_s: float,
          verdict: Saturation | None) -> LoadResult:
    """The workers' results as one run's, on the coordinator's clock."""
    parts = [results[i] for i in sorted(results)]
    return LoadResult(
        origin_perf_counter_s=origin_s,
        origin_unix_s=origin_unix_ns / 1e9,
        measure_start_s=start_s,
        end_s=max(p.end_s for p in parts),
        num_warmup=sum(p.num_warmup for p in parts),
        num_dispatched=sum(p.num_dispatched for p in parts),
        interrupted=any(p.interrupted for p in parts),
        saturation=verdict,
        loop_lag_s=[lag for p in parts for lag in p.loop_lag_s],
        stopped=next((p.stopped for p in parts if p.stopped), None),
        client_cpu=[cpu for p in parts for cpu in p.client_cpu],
    )


def _join(processes: list) -> None:
    for p in processes:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join()


@contextlib.contextmanager
def _forward_sigint(forward: Callable[[], None]):
    """Ctrl-C reaches the workers (they share the terminal's process group; a SIGINT sent to
    the coordinator alone is passed on); the coordinator waits for their records."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: forward())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
