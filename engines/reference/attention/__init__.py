"""Attention backends, one module each, chosen by name (`attention=`)."""

from __future__ import annotations

from engines.reference.attention.base import AttentionBackend, AttentionMetadata
from llmperf.registry import Registry

BACKENDS: Registry[type[AttentionBackend]] = Registry(
    "attention backend",
    {
        "cpu": "engines.reference.attention.cpu:CpuAttention",
        "eager": "engines.reference.attention.eager:EagerAttention",
        "sdpa": "engines.reference.attention.sdpa:SdpaAttention",
        "triton": "engines.reference.attention.triton:TritonAttention",
    },
)


def get_backend(name: str) -> AttentionBackend:
    return BACKENDS.build(name)


__all__ = ["AttentionBackend", "AttentionMetadata", "BACKENDS", "get_backend"]
