"""The reference engine's decode-step targets, each a ratio of step times measured side by side.

    python -m pytest tests/benchmarks/test_decode_speed.py -m slow -s

Steps come from `engines.reference.decode_probe`: `batch` sequences of CONTEXT cached
positions in the paged KV cache, one token each, forward and greedy sampling. The
engines (or batches) being compared alternate round by round, each round keeps its
median step, and the ratio is of the medians over rounds, so a busy machine slows
both sides alike. On CPU one thread (`torch.set_num_threads(1)`): two-thread oneDNN
steps swing by several times when another process takes a core. On CPU the engine runs its
fast CPU path, `attention=cpu` (the decode kernel reading the paged cache in place, no
padding) and `fused_ops=true`; `LLMPERF_DECODE_SPEED_SDPA=1` measures sdpa and torch's ops
instead, as before them.
"""

from __future__ import annotations

import os
import statistics

import pytest
import torch

from engines.reference import ReferenceEngine
from engines.reference.decode_probe import decode_batch, release, step_times_s

ON_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if ON_CUDA else "cpu"
PRESET = "llama-3.1-8b" if ON_CUDA else "qwen2.5-0.5b"
CONTEXT = 160
ROUNDS = 4
CPU_FAST = {} if ON_CUDA or os.environ.get("LLMPERF_DECODE_SPEED_SDPA") == "1" else dict(attention="cpu", fused_ops=True)


@pytest.fixture(autouse=True)
def one_thread_on_cpu():
    if ON_CUDA:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build(**options) -> ReferenceEngine:
    # Room for every case at once: side_by_side holds a batch-8 and a batch-32 step together.
    return ReferenceEngine(model=PRESET, device=DEVICE, max_num_seqs=48, max_model_len=CONTEXT + 32,
                           **{**CPU_FAST, **options})


def side_by_side(cases: dict[str, tuple[ReferenceEngine, int]], rounds: int = ROUNDS) -> dict[str, float]:
    """Median decode step seconds of each (engine, batch) case, the cases alternating."""
    steps = {name: decode_batch(eng, batch, CONTEXT) for name, (eng, batch) in cases.items()}
    times: dict[str, list[float]] = {name: [] for name in cases}
    try:
        for round_ in range(rounds + 1):
            for name, (eng, _) in cases.items():
                median_s = statistics.median(step_times_s(eng, steps[name], 3))
                if round_:  # the first round warms up
                    times[name].append(median_s)
    finally:
        for name, (eng, _) in cases.items():
            release(eng, steps[name])
    return {name: statistics.median(t) for name, t in times.items()}


def report(title: str, medians: dict[str, float], ratio: float) -> None:
    cells = ", ".join(f"{name} {s * 1e3:.1f} ms" for name, s in medians.items())
    print(f"\n{PRESET} {title}: {cells}; ratio {ratio:.2f}")


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_paged_decode_at_batch_32_takes_at_most_1_5x_batch_8(precision):
    eng = build(precision=precision)
    medians = side_by_side({"batch 8": (eng, 8), "batch 32": (eng, 32)})
    ratio = medians["batch 32"] / medians["batch 8"]
    report(f"{precision} decode step", medians, ratio)
    assert ratio <= 1.5


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 8])
def test_bf16_decode_step_is_faster_than_fp32(batch):
    medians = side_by_side({"fp32": (build(precision="fp32"), batch), "bf16": (build(precision="bf16"), batch)})
    ratio = medians["bf16"] / medians["fp32"]
    report(f"batch {batch} bf16 / fp32", medians, ratio)
    assert ratio < 1.0


@pytest.mark.slow
def test_int8_decode_at_batch_1_is_at_least_1_3x_bf16():
    medians = side_by_side({"bf16": (build(precision="bf16"), 1), "int8": (build(precision="int8"), 1)})
    speedup = medians["bf16"] / medians["int8"]
    report("batch 1 bf16 / int8", medians, speedup)
    assert speedup >= 1.3


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 8, 32])
def test_compiled_decode_step_against_eager(batch):
    """engine.compile=true: the step-time ratio, side by side (no target: the figure is the point)."""
    # fused_ops off on both sides: inductor cannot trace the C++ ops (it fuses the same steps itself).
    eager, compiled = build(precision="bf16", fused_ops=False), build(precision="bf16", compile=True, fused_ops=False)
    medians = side_by_side({"eager": (eager, batch), "compiled": (compiled, batch)})
    ratio = medians["compiled"] / medians["eager"]
    report(f"batch {batch} compiled / eager (compile took {compiled.compile_s:.1f} s)", medians, ratio)
    assert ratio > 0
