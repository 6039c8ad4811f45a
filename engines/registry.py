"""Engines by name. Imported lazily so that `reference` never pulls in transformers."""

from __future__ import annotations

import importlib
from typing import Any

from engines.base import Engine

ENGINES: dict[str, str] = {
    "reference": "engines.reference:ReferenceEngine",
    "hf": "engines.hf:HFEngine",
    "openai": "engines.openai_http:OpenAIEngine",
    "synthetic": "engines.synthetic:SyntheticEngine",
}


def build_engine(name: str, **options: Any) -> Engine:
    """Instantiate the engine `name` with its options (keyword arguments)."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; valid: {', '.join(ENGINES)}")
    module_name, class_name = ENGINES[name].split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(**options)
