"""sdpa's (and attention=cpu's) prefill rows in groups of equal (query, context) lengths, one
SDPA call a group: against one SDPA call per sequence over its gathered context (bit for bit)
and eager attention (an independent spelling-out in matmuls), on a paged cache with shuffled
blocks: whole prompts, chunks over cached context, groups whose rows are not adjacent, and
decode rows between them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engines.reference.attention import get_backend
from engines.reference.attention.gather import causal_mask
from tests.test_decode_attention import paged_step

STEPS = {
    "whole-prompts": ([37] * 4, [37] * 4),  # one group of 4
    "two-lengths-interleaved": ([20, 33, 20, 33, 20], [20, 33, 20, 33, 20]),  # groups not adjacent
    "chunks-over-context": ([16, 16, 9], [48, 48, 9]),  # chunked prefill: a causal mask with an offset
    "with-decode-rows": ([1, 24, 1, 24, 1], [70, 24, 5, 24, 130]),  # decode rows go to the decode path
}


def per_sequence(q, k_cache, v_cache, meta, scale):
    """The prefill rows one SDPA call each, each over its own gathered context."""
    out = torch.zeros_like(q)
    starts = meta.query_starts
    for i, (q_len, seq_len) in enumerate(zip(meta.query_lens, meta.seq_lens, strict=True)):
        if q_len == 1 and sum(n == 1 for n in meta.query_lens) > 1:
            continue
        blocks = meta.block_tables[i][: -(-seq_len // k_cache.shape[1])]
        k = k_cache.index_select(0, blocks).flatten(0, 1)[:seq_len]
        v = v_cache.index_select(0, blocks).flatten(0, 1)[:seq_len]
        mask = None if q_len == seq_len else causal_mask(q_len, seq_len, q.device)
        o = F.scaled_dot_product_attention(
            q[starts[i] : starts[i] + q_len].transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
            attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=True)
        out[starts[i] : starts[i] + q_len] = o[0].transpose(0, 1)
    return out


@pytest.mark.parametrize("backend", ["sdpa", "cpu"])
@pytest.mark.parametrize("step", list(STEPS), ids=list(STEPS))
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-6), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"])
def test_grouped_prefill_matches_one_call_per_sequence_and_eager(backend, step, dtype, atol):
    query_lens, seq_lens = STEPS[step]
    q, k_cache, v_cache, meta = paged_step(query_lens, seq_lens, 9, 3, dtype)
    scale = 64**-0.5
    got = get_backend(backend)(q, k_cache, v_cache, meta, scale)
    prefill = torch.tensor([n > 1 or sum(m == 1 for m in query_lens) == 1 for n in query_lens])
    rows = torch.repeat_interleave(prefill, torch.tensor(query_lens))
    want = per_sequence(q, k_cache, v_cache, meta, scale)
    assert torch.equal(got[rows], want[rows])  # the same bits as one call per sequence
    eager = get_backend("eager")(q, k_cache, v_cache, meta, scale)
    torch.testing.assert_close(got.float(), eager.float(), atol=atol, rtol=0)
