"""How long a step takes on `tp` devices, and the TTFT and decode step that follow.

A step takes max(bytes / (tp x bandwidth), FLOPs / (tp x FLOP/s)) (the
roofline's lower bound, llmperf.perf.roofline) plus, for tp > 1, two ring
all-reduces of the hidden states per layer over the interconnect (bandwidth
term only, not overlapped; per-collective latency is not modelled). Bytes are
all ranks' (llmperf.perf.footprint), so each device reads its own share.
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.reference.config import ModelConfig
from llmperf.hardware.profile import HardwareProfile
from llmperf.perf.footprint import device_of, footprint
from llmperf.perf.roofline import ModelWork, StepWork, decode_work, lower_bound, prefill_work


@dataclass(frozen=True)
class StepTime:
    seconds: float
    memory_s: float
    compute_s: float
    comm_s: float
    bound: str  # "memory", "compute" or "interconnect"


def step_time(
    step: StepWork,
    num_tokens: float,
    model: ModelConfig,
    profile: HardwareProfile,
    compute_dtype: str,
    tp: int,
    peak: str = "best",
) -> StepTime:
    """Lower bound of one step's time on tp devices (peak: best, datasheet or measured)."""
    mem_bw, flops = profile.mem_bw(peak), profile.flops(compute_dtype, peak)
    b = lower_bound(step, mem_bw * tp if mem_bw else None, flops * tp if flops else None)
    if b is None:
        raise ValueError(
            f"hardware profile {profile.name!r} has no {peak} bandwidth or {compute_dtype} FLOP/s"
        )
    comm_s = 0.0
    if tp > 1 and profile.interconnect_bytes_per_s:
        act_bytes = 4 if compute_dtype == "fp32" else 2
        per_device = 2 * (tp - 1) / tp * num_tokens * model.hidden_size * act_bytes
        comm_s = 2 * model.num_hidden_layers * per_device / profile.interconnect_bytes_per_s
    bound = "interconnect" if comm_s > b.seconds else b.bound
    # Sustained predictions add what a step costs beyond its bytes and FLOPs where the
    # probe measured it (a CPU): op launches, norms, short attention, per layer.
    overhead_s = 0.0
    if peak == "sustained" and profile.measured_layer_overhead_s:
        overhead_s = model.num_hidden_layers * profile.measured_layer_overhead_s
    return StepTime(b.seconds + comm_s + overhead_s, b.memory_s, b.compute_s, comm_s, bound)


@dataclass(frozen=True)
class LatencyPrediction:
    ttft_s: float  # one prefill step of batch_size prompts
    decode_step_s: float  # one decode step of batch_size sequences at context_len
    prefill_bound: str
    decode_bound: str


def predict_latency(
    model: ModelConfig,
    precision: str,
    profile: HardwareProfile,
    batch_size: int,
    prompt_len: int,
    context_len: int,
    *,
    tp: int = 1,
    weight_bytes: float | None = None,
    compute_dtype: str | None = None,
    kv_bytes_per_element: float | None = None,
    peak: str = "best",
) -> LatencyPrediction:
    """Roofline TTFT (batch_size prompts prefilled in one step) and decode step time.

    To compare with a measured engine, pass what it reports: its `weight_bytes`
    (all ranks'), the dtype its matmuls run in and its KV cache's bytes per element;
    otherwise they follow from the account of `precision` on the profile's device.
    """
    account = footprint(model, precision, device_of(profile.kind), tp)
    dtype = compute_dtype or account.compute_dtype
    work = ModelWork.of(
        model,
        weight_bytes or account.weight_bytes,
        kv_bytes_per_element or account.kv_bytes_per_element,
    )
    prefill = step_time(
        prefill_work(work, batch_size, prompt_len),
        batch_size * prompt_len,
        model,
        profile,
        dtype,
        tp,
        peak,
    )
    decode = step_time(
        decode_work(work, batch_size, context_len), batch_size, model, profile, dtype, tp, peak
    )
    return LatencyPrediction(prefill.seconds, decode.seconds, prefill.bound, decode.bound)
