"""transformers' model for the hf engine: a checkpoint, or a preset with the reference engine's weights."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from engines.reference.config import ModelConfig
from engines.reference.weights import build_meta_model, hf_state_dict, materialize


def build_hf_model(
    config: ModelConfig,
    checkpoint: Path | None,
    dtype: torch.dtype,
    device: torch.device,
    seed: int,
    max_positions: int,
    attn_implementation: str,
):
    """transformers' model: a checkpoint as from_pretrained loads it, or a preset with the
    reference engine's seeded weights (same seed, dtype and device give the same tensors)."""
    if checkpoint is not None:
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint, dtype=dtype, attn_implementation=attn_implementation
        )
        return _without_generation_defaults(model.to(device).eval())
    reference = materialize(build_meta_model(config, max_positions), None, dtype, device, seed)
    state = hf_state_dict(reference)
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    hf_dict = config.to_hf_dict()
    hf_config = AutoConfig.for_model(hf_dict.pop("model_type"), **hf_dict)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(
            hf_config, dtype=dtype, attn_implementation=attn_implementation
        )
    model.load_state_dict(state, assign=True, strict=True)
    rotary = model.model.rotary_emb  # its frequency buffers are not weights: compute them for real
    model.model.rotary_emb = type(rotary)(config=hf_config).to(device)
    return _without_generation_defaults(model.eval().requires_grad_(False))


def _without_generation_defaults(model):
    """generate() fills every setting a call leaves unset from the model's generation config
    (a checkpoint's temperature, repetition penalty, EOS ids): clear it, so a request's
    sampling settings are all that apply and ignore_eos really ignores EOS."""
    model.generation_config = GenerationConfig()
    return model
