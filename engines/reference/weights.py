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


# Checkpoint projections that live stacked in one of our parameters: name -> (ours, part index).
STACKED = {
    "q_proj": ("qkv_proj", 0),
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}


def stacked_part_sizes(cfg: ModelConfig, stacked: str) -> list[int]:
    if stacked == "qkv_proj":
        return [cfg.q_size, cfg.kv_size, cfg.kv_size]
    return [cfg.intermediate_size, cfg.intermediate_size]


def checkpoint_target(cfg: ModelConfig, name: str) -> tuple[str, int, int]:
    """A checkpoint tensor name -> (our parameter name, first row, number of rows)."""
    parts = name.split(".")
    if len(parts) >= 2 and parts[-2] in STACKED:
        stacked, index = STACKED[parts[-2]]
        sizes = stacked_part_sizes(cfg, stacked)
        return ".".join(parts[:-2] + [stacked, parts[-1]]), sum(sizes[:index]), sizes[index]
    return name, 0, -1


def hf_state_dict(model: LlamaForCausalLM) -> dict[str, torch.Tensor]:
    """The model's weights under transformers' names (stacked projections split apart)."""
    cfg = model.config
    out: dict[str, torch.Tensor] = {}
    params = dict(model.named_parameters())
    for name, tensor in params.items():
        parts = name.split(".")
        stacked = parts[-2] if len(parts) >= 2 else ""
        if stacked in ("qkv_proj", "gate_up_proj"):
            sources = [k for k, (target, _) in STACKED.items() if target == stacked]
            for source, piece in zip(sources, tensor.split(stacked_part_sizes(cfg, stacked)), strict=True):
                out[".".join(parts[:-2] + [source, parts[-1]])] = piece
        else:
            out[name] = tensor
    if cfg.tie_word_embeddings:
        out.pop("lm_head.weight", None)
    return out


def save_checkpoint(model: LlamaForCausalLM, path: str | Path) -> Path:
    """Write config.json + model.safetensors that transformers (and this loader) can read."""
    from safetensors.torch import save_file

    from engines.reference.cpu_layout import has_opaque_weights
    from engines.reference.quant import QuantizedLinear

    if has_opaque_weights(model) or any(isinstance(m, QuantizedLinear) for m in model.modules()):
        raise ValueError("save_checkpoint takes a model as loaded: before quantization or CPU packing")

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(model.config.to_hf_dict(), indent=2))
    tensors = {k: v.detach().contiguous().cpu() for k, v in hf_state_dict(model).items()}
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


@torch.no_grad()
def load_checkpoint(model: LlamaForCausalLM, path: Path) -> None:
    from safetensors import safe_open

    cfg = model.config
    params = dict(model.named_parameters(remove_duplicate=False))
    rows_loaded: dict[str, int] = {}
    for file in checkpoint_files(path):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():
                target, start, rows = checkpoint_target(cfg, name)
                if target not in params:
                    if "rotary_emb" in name:
                        continue
                    raise ValueError(f"checkpoint tensor {name!r} has no place in the model ({file.name})")
                dest = params[target] if rows < 0 else params[target].narrow(0, start, rows)
                tensor = f.get_tensor(name)
                if tensor.shape != dest.shape:
                    raise ValueError(
                        f"checkpoint tensor {name!r} has shape {tuple(tensor.shape)}, "
                        f"the model expects {tuple(dest.shape)}"
                    )
                dest.copy_(tensor)  # into the tied tensor too, whichever name the file uses
                rows_loaded[target] = rows_loaded.get(target, 0) + dest.shape[0]
    tied = ("model.embed_tokens.weight", "lm_head.weight")
    if cfg.tie_word_embeddings and any(n in rows_loaded for n in tied):
        rows_loaded[tied[0]] = rows_loaded[tied[1]] = cfg.vocab_size
    missing = sorted(n for n, p in params.items() if rows_loaded.get(n, 0) != p.shape[0])
    if missing:
        raise ValueError(f"checkpoint {path} lacks {len(missing)} tensors, e.g. {missing[:3]}")
