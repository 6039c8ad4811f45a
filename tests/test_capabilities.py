"""Engines declare what they offer beyond the protocol; the harness reads the declaration."""

from __future__ import annotations

import asyncio

import pytest

from engines.base import EngineCapabilities, Request
from engines.registry import ENGINES
from llmperf.measure.loadgen import LoadGenerator
from llmperf.serve.app import context_limit, engine_is_alive, engine_load
from llmperf.serve.prometheus_metrics import EngineLoad
from tests.fakes import ScriptedEngine

DECLARED = {
    "reference": EngineCapabilities(flush=True, step_stats=True, kv_stats=True, scheduler=True, liveness=True),
    "hf": EngineCapabilities(step_stats=True, liveness=True),
    "openai": EngineCapabilities(multiprocess=True),
    "synthetic": EngineCapabilities(),
}
METHODS = {"flush": "flush", "step_stats": "step_stats", "liveness": "is_alive"}


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_each_engine_declares_its_capabilities_and_has_what_it_declares(name):
    cls = ENGINES.get(name)
    assert cls.capabilities == DECLARED[name]
    for flag, method in METHODS.items():
        assert callable(getattr(cls, method, None)) == getattr(cls.capabilities, flag), (flag, name)


class _Flushable(ScriptedEngine):
    """Has a flush() it did not declare, or declared: the load generator goes by the flag."""

    def __init__(self, declared: bool) -> None:
        super().__init__(lambda request: [(0.0, 1)])
        self.capabilities = EngineCapabilities(flush=declared)
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1

    def is_alive(self) -> bool:
        return False


@pytest.mark.parametrize("declared", [True, False])
def test_the_load_generator_flushes_only_an_engine_that_declares_it(declared):
    engine = _Flushable(declared)
    requests = [Request(str(i), 1, prompt_token_ids=[1]) for i in range(3)]
    asyncio.run(LoadGenerator(engine, lambda record: None).run([], requests))
    assert (engine.flushes > 0) == declared


def test_the_server_reads_liveness_kv_and_scheduler_only_when_declared():
    engine = _Flushable(False)
    engine.max_model_len = 100
    engine.kv = object()  # present but undeclared: never read
    assert engine_is_alive(engine)  # is_alive() says False, but liveness is not declared
    assert context_limit(engine) == 100
    assert engine_load(engine, 3) == EngineLoad(num_running=3, num_waiting=0, kv_cache_usage=None)
    engine.capabilities = EngineCapabilities(liveness=True)
    assert not engine_is_alive(engine)
