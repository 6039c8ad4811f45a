"""The load generator's own options (`scenario.client`), beside the measurement they shape
(llmperf/measure/workers.py runs the load over several processes)."""

from __future__ import annotations

from dataclasses import dataclass

from llmperf.measure.event_loop import EVENT_LOOPS
from llmperf.options import check_positive, option


@dataclass
class ClientConfig:
    """`scenario.client`: the load generator's processes."""

    workers: int = option(1, "load-generator processes, each with its own event loop and a round-robin share of the schedule; > 1 needs an engine reachable from several processes (engine=openai)")

    event_loop: str = option("auto", "the load generator's event loop: auto (uvloop where installed), uvloop or asyncio")

    def __post_init__(self) -> None:
        check_positive(self, "workers", allow_none=False)
        EVENT_LOOPS.check("event_loop", self.event_loop)
