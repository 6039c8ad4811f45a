"""One load worker's side of the processes backend (llmperf/measure/workers.py) and of a
Ray actor's child (backends/ray_child.py): what it is given (`WorkerSpec`), its entry in a
process of its own (`child_main`: it dies with the thread that started it, then sends its
messages over the coordinator's stream, backends/record_stream.py) and its load
(`worker_main`: the engine built again from the run's options, the load generator's loop
on its share, its records in batches, the coordinator's control messages obeyed)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import math
import os
import queue
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, replace
from typing import Any

from engines.base import Request
from llmperf.measure import event_loop
from llmperf.measure.backends.record_stream import StreamQueue
from llmperf.measure.loadgen import LoadGenerator, LoadResult
from llmperf.measure.records import RequestRecord
from llmperf.measure.saturation import SaturationConfig, SaturationDetector

CONTROL_POLL_S = 0.02  # how often a worker looks for the coordinator's messages
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
