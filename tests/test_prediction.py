"""Roofline predictions beside measurements, checked by hand."""

from __future__ import annotations

import pytest

from engines.base import StepStat
from engines.reference.presets import get_preset
from llmperf.hardware.profile import HardwareProfile
from llmperf.perf.prediction import prediction_summary


def step(kind, seqs, prefill, decode, context, seconds):
    return StepStat(0.0, seconds, kind, seqs, prefill, decode, context_tokens=context)


def test_decode_step_prediction_is_the_bandwidth_bound_by_hand():
    cfg = get_preset("llama-3.1-8b")
    profile = HardwareProfile(
        name="h200", kind="gpu", peak_mem_bw_bytes_per_s=4.8e12,
        peak_flops={"bf16": 989.4e12}, usd_per_hour=3.5,
    )
    weight_bytes = cfg.num_params() * 2
    kv_token = cfg.kv_bytes_per_token(2)
    info = {
        "precision": "bf16", "weight_bytes": weight_bytes, "compute_dtype": "bfloat16",
        "kv_bytes_per_token": kv_token, "tp": 1,
    }
    steps = [step("prefill", 4, 4 * 512, 0, 0, 0.030)] + [
        step("decode", 4, 0, 4, 4 * 600, t) for t in (0.0040, 0.0042, 0.0041)
    ]
    summary = {"ttft_s": {"median": 0.031}, "tpot_s": {"median": 0.0043}}
    out = prediction_summary(steps, cfg, info, profile, summary, tp=1, kv_bytes_per_element=2)
    # Batch 4 at 600 tokens of context: memory-bound; the weights once, the KV of 4 x 600
    # positions read, 4 new positions written.
    expected = (weight_bytes + kv_token * 4 * 601) / 4.8e12
    assert out["predicted_decode_step_s"] == pytest.approx(expected, rel=1e-3)
    assert out["measured_decode_step_s"] == pytest.approx(0.0041)
    assert out["prediction_error_decode_step"] == pytest.approx(expected / 0.0041 - 1, rel=1e-3)
    assert out["prediction_error_tpot"] == pytest.approx(expected / 0.0043 - 1, rel=1e-3)
    assert (out["prediction_batch"], out["prediction_prefill_batch"]) == (4, 4)
    assert out["prediction_prompt_len"] == 512 and out["prediction_context_len"] == 600
    # Prefill of 4 x 512 tokens: compute-bound at 2 FLOPs per weight per token and more.
    body = cfg.num_params(include_embeddings=False) - cfg.vocab_size * cfg.hidden_size
    assert out["predicted_ttft_s"] > 2 * body * 2048 / 989.4e12


def test_no_prediction_without_both_phases():
    cfg = get_preset("tiny")
    profile = HardwareProfile(name="cpu", kind="cpu", measured_mem_bw_bytes_per_s=2e10)
    info = {"precision": "fp32", "weight_bytes": 1, "compute_dtype": "float32", "kv_bytes_per_token": 4}
    decode_only = [step("decode", 1, 0, 1, 10, 0.01)]
    assert prediction_summary(decode_only, cfg, info, profile, {}, tp=1, kv_bytes_per_element=4) == {}
