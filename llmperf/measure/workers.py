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
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import math
import multiprocessing as mp
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from engines.base import Request
from llmperf.measure import event_loop, gc_quiet
from llmperf.measure.backends.plan import LoadParts, LoadPlan
from llmperf.measure.backends.record_stream import RecordStream, StreamQueue
from llmperf.measure.client_cpu import CpuMeter
from llmperf.measure.loadgen import LoadGenerator, LoadResult
from llmperf.measure.records import RequestRecord
from llmperf.measure.saturation import Saturation, SaturationConfig, SaturationDetector

START_LEAD_S = 0.1  # from "all workers ready" to the measured phase's start
CONTROL_POLL_S = 0.02  # how often a worker looks for the coordinator's messages
READ_WAIT_S = 0.2  # the coordinator looks for a dead worker when none has sent for this long
PR_SET_PDEATHSIG = 1  # Linux prctl: a signal for the child when the thread that started it ends
# A worker sends its ended requests' records in batches this often, and at most this many
# to a batch. The coordinator's turn at a batch (unpickling it, writing its records) takes a
# core from a load for as long on a host they share: 16 records, about 0.2 ms. Batches of
# 0.05 s (155 records at 3100 req/s a worker) held a load off its core ~2 ms each: dispatch
# lag p99 2.7 ms at 6200 req/s over two workers on 2 cores, 1.0 ms in batches of 0.005 s
# (docs/sizing.md).
RECORDS_FLUSH_S = 0.005
RECORDS_BATCH = 16


def perf_origin(origin_unix_ns: int, reads: int = 5) -> float:
    """The absolute time `origin_unix_ns` on this process's perf_counter() clock."""
    best_gap_s, origin_s = math.inf, 0.0
    for _ in range(reads):
        before, unix_ns, after = time.perf_counter(), time.time_ns(), time.perf_counter()
        if after - before < best_gap_s:
            best_gap_s = after - before
            origin_s = (before + after) / 2 - (unix_ns - origin_unix_ns) / 1e9
    return origin_s


def scaled_saturation(config: SaturationConfig | None, workers: int) -> SaturationConfig | None:
    """Each worker's detector sees 1/N of the queue: its `min_waiting` is the run's over N."""
    if config is None:
        return None
    return replace(config, min_waiting=max(1, math.ceil(config.min_waiting / workers)))


def split(items: list, workers: int) -> list[list]:
    """Round robin: item k to worker k mod `workers`."""
    return [items[i::workers] for i in range(workers)]


