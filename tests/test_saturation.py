"""The ramp arrival and the over-saturation detector: an overloaded run stops early and
says at what rate; a held rate runs to its end."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from engines.synthetic_options import SyntheticEngineConfig
from llmperf.errors import ConfigError
from llmperf.measure.saturation import Saturation, SaturationDetector, WindowFit
from llmperf.run.config import (
    ArrivalConfig,
    Config,
    LengthConfig,
    ReportConfig,
    SaturationConfig,
    ScenarioConfig,
    TelemetryConfig,
    ValidityConfig,
)
from llmperf.run.runner import run_benchmark
from llmperf.workload.arrivals import ARRIVALS, ramp_rate_at

# 8 slots, each held 0.1 s (first token at 25 ms, then 3 more 25 ms apart): 80 req/s.
ENGINE = SyntheticEngineConfig(ttft_s=0.025, tpot_s=0.025, max_concurrency=8)
CAPACITY_RPS = 8 / (0.025 + 3 * 0.025)


def ramp(**kw) -> list[float]:
    arrival = ArrivalConfig(process="ramp", **kw)
    times = ARRIVALS["ramp"].times(arrival, np.random.default_rng(0), [])
    return list(itertools.islice(times, 25))


def test_linear_ramp_places_request_k_where_the_rate_integral_reaches_k():
    # rate 5 t for t <= 2 s: k arrivals by t = sqrt(2k / 5); after 2 s, 10 req/s.
    times = ramp(rate_rps=10.0, ramp_duration_s=2.0)
    assert times[:11] == pytest.approx([np.sqrt(2 * k / 5) for k in range(11)])
    assert times[20] == pytest.approx(3.0)
    assert times[24] == pytest.approx(3.4)


def test_stepped_ramp_holds_each_step_rate_for_its_share_of_the_duration():
    # 2 steps over 2 s: 2 req/s for 1 s (k=0 at 0, k=1 at 0.5), then 10 req/s from 1 s.
    times = ramp(rate_rps=10.0, ramp_start_rps=2.0, ramp_duration_s=2.0, ramp_steps=2)
    assert times[:5] == pytest.approx([0.0, 0.5, 1.0, 1.1, 1.2])
    arrival = ArrivalConfig(process="ramp", rate_rps=10.0, ramp_start_rps=2.0,
                            ramp_duration_s=2.0, ramp_steps=2)
    assert [ramp_rate_at(arrival, t) for t in (0.5, 1.5, 5.0)] == [2.0, 10.0, 10.0]


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"rate_rps": 10.0}, "ramp_duration_s"),
        ({"rate_rps": 10.0, "ramp_duration_s": 1.0, "ramp_start_rps": -1.0}, "ramp_start_rps"),
        ({"rate_rps": 10.0, "ramp_duration_s": 1.0, "ramp_steps": 0}, "ramp_steps"),
    ],
)
def test_bad_ramp_options_name_the_field(kw, words):
    with pytest.raises(ConfigError, match=words):
        ArrivalConfig(process="ramp", **kw)


def test_saturation_window_must_hold_three_checks():
    with pytest.raises(ConfigError, match="check_interval_s"):
        SaturationConfig(window_s=0.2, check_interval_s=0.1)


def test_window_fit_matches_a_least_squares_fit_of_the_window_as_it_slides():
    """The running sums against numpy's fit of the points still in the window, an hour into
    a run at 4,000 first tokens a second (x far from 0, 12,000 points in a 3 s window)."""
    rng = np.random.default_rng(7)
    fit, kept = WindowFit(), []
    t = 3600.0
    for k in range(1, 60_001):
        t += rng.exponential(1 / 4000)
        y = 0.25 * (t - 3600.0) + rng.normal(0, 0.05)
        fit.append(t, y)
        kept.append((t, y))
        if k % 10_000 == 0:
            fit.drop_before(t - 3.0)
            kept = [(x, v) for x, v in kept if x >= t - 3.0]
            x, v = np.array(kept).T
            assert len(fit) == len(kept) >= 10_000
            assert fit.slope() == pytest.approx(np.polyfit(x - x.mean(), v, 1)[0], rel=1e-9)


def test_window_fit_has_no_slope_without_two_distinct_times():
    fit = WindowFit()
    assert fit.slope() == 0.0
    fit.append(5.0, 1.0)
    assert fit.slope() == 0.0
    fit.append(5.0, 9.0)  # two points at one time: no line through them
    assert fit.slope() == 0.0
    fit.append(6.0, 2.0)
    assert fit.slope() == pytest.approx(np.polyfit([5.0, 5.0, 6.0], [1.0, 9.0, 2.0], 1)[0])
    fit.drop_before(7.0)  # all gone: empty again
    assert len(fit) == 0 and fit.slope() == 0.0


def test_detector_verdict_carries_the_growth_of_a_queue_that_climbs():
    """A queue fed at 100 req/s and served at 50: half of each second's arrivals stay
    waiting (growth 0.5) and each first token comes 0.5 s later per second (TTFT growth
    0.5): the detector's figures are those, by hand."""
    detector = SaturationDetector(SaturationConfig(window_s=2.0, check_interval_s=0.1))
    verdict, served, step = None, 0, 0
    while verdict is None:
        step += 1
        now = step * 0.01
        detector.on_dispatch(now)  # 100 arrivals a second
        if step % 2 == 0:  # 50 first tokens a second, in arrival order
            served += 1
            detector.on_first_token(served * 0.01, now)
        if step % 10 == 0:
            verdict = detector.check(now)
    assert isinstance(verdict, Saturation)
    assert verdict.at_s == pytest.approx(2.0)
    assert verdict.rate_rps == pytest.approx(100, rel=0.01)
    assert verdict.waiting_growth == pytest.approx(0.5, rel=0.05)
    assert verdict.ttft_growth == pytest.approx(0.5, rel=0.01)


