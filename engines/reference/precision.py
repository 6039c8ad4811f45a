"""Precisions: the dtype the model computes in, and how its weights are stored."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Precision:
    name: str
    dtype: torch.dtype

    def compute_dtype(self, device: torch.device) -> torch.dtype:
        return self.dtype


PRECISIONS = {
    "fp32": Precision("fp32", torch.float32),
    "bf16": Precision("bf16", torch.bfloat16),
    "fp16": Precision("fp16", torch.float16),
}


def get_precision(name: str) -> Precision:
    if name not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; valid: {', '.join(PRECISIONS)}")
    return PRECISIONS[name]


def quantize_model(model: nn.Module, precision: str) -> None:
    """16- and 32-bit precisions store weights as they compute: nothing to do."""


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the weights as stored: parameters and saved buffers (not RoPE tables)."""
    seen = {}
    for t in list(model.parameters()) + list(model.state_dict().values()):
        seen[t.data_ptr()] = t.numel() * t.element_size()
    return sum(seen.values())
