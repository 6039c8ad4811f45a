"""Batching strategies, one module each, chosen by name (`batching=`)."""

from __future__ import annotations

from engines.reference.scheduler.base import ScheduledSeq, Scheduler, SchedulerOutput
from engines.reference.scheduler.chunked import ChunkedPrefillScheduler
from engines.reference.scheduler.continuous import ContinuousScheduler
from engines.reference.scheduler.dynamic import DynamicScheduler
from engines.reference.scheduler.sequential import SequentialScheduler
from engines.reference.scheduler.static import StaticScheduler
from llmperf.registry import Registry

SCHEDULERS: Registry[type[Scheduler]] = Registry(
    "batching",
    {
        "sequential": SequentialScheduler,
        "static": StaticScheduler,
        "dynamic": DynamicScheduler,
        "continuous": ContinuousScheduler,
        "chunked": ChunkedPrefillScheduler,
    },
)

__all__ = ["SCHEDULERS", "ScheduledSeq", "Scheduler", "SchedulerOutput"]
