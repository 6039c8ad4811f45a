"""Weight layouts that make CPU matmuls run near memory bandwidth.

Decode at small batch is a stream of matrix-vector products over every weight.
On CPUs, `F.linear` on a plain [out, in] weight reaches about half the read
bandwidth a large reduction gets, and far less for a few rows at once (MKL's
small-M GEMM). oneDNN's inner product on a weight reordered once into its
blocked layout streams at close to the reduction's rate, and keeps up at batch
8 to 32. `optimize_cpu_layout` packs every float `nn.Linear` that way where
torch has oneDNN, and falls back to storing weights column-major (same shape,
transposed strides), the faster layout for MKL's GEMV.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

PACK_BATCH_HINT = 8  # oneDNN picks its blocking for this many rows; 1..64 measured alike at batch 1


class PackedLinear(nn.Module):
    """A linear layer whose weight lives in oneDNN's blocked layout (an opaque mkldnn tensor)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), PACK_BATCH_HINT)
        self.weight = nn.Parameter(packed, requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")


@functools.cache
def can_pack(dtype: torch.dtype) -> bool:
    """Whether this torch build can pack and multiply weights of `dtype` with oneDNN."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        w = torch.ones(16, 16, dtype=dtype)
        out = torch.ops.mkldnn._linear_pointwise(
            torch.ones(2, 16, dtype=dtype), torch.ops.mkldnn._reorder_linear_weight(w, 2), None, "none", [], ""
        )
    except (AttributeError, RuntimeError):
        return False
    return bool(torch.all(out == 16))


@torch.no_grad()
def optimize_cpu_layout(model: nn.Module) -> None:
    """Pack every float nn.Linear for oneDNN (else store it column-major), in place.

    Quantized layers are left alone (they have kernels of their own). Call it
    last, after loading, sharding and quantizing: packed weights are opaque.
    """
    # The token table's own nn.Embedding (under tensor parallelism it sits inside the
    # vocab-parallel wrapper).
    embedding = next((m for m in model.modules() if type(m) is nn.Embedding), None)
    tied_table = getattr(embedding, "weight", None)
    head_packed = False
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not nn.Linear:
                continue
            if can_pack(child.weight.dtype):
                if child.weight is tied_table:
                    head_packed = True
                setattr(parent, name, PackedLinear(child))
            else:
                weight = nn.Parameter(_column_major(child.weight), requires_grad=False)
                if child.weight is tied_table:
                    embedding.weight = weight  # the lookup reads the same (strided) table
                child.weight = weight
    if head_packed:
        # The packed head can no longer hand out rows, so the lookup keeps the plain table,
        # as a buffer: gathered a few rows per step, never streamed, and counted once (as
        # the head) in weight_bytes.
        del embedding.weight
        embedding.register_buffer("weight", tied_table.detach(), persistent=False)


def _column_major(w: torch.Tensor) -> torch.Tensor:
    """Same shape, transposed strides: `F.linear` then hands BLAS a plain [in, out] matrix."""
    return w.detach().t().contiguous().t()


def has_opaque_weights(model: nn.Module) -> bool:
    return any(isinstance(m, PackedLinear) for m in model.modules())
