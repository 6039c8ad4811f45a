"""The load over Ray actors on a cluster's nodes (`scenario.client.backend=ray`).

The same split as the local processes (llmperf/measure/workers.py: request k to worker
k mod N, warmup round robin, one coordinator), with Ray placing the workers and carrying
their messages, and one thing Ray does not do: one clock.

- **Placement.** One actor per worker, each in its own bundle of a SPREAD placement group,
  so the workers land on as many nodes as the cluster has (`node` in every record).
- **Messages.** The load generator's loop makes no Ray call: it runs in a child process of
  the actor, as a local worker's does (ray_child.py), and sends its messages (records in
  batches, ready, saturated, done) on a connection of its own to the coordinator, who reads
  them as they come, in order (record_stream.py). With `LLMPERF_RAY_RELAY=take` the coordinator
  keeps one `take` call per worker waiting instead, which reads the child's pipe every
  POLL_S (backends/ray_actors.py). Control messages (stop sending, interrupt, another
  worker's saturation) and the measured phase's start are calls to the actor's other threads.
- **One clock.** Before the run, the coordinator measures each worker's wall-clock offset
  with ping-pong probes (llmperf/measure/clock.py) and hands it the run's origin on the
  worker's own clock; it probes again every `REPROBE_S` and at the end for the drift.
- **Priority.** Each actor runs at the coordinator's nice, not the `worker_niceness` (15)
  Ray starts its workers at (backends/ray_actors.py); one that cannot be lifted is named in
  a warning. Once its child streams the load, the actor yields its cores (SCHED_IDLE), and
  so do the daemons of a Ray started here for the run and, from the measured phase's start,
  that Ray's threads in the coordinator's process (backends/ray_yield.py); the actor's and
  the coordinator's move back once the load has ended, for the last clock probes. Such a Ray
  also does its periodic work less often (ray_settings.py's QUIET_PERIODS).
- **Faults.** A worker whose actor dies (its node lost, the actor killed) is noticed within
  `POLL_S`: its requests that were due (open loop; closed: in its slots) and have no record
  are recorded as failed with `worker lost`, the others go on, and the loss is reported.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

from llmperf.errors import require
from llmperf.measure import gc_quiet
from llmperf.measure.backends.plan import LoadParts, LoadPlan
from llmperf.measure.backends.ray_actors import LOAD_IN, actor_class, taken
from llmperf.measure.backends.ray_lost import LostWorker, in_flight, lost_record
from llmperf.measure.backends.ray_settings import RELAYS, load_in, relay, start_ray
from llmperf.measure.backends.ray_yield import resume, thread_ids, yield_driver, yield_local_ray
from llmperf.measure.backends.record_stream import RecordStream
from llmperf.measure.client_cpu import CpuMeter
from llmperf.measure.clock import ClockTrack, OffsetEstimate, estimate_offset
from llmperf.measure.loadgen import LoadResult
from llmperf.measure.records import RequestRecord
from llmperf.measure.saturation import Saturation, SaturationConfig
from llmperf.measure.worker_process import WorkerSpec, perf_origin
from llmperf.measure.workers import (
    START_LEAD_S,
    merge,
    scaled_saturation,
    scaled_verdict,
    split,
    split_concurrency,
)

POLL_S = 0.1  # the coordinator takes each worker's messages, and looks for lost ones, this often
TAKE_WAIT_S = 1.0  # a worker's `take` returns once it has messages, else after this
REPROBE_S = 5.0  # clock offsets are measured again this often during the run
CLOCK_TARGET = 0.5  # before and after the load, probes go on (clock.py's budget) until one
# bounds the offset within this share of scenario.validity.max_clock_uncertainty_s

log = logging.getLogger(__name__)


def _ray():
    return require("ray", "ray", "scenario.client.backend=ray")


class RayPool:
    """Runs the load in `workers` Ray actors; `run` blocks until every worker has ended or
    been lost. After `run`: `clocks` (a ClockTrack per worker), `lost` (LostWorker) and
    `priorities` (each worker's nice, as its load loop ran)."""

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
        address: str = "auto",
        cpus_per_worker: float = 1.0,
        clock_correction: bool = True,
        clock_target_s: float = 0.0005,
        test_clock_offset_s: float = 0.0,
        load_in: str = LOAD_IN[0],
        relay: str = RELAYS[0],
    ) -> None:
        self.workers = workers
        self.engine_options = engine_options
        self.model = model
        self.on_record = on_record
        self.saturation = saturation
        self.record_tokens = record_tokens
        self.on_measure_start = on_measure_start
        self.event_loop = event_loop
        self.address = address
        self.cpus_per_worker = cpus_per_worker
        self.clock_correction = clock_correction
        self.clock_target_s = clock_target_s  # an estimate before or after the load probes on
        self.test_clock_offset_s = test_clock_offset_s
        self.load_in = load_in  # "child": each actor's load in a process of its own
        self.relay = relay  # "take": the child's messages read by the coordinator's takes
        self.clocks: list[ClockTrack] = []
        self.lost: list[LostWorker] = []
        self.priorities: dict[int, int] = {}
        self.yielded: list[int] = []  # the daemons of a Ray started here, moved to SCHED_IDLE
        self.driver_yielded: list[int] = []  # and its threads in this process, at the start
        self.driver_resumed: list[int] = []  # those of them back to SCHED_OTHER at the end
        self._actors: list = []

    @classmethod
    def from_options(cls, client: Any, parts: LoadParts) -> RayPool:
        """From scenario.client (llmperf/measure/client_options.py) and the run's parts."""
        _ray()  # one line naming the extra before anything starts
        return cls(client.workers, parts.engine_options, parts.model, parts.on_record,
                   saturation=parts.saturation, record_tokens=parts.record_tokens,
                   on_measure_start=parts.on_measure_start, event_loop=client.event_loop,
                   address=client.ray_address, cpus_per_worker=client.ray_cpus_per_worker,
                   clock_correction=client.clock_correction,
                   clock_target_s=parts.clock_limit_s * CLOCK_TARGET,
                   test_clock_offset_s=client.test_clock_offset_s, load_in=load_in(),
                   relay=relay())

    def stop_sending(self, reason: str) -> None:
        self._tell_all(("stop_sending", reason))

    def interrupt(self) -> None:
        self._tell_all(("interrupt", None))

    def _tell_all(self, message: tuple, but: int | None = None) -> None:
        for i, actor in enumerate(list(self._actors)):  # any thread
            if i != but:
                with contextlib.suppress(Exception):  # a lost worker hears no more
                    actor.tell.remote(message)

    def run(self, plan: LoadPlan) -> LoadResult:
        """The plan's warmup and requests (a list: split before the run) over the actors."""
        warmup, requests = plan.warmup, list(plan.requests)
        concurrency, duration_s = plan.concurrency, plan.duration_s
        ray = _ray()
        started_here, local = not ray.is_initialized(), self.address == "local"
        # a Ray started here for the run: its threads in this process are the ones after these
        own_ray = thread_ids() if started_here and local else None
        if started_here:
            start_ray(ray, self.address, self.workers, self.cpus_per_worker)
        try:
            return self._run(ray, warmup, requests, concurrency, duration_s, own_ray)
        finally:
            actors, self._actors = self._actors, []
            for actor in actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
            if started_here:
                ray.shutdown()

    def _run(self, ray, warmup, requests, concurrency, duration_s,
             own_ray: set[int] | None) -> LoadResult:
        """`own_ray`: for a Ray started here for the run, this process's threads before it."""
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        n = self.workers
        group = placement_group([{"CPU": self.cpus_per_worker}] * n, strategy="SPREAD")
        ray.get(group.ready())
        streamed = self.relay == "stream" and self.load_in == "child"
        stream = RecordStream(ray.util.get_node_ip_address(), n) if streamed else None
        try:
            worker_cls = actor_class(ray)
            shifts = [self.test_clock_offset_s if i == n - 1 else 0.0 for i in range(n)]
            self._actors = [
                worker_cls.options(
                    num_cpus=self.cpus_per_worker,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(group, i),
                    name=f"llmperf-{os.getpid()}-worker-{i}",
                ).remote(shifts[i], self.load_in == "child", self.relay == "thread",
                         (stream.address, stream.authkey) if stream else None)
                for i in range(n)
            ]
            nodes = ray.get([a.node.remote() for a in self._actors])
            if own_ray is not None:  # after the actors: no worker the raylet starts inherits it
                pids = set(ray.get([a.pid.remote() for a in self._actors]))
                self.yielded = yield_local_ray(ray, pids)
            return self._drive(ray, nodes, warmup, requests, concurrency, duration_s, stream,
                               own_ray)
        finally:
            if stream is not None:
                stream.close()
            with contextlib.suppress(Exception):
                remove_placement_group(group)

    def _drive(self, ray, nodes, warmup, requests, concurrency, duration_s,
               stream: RecordStream | None, own_ray: set[int] | None) -> LoadResult:
        n = self.workers
        nice = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's: the coordinator's
        ray.get([actor.prioritize.remote(nice) for actor in self._actors])  # before the probes
        origin_unix_ns = time.time_ns()
        origin_s = perf_origin(origin_unix_ns)
        self.clocks = [
            ClockTrack(i, nodes[i], [_offset(ray, a, self.clock_target_s)], 0.0)
            for i, a in enumerate(self._actors)
        ]
        for track in self.clocks:
            track.applied_offset_s = track.first.offset_s if self.clock_correction else 0.0
        shares = split_concurrency(concurrency, n) if concurrency is not None else [None] * n
        saturation = scaled_saturation(self.saturation, n)
        schedule = split(requests, n)
        runs = {}
        for i, (w, r) in enumerate(zip(split(warmup, n), schedule, strict=True)):
            origin_here = origin_unix_ns + round(self.clocks[i].applied_offset_s * 1e9)
            spec = WorkerSpec(i, self.engine_options, self.model, w, r, shares[i], duration_s,
                              saturation, self.record_tokens, origin_here, self.event_loop,
                              node=nodes[i])
            runs[self._actors[i].run.remote(spec)] = i

        results: dict[int, LoadResult] = {}
        received: dict[int, list[list[RequestRecord]]] = {i: [] for i in range(n)}  # batches
        verdict: Saturation | None = None
        ready, start_s = 0, None
        coordinator = CpuMeter("coordinator")
        prober = _Reprober(ray, self._actors, self.clocks)
        takes: dict = {}  # one waiting `take` per running worker: its ref -> the worker
        refused: dict[int, float] = {}  # a worker whose take failed (lost?): asked again after POLL_S
        checked = 0.0  # perf_counter() when lost workers were last looked for
        refreeze = gc_quiet.Refreezer()
        try:
            while len(results) + len(self.lost) < n:
                if start_s is not None:
                    refreeze()
                if stream is not None:
                    answers = [(i, [pickle.loads(m) for m in got]) for i, got in stream.read(POLL_S)]
                else:
                    now = time.perf_counter()
                    asking = set(takes.values()) | set(results) | {lost.worker for lost in self.lost}
                    for i, actor in enumerate(self._actors):
                        if i not in asking and refused.get(i, 0.0) <= now:
                            takes[actor.take.remote(TAKE_WAIT_S, POLL_S)] = i
                    answers = _answers(ray, takes, refused)
                for index, messages in answers:
                    for kind, _, payload in messages:
                        if kind == "records":  # named by their worker and node already
                            received[index].append(payload)
                            for record in payload:
                                self.on_record(record)
                        elif kind == "ready":
                            ready += 1
                        elif kind == "priority":
                            self._note_priority(index, payload, nice, nodes[index])
                        elif kind == "saturated" and verdict is None:
                            verdict = scaled_verdict(payload, n)
                            self._tell_all(("saturated", verdict), but=index)
                        elif kind == "done":
                            results[index] = payload
                        elif kind == "failed":
                            self.interrupt()
                            raise RuntimeError(f"load worker {index} failed:\n{payload}")
                if time.perf_counter() - checked >= POLL_S:  # not at every batch streamed in
                    checked = time.perf_counter()
                    self._note_lost(ray, runs, results, received, schedule, shares, nodes,
                                    checked - origin_s, start_s)
                if start_s is None and ready and ready == n - len(self.lost):
                    gc_quiet.settle()  # before the start: out of the measured phase
                    start_s = time.perf_counter() - origin_s + START_LEAD_S
                    self._measure_started(origin_s + start_s)
                    for actor in self._actors:
                        with contextlib.suppress(Exception):
                            actor.set_start.remote(start_s)
                    coordinator.start()
                    if own_ray is not None:
                        self.driver_yielded = yield_driver(own_ray)
                    prober.start()
        finally:
            prober.stop()
            gc_quiet.release()
            self.driver_resumed = resume(self.driver_yielded)  # for the last probes
        if not results:
            raise RuntimeError("every load worker was lost: " + "; ".join(
                f"worker {lost.worker}: {lost.reason}" for lost in self.lost))
        for track in self.clocks:  # the last estimate, for the drift over the whole run
            with contextlib.suppress(Exception):
                track.estimates.append(_offset(ray, self._actors[track.worker],
                                               self.clock_target_s))
        merged = merge(results, origin_s, origin_unix_ns, start_s or 0.0, verdict)
        if self.lost:
            merged.end_s = max(merged.end_s, *(lost.at_s for lost in self.lost))
        cpu = coordinator.stop()
        merged.client_cpu += [cpu] if cpu is not None else []
        return merged

    def _note_priority(self, index: int, worker_nice: int, nice: int, node: str) -> None:
        self.priorities[index] = worker_nice
        if worker_nice > nice:
            log.warning("load worker %d (node %s) runs at nice %d, below the coordinator's %d: "
                        "raising it needs CAP_SYS_NICE or RLIMIT_NICE there (a raylet starts its"
                        " workers at worker_niceness, 15 by default); on a host they share, the"
                        " coordinator's turns may delay its sends", index, node, worker_nice, nice)

    def _measure_started(self, start_perf_s: float) -> None:
        """Every worker is warm: the measured phase starts at `start_perf_s` (perf_counter)."""
        self.on_measure_start()

    def _note_lost(self, ray, runs, results, received, schedule, shares, nodes, now_s,
                   start_s) -> None:
        """Workers whose actor died: their in-flight requests as `worker lost` records (none
        before the measured phase: a worker lost in its warmup leaves its share unsent)."""
        pending = [ref for ref, i in runs.items() if i not in results]
        done, _ = ray.wait(pending, num_returns=len(pending), timeout=0) if pending else ([], [])
        for ref in done:
            index = runs.pop(ref)
            try:
                failure = ray.get(ref)  # a streaming child's, else None
            except Exception as error:  # RayActorError, a node's death: the worker is gone
                reason = type(error).__name__
            else:
                if failure is not None and index not in results:
                    self.interrupt()
                    raise RuntimeError(f"load worker {index} failed:\n{failure}")
                continue  # ended normally: its "done" is on the way
            recorded = {r.id for batch in received[index] for r in batch}
            lost = [] if start_s is None else in_flight(schedule[index], recorded,
                                                         shares[index], now_s - start_s)
            for request in lost:
                self.on_record(lost_record(request, index, nodes[index], start_s, now_s))
            self.lost.append(LostWorker(index, nodes[index], now_s, len(lost), reason))


