"""The simulated server's options (`engine=synthetic`)."""

from __future__ import annotations

from dataclasses import dataclass

from engines.options import EngineConfig
from llmperf.errors import ConfigError
from llmperf.options import check_positive, option


@dataclass
class SyntheticEngineConfig(EngineConfig):
    """Latency = ttft_s + prefill_s_per_token x prompt tokens, then tpot_s per token;
    all zeros answers at once."""

    name: str = "synthetic"
    ttft_s: float = option(0.0, "seconds from admission to the first token, before prefill")
    prefill_s_per_token: float = option(0.0, "seconds of prefill per prompt token")
    tpot_s: float = option(0.0, "seconds between output tokens")
    jitter: float = option(0.0, "each delay is scaled by 1 + jitter x U(-1, 1); in [0, 1)")
    max_concurrency: int | None = option(None, "requests beyond it wait in a FIFO queue; null: no limit")
    seed: int = option(0, "seeds the jitter and the output bytes")
    reasoning_tokens: int = option(0, "the first n output tokens stream as reasoning content")

    def copies_serve_alike(self) -> bool:
        # Without a concurrency limit each request's latency is its own (no queue, no batch):
        # N copies, one per load worker, answer exactly as one does.
        return self.max_concurrency is None

    def __post_init__(self) -> None:
        check_positive(self, "ttft_s", "prefill_s_per_token", "tpot_s", strict=False, allow_none=False)
        check_positive(self, "reasoning_tokens", strict=False, allow_none=False)
        check_positive(self, "max_concurrency")
        if not 0.0 <= self.jitter < 1.0:
            raise ConfigError("jitter", self.jitter, "must be in [0, 1)")
