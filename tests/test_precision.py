"""The precision registry, quantize_model and weight_bytes against hand-computed byte counts."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from engines.reference.config import ModelConfig
from engines.reference.precision import (
    PRECISIONS,
    compute_dtype,
    get_precision,
    quantize_model,
    weight_bytes,
)
from engines.reference.presets import get_preset
from engines.reference.quant import QuantizedEmbedding
from engines.reference.quant.fp8 import Fp8Linear
from engines.reference.quant.int8 import Int8Linear


class Norm(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, q, kv = cfg.hidden_size, cfg.q_size, cfg.kv_size
        self.qkv_proj = nn.Linear(h, q + 2 * kv, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(q, h, bias=False)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)


class Block(nn.Module):
    """The parameter layout of the reference model's decoder layer (q/k/v and gate/up stacked)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = Norm(cfg.hidden_size)
        self.post_attention_layernorm = Norm(cfg.hidden_size)


class Decoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = Norm(cfg.hidden_size)


class Skeleton(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.model = Decoder(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("inv_freq", torch.ones(cfg.head_dim // 2))  # not a weight


def skeleton(cfg: ModelConfig, dtype: torch.dtype) -> Skeleton:
    with torch.device("meta"):
        return Skeleton(cfg).to(dtype)


def quantized_bytes_by_hand(cfg: ModelConfig, code_bytes: int, scale_bytes: int) -> int:
    """Codes for every Linear and the embedding, one scale per output row, float biases and norms."""
    h, q, kv, i, v, n = (
        cfg.hidden_size, cfg.q_size, cfg.kv_size, cfg.intermediate_size, cfg.vocab_size,
        cfg.num_hidden_layers,
    )  # fmt: skip
    codes = n * (h * (q + 2 * kv) + q * h + 3 * h * i)
    rows = n * (q + 2 * kv + h + 2 * i + h)
    biases = n * (q + 2 * kv) if cfg.attention_bias else 0
    norms = (2 * n + 1) * h
    tables = 1 if cfg.tie_word_embeddings else 2
    return (
        codes * code_bytes
        + (rows + tables * v) * scale_bytes
        + tables * v * h * code_bytes
        + (biases + norms) * scale_bytes
    )


def test_unknown_precision_names_the_valid_ones():
    with pytest.raises(
        ValueError, match=r"unknown precision 'int3'; valid: fp32, bf16, fp16, int8, fp8"
    ):
        get_precision("int3")


@pytest.mark.parametrize(
    "name,cpu,cuda",
    [
        ("fp32", torch.float32, torch.float32),
        ("bf16", torch.bfloat16, torch.bfloat16),
        ("fp16", torch.float16, torch.float16),
        ("int8", torch.bfloat16, torch.bfloat16),
        ("fp8", torch.float32, torch.bfloat16),
    ],
)
def test_compute_dtype_per_device(name, cpu, cuda):
    assert compute_dtype(name, "cpu") == cpu
    assert compute_dtype(name, torch.device("cuda", 0)) == cuda
    assert get_precision(name).is_quantized == (name in ("int8", "fp8"))


@pytest.mark.parametrize("name", ["fp32", "bf16", "fp16"])
def test_float_precisions_leave_the_model_alone(name):
    cfg = get_preset("tiny")
    model = skeleton(cfg, PRECISIONS[name].cpu_dtype)
    quantize_model(model, name)
    assert type(model.lm_head) is nn.Linear and type(model.model.embed_tokens) is nn.Embedding
    assert weight_bytes(model) == cfg.num_params() * PRECISIONS[name].cpu_dtype.itemsize


@pytest.mark.parametrize(
    "name,cls,table_cls", [("int8", Int8Linear, Int8Linear), ("fp8", Fp8Linear, Int8Linear)]
)
@pytest.mark.parametrize("preset", ["tiny", "qwen2.5-0.5b"])  # untied and tied
def test_quantize_model_swaps_every_linear_and_the_embedding(name, cls, table_cls, preset):
    cfg = get_preset(preset)
    model = skeleton(cfg, torch.bfloat16)
    quantize_model(model, name)
    layer = model.model.layers[0]
    swapped = [layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj]
    assert all(type(m) is cls for m in [*swapped, layer.mlp.down_proj])
    assert type(model.lm_head) is table_cls
    assert isinstance(model.model.embed_tokens, QuantizedEmbedding)
    assert type(model.model.embed_tokens.table) is table_cls
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert weight_bytes(model) == quantized_bytes_by_hand(cfg, code_bytes=1, scale_bytes=2)


def test_untied_model_stores_embedding_and_head_separately():
    cfg = get_preset("tiny")  # tie_word_embeddings=False
    model = skeleton(cfg, torch.float32)
    quantize_model(model, "int8")
    assert model.model.embed_tokens.table is not model.lm_head
    assert weight_bytes(model) == quantized_bytes_by_hand(cfg, code_bytes=1, scale_bytes=4)


def test_int8_weights_of_qwen2_5_0_5b_are_at_most_55_percent_of_bf16():
    cfg = get_preset("qwen2.5-0.5b")
    bf16 = skeleton(cfg, torch.bfloat16)
    assert weight_bytes(bf16) == 2 * cfg.num_params() == 988_065_536
    quantize_model(bf16, "int8")
    ratio = weight_bytes(bf16) / 988_065_536
    assert 0.50 < ratio <= 0.55  # 494.0M codes + 0.6M bf16 scales, biases and norms


def test_quantized_model_keeps_working_after_a_cast():
    cfg = ModelConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Skeleton(cfg)
    table = model.lm_head.weight.detach().clone()
    quantize_model(model, "int8")
    model.to(torch.bfloat16)
    ids = torch.tensor([1, 5, 63])
    rows = model.model.embed_tokens(ids)
    assert rows.dtype == torch.bfloat16
    step = model.lm_head.scale[ids].float().unsqueeze(-1)
    # half a code step, then bf16 rounding of the row values and of the scale
    assert ((rows.float() - table[ids]).abs() <= step / 2 + 2.0**-7 * table[ids].abs()).all()
    h = torch.randn(2, 32).bfloat16()
    logits = model.lm_head(h).float()
    rows = model.model.embed_tokens(torch.arange(64)).float()  # bf16-rounded codes x scales
    product = h.float() @ rows.T
    # rounding of the rows to bf16 and of the logits, relative to the terms' magnitudes
    assert ((logits - product).abs() <= 2.0**-7 * (h.float().abs() @ rows.abs().T)).all()
