"""Quantized weight formats, one module each, chosen by name.

Each format is a `QuantizedLinear` subclass with per-output-row scales, which
also serves as the table of a `QuantizedEmbedding`. `quantize_modules` swaps a
model's `nn.Linear` and `nn.Embedding` layers for them in place.
"""

from __future__ import annotations

import importlib

import torch.nn as nn

from engines.reference.quant.base import QuantizedEmbedding, QuantizedLinear

WEIGHT_FORMATS: dict[str, str] = {
    "int8": "engines.reference.quant.int8:Int8Linear",
    "fp8": "engines.reference.quant.fp8:Fp8Linear",
}


def get_weight_format(name: str) -> type[QuantizedLinear]:
    if name not in WEIGHT_FORMATS:
        raise ValueError(f"unknown weight format {name!r}; valid: {', '.join(WEIGHT_FORMATS)}")
    module_name, class_name = WEIGHT_FORMATS[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def quantize_modules(model: nn.Module, linear_cls: type[QuantizedLinear]) -> None:
    """Replace every `nn.Linear` and `nn.Embedding` of `model` by `linear_cls` layers.

    A Linear whose weight *is* an embedding's weight (tied LM head) becomes the
    very table the embedding reads, so the weight is quantized and stored once.
    """
    tables: dict[int, QuantizedLinear] = {}

    def table_for(weight: nn.Parameter, bias: nn.Parameter | None = None) -> QuantizedLinear:
        if id(weight) not in tables:
            tables[id(weight)] = linear_cls.from_weight(weight, bias)
        elif bias is not None and tables[id(weight)].bias is not bias:
            raise ValueError("a Linear sharing its weight with another layer has its own bias")
        return tables[id(weight)]

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Embedding):
                setattr(parent, name, QuantizedEmbedding(table_for(child.weight)))
            elif isinstance(child, nn.Linear):
                setattr(parent, name, table_for(child.weight, child.bias))


__all__ = [
    "WEIGHT_FORMATS",
    "QuantizedEmbedding",
    "QuantizedLinear",
    "get_weight_format",
    "quantize_modules",
]
