"""`engine.fused_ops=true`: a decoder layer's elementwise steps as one C++ op each, on CPU.

Written as torch ops, each RMSNorm is a dozen ops (widen to fp32, square, mean, rsqrt,
scale, narrow back, weight), RoPE six per tensor, SwiGLU's middle three: about 45 small ops
a layer whose per-call cost, not their bytes, is most of a small decode step outside the
Linears. `kernels/cpu/ops.cpp` does each in one pass over its rows: `rms_norm`,
`add_rms_norm` (the residual add before the post-attention norm, fused into it), `rotary`
and `silu_mul`. Each rounds to the model's dtype where the torch code does, so bf16 outputs
match it (up to the fp32 sum order of the norm).

Installed after the weights are loaded, sharded and packed: the norms' modules are swapped
for `CpuRMSNorm` (same weight), and each attention's `rotate` and each MLP's `act_mul`
point at the operators. CPU only; not with `engine.compile` (inductor cannot trace the
operators).
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
        return rotary(q, cos, sin), rotary(k, cos, sin)

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, RMSNorm):
                setattr(parent, name, CpuRMSNorm(child, ops))
        if isinstance(parent, Attention):
            parent.rotate = rotate
        elif isinstance(parent, MLP):
            parent.act_mul = ops.silu_mul
