"""torch's scaled_dot_product_attention: one batched call for decode, one call per prefill."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engines.reference.attention.base import AttentionMetadata
from engines.reference.attention.gather import causal_mask, gather_context, gather_padded


class SdpaAttention:
    name = "sdpa"

    def __call__(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        if meta.is_decode_only:
            return self._decode(q, k_cache, v_cache, meta, scale)
        out = torch.empty_like(q)
        starts = meta.cu_query_lens.tolist()
        decode_rows = [i for i, n in enumerate(meta.query_lens) if n == 1]
        if len(decode_rows) > 1:
            rows = torch.tensor(decode_rows, device=q.device)
            token_idx = meta.cu_query_lens[rows].long()
            out[token_idx] = self._decode(q[token_idx], k_cache, v_cache, meta, scale, rows)
            decode_rows = set(decode_rows)
        else:
            decode_rows = set()
        for i, (q_len, seq_len) in enumerate(zip(meta.query_lens, meta.seq_lens, strict=True)):
            if i in decode_rows:
                continue
            k = gather_context(k_cache, meta.block_tables[i], seq_len)
            v = gather_context(v_cache, meta.block_tables[i], seq_len)
            qi = q[starts[i] : starts[i] + q_len]
            mask = None if q_len == seq_len else causal_mask(q_len, seq_len, q.device)
            o = F.scaled_dot_product_attention(
                qi.transpose(0, 1).unsqueeze(0),
                k.to(q.dtype).transpose(0, 1).unsqueeze(0),
                v.to(q.dtype).transpose(0, 1).unsqueeze(0),
                attn_mask=mask,
                is_causal=mask is None,
                scale=scale,
                enable_gqa=True,
            )
            out[starts[i] : starts[i] + q_len] = o[0].transpose(0, 1)
        return out

    @staticmethod
    def _decode(q, k_cache, v_cache, meta, scale, rows=None):
        """One query per sequence against its padded context, all sequences in one call."""
        k, mask = gather_padded(k_cache, meta, rows)
        v, _ = gather_padded(v_cache, meta, rows)
        o = F.scaled_dot_product_attention(
            q.unsqueeze(2),  # [B, Hq, 1, D]
            k.to(q.dtype).transpose(1, 2),  # [B, Hkv, S, D]
            v.to(q.dtype).transpose(1, 2),
            attn_mask=mask[:, None, None, :],
            scale=scale,
            enable_gqa=True,
        )
        return o.squeeze(2)
