"""Capacity planning from a model's shape, a precision and a hardware profile.

Memory model (per device; the bytes are llmperf.perf.footprint's account):
- usable memory = (1 - RUNTIME_RESERVE_FRACTION) x memory: the reserve holds
  the runtime (CUDA context, library workspaces) and the forward pass's
  activations, as vLLM's default gpu_memory_utilization=0.9 does;
- KV cache needs KV_OVERHEAD_FRACTION more than its tokens' bytes, for
  partly filled blocks and fragmentation;
- devices_needed = ceil((weights + KV x (1 + overhead)) / usable), with KV for
  `concurrency` sequences of `context_len` positions each; at the chosen tp each
  device holds its rank's weights (a share of the sharded ones, all of the
  replicated norms) and 1/tp of the KV cache.

Time model: llmperf.perf.latency (the roofline bound on tp devices plus the
all-reduces). Decode steps are timed at the full `context_len`, an upper bound
on the mean step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from engines.reference.config import ModelConfig
from llmperf.hardware.profile import HardwareProfile
from llmperf.perf.footprint import Footprint, device_of, footprint
from llmperf.perf.latency import StepTime, step_time
from llmperf.perf.roofline import ModelWork, decode_work, prefill_work
from llmperf.perf.traffic import Traffic

RUNTIME_RESERVE_FRACTION = 0.10
KV_OVERHEAD_FRACTION = 0.10
_LITTLE_ITERATIONS = 50


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
    weight_bytes: float  # the model's weights, one copy
    weight_bytes_per_device: float  # one rank's at tp: its share and the replicated norms
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
    traffic: Traffic,
    tp: int | None = None,
) -> Plan:
    if tp is not None and tp not in valid_tp(model):
        raise ValueError(
            f"tp={tp} does not divide the {model.num_key_value_heads} KV heads; valid: "
            + ", ".join(map(str, valid_tp(model)))
        )
    if not profile.memory_bytes:
        raise ValueError(f"hardware profile {profile.name!r} has no memory_bytes to plan with")
    notes: list[str] = []
    device = device_of(profile.kind)
    accounts: dict[int, Footprint] = {}

    def account(n: int) -> Footprint:
        if n not in accounts:
            accounts[n] = footprint(model, precision, device, n)
        return accounts[n]

    one = account(1)
    weights = one.weight_bytes
    kv_per_seq = one.kv_bytes_per_token * traffic.context_len
    usable = profile.memory_bytes * (1 - RUNTIME_RESERVE_FRACTION)
    devices_for_weights = math.ceil(weights / usable)

    def max_batch_at(n: int) -> int:
        left = n * (usable - account(n).weight_bytes_per_rank)
        return max(0, math.floor(left / (kv_per_seq * (1 + KV_OVERHEAD_FRACTION))))

    def work_at(n: int) -> ModelWork:
        return ModelWork.of(model, account(n).weight_bytes, one.kv_bytes_per_element)

    def decode_at(batch: int, n: int) -> StepTime:
        step = decode_work(work_at(n), batch, traffic.context_len)
        return step_time(step, batch, model, profile, one.compute_dtype, n)

    def prefill_at(prompt: float, n: int) -> StepTime:
        step = prefill_work(work_at(n), 1, prompt)
        return step_time(step, prompt, model, profile, one.compute_dtype, n)

    concurrency = traffic.concurrency
    if concurrency is None and traffic.rate_rps is not None:
        n = tp or _smallest_tp(model, devices_for_weights) or valid_tp(model)[-1]
        concurrency = _little_concurrency(
            traffic,
            max(1, max_batch_at(n)),
            lambda b: decode_at(b, n).seconds,
            prefill_at(traffic.prompt_tokens, n).seconds,
        )
        notes.append(
            f"concurrency {concurrency:.1f} from rate {traffic.rate_rps} req/s (Little's law at tp={n})"
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
            f"tp={tp} holds {max_batch} sequences of {traffic.context_len:.0f} tokens, "
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
    prompts = sorted({int(traffic.prompt_tokens), int(traffic.prompt_tokens_max)})
    result = Plan(
        model=model.name,
        precision=one.precision,
        hardware=profile.name,
        tp=tp,
        params=model.num_params(),
        weight_bytes=weights,
        weight_bytes_per_device=account(tp).weight_bytes_per_rank,
        kv_bytes_per_token=one.kv_bytes_per_token,
        kv_bytes_per_seq=kv_per_seq,
        context_len=traffic.context_len,
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
            traffic,
            decode_at(result.batch, tp).seconds,
            prefill_at(traffic.prompt_tokens, tp).seconds,
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
    p: Plan, w: Traffic, step_s: float, prefill_s: float, usd_per_s: float | None
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


def _little_concurrency(w: Traffic, cap: int, decode_s, prefill_s: float) -> float:
    """Sequences in flight at an arrival rate: B = rate x (TTFT + output x step(B))."""
    batch = 1.0
    for _ in range(_LITTLE_ITERATIONS):
        batch = w.rate_rps * (
            prefill_s + w.output_tokens * decode_s(max(1, min(cap, math.ceil(batch))))
        )
    return max(batch, 1.0)
