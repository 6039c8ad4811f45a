"""engine.inject_slowdown: the test-only knob that stretches each reference engine step."""

from __future__ import annotations

import time

import pytest

from engines.reference import ReferenceEngine

PROMPTS = [[5, 9, 13, 17], [21, 25, 29], [7, 11]]


def test_a_step_spins_the_given_fraction_of_its_own_time_more():
    engine = ReferenceEngine(model="tiny", inject_slowdown=0.5)
    start = time.perf_counter()
    end = start + 0.02  # a step that took 20 ms
    while time.perf_counter() < end:
        pass
    stretched = engine._stretch(start, end)
    assert 0.03 <= stretched - start < 0.03 + 0.02  # the spin may overrun on a busy machine
    assert ReferenceEngine(model="tiny")._stretch(start, end) == end  # off by default


def test_an_injected_slowdown_lands_in_each_step_and_leaves_tokens_alone():
    plain = ReferenceEngine(model="tiny", max_num_seqs=4)
    slowed = ReferenceEngine(model="tiny", max_num_seqs=4, inject_slowdown=1.0)
    calls = []
    stretch = slowed._stretch

    def recorded(start: float, end: float) -> float:
        calls.append((start, end, stretch(start, end)))
        return calls[-1][2]

    slowed._stretch = recorded
    tokens = {name: [o.token_ids for o in engine.generate(PROMPTS, max_tokens=12, ignore_eos=True)]
              for name, engine in (("plain", plain), ("slowed", slowed))}
    assert tokens["slowed"] == tokens["plain"]
    steps = slowed.step_stats()
    assert len(steps) == len(plain.step_stats()) == len(calls)
    for step, (start, end, stretched) in zip(steps, calls, strict=True):
        assert stretched - end >= end - start  # spun at least the step's own time again
        assert step.start_s == start and step.duration_s == stretched - start  # and it counts


def test_a_negative_slowdown_is_refused():
    with pytest.raises(ValueError, match="inject_slowdown=-0.1: must be >= 0"):
        ReferenceEngine(model="tiny", inject_slowdown=-0.1)
