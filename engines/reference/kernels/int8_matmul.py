"""int8 weight-only matmul (W8A16): y = (x @ W_q^T) * scale, for CUDA.

Weight tiles are loaded as int8 (a quarter of fp32's bytes, half of bf16's)
and widened to the activation dtype in registers on their way into `tl.dot`;
the per-output-channel scale is applied once to the fp32 accumulator. Decode
(a few rows) reads every weight byte once, so it runs at the speed of moving
int8. Block sizes are autotuned per (row bucket, N, K) when compiled; the
interpreter (CPU, tests) takes one fixed configuration. Import this module only
after `prepare_triton` (see the package doc).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from engines.reference.kernels import dot_precision, output_buffer, runs_compiled


@triton.jit
def _int8_weight_matmul_kernel(
    X, W, S, Y,
    M, N, K, m_bucket,
    stride_xm, stride_wn, stride_ym,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    # m_bucket only keys the autotuner: row counts in one power-of-two bucket share a config.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < M
    n_mask = offs_n < N
    x_ptrs = X + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
    w_ptrs = W + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None]  # W^T tile [K, N]
    acc = tl.full([BLOCK_M, BLOCK_N], 0.0, dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = offs_k + k0 < K
        x = tl.load(x_ptrs, mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=k_mask[:, None] & n_mask[None, :], other=0)
        if UPCAST:
            x = x.to(tl.float32)
        acc = tl.dot(x, w.to(x.dtype), acc, input_precision=DOT_PRECISION)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    scale = tl.load(S + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    y = acc * scale[None, :]
    y_ptrs = Y + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, y.to(Y.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


def _configs() -> list[triton.Config]:
    """Skinny tiles for decode (few rows: spread N over many programs), square ones for prefill."""
    shapes = [
        (16, 32, 128, 4, 4),
        (16, 64, 128, 4, 4),
        (16, 128, 64, 4, 4),
        (32, 64, 128, 4, 4),
        (64, 64, 64, 4, 3),
        (64, 128, 64, 4, 3),
        (128, 128, 32, 8, 3),
        (128, 64, 64, 4, 3),
    ]
    return [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
        for m, n, k, w, s in shapes
    ]


@functools.lru_cache(maxsize=1)
def _autotuned():
    return triton.autotune(configs=_configs(), key=["m_bucket", "N", "K"])(
        _int8_weight_matmul_kernel
    )


def int8_weight_matmul(
    x: torch.Tensor, weight_q: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """x `[M, K]` (fp32/fp16/bf16) @ int8 `weight_q [N, K]`^T * `scale [N]` -> `[M, N]` in x's dtype."""
    compiled = runs_compiled(x, _int8_weight_matmul_kernel)
    if x.stride(-1) != 1:
        x = x.contiguous()
    m, k = x.shape
    n = weight_q.shape[0]
    y = output_buffer((m, n), x, compiled)
    m_bucket = triton.next_power_of_2(m)
    args = (x, weight_q, scale, y, m, n, k, m_bucket, x.stride(0), weight_q.stride(0), y.stride(0))
    upcast = not compiled or x.dtype == torch.float32
    if compiled:

        def grid(meta):
            return (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))

        _autotuned()[grid](*args, UPCAST=upcast, DOT_PRECISION=dot_precision(x.dtype))
    else:
        block = (16, 32, 32)
        grid = (triton.cdiv(m, block[0]), triton.cdiv(n, block[1]))
        _int8_weight_matmul_kernel[grid](
            *args, BLOCK_M=block[0], BLOCK_N=block[1], BLOCK_K=block[2],
            UPCAST=upcast, DOT_PRECISION=dot_precision(x.dtype),
        )  # fmt: skip
    return y.to(x.dtype)
