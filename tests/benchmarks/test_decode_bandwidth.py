"""Prefill and decode speed of the reference engine at batch 1, against the machine's read bandwidth.

Decode at batch 1 reads every weight once per token, so weight bytes x decode
tokens/s is the bandwidth it reached; the machine's measured read bandwidth (a
large-tensor reduction, as the hardware probe measures it) is the ceiling. Both
are measured side by side, round after round, in one process, so a noisy
machine slows both alike.

    python -m pytest tests/benchmarks/test_decode_bandwidth.py --benchmark-enable -s
    python -m pytest tests/benchmarks/test_decode_bandwidth.py -m slow -s   # the 70% check

On a GPU the presets are llama-3.2-1b and llama-3.1-8b in bf16.
"""

from __future__ import annotations

import statistics

import pytest
import torch

from engines.reference import ReferenceEngine
from llmperf.hardware.probe import default_read_bytes, measure_read_bw_bytes_per_s

ON_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if ON_CUDA else "cpu"
PRECISION = "bf16" if ON_CUDA else "fp32"
PRESETS = ["llama-3.2-1b", "llama-3.1-8b"] if ON_CUDA else ["tiny", "qwen2.5-0.5b"]
PROMPT_TOKENS = 128
DECODE_TOKENS = 16


def build(preset: str) -> ReferenceEngine:
    return ReferenceEngine(
        model=preset, precision=PRECISION, device=DEVICE, batching="sequential",
        kv_cache="contiguous", max_num_seqs=1, max_model_len=PROMPT_TOKENS + DECODE_TOKENS + 8,
    )


def one_request(eng: ReferenceEngine) -> tuple[float, float]:
    """(prefill step seconds, fastest decode step seconds) of one greedy request."""
    first = len(eng.step_stats())
    eng.generate([list(range(3, 3 + PROMPT_TOKENS))], max_tokens=DECODE_TOKENS, ignore_eos=True)
    steps = eng.step_stats()[first:]
    prefill = [s.duration_s for s in steps if s.kind == "prefill"]
    decode = [s.duration_s for s in steps if s.kind == "decode"]
    return prefill[0], min(decode)


def side_by_side(eng: ReferenceEngine, rounds: int = 5) -> dict[str, float]:
    """Decode step and read bandwidth measured in alternation: each round's best of both
    (the fastest of its decode steps, the fastest of three reductions), median over rounds."""
    one_request(eng)  # warm up
    read_bytes = default_read_bytes(DEVICE)
    steps, bandwidths = [], []
    for _ in range(rounds):
        bandwidths.append(measure_read_bw_bytes_per_s(DEVICE, read_bytes, repeats=3))
        steps.append(one_request(eng)[1])
    step_s, read_bw = statistics.median(steps), statistics.median(bandwidths)
    return {
        "decode_step_s": step_s,
        "decode_tps": 1.0 / step_s,
        "achieved_bw_bytes_per_s": eng.weight_bytes / step_s,
        "read_bw_bytes_per_s": read_bw,
        "fraction": eng.weight_bytes / step_s / read_bw,
    }


@pytest.fixture(scope="module", params=PRESETS)
def engine(request) -> ReferenceEngine:
    return build(request.param)


def test_prefill_tokens_per_s(benchmark, engine):
    one_request(engine)
    prefill_s = benchmark.pedantic(lambda: one_request(engine)[0], rounds=3, iterations=1)
    benchmark.extra_info.update(model=engine.model_name, prompt_tokens=PROMPT_TOKENS,
                                prefill_tps=PROMPT_TOKENS / prefill_s)
    assert prefill_s > 0


def test_decode_tokens_per_s_and_bandwidth(benchmark, engine):
    figures = benchmark.pedantic(lambda: side_by_side(engine, rounds=2), rounds=1, iterations=1)
    benchmark.extra_info.update(model=engine.model_name, weight_bytes=engine.weight_bytes, **figures)
    print(
        f"\n{engine.model_name}: decode {figures['decode_tps']:.1f} tok/s at batch 1, "
        f"{figures['achieved_bw_bytes_per_s'] / 1e9:.1f} GB/s achieved against "
        f"{figures['read_bw_bytes_per_s'] / 1e9:.1f} GB/s measured read bandwidth "
        f"({figures['fraction']:.0%})"
    )
    assert figures["achieved_bw_bytes_per_s"] > 0


@pytest.mark.slow
def test_decode_at_batch_1_reaches_70_percent_of_read_bandwidth():
    eng = build(PRESETS[-1])
    figures = side_by_side(eng, rounds=7)
    print(
        f"\n{PRESETS[-1]} {PRECISION}: {figures['achieved_bw_bytes_per_s'] / 1e9:.1f} GB/s of "
        f"{figures['read_bw_bytes_per_s'] / 1e9:.1f} GB/s = {figures['fraction']:.0%}"
    )
    assert figures["fraction"] >= 0.70
