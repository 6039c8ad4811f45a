"""Attention backends, one decode step and one prefill step over a paged cache.

CPU: eager vs sdpa at qwen2.5-0.5b's heads (14 query, 2 kv, head_dim 64); the
Triton kernels only run interpreted there, which says nothing about speed.
CUDA: eager, sdpa and triton at llama-3.1-8b's heads (32, 8, 128) and longer
contexts. Timed with `python -m pytest tests/benchmarks --benchmark-enable`.
"""

from __future__ import annotations

import pytest
import torch

from engines.reference.attention import get_backend
from engines.reference.kernels.reference import random_paged_batch

ON_CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_CUDA else "cpu")
DTYPE = torch.bfloat16 if ON_CUDA else torch.float32
HEADS = (32, 8, 128) if ON_CUDA else (14, 2, 64)  # (query heads, kv heads, head_dim)
BLOCK_SIZE = 16
CASES = {  # name -> (query_lens, seq_lens)
    "decode": ([1] * 64, [2048] * 64) if ON_CUDA else ([1] * 8, [512] * 8),
    "prefill": ([2048] * 4, [2048] * 4) if ON_CUDA else ([256] * 2, [256] * 2),
    "chunk_after_context": ([512] * 4, [2048] * 4) if ON_CUDA else ([64] * 2, [320] * 2),
}
NAMES = ["eager", "sdpa", "triton"] if ON_CUDA else ["eager", "sdpa"]


def backend_or_skip(name: str):
    try:
        return get_backend(name)
    except ModuleNotFoundError as err:
        pytest.skip(f"attention backend {name!r} is not in this tree: {err}")


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", NAMES)
def test_attention_step(benchmark, name, case):
    backend = backend_or_skip(name)
    query_lens, seq_lens = CASES[case]
    num_heads, num_kv_heads, head_dim = HEADS
    q, k_cache, v_cache, meta = random_paged_batch(
        query_lens, seq_lens, num_heads, num_kv_heads, head_dim, BLOCK_SIZE,
        dtype=DTYPE, device=DEVICE, unused_value=0.0,
    )  # fmt: skip
    scale = head_dim**-0.5

    def step():
        out = backend(q, k_cache, v_cache, meta, scale)
        if ON_CUDA:
            torch.cuda.synchronize()
        return out

    out = benchmark(step)
    benchmark.extra_info.update(
        device=DEVICE.type, dtype=str(DTYPE), num_seqs=len(seq_lens), tokens=sum(query_lens)
    )
    assert out.shape == q.shape and torch.isfinite(out).all()
