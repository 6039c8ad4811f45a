"""The roofline's prediction of a run's latency, beside what the run measured.

For engines that report their steps: the run's typical prefill step (its batch
and prompt length) and decode step (its batch and context) go through the
capacity planner's time model (`llmperf.perf.latency.predict_latency`) with the run's
hardware profile at its sustained ceilings (on a CPU, the weight-streaming rate
the probe measured; elsewhere the datasheet), and come back as predicted TTFT and decode step time next to
the measured ones, with the relative error of each (predicted / measured - 1).
"""

from __future__ import annotations

from statistics import median
from typing import Any

from engines.base import StepStat
from engines.reference.config import ModelConfig
from llmperf.hardware.profile import HardwareProfile
from llmperf.perf.latency import predict_latency


def prediction_summary(
    steps: list[StepStat],
    model: ModelConfig,
    info: dict[str, Any],
    profile: HardwareProfile,
    summary: dict[str, Any],
    *,
    tp: int,
    kv_bytes_per_element: float,
) -> dict[str, Any]:
    """`profile` is one device's; `tp` devices share the work (1 where the ranks share a CPU)."""
    decode = [s for s in steps if s.kind == "decode" and s.num_seqs]
    prefill = [s for s in steps if s.kind == "prefill" and s.num_seqs]
    if not decode or not prefill or "precision" not in info:
        return {}
    batch = round(median(s.num_seqs for s in decode))
    context = median(s.context_tokens / s.num_seqs for s in decode)
    prompt_batch = round(median(s.num_seqs for s in prefill))
    prompt_len = median(s.num_prefill_tokens / s.num_seqs for s in prefill)
    engine = dict(
        tp=tp,
        weight_bytes=info["weight_bytes"],
        compute_dtype=info.get("matmul_dtype", info["compute_dtype"]),
        kv_bytes_per_element=kv_bytes_per_element,
        peak="sustained",
    )

    def predict(batch_size: int):
        return predict_latency(
            model, info["precision"], profile, batch_size, round(prompt_len), round(context), **engine
        )

    predicted_ttft_s = predict(prompt_batch).ttft_s
    predicted_step_s = predict(batch).decode_step_s
    measured_step = median(s.duration_s for s in decode)
    ttft = (summary.get("ttft_s") or {}).get("median")
    tpot = (summary.get("tpot_s") or {}).get("median")
    return {
        "predicted_ttft_s": predicted_ttft_s,
        "predicted_decode_step_s": predicted_step_s,
        "measured_decode_step_s": measured_step,
        "prediction_error_ttft": _error(predicted_ttft_s, ttft),
        "prediction_error_tpot": _error(predicted_step_s, tpot),
        "prediction_error_decode_step": _error(predicted_step_s, measured_step),
        "prediction_batch": batch,
        "prediction_prompt_len": prompt_len,
        "prediction_context_len": context,
        "prediction_prefill_batch": prompt_batch,
    }


def _error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or not measured:
        return None
    return predicted / measured - 1.0
