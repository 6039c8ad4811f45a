"""One benchmark run's state as the stages of `llmperf.run.runner` build it up."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from engines.base import Engine
from engines.launch.server import ManagedServer
from llmperf.hardware.profile import HardwareProfile
from llmperf.measure.clock import ClockTrack
from llmperf.measure.loadgen import LoadResult
from llmperf.measure.records import RequestRecord
from llmperf.run.config import Config
from llmperf.serverside.scraper import MetricsScraper
from llmperf.telemetry import Collector
from llmperf.workload.requests import Workload


@dataclass
class Run:
    config: Config
    run_dir: Path
    argv: list[str] = field(default_factory=list)
    console: Console = field(default_factory=Console)
    engine: Engine | None = None
    workload: Workload | None = None
    records: list[RequestRecord] = field(default_factory=list)
    load: LoadResult | None = None
    # summary.json's content as the stages add to it; checked as a Summary when written
    summary: dict[str, Any] = field(default_factory=dict)
    profile: HardwareProfile | None = None
    collector: Collector | None = None
    scraper: MetricsScraper | None = None
    server: ManagedServer | None = None  # the server engine.launch started, if any
    resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # closed at the end
    clocks: list[ClockTrack] = field(default_factory=list)  # backend=ray: each worker's clock offset
    workers_lost: list[Any] = field(default_factory=list)  # backend=ray: LostWorker, if any died

    @property
    def interrupted(self) -> bool:
        return self.load is not None and self.load.interrupted
