"""Cost per million tokens and energy per token, recomputed by hand."""

from __future__ import annotations

import pytest

from engines.base import StepStat
from llmperf.perf.cost import (
    COST_KEYS,
    cost_summary,
    input_share_from_request_times,
    input_share_from_steps,
    input_share_from_tokens,
)


def step(prefill: int, decode: int, duration: float) -> StepStat:
    kind = "mixed" if prefill and decode else ("prefill" if prefill else "decode")
    return StepStat(0.0, duration, kind, max(1, decode), prefill, decode)


STEPS = [step(100, 0, 1.0), step(0, 4, 1.5), step(0, 4, 1.5), step(30, 10, 1.0)]


def test_input_share_is_prompt_time_over_step_time_with_mixed_steps_split_by_tokens():
    # prefill 1.0 s whole, decode 3.0 s none, mixed 1.0 s x 30/40
    assert input_share_from_steps(STEPS) == pytest.approx((1.0 + 0.75) / 5.0)
    assert input_share_from_steps([]) is None


def test_cost_with_step_stats_splits_the_run_cost_by_step_time():
    out = cost_summary(3.6, 10.0, 1000, 500, steps=STEPS)
    run_cost = 3.6 * 10.0 / 3600  # 0.01 USD
    assert out["run_cost_usd"] == pytest.approx(0.01)
    assert out["cost_split"] == "step_time" and out["cost_input_share"] == pytest.approx(0.35)
    assert out["usd_per_1m_input_tokens"] == pytest.approx(run_cost * 0.35 / 1000 * 1e6)  # 3.5
    assert out["usd_per_1m_output_tokens"] == pytest.approx(run_cost * 0.65 / 500 * 1e6)  # 13.0
    assert out["usd_per_1m_tokens"] == pytest.approx(run_cost / 1500 * 1e6)  # 6.667
    assert out["usd_per_1m_input_tokens"] == pytest.approx(3.5)
    assert out["usd_per_1m_output_tokens"] == pytest.approx(13.0)


def test_cost_without_step_stats_prices_input_and_output_tokens_alike():
    out = cost_summary(2.0, 36.0, 3000, 1000)
    assert out["cost_split"] == "tokens" and out["cost_input_share"] == pytest.approx(0.75)
    per_token = 2.0 * 36.0 / 3600 / 4000 * 1e6  # 5.0 USD per 1M
    assert out["usd_per_1m_input_tokens"] == pytest.approx(per_token)
    assert out["usd_per_1m_output_tokens"] == pytest.approx(per_token)
    assert out["usd_per_1m_tokens"] == pytest.approx(per_token)
    assert input_share_from_tokens(0, 0) is None


def test_energy_per_output_token_is_measured_energy_over_output_tokens():
    out = cost_summary(1.0, 10.0, 100, 250, energy_j=500.0)
    assert out["energy_j"] == 500.0 and out["energy_per_output_token_j"] == pytest.approx(2.0)


def test_nothing_measured_power_gives_null_energy():
    out = cost_summary(1.0, 10.0, 100, 250)
    assert out["energy_j"] is None and out["energy_per_output_token_j"] is None


def test_no_price_gives_null_costs_but_keeps_the_split_and_energy():
    out = cost_summary(None, 10.0, 100, 250, steps=STEPS, energy_j=10.0)
    assert set(out) == set(COST_KEYS)
    assert out["run_cost_usd"] is None and out["usd_per_1m_tokens"] is None
    assert out["usd_per_1m_output_tokens"] is None and out["cost_input_share"] == pytest.approx(
        0.35
    )
    assert out["energy_per_output_token_j"] == pytest.approx(0.04)


def test_no_output_tokens_gives_null_per_output_figures():
    out = cost_summary(1.0, 10.0, 100, 0, energy_j=5.0)
    assert out["usd_per_1m_output_tokens"] is None and out["energy_per_output_token_j"] is None
    assert out["usd_per_1m_input_tokens"] == pytest.approx(1.0 * 10 / 3600 / 100 * 1e6)


def test_without_steps_measured_request_times_split_the_cost():
    """Defect c: HTTP runs split by tokens while the reference engine splits by time.
    Prefill is each request's TTFT, decode the rest of its E2E."""
    times = [(0.2, 1.0), (0.4, 2.0), (0.3, 1.0)]  # (ttft_s, e2e_s)
    share = (0.2 + 0.4 + 0.3) / (1.0 + 2.0 + 1.0)
    assert input_share_from_request_times(times) == pytest.approx(0.225)
    out = cost_summary(3.6, 10.0, 3000, 1000, request_times=times)
    assert out["cost_split"] == "request_time" and out["cost_input_share"] == pytest.approx(share)
    assert out["usd_per_1m_input_tokens"] == pytest.approx(0.01 * share / 3000 * 1e6)
    assert out["usd_per_1m_output_tokens"] == pytest.approx(0.01 * (1 - share) / 1000 * 1e6)
    # Step stats, where an engine has them, still decide.
    assert cost_summary(3.6, 10.0, 3000, 1000, steps=STEPS, request_times=times)[
        "cost_split"
    ] == "step_time"
    assert input_share_from_request_times([]) is None
