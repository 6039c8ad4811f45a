"""Random transformers Llama checkpoints saved to disk: the independent reference for parity tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def make_hf_llama(
    path: Path,
    *,
    vocab_size: int = 320,
    hidden_size: int = 64,
    intermediate_size: int = 160,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 1,
    head_dim: int | None = None,
    tie_word_embeddings: bool = False,
    rope_theta: float = 10000.0,
    rope_scaling: dict | None = None,
    attention_bias: bool = False,
    eos_token_id: int | None = None,
    max_shard_size: str | None = None,
    config_form: str = "v5",
    seed: int = 0,
):
    """Build, save and return a transformers LlamaForCausalLM with peaked random logits.

    The LM head is scaled up so that the top two logits are far apart: greedy
    decoding then compares models, not rounding noise.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    kwargs = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        tie_word_embeddings=tie_word_embeddings,
        attention_bias=attention_bias,
        max_position_embeddings=512,
        eos_token_id=eos_token_id,
        bos_token_id=1,
    )
    if head_dim is not None:
        kwargs["head_dim"] = head_dim
    rope = {"rope_type": "default", "rope_theta": rope_theta, **(rope_scaling or {})}
    kwargs["rope_parameters"] = rope
    torch.manual_seed(seed)
    cfg = LlamaConfig(**kwargs)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    save = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(path, **save)
    if config_form == "v4":
        _rewrite_as_v4(path / "config.json")
    return model


def _rewrite_as_v4(config_file: Path) -> None:
    """transformers v4 spelled rope settings as top-level rope_theta + rope_scaling."""
    d = json.loads(config_file.read_text())
    rope = d.pop("rope_parameters")
    d["rope_theta"] = rope.pop("rope_theta")
    d["rope_scaling"] = None if rope.get("rope_type") == "default" else rope
    config_file.write_text(json.dumps(d))
