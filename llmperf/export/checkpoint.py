"""Write a preset as a Hugging Face checkpoint folder that transformers, vLLM and the
reference engine all load: config.json (LlamaForCausalLM), model.safetensors (float32),
generation_config.json and a trained BPE tokenizer.

The weights are the reference engine's for the same preset and seed, so
`ReferenceEngine(model="tiny", seed=0)` and `ReferenceEngine(model=exported_dir)` compute
the same logits. Only bos/eos/pad ids change: they become the tokenizer's (1, 2, 0).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import llmperf
from llmperf.export.tokenizer import BOS_ID, EOS_ID, PAD_ID, train_tokenizer, write_tokenizer

FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
BYTES_PER_PARAM = 4  # float32
MEMORY_HEADROOM = 2.5  # weights, their safetensors copy, and transient buffers


@dataclass
class Exported:
    path: Path
    preset: str
    num_params: int
    vocab_size: int
    trained_tokens: int  # vocabulary entries learned from text; the rest are reserved tokens
    bytes: int


def export_checkpoint(preset: str, out: str | Path, seed: int = 0, force: bool = False) -> Exported:
    """Raise ValueError for an unknown preset, a non-empty `out` (unless `force`), or a
    preset too large for this machine's free memory."""
    from engines.reference.presets import get_preset
    from engines.reference.weights import save_checkpoint

    get_preset(preset)  # an unknown preset is refused before the folder is looked at
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise ValueError(f"out={str(out)!r} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ValueError(
            f"out={str(out)!r} exists and is not empty; pass force=true to write over it"
        )
    cfg, tok, model = preset_model(preset, seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.safetensors.index.json").unlink(missing_ok=True)  # a stale sharded export
    save_checkpoint(model, out)
    hf_config = {
        **cfg.to_hf_dict(),
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "torch_dtype": "float32",
        "llmperf": {"preset": preset, "seed": seed, "version": llmperf.__version__},
    }
    _write_json(out / "config.json", hf_config)
    generation = {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}
    _write_json(out / "generation_config.json", generation)
    write_tokenizer(tok, out, cfg.max_position_embeddings)
    trained = sum(
        1 for t in tok.get_vocab(with_added_tokens=True) if not t.startswith("<|reserved_")
    )
    return Exported(
        path=out,
        preset=preset,
        num_params=cfg.num_params(),
        vocab_size=tok.get_vocab_size(),
        trained_tokens=trained,
        bytes=sum((out / f).stat().st_size for f in FILES),
    )


def preset_model(preset: str, seed: int = 0):
    """(config, tokenizer, float32 model on the CPU) of a preset as every export writes it:
    the reference engine's seeded weights, the trained tokenizer's bos/eos ids. ValueError for
    an unknown preset or one too large for this machine's free memory."""
    import torch

    from engines.reference.presets import get_preset
    from engines.reference.weights import build_meta_model, materialize

    cfg = get_preset(preset)
    _check_memory(preset, cfg.num_params())
    cfg = dataclasses.replace(cfg, bos_token_id=BOS_ID, eos_token_ids=(EOS_ID,))
    tok = train_tokenizer(cfg.vocab_size)
    model = materialize(build_meta_model(cfg, 16), None, torch.float32, torch.device("cpu"), seed)
    return cfg, tok, model


def _check_memory(preset: str, num_params: int) -> None:
    import psutil

    need = num_params * BYTES_PER_PARAM * MEMORY_HEADROOM
    available = psutil.virtual_memory().available
    if need > available:
        raise ValueError(
            f"model={preset!r} needs about {need / 1e9:.1f} GB of memory to export, "
            f"{available / 1e9:.1f} GB is free"
        )


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
