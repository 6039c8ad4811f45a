"""Multi-turn sessions and shared prefixes: histories, think times, session caps, ShareGPT
replay, and the prefix-cache hit rate expected against the reference engine's counter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.reference.options import ReferenceEngineConfig
from engines.synthetic import ByteTokenizer
from engines.synthetic_options import SyntheticEngineConfig
from llmperf.cli import main as llmperf_main
from llmperf.measure.prefix_reuse import cacheable_tokens
from llmperf.run.config import (
    ArrivalConfig,
    Config,
    LengthConfig,
    PrefixConfig,
    ReportConfig,
    ScenarioConfig,
    SessionConfig,
    TelemetryConfig,
)
from llmperf.run.runner import run_benchmark
from llmperf.workload.requests import Workload

ROOT = Path(__file__).resolve().parent.parent
SHAREGPT = str(ROOT / "scenarios" / "data" / "sharegpt_sample.jsonl")
FAST_ENGINE = SyntheticEngineConfig(ttft_s=0.005, tpot_s=0.001)


def run(tmp_path, scenario, engine=FAST_ENGINE, report=False):
    config = Config(scenario=scenario, engine=engine, hardware={"name": "cpu"},
                    telemetry=TelemetryConfig(enabled=False), report=ReportConfig(enabled=report))
    result = run_benchmark(config, tmp_path / "run")
    lines = (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    return result.summary, [json.loads(line) for line in lines]


def sessions_scenario(**kw):
    defaults = dict(
        num_requests=12, warmup_requests=0,
        arrival=ArrivalConfig(process="poisson", rate_rps=20.0),
        prompt_tokens=LengthConfig(value=8), output_tokens=LengthConfig(value=5),
        sessions=SessionConfig(turns=3, think_time="fixed", think_time_s=0.05),
        record_tokens=True,
    )
    return ScenarioConfig(**{**defaults, **kw})


def test_second_turn_request_holds_the_first_turns_prompt_and_reply(tmp_path):
    summary, records = run(tmp_path, sessions_scenario())
    by_id = {r["id"]: r for r in records}
    assert summary["num_sessions"] == 4 and len(records) == 12
    for session in ("s0", "s1", "s2", "s3"):
        first, second, third = (by_id[f"{session}-{k}"] for k in range(3))
        assert [first["turn"], second["turn"], third["turn"]] == [0, 1, 2]
        history = first["prompt_token_ids"] + first["output_token_ids"]
        assert len(first["output_token_ids"]) == 5
        assert second["prompt_token_ids"][: len(history)] == history
        assert len(second["prompt_token_ids"]) == 8 + 5 + 8
        assert third["prompt_token_ids"][:21] == second["prompt_token_ids"]
        assert third["prompt_token_ids"][21:26] == second["output_token_ids"]
        # What a cache could reuse: the history less the reply's last (never computed) token.
        assert second["shared_prefix_tokens"] == 12 and third["shared_prefix_tokens"] == 25
        # The user thinks 50 ms after a reply ends before sending the next turn.
        assert second["arrival_s"] - first["end_s"] == pytest.approx(0.05, abs=0.01)
    assert set(summary["ttft_s_by_turn"]) == {"0", "1", "2"}
    assert summary["ttft_s_by_turn"]["1"]["mean"] == pytest.approx(0.005, abs=0.005)
    # floor(12/16)=0, floor(25/16)*16=16 cacheable tokens per session, of 8+21+34 prompt tokens.
    assert summary["prefix_cache_hit_rate_expected"] == pytest.approx(16 / 63)


def test_session_cap_keeps_sessions_from_overlapping(tmp_path):
    scenario = sessions_scenario(
        arrival=ArrivalConfig(process="constant", rate_rps=1000.0),
        sessions=SessionConfig(turns=2, think_time="fixed", think_time_s=0.01, max_concurrent=1),
    )
    _, records = run(tmp_path, scenario)
    spans = {}
    for r in records:
        start, end = spans.get(r["session_id"], (r["arrival_s"], r["end_s"]))
        spans[r["session_id"]] = (min(start, r["arrival_s"]), max(end, r["end_s"]))
    ordered = sorted(spans.values())
    assert len(ordered) == 6
    assert all(a_end <= b_start + 1e-6 for (_, a_end), (b_start, _) in zip(ordered, ordered[1:], strict=False))


def test_sharegpt_conversations_replay_all_their_turns(tmp_path):
    scenario = sessions_scenario(
        num_requests=30, dataset=SHAREGPT,
        prompt_tokens=LengthConfig(dist="dataset", max=4096),
        output_tokens=LengthConfig(dist="dataset", max=64),
        sessions=SessionConfig(turns=8, think_time="exponential", think_time_s=0.01),
    )
    _, records = run(tmp_path, scenario)
    workload = Workload(scenario, ByteTokenizer())
    second_turns = [r for r in records if r["turn"] == 1]
    assert second_turns, "the sample has 4-turn conversations"
    humans = {c.exchanges[1][0] for c in workload.conversations if len(c.exchanges) > 1}
    for r in second_turns:
        tail = bytes(r["prompt_token_ids"]).decode()
        assert any(tail.endswith(h) for h in humans)
    assert max(r["turn"] for r in records) == 1  # the sample's longest has 2 exchanges


def test_think_time_distributions_have_the_mean_asked_for():
    import numpy as np

    from llmperf.workload.sessions import think_time_s
    rng = np.random.default_rng(0)
    for dist in ("exponential", "uniform"):
        draws = [think_time_s(SessionConfig(think_time=dist, think_time_s=2.0), rng)
                 for _ in range(20000)]
        assert np.mean(draws) == pytest.approx(2.0, rel=0.03)
        assert min(draws) >= 0


def test_shared_prefix_groups_give_the_expected_hit_rate_in_whole_blocks():
    assert cacheable_tokens(64, 80, 16) == 64
    assert cacheable_tokens(70, 80, 16) == 64
    assert cacheable_tokens(64, 64, 16) == 48  # one prompt token must still run
    scenario = ScenarioConfig(
        num_requests=40, warmup_requests=2, prompt_tokens=LengthConfig(value=16),
        prefix=PrefixConfig(groups=4, length=64))
    workload = Workload(scenario, ByteTokenizer())
    requests = list(workload.requests())
    starts = {tuple(r.prompt_token_ids[:64]) for r in requests}
    assert len(starts) == 4
    assert sum(r.shared_prefix_tokens == 0 for r in requests) == 4
    assert all(len(r.prompt_token_ids) == 80 for r in requests)
    warm = workload.warmup()
    assert not {tuple(r.prompt_token_ids[:64]) for r in warm} & starts


def test_reference_engine_measured_hit_rate_is_within_5_points_of_expected(tmp_path):
    scenario = ScenarioConfig(
        num_requests=24, warmup_requests=1,
        arrival=ArrivalConfig(process="constant", rate_rps=8.0),
        prompt_tokens=LengthConfig(value=24), output_tokens=LengthConfig(value=4),
        prefix=PrefixConfig(groups=3, length=96))
    engine = ReferenceEngineConfig(enable_prefix_caching=True, max_num_seqs=8)
    summary, _ = run(tmp_path, scenario, engine=engine)
    expected = summary["prefix_cache_hit_rate_expected"]
    # 21 of 24 requests reuse 96 tokens (6 blocks) of their 120.
    assert expected == pytest.approx(21 * 96 / (24 * 120))
    assert abs(summary["prefix_cache_hit_rate"] - expected) <= 0.05


@pytest.mark.parametrize(
    "args, words",
    [
        (["scenario.sessions.think_time_s=-1"], ["scenario.sessions.think_time_s=-1", ">= 0"]),
        (["scenario.sessions.think_time=gauss"], ["scenario.sessions.think_time='gauss'", "exponential"]),
        (["scenario.prefix.groups=2"], ["scenario.prefix.length=0", "> 0"]),
        (["scenario.sessions.turns=2", "scenario=closed"], ["scenario.sessions.turns=2", "open arrival"]),
    ],
)
def test_bad_session_and_prefix_options_give_one_line_and_exit_2(args, words, capsys):
    with pytest.raises(SystemExit) as exit_info:
        llmperf_main(["engine=synthetic", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    for word in words:
        assert word in err


def test_prefix_longer_than_the_engines_context_gives_one_line_and_exit_2(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)  # the run folder goes under the working directory
    with pytest.raises(SystemExit) as exit_info:
        llmperf_main(["engine=reference", "engine.max_model_len=256", "hardware=cpu",
                      "scenario.prefix.groups=2", "scenario.prefix.length=300"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "scenario.prefix.length=300" in err and "max_model_len 256" in err
