"""The step's shortcuts on CPU: the C++ `store_kv` against index_copy_ (model.store_kv), and
sdpa's prefill reading fresh prompts' K/V where the step made them (`new_kv`) against the same
step gathering them back from the paged cache (bitwise) and against eager attention."""

from __future__ import annotations

import pytest
import torch

from engines.reference.attention import get_backend
from engines.reference.kernels.cpu_ops import cpu_ops
from engines.reference.model import store_kv
from tests.test_decode_attention import BLOCK, paged_step

STEPS = {
    "fresh-equal": ([16, 16, 16], [16, 16, 16]),  # one group: every token, in order
    "fresh-ragged": ([7, 20, 7, 33], [7, 20, 7, 33]),
    "mixed": ([1, 9, 1, 12, 1, 5], [40, 9, 3, 30, 129, 5]),  # decode rows, fresh prompts, a chunk with context
}


@pytest.fixture(scope="module")
def ops():
    return cpu_ops()[0]


def step_with_new_kv(query_lens, seq_lens, dtype, num_heads=9, num_kv_heads=3, head_dim=64):
    """A paged step whose new tokens' K and V (views of one qkv-like buffer, as the model's
    split makes them) are already stored at their slots."""
    q, k_cache, v_cache, meta = paged_step(query_lens, seq_lens, num_heads, num_kv_heads, dtype, head_dim)
    gen = torch.Generator().manual_seed(5)
    tokens, kv = sum(query_lens), num_kv_heads * head_dim
    qkv = torch.randn(tokens, num_heads * head_dim + 2 * kv, generator=gen).to(dtype)
    k = qkv[:, num_heads * head_dim : -kv].view(tokens, num_kv_heads, head_dim)
    v = qkv[:, -kv:].view(tokens, num_kv_heads, head_dim)
    slots = []
    for table, n, total in zip(meta.block_tables.tolist(), query_lens, seq_lens, strict=True):
        slots += [table[p // BLOCK] * BLOCK + p % BLOCK for p in range(total - n, total)]
    meta.slot_mapping = torch.tensor(slots, dtype=torch.long)
    store_kv(k_cache, v_cache, k, v, meta.slot_mapping)
    return q, k, v, k_cache, v_cache, meta


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_store_kv_op_writes_what_index_copy_writes(ops, dtype):
    gen = torch.Generator().manual_seed(1)
    cache_shape = (9, BLOCK, 3, 64)
    k_cache, v_cache = (torch.randn(cache_shape, generator=gen).to(dtype) for _ in range(2))
    want_k, want_v = k_cache.clone(), v_cache.clone()
    qkv = torch.randn(37, 9 * 64 + 2 * 192, generator=gen).to(dtype)
    k, v = qkv[:, 576:768].view(37, 3, 64), qkv[:, 768:].view(37, 3, 64)  # strided views
    slots = torch.randperm(9 * BLOCK, generator=gen)[:37]
    store_kv(want_k, want_v, k, v, slots)
    ops.store_kv(k_cache, v_cache, k, v, slots)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
    assert not torch.equal(k_cache, torch.zeros_like(k_cache))  # something was compared


def test_store_kv_op_refuses_a_slot_outside_the_cache(ops):
    k_cache, v_cache = torch.zeros(2, BLOCK, 1, 16), torch.zeros(2, BLOCK, 1, 16)
    k = v = torch.ones(1, 1, 16)
    with pytest.raises(RuntimeError, match="outside the cache"):
        ops.store_kv(k_cache, v_cache, k, v, torch.tensor([2 * BLOCK]))
    assert not k_cache.any()


@pytest.mark.parametrize("backend_name", ["sdpa", "cpu"])
@pytest.mark.parametrize("case", list(STEPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_prefill_on_the_new_kv_matches_the_cache_gather(backend_name, case, dtype):
    query_lens, seq_lens = STEPS[case]
    q, k, v, k_cache, v_cache, meta = step_with_new_kv(query_lens, seq_lens, dtype)
    backend = get_backend(backend_name)
    assert backend.reads_new_kv
    gathered = backend(q, k_cache, v_cache, meta, 0.125)
    in_place = backend(q, k_cache, v_cache, meta, 0.125, new_kv=(k, v))
    if backend_name == "cpu" and case.startswith("fresh"):
        # Fresh prompts only: the C++ causal prefill (tests/test_cpu_prefill.py), SDPA's sums in another order.
        assert backend.prefill_rows == len(query_lens)
        assert_within_an_ulp_of(in_place, gathered)
    else:
        assert torch.equal(in_place, gathered)
    want = get_backend("eager")(q, k_cache, v_cache, meta, 0.125)
    torch.testing.assert_close(in_place.float(), want.float(), atol=2e-2 if dtype == torch.bfloat16 else 2e-6, rtol=0)


def assert_within_an_ulp_of(got, want):
    """Equal up to the fp32 sums' order: within fp32's rounding, or for bf16 within a unit of
    its last place, nearly every element bitwise equal."""
    bf16 = want.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), atol=1e-2 if bf16 else 2e-6, rtol=torch.finfo(want.dtype).eps)
    if bf16:
        assert (got == want).float().mean().item() > 0.95


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_the_decode_kernel_reads_q_where_the_rotation_left_it(ops, dtype):
    """The model's q is a view of the rotated [q | k] heads, each row a stride apart: the
    kernel reads it in place, with the same result as from a contiguous copy."""
    q, k_cache, v_cache, meta = paged_step([1] * 6, [1, 17, 160, 33, 64, 16], 9, 3, dtype)
    both = torch.cat([q, torch.randn(6, 3, 64).to(dtype)], dim=1)  # [tokens, q heads + k heads, d]
    view = both[:, :9]
    assert not view.is_contiguous()
    args = (k_cache, v_cache, meta.block_tables, meta.seq_lens_t, 0.125)
    got = ops.paged_decode(view, *args)
    assert got.is_contiguous() and torch.equal(got, ops.paged_decode(q.contiguous(), *args))
    want = get_backend("eager")(q, k_cache, v_cache, meta, 0.125)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2 if dtype == torch.bfloat16 else 2e-6, rtol=0)
