"""Reading a sequence's context out of the block-structured KV cache (for torch backends)."""

from __future__ import annotations

import torch

from engines.reference.attention.base import AttentionMetadata


def gather_context(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """[num_blocks, block_size, H, D] + one sequence's block table -> its [seq_len, H, D]."""
    block_size = cache.shape[1]
    num_blocks = -(-seq_len // block_size)
    return cache[block_table[:num_blocks]].flatten(0, 1)[:seq_len]


def gather_padded(cache: torch.Tensor, meta: AttentionMetadata, rows: torch.Tensor | None = None):
    """Every sequence's context padded to the longest: [B, max_seq_len, H, D] and a key mask [B, max_seq_len]."""
    block_tables = meta.block_tables if rows is None else meta.block_tables[rows]
    seq_lens = meta.seq_lens_t if rows is None else meta.seq_lens_t[rows]
    max_len = int(seq_lens.max())
    num_blocks = -(-max_len // meta.block_size)
    kv = cache[block_tables[:, :num_blocks]].flatten(1, 2)[:, :max_len]
    mask = torch.arange(max_len, device=cache.device)[None, :] < seq_lens[:, None]
    return kv, mask


def causal_mask(query_len: int, seq_len: int, device) -> torch.Tensor:
    """Query j sits at position seq_len - query_len + j and sees keys up to there."""
    q_pos = torch.arange(seq_len - query_len, seq_len, device=device)
    return torch.arange(seq_len, device=device)[None, :] <= q_pos[:, None]
