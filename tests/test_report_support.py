"""Synthetic run and sweep folders with realistic content, as the harness writes them.

A run is simulated, not made up: Poisson arrivals, lognormal lengths, a server that
serves up to `max_batch` requests at once with a TPOT that grows with the batch, so
latencies, steps and telemetry agree with each other the way a real run's do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

H200 = {"name": "h200", "kind": "gpu", "memory_bytes": 151397597184,
        "peak_mem_bw_bytes_per_s": 4.8e12,
        "peak_flops": {"fp32": 66.9e12, "bf16": 989.4e12, "fp16": 989.4e12},
        "measured_mem_bw_bytes_per_s": 4.1e12, "measured_flops": {"bf16": 720e12},
        "usd_per_hour": 3.5, "tdp_w": 700, "source": "datasheet"}
STATS = ("mean", "median", "p90", "p95", "p99", "std", "min", "max")


def stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return dict.fromkeys(STATS)
    a = np.asarray(values, dtype=float)
    p = np.percentile(a, [50, 90, 95, 99])
    return dict(zip(STATS, map(float, (a.mean(), *p, a.std(), a.min(), a.max())), strict=True))


def simulate_requests(num_requests: int = 60, rate_rps: float = 8.0, warmup: int = 3,
                      tpot_s: float = 0.012, max_batch: int = 8, fail_ids: tuple[int, ...] = (),
                      seed: int = 0) -> list[dict[str, Any]]:
    """requests.jsonl records of a simulated server, warmup first (arrivals from t=0)."""
    rng = np.random.default_rng(seed)
    n = warmup + num_requests
    arrivals = np.cumsum(rng.exponential(1 / rate_rps, n))
    prompts = np.clip(rng.lognormal(np.log(200), 0.5, n), 16, 1024).astype(int)
    outputs = np.clip(rng.lognormal(np.log(48), 0.5, n), 2, 256).astype(int)
    busy_until: list[float] = []
    records = []
    for i in range(n):
        busy_until = [t for t in busy_until if t > arrivals[i]]
        start = arrivals[i] if len(busy_until) < max_batch else sorted(busy_until)[-max_batch]
        step = tpot_s * (1 + 0.08 * len(busy_until))
        first = start + 0.02 + prompts[i] * 2e-5
        gaps = step * (1 + 0.15 * rng.standard_normal(outputs[i] - 1)).clip(0.3)
        tokens = list(first + np.concatenate([[0.0], np.cumsum(gaps)]))
        failed = (i - warmup) in fail_ids
        if failed:
            tokens = tokens[: len(tokens) // 3]
        busy_until.append(tokens[-1])
        records.append({
            "id": f"warmup-{i}" if i < warmup else f"req-{i - warmup}",
            "arrival_s": float(arrivals[i]), "dispatch_s": float(arrivals[i] + 2e-4),
            "first_token_s": float(tokens[0]), "end_s": float(tokens[-1]),
            "token_times_s": [float(t) for t in tokens], "input_tokens": int(prompts[i]),
            "output_tokens": len(tokens), "finish_reason": "error" if failed else "length",
            "error": "engine crashed" if failed else None, "warmup": i < warmup,
            "admitted_s": float(start)})
    return records


def summarize(records: list[dict[str, Any]], slo: dict[str, float | None],
              interrupted: bool = False) -> dict[str, Any]:
    measured = [r for r in records if not r["warmup"]]
    done = [r for r in measured if r["error"] is None]
    start, end = min(r["arrival_s"] for r in measured), max(r["end_s"] for r in measured)
    duration = end - start
    ttft = [r["first_token_s"] - r["arrival_s"] for r in done]
    e2e = [r["end_s"] - r["arrival_s"] for r in done]
    tpot = [(e - t) / (r["output_tokens"] - 1) for r, t, e in zip(done, ttft, e2e, strict=True)]
    good = sum(t <= slo["ttft_s"] and p <= slo["tpot_s"] for t, p in zip(ttft, tpot, strict=True))
    out_total = sum(r["output_tokens"] for r in done)
    in_total = sum(r["input_tokens"] for r in done)
    checks = [{"check": "warmup", "ok": True, "detail": "3 of 3 warmup requests completed"},
              {"check": "min_duration", "ok": duration >= 5, "detail":
               f"measured {duration:.2f} s; need >= 5.0 s"},
              {"check": "not_interrupted", "ok": not interrupted,
               "detail": "interrupted by SIGINT" if interrupted else "ran to the end"}]
    return {
        "num_requests": len(measured), "num_completed": len(done),
        "num_failed": len(measured) - len(done), "num_warmup": 3, "num_warmup_completed": 3,
        "window_start_s": start, "window_end_s": end, "duration_s": duration,
        "measure_start_s": start,
        "request_throughput_rps": len(done) / duration,
        "output_throughput_tps": out_total / duration,
        "total_throughput_tps": (in_total + out_total) / duration,
        "input_tokens_total": in_total, "output_tokens_total": out_total,
        "ttft_s": stats(ttft), "tpot_s": stats(tpot),
        "itl_s": stats([g for r in done for g in np.diff(r["token_times_s"])]),
        "e2e_s": stats(e2e),
        "queue_s": stats([r["admitted_s"] - r["arrival_s"] for r in done]),
        "dispatch_lag_s": stats([r["dispatch_s"] - r["arrival_s"] for r in measured]),
        "slo": slo, "num_slo_met": good, "goodput_rps": good / duration,
        "slo_attainment": good / len(measured),
        "valid": all(c["ok"] for c in checks), "validity": checks, "interrupted": interrupted,
    }


def steps_of(records: list[dict[str, Any]], kv_block_size: int = 16,
             num_kv_blocks: int = 600) -> list[dict]:
    """One decode step per 10 ms with the requests then in flight; a preemption whenever
    the KV blocks they need pass the cache's size."""
    end = max(r["end_s"] for r in records)
    steps = []
    for t in np.arange(0.0, end, 0.01):
        live = [r for r in records if r["first_token_s"] <= t < r["end_s"]]
        prefill = [r for r in records if r["arrival_s"] <= t < r["first_token_s"]]
        context = sum(r["input_tokens"] + int((t - r["first_token_s"]) / 0.012) for r in live)
        blocks = -(-context // kv_block_size)
        steps.append({
            "start_s": float(t), "duration_s": 0.0095,
            "kind": "mixed" if prefill and live else ("prefill" if prefill else "decode"),
            "num_seqs": len(live) + len(prefill),
            "num_prefill_tokens": sum(r["input_tokens"] for r in prefill[:1]),
            "num_decode_tokens": len(live), "padded_tokens": 0, "context_tokens": context,
            "kv_blocks_used": min(blocks, num_kv_blocks),
            "kv_blocks_free": max(num_kv_blocks - blocks, 0),
            "num_waiting": max(len(prefill) - 1, 0), "preemptions": int(blocks > num_kv_blocks),
            "prefix_cache_hit_tokens": 0})
    return steps


def telemetry_csv(end_s: float, interval_s: float = 0.1, gpu: bool = True) -> str:
    rng = np.random.default_rng(1)
    t = np.arange(0.0, end_s, interval_s)
    load = 0.5 + 0.5 * np.sin(np.linspace(0, 3, len(t))) ** 2
    columns: dict[str, np.ndarray] = {"timestamp_s": t}
    if gpu:
        columns |= {
            "mem_used_bytes": 40e9 + 30e9 * load, "mem_total_bytes": np.full(len(t), 143e9),
            "gpu_util_pct": 60 + 35 * load, "dram_bw_util_pct": 30 + 45 * load,
            "power_w": 250 + 400 * load + 10 * rng.standard_normal(len(t)),
            "sm_clock_mhz": 1980 - 200 * (load > 0.9), "temperature_c": 45 + 20 * load,
            "throttled": (load > 0.95).astype(int)}
    columns |= {"rss_bytes": 3.2e9 + 0.1e9 * load, "cpu_pct": 90 + 10 * load}
    header = ",".join(columns)
    rows = [",".join(f"{columns[c][i]:.6g}" for c in columns) for i in range(len(t))]
    return "\n".join([header, *rows]) + "\n"


CONFIG_YAML = """scenario:
  name: chat
  seed: 0
  num_requests: 60
  arrival:
    process: poisson
    rate_rps: 8.0
  slo:
    ttft_s: 0.25
    tpot_s: 0.02
engine:
  name: reference
  attention: sdpa
  batching: continuous
  kv_cache: paged
model:
  name: llama-3.2-1b
hardware:
  name: h200
"""


def roofline_and_cost(summary: dict[str, Any]) -> dict[str, Any]:
    """The roofline and cost keys of a decode-heavy run on an H200."""
    return {"roofline_source": "steps", "roofline_peak_source": "datasheet",
            "roofline_compute_dtype": "bf16",
            "achieved_bw_decode_bytes_per_s": 2.9e12, "achieved_flops_decode_per_s": 21e12,
            "achieved_bw_prefill_bytes_per_s": 1.1e12, "achieved_flops_prefill_per_s": 410e12,
            "mbu_decode": 2.9e12 / 4.8e12, "mfu_decode": 21e12 / 989.4e12,
            "mbu_prefill": 1.1e12 / 4.8e12, "mfu_prefill": 410e12 / 989.4e12,
            "roofline_output_tps": summary["output_throughput_tps"] / 0.42,
            "roofline_fraction": 0.42, "roofline_step_fraction": 0.55,
            "run_cost_usd": 3.5 * summary["duration_s"] / 3600,
            "usd_per_1m_tokens": 3.5 * summary["duration_s"] / 3600
            / (summary["input_tokens_total"] + summary["output_tokens_total"]) * 1e6,
            "usd_per_1m_output_tokens": 3.5 * summary["duration_s"] / 3600 * 0.7
            / summary["output_tokens_total"] * 1e6,
            "cost_split": "step_time", "cost_input_share": 0.3, "energy_j": 4200.0,
            "energy_per_output_token_j": 4200.0 / summary["output_tokens_total"],
            "telemetry_source": "nvml+torch_cuda+process", "telemetry_peak_power_w": 655.0,
            "telemetry_mean_dram_bw_util_pct": 52.0, "throttled": False,
            "predicted_ttft_s": summary["ttft_s"]["median"] * 0.8,
            "prediction_error_ttft": -0.2,
            "measured_decode_step_s": summary["tpot_s"]["median"] * 0.95,
            "predicted_decode_step_s": summary["tpot_s"]["median"] * 0.95 * 0.9,
            "prediction_error_decode_step": -0.1,
            "prediction_error_tpot": summary["tpot_s"]["median"] * 0.95 * 0.9 / summary["tpot_s"]["median"] - 1}


def write_realistic_run(folder: Path, *, interrupted: bool = False, steps: bool = True,
                        telemetry: bool = True, summary: bool = True, config_extra: str = "",
                        rate_rps: float = 8.0, max_batch: int = 8,
                        overrides: list[str] | None = None, fail_ids: tuple[int, ...] = (2,),
                        seed: int = 0) -> Path:
    """A run folder: requests.jsonl, summary.json, steps.jsonl, telemetry.csv, config.yaml,
    environment.json. `interrupted` stops it after a third of its requests."""
    folder.mkdir(parents=True, exist_ok=True)
    records = simulate_requests(rate_rps=rate_rps, max_batch=max_batch, fail_ids=fail_ids,
                                seed=seed)
    if interrupted:
        records = records[: len(records) // 3]
    slo = {"ttft_s": 0.25, "tpot_s": 0.02, "e2e_s": None}
    data = summarize(records, slo, interrupted)
    data = {"schema_version": 1,
            "engine": {"name": "reference", "config": {"batching": "continuous"}},
            "scenario": {"name": "chat", "arrival": {"rate_rps": rate_rps}},
            "model": {"name": "llama-3.2-1b"}, "hardware": H200, **data,
            **roofline_and_cost(data), "origin_perf_counter_s": 1234.5}
    (folder / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if summary:
        (folder / "summary.json").write_text(json.dumps(data, indent=2))
    end_s = max(r["end_s"] for r in records)
    if steps:
        rows = steps_of(records)
        (folder / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in rows))
    if telemetry:
        (folder / "telemetry.csv").write_text(telemetry_csv(end_s))
    (folder / "config.yaml").write_text(CONFIG_YAML + config_extra)
    (folder / "environment.json").write_text(json.dumps({
        "python": "3.11.7", "platform": "Linux-6.8-x86_64", "cpu_count": 2,
        "packages": {"torch": "2.13.0", "triton": "3.9.0"},
        "torch": {"version": "2.13.0", "cuda": "12.8", "devices": ["NVIDIA H200"]},
        "git": {"commit": "8c234bb", "dirty": False},
        "command_line": ["llmperf", "engine=reference", "model=llama-3.2-1b"]}, indent=2))
    if overrides is not None:
        (folder / ".hydra").mkdir(exist_ok=True)
        (folder / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return folder


# A 2x2 sweep: two strategies at two rates; static batching serves 2 at a time.
SWEEP_JOBS = {
    ("static", 4.0): 2,
    ("static", 8.0): 2,
    ("continuous", 4.0): 8,
    ("continuous", 8.0): 8,
}


def write_realistic_sweep(folder: Path) -> Path:
    """A Hydra multirun folder: one job folder per override_dirname, as Hydra names them."""
    for (batching, rate), max_batch in SWEEP_JOBS.items():
        overrides = [f"engine.batching={batching}", f"scenario.arrival.rate_rps={rate:g}"]
        write_realistic_run(folder / ",".join(overrides), rate_rps=rate, max_batch=max_batch,
                            overrides=overrides, steps=False, telemetry=False, fail_ids=())
    (folder / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    return folder
