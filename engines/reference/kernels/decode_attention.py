"""Decode attention: one query token per sequence over the paged KV cache.

Split-KV (flash-decoding): a batch of a few long sequences has too few
(sequence, kv head) pairs to fill a GPU, so each sequence's keys are cut into
`num_splits` ranges handled by separate programs. Each writes its partial output,
already normalised, and the log2-sum-exp of its scores; a second kernel merges
the splits (with a single split the first kernel writes the answer). A program serves all query heads of one kv head (GQA), so every
key it loads is used `group` times; the group is padded to 16 rows, the
smallest `tl.dot` the compiler takes. Import this module only after
`prepare_triton` (see the package doc).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from engines.reference.kernels import dot_precision, output_buffer, runs_compiled

LOG2_E = 1.4426950408889634


@triton.jit
def _decode_split_kernel(
    Q, K, V, Out, O_part, LSE_part,
    seq_lens, block_tables,
    scale_log2,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_bt, block_size, num_splits,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens + seq)
    # Splits cover whole key tiles. (Plain arithmetic rather than tl.cdiv, and tl.full rather
    # than tl.zeros: those helpers cost the interpreter a re-patch of triton.language per call.)
    keys_per_split = (seq_len + num_splits - 1) // num_splits
    split_len = (keys_per_split + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    h_mask = offs_h < GROUP
    d_mask = offs_d < HEAD_DIM
    heads = kv_head * GROUP + offs_h
    q = tl.load(
        Q + seq.to(tl.int64) * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
        mask=h_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.full([BLOCK_H], 0.0, dtype=tl.float32)
    acc = tl.full([BLOCK_H, BLOCK_D], 0.0, dtype=tl.float32)
    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_mask = offs_n < end
        block = tl.load(
            block_tables + seq * stride_bt + offs_n // block_size, mask=n_mask, other=0
        ).to(tl.int64)
        slot_in_block = offs_n % block_size
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(
            K
            + (block * stride_kb + slot_in_block * stride_kt)[:, None]
            + kv_head * stride_kh
            + offs_d[None, :],
            mask=kv_mask,
            other=0.0,
        )
        v = tl.load(
            V
            + (block * stride_vb + slot_in_block * stride_vt)[:, None]
            + kv_head * stride_vh
            + offs_d[None, :],
            mask=kv_mask,
            other=0.0,
        )
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2
        s = tl.where(n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    if SINGLE_SPLIT:  # the whole sequence: this is the answer, no merge needed
        o_ptrs = Out + seq.to(tl.int64) * stride_ot + heads[:, None] * stride_oh + offs_d[None, :]
        out = acc / l_i[:, None]
        tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=h_mask[:, None] & d_mask[None, :])
        return
    # An empty split (short sequence) leaves l_i = 0: write lse = -inf, output 0.
    has_keys = l_i > 0
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))
    row = (seq * tl.num_programs(1) * GROUP + heads) * num_splits + split
    tl.store(O_part + row[:, None] * BLOCK_D + offs_d[None, :], out, mask=h_mask[:, None])
    tl.store(LSE_part + row, lse, mask=h_mask)


@triton.jit
def _decode_reduce_kernel(
    O_part, LSE_part, Out,
    stride_ot, stride_oh,
    num_heads, num_splits,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_mask = offs_s < num_splits
    rows = (seq * num_heads + head) * num_splits + offs_s
    lse = tl.load(LSE_part + rows, mask=s_mask, other=float("-inf"))
    weights = tl.exp2(lse - tl.max(lse, axis=0))  # split 0 always has keys: max is finite
    parts = tl.load(
        O_part + rows[:, None] * BLOCK_D + offs_d[None, :], mask=s_mask[:, None], other=0.0
    )
    out = tl.sum(parts * weights[:, None], axis=0) / tl.sum(weights, axis=0)
    tl.store(
        Out + seq.to(tl.int64) * stride_ot + head * stride_oh + offs_d,
        out.to(Out.dtype.element_ty),
        mask=offs_d < HEAD_DIM,
    )


@functools.lru_cache(maxsize=8)
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def choose_num_splits(
    num_seqs: int, num_kv_heads: int, max_seq_len: int, block_n: int, num_sms: int
) -> int:
    """Enough programs for about two waves over the SMs, no split shorter than a tile."""
    programs = num_seqs * num_kv_heads
    wanted = triton.cdiv(2 * num_sms, programs)
    return max(1, min(wanted, triton.cdiv(max_seq_len, block_n), 64))


def paged_decode_attention(
    q: torch.Tensor,  # [num_seqs, num_heads, head_dim], one new token per sequence
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,  # int32 [num_seqs], positions attended (incl. the new one)
    block_tables: torch.Tensor,  # int32 [num_seqs, max_blocks]
    max_seq_len: int,
    scale: float,
    num_splits: int | None = None,
) -> torch.Tensor:  # [num_seqs, num_heads, head_dim]
    """Attention of each sequence's newest token over its cached keys and values."""
    on_cuda = runs_compiled(q, _decode_split_kernel)
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(
            f"query heads ({num_heads}) must be a multiple of kv heads ({num_kv_heads})"
        )
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("the KV cache's head_dim must be its innermost, contiguous dimension")
    if q.stride(-1) != 1:
        q = q.contiguous()
    group = num_heads // num_kv_heads
    block_d = triton.next_power_of_2(head_dim)
    block_n = 64 if head_dim <= 64 or not on_cuda else 32
    if num_splits is None:
        # The interpreter runs programs one after another: splitting only adds the merge.
        num_splits = 1
        if on_cuda:
            num_sms = _num_sms(q.device.index or 0)
            num_splits = choose_num_splits(num_seqs, num_kv_heads, max_seq_len, block_n, num_sms)

    out = output_buffer(q.shape, q, on_cuda)
    rows = num_seqs * num_heads * num_splits
    # With one split the partial buffers are never touched: pass `out` in their place.
    o_part = (
        torch.empty(rows, block_d, dtype=torch.float32, device=q.device) if num_splits > 1 else out
    )
    lse_part = torch.empty(rows, dtype=torch.float32, device=q.device) if num_splits > 1 else out
    _decode_split_kernel[(num_seqs, num_kv_heads, num_splits)](
        q, k_cache, v_cache, out, o_part, lse_part,
        seq_lens, block_tables,
        scale * LOG2_E,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_tables.stride(0), k_cache.shape[1], num_splits,
        GROUP=group,
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_H=max(16, triton.next_power_of_2(group)),
        BLOCK_N=block_n,
        UPCAST=not on_cuda or q.dtype == torch.float32,
        DOT_PRECISION=dot_precision(q.dtype),
        SINGLE_SPLIT=num_splits == 1,
        num_warps=4 if on_cuda else 1,
    )  # fmt: skip
    if num_splits > 1:
        _decode_reduce_kernel[(num_seqs, num_heads)](
            o_part, lse_part, out,
            out.stride(0), out.stride(1),
            num_heads, num_splits,
            HEAD_DIM=head_dim,
            BLOCK_D=block_d,
            BLOCK_S=triton.next_power_of_2(num_splits),
            num_warps=1,
        )  # fmt: skip
    return out.to(q.dtype)
