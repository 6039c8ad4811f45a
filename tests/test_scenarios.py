"""Every scenario preset runs end to end, and its summary agrees with its own requests.jsonl."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

import scenarios
from engines.registry import ENGINES
from engines.synthetic_options import SyntheticEngineConfig
from llmperf.run.runner import run_benchmark
from llmperf.workload.datasets import load_sharegpt
from llmperf.workload.trace import load_trace
from tests.fakes import E2E_ENGINES, ENGINE_OVERRIDES

PRESETS = sorted(p.stem for p in (Path(scenarios.__file__).parent / "scenario").glob("*.yaml"))
QUICK = ["scenario.num_requests=8", "scenario.warmup_requests=1", "scenario.arrival.rate_rps=100"]
QUICK_PRESET = {"trace": ["scenario.num_requests=12", "scenario.arrival.trace_speedup=20"],
                "multiturn": ["scenario.sessions.think_time_s=0.01"]}
SUMMARY_KEYS = {
    "schema_version",
    "engine",
    "scenario",
    "model",
    "hardware",
    "valid",
    "validity",
    "num_requests",
    "num_completed",
    "num_failed",
    "duration_s",
    "request_throughput_rps",
    "output_throughput_tps",
    "total_throughput_tps",
    "input_tokens_total",
    "output_tokens_total",
    "ttft_s",
    "tpot_s",
    "itl_s",
    "e2e_s",
    "queue_s",
    "dispatch_lag_s",
    "slo",
    "goodput_rps",
    "slo_attainment",
    "interrupted",
}
RECORD_KEYS = {
    "id",
    "arrival_s",
    "dispatch_s",
    "first_token_s",
    "end_s",
    "token_times_s",
    "input_tokens",
    "output_tokens",
    "finish_reason",
    "error",
    "warmup",
}


def test_the_presets_the_issue_names_are_all_there():
    assert set(PRESETS) >= {
        "chat",
        "summarize",
        "codegen",
        "offline",
        "closed",
        "burst",
        "trace",
        "sharegpt",
    }


def run_preset(compose_config, tmp_path, engine, preset, *extra):
    overrides = [
        f"scenario={preset}",
        *ENGINE_OVERRIDES[engine],
        *QUICK,
        *QUICK_PRESET.get(preset, []),
        *extra,
    ]
    config = compose_config(*overrides)
    console = Console(file=io.StringIO(), width=120)
    run = run_benchmark(config, tmp_path, argv=overrides, console=console)
    summary = json.loads((tmp_path / "summary.json").read_text())
    lines = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    return run, summary, lines, console.file.getvalue()


@pytest.mark.parametrize("engine", E2E_ENGINES)
@pytest.mark.parametrize("preset", PRESETS)
def test_preset_runs_and_summary_agrees_with_its_records(compose_config, tmp_path, engine, preset):
    run, summary, lines, printed = run_preset(compose_config, tmp_path, engine, preset)
    config = run.config
    assert SUMMARY_KEYS <= set(summary) and summary["schema_version"] == 1
    assert all(RECORD_KEYS <= set(line) for line in lines)
    assert {"config.yaml", "environment.json", "summary.json", "requests.jsonl"} <= {
        p.name for p in tmp_path.iterdir()
    }
    assert summary["scenario"]["name"] == preset and summary["engine"]["name"] == engine
    assert "ttft" in printed and str(tmp_path) in printed

    warmup = [r for r in lines if r["warmup"]]
    measured = [r for r in lines if not r["warmup"]]
    completed = [r for r in measured if r["error"] is None]
    expected = 12 if preset == "trace" else 8
    assert len(warmup) == config.scenario.warmup_requests == 1
    assert summary["num_requests"] == len(measured) == expected
    assert summary["num_completed"] == len(completed) == expected and summary["num_failed"] == 0

    # the figures, recomputed naively from the lines
    duration = max(r["end_s"] for r in measured) - min(r["arrival_s"] for r in measured)
    assert summary["duration_s"] == pytest.approx(duration)
    assert summary["input_tokens_total"] == sum(r["input_tokens"] for r in completed)
    assert summary["output_tokens_total"] == sum(r["output_tokens"] for r in completed)
    assert summary["request_throughput_rps"] == pytest.approx(len(completed) / duration)
    assert summary["output_throughput_tps"] == pytest.approx(
        summary["output_tokens_total"] / duration
    )
    ttft = [r["first_token_s"] - r["arrival_s"] for r in completed]
    e2e = [r["end_s"] - r["arrival_s"] for r in completed]
    tpot = [
        (r["end_s"] - r["first_token_s"]) / (r["output_tokens"] - 1)
        for r in completed
        if r["output_tokens"] > 1
    ]
    itl = [
        b - a
        for r in completed
        for a, b in zip(r["token_times_s"], r["token_times_s"][1:], strict=False)
    ]
    lag = [r["dispatch_s"] - r["arrival_s"] for r in measured]
    for key, values in [
        ("ttft_s", ttft),
        ("e2e_s", e2e),
        ("tpot_s", tpot),
        ("itl_s", itl),
        ("dispatch_lag_s", lag),
    ]:
        assert summary[key]["mean"] == pytest.approx(np.mean(values)), key
        assert summary[key]["max"] == pytest.approx(max(values)), key
    assert all(r["output_tokens"] == len(r["token_times_s"]) for r in completed)
    assert {c["check"] for c in summary["validity"]} >= {
        "warmup",
        "min_duration",
        "min_completed",
        "error_rate",
    }
    if config.scenario.validity.min_completed > expected:
        assert not summary["valid"]  # too few requests for the preset's own validity bar
    assert not summary["interrupted"]
    check_preset_shape(preset, run, measured)


def check_preset_shape(preset, run, measured):
    config = run.config
    arrivals = sorted(r["arrival_s"] for r in measured)
    inputs = [r["input_tokens"] for r in measured]
    if preset == "offline":
        assert len(set(arrivals)) == 1
    if preset == "closed":
        events = sorted(
            [(r["dispatch_s"], 1) for r in measured] + [(r["end_s"], -1) for r in measured]
        )
        assert max(np.cumsum([step for _, step in events])) <= config.scenario.arrival.concurrency
    if preset == "summarize":
        assert min(inputs) >= 512
    if preset == "trace":
        rows = load_trace(config.scenario.arrival.trace_path)[:12]
        assert sorted(inputs) == sorted(row.input_length for row in rows)
        gaps = np.diff(arrivals)
        assert gaps == pytest.approx(np.diff([row.timestamp_s for row in rows]) / 20)
    if preset == "sharegpt":
        tokenizer = run.engine.tokenizer
        prompt_lengths = {
            len(tokenizer.encode(c.prompt)) for c in load_sharegpt(config.scenario.dataset)
        }
        assert set(inputs) <= prompt_lengths


def test_synthetic_engine_honours_its_latency_model(compose_config, tmp_path):
    _, summary, lines, _ = run_preset(
        compose_config,
        tmp_path,
        "synthetic",
        "offline",
        "engine.ttft_s=0.02",
        "engine.prefill_s_per_token=0.00001",
        "engine.tpot_s=0.004",
        "scenario.prompt_tokens.value=1000",
        "scenario.output_tokens.value=40",
        "scenario.num_requests=4",
    )
    # TTFT = 0.02 + 1000 x 0.00001; sleeps never wake early, and late only by what the
    # (shared) CPUs cost; deadlines are absolute, so TPOT carries only the last token's delay
    assert 0.03 <= summary["ttft_s"]["min"] and summary["ttft_s"]["mean"] < 0.06
    assert summary["tpot_s"]["mean"] == pytest.approx(0.004, abs=0.0015)
    assert summary["queue_s"]["max"] < 0.01  # no concurrency limit: admitted on arrival


def test_engine_step_stats_go_to_steps_jsonl_on_the_records_clock(
    compose_config, tmp_path, monkeypatch
):
    monkeypatch.setitem(ENGINES, "stepping", "tests.fakes:SteppingEngine")
    config = compose_config(
        "scenario=offline", "scenario.num_requests=3", "scenario.warmup_requests=0"
    )
    config.engine = SyntheticEngineConfig(name="stepping", tpot_s=0.001)
    run = run_benchmark(config, tmp_path, console=Console(file=io.StringIO()))
    steps = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    records = {r.id: r for r in run.records}
    assert len(steps) == 3 and all(s["kind"] == "prefill" for s in steps)
    assert sorted(s["num_prefill_tokens"] for s in steps) == sorted(
        r.input_tokens for r in records.values()
    )
    # start_s is on the records' clock: each step starts between the first dispatch and the last end
    assert all(
        min(r.dispatch_s for r in records.values()) - 0.001 <= s["start_s"] <= run.load.end_s
        for s in steps
    )
