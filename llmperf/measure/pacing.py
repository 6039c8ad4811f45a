"""Pacing: when the load generator sends each request of the measured phase.

Open loop: each request goes out at its intended arrival, whatever the engine is doing;
with a cap (`scenario.arrival.max_concurrency` C), a request due while C are in flight
waits for one of them to end, first come first served. That wait is its `client_queue_s`:
from the intended arrival to the release of the slot it takes (the instant the request
that held it ended: its last token). Its TTFT and E2E still count from the intended arrival, and its client
delay (how late the client itself sent it) from the later of the arrival and the release.
Closed loop: `concurrency` users each send their next request when the last one ends.
Stages (`scenario.stages`): one of those loops after the other, each from its own start,
each drained before the next begins; a stage the saturation detector stops ends the run.
The saturation detector counts a request from its intended arrival, so a client queue that
grows without bound behind a cap reads as saturation, as an engine's queue does.

The load generator (loadgen.py) does the bookkeeping of one request; this module decides
only when to hand each one to it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from engines.base import Request


class LoadGenerator(Protocol):
    """What pacing asks of the load generator (loadgen.py), which keeps each request's books:
    its clock, its sleeps, a request sent, the engine's batch flushed, what is in flight."""

    detector: Any  # the over-saturation detector, or None
    _inflight: set[asyncio.Task]
    _flush: Any  # () -> None

    def _now(self) -> float: ...

    async def _sleep_until(self, target_s: float) -> None: ...

    def _spawn(self, request: Request, arrival_s: float, client_queue_s: float = 0.0,
               stage: int = 0) -> asyncio.Task: ...


class Slots:
    """At most `limit` requests in flight. A slot a request ends passes straight to the
    longest waiter, stamped with the time it was released; a slot nobody waited for keeps
    that time, so a request the client reached late (a busy loop) still counts as waiting
    for the cap only until the slot was freed, the rest being the client's own delay."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free_since: deque[float | None] = deque([None] * limit)  # None: never taken
        self._waiters: deque[asyncio.Future[float]] = deque()

    @property
    def free(self) -> bool:
        return bool(self._free_since) and not self._waiters

    async def acquire(self) -> float | None:
        """Take a slot: the time (the records' clock) it was released, or None for a slot
        never taken before."""
        if self.free:
            return self._free_since.popleft()  # the slot free the longest
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return await waiter

    def release(self, released_s: float) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # a waiter cancelled (the run stopped) gives up its turn
                waiter.set_result(released_s)
                return
        self._free_since.append(released_s)


@dataclass
class StagePlan:
    """One stage to run: its load and its requests (`arrival_s` from the stage's start)."""

    requests: Iterable[Request]
    rate_rps: float | None = None
    concurrency: int | None = None
    duration_s: float | None = None


@dataclass
class StageSpan:
    """When a stage ran, on the records' clock, and whether the saturation detector stopped it."""

    index: int
    start_s: float
    end_s: float | None = None
    saturated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def open_loop(
    gen: LoadGenerator,
    requests: Iterable[Request],
    start_s: float,
    duration_s: float | None,
    counts: dict,
    slots: Slots | None = None,
    stage: int = 0,
) -> None:
    """Each request at its intended arrival; with `slots`, handed on the arrival to a sender
    that waits for a free slot, so the schedule (and the saturation detector, which counts
    a request from its arrival) runs on while requests queue for the cap."""
    due: asyncio.Queue[tuple[Request, float] | None] = asyncio.Queue()
    sender = None
    if slots is not None:
        sender = asyncio.get_running_loop().create_task(
            _send_when_free(gen, due, slots, counts, stage))
    try:
        for request in requests:
            if duration_s is not None and request.arrival_s >= duration_s:
                break
            arrival_s = start_s + request.arrival_s
            await gen._sleep_until(arrival_s)
            if gen.detector is not None:
                gen.detector.on_dispatch(arrival_s - counts["measure_start_s"])
            if sender is None:
                gen._spawn(request, arrival_s, 0.0, stage)
                counts["dispatched"] += 1
            else:
                due.put_nowait((request, arrival_s))
            await asyncio.sleep(0)  # let it reach the engine before the next request is built
        if sender is not None:
            due.put_nowait(None)  # no more: the sender ends once it has sent what waits
            await sender
    finally:
        if sender is not None:
            sender.cancel()
    gen._flush()  # no more requests are coming
    while gen._inflight:
        await asyncio.wait(set(gen._inflight))


async def _send_when_free(gen: LoadGenerator, due: asyncio.Queue, slots: Slots, counts: dict,
                          stage: int) -> None:
    """Send each due request, in arrival order, once a slot is free; its client queue time
    runs from its intended arrival to the release of the slot it takes."""
    while (item := await due.get()) is not None:
        request, arrival_s = item
        if not slots.free:
            gen._flush()  # an engine holding requests for a batch must not hold the slots
        released_s = await slots.acquire()
        queue_s = 0.0 if released_s is None else max(released_s - arrival_s, 0.0)
        task = gen._spawn(request, arrival_s, queue_s, stage)
        task.add_done_callback(lambda done: slots.release(_ended_s(gen, done)))
        counts["dispatched"] += 1
        await asyncio.sleep(0)


def _ended_s(gen: LoadGenerator, task: asyncio.Task) -> float:
    """When a request in flight ended: its last token (the record's end_s), not the moment its
    bookkeeping (the record written) let the loop move on, which is the client's own time."""
    if not task.cancelled() and task.exception() is None:
        return task.result()[0].end_s
    return gen._now()


async def closed_loop(
    gen: LoadGenerator,
    requests: Iterable[Request],
    concurrency: int,
    start_s: float,
    duration_s: float | None,
    counts: dict,
    stage: int = 0,
) -> None:
    shared = iter(requests)  # each user takes the next request from the one stream

    async def user() -> None:
        for request in shared:
            now = gen._now()
            if duration_s is not None and now - start_s >= duration_s:
                return
            counts["dispatched"] += 1
            task = gen._spawn(request, now, 0.0, stage)
            await asyncio.sleep(0)
            # Nothing more comes until a request in flight ends: a batch may launch now.
            gen._flush()
            await asyncio.wait([task])

    await asyncio.gather(*(user() for _ in range(concurrency)))


async def run_stages(
    gen: LoadGenerator,
    stages: list[StagePlan],
    counts: dict,
    spans: list[StageSpan],
    max_concurrency: int | None = None,
) -> None:
    """Each stage from the instant the last one drained; `spans` gets each as it starts."""
    for index, plan in enumerate(stages):
        start_s = gen._now()
        spans.append(StageSpan(index, start_s))
        if plan.concurrency is not None:
            await closed_loop(gen, plan.requests, plan.concurrency, start_s, plan.duration_s,
                              counts, index)
        else:
            slots = Slots(max_concurrency) if max_concurrency is not None else None
            await open_loop(gen, plan.requests, start_s, plan.duration_s, counts, slots, index)
        spans[-1].end_s = gen._now()
