"""The server families by name: what `engine.launch.family` picks from."""

from __future__ import annotations

import importlib

from engines.launch.base import FamilyOptions, ServerFamily

# family name -> "module:class"; imported on use
FAMILIES: dict[str, str] = {
    "vllm": "engines.launch.vllm:VLLM",
    "sglang": "engines.launch.sglang:SGLang",
    "llama.cpp": "engines.launch.llama_cpp:LlamaCpp",
    "llmperf-serve": "engines.launch.llmperf_serve:LlmperfServe",
    "generic": "engines.launch.generic:Generic",
}


def build_family(name: str, options: FamilyOptions) -> ServerFamily:
    if name not in FAMILIES:
        raise ValueError(f"unknown server family {name!r}; valid: {', '.join(FAMILIES)}")
    module_name, class_name = FAMILIES[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)(options)
