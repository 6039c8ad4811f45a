"""The seam between the load generator and every engine.

An engine turns a `Request` into an async stream of `TokenEvent`s. Engines that
batch run their own step loop (on a thread); the load generator is asyncio and
owns all pacing: an engine never sleeps to shape the load.

All times are `time.perf_counter()` seconds, so they compare across threads of
one process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch's generators take
# Where a request's token counts come from, best first: the ids the engine itself consumed
# and produced; a server's usage report; a local tokenizer over the text; UTF-8 bytes, one
# per "token", when nothing better is known (not the model's tokens).
TOKEN_COUNT_SOURCES = ("engine", "server usage", "tokenizer", "bytes")
DEFAULT_MAX_MODEL_LEN = 4096  # context positions served when none is asked for
# How a response came: streamed token by token; whole (stream: false: one body at the end,
# so no token times); an embedding (no output tokens at all).
RESPONSES = ("stream", "whole", "embedding")


@dataclass
class SamplingParams:
    """How the next token is picked. temperature 0 means greedy."""

    temperature: float = 0.0
    top_k: int = 0  # 0: no top-k filter
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False  # benchmarks want exact output lengths
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        low, high = SEED_RANGE
        if self.seed is not None and not low <= self.seed <= high:
            raise ValueError(f"seed must be in [{low}, {high}], got {self.seed}")


@dataclass
class Request:
    """One generation request as the load generator issues it."""

    id: str
    max_tokens: int
    prompt_token_ids: list[int] | None = None
    prompt_text: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    arrival_s: float = 0.0  # intended arrival, seconds from run start
    is_warmup: bool = False
    session_id: str | None = None  # a multi-turn session's requests share it
    turn: int = 0  # the turn's index within its session
    shared_prefix_tokens: int = 0  # leading prompt tokens an earlier request already sent
    images: tuple[bytes, ...] = ()  # encoded PNG or JPEG files, sent as content parts (HTTP chat APIs)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.prompt_token_ids is None and self.prompt_text is None:
            raise ValueError("a request needs prompt_token_ids or prompt_text")

    def prompt_ids(self, tokenizer: Tokenizer) -> list[int]:
        """The prompt's token ids: the given ones, else the prompt text encoded."""
        if self.prompt_token_ids is not None:
            return list(self.prompt_token_ids)
        return tokenizer.encode(self.prompt_text)


def resolve_max_model_len(limit: int, requested: int | None) -> int:
    """The context length an engine serves: the one asked for (else at most
    DEFAULT_MAX_MODEL_LEN), never more than the model's `limit` positions."""
    return min(requested or min(limit, DEFAULT_MAX_MODEL_LEN), limit)


def request_error(
    ids: list[int], max_tokens: int, vocab_size: int, max_model_len: int
) -> str | None:
    """Why an engine cannot take a request with these prompt ids, or None when it can."""
    if not ids:
        return "the prompt is empty"
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        return f"token id {bad} is outside the vocabulary (size {vocab_size})"
    if len(ids) + max_tokens > max_model_len:
        return (
            f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) "
            f"exceeds max_model_len ({max_model_len})"
        )
    return None


# Not frozen: a frozen dataclass sets each field through object.__setattr__, five times the
# cost, and an HTTP engine makes one per chunk.
@dataclass(slots=True)
class TokenEvent:
    """Tokens produced for one request: usually one, a chunk for HTTP engines.

    The final event of a stream has `finished=True` and a `finish_reason`
    ("stop", "length", "abort" or "error"); `error` holds the reason of a failure.
    """

    request_id: str
    token_ids: tuple[int, ...]
    time_s: float  # perf_counter() when the engine produced (or received) it
    text: str | None = None
    finished: bool = False
    finish_reason: str | None = None
    error: str | None = None
    num_prompt_tokens: int | None = None  # known to the engine; sent on the final event
    num_output_tokens: int | None = None  # authoritative count (e.g. a usage chunk), final event
    scheduled_s: float | None = None  # when the engine first scheduled the request (first event)
    # perf_counter() when the client received it, for engines whose client runs apart from
    # the load generator's loop (HTTP, on its own thread); None: the load generator stamps
    # the event when it takes it, which includes any delay of its own loop.
    received_s: float | None = None
    reasoning: bool = False  # the tokens are reasoning (thinking) content, not the answer
    # final event: one of TOKEN_COUNT_SOURCES; None: "engine", the engine counted its own ids
    token_count_source: str | None = None
    choice: int = 0  # which of the request's n choices the tokens belong to (OpenAI's `index`)
    response: str = "stream"  # final event: one of RESPONSES
    # final event: seconds the request waited for a connection from the client's pool
    # (HTTP engines); None: the engine has no pool
    pool_wait_s: float | None = None
    connect_s: float | None = None  # HTTP: opening a new connection took this (None: reused one)
    # final event, HTTP engines: perf_counter() when the request's last byte was written, and
    # when the response's headers arrived; None: not an HTTP engine, or it never got that far
    written_s: float | None = None
    headers_s: float | None = None
    image_tokens: int | None = None  # final event: the server's usage counted this many for images


