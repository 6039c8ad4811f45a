"""`engine.fused_ops=true`: a decoder layer's elementwise steps as one C++ op each, on CPU.

Written as torch ops, each RMSNorm is a dozen ops (widen to fp32, square, mean, rsqrt,
scale, narrow back, weight), RoPE six per tensor, SwiGLU's middle three: about 45 small ops
a layer whose per-call cost, not their bytes, is most of a small decode step outside the
Linears. `kernels/cpu/ops.cpp` does each in one pass over its rows: `rms_norm` (the first
layer's input norm), `add_rms_norm` (every other norm, with the residual add before it: the
model carries the residual stream to the next norm, engines.reference.model.DecoderLayer),
`rotary` (q and k in one call: adjacent heads of each qkv row), `silu_mul`, and `store_kv`
(the new K and V into their cache slots, a row a memcpy, where index_copy_ took milliseconds
a layer on a prefill step). Each rounds to the model's dtype where the torch code does, so
bf16 outputs match it (up to the fp32 sum order of the norm).

Installed after the weights are loaded, sharded and packed: the norms' modules are swapped
for `CpuRMSNorm` (same weight), and each attention's `rotate` and `store` and each MLP's
`act_mul` point at the operators. CPU only; not with `engine.compile` (inductor cannot trace
the operators).
"""

from __future__ import annotations

import torch
from torch import nn

from engines.reference.kernels.cpu_ops import cpu_ops
from engines.reference.model import MLP, Attention, RMSNorm


class CpuRMSNorm(nn.Module):
    """RMSNorm through `torch.ops.llmperf.rms_norm` / `add_rms_norm`; the same weight."""

    def __init__(self, norm: RMSNorm, ops):
        super().__init__()
        self.weight = norm.weight
        self.eps = norm.eps
        self._norm, self._add_norm = ops.rms_norm, ops.add_rms_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._norm(x, self.weight, self.eps)

    def add_forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._add_norm(x, residual, self.weight, self.eps)


def install_fused_ops(model: nn.Module) -> None:
    ops, _ = cpu_ops()
    rotary = ops.rotary

    def rotate(q, k, cos, sin):
        # Attention.forward's q and k are adjacent head ranges of each qkv row: one call
        # rotates both (the same cos and sin for every head of a token).
        if _adjacent_heads(q, k):
            both = rotary(q.as_strided((q.shape[0], q.shape[1] + k.shape[1], q.shape[2]), q.stride()), cos, sin)
            return both[:, : q.shape[1]], both[:, q.shape[1] :]
        return rotary(q, cos, sin), rotary(k, cos, sin)

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, RMSNorm):
                setattr(parent, name, CpuRMSNorm(child, ops))
        if isinstance(parent, Attention):
            parent.rotate = rotate
            parent.store = ops.store_kv
        elif isinstance(parent, MLP):
            parent.act_mul = ops.silu_mul


def _adjacent_heads(q: torch.Tensor, k: torch.Tensor) -> bool:
    """k's heads follow q's in memory with q's strides: [T, Hq + Hkv, D] is one strided view."""
    return (
        q.dim() == k.dim() == 3
        and q.stride() == k.stride()
        and q.shape[0] == k.shape[0]
        and q.dtype == k.dtype
        and q.shape[2] == k.shape[2]
        and k.data_ptr() == q.data_ptr() + q.shape[1] * q.stride(1) * q.element_size()
    )
