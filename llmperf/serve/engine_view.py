"""What the app reads of its engine: is its loop alive, how long a context it takes, and its
load (running, waiting, KV-cache use) for /metrics."""

from __future__ import annotations

from engines.base import Engine
from llmperf.serve.prometheus_metrics import EngineLoad


def engine_is_alive(engine: Engine) -> bool:
    """An engine whose loop thread died would leave requests waiting forever; engines that
    can tell declare `capabilities.liveness`."""
    return engine.is_alive() if engine.capabilities.liveness else True


def context_limit(engine: Engine) -> int:
    """Prompt + output tokens one request may have: the context length, and the KV cache's size."""
    limit = engine.max_model_len
    if engine.capabilities.kv_stats:
        limit = min(limit, engine.kv.num_blocks * engine.kv.block_size)
    return limit


def engine_load(engine: Engine, num_in_flight: int) -> EngineLoad:
    """Running/waiting from the engine's scheduler when it has one; else all in flight run."""
    caps = engine.capabilities
    num_running = len(engine.scheduler.running) if caps.scheduler else num_in_flight
    num_running = min(num_running, num_in_flight)
    usage = 1.0 - engine.kv.num_free_blocks / engine.kv.num_blocks if caps.kv_stats else None
    cache = engine.kv.stats() if caps.kv_stats else {}
    return EngineLoad(
        num_running,
        num_in_flight - num_running,
        usage,
        num_preemptions=engine.scheduler.num_preemptions_total if caps.scheduler else 0,
        prefix_cache_query_tokens=cache.get("prefix_cache_query_tokens", 0),
        prefix_cache_hit_tokens=cache.get("prefix_cache_hit_tokens", 0),
    )
