"""The sdpa backend's decode path (gathered K/V, query heads grouped per kv head) against eager
attention, on a paged cache with shuffled blocks, sequences of different lengths and GQA."""

from __future__ import annotations

import pytest
import torch

from engines.reference.attention import AttentionMetadata, get_backend

BLOCK = 16


def paged_step(query_lens, seq_lens, num_heads, num_kv_heads, dtype, head_dim=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    blocks = [-(-n // BLOCK) for n in seq_lens]
    num_blocks = sum(blocks) + 1
    shape = (num_blocks, BLOCK, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(dtype)
    v_cache = torch.randn(shape, generator=gen).to(dtype)
    order = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()
    tables, start = [], 0
    for n in blocks:
        tables.append(order[start : start + n] + [0] * (max(blocks) - n))
        start += n
    cu = [0]
    for n in query_lens:
        cu.append(cu[-1] + n)
    meta = AttentionMetadata(
        query_lens=list(query_lens),
        seq_lens=list(seq_lens),
        cu_query_lens=torch.tensor(cu, dtype=torch.int32),
        seq_lens_t=torch.tensor(seq_lens, dtype=torch.int32),
        block_tables=torch.tensor(tables, dtype=torch.int32),
        slot_mapping=torch.zeros(cu[-1], dtype=torch.long),
        block_size=BLOCK,
    )
    q = torch.randn(cu[-1], num_heads, head_dim, generator=gen).to(dtype)
    return q, k_cache, v_cache, meta


@pytest.mark.parametrize("heads", [(14, 2), (9, 3), (4, 4)], ids=["gqa7", "gqa3", "mha"])
@pytest.mark.parametrize(
    "query_lens,seq_lens",
    [([1] * 5, [1, 17, 160, 33, 64]), ([1, 12, 1, 1], [40, 12, 3, 129])],
    ids=["decode-only", "mixed"],
)
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-6), (torch.bfloat16, 2e-2)])
def test_sdpa_decode_matches_eager_on_ragged_paged_contexts(heads, query_lens, seq_lens, dtype, atol):
    q, k_cache, v_cache, meta = paged_step(query_lens, seq_lens, *heads, dtype)
    scale = q.shape[-1] ** -0.5
    got = get_backend("sdpa")(q, k_cache, v_cache, meta, scale)
    want = get_backend("eager")(q, k_cache, v_cache, meta, scale)
    assert got.shape == want.shape and got.dtype == dtype
    torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=0)
