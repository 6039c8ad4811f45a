"""`attention=cpu`'s causal prefill (`torch.ops.llmperf.causal_prefill`): fresh prompts attending
to the step's own K and V, against eager attention (matmuls spelled out) and against CPU SDPA,
whose arithmetic it follows (fp32 scores and softmax, probabilities rounded to the model's
dtype); which steps the backend sends to it; and its portable build without AVX-512."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engines.reference.attention import get_backend
from engines.reference.kernels import cpu_ops
from tests.test_step_paths import step_with_new_kv

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = {torch.float32: 4e-6, torch.bfloat16: 2e-2, torch.float16: 2e-3}
LENGTHS = [7, 128, 1, 33, 16, 17, 6, 250]  # around the kernel's 6-row and 16-key blocks


def fresh_prompts(lengths, num_heads, num_kv_heads, head_dim, dtype, seed=0):
    """q, k, v as the model hands them over: [tokens, heads, head_dim] views of one qkv buffer."""
    tokens = sum(lengths)
    qkv = torch.randn(tokens, (num_heads + 2 * num_kv_heads) * head_dim, generator=torch.Generator().manual_seed(seed))
    qkv = qkv.to(dtype)
    q_end, k_end = num_heads * head_dim, (num_heads + num_kv_heads) * head_dim
    q = qkv[:, :q_end].view(tokens, num_heads, head_dim)
    k = qkv[:, q_end:k_end].view(tokens, num_kv_heads, head_dim)
    v = qkv[:, k_end:].view(tokens, num_kv_heads, head_dim)
    starts = torch.tensor([0, *lengths[:-1]]).cumsum(0)
    return q, k, v, starts, torch.tensor(lengths)


def eager(q, k, v, lengths, scale):
    """Each prompt on its own, in fp32: K/V repeated per query head, a masked softmax, two matmuls."""
    out, start = [], 0
    group = q.shape[1] // k.shape[1]
    for n in lengths:
        qi, ki, vi = (x[start : start + n].float().transpose(0, 1) for x in (q, k, v))
        ki, vi = ki.repeat_interleave(group, 0), vi.repeat_interleave(group, 0)
        scores = (qi @ ki.transpose(1, 2)) * scale
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        out.append((scores.softmax(-1) @ vi).transpose(0, 1))
        start += n
    return torch.cat(out)


def sdpa(q, k, v, lengths, scale):
    out, start = [], 0
    for n in lengths:
        qi, ki, vi = (x[start : start + n].transpose(0, 1)[None] for x in (q, k, v))
        out.append(F.scaled_dot_product_attention(qi, ki, vi, is_causal=True, scale=scale, enable_gqa=True)[0].transpose(0, 1))
        start += n
    return torch.cat(out)


@pytest.fixture(scope="module")
def ops():
    return cpu_ops.cpu_ops()[0]


@pytest.mark.parametrize("heads", [(14, 2), (9, 3), (4, 4)], ids=["gqa7", "gqa3", "mha"])
@pytest.mark.parametrize("head_dim", [64, 128, 48, 80], ids=["d64", "d128", "d48", "d80"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_causal_prefill_matches_eager_on_ragged_prompts(ops, heads, head_dim, dtype):
    q, k, v, starts, lens = fresh_prompts(LENGTHS, *heads, head_dim, dtype)
    got = ops.causal_prefill(q, k, v, starts, lens, head_dim**-0.5)
    assert got.shape == q.shape and got.dtype == dtype and got.is_contiguous()
    want = eager(q, k, v, LENGTHS, head_dim**-0.5)
    torch.testing.assert_close(got.float(), want, atol=TOLERANCE[dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_causal_prefill_rounds_where_sdpa_does(ops, dtype):
    """bf16: nearly every output bitwise SDPA's (the probabilities rounded to bf16 before the
    values' sum, as SDPA's flash kernel does); eager, which does not round them, is further."""
    q, k, v, starts, lens = fresh_prompts(LENGTHS, 9, 3, 64, dtype, seed=2)
    got = ops.causal_prefill(q, k, v, starts, lens, 0.125)
    want = sdpa(q, k, v, LENGTHS, 0.125)
    torch.testing.assert_close(got.float(), want.float(), atol=1e-2 if dtype == torch.bfloat16 else 2e-6,
                               rtol=torch.finfo(dtype).eps)
    if dtype == torch.bfloat16:
        same = (got == want).float().mean().item()
        assert same > 0.9
        assert same > (eager(q, k, v, LENGTHS, 0.125).to(dtype) == want).float().mean().item()


def test_causal_prefill_refuses_prompts_past_the_tokens(ops):
    q, k, v, starts, lens = fresh_prompts([4, 4], 2, 1, 16, torch.float32)
    with pytest.raises(RuntimeError, match="outside the tokens"):
        ops.causal_prefill(q, k, v, starts, torch.tensor([4, 5]), 0.25)
    with pytest.raises(RuntimeError, match="head_dim must be a multiple of 16"):
        ops.causal_prefill(q[..., :8], k[..., :8], v[..., :8], starts, lens, 0.25)


@pytest.mark.parametrize("query_lens,seq_lens,fresh", [
    ([16, 16, 16], [16, 16, 16], 3),
    ([7, 20, 7, 33], [7, 20, 7, 33], 4),
    ([1, 9, 1, 12, 1], [40, 9, 3, 12, 1], 2),  # decode rows (one a 1-token prompt) through the decode kernel
    ([9, 1], [9, 77], 1),  # a lone decode row
    ([5, 9, 1], [12, 9, 30], 0),  # a chunk after cached context: the whole step on sdpa's path
], ids=["fresh-equal", "fresh-ragged", "with-decode-rows", "one-decode-row", "with-context"])
def test_prompts_without_context_go_to_the_causal_prefill(query_lens, seq_lens, fresh):
    q, k, v, k_cache, v_cache, meta = step_with_new_kv(query_lens, seq_lens, torch.bfloat16)
    backend = get_backend("cpu")
    got = backend(q, k_cache, v_cache, meta, 0.125, new_kv=(k, v))
    assert backend.prefill_rows == fresh
    assert backend.kernel_rows == (sum(n == 1 for n in query_lens) if fresh else 0)
    want = get_backend("eager")(q, k_cache, v_cache, meta, 0.125)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=0)


PORTABLE_CHECK = """
import json, torch
from engines.reference.kernels.cpu_ops import cpu_ops
from tests.test_cpu_prefill import LENGTHS, eager, fresh_prompts
ops = cpu_ops()[0]
errors = []
for dtype in (torch.float32, torch.bfloat16):
    for heads, head_dim in (((9, 3), 64), ((4, 2), 48)):
        q, k, v, starts, lens = fresh_prompts(LENGTHS, *heads, head_dim, dtype)
        got = ops.causal_prefill(q, k, v, starts, lens, head_dim ** -0.5)
        errors.append((got.float() - eager(q, k, v, LENGTHS, head_dim ** -0.5)).abs().max().item())
print(json.dumps(errors))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64", reason="x86-64 only")
def test_the_portable_build_without_avx512_matches_eager():
    """Built for x86-64-v3 (no AVX-512, no AVX512_BF16: the 16-float arrays, bf16 widened) in a
    child process, as tests/test_cpu_attention.py does for the decode kernel."""
    from tests.test_cpu_attention import portable_errors

    errors = portable_errors(PORTABLE_CHECK)
    assert len(errors) == 4
    assert max(errors[:2]) < 4e-6  # fp32
    assert max(errors[2:]) < 2e-2  # bf16
