"""The HTTP client's options (`engine=openai`): any OpenAI-compatible server."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from engines.endpoints import ENDPOINTS, RESERVED_BODY_KEYS
from engines.launch.options import LaunchOptions
from engines.options import EngineConfig
from engines.transports import TRANSPORTS
from llmperf.errors import ConfigError
from llmperf.options import check_choice, check_positive, option

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
    endpoint: str = option("completions", "completions (/v1/completions), chat (/v1/chat/completions), responses (/v1/responses), messages (Anthropic's /v1/messages) or embeddings (/v1/embeddings: no output tokens); engines/endpoints/")
    stream: bool = option(True, "false: whole responses (stream: false): E2E and usage token counts, no TTFT, TPOT or ITL")
    n: int = option(1, "choices per request; output tokens count every choice, streams are told apart by index")
    best_of: int | None = option(None, "completions: candidates the server generates per request (>= n); null: not sent")
    prompt_format: str = option("text", "text, or token_ids: exact prompt lengths on vLLM, SGLang, llmperf-serve")
    model_config: str | None = option(None, "the served model's shape (roofline): a preset or a folder with config.json; null: model.path, else the tokenizer's folder")
    precision: str | None = option(None, "the server's weights: fp32, bf16, fp16, int8 or fp8; null: config.json's torch_dtype, else bf16")
    metrics_url: str | None = option(None, "Prometheus text scraped during the run; null: base_url without /v1, + /metrics; off: none")
    metrics_interval_s: float = option(1.0, "seconds between scrapes (one more at the start and end of the measured window)")
    headers: dict[str, Any] = option(help="HTTP headers sent with every request, e.g. {X-Tenant: acme}; a value may be ${oc.env:NAME} (masked in the run folder)", factory=dict)
    extra_body: dict[str, Any] = option(help="keys merged into every request body, e.g. {priority: 1} (not model, stream or max_tokens)", factory=dict)
    anthropic_version: str = option("2023-06-01", "endpoint messages: the anthropic-version header")
    top_p: float | None = option(None, "nucleus sampling, in (0, 1]; null: not sent (completions and chat send the request's 1.0)")
    top_k: int | None = option(None, "top-k sampling; null: not sent")
    min_tokens: int | None = option(None, "the fewest output tokens (vLLM, SGLang); null: not sent")
    stop: list[str] | None = option(None, "stop strings (messages: stop_sequences); null: not sent")
    seed: int | None = option(None, "the server's sampling seed; null: not sent")
    presence_penalty: float | None = option(None, "in [-2, 2]; null: not sent")
    frequency_penalty: float | None = option(None, "in [-2, 2]; null: not sent")
    launch: LaunchOptions = option(help="a server llmperf starts and stops: engine.launch=vllm (docs/peers.md)", factory=LaunchOptions)

    def __post_init__(self) -> None:
        check_positive(self, "request_timeout_s", "connect_timeout_s", "max_connections", "metrics_interval_s")
        check_positive(self, "n", "best_of")
        ENDPOINTS.check("endpoint", self.endpoint)
        self._check_request_shaping()
        TRANSPORTS.check("transport", self.transport)
        check_choice("prompt_format", self.prompt_format, PROMPT_FORMATS, "prompt format")
        if self.endpoint in ("chat", "responses", "messages") and self.prompt_format == "token_ids":
            raise ConfigError(
                "prompt_format", self.prompt_format, f"needs endpoint completions ({self.endpoint} takes text)"
            )
        if self.n != 1 and self.endpoint in ("responses", "messages"):
            raise ConfigError("n", self.n, f"endpoint {self.endpoint} returns one answer per request")
        if self.endpoint == "embeddings" and self.n != 1:
            raise ConfigError("n", self.n, "an embedding has no choices (endpoint embeddings)")
        if self.best_of is not None and self.endpoint != "completions":
            raise ConfigError("best_of", self.best_of, "only endpoint completions takes best_of")
        if self.best_of is not None and self.best_of < self.n:
            raise ConfigError("best_of", self.best_of, f"must be at least n ({self.n})")

    def _check_request_shaping(self) -> None:
        for name, value in (self.headers or {}).items():
            if not isinstance(value, str):
                raise ConfigError(f"headers.{name}", value, "a header's value must be a string (quote it)")
        for key in self.extra_body or {}:
            if key in RESERVED_BODY_KEYS:
                raise ConfigError(f"extra_body.{key}", self.extra_body[key],
                                  "llmperf sets this key itself; use its own option")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ConfigError("top_p", self.top_p, "must be in (0, 1]")
        check_positive(self, "top_k", "min_tokens")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if value is not None and not -2.0 <= value <= 2.0:
                raise ConfigError(name, value, "must be in [-2, 2]")

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