def split_concurrency(concurrency: int, workers: int) -> list[int]:
    return [concurrency // workers + (i < concurrency % workers) for i in range(workers)]


@dataclass
class WorkerSpec:
    """What one worker process needs, pickled to it."""

    index: int
    engine_options: Any  # the engine's options dataclass
    model: str
    warmup: list[Request]
    requests: list[Request]
    concurrency: int | None
    duration_s: float | None
    saturation: SaturationConfig | None
    record_tokens: bool
    origin_unix_ns: int
    event_loop: str = "auto"
    # How often the worker looks for the coordinator's messages and sends its records (a Ray
    # actor's too: it puts them in its own outbox, backends/ray_actors.py).
    control_poll_s: float = CONTROL_POLL_S
    records_flush_s: float = RECORDS_FLUSH_S
    records_batch: int = RECORDS_BATCH
    node: str | None = None  # the Ray node it runs on (backends/ray_pool.py), set on its records


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
        with _forward_sigint(self.interrupt), gc_quiet.frozen():
            while len(results) < n:
                if ready == n:
                    refreeze()
                got = stream.read(READ_WAIT_S)
                if not got:
                    self._end_if_dead(processes, results, failures)
                    continue
                for _, messages in got:
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
                        elif kind == "saturated":
                            if verdict is None:
                                verdict = replace(payload, rate_rps=payload.rate_rps * n,
                                                  waiting=payload.waiting * n)
                                self._tell_all(("saturated", verdict), but=index)
                        elif kind == "done":
                            results[index] = payload
                        elif kind == "failed":
                            self.interrupt()
                            _join(processes)
                            raise RuntimeError(f"load worker {index} failed:\n{payload}")
        return results, verdict, coordinator

    def _end_if_dead(self, processes: list, results: dict, failures) -> None:
        """A worker that has exited before its "done" ends the run, with what it said."""
        dead = [p for i, p in enumerate(processes) if i not in results and p.exitcode is not None]
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


# -- in the worker process ---------------------------------------------------------------


def worker_main(spec: WorkerSpec, results_q, control, go, start_at) -> None:
    """One worker's load, in a process of its own (a Ray actor's thread: backends/ray_pool.py)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # until the load generator takes it over
    try:
        from engines.registry import build_engine

        engine = build_engine(spec.engine_options, spec.model)
        engine.start()
        try:
            result = event_loop.run(_drive(spec, engine, results_q, control, go, start_at),
                                    spec.event_loop)
        finally:
            engine.stop()
        results_q.put(("done", spec.index, result))
    except BaseException:
        results_q.put(("failed", spec.index, traceback.format_exc()))


def child_main(parent_pid: int, spec: WorkerSpec, results_q, control, go, start_at,
               stream: tuple | None = None) -> None:
    """A worker process's entry: die with the thread that started it (the coordinator's, or a
    Ray actor's: backends/ray_child.py), then `worker_main`, its messages to the coordinator
    over a `stream` (address, key; backends/record_stream.py), its priority first (the Ray
    backend reports one below the coordinator's), or, with none, into `results_q`. One that
    cannot reach the stream says why in `results_q`."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before the request took hold
            return
    if stream is None:
        worker_main(spec, results_q, control, go, start_at)
        return
    address, key = stream
    try:
        out = StreamQueue(address, key, spec.index)
    except Exception as error:  # refused, unreachable, a wrong key
        results_q.put(("failed", spec.index,
                       f"could not reach the coordinator at {address[0]}:{address[1]} to send "
                       f"its records ({type(error).__name__}: {error})"))
        return
    out.put(("priority", spec.index, os.getpriority(os.PRIO_PROCESS, 0)))
    try:
        worker_main(spec, out, control, go, start_at)
    finally:
        out.close()


async def _drive(spec: WorkerSpec, engine, results_q, control, go, start_at) -> LoadResult:
    loop = asyncio.get_running_loop()
    detector = SaturationDetector(spec.saturation) if spec.saturation is not None else None

    async def measure_at() -> float:
        results_q.put(("ready", spec.index, None))
        await loop.run_in_executor(None, go.wait)
        return start_at.value

    # Records go to the coordinator in batches: one queue message (one pickling, one wakeup of
    # the coordinator) per RECORDS_FLUSH_S or RECORDS_BATCH records rather than per request,
    # which at thousands of requests per second took the cores the workers were added for.
    pending: list[RequestRecord] = []

    def flush() -> None:
        if pending:
            results_q.put(("records", spec.index, list(pending)))
            pending.clear()

    def kept(record: RequestRecord) -> None:
        pending.append(replace(record, worker=spec.index, node=spec.node))
        if len(pending) >= spec.records_batch:
            flush()

    async def flush_often() -> None:
        while True:
            await asyncio.sleep(spec.records_flush_s)
            flush()

    loadgen = LoadGenerator(
        engine,
        kept,
        saturation=detector,
        record_tokens=spec.record_tokens,
        origin_perf_counter_s=perf_origin(spec.origin_unix_ns),
        measure_at=measure_at,
        role=f"worker {spec.index}",
    )
    told: set[str] = set()
    poller = loop.create_task(_obey(control, loadgen, told, spec.control_poll_s))
    flusher = loop.create_task(flush_often())
    try:
        result = await loadgen.run(spec.warmup, spec.requests, spec.concurrency, spec.duration_s)
    finally:
        poller.cancel()
        flusher.cancel()
        flush()  # before "done": the coordinator has every record when it hears the worker is done
    if result.saturation is not None and "saturated" not in told:  # its own detector's verdict
        results_q.put(("saturated", spec.index, result.saturation))
    return result


async def _obey(control, loadgen: LoadGenerator, told: set[str], poll_s: float) -> None:
    """The coordinator's messages: stop sending, interrupt, another worker's saturation."""
    while True:
        await asyncio.sleep(poll_s)
        with contextlib.suppress(queue.Empty):
            while True:
                kind, payload = control.get_nowait()
                told.add(kind)
                if kind == "stop_sending":
                    loadgen.stop_sending(payload)
                elif kind == "interrupt":
                    loadgen.interrupt()
                elif kind == "saturated":
                    loadgen.stop_saturated(payload)
