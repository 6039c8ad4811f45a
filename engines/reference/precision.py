"""Precisions by name (`precision=`): the dtype the model computes in, and how weights are stored.

- `fp32`, `bf16`, `fp16`: the whole model in that dtype.
- `int8`: weight-only int8, per-output-channel symmetric scales; every Linear
  and the token embedding (a tied LM head shares the embedding's table).
- `fp8`: weight-only float8 e4m3, per-output-channel scales, for the layers'
  Linears; the token table (embedding and LM head) is int8: the same bytes,
  and an LM head's error lands on the logits unfiltered, where e4m3's 3-bit
  mantissa (up to 6% off per weight, against int8's half step) cost the most
  top-1 agreement (on `tiny`, 91% with an e4m3 table, 97% with int8).

Activations of the quantized precisions are bf16 on GPU. On CPU, int8 also
computes in bf16: torch's fused int8 matmul is fast only with bf16 activations
(on a 2-core AVX-512-BF16 EPYC, a stack of qwen2.5-0.5b's Linear layers at
batch 1 took 23 ms with int8/bf16, 59 ms with bf16 weights, 117 ms with fp32,
and its fp32-activation path was slower than fp32 weights). fp8 on CPU
computes in fp32, the dtype its dequantized weights come out in.

Use: build the model, `model.to(precision.compute_dtype(device))`, then
`quantize_model(model, name)` (order does not matter: scales follow the
model's float dtype, codes are integers `.to(dtype)` leaves alone).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from engines.reference.quant import QuantizedLinear, get_weight_format, quantize_modules
from llmperf.registry import Registry


@dataclass(frozen=True)
class Precision:
    name: str
    gpu_dtype: torch.dtype
    cpu_dtype: torch.dtype
    weight_format: str | None = None  # a key of quant.WEIGHT_FORMATS; None keeps float weights
    table_format: str | None = None  # embedding and LM head; None: as weight_format

    def compute_dtype(self, device: torch.device | str) -> torch.dtype:
        """The dtype of activations and of the weights left in float."""
        return self.gpu_dtype if torch.device(device).type == "cuda" else self.cpu_dtype

    @property
    def is_quantized(self) -> bool:
        return self.weight_format is not None


PRECISIONS: Registry[Precision] = Registry(
    "precision",
    {
        "fp32": Precision("fp32", torch.float32, torch.float32),
        "bf16": Precision("bf16", torch.bfloat16, torch.bfloat16),
        "fp16": Precision("fp16", torch.float16, torch.float16),
        "int8": Precision("int8", torch.bfloat16, torch.bfloat16, weight_format="int8"),
        "fp8": Precision(
            "fp8", torch.bfloat16, torch.float32, weight_format="fp8", table_format="int8"
        ),
    },
)


def get_precision(name: str) -> Precision:
    return PRECISIONS.get(name)


def compute_dtype(name: str, device: torch.device | str) -> torch.dtype:
    return get_precision(name).compute_dtype(device)


def quantize_model(model: nn.Module, precision: str) -> None:
    """Store `model`'s Linear and Embedding weights in `precision`'s format, in place.

    A no-op for the float precisions (cast the model to the compute dtype instead).
    """
    spec = get_precision(precision)
    if spec.weight_format is not None:
        table_format = spec.table_format or spec.weight_format
        quantize_modules(
            model, get_weight_format(spec.weight_format), get_weight_format(table_format)
        )


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the weights as stored: parameters plus quantized codes and scales, each once.

    Buffers of other layers (RoPE tables, masks) are not weights and do not count.
    Works on a meta-device model.
    """
    tensors = {id(p): p for p in model.parameters()}
    for module in model.modules():
        if isinstance(module, QuantizedLinear):
            tensors.update((id(b), b) for b in module.buffers(recurse=False))
    return sum(t.numel() * t.element_size() for t in tensors.values())
