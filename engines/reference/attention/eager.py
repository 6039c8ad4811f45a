"""Attention spelled out in matmuls and a softmax: the readable reference."""

from __future__ import annotations

import torch

from engines.reference.attention.base import AttentionMetadata
from engines.reference.attention.gather import causal_mask, gather_context


class EagerAttention:
    name = "eager"

    def __call__(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        out = torch.empty_like(q)
        group = q.shape[1] // k_cache.shape[2]
        starts = meta.query_starts
        for i, (q_len, seq_len) in enumerate(zip(meta.query_lens, meta.seq_lens, strict=True)):
            k = gather_context(k_cache, meta.block_tables[i], seq_len).repeat_interleave(group, dim=1)
            v = gather_context(v_cache, meta.block_tables[i], seq_len).repeat_interleave(group, dim=1)
            qi = q[starts[i] : starts[i] + q_len]
            scores = torch.einsum("qhd,khd->hqk", qi.float(), k.float()) * scale
            scores.masked_fill_(~causal_mask(q_len, seq_len, q.device), float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            out[starts[i] : starts[i] + q_len] = torch.einsum("hqk,khd->qhd", probs, v.float()).to(q.dtype)
        return out
