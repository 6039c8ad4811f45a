"""The load generator's own capacity: event-loop lag is measured, and a client that fell
behind (dispatch or loop lag past the thresholds) makes the run say "client saturated"."""

from __future__ import annotations

import asyncio
import time

from engines.base import Request
from engines.synthetic import SyntheticEngine
from llmperf.measure.loadgen import LoadGenerator
from llmperf.measure.validity import client_not_saturated
from llmperf.run.config import ValidityConfig


def lag(p99_s):
    return {"p99": p99_s}


def test_client_saturated_names_the_lag_past_its_threshold():
    criteria = ValidityConfig(max_dispatch_lag_p99_s=0.01, max_loop_lag_p99_s=0.02)
    ok = client_not_saturated(
        {"dispatch_lag_s": lag(0.002), "event_loop_lag_s": lag(0.004)}, criteria)
    assert ok.ok and ok.detail == "dispatch lag p99 2.00 ms, event-loop lag p99 4.00 ms"
    late = client_not_saturated(
        {"dispatch_lag_s": lag(0.03), "event_loop_lag_s": lag(0.05)}, criteria)
    assert not late.ok
    assert late.detail == ("client saturated: dispatch lag p99 30.0 ms > 10 ms; "
                           "event-loop lag p99 50.0 ms > 20 ms")


class BlockingEngine(SyntheticEngine):
    """Blocks the caller's event loop for 30 ms per request, as a client doing heavy work
    per token (a slow tokenizer, JSON parsing) would."""

    async def stream(self, request):
        time.sleep(0.03)
        async for event in super().stream(request):
            yield event


def test_event_loop_lag_is_measured_while_the_loop_is_blocked():
    for engine, blocked in ((SyntheticEngine(tpot_s=0.001), False),
                            (BlockingEngine(tpot_s=0.001), True)):
        requests = [Request(id=str(i), max_tokens=2, prompt_token_ids=[1], arrival_s=0.02 * i)
                    for i in range(25)]
        engine.start()
        try:
            result = asyncio.run(LoadGenerator(engine, lambda r: None).run([], requests))
        finally:
            engine.stop()
        assert result.loop_lag_s
        if blocked:  # each probe that lands behind a 30 ms block wakes up to 30 ms late
            assert max(result.loop_lag_s) > 0.015
        else:
            assert sorted(result.loop_lag_s)[len(result.loop_lag_s) // 2] < 0.01
