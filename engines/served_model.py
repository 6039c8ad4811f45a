"""What an HTTP engine knows of the model its server runs: its shape and weight precision.

A server does not say, and the roofline needs both. They come from, in order:
`model_config` (a preset name, a checkpoint folder, or its config.json), else
the tokenizer's folder when it holds a config.json. The precision is the one
given, else the config.json's `torch_dtype`, else bf16 (how servers load most
checkpoints).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from engines.reference.config import ModelConfig
from engines.reference.precision import PRECISIONS
from engines.reference.weights import resolve_model

DEFAULT_PRECISION = "bf16"
TORCH_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True)
class ServedModel:
    config: ModelConfig
    precision: str
    source: str  # where the shape was read: "model_config" or "tokenizer"


def served_model(
    model_config: str | None, tokenizer: str | None, precision: str | None
) -> ServedModel | None:
    """The served model's shape and precision; None when nothing names a config.

    A `model_config` that cannot be read raises (the user named it); a tokenizer
    folder's config.json that is not a shape llmperf models is passed over.
    """
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    if model_config is not None:
        path = Path(model_config).expanduser()
        spec = str(path.parent) if path.name == "config.json" and path.is_file() else model_config
        config, folder = resolve_model(spec)
        return ServedModel(config, precision or _precision_in(folder), "model_config")
    folder = _tokenizer_folder(tokenizer)
    if folder is None:
        return None
    try:
        config = ModelConfig.from_path(folder)
    except (ValueError, KeyError, TypeError):  # not a decoder llmperf models, or not a shape
        return None
    return ServedModel(config, precision or _precision_in(folder), "tokenizer")


def _tokenizer_folder(tokenizer: str | None) -> Path | None:
    if tokenizer is None:
        return None
    path = Path(tokenizer).expanduser()
    folder = path if path.is_dir() else path.parent
    return folder if (folder / "config.json").is_file() else None


def _precision_in(folder: Path | None) -> str:
    """The checkpoint's torch_dtype as a precision name (bf16 when it states none)."""
    if folder is None or not (folder / "config.json").is_file():
        return DEFAULT_PRECISION
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    dtype = config.get("torch_dtype") or config.get("dtype")
    return TORCH_DTYPES.get(str(dtype), DEFAULT_PRECISION)
