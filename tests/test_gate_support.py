"""Synthetic run and sweep folders in the harness's summary.json schema (version 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LATENCY_KEYS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s", "dispatch_lag_s")


def latency(median_s: float) -> dict[str, float]:
    """A plausible latency object around a median: spread grows toward the tail."""
    return {"mean": median_s * 1.1, "median": median_s, "p90": median_s * 1.6,
            "p95": median_s * 1.8, "p99": median_s * 2.2, "std": median_s * 0.4,
            "min": median_s * 0.5, "max": median_s * 2.5}


def summary(output_throughput_tps: float = 100.0, ttft_p99_s: float = 0.5,
            batching: str = "continuous", **overrides: Any) -> dict[str, Any]:
    """A summary.json whose figures follow from the throughput: 200 requests of 64 tokens."""
    duration_s = 200 * 64 / output_throughput_tps
    data: dict[str, Any] = {
        "schema_version": 1,
        "engine": {"name": "reference", "batching": batching, "attention": "sdpa"},
        "scenario": {"name": "chat", "seed": 0, "num_requests": 200,
                     "arrival": {"process": "poisson", "rate_rps": 2.0}},
        "model": {"name": "tiny"},
        "hardware": {"name": "cpu", "kind": "cpu"},
        "valid": True,
        "validity": [{"check": "warmup_done", "ok": True, "detail": "5 warmup requests"}],
        "interrupted": False,
        "num_requests": 200, "num_completed": 200, "num_failed": 0,
        "duration_s": duration_s,
        "request_throughput_rps": 200 / duration_s,
        "output_throughput_tps": output_throughput_tps,
        "total_throughput_tps": output_throughput_tps * 3,
        "input_tokens_total": 200 * 128, "output_tokens_total": 200 * 64,
        "goodput_rps": 180 / duration_s, "slo_attainment": 0.9,
        "mbu_decode": 0.31, "mfu_prefill": 0.12, "roofline_fraction": 0.4,
        "usd_per_1m_tokens": None,
        "slo": {"ttft_s": 1.0, "tpot_s": 0.2, "e2e_s": None},
    }
    for key in LATENCY_KEYS:
        data[key] = latency(0.05)
    data["ttft_s"] = latency(ttft_p99_s / 2.2)
    data.update(overrides)
    return data


def step(kind: str, num_seqs: int, prefill: int, decode: int, padded: int = 0,
         preemptions: int = 0) -> dict[str, Any]:
    return {"start_s": 0.0, "duration_s": 0.01, "kind": kind, "num_seqs": num_seqs,
            "num_prefill_tokens": prefill, "num_decode_tokens": decode, "padded_tokens": padded,
            "context_tokens": 0, "kv_blocks_used": 0, "kv_blocks_free": 0, "num_waiting": 0,
            "preemptions": preemptions, "prefix_cache_hit_tokens": 0}


def write_run(folder: Path, data: dict[str, Any], steps: list[dict] | None = None,
              overrides: list[str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(data, indent=2))
    if steps is not None:
        (folder / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    if overrides is not None:
        (folder / ".hydra").mkdir(exist_ok=True)
        (folder / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return folder


def write_sweep(folder: Path, jobs: dict[str, dict[str, Any]],
                steps: dict[str, list[dict]] | None = None) -> Path:
    """One job folder per override_dirname (`a=1,b=2`), each with .hydra/overrides.yaml."""
    for dirname, data in jobs.items():
        write_run(folder / dirname, data, (steps or {}).get(dirname), dirname.split(","))
    return folder
