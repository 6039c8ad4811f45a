"""Precisions the planner knows: bytes per weight, the compute dtype and the KV cache's bytes.

16- and 32-bit precisions store every weight at that width. `int8` and `fp8`
are weight-only: the decoder's linears take one byte per weight plus one fp32
scale per output channel; embeddings, LM head and norms stay 16-bit, and the
matmuls and KV cache run in bf16.
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.reference.config import ModelConfig
from llmperf.perf.roofline import body_matmul_params

SCALE_BYTES = 4  # one fp32 scale per output channel of a quantized linear


@dataclass(frozen=True)
class Precision:
    name: str
    bytes_per_weight: float
    weight_only: bool  # decoder linears quantized; embeddings, LM head and norms stay 16-bit
    compute_dtype: str  # what the matmuls run in
    kv_bytes_per_element: float


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", 4, False, "fp32", 4),
    "bf16": Precision("bf16", 2, False, "bf16", 2),
    "fp16": Precision("fp16", 2, False, "fp16", 2),
    "int8": Precision("int8", 1, True, "bf16", 2),
    "fp8": Precision("fp8", 1, True, "bf16", 2),
}


def get_precision(name: str) -> Precision:
    if name not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; valid: {', '.join(PRECISIONS)}")
    return PRECISIONS[name]


def weight_bytes_for(model: ModelConfig, precision: Precision) -> float:
    """Bytes of the weights as stored at this precision."""
    params = model.num_params()
    if not precision.weight_only:
        return float(params * precision.bytes_per_weight)
    linears = body_matmul_params(model)
    out_channels = model.num_hidden_layers * (
        model.q_size + 2 * model.kv_size + 2 * model.hidden_size + 2 * model.intermediate_size
    )
    return float(
        linears * precision.bytes_per_weight + out_channels * SCALE_BYTES + (params - linears) * 2
    )
