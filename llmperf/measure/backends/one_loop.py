"""The load on one event loop in the run's own process, against the engine the run built
(scenario.client.workers=1 on this host): the only backend that sends multi-turn sessions,
stages and a capped rate, whose requests wait on one another's replies or slots."""

from __future__ import annotations

from typing import Any

from llmperf.measure import event_loop
from llmperf.measure.backends.plan import LoadParts, LoadPlan
from llmperf.measure.loadgen import LoadGenerator, LoadResult
from llmperf.measure.saturation import SaturationDetector


class OneLoop:
    def __init__(self, parts: LoadParts, event_loop_name: str = "auto") -> None:
        self.event_loop = event_loop_name
        self.loadgen = LoadGenerator(
            parts.engine,
            parts.on_record,
            saturation=SaturationDetector(parts.saturation) if parts.saturation is not None else None,
            record_tokens=parts.record_tokens,
            on_measure_start=parts.on_measure_start,
            max_concurrency=parts.max_concurrency,
        )
        self.clocks: list = []  # one process, one clock
        self.lost: list = []

    @classmethod
    def from_options(cls, client: Any, parts: LoadParts) -> OneLoop:
        return cls(parts, client.event_loop)

    def stop_sending(self, reason: str) -> None:
        self.loadgen.stop_sending(reason)

    def run(self, plan: LoadPlan) -> LoadResult:
        return event_loop.run(
            self.loadgen.run(plan.warmup, plan.requests, plan.concurrency, plan.duration_s,
                             sessions=plan.sessions, stages=plan.stages),
            self.event_loop,
        )
