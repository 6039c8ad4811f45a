"""The request timeline: each request's bar cut at its client queue, engine queue, prefill and
decode; the reference engine's steps naming the requests they computed; the batching
sweep's timelines side by side; both rendered in headless Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import initialize_config_module
from rich.console import Console

from llmperf.cli import CONFIG_MODULE
from llmperf.report.folder import load_run_folder
from llmperf.report.run import build_run_report
from llmperf.report.sweep import build_sweep_report
from llmperf.report.timeline import request_bar, request_timeline, timeline_bars
from llmperf.run.compose import compose_config
from llmperf.run.config import register_configs
from llmperf.run.runner import run_benchmark
from tests.test_report_browser import browser, check_page, needs_chromium  # noqa: F401
from tests.test_report_support import write_realistic_run, write_realistic_sweep


def test_a_capped_request_bar_is_cut_at_queue_admission_and_first_token():
    bar = request_bar({"id": "7", "arrival_s": 1.0, "client_queue_s": 0.25, "dispatch_s": 1.25,
                       "admitted_s": 1.5, "first_token_s": 1.75, "end_s": 3.0,
                       "finish_reason": "length"})
    assert bar.segments == {"client_queue": (1.0, 0.25), "engine_queue": (1.25, 0.25),
                            "prefill": (1.5, 0.25), "decode": (1.75, 1.25)}


def test_records_without_cap_or_admission_time_start_prefill_at_dispatch():
    # An older run's record: no client_queue_s; an HTTP engine: no admitted_s.
    bar = request_bar({"id": "a", "arrival_s": 0.5, "dispatch_s": 0.5, "first_token_s": 0.75,
                       "end_s": 1.0})
    assert bar.segments == {"prefill": (0.5, 0.25), "decode": (0.75, 0.25)}
    failed = request_bar({"id": "b", "arrival_s": 0.0, "dispatch_s": 0.0, "first_token_s": 0.5,
                          "end_s": 2.0, "error": "engine crashed", "finish_reason": "error"})
    assert failed.segments == {"failed": (0.0, 2.0)}


def run_reference(run_dir: Path, batching: str) -> Path:
    """8 requests at once on the tiny model, 4 at a time, with outputs of 2 to 16 tokens."""
    register_configs()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        config = compose_config([
            "engine=reference", "model=tiny", f"engine.batching={batching}",
            "engine.max_batch_size=4", "engine.max_num_seqs=4", "scenario=offline",
            "scenario.num_requests=8", "scenario.warmup_requests=0",
            "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=8",
            "scenario.output_tokens.dist=uniform", "scenario.output_tokens.min=2",
            "scenario.output_tokens.max=16", "telemetry.enabled=false", "hardware=cpu"])
    run_benchmark(config, run_dir, console=Console(quiet=True))
    hydra = run_dir / ".hydra"  # what a Hydra multirun job folder holds beside the run
    hydra.mkdir()
    (hydra / "overrides.yaml").write_text(f"- engine.batching={batching}\n")
    return run_dir


@pytest.fixture(scope="module")
def batching_sweep(tmp_path_factory) -> Path:
    sweep = tmp_path_factory.mktemp("batching-sweep")
    for batching in ("static", "continuous"):
        run_reference(sweep / f"engine.batching={batching}", batching)
    (sweep / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    return sweep


def step_sets(run_dir: Path) -> list[set[str]]:
    steps = [json.loads(x) for x in (run_dir / "steps.jsonl").read_text().splitlines()]
    return [set(s["request_ids"]) for s in steps if s["request_ids"]]


def test_reference_steps_name_their_requests_and_show_static_lockstep(batching_sweep):
    static = step_sets(batching_sweep / "engine.batching=static")
    continuous = step_sets(batching_sweep / "engine.batching=continuous")
    first, second = {"0", "1", "2", "3"}, {"4", "5", "6", "7"}
    # Static: every step computes members of one batch only; the second waits for the first.
    assert all(s <= first or s <= second for s in static)
    last_of_first = max(i for i, s in enumerate(static) if s & first)
    assert all(not (s & second) for s in static[:last_of_first + 1])
    # Continuous: a request of the second four joins steps while the first four still decode.
    assert any(s & first and s & second for s in continuous)
    # Every request took part in as many steps as it has tokens to compute: prefill + decodes.
    records = {r["id"]: r for r in map(json.loads, (batching_sweep / "engine.batching=continuous"
                                                    / "requests.jsonl").read_text().splitlines())}
    for request_id, r in records.items():
        assert sum(request_id in s for s in continuous) == r["output_tokens"]


def test_timeline_bars_carry_the_steps_each_request_was_in(batching_sweep):
    run = load_run_folder(batching_sweep / "engine.batching=static")
    bars, total = timeline_bars(run)
    assert total == 8 and len(bars) == 8
    by_id = {b.id: b for b in bars}
    for step in run.steps:
        for request_id in step["request_ids"]:
            assert (step["start_s"], step["duration_s"]) in by_id[request_id].steps
    # Static batching: the second batch's prefill starts after the first batch's last step.
    first_done = max(s + d for b in bars[:4] for s, d in b.steps)
    assert all(b.segments["prefill"][0] + b.segments["prefill"][1] >= first_done for b in bars[4:])
    assert len(request_timeline(run).axes) == 2  # bars, and the steps below them


@needs_chromium
def test_run_report_has_the_timeline_and_it_renders_in_chromium(browser, tmp_path):  # noqa: F811
    report = build_run_report(write_realistic_run(tmp_path / "run"))
    assert (tmp_path / "run" / "plots" / "request_timeline.png").stat().st_size > 20_000
    page = check_page(browser, report, tmp_path / "run.png", min_images=8)
    sources = json.loads(page.evaluate(
        "JSON.stringify(Array.from(document.images).map(i => i.getAttribute('src')))"))
    assert "plots/request_timeline.png" in sources


@needs_chromium
def test_batching_sweep_page_sets_static_and_continuous_timelines_side_by_side(
        browser, batching_sweep, tmp_path):  # noqa: F811
    report = build_sweep_report(batching_sweep)
    png = batching_sweep / "plots" / "sweep_timelines.png"
    assert png.stat().st_size > 20_000
    page = check_page(browser, report, tmp_path / "sweep.png", min_images=2)
    loaded = json.loads(page.evaluate(
        "JSON.stringify(Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0)"
        ".map(i => i.getAttribute('src')))"))
    assert "plots/sweep_timelines.png" in loaded
    # Each job's own report has its timeline too, with its steps.
    for batching in ("static", "continuous"):
        assert (batching_sweep / f"engine.batching={batching}" / "plots"
                / "request_timeline.png").is_file()


def test_sweep_without_batching_strategies_says_so_instead_of_a_timeline(tmp_path):
    from llmperf.report.plotting import NoData
    from llmperf.report.sweep_table import open_sweep
    from llmperf.report.timeline import batching_timelines

    sweep = write_realistic_sweep(tmp_path / "sweep")  # varies engine.batching: drawn
    assert len(batching_timelines(open_sweep(sweep)).axes) == 2
    for job in sweep.iterdir():  # the same jobs, one strategy only: nothing to compare
        overrides = job / ".hydra" / "overrides.yaml"
        if overrides.is_file():
            overrides.write_text(overrides.read_text().replace("continuous", "static"))
    with pytest.raises(NoData, match="do not vary engine.batching"):
        batching_timelines(open_sweep(sweep))


def test_capped_run_draws_each_requests_client_queue_from_its_record(tmp_path):
    """Constant 50 req/s into a cap of 2, each request holding its slot 0.1 s (5 tokens of
    20 ms): request k waits for request k-2's end, 0.06 floor(k/2) s in closed form."""
    register_configs()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        config = compose_config([
            "engine=synthetic", "engine.ttft_s=0.02", "engine.tpot_s=0.02",
            "scenario.arrival.process=constant", "scenario.arrival.rate_rps=50",
            "scenario.arrival.max_concurrency=2", "scenario.num_requests=8",
            "scenario.warmup_requests=0", "scenario.output_tokens.dist=fixed",
            "scenario.output_tokens.value=5", "telemetry.enabled=false", "hardware=cpu"])
    run_benchmark(config, tmp_path / "run", console=Console(quiet=True))
    run = load_run_folder(tmp_path / "run")
    bars, _ = timeline_bars(run)
    records = sorted(run.records, key=lambda r: r["arrival_s"])
    for k, (bar, record) in enumerate(zip(bars, records, strict=True)):
        if k < 2:
            assert "client_queue" not in bar.segments  # a slot was free
            continue
        assert bar.segments["client_queue"] == (record["arrival_s"], record["client_queue_s"])
        if k < 4:
            assert record["client_queue_s"] == pytest.approx(0.06 * (k // 2), abs=0.02)
    assert (tmp_path / "run" / "plots" / "request_timeline.png").stat().st_size > 10_000