def _answers(ray, takes: dict, refused: dict[int, float]) -> list[tuple[int, list[tuple]]]:
    """The takes that came back within POLL_S (each worker's messages, in order); a take
    that failed (its actor died: _note_lost tells) leaves its worker unasked for POLL_S."""
    if not takes:
        time.sleep(POLL_S)
        return []
    ray.wait(list(takes), num_returns=1, timeout=POLL_S)
    done, _ = ray.wait(list(takes), num_returns=len(takes), timeout=0)
    answers = []
    for ref in done:
        index = takes.pop(ref)
        try:
            answers.append((index, taken(ray.get(ref))))
        except Exception:  # RayActorError and the like
            refused[index] = time.perf_counter() + POLL_S
    return answers


def _offset(ray, actor, target_s: float = math.inf) -> OffsetEstimate:
    """The actor's clock offset (clock.py), probing on until within `target_s`."""
    return estimate_offset(lambda: ray.get(actor.now_ns.remote()), target_s=target_s)


class _Reprober:
    """Measures every worker's offset again every REPROBE_S while the load runs."""

    def __init__(self, ray, actors: list, clocks: list[ClockTrack]) -> None:
        self._ray, self._actors, self._clocks = ray, actors, clocks
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="llmperf-clock-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(REPROBE_S):
            for track in self._clocks:
                with contextlib.suppress(Exception):  # a lost worker answers no more
                    track.estimates.append(_offset(self._ray, self._actors[track.worker]))
