"""Multi-turn sessions on the load generator: sessions start at their arrival times, and each
runs its turns one after another, every turn's prompt holding the session's earlier prompts
and the engine's actual replies, with the user's think time between a reply and the next turn.

Intended arrivals: a session's first turn arrives at the session's arrival time (or, with
`max_concurrent` sessions already open, when a slot frees, as in a closed loop); each later
turn arrives when the previous reply ended plus the think time. TTFT counts from there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

from engines.base import Request, SamplingParams
from llmperf.measure.records import RequestRecord
from llmperf.workload.sessions import Session


class LoadGenerator(Protocol):
    """What sessions need of the load generator (llmperf/measure/loadgen.py), which calls
    them: its clock, its pacing and one request sent and awaited."""

    def _now(self) -> float: ...

    async def _sleep_until(self, target_s: float) -> None: ...

    async def dispatch(
        self, request: Request, arrival_s: float
    ) -> tuple[RequestRecord, list[int]]: ...


async def run_sessions(
    loadgen: LoadGenerator,
    sessions: Iterable[Session],
    sampling: SamplingParams,
    start_s: float,
    duration_s: float | None,
    counts: dict,
    max_concurrent: int | None = None,
    max_context_tokens: int | None = None,
) -> None:
    slots = asyncio.Semaphore(max_concurrent) if max_concurrent else None
    open_sessions: set[asyncio.Task] = set()

    async def one(session: Session, arrival_s: float) -> None:
        if slots is None:
            await _converse(loadgen, session, sampling, arrival_s, max_context_tokens, counts)
            return
        async with slots:
            arrival_s = max(arrival_s, loadgen._now())  # a slot freed: the user starts now
            await _converse(loadgen, session, sampling, arrival_s, max_context_tokens, counts)

    loop = asyncio.get_running_loop()
    for session in sessions:
        if duration_s is not None and session.arrival_s >= duration_s:
            break
        arrival_s = start_s + session.arrival_s
        await loadgen._sleep_until(arrival_s)
        task = loop.create_task(one(session, arrival_s))
        open_sessions.add(task)
        task.add_done_callback(open_sessions.discard)
    while open_sessions:
        await asyncio.gather(*open_sessions)


async def _converse(
    loadgen: LoadGenerator,
    session: Session,
    sampling: SamplingParams,
    arrival_s: float,
    max_context_tokens: int | None,
    counts: dict,
) -> None:
    history = list(session.prefix_token_ids)
    shared = session.shared_prefix_tokens
    for index, turn in enumerate(session.turns):
        prompt = history + turn.user_token_ids
        if max_context_tokens is not None and len(prompt) + turn.max_tokens > max_context_tokens:
            return  # the conversation has outgrown the context: the user starts over elsewhere
        request = Request(
            id=f"{session.id}-{index}",
            max_tokens=turn.max_tokens,
            prompt_token_ids=prompt,
            sampling=sampling,
            arrival_s=arrival_s - counts["measure_start_s"],
            session_id=session.id,
            turn=index,
            shared_prefix_tokens=shared,
        )
        await loadgen._sleep_until(arrival_s)
        counts["dispatched"] += 1
        record, reply = await loadgen.dispatch(request, arrival_s)
        if not record.ok:
            return  # a failed turn ends the session: there is no reply to build on
        history = prompt + reply
        # The reply's last token was sampled but never run through the model: not cached.
        shared = len(history) - 1
        arrival_s = loadgen._now() + turn.think_time_s
