"""Quantized weight formats, one module each, chosen by name.

Each format is a `QuantizedLinear` subclass with per-output-row scales, which
also serves as the table of a `QuantizedEmbedding`. `quantize_modules` swaps a
model's `nn.Linear` and `nn.Embedding` layers for them in place.
"""

from __future__ import annotations

import torch.nn as nn

from engines.reference.quant.base import QuantizedEmbedding, QuantizedLinear
from llmperf.registry import Registry

WEIGHT_FORMATS: Registry[type[QuantizedLinear]] = Registry(
    "weight format",
    {
        "int8": "engines.reference.quant.int8:Int8Linear",
        "fp8": "engines.reference.quant.fp8:Fp8Linear",
    },
)


def get_weight_format(name: str) -> type[QuantizedLinear]:
    return WEIGHT_FORMATS.get(name)


def quantize_modules(
    model: nn.Module,
    linear_cls: type[QuantizedLinear],
    table_cls: type[QuantizedLinear] | None = None,
) -> None:
    """Replace every `nn.Linear` and `nn.Embedding` of `model` by quantized layers.

    Token tables, the embedding and the LM head (the Linear named `lm_head`, or
    inside a module so named as under tensor parallelism, or sharing an
    embedding's weight), take `table_cls` (default `linear_cls`); the other
    Linears `linear_cls`. A tied LM head becomes the very table the embedding
    reads, so the weight is quantized and stored once.
    """
    table_cls = table_cls or linear_cls
    embedding_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    quantized: dict[int, QuantizedLinear] = {}

    def quantize(cls, weight: nn.Parameter, bias: nn.Parameter | None = None) -> QuantizedLinear:
        if id(weight) not in quantized:
            quantized[id(weight)] = cls.from_weight(weight, bias)
        elif bias is not None and quantized[id(weight)].bias is not bias:
            raise ValueError("a Linear sharing its weight with another layer has its own bias")
        return quantized[id(weight)]

    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            qualified = f"{parent_name}.{name}" if parent_name else name
            if isinstance(child, nn.Embedding):
                setattr(parent, name, QuantizedEmbedding(quantize(table_cls, child.weight)))
            elif isinstance(child, nn.Linear):
                is_table = (
                    qualified.split(".")[0] == "lm_head" or id(child.weight) in embedding_weights
                )
                cls = table_cls if is_table else linear_cls
                setattr(parent, name, quantize(cls, child.weight, child.bias))


__all__ = [
    "WEIGHT_FORMATS",
    "QuantizedEmbedding",
    "QuantizedLinear",
    "get_weight_format",
    "quantize_modules",
]
