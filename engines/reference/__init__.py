"""The reference engine: a Llama-architecture decoder in PyTorch (+ Triton) with
interchangeable attention, batching, KV cache and precision."""

from engines.reference.engine import ReferenceEngine
from engines.reference.offline import GenerationOutput

__all__ = ["GenerationOutput", "ReferenceEngine"]
