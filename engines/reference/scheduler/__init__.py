"""Batching strategies, one module each, chosen by name (`batching=`)."""

from __future__ import annotations

from engines.reference.scheduler.base import (
    ScheduledSeq,
    Scheduler,
    SchedulerOptions,
    SchedulerOutput,
)
from engines.reference.scheduler.chunked import ChunkedPrefillScheduler
from engines.reference.scheduler.continuous import ContinuousScheduler
from engines.reference.scheduler.dynamic import DynamicScheduler
from engines.reference.scheduler.sequential import SequentialScheduler
from engines.reference.scheduler.static import StaticScheduler

SCHEDULERS: dict[str, type[Scheduler]] = {
    "sequential": SequentialScheduler,
    "static": StaticScheduler,
    "dynamic": DynamicScheduler,
    "continuous": ContinuousScheduler,
    "chunked": ChunkedPrefillScheduler,
}


def build_scheduler(name: str, kv, opts: SchedulerOptions) -> Scheduler:
    if name not in SCHEDULERS:
        raise ValueError(f"unknown batching {name!r}; valid: {', '.join(SCHEDULERS)}")
    return SCHEDULERS[name](kv, opts)


__all__ = ["SCHEDULERS", "ScheduledSeq", "Scheduler", "SchedulerOptions", "SchedulerOutput", "build_scheduler"]
