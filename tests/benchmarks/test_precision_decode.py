"""Whole-engine decode at batch 1 per precision, side by side: int8 must not be slower than bf16.

    python -m pytest tests/benchmarks/test_precision_decode.py -m slow -s

CPU: qwen2.5-0.5b; CUDA: llama-3.1-8b. Engines alternate round by round and each
round keeps its fastest decode step, so a noisy machine slows every precision alike.
"""

from __future__ import annotations

import statistics

import pytest
import torch

from engines.reference import ReferenceEngine

ON_CUDA = torch.cuda.is_available()
PRESET = "llama-3.1-8b" if ON_CUDA else "qwen2.5-0.5b"


def fastest_decode_step_s(eng: ReferenceEngine) -> float:
    first = len(eng.step_stats())
    eng.generate([list(range(3, 67))], max_tokens=12, ignore_eos=True)
    return min(s.duration_s for s in eng.step_stats()[first:] if s.kind == "decode")


@pytest.mark.slow
def test_int8_decode_is_at_most_10_percent_slower_than_bf16():
    device = "cuda" if ON_CUDA else "cpu"
    engines = {
        p: ReferenceEngine(model=PRESET, precision=p, device=device, batching="sequential",
                           kv_cache="contiguous", max_num_seqs=1, max_model_len=128)
        for p in ("bf16", "int8")
    }
    steps = {p: [] for p in engines}
    for round_ in range(6):
        for p, eng in engines.items():
            step = fastest_decode_step_s(eng)
            if round_:  # the first round warms up
                steps[p].append(step)
    median = {p: statistics.median(s) for p, s in steps.items()}
    ratio = median["int8"] / median["bf16"]
    for p, eng in engines.items():
        print(f"\n{PRESET} {p}: decode step {median[p] * 1e3:.1f} ms, weights {eng.weight_bytes / 1e9:.2f} GB")
    print(f"int8 / bf16 decode step time = {ratio:.2f}")
    assert ratio <= 1.10
