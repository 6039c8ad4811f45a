"""fp8 weight-only: float8 e4m3 (`torch.float8_e4m3fn`) codes, per-output-channel scales.

Codes are stored as uint8 bit patterns, so that `model.to(dtype)` (which casts
every floating tensor, fp8 included) leaves them alone; `.view` makes them fp8
again for free.

- CUDA, compute capability >= 8.9 (Ada, Hopper, Blackwell): `torch._scaled_mm`
  on the fp8 tensor cores. Those multiply fp8 by fp8, so activations are
  quantized per row on the fly (rowwise scales, bf16 out); where that call is
  refused, the layer falls back to dequantizing.
- Elsewhere the weight is dequantized every call. torch's own fp8 -> float cast
  on CPU is scalar code (~3 ns per weight); instead the e4m3 bits are moved
  into an fp16's bit positions with three integer ops, which is exact (every
  e4m3 value, subnormals included, is an fp16 times 2^8) and ~10x faster, then
  widened to fp32 for the matmul.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engines.reference.quant.base import QuantizedLinear, symmetric_row_scale

FP8_MAX = 448.0  # largest finite float8_e4m3fn
FP8_TO_FP16_BITS_SCALE = 256.0  # 2 ** (fp16 exponent bias 15 - e4m3 bias 7)


def e4m3_bits_to_fp16(bits: torch.Tensor) -> torch.Tensor:
    """uint8 e4m3 bit patterns -> fp16 holding value / 256, exactly (NaN codes excepted)."""
    wide = bits.view(torch.int8).to(torch.int16)  # sign-extends: bits 8-15 copy the sign
    # Shifting by 7 puts the exponent and mantissa under fp16's, the sign at bit 15 and a
    # stray copy of it at bit 14, which the mask clears.
    return ((wide << 7) & ~0x4000).view(torch.float16)


class Fp8Linear(QuantizedLinear):
    code_dtype = torch.uint8  # e4m3 bit patterns

    _scaled_mm_refused = False  # set once a GPU refuses the rowwise-scaled call

    @classmethod
    def quantize(cls, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = symmetric_row_scale(weight, FP8_MAX)
        codes = (weight.float() / scale.float()[:, None]).clamp(-FP8_MAX, FP8_MAX)
        return codes.to(torch.float8_e4m3fn).view(cls.code_dtype).contiguous(), scale

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        """The full weight `[out, in]` in `dtype` (scales applied)."""
        scale = self.scale.to(torch.float32) * FP8_TO_FP16_BITS_SCALE
        return (e4m3_bits_to_fp16(self.weight_q).float() * scale[:, None]).to(dtype)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cuda" and self._can_use_scaled_mm(x):
            try:
                return self._scaled_matmul(x)
            except RuntimeError:
                Fp8Linear._scaled_mm_refused = True
        if x.device.type == "cuda":
            return F.linear(x, self.dequantized_weight(x.dtype))
        # Scale the output rows rather than the weight: one multiply per output, not per weight.
        weight = e4m3_bits_to_fp16(self.weight_q).float()
        y = F.linear(x.float(), weight) * (self.scale.float() * FP8_TO_FP16_BITS_SCALE)
        return y.to(x.dtype)

    def _can_use_scaled_mm(self, x: torch.Tensor) -> bool:
        return (
            not Fp8Linear._scaled_mm_refused
            and x.dtype == torch.bfloat16
            and torch.cuda.get_device_capability(x.device) >= (8, 9)
            and self.in_features % 16 == 0
            and self.out_features % 16 == 0
        )

    def _scaled_matmul(self, x: torch.Tensor) -> torch.Tensor:
        x_scale = (x.float().abs().amax(dim=1, keepdim=True) / FP8_MAX).clamp(min=1e-12)
        x_q = (x.float() / x_scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        weight = self.weight_q.view(torch.float8_e4m3fn)
        return torch._scaled_mm(
            x_q,
            weight.t(),
            scale_a=x_scale,
            scale_b=self.scale.float()[None, :],
            out_dtype=torch.bfloat16,
        )

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        codes = e4m3_bits_to_fp16(F.embedding(ids, self.weight_q)).float()
        scale = self.scale[ids].float().unsqueeze(-1) * FP8_TO_FP16_BITS_SCALE
        return (codes * scale).to(self.scale.dtype)
