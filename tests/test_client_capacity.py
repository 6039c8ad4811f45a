"""The load generator's own capacity: event-loop lag is measured (the verdicts on a client
that fell behind are tests/test_client_verdicts.py's)."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import time
from pathlib import Path

from engines.base import Request
from engines.synthetic import SyntheticEngine
from llmperf.measure.loadgen import LoadGenerator


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


def _capacity_script():
    """scripts/client_capacity.py as a module (scripts/ is not a package)."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "client_capacity.py"
    spec = importlib.util.spec_from_file_location("client_capacity", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shuffled_orders_put_every_member_after_each_other_and_repeat_with_the_seed():
    """--alternate's order: rotated, each member follows the same one in every repeat but
    the wrap; shuffled, every ordered pair of members occurs, and a seed gives the same
    orders again."""
    cc = _capacity_script()
    members = ["processes", "ray:local", "processes:aa"]
    turns = [cc.member_order(members, k, "turn", 0) for k in range(3)]
    assert turns == [members, members[1:] + members[:1], members[2:] + members[:2]]
    shuffled = [cc.member_order(members, k, "shuffled", 0) for k in range(12)]
    assert all(sorted(order) == sorted(members) for order in shuffled)
    pairs = {(a, b) for order in shuffled for a, b in itertools.pairwise(order)}
    assert pairs == {(a, b) for a in members for b in members if a != b}
    assert shuffled == [cc.member_order(members, k, "shuffled", 0) for k in range(12)]
    assert shuffled != [cc.member_order(members, k, "shuffled", 1) for k in range(12)]
