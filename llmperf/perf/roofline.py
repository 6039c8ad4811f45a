"""Roofline: the bytes and FLOPs each engine step had to move, against the hardware's ceilings.

Pure functions over a ModelConfig, the engine's stored `weight_bytes` (all
ranks'), the KV cache's bytes per element, a HardwareProfile and the engine's
StepStats. The per-model constants (bytes, FLOPs per token) are
llmperf.perf.footprint's account.

What a step must do (the model's work, not what a kernel happened to do):
- reads: every weight once (`weight_bytes`, the whole model as stored, the
  convention of MBU as usually quoted) plus every KV position its sequences
  attend (`context_tokens` x kv_bytes_per_token); writes: the new tokens' K and V.
- FLOPs: 2 x decoder matmul parameters per token, 2 x vocab x hidden for the
  LM head once per sequence (logits of its last position only), and attention
  4 x layers x q_size per (query, attended position) pair.
- padded slots (static batching) are not work: they add no FLOPs and no KV
  traffic, so padding shows up as lower MFU.

StepStat carries one `context_tokens` sum per step, so attention pairs are
exact for decode steps and for prefill steps of equal-length sequences, and an
estimate (sequences assumed equal within the step) otherwise.

A step's time lower bound is max(bytes / peak bandwidth, FLOPs / peak FLOP/s).
Phases split steps by their tokens: decode (no prompt tokens), prefill (no
decode tokens), mixed (both, chunked prefill). A phase's MBU is its steps'
total bytes / their total time / peak bandwidth; MFU likewise with FLOPs; its
`roofline_step_fraction_<phase>` is the sum of its steps' lower bounds / the sum
of their times: how far that kind of step is from its own limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engines.base import StepStat
from engines.reference.config import ModelConfig
from llmperf.hardware.profile import HardwareProfile
from llmperf.perf.footprint import ModelWork

PHASES = ("prefill", "decode", "mixed")
SUMMARY_KEYS = (
    *(f"{u}_{p}" for p in PHASES for u in ("mbu", "mfu")),
    "roofline_output_tps",
    "roofline_fraction",
    "roofline_step_fraction",
    *(f"roofline_step_fraction_{p}" for p in PHASES),
    *(f"roofline_bound_{p}_s" for p in PHASES),
)


@dataclass(frozen=True)
class StepWork:
    bytes_read: float
    bytes_written: float
    flops: float

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


@dataclass(frozen=True)
class Bound:
    """A step's time lower bound and what sets it."""

    seconds: float
    memory_s: float
    compute_s: float
    bound: str  # "memory" or "compute"


def attention_pairs(
    num_seqs: int, prefill_tokens: int, decode_tokens: int, context_tokens: int
) -> float:
    """(query, attended position) pairs of one step, sequences equal within each phase.

    Each sequence is taken to hold the same earlier context p; a decode query
    attends p + 1 positions, a prompt chunk of c tokens attends c*p + c(c+1)/2.
    """
    if num_seqs <= 0:
        return 0.0
    prefill_seqs = max(num_seqs - decode_tokens, 1)
    prior = max(0.0, (context_tokens - prefill_tokens - decode_tokens) / num_seqs)
    chunk = prefill_tokens / prefill_seqs
    return decode_tokens * (prior + 1) + prefill_tokens * prior + prefill_tokens * (chunk + 1) / 2


def work_of(
    work: ModelWork,
    num_seqs: float,
    new_tokens: float,
    context_tokens: float,
    pairs: float,
) -> StepWork:
    return StepWork(
        bytes_read=work.weight_bytes + context_tokens * work.kv_bytes_per_token,
        bytes_written=new_tokens * work.kv_bytes_per_token,
        flops=2.0 * work.body_matmul_params * new_tokens
        + 2.0 * work.lm_head_params * num_seqs
        + work.attention_flops_per_pair * pairs,
    )


def step_work(work: ModelWork, step: StepStat) -> StepWork:
    pairs = attention_pairs(
        step.num_seqs, step.num_prefill_tokens, step.num_decode_tokens, step.context_tokens
    )
    return work_of(work, step.num_seqs, step.num_tokens, step.context_tokens, pairs)


def decode_work(work: ModelWork, batch_size: float, context_len: float) -> StepWork:
    """One decode step of `batch_size` sequences, each attending `context_len` positions."""
    return work_of(work, batch_size, batch_size, batch_size * context_len, batch_size * context_len)


def prefill_work(work: ModelWork, batch_size: float, prompt_len: float) -> StepWork:
    """One prefill step of `batch_size` prompts of `prompt_len` tokens, causal."""
    tokens = batch_size * prompt_len
    return work_of(work, batch_size, tokens, tokens, batch_size * prompt_len * (prompt_len + 1) / 2)


def lower_bound(step: StepWork, mem_bw: float | None, flops: float | None) -> Bound | None:
    """max(bytes / bandwidth, FLOPs / FLOP/s); a ceiling left unknown bounds nothing."""
    if mem_bw is None and flops is None:
        return None
    memory_s = step.bytes / mem_bw if mem_bw else 0.0
    compute_s = step.flops / flops if flops else 0.0
    bound = "memory" if memory_s >= compute_s else "compute"
    return Bound(max(memory_s, compute_s), memory_s, compute_s, bound)


def phase_of(step: StepStat) -> str:
    if step.num_prefill_tokens == 0:
        return "decode"
    return "prefill" if step.num_decode_tokens == 0 else "mixed"


