"""What every quantized weight format shares: one scale per output row.

A `QuantizedLinear` stores `weight_q [out, in]` in a narrow dtype and
`scale [out]` in the model's float dtype, with w ~= weight_q * scale[:, None].
Quantizing per row makes the same table serve two uses: the LM head multiplies
by it, the token embedding reads rows of it (`rows`), so tied embeddings stay
tied and are stored once.

Scales follow the model's float dtype (`model.to(dtype)` casts them); the
narrow weights are stored in integer dtypes so that it never touches them.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class QuantizedLinear(nn.Module):
    """y = x W^T + b with W stored quantized; subclasses say how to store and multiply."""

    code_dtype: torch.dtype  # what `weight_q` is stored in (what the bytes account reads)

    def __init__(self, weight_q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight_q.shape
        self.register_buffer("weight_q", weight_q)
        self.register_buffer("scale", scale)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)

    @classmethod
    def quantize(cls, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight_q, scale) for a float weight `[out, in]`."""
        raise NotImplementedError

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> QuantizedLinear:
        weight_q, scale = cls.quantize(weight.detach())
        return cls(weight_q, scale, bias)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x `[M, in]` @ W^T -> `[M, out]` in x's dtype."""
        raise NotImplementedError

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Dequantized rows `ids` of W, `[*ids.shape, in]` in the scale's dtype."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.matmul(x.reshape(-1, self.in_features)).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class QuantizedEmbedding(nn.Module):
    """Token embedding that looks rows up in a row-quantized table (shared with a tied LM head)."""

    def __init__(self, table: QuantizedLinear):
        super().__init__()
        self.table = table
        self.num_embeddings, self.embedding_dim = table.out_features, table.in_features

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table.rows(ids)


def symmetric_row_scale(weight: torch.Tensor, max_code: float) -> torch.Tensor:
    """Per-row scale mapping the row's largest magnitude to `max_code`, rounded to the weight's
    dtype first, so codes are computed against the scale that will be stored."""
    absmax = weight.float().abs().amax(dim=1)
    scale = torch.where(absmax > 0, absmax / max_code, 1.0)  # an all-zero row codes to zeros
    return scale.to(weight.dtype).clamp(min=torch.finfo(weight.dtype).tiny)
