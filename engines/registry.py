"""Engines by name, and their options schemas by name.

Both are imported lazily, so that listing the engines (or composing a config)
never pulls in transformers or an HTTP client.
"""

from __future__ import annotations

from engines.base import Engine
from engines.options import EngineConfig
from llmperf.errors import require
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


# The optional package an engine needs, and the extra of llmperf that installs it: without
# it, building the engine is one line naming the extra (MissingDependency), not a traceback.
ENGINE_NEEDS: dict[str, tuple[str, str]] = {"hf": ("transformers", "peers")}


def build_engine(options: EngineConfig, model: str) -> Engine:
    """The engine `options.name`, built from its options; `model` is what it takes as its
    model (`options.model_for(selection)` from a run's model selection)."""
    if options.name in ENGINE_NEEDS:
        module, extra = ENGINE_NEEDS[options.name]
        require(module, extra, f"engine={options.name}")
    return ENGINES.get(options.name)(model, options)