def roofline_summary(
    steps: Sequence[StepStat],
    model: ModelConfig,
    weight_bytes: float,
    kv_bytes_per_element: float,
    profile: HardwareProfile,
    compute_dtype: str,
    *,
    output_tokens: int,
    duration_s: float,
) -> dict[str, float | str | None]:
    """The summary.json roofline keys from the steps of the measured window.

    roofline_output_tps = output_tokens / the sum of every step's lower bound
    (the output rate the hardware allows at the batch sizes and contexts the
    run had); roofline_fraction = achieved output tokens/s (output_tokens /
    duration_s) / that ceiling; roofline_step_fraction = sum of lower bounds /
    sum of step times (how close the busy steps came, idle time excluded).
    Keys without suffix use the datasheet peak (the measured one where no
    datasheet exists); `_measured` keys use the probe's, when there is one.
    """
    out: dict[str, float | str | None] = {
        "roofline_source": "steps" if steps else None,
        "roofline_peak_source": profile.peak_source(),
        "roofline_compute_dtype": compute_dtype,
    }
    model_work = ModelWork.of(model, weight_bytes, kv_bytes_per_element)
    works = [step_work(model_work, step) for step in steps]
    achieved: dict[str, tuple[float | None, float | None]] = {}  # phase: (bytes/s, FLOP/s)
    for phase in PHASES:
        mine = [(s, w) for s, w in zip(steps, works, strict=True) if phase_of(s) == phase]
        seconds = sum(s.duration_s for s, _ in mine)
        bytes_per_s = _ratio(sum(w.bytes for _, w in mine), seconds)
        flops_per_s = _ratio(sum(w.flops for _, w in mine), seconds)
        achieved[phase] = bytes_per_s, flops_per_s
        out[f"achieved_bw_{phase}_bytes_per_s"] = bytes_per_s
        out[f"achieved_flops_{phase}_per_s"] = flops_per_s
        out[f"step_count_{phase}"] = len(mine)
        out[f"step_time_{phase}_s"] = seconds
    busy_s = sum(s.duration_s for s in steps)
    peaks = [("best", "")] + ([("measured", "_measured")] if profile.has_measured() else [])
    for peak, suffix in peaks:
        mem_bw, flops = profile.mem_bw(peak), profile.flops(compute_dtype, peak)
        figures: dict[str, float | None] = {}
        for phase, (achieved_bw, achieved_flops) in achieved.items():
            figures[f"mbu_{phase}"] = _ratio(achieved_bw, mem_bw)
            figures[f"mfu_{phase}"] = _ratio(achieved_flops, flops)
        bounds = [lower_bound(w, mem_bw, flops) for w in works]
        bound_s = sum(b.seconds for b in bounds) if works and None not in bounds else None
        for phase in PHASES:
            mine = [(s, b) for s, b in zip(steps, bounds, strict=True) if phase_of(s) == phase]
            phase_bound_s = sum(b.seconds for _, b in mine) if mine and bound_s is not None else None
            figures[f"roofline_bound_{phase}_s"] = phase_bound_s
            figures[f"roofline_step_fraction_{phase}"] = _ratio(phase_bound_s, sum(s.duration_s for s, _ in mine))
        ceiling = _ratio(output_tokens, bound_s)
        figures["roofline_output_tps"] = ceiling
        figures["roofline_fraction"] = _ratio(_ratio(output_tokens, duration_s), ceiling)
        figures["roofline_step_fraction"] = _ratio(bound_s, busy_s)
        out.update({f"{k}{suffix}": v for k, v in figures.items()})
    return out


def estimate_summary(
    model: ModelConfig,
    weight_bytes: float,
    kv_bytes_per_element: float,
    profile: HardwareProfile,
    compute_dtype: str,
    *,
    output_tokens: int,
    input_tokens: int,
    num_requests: int,
    duration_s: float,
    tpot_s_mean: float | None,
) -> dict[str, float | str | None]:
    """Run-level estimate for engines without step stats (HTTP engines): decode only.

    The mean decode batch is output tokens/s x mean TPOT (Little's law: tokens
    per second per sequence is 1/TPOT); each sequence attends its mean prompt
    plus half its mean output. One decode step of that batch takes the mean
    TPOT. Prefill keys stay null: TTFT mixes queueing with compute.
    """
    out: dict[str, float | str | None] = dict.fromkeys(SUMMARY_KEYS)
    out.update(
        roofline_source=None,
        roofline_peak_source=profile.peak_source(),
        roofline_compute_dtype=compute_dtype,
    )
    if not (tpot_s_mean and num_requests and duration_s and output_tokens):
        return out
    output_tps = output_tokens / duration_s
    batch = max(1.0, output_tps * tpot_s_mean)
    context = input_tokens / num_requests + output_tokens / num_requests / 2
    step = decode_work(ModelWork.of(model, weight_bytes, kv_bytes_per_element), batch, context)
    out["roofline_source"] = "estimate"
    peaks = [("best", "")] + ([("measured", "_measured")] if profile.has_measured() else [])
    for peak, suffix in peaks:
        mem_bw, flops = profile.mem_bw(peak), profile.flops(compute_dtype, peak)
        b = lower_bound(step, mem_bw, flops)
        ceiling = _ratio(batch, b.seconds if b else None)
        out[f"mbu_decode{suffix}"] = _ratio(step.bytes / tpot_s_mean, mem_bw)
        out[f"mfu_decode{suffix}"] = _ratio(step.flops / tpot_s_mean, flops)
        out[f"roofline_output_tps{suffix}"] = ceiling
        out[f"roofline_fraction{suffix}"] = _ratio(output_tps, ceiling)
        out[f"roofline_step_fraction{suffix}"] = _ratio(b.seconds if b else None, tpot_s_mean)
        out[f"roofline_step_fraction_decode{suffix}"] = out[f"roofline_step_fraction{suffix}"]
    return out


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den or math.isnan(den):
        return None
    return num / den
