"""The HTTP client's options (`engine=openai`): any OpenAI-compatible server."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from engines.launch.options import LaunchOptions
from engines.options import EngineConfig
from engines.transports import TRANSPORTS
from llmperf.errors import ConfigError
from llmperf.options import check_choice, check_positive, option

ENDPOINTS = ("completions", "chat", "embeddings")
PROMPT_FORMATS = ("text", "token_ids")


@dataclass
class OpenAIEngineConfig(EngineConfig):
    name: str = "openai"
    base_url: str = option("http://localhost:8000/v1", "the server's API root")
    model: str | None = option(None, "the served model's name (what /v1/models lists); null: the model group's name")
    api_key: str | None = option("EMPTY", "sent as a bearer token; null: no Authorization header")
    request_timeout_s: float = option(600.0, "the most one request may take, from sending to its last chunk")
    connect_timeout_s: float = option(10.0, "the most opening a connection may take")
    tokenizer: str | None = option(None, "local tokenizer.json (or its folder) for prompts and token counts; null: bytes")
    max_connections: int = option(1024, "keep-alive connections; at least the load's concurrency")
    transport: str = option("aiohttp", "the HTTP client: aiohttp (the lightest measured) or httpx (engines/transports/)")
    http_thread: bool = option(False, "true: HTTP on a thread of its own, not the load generator's loop (a hand-off per event)")
    endpoint: str = option("completions", "completions (/v1/completions), chat (/v1/chat/completions) or embeddings (/v1/embeddings: no output tokens)")
    stream: bool = option(True, "false: whole responses (stream: false): E2E and usage token counts, no TTFT, TPOT or ITL")
    n: int = option(1, "choices per request; output tokens count every choice, streams are told apart by index")
    best_of: int | None = option(None, "completions: candidates the server generates per request (>= n); null: not sent")
    prompt_format: str = option("text", "text, or token_ids: exact prompt lengths on vLLM, SGLang, llmperf-serve")
    model_config: str | None = option(None, "the served model's shape (roofline): a preset or a folder with config.json; null: model.path, else the tokenizer's folder")
    precision: str | None = option(None, "the server's weights: fp32, bf16, fp16, int8 or fp8; null: config.json's torch_dtype, else bf16")
    metrics_url: str | None = option(None, "Prometheus text scraped during the run; null: base_url without /v1, + /metrics; off: none")
    metrics_interval_s: float = option(1.0, "seconds between scrapes (one more at the start and end of the measured window)")
    launch: LaunchOptions = option(help="a server llmperf starts and stops: engine.launch=vllm (docs/peers.md)", factory=LaunchOptions)

    def __post_init__(self) -> None:
        check_positive(self, "request_timeout_s", "connect_timeout_s", "max_connections", "metrics_interval_s")
        check_positive(self, "n", "best_of")
        check_choice("endpoint", self.endpoint, ENDPOINTS, "endpoint")
        TRANSPORTS.check("transport", self.transport)
        check_choice("prompt_format", self.prompt_format, PROMPT_FORMATS, "prompt format")
        if self.endpoint == "chat" and self.prompt_format == "token_ids":
            raise ConfigError(
                "prompt_format", self.prompt_format, "needs endpoint completions (chat takes messages)"
            )
        if self.endpoint == "embeddings" and self.n != 1:
            raise ConfigError("n", self.n, "an embedding has no choices (endpoint embeddings)")
        if self.best_of is not None and self.endpoint != "completions":
            raise ConfigError("best_of", self.best_of, "only endpoint completions takes best_of")
        if self.best_of is not None and self.best_of < self.n:
            raise ConfigError("best_of", self.best_of, f"must be at least n ({self.n})")

    def model_for(self, model: Any) -> str:
        return self.model or model.name

    def with_model(self, model: Any) -> OpenAIEngineConfig:
        # A GGUF file (llama.cpp's) is not a shape llmperf reads: engine.model_config names one
        path = None if model.path is None or str(model.path).endswith(".gguf") else model.path
        return replace(self, model_config=self.model_config or path)

    def metrics_endpoint(self) -> str | None:
        if self.metrics_url == "off":
            return None
        return self.metrics_url or self.base_url.rstrip("/").removesuffix("/v1") + "/metrics"

    def round_trip_endpoint(self) -> str | None:
        """GET /v1/models: every OpenAI-compatible server answers it without touching its engine."""
        return self.base_url.rstrip("/") + "/models"
