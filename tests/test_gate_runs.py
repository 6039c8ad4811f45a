import json

import pytest

from llmperf.gate.errors import GateError
from llmperf.gate.metric_spec import MetricSpec
from llmperf.gate.runs import evaluate, load_jobs, validity_notes
from tests.test_gate_support import step, summary, write_run, write_sweep

# Static batching of 2 sequences (prompts 6 and 4 tokens, outputs 3 and 1): the short prompt
# is padded to 6, and the finished sequence keeps its slot for two decode steps.
STATIC_STEPS = [
    step("prefill", 2, prefill=10, decode=0, padded=2),
    step("decode", 2, prefill=0, decode=1, padded=1),
    step("decode", 2, prefill=0, decode=1, padded=1, preemptions=1),
]


def test_run_folder_is_one_job(tmp_path):
    write_run(tmp_path / "run", summary(output_throughput_tps=123.0))
    jobs = load_jobs(tmp_path / "run")
    assert len(jobs) == 1
    assert evaluate(MetricSpec.parse("output_throughput_tps"), jobs, tmp_path) == 123.0
    assert evaluate(MetricSpec.parse("ttft_s.p99"), jobs, tmp_path) == pytest.approx(0.5)


def test_step_metrics_match_hand_counts(tmp_path):
    jobs = load_jobs(write_run(tmp_path / "run", summary(), steps=STATIC_STEPS))
    value = {name: evaluate(MetricSpec.parse(name), jobs, tmp_path) for name in (
        "steps.count", "steps.tokens_per_step", "steps.seqs_per_step",
        "steps.padded_fraction", "steps.preemptions")}
    assert value == {
        "steps.count": 3.0,
        "steps.tokens_per_step": pytest.approx(12 / 3),
        "steps.seqs_per_step": 2.0,
        "steps.padded_fraction": pytest.approx(4 / (4 + 12)),
        "steps.preemptions": 1.0,
    }


def test_sweep_jobs_are_picked_by_their_overrides(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", {
        "engine.batching=continuous,scenario.arrival.rate_rps=2": summary(120.0),
        "engine.batching=static,scenario.arrival.rate_rps=2": summary(40.0, batching="static"),
        "engine.batching=continuous,scenario.arrival.rate_rps=4": summary(200.0),
    })
    jobs = load_jobs(sweep)
    assert len(jobs) == 3
    pick = MetricSpec.parse(
        "output_throughput_tps@engine.batching=continuous,scenario.arrival.rate_rps=2.0")
    assert evaluate(pick, jobs, sweep) == 120.0  # 2.0 matches the override "2"
    ratio = MetricSpec.parse("output_throughput_tps@engine.batching=continuous,"
                             "scenario.arrival.rate_rps=2/engine.batching=static")
    assert evaluate(ratio, jobs, sweep) == pytest.approx(3.0)


def test_overrides_come_from_the_folder_name_without_hydra_files(tmp_path):
    write_run(tmp_path / "sweep" / "engine.batching=static", summary(40.0))
    write_run(tmp_path / "sweep" / "engine.batching=continuous", summary(100.0))
    jobs = load_jobs(tmp_path / "sweep")
    spec = MetricSpec.parse("output_throughput_tps@engine.batching=continuous/engine.batching=static")
    assert evaluate(spec, jobs, tmp_path / "sweep") == pytest.approx(2.5)


def test_selector_falls_back_to_the_summary_objects(tmp_path):
    # Hydra numbers jobs 0, 1 when no override_dirname is set; engine.batching is in summary.engine
    write_run(tmp_path / "sweep" / "0", summary(100.0, batching="continuous"), overrides=[])
    write_run(tmp_path / "sweep" / "1", summary(25.0, batching="sequential"), overrides=[])
    spec = MetricSpec.parse("output_throughput_tps@engine.batching=continuous"
                            "/engine.batching=sequential")
    assert evaluate(spec, load_jobs(tmp_path / "sweep"), tmp_path) == pytest.approx(4.0)


@pytest.mark.parametrize("metric, message", [
    ("output_throughput_tps", r"holds 2 jobs; pick one .*engine.batching=continuous"),
    ("output_throughput_tps@engine.batching=dynamic", r"no job .* matches engine.batching=dynamic"),
    ("output_throughput_tps@scenario.name=chat", r"2 jobs .* match scenario.name=chat"),
    ("output_throughput_tps@engine.batching=static/engine.batching=static", "same job"),
])
def test_job_selection_errors_name_the_jobs(tmp_path, metric, message):
    sweep = write_sweep(tmp_path / "sweep", {"engine.batching=continuous": summary(),
                                             "engine.batching=static": summary()})
    with pytest.raises(GateError, match=message):
        evaluate(MetricSpec.parse(metric), load_jobs(sweep), sweep)


def test_missing_and_foreign_folders_are_usage_errors(tmp_path):
    with pytest.raises(GateError, match="run folder not found"):
        load_jobs(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(GateError, match="no summary.json"):
        load_jobs(tmp_path / "empty")


@pytest.mark.parametrize("content, message", [
    (json.dumps(summary(schema_version=2)), "schema_version 2, this gate reads 1"),
    (json.dumps({"throughput": 1}), "schema_version None"),
    ("{not json", "not valid JSON"),
])
def test_foreign_summaries_are_schema_errors(tmp_path, content, message):
    (tmp_path / "summary.json").write_text(content)
    with pytest.raises(GateError, match=message):
        load_jobs(tmp_path)


def test_missing_or_null_figures_are_usage_errors(tmp_path):
    data = summary()
    del data["goodput_rps"]
    jobs = load_jobs(write_run(tmp_path / "run", data))
    with pytest.raises(GateError, match="has no 'goodput_rps'"):
        evaluate(MetricSpec.parse("goodput_rps"), jobs, tmp_path)
    with pytest.raises(GateError, match="usd_per_1m_tokens is None, not a number"):
        evaluate(MetricSpec.parse("usd_per_1m_tokens"), jobs, tmp_path)
    with pytest.raises(GateError, match="steps metrics need .*steps.jsonl"):
        evaluate(MetricSpec.parse("steps.count"), jobs, tmp_path)


def test_invalid_and_interrupted_runs_are_noted(tmp_path):
    bad = summary(valid=False, validity=[
        {"check": "min_duration", "ok": False, "detail": "3.1 s < 10 s"},
        {"check": "warmup_done", "ok": True, "detail": ""}])
    [job] = load_jobs(write_run(tmp_path / "bad", bad))
    assert validity_notes(job) == [f"{job.path}: the run is not valid: min_duration (3.1 s < 10 s)"]
    [job] = load_jobs(write_run(tmp_path / "cut", summary(valid=False, interrupted=True)))
    assert validity_notes(job) == [f"{job.path}: the run was interrupted"]
    [job] = load_jobs(write_run(tmp_path / "good", summary()))
    assert validity_notes(job) == []


def test_corrupt_steps_and_overrides_are_usage_errors(tmp_path):
    run = write_run(tmp_path / "run", summary(), steps=STATIC_STEPS)
    (run / "steps.jsonl").write_text(json.dumps(STATIC_STEPS[0]) + "\n[1, 2]\n")
    with pytest.raises(GateError, match=r"steps.jsonl:2: not a JSON object"):
        evaluate(MetricSpec.parse("steps.count"), load_jobs(run), run)
    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_text("- a=1\n  - : [\n")
    with pytest.raises(GateError, match=r"overrides.yaml: not valid YAML"):
        load_jobs(run)
