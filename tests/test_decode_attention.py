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
    meta = metadata(query_lens, seq_lens, tables)
    q = torch.randn(sum(query_lens), num_heads, head_dim, generator=gen).to(dtype)
    return q, k_cache, v_cache, meta


def metadata(query_lens, seq_lens, tables, **contiguous) -> AttentionMetadata:
    cu = [0]
    for n in query_lens:
        cu.append(cu[-1] + n)
    return AttentionMetadata(
        query_lens=list(query_lens),
        seq_lens=list(seq_lens),
        cu_query_lens=torch.tensor(cu, dtype=torch.int32),
        seq_lens_t=torch.tensor(seq_lens, dtype=torch.int32),
        block_tables=torch.tensor(tables, dtype=torch.int32),
        slot_mapping=torch.zeros(cu[-1], dtype=torch.long),
        block_size=BLOCK,
        **contiguous,
    )


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


def slot_step(slots, query_lens, seq_lens, num_heads, num_kv_heads, dtype, slot_blocks=4, head_dim=64, seed=0):
    """A contiguous cache of 6 slots: sequence i in slot slots[i] (blocks 1 + slot * slot_blocks on)."""
    gen = torch.Generator().manual_seed(seed)
    shape = (1 + 6 * slot_blocks, BLOCK, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(dtype)
    v_cache = torch.randn(shape, generator=gen).to(dtype)
    tables = [list(range(1 + s * slot_blocks, 1 + (s + 1) * slot_blocks)) for s in slots]
    meta = metadata(query_lens, seq_lens, tables, slot_blocks=slot_blocks, slots=list(slots))
    q = torch.randn(sum(query_lens), num_heads, head_dim, generator=gen).to(dtype)
    return q, k_cache, v_cache, meta


@pytest.mark.parametrize(
    "slots,query_lens,seq_lens,in_place",
    [
        ([0, 1, 2, 3], [1] * 4, [5, 64, 17, 33], True),  # slots in row order: q as it is
        ([4, 1, 3, 2], [1] * 4, [5, 64, 17, 33], True),  # shuffled, slot 0 idle: q placed by slot
        ([2, 0, 5], [1, 20, 1], [9, 20, 50], True),  # mixed step: decode rows in slots 2 and 5
        ([0, 5], [1, 1], [7, 40], False),  # 2 rows over 6 slots: gathered instead
    ],
    ids=["in-order", "shuffled", "mixed", "sparse"],
)
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-6), (torch.bfloat16, 2e-2)])
def test_contiguous_slots_are_read_in_place_and_match_eager(slots, query_lens, seq_lens, in_place, dtype, atol):
    q, k_cache, v_cache, meta = slot_step(slots, query_lens, seq_lens, 9, 3, dtype)
    assert (meta.decode_batch.slot_rows is not None) == in_place
    scale = q.shape[-1] ** -0.5
    got = get_backend("sdpa")(q, k_cache, v_cache, meta, scale)
    want = get_backend("eager")(q, k_cache, v_cache, meta, scale)
    torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=0)
    # and the same as the gathered path over the same cache
    meta.slots = None
    del meta.__dict__["decode_batch"]
    torch.testing.assert_close(get_backend("sdpa")(q, k_cache, v_cache, meta, scale), got, atol=atol, rtol=0)


def test_the_in_place_view_is_the_cache_itself():
    from engines.reference.attention.gather import slot_view

    _, k_cache, _, meta = slot_step([3, 1], [1, 1], [10, 30], 9, 3, torch.float32)
    rows = meta.decode_batch.slot_rows
    view = slot_view(k_cache, meta.slot_blocks, rows, meta.decode_batch.max_len)
    assert view.shape == (3, 30, 3, 64)  # slots 1, 2 (idle), 3; the longest context
    assert view.data_ptr() == k_cache[1 + 1 * 4].data_ptr()  # no copy: slot 1 starts at block 5
    assert torch.equal(view[2, 17], k_cache[1 + 3 * 4 + 1, 1])  # slot 3, position 17
