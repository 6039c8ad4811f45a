"""`llmperf-search search.mode=sweep`: the synchronous and throughput trials, the rates
between them and the knee, against an engine whose capacity is known in closed form."""

from __future__ import annotations

import csv
import json

import pytest

from llmperf.measure.records import RequestRecord
from llmperf.search.cli import main
from llmperf.search.sweep import SweepTrial, completion_rate_rps, knee_rps, spaced_rates

# The synthetic engine as 4 slots, each held by a request for its first token after one
# tick then 5 more ticks (6 output tokens): capacity = slots / hold.
SLOTS, OUTPUT_TOKENS = 4, 6


def capacity_rps(hold_s: float) -> float:
    return SLOTS / hold_s


def sweep_argv(out, hold_s: float, num_requests: int, process: str = "poisson") -> list[str]:
    tick_s = hold_s / OUTPUT_TOKENS
    return [
        "search.mode=sweep", f"search.output_dir={out}",
        "engine=synthetic", f"engine.ttft_s={tick_s}", f"engine.tpot_s={tick_s}",
        "engine.prefill_s_per_token=0", f"engine.max_concurrency={SLOTS}",
        f"scenario.arrival.process={process}", f"scenario.num_requests={num_requests}",
        "scenario.warmup_requests=0", "scenario.prompt_tokens.dist=fixed",
        "scenario.prompt_tokens.value=16", "scenario.output_tokens.dist=fixed",
        f"scenario.output_tokens.value={OUTPUT_TOKENS}",
        "telemetry.enabled=false", "report.enabled=false", "hardware=cpu",
    ]


def test_rates_are_evenly_spaced_up_to_the_throughput_rate():
    assert spaced_rates(4.0, 16.0, 4) == pytest.approx([7.0, 10.0, 13.0, 16.0])
    assert spaced_rates(5.0, 5.0, 8) == [5.0]  # no more served with a queue: one rate


def trial(kind, offered=None, served=None, keeps_up=False, completion=None):
    return SweepTrial(kind=kind, offered_rps=offered, served_rps=served,
                      completion_rps=completion, keeps_up=keeps_up, saturated=False,
                      interrupted=False, run_dir="x")


def test_knee_is_the_pace_held_by_the_first_rate_that_falls_behind():
    trials = [trial("synchronous", served=4.0), trial("throughput", served=16.0),
              trial("rate", 7.0, keeps_up=True), trial("rate", 10.0, keeps_up=True),
              trial("rate", 13.0, keeps_up=False, completion=11.5),
              trial("rate", 16.0, keeps_up=True)]
    # Kept up to 10; at 13 requests completed at 11.5/s: the engine's pace under overload.
    assert knee_rps(trials) == 11.5  # the pass at 16 above the failure at 13 is noise
    trials[4].completion_rps = 9.0  # slower than a rate it kept up with: clamped to 10
    assert knee_rps(trials) == 10.0
    trials[4].completion_rps = None
    assert knee_rps(trials) == 10.0
    trials[2].keeps_up, trials[2].completion_rps = False, 5.5
    assert knee_rps(trials) == 5.5  # the lowest rate falls behind: between sync and it
    assert knee_rps(trials[:2]) == 4.0  # no rate yet: the synchronous rate
    for t in trials[2:]:
        t.keeps_up = True
    assert knee_rps(trials) == 16.0  # every rate kept up: the highest


def record(end_s: float, ok: bool = True) -> RequestRecord:
    return RequestRecord(id="r", arrival_s=0.0, dispatch_s=0.0, first_token_s=0.0, end_s=end_s,
                         error=None if ok else "boom")


def test_completion_rate_counts_the_gaps_between_completions_not_the_drain():
    # 11 completions 0.1 s apart after a 0.24 s service: 10 gaps in 1 s, whatever the service.
    records = [record(0.24 + k / 10) for k in range(11)] + [record(5.0, ok=False)]
    assert completion_rate_rps(records) == pytest.approx(10.0)
    assert completion_rate_rps(records[:1]) is None


def check_sweep(out, expected_knee_rps: float) -> dict:
    result = json.loads((out / "search.json").read_text())
    kinds = [t["kind"] for t in result["trials"]]
    assert kinds[:2] == ["synchronous", "throughput"] and set(kinds[2:]) == {"rate"}
    assert result["num_trials"] <= 10
    assert abs(result["knee_rps"] - expected_knee_rps) / expected_knee_rps <= 0.10
    sync, throughput = result["trials"][0], result["trials"][1]
    hold_s = SLOTS / expected_knee_rps
    # One at a time, each request holds the engine for hold_s: 1 / hold_s req/s.
    assert sync["served_rps"] == pytest.approx(1 / hold_s, rel=0.05)
    assert throughput["served_rps"] == pytest.approx(expected_knee_rps, rel=0.05)
    # Every trial is a normal run folder; the rate trials ran at the rates asked.
    for t in result["trials"]:
        summary = json.loads((out / t["run_dir"].split("/")[-1] / "summary.json").read_text())
        if t["kind"] == "rate":
            assert summary["scenario"]["arrival"]["rate_rps"] == pytest.approx(
                t["offered_rps"], rel=0.3)
    rows = list(csv.DictReader((out / "search.csv").open()))
    assert len(rows) == result["num_trials"]
    assert (out / "plots" / "sweep.png").stat().st_size > 10_000
    assert "knee:" in (out / "search.html").read_text()
    return result


def test_sweep_finds_the_knee_of_four_slots_within_10_percent_in_10_trials(tmp_path, capsys):
    # 4 slots of 60 ms: 66.7 req/s, in a few seconds (the 240 ms: the slow test below).
    out = tmp_path / "sweep"
    main(sweep_argv(out, hold_s=0.06, num_requests=40))
    check_sweep(out, capacity_rps(0.06))
    assert "knee: " in capsys.readouterr().out


@pytest.mark.slow
def test_sweep_knee_of_four_slots_of_240_ms_lands_within_10_percent_of_16_7(tmp_path):
    out = tmp_path / "sweep"
    main(sweep_argv(out, hold_s=0.24, num_requests=64))
    result = check_sweep(out, 4 / 0.24)
    assert result["knee_rps"] == pytest.approx(16.7, rel=0.10)


@pytest.mark.parametrize("argv, says", [
    (["search.mode=walk"], "search.mode='walk': unknown search mode; valid: capacity, sweep"),
    (["search.mode=sweep", "search.rates=0"], "search.rates=0: must be >= 1"),
    (["search.mode=sweep", "scenario.num_requests=null", "scenario.duration_s=5"],
     "set scenario.num_requests"),
])
def test_bad_sweep_input_gives_one_line_and_exit_2(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "engine=synthetic", "telemetry.enabled=false"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err, err
