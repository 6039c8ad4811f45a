"""Engines by name, and their options schemas by name.

Both are imported lazily, so that listing the engines (or composing a config)
never pulls in transformers or an HTTP client.
"""

from __future__ import annotations

from engines.base import Engine
from engines.options import EngineConfig
from llmperf.registry import Registry

ENGINES: Registry[type] = Registry(
    "engine",
    {
        "reference": "engines.reference.engine:ReferenceEngine",
        "hf": "engines.hf:HFEngine",
        "openai": "engines.openai_http:OpenAIEngine",
        "synthetic": "engines.synthetic:SyntheticEngine",
    },
)

ENGINE_CONFIGS: Registry[type[EngineConfig]] = Registry(
    "engine",
    {
        "reference": "engines.reference.options:ReferenceEngineConfig",
        "hf": "engines.hf_options:HFEngineConfig",
        "openai": "engines.openai_options:OpenAIEngineConfig",
        "synthetic": "engines.synthetic_options:SyntheticEngineConfig",
    },
)


def build_engine(options: EngineConfig, model: str) -> Engine:
    """The engine `options.name`, built from its options; `model` is what it takes as its
    model (`options.model_for(selection)` from a run's model selection)."""
    return ENGINES.get(options.name)(model, options)
