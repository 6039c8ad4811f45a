"""Causal flash attention over variable-length sequences packed together.

One kernel, two ways to find keys and values:
- `varlen_attention`: packed K/V `[total_kv, kv_heads, head_dim]` with
  cumulative offsets, like `flash_attn_varlen_func`;
- `paged_prefill_attention`: K/V read from the paged cache
  `[num_blocks, block_size, kv_heads, head_dim]` through block tables, so new
  tokens attend to context already cached (chunked prefill, prefix-cache hits,
  recompute after preemption).

Queries sit at the end of their sequence: query j of a sequence with q_len new
tokens and kv_len keys is at position kv_len - q_len + j and sees keys at
positions up to it. Each program takes a few queries of every query head that
shares one kv head (GQA), so each key tile it loads serves the whole group, and
streams the keys in BLOCK_N tiles with an online softmax (exp2, scale folded
with log2(e)). Import this module only after `prepare_triton` (see the package doc).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engines.reference.kernels import dot_precision, output_buffer, runs_compiled

LOG2_E = 1.4426950408889634


@triton.jit
def _prefill_kernel(
    Q, K, V, Out,
    cu_q, kv_lens, cu_kv, block_tables,
    scale_log2,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_bt, block_size,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGED: tl.constexpr,
    UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    q_block = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = tl.program_id(2)
    q_start = tl.load(cu_q + seq)
    q_len = tl.load(cu_q + seq + 1) - q_start
    if q_block * BLOCK_Q >= q_len:
        return
    if PAGED:
        kv_len = tl.load(kv_lens + seq)
        kv_start = 0
    else:
        kv_start = tl.load(cu_kv + seq)
        kv_len = tl.load(cu_kv + seq + 1) - kv_start
    context_len = kv_len - q_len

    # Row r of the tile is query q_block * BLOCK_Q + r // GROUP_PAD of head r % GROUP_PAD
    # in this kv head's group: every key tile loaded serves the whole group.
    rows = tl.arange(0, BLOCK_Q * GROUP_PAD)
    q_idx = q_block * BLOCK_Q + rows // GROUP_PAD
    head = kv_head * GROUP + rows % GROUP_PAD
    offs_d = tl.arange(0, BLOCK_D)
    row_mask = (q_idx < q_len) & (rows % GROUP_PAD < GROUP)
    d_mask = offs_d < HEAD_DIM
    io_mask = row_mask[:, None] & d_mask[None, :]
    q_ptrs = Q + (q_start + q_idx)[:, None].to(tl.int64) * stride_qt + head[:, None] * stride_qh
    q = tl.load(q_ptrs + offs_d[None, :], mask=io_mask, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    # Padding rows act as the last query, so no row sees only masked keys (no NaN).
    q_pos = context_len + tl.minimum(q_idx, q_len - 1)

    m_i = tl.full([BLOCK_Q * GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.full([BLOCK_Q * GROUP_PAD], 0.0, dtype=tl.float32)
    acc = tl.full([BLOCK_Q * GROUP_PAD, BLOCK_D], 0.0, dtype=tl.float32)
    kv_end = tl.minimum(kv_len, context_len + (q_block + 1) * BLOCK_Q)  # causal bound
    for start_n in range(0, kv_end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_mask = offs_n < kv_len
        if PAGED:
            block = tl.load(
                block_tables + seq * stride_bt + offs_n // block_size, mask=n_mask, other=0
            ).to(tl.int64)
            k_rows = block * stride_kb + (offs_n % block_size) * stride_kt
            v_rows = block * stride_vb + (offs_n % block_size) * stride_vt
        else:
            k_rows = (kv_start + offs_n).to(tl.int64) * stride_kt
            v_rows = (kv_start + offs_n).to(tl.int64) * stride_vt
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(
            K + k_rows[:, None] + kv_head * stride_kh + offs_d[None, :], mask=kv_mask, other=0.0
        )
        v = tl.load(
            V + v_rows[:, None] + kv_head * stride_vh + offs_d[None, :], mask=kv_mask, other=0.0
        )
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)

        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2
        visible = (offs_n[None, :] <= q_pos[:, None]) & n_mask[None, :]
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    out = acc / l_i[:, None]
    o_ptrs = Out + (q_start + q_idx)[:, None].to(tl.int64) * stride_ot + head[:, None] * stride_oh
    tl.store(o_ptrs + offs_d[None, :], out.to(Out.dtype.element_ty), mask=io_mask)


def _block_sizes(head_dim: int, on_cuda: bool) -> tuple[int, int, int, int]:
    """(BLOCK_M rows = queries x padded group, BLOCK_N keys, num_warps, num_stages).

    On CUDA: 64x64 tiles, halving the key tile for wide heads to stay within
    registers. The interpreter pays per operation and per program, whatever the
    tile size, so it takes the same large tiles.
    """
    if not on_cuda:
        return 64, 64, 1, 1
    if head_dim <= 64:
        return 64, 64, 4, 3
    return 64, 32, 4, 2


def _launch(q, k, v, cu_q, kv_lens, cu_kv, block_tables, block_size, max_q_len, scale, paged):
    on_cuda = runs_compiled(q, _prefill_kernel)
    _, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[-2]
    if num_heads % num_kv_heads:
        raise ValueError(
            f"query heads ({num_heads}) must be a multiple of kv heads ({num_kv_heads})"
        )
    if k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("the KV cache's head_dim must be its innermost, contiguous dimension")
    if q.stride(-1) != 1:
        q = q.contiguous()
    out = output_buffer(q.shape, q, on_cuda)
    block_m, block_n, num_warps, num_stages = _block_sizes(head_dim, on_cuda)
    group = num_heads // num_kv_heads
    group_pad = triton.next_power_of_2(group)
    block_q = max(1, block_m // group_pad)
    num_seqs = cu_q.numel() - 1
    grid = (triton.cdiv(max_q_len, block_q), num_kv_heads, num_seqs)
    if paged:
        kv_strides = (k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2))
    else:
        kv_strides = (0, k.stride(0), k.stride(1), 0, v.stride(0), v.stride(1))
    _prefill_kernel[grid](
        q, k, v, out,
        cu_q, kv_lens, cu_kv, block_tables,
        scale * LOG2_E,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        *kv_strides,
        block_tables.stride(0), block_size,
        GROUP=group,
        GROUP_PAD=group_pad,
        HEAD_DIM=head_dim,
        BLOCK_D=triton.next_power_of_2(head_dim),
        BLOCK_Q=block_q,
        BLOCK_N=block_n,
        PAGED=paged,
        UPCAST=not on_cuda or q.dtype == torch.float32,
        DOT_PRECISION=dot_precision(q.dtype),
        num_warps=num_warps,
        num_stages=num_stages,
    )  # fmt: skip
    return out.to(q.dtype)


def varlen_attention(
    q: torch.Tensor,  # [total_q, num_heads, head_dim]
    k: torch.Tensor,  # [total_kv, num_kv_heads, head_dim]
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,  # int32 [num_seqs + 1]
    cu_seqlens_kv: torch.Tensor,  # int32 [num_seqs + 1]
    max_seqlen_q: int,
    scale: float,
) -> torch.Tensor:  # [total_q, num_heads, head_dim]
    """Causal attention over packed sequences; queries align to the end of their keys."""
    if k.stride(-1) != 1 or v.stride(-1) != 1:
        k, v = k.contiguous(), v.contiguous()
    return _launch(
        q, k, v, cu_seqlens_q, cu_seqlens_kv, cu_seqlens_kv, cu_seqlens_kv,
        block_size=1, max_q_len=max_seqlen_q, scale=scale, paged=False,
    )  # fmt: skip


def paged_prefill_attention(
    q: torch.Tensor,  # [total_q, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,
    cu_query_lens: torch.Tensor,  # int32 [num_seqs + 1]
    seq_lens: torch.Tensor,  # int32 [num_seqs], cached positions incl. the new ones
    block_tables: torch.Tensor,  # int32 [num_seqs, max_blocks]
    max_query_len: int,
    scale: float,
) -> torch.Tensor:  # [total_q, num_heads, head_dim]
    """Causal attention of new tokens over everything cached for their sequence."""
    return _launch(
        q, k_cache, v_cache, cu_query_lens, seq_lens, cu_query_lens, block_tables,
        block_size=k_cache.shape[1], max_q_len=max_query_len, scale=scale, paged=True,
    )  # fmt: skip