def run_at(tmp_path, arrival: ArrivalConfig, duration_s: float):
    scenario = ScenarioConfig(
        num_requests=None,
        duration_s=duration_s,
        warmup_requests=0,
        arrival=arrival,
        prompt_tokens=LengthConfig(value=16),
        output_tokens=LengthConfig(value=4),
        saturation=SaturationConfig(window_s=1.0),
        validity=ValidityConfig(min_duration_s=0.5, min_completed=5),
    )
    config = Config(
        scenario=scenario,
        engine=ENGINE,
        hardware={"name": "cpu"},
        telemetry=TelemetryConfig(enabled=False),
        report=ReportConfig(enabled=False),
    )
    return run_benchmark(config, tmp_path / "run").summary


def test_overloaded_run_stops_early_and_is_marked_saturated(tmp_path):
    summary = run_at(tmp_path, ArrivalConfig(process="constant", rate_rps=2 * CAPACITY_RPS), 8.0)
    assert summary["saturated"] is True
    assert summary["saturated_at_rps"] == pytest.approx(2 * CAPACITY_RPS, rel=0.05)
    assert summary["window_end_s"] - summary["window_start_s"] < 4.0  # of the 8 s asked for
    assert summary["num_requests"] < 0.5 * 8.0 * 2 * CAPACITY_RPS
    checks = {c["check"]: c for c in summary["validity"]}
    assert not checks["not_saturated"]["ok"]
    rate = f"{summary['saturated_at_rps']:.3g}"
    assert checks["not_saturated"]["detail"].startswith(f"saturated at {rate} req/s: ")
    assert summary["valid"] is False
    records = (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    assert len(records) == summary["num_requests"]  # the aborted ones are kept too
    assert any(json.loads(line)["error"] == "saturated" for line in records)


def test_held_rate_runs_to_its_end(tmp_path):
    summary = run_at(tmp_path, ArrivalConfig(process="poisson", rate_rps=0.6 * CAPACITY_RPS), 3.0)
    assert summary["saturated"] is False
    assert summary["num_failed"] == 0
    assert summary["window_end_s"] - summary["window_start_s"] > 2.8
    assert {c["check"]: c["ok"] for c in summary["validity"]}["not_saturated"]


def test_ramp_past_capacity_saturates_near_it(tmp_path):
    """Rising 0 -> 240 req/s over 3 s on an 80 req/s engine: the verdict comes once the
    offered rate (averaged over the 1 s window) is past the capacity, long before 3 s."""
    arrival = ArrivalConfig(process="ramp", rate_rps=240.0, ramp_duration_s=3.0)
    summary = run_at(tmp_path, arrival, 6.0)
    assert summary["saturated"] is True
    assert CAPACITY_RPS < summary["saturated_at_rps"] < 2.5 * CAPACITY_RPS
