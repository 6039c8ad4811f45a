"""Test doubles and the engines the end-to-end tests run against."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from engines.base import EngineCapabilities, Request, StepStat, TokenEvent
from engines.synthetic import ByteTokenizer, SyntheticEngine
from llmperf.measure.records import RequestRecord

# Engines the end-to-end tests run every scenario preset against, with the overrides
# that make each one quick.
E2E_ENGINES = ["synthetic", "reference"]
ENGINE_OVERRIDES = {
    "synthetic": [
        "engine=synthetic",
        "engine.ttft_s=0.002",
        "engine.prefill_s_per_token=0",
        "engine.tpot_s=0.0005",
    ],
    "reference": ["engine=reference", "model=tiny"],
}


def record(
    id: str,
    arrival_s: float,
    token_times_s: list[float],
    *,
    dispatch_s: float | None = None,
    end_s: float | None = None,
    input_tokens: int = 1,
    output_tokens: int | None = None,
    error: str | None = None,
    warmup: bool = False,
    admitted_s: float | None = None,
) -> RequestRecord:
    """A record as the load generator would write it, from token arrival times."""
    return RequestRecord(
        id=id,
        arrival_s=arrival_s,
        dispatch_s=arrival_s if dispatch_s is None else dispatch_s,
        first_token_s=token_times_s[0] if token_times_s else None,
        end_s=end_s if end_s is not None else token_times_s[-1],
        token_times_s=list(token_times_s),
        input_tokens=input_tokens,
        output_tokens=len(token_times_s) if output_tokens is None else output_tokens,
        finish_reason="error" if error else "length",
        error=error,
        warmup=warmup,
        admitted_s=admitted_s,
    )


class ScriptedEngine:
    """An engine whose stream for each request is a script: a list of (delay_s, n_tokens)
    chunks, or an exception to raise. Counts how many streams are open at once."""

    name = "scripted"
    capabilities = EngineCapabilities()

    def __init__(self, script: Callable[[Request], list[tuple[float, int]] | Exception]) -> None:
        self.script = script
        self.tokenizer = ByteTokenizer()
        self.open_streams = 0
        self.max_open_streams = 0
        self.received: list[tuple[str, float]] = []  # (request id, perf_counter at submission)

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def info(self) -> dict:
        return {"name": self.name}

    async def stream(self, request: Request) -> AsyncIterator[TokenEvent]:
        self.received.append((request.id, time.perf_counter()))
        self.open_streams += 1
        self.max_open_streams = max(self.max_open_streams, self.open_streams)
        try:
            plan = self.script(request)
            if isinstance(plan, Exception):
                raise plan
            sent = 0
            for i, (delay_s, n_tokens) in enumerate(plan):
                await asyncio.sleep(delay_s)
                sent += n_tokens
                last = i == len(plan) - 1
                yield TokenEvent(
                    request.id,
                    tuple(range(n_tokens)),
                    time.perf_counter(),
                    finished=last,
                    finish_reason="length" if last else None,
                    num_prompt_tokens=len(request.prompt_token_ids) if last else None,
                    num_output_tokens=sent if last else None,
                )
        finally:
            self.open_streams -= 1


class SteppingEngine(SyntheticEngine):
    """The synthetic engine, reporting one prefill step per request as a batching engine would."""

    capabilities = EngineCapabilities(step_stats=True)

    def __init__(self, *args, **options) -> None:
        super().__init__(*args, **options)
        self.steps: list[StepStat] = []

    async def stream(self, request: Request) -> AsyncIterator[TokenEvent]:
        start = time.perf_counter()
        async for event in super().stream(request):
            if event.finished:  # the consumer stops reading at the final event
                n = len(request.prompt_token_ids)
                self.steps.append(StepStat(start, time.perf_counter() - start, "prefill", 1, n, 0))
            yield event

    def step_stats(self) -> list[StepStat]:
        return list(self.steps)
