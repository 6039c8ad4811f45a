"""Capacity planning from a model's shape, a precision and a hardware profile.

Memory model (per device, weights and KV cache sharded evenly over tp devices):
- usable memory = (1 - RUNTIME_RESERVE_FRACTION) x memory: the reserve holds
  the runtime (CUDA context, library workspaces) and the forward pass's
  activations, as vLLM's default gpu_memory_utilization=0.9 does;
- KV cache needs KV_OVERHEAD_FRACTION more than its tokens' bytes, for
  partly filled blocks and fragmentation;
- devices_needed = ceil((weights + KV x (1 + overhead)) / usable), with KV for
  `concurrency` sequences of `context_len` positions each.

Time model (llmperf.perf.roofline): a step takes max(bytes / (tp x bandwidth),
FLOPs / (tp x FLOP/s)) plus, for tp > 1, two ring all-reduces of the hidden
states per layer over the interconnect (bandwidth term only, not overlapped;
per-collective latency is not modelled). Decode steps are timed at the full
`context_len`, an upper bound on the mean step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from engines.reference.config import ModelConfig
from llmperf.hardware.profile import HardwareProfile
from llmperf.perf.precision import get_precision, weight_bytes_for
from llmperf.perf.roofline import (
    ModelWork,
    StepWork,
    decode_work,
    lower_bound,
    prefill_work,
)
from llmperf.perf.traffic import Workload

RUNTIME_RESERVE_FRACTION = 0.10
KV_OVERHEAD_FRACTION = 0.10
_LITTLE_ITERATIONS = 50


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

    To compare with a measured engine, pass what it reports: its `weight_bytes`,
    the dtype its matmuls run in and its KV cache's bytes per element; otherwise
    they follow from `precision`.
    """
    prec = get_precision(precision)
    dtype = compute_dtype or prec.compute_dtype
    work = ModelWork.of(
        model,
        weight_bytes or weight_bytes_for(model, prec),
        kv_bytes_per_element or prec.kv_bytes_per_element,
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


@dataclass
class DecodeRow:
    batch: int
    step_s: float
    tps: float
    tps_per_device: float
    bound: str
    usd_per_1m_output_tokens: float | None


@dataclass
class Plan:
    model: str
    precision: str
    hardware: str
    tp: int
    params: int
    weight_bytes: float
    kv_bytes_per_token: float
    kv_bytes_per_seq: float
    context_len: float
    concurrency: float
    usable_bytes_per_device: float
    runtime_reserve_fraction: float
    kv_overhead_fraction: float
    weights_fit_on_one_device: bool
    devices_for_weights: int
    devices_needed: int
    max_batch: int
    batch: int  # the operating batch: min(concurrency, max_batch)
    ttft_s_by_prompt: dict[int, float]
    decode: list[DecodeRow] = field(default_factory=list)
    tps_per_device: float | None = None
    usd_per_hour: float | None = None
    usd_per_1m_input_tokens: float | None = None
    usd_per_1m_output_tokens: float | None = None
    usd_per_1m_tokens: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def decode_tps_by_batch(self) -> dict[int, float]:
        return {row.batch: row.tps for row in self.decode}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["decode_tps_by_batch"] = self.decode_tps_by_batch
        return d


def valid_tp(model: ModelConfig) -> list[int]:
    """Tensor-parallel sizes that shard the KV heads evenly."""
    return [
        n for n in range(1, model.num_key_value_heads + 1) if model.num_key_value_heads % n == 0
    ]


def plan(
    model: ModelConfig,
    precision: str,
    profile: HardwareProfile,
    workload: Workload,
    tp: int | None = None,
) -> Plan:
    prec = get_precision(precision)
    if tp is not None and tp not in valid_tp(model):
        raise ValueError(
            f"tp={tp} does not divide the {model.num_key_value_heads} KV heads; valid: "
            + ", ".join(map(str, valid_tp(model)))
        )
    if not profile.memory_bytes:
        raise ValueError(f"hardware profile {profile.name!r} has no memory_bytes to plan with")
    notes: list[str] = []
    weights = weight_bytes_for(model, prec)
    work = ModelWork.of(model, weights, prec.kv_bytes_per_element)
    kv_per_seq = work.kv_bytes_per_token * workload.context_len
    usable = profile.memory_bytes * (1 - RUNTIME_RESERVE_FRACTION)
    devices_for_weights = math.ceil(weights / usable)

    def max_batch_at(n: int) -> int:
        return max(
            0, math.floor((n * usable - weights) / (kv_per_seq * (1 + KV_OVERHEAD_FRACTION)))
        )

    def decode_at(batch: int, n: int) -> StepTime:
        step = decode_work(work, batch, workload.context_len)
        return step_time(step, batch, model, profile, prec.compute_dtype, n)

    def prefill_at(prompt: float, n: int) -> StepTime:
        step = prefill_work(work, 1, prompt)
        return step_time(step, prompt, model, profile, prec.compute_dtype, n)

    concurrency = workload.concurrency
    if concurrency is None and workload.rate_rps is not None:
        n = tp or _smallest_tp(model, devices_for_weights) or valid_tp(model)[-1]
        concurrency = _little_concurrency(
            workload,
            max(1, max_batch_at(n)),
            lambda b: decode_at(b, n).seconds,
            prefill_at(workload.prompt_tokens, n).seconds,
        )
        notes.append(
            f"concurrency {concurrency:.1f} from rate {workload.rate_rps} req/s (Little's law at tp={n})"
        )
    concurrency = concurrency or 1.0
    kv_total = kv_per_seq * concurrency * (1 + KV_OVERHEAD_FRACTION)
    devices_needed = math.ceil((weights + kv_total) / usable)
    if tp is None:
        tp = _smallest_tp(model, devices_needed)
        if tp is None:
            tp = valid_tp(model)[-1]
            notes.append(
                f"needs {devices_needed} devices, more than tensor parallelism can shard "
                f"({model.num_key_value_heads} KV heads): add pipeline parallelism"
            )
    max_batch = max_batch_at(tp)
    if max_batch < concurrency:
        notes.append(
            f"tp={tp} holds {max_batch} sequences of {workload.context_len:.0f} tokens, "
            f"fewer than the {concurrency:g} wanted"
        )
    usd_per_s = profile.usd_per_hour * tp / 3600 if profile.usd_per_hour is not None else None
    rows = []
    for batch in batch_sizes(max_batch):
        t = decode_at(batch, tp)
        rows.append(
            DecodeRow(
                batch,
                t.seconds,
                batch / t.seconds,
                batch / t.seconds / tp,
                t.bound,
                usd_per_s * t.seconds / batch * 1e6 if usd_per_s is not None else None,
            )
        )
    prompts = sorted({int(workload.prompt_tokens), int(workload.prompt_tokens_max)})
    result = Plan(
        model=model.name,
        precision=prec.name,
        hardware=profile.name,
        tp=tp,
        params=model.num_params(),
        weight_bytes=weights,
        kv_bytes_per_token=work.kv_bytes_per_token,
        kv_bytes_per_seq=kv_per_seq,
        context_len=workload.context_len,
        concurrency=concurrency,
        usable_bytes_per_device=usable,
        runtime_reserve_fraction=RUNTIME_RESERVE_FRACTION,
        kv_overhead_fraction=KV_OVERHEAD_FRACTION,
        weights_fit_on_one_device=weights <= usable,
        devices_for_weights=devices_for_weights,
        devices_needed=devices_needed,
        max_batch=max_batch,
        batch=int(min(math.ceil(concurrency), max_batch)),
        ttft_s_by_prompt={p: prefill_at(p, tp).seconds for p in prompts},
        decode=rows,
        usd_per_hour=profile.usd_per_hour,
        notes=notes,
    )
    if result.batch >= 1:
        _price_operating_point(
            result,
            workload,
            decode_at(result.batch, tp).seconds,
            prefill_at(workload.prompt_tokens, tp).seconds,
            usd_per_s,
        )
    return result


def batch_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to max_batch, and max_batch itself."""
    sizes = [2**k for k in range(max_batch.bit_length()) if 2**k <= max_batch]
    if max_batch >= 1 and sizes[-1] != max_batch:
        sizes.append(max_batch)
    return sizes


def _price_operating_point(
    p: Plan, w: Workload, step_s: float, prefill_s: float, usd_per_s: float | None
) -> None:
    """Steady continuous batching at batch p.batch: a request holds the devices for its
    prefill and for 1/batch of each of its decode steps."""
    p.tps_per_device = p.batch / step_s / p.tp
    if usd_per_s is None:
        return
    request_s = prefill_s + w.output_tokens * step_s / p.batch
    p.usd_per_1m_input_tokens = usd_per_s * prefill_s / w.prompt_tokens * 1e6
    p.usd_per_1m_output_tokens = usd_per_s * step_s / p.batch * 1e6
    p.usd_per_1m_tokens = usd_per_s * request_s / (w.prompt_tokens + w.output_tokens) * 1e6


def _smallest_tp(model: ModelConfig, devices: int) -> int | None:
    return next((n for n in valid_tp(model) if n >= devices), None)


def _little_concurrency(w: Workload, cap: int, decode_s, prefill_s: float) -> float:
    """Sequences in flight at an arrival rate: B = rate x (TTFT + output x step(B))."""
    batch = 1.0
    for _ in range(_LITTLE_ITERATIONS):
        batch = w.rate_rps * (
            prefill_s + w.output_tokens * decode_s(max(1, min(cap, math.ceil(batch))))
        )
    return max(batch, 1.0)
