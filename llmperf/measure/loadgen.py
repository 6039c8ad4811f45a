"""The load generator: sends requests to an engine on schedule and records what comes back.

When each measured request goes out (open loop, with or without a concurrency cap; closed
loop; stages) is pacing.py's; this module keeps the books of each request.
Warmup requests go first, all at once, and are awaited before the measured phase starts.

All measurement is on the client side: times are when this process received each event,
in seconds from the run's origin (`LoadResult.origin_perf_counter_s`). An engine whose
client receives events apart from this loop (HTTP, on its own thread) stamps each one
(`TokenEvent.received_s`) and that time is taken, so a busy loop here does not add to
TTFT or ITL; otherwise an event is stamped when this loop takes it. Both stamps are
`time.perf_counter()`; a receipt time outside the request's dispatch..now is on another
clock, and fails the request rather than skewing its figures. The first SIGINT
stops sending, aborts the requests in flight (recorded with error "interrupted") and
returns what was measured; `LoadResult.interrupted` says so. An open-loop run given a
`SaturationDetector` stops the same way once the engine's queue grows without bound
(error "saturated"); `LoadResult.saturation` says when and at what rate. A request whose
stream ends without a token fails with error "empty output".
`stop_sending(reason)` (a launched server that died) stops sending but lets the requests
in flight end on their own; `LoadResult.stopped` holds the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from engines.base import Engine, Request, SamplingParams
from llmperf.measure import gc_quiet
from llmperf.measure.client_cpu import CpuMeter, ProcessCpu
from llmperf.measure.load_clock import LoadClock
from llmperf.measure.pacing import Slots, StagePlan, StageSpan, closed_loop, open_loop, run_stages
from llmperf.measure.records import RequestRecord
from llmperf.measure.request_books import book_finish, book_tokens, close_record, open_record
from llmperf.measure.saturation import Saturation, SaturationDetector
from llmperf.measure.sessions import run_sessions
from llmperf.workload.sessions import Session

# The event-loop lag probe wakes the loop this often. Every wakeup of the client can preempt a
# server thread when both share the cores (an OpenMP step then waits for it): at 10 ms,
# vLLM's TPOT under llmperf read 30-35 ms against 26-28 under `vllm bench serve` (same
# trace, 2 cores); at 100 ms, 28-30 against 27.5-28. A lag past the 50 ms check still shows.
LOOP_PROBE_INTERVAL_S = 0.1
# The loop refreezes more often than a coordinator (gc_quiet.REFREEZE_S): what it makes in
# 0.5 s at 4,000 req/s kept its young collections at 2-7 ms; in 0.1 s, under 2.2 ms.
LOOP_REFREEZE_S = 0.1


@dataclass
class LoadResult:
    origin_perf_counter_s: float  # perf_counter() at time 0 of the records
    origin_unix_s: float  # time.time() at the same moment
    measure_start_s: float  # when the measured phase began (after warmup)
    end_s: float
    num_warmup: int
    num_dispatched: int  # measured requests sent
    interrupted: bool
    saturation: Saturation | None = None  # set when the detector stopped the run
    loop_lag_s: list[float] = field(default_factory=list)  # event-loop lag probes, measured phase
    stopped: str | None = None  # why sending stopped early (stop_sending), if it did
    # What each load-generator process spent over the measured phase (llmperf/measure/client_cpu.py)
    client_cpu: list[ProcessCpu] = field(default_factory=list)
    stages: list[StageSpan] = field(default_factory=list)  # scenario.stages, as they ran


class LoadGenerator(LoadClock):
    """Drives one engine through a warmup phase and a measured phase.

    `on_record` is called with each request's record as soon as it ends (finished,
    failed or aborted), in completion order.
    """

    def __init__(
        self,
        engine: Engine,
        on_record: Callable[[RequestRecord], None],
        spin_s: float = 0.001,
        saturation: SaturationDetector | None = None,
        record_tokens: bool = False,
        on_measure_start: Callable[[], None] = lambda: None,
        origin_perf_counter_s: float | None = None,
        measure_at: Callable[[], Awaitable[float]] | None = None,
        role: str = "loadgen",
        max_concurrency: int | None = None,
    ) -> None:
        LoadClock.__init__(self, spin_s)
        self.engine = engine
        self.on_record = on_record
        self.detector = saturation
        self.record_tokens = record_tokens  # keep prompt and output token ids in each record
        self.saturation: Saturation | None = None
        self._measure_start_s: float | None = None
        self._loop_lag_s: list[float] = []
        # Called once warmup has ended, before the measured phase starts: a server scrape
        # taken then separates the warmup's counts from the measured ones.
        self.on_measure_start = on_measure_start
        self.interrupted = False
        self.stopped: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Engines that hold requests to form batches launch what waits when flushed.
        self._flush = engine.flush if engine.capabilities.flush else (lambda: None)
        # A worker of several (llmperf/measure/workers.py): the run's origin on this process's
        # clock, and when the measured phase starts (awaited once the warmup is done).
        self._given_origin_s = origin_perf_counter_s
        self.measure_at = measure_at
        self._inflight: set[asyncio.Task] = set()
        self._phases: asyncio.Task | None = None
        self._cpu = CpuMeter(role)
        self.max_concurrency = max_concurrency  # open loops: the cap on requests in flight
        self._stage_spans: list[StageSpan] = []

    async def run(
        self,
        warmup: list[Request],
        requests: Iterable[Request],
        concurrency: int | None = None,
        duration_s: float | None = None,
        sessions: SessionLoad | None = None,
        stages: list[StagePlan] | None = None,
    ) -> LoadResult:
        """Send `warmup`, then `requests` (closed loop when `concurrency` is given), or the
        multi-turn `sessions`, or the `stages` one after the other, instead of `requests`.

        `duration_s` stops sending once the measured phase is that old; the requests in
        flight are still awaited.
        """
        loop = self._loop = asyncio.get_running_loop()
        # A full collection walks every object the engine holds (tens of ms with torch
        # loaded); frozen objects are skipped, so collections during the load stay short.
        gc_quiet.settle()
        self._origin_s = time.perf_counter()
        origin_unix_s = time.time()
        if self._given_origin_s is not None:
            origin_unix_s -= self._origin_s - self._given_origin_s
            self._origin_s = self._given_origin_s
        counts = {"measure_start_s": 0.0, "dispatched": 0}
        self._phases = loop.create_task(
            self._run_phases(warmup, requests, concurrency, duration_s, counts, sessions, stages)
        )
        sigint_handled = _handle_sigint(loop, self.interrupt)
        try:
            try:
                await self._phases
            except asyncio.CancelledError:
                if not (self.interrupted or self.saturation or self.stopped):
                    raise
            finally:
                if sigint_handled:
                    loop.remove_signal_handler(signal.SIGINT)
            if self._inflight:  # interrupted: let the aborted requests write their records
                await asyncio.gather(*self._inflight, return_exceptions=True)
            # before the release: a collection of everything after it is not the load's
            cpu = self._cpu.stop(self._idle_spin_s)
        finally:
            gc_quiet.release()
        return LoadResult(
            origin_perf_counter_s=self._origin_s,
            origin_unix_s=origin_unix_s,
            measure_start_s=counts["measure_start_s"],
            end_s=self._now(),
            num_warmup=len(warmup),
            num_dispatched=counts["dispatched"],
            interrupted=self.interrupted,
            saturation=self.saturation,
            loop_lag_s=self._loop_lag_s,
            stopped=self.stopped,
            client_cpu=[cpu] if cpu is not None else [],
            stages=self._stage_spans,
        )

    def interrupt(self) -> None:
        """Stop sending and abort what is in flight (safe to call more than once)."""
        self.interrupted = True
        self._stop()

    def stop_saturated(self, verdict: Saturation) -> None:
        """Stop as this generator's own detector would (another worker's saw saturation)."""
        if self.saturation is None:
            self.saturation = verdict
            self._stop()

    def stop_sending(self, reason: str) -> None:
        """Send nothing more; what is in flight ends on its own. Safe from any thread."""

        def stop() -> None:
            if self.stopped is None:
                self.stopped = reason
                if self._phases is not None:
                    self._phases.cancel()

        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the load already ended and closed its loop
                loop.call_soon_threadsafe(stop)

    def _stop(self) -> None:
        if self._phases is not None:
            self._phases.cancel()
        for task in list(self._inflight):
            task.cancel()

    # -- phases -------------------------------------------------------------------------

    async def _run_phases(
        self,
        warmup: list[Request],
        requests: Iterable[Request],
        concurrency: int | None,
        duration_s: float | None,
        counts: dict,
        sessions: SessionLoad | None = None,
        stages: list[StagePlan] | None = None,
    ) -> None:
        if warmup:
            now = self._now()
            tasks = [self._spawn(r, now) for r in warmup]
            await asyncio.sleep(0)  # let them reach the engine
            self._flush()
            await asyncio.wait(tasks)  # not gather: stop_sending must not cancel them
        # Before the measured phase's clock starts: a server scrape taken now holds nothing
        # of the measured requests, and a first request due at 0 still goes out on time.
        self.on_measure_start()
        start_s = self._now()
        if self.measure_at is not None:  # the instant every worker starts at
            start_s = await self.measure_at()
            await self._sleep_until(start_s)
        counts["measure_start_s"] = self._measure_start_s = start_s
        self._cpu.start()
        self._idle_spin_s = 0.0
        loop = asyncio.get_running_loop()
        probe = loop.create_task(self._probe_loop_lag())
        refreeze = loop.create_task(_refreeze(LOOP_REFREEZE_S))
        try:
            await self._measured_phase(requests, concurrency, duration_s, counts, sessions,
                                       start_s, stages)
        finally:
            probe.cancel()
            refreeze.cancel()

    async def _measured_phase(
        self,
        requests: Iterable[Request],
        concurrency: int | None,
        duration_s: float | None,
        counts: dict,
        sessions: SessionLoad | None,
        start_s: float,
        stages: list[StagePlan] | None = None,
    ) -> None:
        if stages:
            await self._watched(run_stages(self, stages, counts, self._stage_spans,
                                           self.max_concurrency), start_s)
        elif sessions is not None:
            await self._watched(run_sessions(
                self, sessions.sessions, sessions.sampling, start_s, duration_s, counts,
                sessions.max_concurrent, sessions.max_context_tokens,
            ), start_s)
        elif concurrency is None:
            slots = Slots(self.max_concurrency) if self.max_concurrency else None
            await self._watched(open_loop(self, requests, start_s, duration_s, counts, slots),
                                start_s)
        else:
            await closed_loop(self, requests, concurrency, start_s, duration_s, counts)

    async def _watched(self, load: Awaitable[None], start_s: float) -> None:
        """Run `load` with the saturation detector watching, when there is one."""
        watcher = None
        if self.detector is not None:
            watcher = asyncio.get_running_loop().create_task(self._watch_saturation(start_s))
        try:
            await load
        finally:
            if watcher is not None:
                watcher.cancel()

    async def _probe_loop_lag(self, interval_s: float = LOOP_PROBE_INTERVAL_S) -> None:
        """How late the event loop wakes a sleeper: a busy loop (callbacks queued behind
        each other) delays every send and every receive timestamp alike."""
        while True:
            target_s = self._now() + interval_s
            await asyncio.sleep(interval_s)
            self._loop_lag_s.append(max(self._now() - target_s, 0.0))

    async def _watch_saturation(self, start_s: float) -> None:
        interval_s = self.detector.config.check_interval_s
        while True:
            await asyncio.sleep(interval_s)
            verdict = self.detector.check(self._now() - start_s)
            if verdict is not None:
                self.saturation = verdict
                if self._stage_spans:  # the stage it happened in ends the run, marked
                    self._stage_spans[-1].saturated = True
                    self._stage_spans[-1].end_s = self._now()
                self._stop()
                return

    # -- one request --------------------------------------------------------------------

    async def dispatch(self, request: Request, arrival_s: float) -> tuple[RequestRecord, list[int]]:
        """Send one request now and wait for it: its record and its output token ids."""
        if self.detector is not None:
            self.detector.on_dispatch(request.arrival_s)
        return await self._spawn(request, arrival_s)

    def _spawn(self, request: Request, arrival_s: float, client_queue_s: float = 0.0,
               stage: int = 0) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(
            self._issue(request, arrival_s, client_queue_s, stage))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return task

    async def _issue(self, request: Request, arrival_s: float, client_queue_s: float = 0.0,
                     stage: int = 0) -> tuple[RequestRecord, list[int]]:
        record = open_record(request, arrival_s, self._now(), client_queue_s, stage)
        output_ids: list[int] = []
        last_event_s = record.dispatch_s
        try:
            stream = self.engine.stream(request)
            try:
                async for event in stream:
                    last_event_s = self._receipt_s(event, record.dispatch_s)
                    if event.scheduled_s is not None:
                        record.admitted_s = event.scheduled_s - self._origin_s
                    if book_tokens(record, event, last_event_s, output_ids):
                        self._note_first_token(request, arrival_s, last_event_s)
                    if event.finished:
                        book_finish(record, event, self._stamp_s(event.written_s),
                                    self._stamp_s(event.headers_s))
                        if event.error is None and event.response != "stream":
                            self._note_first_token(request, arrival_s, last_event_s)  # all at once
                        break
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
        except asyncio.CancelledError:
            record.finish_reason = "abort"
            record.error = "saturated" if self.saturation else "interrupted"
            last_event_s = self._now()
            raise
        except Exception as err:  # an engine failure is a failed request, not a failed run
            record.finish_reason, record.error = "error", f"{type(err).__name__}: {err}"
            last_event_s = self._now()
        finally:
            if self.record_tokens:
                record.prompt_token_ids = list(request.prompt_token_ids or ())
                record.output_token_ids = output_ids
            self._close(record, last_event_s)
        return record, output_ids

    def _note_first_token(self, request: Request, arrival_s: float, received_s: float) -> None:
        if self.detector is not None and not request.is_warmup and self._measure_start_s is not None:
            start_s = self._measure_start_s
            self.detector.on_first_token(arrival_s - start_s, received_s - start_s)

    def _close(self, record: RequestRecord, last_event_s: float) -> None:
        answered = record.response != "stream" and record.error is None
        if self.detector is not None and not record.warmup and not record.token_times_s and not answered:
            self.detector.on_end_without_token()
        close_record(record, last_event_s)
        self.on_record(record)


@dataclass
class SessionLoad:
    """Multi-turn sessions for the measured phase (see llmperf/measure/sessions.py)."""

    sessions: Iterable[Session]
    sampling: SamplingParams
    max_concurrent: int | None = None
    max_context_tokens: int | None = None


def _handle_sigint(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> bool:
    try:
        loop.add_signal_handler(signal.SIGINT, callback)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals
        return False
    return True


async def _refreeze(every_s: float) -> None:
    """What the loop came to hold (records kept to the end, above all) frozen every `every_s`:
    no collection scans it again (gc_quiet.py)."""
    while True:
        await asyncio.sleep(every_s)
        gc_quiet.refreeze()
