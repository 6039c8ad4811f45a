"""A real run on CPU: telemetry rows, roofline and cost figures recomputed from the run's own files."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from types import SimpleNamespace

import pytest
from rich.console import Console

from engines.base import EngineCapabilities, StepStat
from engines.reference.config import ModelConfig
from engines.reference.presets import get_preset
from llmperf.hardware.profile import HardwareProfile
from llmperf.measure.loadgen import LoadResult
from llmperf.run.runner import STAGES, Run, add_hardware_figures, drive_load, run_benchmark
from llmperf.telemetry import Sample, summarize


def compose_config(overrides):
    from hydra import compose, initialize_config_module

    from llmperf.run.config import load_config, register_configs

    register_configs()
    with initialize_config_module(config_module="scenarios", version_base="1.3"):
        return load_config(compose("config", overrides=overrides))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    overrides = [
        "scenario=offline",
        "scenario.num_requests=12",
        "scenario.warmup_requests=2",
        "scenario.prompt_tokens.dist=fixed",
        "scenario.prompt_tokens.value=64",
        "scenario.output_tokens.dist=fixed",
        "scenario.output_tokens.value=32",
        "engine.batching=continuous",
        "telemetry.interval_s=0.05",
        "hardware=cpu",
        "hardware.usd_per_hour=0.36",
    ]
    config = compose_config(overrides)
    path = tmp_path_factory.mktemp("run")
    run_benchmark(config, path, argv=overrides, console=Console(file=io.StringIO()))
    return path


def test_telemetry_is_on_the_records_clock_once_the_load_ends(tmp_path):
    config = compose_config(["engine=synthetic", "scenario.num_requests=4", "telemetry.interval_s=0.05"])
    run = Run(config, tmp_path, console=Console(file=io.StringIO()))
    for stage in STAGES[: STAGES.index(drive_load) + 1]:
        stage(run)
    assert run.collector.t0 == run.load.origin_perf_counter_s
    # Sampling starts before the load does, so the first sample is at or before time 0.
    assert run.collector.samples[0].timestamp_s <= 0.0 < run.collector.samples[-1].timestamp_s


def load(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    return summary, steps


def test_telemetry_has_a_row_per_interval_with_rss(run_dir):
    rows = list(csv.DictReader((run_dir / "telemetry.csv").open()))
    times = [float(r["timestamp_s"]) for r in rows]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(rows) >= 3
    assert sorted(gaps)[len(gaps) // 2] == pytest.approx(0.05, abs=0.02)
    assert all(float(r["rss_bytes"]) > 50e6 for r in rows)
    summary, _ = load(run_dir)
    # The summary's figures cover the measured window (after warmup) only.
    start, end = summary["measure_start_s"], summary["window_end_s"]
    inside = [float(r["rss_bytes"]) for r, t in zip(rows, times, strict=True) if start <= t <= end]
    assert max(inside) <= summary["telemetry_peak_rss_bytes"] <= max(float(r["rss_bytes"]) for r in rows)


def test_mbu_and_mfu_recomputed_from_steps(run_dir):
    summary, steps = load(run_dir)
    info, hw = summary["engine"], summary["hardware"]
    cfg = ModelConfig(**info["model_config"])
    measured = [s for s in steps if s["start_s"] >= summary["measure_start_s"]]
    kv_token = info["kv_bytes_per_token"]

    decode = [s for s in measured if s["kind"] == "decode"]
    # Each decode step reads every weight once and the KV of every position attended, and writes new K/V.
    read = sum(info["weight_bytes"] + kv_token * (s["context_tokens"] + s["num_decode_tokens"]) for s in decode)
    mbu = read / sum(s["duration_s"] for s in decode) / hw["measured_mem_bw_bytes_per_s"]
    assert summary["mbu_decode"] == pytest.approx(mbu, rel=0.02)

    prefill = [s for s in measured if s["kind"] == "prefill"]
    L, q, kv, h = cfg.num_hidden_layers, cfg.q_size, cfg.kv_size, cfg.hidden_size
    matmul = 2 * L * (h * (q + 2 * kv) + q * h + 3 * h * cfg.intermediate_size)  # per token
    flops = 0.0
    for s in prefill:
        n = s["num_prefill_tokens"]
        # the LM head runs once per sequence (its last prompt token)
        flops += matmul * n + 2 * cfg.vocab_size * h * s["num_seqs"]
        # causal attention: each query attends the positions up to itself (prompts of 64 from scratch)
        per_seq = n // s["num_seqs"]
        flops += 4 * L * q * s["num_seqs"] * per_seq * (per_seq + 1) / 2
    mfu = flops / sum(s["duration_s"] for s in prefill) / hw["measured_flops"]["fp32"]
    assert summary["mfu_prefill"] == pytest.approx(mfu, rel=0.02)
    assert 0 < summary["mbu_decode"] and 0 < summary["mfu_prefill"]
    assert summary["roofline_fraction"] == pytest.approx(
        summary["output_throughput_tps"] / summary["roofline_output_tps"]
    )


def test_cost_keys_recomputed(run_dir):
    summary, steps = load(run_dir)
    run_usd = 0.36 * summary["duration_s"] / 3600
    total = summary["input_tokens_total"] + summary["output_tokens_total"]
    assert summary["hardware"]["usd_per_hour"] == 0.36
    assert summary["usd_per_1m_tokens"] == pytest.approx(run_usd / total * 1e6)
    measured = [s for s in steps if s["start_s"] >= summary["measure_start_s"]]
    busy = sum(s["duration_s"] for s in measured)
    prompt = sum(s["duration_s"] * s["num_prefill_tokens"] / (s["num_prefill_tokens"] + s["num_decode_tokens"]) for s in measured)
    share = prompt / busy
    assert summary["usd_per_1m_input_tokens"] == pytest.approx(run_usd * share / summary["input_tokens_total"] * 1e6)
    assert summary["usd_per_1m_output_tokens"] == pytest.approx(run_usd * (1 - share) / summary["output_tokens_total"] * 1e6)
    assert summary["energy_j"] is None and summary["energy_per_output_token_j"] is None


H200 = HardwareProfile(
    name="h200", kind="gpu", peak_mem_bw_bytes_per_s=4.8e12,
    peak_flops={"bf16": 989.4e12}, usd_per_hour=3.5,
)
CPU = HardwareProfile(
    name="cpu", kind="cpu", measured_mem_bw_bytes_per_s=2e10,
    measured_flops={"bf16": 1e12}, usd_per_hour=0.36,
)
LLAMA = get_preset("llama-3.1-8b")
WEIGHT_BYTES = LLAMA.num_params() * 2
KV_TOKEN = LLAMA.kv_bytes_per_token(2)


def figures_of_a_fake_run(profile: HardwareProfile, tp: int) -> dict:
    """add_hardware_figures over one prefill of 4 x 512 tokens and 3 decode steps of 4 at 600."""
    steps = [StepStat(100.0, 0.030, "prefill", 4, 4 * 512, 0, context_tokens=0)] + [
        StepStat(100.1 + i, t, "decode", 4, 0, 4, context_tokens=4 * 600)
        for i, t in enumerate((0.0040, 0.0042, 0.0041))
    ]
    info = {
        "model_config": asdict(LLAMA), "precision": "bf16", "weight_bytes": WEIGHT_BYTES,
        "compute_dtype": "bfloat16", "kv_bytes_per_token": KV_TOKEN, "tp": tp,
    }
    summary = {
        "engine": info, "duration_s": 2.0, "input_tokens_total": 2048, "output_tokens_total": 16,
        "num_completed": 4, "ttft_s": {"median": 0.031}, "tpot_s": {"median": 0.0043},
    }
    load = LoadResult(100.0, 0.0, 0.0, 2.0, 0, 4, False)
    engine = SimpleNamespace(capabilities=EngineCapabilities(step_stats=True), step_stats=lambda: steps)
    run = SimpleNamespace(engine=engine, load=load, profile=profile, collector=None, summary=summary)
    add_hardware_figures(run)
    return run.summary


def test_tp2_on_gpus_pays_for_two_devices_and_predicts_with_both():
    one, two = figures_of_a_fake_run(H200, tp=1), figures_of_a_fake_run(H200, tp=2)
    assert one["run_cost_usd"] == pytest.approx(3.5 * 2.0 / 3600)
    assert two["run_cost_usd"] == pytest.approx(2 * 3.5 * 2.0 / 3600)
    assert two["usd_per_1m_tokens"] == pytest.approx(2 * 3.5 * 2.0 / 3600 / 2064 * 1e6)
    # The decode step reads the weights and 4 x 601 positions of KV at twice the bandwidth.
    decode_bytes = WEIGHT_BYTES + KV_TOKEN * 4 * 601
    assert one["predicted_decode_step_s"] == pytest.approx(decode_bytes / 4.8e12, rel=1e-3)
    assert two["predicted_decode_step_s"] == pytest.approx(decode_bytes / 9.6e12, rel=1e-3)
    assert two["mbu_decode"] == pytest.approx(one["mbu_decode"] / 2)


def test_tp2_on_one_cpu_shares_its_bandwidth_and_price():
    one, two = figures_of_a_fake_run(CPU, tp=1), figures_of_a_fake_run(CPU, tp=2)
    assert two["run_cost_usd"] == one["run_cost_usd"] == pytest.approx(0.36 * 2.0 / 3600)
    assert two["predicted_decode_step_s"] == one["predicted_decode_step_s"]
    assert two["predicted_ttft_s"] == one["predicted_ttft_s"]
    assert two["mbu_decode"] == one["mbu_decode"]
    decode_bytes = WEIGHT_BYTES + KV_TOKEN * 4 * 601
    assert two["predicted_decode_step_s"] >= decode_bytes / 2e10


def test_energy_and_cost_cover_the_same_measured_window():
    """Defect i: energy was taken over the samples inside measure start..load end, cost
    over duration_s. Both now cover window_start_s..window_end_s."""
    samples = [Sample(float(t), {"power_w": 200.0}) for t in range(-1, 11)]
    collector = SimpleNamespace(summarize=lambda start, end: summarize(samples, start, end))
    summary = {
        "engine": {}, "window_start_s": 0.25, "window_end_s": 2.25, "duration_s": 2.0,
        "input_tokens_total": 100, "output_tokens_total": 50,
    }
    load = LoadResult(100.0, 0.0, 0.0, 3.0, 0, 1, False)  # the load ended at 3 s
    run = SimpleNamespace(engine=SimpleNamespace(capabilities=EngineCapabilities()), load=load, profile=CPU, collector=collector,
                          summary=summary, records=[])
    add_hardware_figures(run)
    assert summary["run_cost_usd"] == pytest.approx(0.36 * 2.0 / 3600)
    assert summary["energy_j"] == pytest.approx(200.0 * 2.0)
    assert summary["energy_per_output_token_j"] == pytest.approx(400.0 / 50)


def test_a_run_without_step_stats_splits_its_cost_by_measured_request_time(tmp_path):
    """Defect c: engines without steps (HTTP, synthetic) split by TTFT against the rest."""
    config = compose_config([
        "engine=synthetic", "engine.ttft_s=0.05", "engine.tpot_s=0.005",
        "scenario.num_requests=6", "scenario.warmup_requests=1", "hardware=cpu",
        "hardware.usd_per_hour=0.36", "telemetry.enabled=false", "report.enabled=false",
    ])
    run_benchmark(config, tmp_path, console=Console(file=io.StringIO()))
    summary = json.loads((tmp_path / "summary.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    done = [r for r in records if not r["warmup"] and r["finish_reason"] in ("length", "stop")]
    assert len(done) == summary["num_completed"] == 6
    prefill_s = sum(r["first_token_s"] - r["arrival_s"] for r in done)
    total_s = sum(r["end_s"] - r["arrival_s"] for r in done)
    assert summary["cost_split"] == "request_time"
    assert summary["cost_input_share"] == pytest.approx(prefill_s / total_s)
    run_usd = 0.36 * summary["duration_s"] / 3600
    assert summary["usd_per_1m_input_tokens"] == pytest.approx(
        run_usd * prefill_s / total_s / summary["input_tokens_total"] * 1e6
    )
