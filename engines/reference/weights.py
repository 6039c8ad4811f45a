"""Building the model: on the meta device first, then seeded random weights or a checkpoint.

Checkpoints are local Hugging Face folders: `config.json` plus `model.safetensors`
or shards listed in `model.safetensors.index.json`. Tensors are read lazily, one
at a time, straight into the parameters (never pickle).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from engines.reference.config import ModelConfig
from engines.reference.model import LlamaForCausalLM
from engines.reference.presets import get_preset


def resolve_model(model: str) -> tuple[ModelConfig, Path | None]:
    """A preset name or a checkpoint folder -> (config, checkpoint folder or None)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return ModelConfig.from_path(path), path
    if "/" in model or model.startswith("."):
        raise FileNotFoundError(f"model path {model!r} is not a folder")
    return get_preset(model), None


def build_meta_model(cfg: ModelConfig, max_positions: int) -> LlamaForCausalLM:
    """The model's shapes without storage: free at any size."""
    with torch.device("meta"):
        return LlamaForCausalLM(cfg, max_positions)


def materialize(
    model: LlamaForCausalLM,
    checkpoint: Path | None,
    dtype: torch.dtype,
    device: torch.device,
    seed: int,
) -> LlamaForCausalLM:
    model = model.to_empty(device=device).to(dtype)
    if model.config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    if checkpoint is None:
        init_random(model, seed)
    else:
        load_checkpoint(model, checkpoint)
    model.reset_rotary()
    return model.eval().requires_grad_(False)


@torch.no_grad()
def init_random(model: LlamaForCausalLM, seed: int) -> None:
    """Seeded random weights: the same for a given seed and device type.

    Linear weights follow the usual N(0, initializer_range); the embedding and
    LM head are wider, N(0, 4/sqrt(hidden)), so logits have a spread like a
    trained model's and greedy decoding is not decided by rounding noise.
    """
    cfg = model.config
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    wide_std = 4.0 / cfg.hidden_size**0.5
    seen: set[int] = set()
    for name, param in model.named_parameters(remove_duplicate=True):
        if id(param) in seen:
            continue
        seen.add(id(param))
        if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
            param.fill_(1.0)
            continue
        std = wide_std if ("embed_tokens" in name or "lm_head" in name) else cfg.initializer_range
        param.normal_(0.0, std, generator=gen)


def checkpoint_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        with index.open() as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [path / s for s in shards]
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    raise FileNotFoundError(f"no model.safetensors or model.safetensors.index.json in {path}")


@torch.no_grad()
def load_checkpoint(model: LlamaForCausalLM, path: Path) -> None:
    from safetensors import safe_open

    params = dict(model.named_parameters(remove_duplicate=False))
    loaded: set[str] = set()
    for file in checkpoint_files(path):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():
                if name not in params:
                    if "rotary_emb" in name:
                        continue
                    raise ValueError(f"checkpoint tensor {name!r} has no place in the model ({file.name})")
                tensor = f.get_tensor(name)
                if tensor.shape != params[name].shape:
                    raise ValueError(
                        f"checkpoint tensor {name!r} has shape {tuple(tensor.shape)}, "
                        f"the model expects {tuple(params[name].shape)}"
                    )
                params[name].copy_(tensor)
                loaded.add(name)
    if model.config.tie_word_embeddings:
        loaded.add("lm_head.weight")
        if "lm_head.weight" in loaded and "model.embed_tokens.weight" not in loaded:
            params["model.embed_tokens.weight"].copy_(params["lm_head.weight"])
            loaded.add("model.embed_tokens.weight")
    missing = sorted(set(params) - loaded)
    if missing:
        raise ValueError(f"checkpoint {path} lacks {len(missing)} tensors, e.g. {missing[:3]}")
