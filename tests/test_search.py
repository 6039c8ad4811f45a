"""`llmperf-search`: the strategy, the SLO targets and the search against an engine whose
capacity is known in closed form."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmperf.search.cli import main
from llmperf.search.strategy import SearchConfig, Trial, next_value
from llmperf.search.targets import parse_targets

# The synthetic engine as a batch of B = 8 slots, each held S = 4 steps of 25 ms (first
# token after one step, then one per step), fed N = 120 requests at a constant gap g.
B, STEP_S, OUTPUT_TOKENS, N = 8, 0.025, 4, 120
S = STEP_S * OUTPUT_TOKENS
SLACK_S = 0.0275  # TTFT limit = one step + this


def closed_form_capacity_rps() -> float:
    """The highest constant rate whose TTFT p99 stays within STEP_S + SLACK_S.

    Below B/S every request finds a free slot: TTFT = one step. Above it, request k
    starts at (k mod B) g + floor(k/B) S, so it waits floor(k/B) (S - B g). The p99 of the
    waits is q (S - B g), q the p99 (numpy's linear interpolation) of floor(k/B) over
    k < N; it stays within SLACK_S while g >= (S - SLACK_S / q) / B.
    """
    q = np.percentile([k // B for k in range(N)], 99)
    return B / (S - SLACK_S / q)


def test_closed_form_sits_just_above_the_throughput_capacity():
    assert B / S == pytest.approx(80.0)
    assert closed_form_capacity_rps() == pytest.approx(81.6, abs=0.05)


def test_search_finds_the_closed_form_capacity_within_5_percent_in_8_trials(tmp_path, capsys):
    out = tmp_path / "search"
    main([
        f"slo.ttft_p99_s={STEP_S + SLACK_S}", f"slo.tpot_p99_s={STEP_S * 1.2}",
        "search.start=40", f"search.output_dir={out}",
        "engine=synthetic", f"engine.ttft_s={STEP_S}", f"engine.tpot_s={STEP_S}",
        "engine.prefill_s_per_token=0", f"engine.max_concurrency={B}",
        "scenario.arrival.process=constant", f"scenario.num_requests={N}",
        "scenario.warmup_requests=0", "scenario.prompt_tokens.dist=fixed",
        "scenario.prompt_tokens.value=16", "scenario.output_tokens.dist=fixed",
        f"scenario.output_tokens.value={OUTPUT_TOKENS}",
        "telemetry.enabled=false", "report.enabled=false", "hardware=cpu",
    ])
    result = json.loads((out / "search.json").read_text())
    expected = closed_form_capacity_rps()
    assert result["num_trials"] <= 8
    assert abs(result["capacity"] - expected) / expected <= 0.05
    assert "capacity: " in capsys.readouterr().out
    # Every trial is a normal run folder; the table and the plot sit beside them.
    for trial in result["trials"]:
        summary = json.loads((tmp_path / "search" / trial["run_dir"].split("/")[-1]
                              / "summary.json").read_text())
        assert summary["scenario"]["arrival"]["rate_rps"] == trial["value"]
        assert summary["scenario"]["slo"]["ttft_s"] == pytest.approx(STEP_S + SLACK_S)
    rows = (out / "search.csv").read_text().splitlines()
    assert len(rows) == result["num_trials"] + 1
    assert (out / "plots" / "goodput.png").stat().st_size > 1000
    assert "capacity:" in (out / "search.html").read_text()


def trial(value, passed, score, served=None, saturated=False):
    return Trial(value=value, passed=passed, score=score, served_rps=served, saturated=saturated)


def test_bracketing_doubles_until_a_trial_fails_then_halves_until_one_passes():
    cfg = SearchConfig()
    assert next_value([trial(4, True, 0.5)], cfg, integer=False) == 8
    assert next_value([trial(4, False, -2.0)], cfg, integer=False) == 2


def test_an_overloaded_failure_proposes_the_rate_it_served():
    trials = [trial(20, True, 0.5), trial(160, False, -10.0, served=60.0)]
    assert next_value(trials, SearchConfig(), integer=False) == 60.0


def test_regula_falsi_on_scores_between_the_bracket():
    # Headroom 0.5 at 10, overrun 0.5 at 20: the limit is crossed half way.
    trials = [trial(10, True, 0.5), trial(20, False, -0.5, served=20.0)]
    assert next_value(trials, SearchConfig(), integer=False) == pytest.approx(15.0)


def test_a_saturated_failure_bisects_geometrically():
    trials = [trial(10, True, 0.5), trial(40, False, -0.01, served=39.0, saturated=True)]
    assert next_value(trials, SearchConfig(), integer=False) == pytest.approx(20.0)


def test_search_stops_within_tolerance_and_at_max_trials():
    cfg = SearchConfig(tolerance=0.05, max_trials=3)
    assert next_value([trial(100, True, 0.1), trial(104, False, -0.1)], cfg, False) is None
    three = [trial(1, True, 0.9), trial(2, True, 0.9), trial(4, True, 0.9)]
    assert next_value(three, cfg, integer=False) is None


def test_concurrency_search_steps_in_whole_requests_and_stops_at_a_gap_of_one():
    cfg = SearchConfig()
    assert next_value([trial(4, True, 0.2), trial(8, False, -0.2)], cfg, integer=True) == 6.0
    assert next_value([trial(4, True, 0.2), trial(5, False, -0.2)], cfg, integer=True) is None


def test_targets_judge_percentiles_and_attainment():
    targets = parse_targets({"ttft_p99_s": "0.5", "tpot_p90_s": "0.05", "attainment": "0.9"})
    summary = {"ttft_s": {"p99": 0.25}, "tpot_s": {"p90": 0.06}, "slo_attainment": 0.95}
    met, score, misses = targets.margin(summary)
    assert not met
    assert score == pytest.approx(1 - 0.06 / 0.05)
    assert misses == ["tpot_p90_s = 0.06 s > 0.05 s"]
    assert targets.per_request().ttft_s == 0.5 and targets.per_request().tpot_s == 0.05
    summary["tpot_s"]["p90"] = 0.04
    summary["slo_attainment"] = 0.85
    met, _, misses = targets.margin(summary)
    assert not met and misses == ["attainment = 85.00% < 90.00%"]


BAD = {
    "unknown metric": (["slo.ttfb_p99_s=0.5"], ["slo.ttfb_p99_s", "unknown metric", "ttft"]),
    "unknown stat": (["slo.ttft_p42_s=0.5"], ["slo.ttft_p42_s", "p99"]),
    "negative limit": (["slo.ttft_p99_s=-1"], ["slo.ttft_p99_s='-1'", "> 0"]),
    "attainment above 1": (["slo.ttft_p99_s=1", "slo.attainment=1.5"], ["slo.attainment", "(0, 1]"]),
    "no target": (["engine=synthetic"], ["no SLO given"]),
    "unknown search option": (["slo.ttft_p99_s=1", "search.speed=2"], ["search.speed", "valid:"]),
    "bad tolerance": (["slo.ttft_p99_s=1", "search.tolerance=2"], ["search.tolerance", "(0, 1)"]),
    "rate search on a closed loop": (
        ["slo.ttft_p99_s=1", "search.over=rate", "scenario=closed"], ["search.over=rate", "closed"]),
    "bad llmperf override": (["slo.ttft_p99_s=1", "scenario.arrival.process=foo"],
                             ["scenario.arrival.process='foo'", "valid:"]),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_search_input_gives_one_line_and_exit_2(name, capsys):
    args, words = BAD[name]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("llmperf-search: error: ")
    for word in words:
        assert word in err


def test_search_runs_its_trials_against_an_http_server(tmp_path, capsys):
    """engine=openai against llmperf-serve (tiny model, in this process): every trial is a
    normal HTTP run and the capacity is the highest value that met the SLO."""
    from llmperf.serve.app import build_app
    from llmperf.serve.server import ServerThread, build_server

    server = build_server({"model": "tiny", "num_kv_blocks": 128, "max_model_len": 256})
    out = tmp_path / "search"
    with ServerThread(build_app(server)) as running:
        main([
            "slo.ttft_p99_s=2.0", "search.start=2", "search.max_trials=3",
            f"search.output_dir={out}", "engine=openai", f"engine.base_url={running.base_url}",
            "engine.model=tiny", "engine.prompt_format=token_ids", "model=tiny",
            "scenario.arrival.process=constant", "scenario.num_requests=8",
            "scenario.warmup_requests=1", "scenario.prompt_tokens.dist=fixed",
            "scenario.prompt_tokens.value=16", "scenario.output_tokens.dist=fixed",
            "scenario.output_tokens.value=4", "telemetry.enabled=false",
            "report.enabled=false", "hardware=cpu",
        ])
    result = json.loads((out / "search.json").read_text())
    assert 1 <= result["num_trials"] <= 3
    passed = [t["value"] for t in result["trials"] if t["passed"]]
    assert result["capacity"] == (max(passed) if passed else None)
    for trial in result["trials"]:
        folder = out / trial["run_dir"].split("/")[-1]
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["engine"]["name"] == "openai" and summary["num_completed"] == 8
