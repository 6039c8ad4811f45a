"""What every load backend takes: the parts of the run it drives (`LoadParts`) and the load
itself (`LoadPlan`). A backend is built with `from_options(client, parts)` and driven with
`run(plan)`; it returns a `LoadResult` and keeps `clocks` and `lost` (llmperf/measure/clock.py,
backends/ray_pool.py) for the summary. Its records reach `parts.on_record` as requests end."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from engines.base import Request
from llmperf.measure.records import RequestRecord
from llmperf.measure.saturation import SaturationConfig


@dataclass
class LoadParts:
    """The run's engine (as built, for the one loop; as options, for workers that build their
    own), where records go, and the load generator's settings."""

    engine: Any  # the run's Engine
    engine_options: Any  # its options dataclass, to build it again in a worker
    model: str
    on_record: Callable[[RequestRecord], None]
    saturation: SaturationConfig | None = None
    record_tokens: bool = False
    on_measure_start: Callable[[], None] = lambda: None
    max_concurrency: int | None = None  # scenario.arrival.max_concurrency (one loop only)
    clock_limit_s: float = 0.001  # scenario.validity.max_clock_uncertainty_s (backend=ray)


@dataclass
class LoadPlan:
    """The load: warmup, then the requests (a closed loop of `concurrency`, else each at its
    intended arrival), or multi-turn sessions, or stages, instead of the requests."""

    warmup: list[Request]
    requests: Iterable[Request]
    concurrency: int | None = None
    duration_s: float | None = None
    sessions: Any = None  # llmperf/measure/sessions.py's SessionLoad (one loop only)
    stages: list[Any] | None = None  # pacing.py's StagePlan (one loop only)
    extra: dict[str, Any] = field(default_factory=dict)
