"""What a model holds and does per token: the one account of bytes and FLOPs.

The roofline, the prediction, the cost split and the planner all read it; it
is tested against the bytes the reference engine actually holds.

Weights, by precision (`engines.reference.precision`: the one list of precisions):
- a float precision stores every parameter in its compute dtype;
- a quantized one (`int8`, `fp8`) stores every Linear and the token table as
  codes (the format's code dtype) plus one scale per output row in the float
  dtype; norms and biases stay in the float dtype. A tied LM head is the
  embedding's table, stored once. The float dtype is the compute dtype on the
  device: `fp8` computes in fp32 on a CPU, so its scales and norms take 4 bytes
  there and 2 on a GPU.

Tensor parallelism over `tp` ranks (engines/reference/tp.py): q/k/v, gate/up
and the vocabulary are split by rows, o_proj and down_proj by columns (their
output rows, scales and biases stay whole on every rank), norms are replicated.
A vocabulary that `tp` does not divide is replicated too. Ranks hold equal
bytes; totals are over all ranks (what a step reads in all).

KV cache: K and V of every layer, in the compute dtype, each rank holding its
own KV heads.

FLOPs: 2 x decoder matmul parameters per token, 2 x vocab x hidden per logits
row, 4 x layers x q_size per (query, attended position) pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.reference.config import ModelConfig
from engines.reference.precision import Precision, get_precision
from engines.reference.quant import get_weight_format
from llmperf.hardware.profile import canonical_dtype


@dataclass(frozen=True)
class Footprint:
    """A model's bytes at one precision on one kind of device, sharded over `tp` ranks."""

    precision: str
    compute_dtype: str  # canonical name: "bf16", "fp32", ...
    tp: int
    weight_bytes_per_rank: float
    kv_bytes_per_token_per_rank: float
    kv_bytes_per_element: float

    @property
    def weight_bytes(self) -> float:
        """All ranks' weights: what one step reads in all."""
        return self.weight_bytes_per_rank * self.tp

    @property
    def kv_bytes_per_token(self) -> float:
        return self.kv_bytes_per_token_per_rank * self.tp


def footprint(model: ModelConfig, precision: str, device: str = "cuda", tp: int = 1) -> Footprint:
    """The account of `model` stored at `precision` on `device` ("cpu" or "cuda"), over `tp` ranks."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    for name in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        if getattr(model, name) % tp:  # the engine shards whole heads and channels
            raise ValueError(f"tp={tp} must divide {name} ({getattr(model, name)}) of {model.name}")
    spec = get_precision(precision)
    dtype = spec.compute_dtype(device)
    float_bytes = dtype.itemsize
    weights = rank_weight_bytes(model, float_bytes, tp, *_code_bytes(spec))
    return Footprint(
        precision=spec.name,
        compute_dtype=canonical_dtype(str(dtype)),
        tp=tp,
        weight_bytes_per_rank=weights,
        kv_bytes_per_token_per_rank=model.kv_bytes_per_token(float_bytes) / tp,
        kv_bytes_per_element=float(float_bytes),
    )


@dataclass(frozen=True)
class ModelWork:
    """What each token, logits row and attention pair costs: the roofline's per-model constants."""

    body_matmul_params: float  # decoder linears (attention and MLP), paid per token
    lm_head_params: float  # vocab x hidden, paid per logits row
    attention_flops_per_pair: float  # 4 x layers x q_size
    weight_bytes: float
    kv_bytes_per_token: float

    @classmethod
    def of(cls, model: ModelConfig, weight_bytes: float, kv_bytes_per_element: float) -> ModelWork:
        return cls(
            body_matmul_params=float(body_matmul_params(model)),
            lm_head_params=float(model.vocab_size * model.hidden_size),
            attention_flops_per_pair=4.0 * model.num_hidden_layers * model.q_size,
            weight_bytes=float(weight_bytes),
            kv_bytes_per_token=model.kv_bytes_per_token(kv_bytes_per_element),
        )


def rank_weight_bytes(
    model: ModelConfig,
    float_bytes: float,
    tp: int = 1,
    code_bytes: float | None = None,
    table_code_bytes: float | None = None,
) -> float:
    """One rank's weight bytes. `code_bytes` None: every parameter in `float_bytes`;
    else Linears store codes of `code_bytes` (token tables `table_code_bytes`) plus a
    `float_bytes` scale per output row."""
    m, h, w = model, model.hidden_size, tp
    qkv_rows = (m.q_size + 2 * m.kv_size) / w
    gate_up_rows = 2 * m.intermediate_size / w
    matmul = m.num_hidden_layers * h * (qkv_rows + m.q_size / w + gate_up_rows + m.intermediate_size / w)
    out_rows = m.num_hidden_layers * (qkv_rows + h + gate_up_rows + h)
    biases = m.num_hidden_layers * (
        (qkv_rows if m.attention_bias else 0)
        + (h if m.attention_out_bias else 0)
        + (gate_up_rows + h if m.mlp_bias else 0)
    )
    norms = (2 * m.num_hidden_layers + 1) * h
    vocab_rows = m.vocab_size / w if m.vocab_size % w == 0 else m.vocab_size
    tables = 1 if m.tie_word_embeddings else 2
    if code_bytes is None:
        return (matmul + biases + norms + tables * vocab_rows * h) * float_bytes
    table_code_bytes = code_bytes if table_code_bytes is None else table_code_bytes
    return (
        matmul * code_bytes
        + out_rows * float_bytes
        + tables * vocab_rows * (h * table_code_bytes + float_bytes)
        + (biases + norms) * float_bytes
    )


def body_matmul_params(model: ModelConfig) -> int:
    """Parameters of the decoder layers' linears (no embeddings, LM head or norms)."""
    h = model.hidden_size
    attn = h * (model.q_size + 2 * model.kv_size) + model.q_size * h
    mlp = 3 * h * model.intermediate_size
    return model.num_hidden_layers * (attn + mlp)


def device_of(kind: str) -> str:
    """The torch device type a hardware profile's kind ("gpu", "cpu") computes on."""
    return "cpu" if kind == "cpu" else "cuda"


def _code_bytes(spec: Precision) -> tuple[float | None, float | None]:
    if spec.weight_format is None:
        return None, None
    table = spec.table_format or spec.weight_format
    return (
        float(get_weight_format(spec.weight_format).code_dtype.itemsize),
        float(get_weight_format(table).code_dtype.itemsize),
    )