@dataclass
class StepStat:
    """One step of a batching engine's loop, for reports and the roofline.

    Token counts are of the step's forward pass; `context_tokens` is the sum over
    sequences of the KV positions attended (what the step read from the KV cache).
    """

    start_s: float  # perf_counter() at the start of the step
    duration_s: float
    kind: str  # "prefill", "decode" or "mixed"
    num_seqs: int
    num_prefill_tokens: int
    num_decode_tokens: int
    padded_tokens: int = 0  # slots computed for nothing (static batching)
    context_tokens: int = 0
    kv_blocks_used: int = 0
    kv_blocks_free: int = 0
    num_waiting: int = 0
    preemptions: int = 0  # sequences preempted during this step
    prefix_cache_hit_tokens: int = 0  # prompt tokens served from the prefix cache
    cpu_s: float | None = None  # CPU time the process (all its threads) spent in the step
    request_ids: list[str] = field(default_factory=list)  # the requests computed in it (padding left out)

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def local_model_info(engine: Any, compute_dtype: str, kv_bytes_per_element: int) -> dict[str, Any]:
    """What an engine that holds the model itself reports of it (`info()`), for the roofline."""
    config = engine.config
    return {
        "name": engine.name,
        "model": engine.model_name,
        "model_config": config.to_dict(),
        "params": config.num_params(),
        "weight_bytes": engine.weight_bytes,
        "compute_dtype": compute_dtype.removeprefix("torch."),
        "kv_bytes_per_token": config.kv_bytes_per_token(kv_bytes_per_element),
    }


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine offers beyond `Engine`'s methods. The harness reads these flags;
    it never probes an engine for a method."""

    flush: bool = False  # flush(): launch what waits, even a partial batch (engines that hold requests back)
    step_stats: bool = False  # step_stats() -> list[StepStat]: one per step of its loop
    kv_stats: bool = False  # kv: a KV cache with num_blocks, block_size and num_free_blocks
    scheduler: bool = False  # scheduler: running and waiting sequences
    liveness: bool = False  # is_alive(): False once the engine's loop thread has died
    # Built again from its options in another process, it reaches the same server: the load
    # can be split over worker processes (scenario.client.workers)
    multiprocess: bool = False


@runtime_checkable
class Tokenizer(Protocol):
    vocab_size: int
    eos_token_ids: tuple[int, ...]

    def encode(self, text: str) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...


@runtime_checkable
class Engine(Protocol):
    """What the load generator drives. See README "Adding an engine"."""

    name: str
    capabilities: EngineCapabilities

    def start(self) -> None:
        """Acquire resources (threads, connections, weights). Idempotent."""

    def stop(self) -> None:
        """Release them; streams still open end with finish_reason "abort"."""

    def stream(self, request: Request) -> AsyncIterator[TokenEvent]:
        """Submit a request and yield its events as they come."""

    def info(self) -> dict[str, Any]:
        """Facts about the engine for summary.json: name, model, options, weight_bytes..."""

    @property
    def tokenizer(self) -> Tokenizer | None:
        """Tokenizer used to build prompts and count tokens, if the engine has one."""


# An engine that holds requests back to form batches (static batching) declares
# `capabilities.flush` and has `flush()`, called by the load generator when no more
# requests are coming for now (after the warmup, after the last request, between
# closed-loop sends): what waits launches even as a partial batch.
