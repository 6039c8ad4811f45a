"""scenario.stages: one run steps through several loads, each with its own figures, its rate
held, and a stage that saturates ending the run."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from rich.console import Console

from engines.synthetic_options import SyntheticEngineConfig
from llmperf.errors import ConfigError
from llmperf.gate.metric_spec import MetricSpec
from llmperf.gate.runs import GateError, evaluate, load_jobs
from llmperf.measure.metrics import distribution, ttft_s
from llmperf.measure.records import RequestRecord
from llmperf.measure.steady import in_flight_curve
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
from llmperf.workload.scenario import StageConfig


def staged_run(tmp_path, stages, engine=None, process="constant", **scenario_kw):
    scenario = ScenarioConfig(**{
        "arrival": ArrivalConfig(process=process),
        "stages": stages,
        "warmup_requests": 0,
        "prompt_tokens": LengthConfig(value=8),
        "output_tokens": LengthConfig(value=4),
        "validity": ValidityConfig(min_duration_s=0.5, min_completed=5),
        **scenario_kw,
    })
    config = Config(scenario=scenario,
                    engine=engine or SyntheticEngineConfig(ttft_s=0.004, tpot_s=0.002),
                    hardware={"name": "cpu"}, telemetry=TelemetryConfig(enabled=False),
                    report=ReportConfig(enabled=False))
    out = io.StringIO()
    run = run_benchmark(config, tmp_path, console=Console(file=out, width=200))
    records = [RequestRecord.from_dict(json.loads(line))
               for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    return run.summary, records, out.getvalue()


def test_three_stages_give_each_stage_its_figures_and_hold_each_rate(tmp_path):
    summary, records, console = staged_run(tmp_path, [
        StageConfig(rate_rps=20, num_requests=20), StageConfig(rate_rps=40, num_requests=40),
        StageConfig(rate_rps=80, duration_s=1.0)])
    stages = summary["stages"]
    assert [s["stage"] for s in stages] == [0, 1, 2]
    assert [r.stage for r in records].count(0) == 20 and [r.stage for r in records].count(1) == 40
    # A duration stage at 80 req/s sends the arrivals before 1 s of a 12.5 ms schedule: 80.
    assert [s["num_requests"] for s in stages] == [20, 40, 80]
    for stage, asked in zip(stages, (20.0, 40.0, 80.0), strict=True):
        mine = [r for r in records if r.stage == stage["stage"]]
        dispatches = sorted(r.dispatch_s for r in mine)
        assert stage["asked_rate_rps"] == asked
        assert stage["offered_rate_rps"] == pytest.approx((len(mine) - 1) / (dispatches[-1] - dispatches[0]))
        assert abs(stage["offered_rate_error_pct"]) < 5.0
        assert stage["ttft_s"] == pytest.approx(distribution([ttft_s(r) for r in mine]))
        assert stage["ran"] and not stage["saturated"]
        assert stage["start_s"] <= min(r.arrival_s for r in mine)
        assert stage["end_s"] >= max(r.end_s for r in mine)  # drained before the next began
    assert stages[0]["end_s"] <= stages[1]["start_s"] and stages[1]["end_s"] <= stages[2]["start_s"]
    checks = {c["check"]: c for c in summary["validity"]}
    assert checks["stage_rates_held"]["ok"], checks["stage_rates_held"]
    assert summary["asked_rate_rps"] is None  # the run as a whole asked no one rate
    assert "80 req/s for 1 s" in console and "stages" in console
    from llmperf.report.figures import stage_rows  # the report's table of the stages

    rows = stage_rows(summary)
    assert [r["load"] for r in rows] == ["20 req/s for 20 requests", "40 req/s for 40 requests",
                                         "80 req/s for 1 s"]
    assert rows[2]["offered"].startswith(f"{stages[2]['offered_rate_rps']:.2f} (")
    assert [r["completed"] for r in rows] == ["20/20", "40/40", "80/80"]

    # The gate reads a stage's figure, and a ratio of two stages of the one run.
    jobs = load_jobs(tmp_path)
    assert evaluate(MetricSpec.parse("ttft_s.p99@stage=2"), jobs, tmp_path) == stages[2]["ttft_s"]["p99"]
    ratio = evaluate(MetricSpec.parse("request_throughput_rps@stage=2/stage=0"), jobs, tmp_path)
    assert ratio == pytest.approx(stages[2]["request_throughput_rps"] / stages[0]["request_throughput_rps"])
    assert ratio > 2.5  # 80 against 20 req/s asked
    with pytest.raises(GateError, match="stages 0-2, not 3"):
        evaluate(MetricSpec.parse("ttft_s.p99@stage=3"), jobs, tmp_path)


def test_a_concurrency_stage_is_a_closed_loop_that_holds_its_level(tmp_path):
    summary, records, _ = staged_run(tmp_path, [
        StageConfig(rate_rps=50, num_requests=10), StageConfig(concurrency=3, num_requests=30)])
    closed = [r for r in records if r.stage == 1]
    assert len(closed) == 30
    assert max(n for _, n in in_flight_curve(closed)) == 3
    assert summary["stages"][1]["asked_rate_rps"] is None
    assert summary["stages"][1]["concurrency"] == 3
    assert summary["stages"][1]["num_completed"] == 30


def test_a_stage_that_saturates_stops_the_run_and_is_marked(tmp_path):
    # One slot held 20 ms: 50 req/s served; 150 req/s asked in stage 1 queues without bound.
    engine = SyntheticEngineConfig(ttft_s=0.02, tpot_s=0.0, max_concurrency=1)
    summary, records, console = staged_run(
        tmp_path, [StageConfig(rate_rps=20, num_requests=20), StageConfig(rate_rps=150, duration_s=8),
                   StageConfig(rate_rps=10, num_requests=10)],
        engine=engine, output_tokens=LengthConfig(value=1),
        saturation=SaturationConfig(window_s=1.0))
    stages = summary["stages"]
    assert summary["saturated"] is True
    assert [s["saturated"] for s in stages] == [False, True, False]
    assert [s["ran"] for s in stages] == [True, True, False]
    assert stages[1]["end_s"] - stages[1]["start_s"] < 4.0  # of the 8 s asked
    assert not any(r.stage == 2 for r in records)
    assert summary["saturation_detail"].endswith("in stage 1 (150 req/s for 8 s), which ended the run")
    assert "saturated: the run stopped" in console and "not run" in console


def test_stages_from_the_command_line_and_their_bad_values(tmp_path):
    from tests.conftest import compose_overrides

    config = compose_overrides("engine=synthetic",
                               "scenario.stages=[{rate_rps:2,duration_s:5},{concurrency:4,num_requests:8}]")
    assert config.scenario.stages == [StageConfig(rate_rps=2, duration_s=5),
                                      StageConfig(concurrency=4, num_requests=8)]
    with pytest.raises(ConfigError, match="one of rate_rps or concurrency"):
        StageConfig(rate_rps=2, concurrency=2, duration_s=1)
    with pytest.raises(ConfigError, match="one of duration_s or num_requests"):
        StageConfig(rate_rps=2)
    with pytest.raises(ConfigError, match="constant, poisson or gamma"):
        ScenarioConfig(arrival=ArrivalConfig(process="offline"), stages=[StageConfig(rate_rps=2, duration_s=1)])


def test_each_stage_draws_its_own_arrivals(tmp_path):
    from engines.synthetic import ByteTokenizer
    from llmperf.workload.requests import Workload

    scenario = ScenarioConfig(arrival=ArrivalConfig(process="poisson"), stages=[
        StageConfig(rate_rps=10, num_requests=400), StageConfig(rate_rps=100, num_requests=400)])
    workload = Workload(scenario, ByteTokenizer())
    for index, rate in ((0, 10), (1, 100)):
        requests = list(workload.stage_requests(index))
        assert [r.id for r in requests[:2]] == [f"s{index}-0", f"s{index}-1"]
        gaps = np.diff([r.arrival_s for r in requests])
        assert np.mean(gaps) == pytest.approx(1 / rate, rel=0.15)  # 399 exponential gaps
