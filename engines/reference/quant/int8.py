"""int8 weight-only: per-output-channel symmetric codes in [-127, 127].

The matmul never materialises the float weight where a fused kernel exists:
- CPU, bf16 activations: `torch._weight_int8pack_mm` (oneDNN/AVX-512, int8
  weights widened in registers). Its bf16 path needs in_features % 16 == 0
  (other widths return NaN or crash in torch 2.13) and its fp32/fp16 paths are
  slower than dequantizing, so those cases dequantize the weight per call;
- CUDA: a Triton kernel (`engines.reference.kernels.int8_matmul`) that widens
  int8 tiles to the activation dtype on the way into `tl.dot`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engines.reference.quant.base import QuantizedLinear, symmetric_row_scale

INT8_MAX_CODE = 127


class Int8Linear(QuantizedLinear):
    code_dtype = torch.int8

    @classmethod
    def quantize(cls, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = symmetric_row_scale(weight, INT8_MAX_CODE)
        codes = torch.round(weight.float() / scale.float()[:, None])
        # Row-major whatever the float weight's layout: the fused kernels read rows.
        return codes.clamp(-INT8_MAX_CODE, INT8_MAX_CODE).to(cls.code_dtype).contiguous(), scale

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale.to(x.dtype)
        if x.device.type == "cuda":
            from engines.reference.kernels.int8_matmul import int8_weight_matmul

            return int8_weight_matmul(x, self.weight_q, scale)
        if x.dtype == torch.bfloat16 and self.in_features % 16 == 0:
            return torch._weight_int8pack_mm(x.contiguous(), self.weight_q, scale)
        return F.linear(x, self.weight_q.to(x.dtype)) * scale

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight_q).to(self.scale.dtype) * self.scale[ids].unsqueeze(-1)
