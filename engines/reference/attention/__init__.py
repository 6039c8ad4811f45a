"""Attention backends, one module each, chosen by name (`attention=`)."""

from __future__ import annotations

import importlib

from engines.reference.attention.base import AttentionBackend, AttentionMetadata

BACKENDS: dict[str, str] = {
    "eager": "engines.reference.attention.eager:EagerAttention",
    "sdpa": "engines.reference.attention.sdpa:SdpaAttention",
    "triton": "engines.reference.attention.triton:TritonAttention",
}


def get_backend(name: str) -> AttentionBackend:
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; valid: {', '.join(BACKENDS)}")
    module_name, class_name = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)()


__all__ = ["AttentionBackend", "AttentionMetadata", "BACKENDS", "get_backend"]
