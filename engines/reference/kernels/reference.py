"""Plain-PyTorch attention over the paged cache: the yardstick for the kernels.

One sequence at a time, keys gathered through the block table, an explicit
causal mask and a softmax in fp32. Slow and obvious on purpose.
"""

from __future__ import annotations

import torch

from engines.reference.attention.base import AttentionMetadata


def gather_sequence_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of one sequence's first `seq_len` positions: `[seq_len, kv_heads, head_dim]`."""
    block_size = k_cache.shape[1]
    num_blocks = -(-seq_len // block_size)
    blocks = block_table[:num_blocks].long()
    k = k_cache[blocks].flatten(0, 1)[:seq_len]
    v = v_cache[blocks].flatten(0, 1)[:seq_len]
    return k, v


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> torch.Tensor:
    """One sequence: q `[q_len, H, D]` at the last q_len of kv_len positions; fp32 math."""
    q_len, num_heads, _ = q.shape
    kv_len, num_kv_heads, _ = k.shape
    group = num_heads // num_kv_heads
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * scale
    q_pos = torch.arange(kv_len - q_len, kv_len).unsqueeze(1)
    visible = torch.arange(kv_len).unsqueeze(0) <= q_pos
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), v)


def paged_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """The attention backend contract, computed naively; returns fp32 `[T, Hq, D]`."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    start = 0
    for i, (q_len, seq_len) in enumerate(zip(meta.query_lens, meta.seq_lens, strict=True)):
        k, v = gather_sequence_kv(k_cache, v_cache, meta.block_tables[i], seq_len)
        out[start : start + q_len] = causal_attention(q[start : start + q_len], k, v, scale)
        start += q_len
    return out
