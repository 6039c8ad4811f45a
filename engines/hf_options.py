"""The transformers engine's options (`engine=hf`)."""

from __future__ import annotations

from dataclasses import dataclass

from engines.options import EngineConfig
from llmperf.options import check_positive, option


@dataclass
class HFEngineConfig(EngineConfig):
    name: str = "hf"
    device: str = option("cpu", "torch device")
    precision: str = option("fp32", "fp32, bf16 or fp16")
    max_batch_size: int = option(8, "waiting requests left-padded into one generate() call")
    seed: int = option(0, "seeds the preset's random weights and sampling")
    attn_implementation: str = option("sdpa", "transformers' attention: sdpa or eager")
    max_model_len: int | None = option(None, "context positions served; null: the model's, at most 4096")

    def __post_init__(self) -> None:
        check_positive(self, "max_batch_size", "max_model_len")
