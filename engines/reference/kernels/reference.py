"""Plain-PyTorch attention over the paged cache: the yardstick for the kernels.

One sequence at a time, keys gathered through the block table, an explicit
causal mask and a softmax in fp32. Slow and obvious on purpose.
"""

from __future__ import annotations

import itertools
import math

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
    q_pos = torch.arange(kv_len - q_len, kv_len, device=q.device).unsqueeze(1)
    visible = torch.arange(kv_len, device=q.device).unsqueeze(0) <= q_pos
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


def random_paged_batch(
    query_lens: list[int],
    seq_lens: list[int],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    shuffled: bool = True,
    unused_value: float = float("nan"),
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionMetadata]:
    """Random queries and a paged cache holding each sequence's first `seq_lens[i]` positions.

    Blocks are handed out in a shuffled order (or consecutively: the contiguous
    cache's layout), and every slot no sequence owns holds `unused_value`: NaN
    by default, so a kernel that reads one poisons its output.
    """
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [math.ceil(n / block_size) for n in seq_lens]
    num_blocks = sum(blocks_per_seq) + 2
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, unused_value, dtype=dtype)
    v_cache = torch.full(shape, unused_value, dtype=dtype)
    order = torch.randperm(num_blocks, generator=gen) if shuffled else torch.arange(num_blocks)
    block_tables = torch.zeros(len(seq_lens), max(blocks_per_seq), dtype=torch.int32)
    slots, next_block = [], 0
    for i, (q_len, seq_len) in enumerate(zip(query_lens, seq_lens, strict=True)):
        ids = order[next_block : next_block + blocks_per_seq[i]]
        next_block += blocks_per_seq[i]
        block_tables[i, : len(ids)] = ids.to(torch.int32)
        pos = torch.arange(seq_len)
        flat = ids[pos // block_size] * block_size + pos % block_size
        kv = torch.randn(2, seq_len, num_kv_heads, head_dim, generator=gen).to(dtype)
        k_cache.view(-1, num_kv_heads, head_dim)[flat] = kv[0]
        v_cache.view(-1, num_kv_heads, head_dim)[flat] = kv[1]
        slots.append(flat[seq_len - q_len :])
    q = torch.randn(sum(query_lens), num_heads, head_dim, generator=gen).to(dtype)
    cu_query_lens = torch.tensor([0, *itertools.accumulate(query_lens)], dtype=torch.int32)
    meta = AttentionMetadata(
        query_lens=list(query_lens),
        seq_lens=list(seq_lens),
        cu_query_lens=cu_query_lens.to(device),
        seq_lens_t=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=block_tables.to(device),
        slot_mapping=torch.cat(slots).to(device),
        block_size=block_size,
    )
    return q.to(device), k_cache.to(device), v_cache.to(device), meta
