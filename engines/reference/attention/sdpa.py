"""torch's scaled_dot_product_attention: one batched call for decode, one call per group of equal-length prefill rows."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engines.reference.attention.base import AttentionMetadata
from engines.reference.attention.gather import causal_mask, gather_padded, gather_rows, slot_view


class SdpaAttention:
    name = "sdpa"
    reads_new_kv = True  # engines.reference.model.attend passes the step's new K/V (`new_kv`)

    def __call__(self, q, k_cache, v_cache, meta: AttentionMetadata, scale: float, new_kv=None) -> torch.Tensor:
        """`new_kv`: the step's new K and V ([num_tokens, num_kv_heads, head_dim], already in
        the cache); a prompt with no cached context (query length = context) attends to them
        in place instead of a gather of the same values back from the cache."""
        if meta.is_decode_only:
            return self._decode(q, k_cache, v_cache, meta, scale)
        out = None
        starts = meta.query_starts
        decode_rows = set()
        if len(meta.decode_rows) > 1:
            out = torch.empty_like(q)
            token_index = meta.decode_batch.token_index
            out[token_index] = self._decode(q[token_index], k_cache, v_cache, meta, scale)
            decode_rows = set(meta.decode_rows)
        # Prefill rows (whole prompts or chunks) in groups of equal (query, context) lengths:
        # one SDPA call a group, not one a sequence. Each call's fixed cost (its threads'
        # fork and join) is most of a short prompt's attention: 16 prompts of 128 tokens of
        # llama-107m (bf16, 2 cores) took 40 ms a layer batched against 430 ms one by one,
        # with the same bits out.
        groups: dict[tuple[int, int], list[int]] = {}
        for i, lens in enumerate(zip(meta.query_lens, meta.seq_lens, strict=True)):
            if i not in decode_rows:
                groups.setdefault(lens, []).append(i)
        for (q_len, seq_len), rows in groups.items():
            tokens = _token_index(rows, starts, q_len, q.device)
            if new_kv is not None and q_len == seq_len:  # no earlier context: the new K/V are all of it
                k, v = (x.to(k_cache.dtype)[tokens].view(len(rows), q_len, *x.shape[1:]) for x in new_kv)
            else:
                k, v = gather_rows(k_cache, meta, rows, seq_len), gather_rows(v_cache, meta, rows, seq_len)
            qi = q[tokens].view(len(rows), q_len, *q.shape[1:])
            mask = None if q_len == seq_len else causal_mask(q_len, seq_len, q.device)
            o = F.scaled_dot_product_attention(
                qi.transpose(1, 2),
                k.to(q.dtype).transpose(1, 2),
                v.to(q.dtype).transpose(1, 2),
                attn_mask=mask,
                is_causal=mask is None,
                scale=scale,
                enable_gqa=True,
            )
            o = o.transpose(1, 2).reshape(len(rows) * q_len, *q.shape[1:])
            if out is None and len(rows) * q_len == q.shape[0]:
                return o  # one group holds every token, in order (tokens is then the whole range)
            if out is None:
                out = torch.empty_like(q)
            out[tokens] = o
        return out

    @staticmethod
    def _decode(q, k_cache, v_cache, meta, scale):
        """One query per decode row against its padded context, all of them in one call.

        The query heads that share a kv head go in as that kv head's queries ([B, Hkv,
        group, D]), so SDPA never expands K and V to every query head: on CPU this is
        7x faster than `enable_gqa` at batch 32 (bf16), and every query of a row shares
        the row's key mask.

        A paged cache's contexts are gathered into a padded batch (a copy of every cached
        position, every layer, every step). A contiguous cache's are read in place: the
        rows' slots are one strided view, each row's query at its slot's place.
        """
        batch = meta.decode_batch
        num_rows, num_heads, head_dim = q.shape
        num_kv_heads = k_cache.shape[2]
        q = q.reshape(num_rows, num_kv_heads, num_heads // num_kv_heads, head_dim)
        rows = batch.slot_rows
        if rows is None:
            k, v, mask = gather_padded(k_cache, batch), gather_padded(v_cache, batch), batch.key_mask
        else:
            k = slot_view(k_cache, meta.slot_blocks, rows, batch.max_len)
            v = slot_view(v_cache, meta.slot_blocks, rows, batch.max_len)
            mask = rows.key_mask
            if rows.index is not None:
                q = q.new_zeros(rows.count, *q.shape[1:]).index_copy_(0, rows.index, q)
        o = F.scaled_dot_product_attention(
            q,
            k.to(q.dtype).transpose(1, 2),  # [B, Hkv, S, D]
            v.to(q.dtype).transpose(1, 2),
            attn_mask=mask[:, None, None, :],
            scale=scale,
        )
        if rows is not None and rows.index is not None:
            o = o.index_select(0, rows.index)
        return o.reshape(num_rows, num_heads, head_dim)


def _token_index(rows: list[int], starts: list[int], q_len: int, device) -> slice | torch.Tensor:
    """The packed queries of `rows` (each q_len long), in order: a slice when they are adjacent."""
    first = starts[rows[0]]
    if all(starts[r] == first + j * q_len for j, r in enumerate(rows)):
        return slice(first, first + len(rows) * q_len)
    return torch.cat([torch.arange(starts[r], starts[r] + q_len, device=device) for r in rows])
