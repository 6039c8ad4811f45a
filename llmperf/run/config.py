"""The config schema: dataclasses registered in Hydra's ConfigStore.

Hydra checks types and field names while it composes; `__post_init__` checks
values once `load_config` turns the composed tree into these objects. Every
check raises `ConfigError` naming the field, the value and the valid choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from llmperf.errors import ConfigError
from llmperf.telemetry.sources import SOURCES
from llmperf.workload.arrivals import ARRIVALS
from llmperf.workload.lengths import LENGTHS


def _positive(owner: Any, *names: str, allow_none: bool = True, strict: bool = True) -> None:
    for name in names:
        value = getattr(owner, name)
        if value is None and allow_none:
            continue
        if value is None or value < 0 or (strict and value == 0):
            raise ConfigError(name, value, "must be > 0" if strict else "must be >= 0")


# -- scenario ---------------------------------------------------------------------------


@dataclass
class ArrivalConfig:
    process: str = "poisson"
    rate_rps: float | None = 1.0  # constant, poisson, gamma
    burstiness: float = 1.0  # gamma shape: CV of the gaps = 1/sqrt(burstiness)
    concurrency: int | None = None  # closed: requests in flight at all times
    trace_path: str | None = None  # trace: JSONL or CSV (see llmperf/workload/trace.py)
    trace_speedup: float = 1.0  # trace: replay this many times faster
    ramp_start_rps: float = 0.0  # ramp: the rate at t=0; rate_rps is the rate it rises to
    ramp_duration_s: float | None = None  # ramp: seconds from the start rate to rate_rps
    ramp_steps: int | None = None  # ramp: null rises linearly; n rises in n equal steps

    def __post_init__(self) -> None:
        if self.process not in ARRIVALS:
            raise ConfigError("process", self.process, "unknown arrival process", ARRIVALS)
        kind = ARRIVALS[self.process]
        _positive(self, "rate_rps", "burstiness", "concurrency", "trace_speedup")
        if kind.needs_rate and self.rate_rps is None:
            raise ConfigError(
                "rate_rps", None, f"arrival process {self.process!r} needs a rate > 0"
            )
        if kind.closed_loop and self.concurrency is None:
            raise ConfigError("concurrency", None, "the closed loop needs a concurrency >= 1")
        if kind.needs_trace and not self.trace_path:
            raise ConfigError("trace_path", self.trace_path, "the trace process needs a trace file")
        _positive(self, "ramp_start_rps", allow_none=False, strict=False)
        _positive(self, "ramp_duration_s", "ramp_steps")
        if self.process == "ramp" and self.ramp_duration_s is None:
            raise ConfigError("ramp_duration_s", None, "the ramp process needs a duration > 0")


@dataclass
class LengthConfig:
    """Token counts: `fixed` uses value; `uniform` min..max; `normal`/`lognormal` mean and std
    (of the lengths themselves); `dataset` the lengths of the dataset's texts."""

    dist: str = "fixed"
    value: int | None = None
    mean: float | None = None
    std: float | None = None
    min: int = 1
    max: int | None = None

    def __post_init__(self) -> None:
        if self.dist not in LENGTHS:
            raise ConfigError("dist", self.dist, "unknown length distribution", LENGTHS)
        for name in LENGTHS[self.dist].required:
            if getattr(self, name) is None:
                raise ConfigError(name, None, f"the {self.dist!r} distribution needs it")
        _positive(self, "value", "mean", "min", "max")
        _positive(self, "std", strict=False)
        if self.max is not None and self.max < self.min:
            raise ConfigError("max", self.max, f"must be >= min ({self.min})")


@dataclass
class SloConfig:
    """Per-request targets; a request meets the SLO when it meets every one that is set."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def __post_init__(self) -> None:
        _positive(self, "ttft_s", "tpot_s", "e2e_s")


@dataclass
class ValidityConfig:
    """What a run must reach for its figures to count (see llmperf/measure/validity.py)."""

    min_duration_s: float = 5.0
    min_completed: int = 20
    max_error_rate: float = 0.01
    max_dispatch_lag_p99_s: float = 0.05  # past it the client, not the engine, set the pace
    max_loop_lag_p99_s: float = 0.05  # the load generator's event loop woke this late

    def __post_init__(self) -> None:
        _positive(self, "min_duration_s", "min_completed", allow_none=False, strict=False)
        _positive(self, "max_dispatch_lag_p99_s", "max_loop_lag_p99_s", allow_none=False)
        if not 0.0 <= self.max_error_rate <= 1.0:
            raise ConfigError("max_error_rate", self.max_error_rate, "must be in [0, 1]")


@dataclass
class SaturationConfig:
    """The over-saturation detector (llmperf/measure/saturation.py): an open-loop run whose
    queue grows without bound stops early and is marked "saturated at R req/s"."""

    enabled: bool = True
    window_s: float = 3.0  # the trailing window the growth is measured over
    min_waiting: int = 16  # requests waiting for a first token before a verdict
    max_growth: float = 0.1  # waiting (and TTFT) growth, as a fraction of arrivals, that stops it
    check_interval_s: float = 0.1

    def __post_init__(self) -> None:
        _positive(self, "window_s", "max_growth", "check_interval_s", allow_none=False)
        _positive(self, "min_waiting", allow_none=False)
        if self.check_interval_s * 3 > self.window_s:
            raise ConfigError(
                "check_interval_s", self.check_interval_s, "must be at most window_s / 3"
            )


@dataclass
class PrefixConfig:
    """Synthetic shared prefixes: each prompt starts with one of `groups` system prompts of
    `length` tokens (picked at random), then its own `prompt_tokens` tokens."""

    groups: int = 0  # 0: no shared prefix
    length: int = 0
    block_tokens: int = 16  # the prefix cache's block: only whole blocks are reused

    def __post_init__(self) -> None:
        _positive(self, "groups", "length", allow_none=False, strict=False)
        _positive(self, "block_tokens", allow_none=False)
        if self.groups and not self.length:
            raise ConfigError("length", self.length, "shared prefixes need a length > 0")


THINK_TIMES = ("fixed", "exponential", "uniform")


@dataclass
class SessionConfig:
    """Multi-turn sessions: the arrival process starts sessions; each turn's prompt is the
    session's earlier prompts and replies, then the new user message."""

    turns: int = 0  # 0: single requests; n: n turns a session (a dataset: its own turns, at most n)
    think_time: str = "exponential"  # fixed | exponential | uniform: seconds between a reply and the next turn
    think_time_s: float = 1.0  # fixed: the value; exponential: the mean; uniform: 0..2x the mean
    max_concurrent: int | None = None  # sessions open at once; more wait for a free slot
    max_context_tokens: int | None = None  # a session ends before a turn that would not fit

    def __post_init__(self) -> None:
        _positive(self, "turns", allow_none=False, strict=False)
        _positive(self, "think_time_s", allow_none=False, strict=False)
        _positive(self, "max_concurrent", "max_context_tokens")
        if self.think_time not in THINK_TIMES:
            raise ConfigError("think_time", self.think_time, "unknown think-time distribution", THINK_TIMES)


@dataclass
class ScenarioConfig:
    name: str = "custom"
    seed: int = 0
    num_requests: int | None = 64  # measured requests; null: as many as duration_s allows
    duration_s: float | None = None  # stop sending after this long (measured phase)
    warmup_requests: int = 2  # sent and awaited before the measured phase; not in the figures
    arrival: ArrivalConfig = field(default_factory=ArrivalConfig)
    prompt_tokens: LengthConfig = field(default_factory=lambda: LengthConfig(value=128))
    output_tokens: LengthConfig = field(default_factory=lambda: LengthConfig(value=64))
    dataset: str | None = None  # ShareGPT-format JSON/JSONL, for dist: dataset
    slo: SloConfig = field(default_factory=SloConfig)
    ignore_eos: bool = True  # outputs run to their scheduled length
    temperature: float = 0.0
    validity: ValidityConfig = field(default_factory=ValidityConfig)
    saturation: SaturationConfig = field(default_factory=SaturationConfig)
    prefix: PrefixConfig = field(default_factory=PrefixConfig)
    sessions: SessionConfig = field(default_factory=SessionConfig)
    record_tokens: bool = False  # requests.jsonl keeps each request's prompt and output token ids

    def __post_init__(self) -> None:
        _positive(self, "num_requests", "duration_s")
        _positive(self, "warmup_requests", "temperature", allow_none=False, strict=False)
        bounded = self.arrival.process == "trace" or self.num_requests or self.duration_s
        if not bounded:
            raise ConfigError("num_requests", None, "set num_requests or duration_s")
        if self.arrival.process == "offline" and self.num_requests is None:
            raise ConfigError("num_requests", None, "the offline process sends a fixed count")
        uses_dataset = "dataset" in (self.prompt_tokens.dist, self.output_tokens.dist)
        if uses_dataset and not self.dataset:
            raise ConfigError("dataset", self.dataset, "dist: dataset needs a dataset file")
        if self.sessions.turns and ARRIVALS[self.arrival.process].closed_loop:
            raise ConfigError(
                "sessions.turns", self.sessions.turns,
                "sessions arrive by an open arrival process (cap them with sessions.max_concurrent)",
            )
        if self.sessions.turns and self.arrival.process == "trace":
            raise ConfigError("sessions.turns", self.sessions.turns, "a trace is replayed as it is")
        if self.dataset and not uses_dataset:
            raise ConfigError(
                "dataset",
                self.dataset,
                "unused: set prompt_tokens.dist or output_tokens.dist to dataset",
            )


# -- engines ----------------------------------------------------------------------------


@dataclass
class ModelSelection:
    """A model preset by name, or a local checkpoint folder (config.json + safetensors)."""

    name: str = "tiny"
    path: str | None = None

    @property
    def ref(self) -> str:
        """What engines take as `model`: the checkpoint path if given, else the preset name."""
        return self.path or self.name


@dataclass
class EngineConfig:
    name: str = MISSING

    def options(self, model: ModelSelection) -> dict[str, Any]:
        """Keyword arguments for `engines.registry.build_engine`."""
        opts = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "name"}
        return {"model": model.ref, **opts}

    def metrics_endpoint(self) -> str | None:
        """The server's Prometheus /metrics to scrape while the load runs; None: no server."""
        return None


@dataclass
class ReferenceEngineConfig(EngineConfig):
    name: str = "reference"
    attention: str = "sdpa"
    precision: str = "fp32"
    device: str = "cpu"
    seed: int = 0
    batching: str = "continuous"
    kv_cache: str = "paged"
    max_batch_size: int = 8
    max_wait_ms: float = 20.0
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 512
    num_kv_blocks: int | None = None  # null: as many as memory allows
    kv_block_size: int = 16
    enable_prefix_caching: bool = False
    max_model_len: int | None = None
    tp: int = 1
    inject_slowdown: float = 0.0  # test-only: each step spins this fraction of its own time more

    def __post_init__(self) -> None:
        _positive(self, "max_batch_size", "max_num_seqs", "max_num_batched_tokens", "num_kv_blocks")
        _positive(self, "kv_block_size", "max_model_len", "tp")
        _positive(self, "max_wait_ms", "inject_slowdown", allow_none=False, strict=False)


@dataclass
class HFEngineConfig(EngineConfig):
    name: str = "hf"
    device: str = "cpu"
    precision: str = "fp32"  # fp32 | bf16 | fp16
    max_batch_size: int = 8  # waiting requests left-padded into one generate() call
    seed: int = 0
    attn_implementation: str = "sdpa"  # sdpa | eager
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        _positive(self, "max_batch_size", "max_model_len")


@dataclass
class OpenAIEngineConfig(EngineConfig):
    name: str = "openai"
    base_url: str = "http://localhost:8000/v1"
    model: str | None = None  # the served model's name; null: the model group's name
    api_key: str = "EMPTY"
    request_timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    tokenizer: str | None = None  # local tokenizer folder for prompts and counts; null: none
    max_connections: int = 1024  # keep-alive connections; above the scenario's concurrency
    endpoint: str = "completions"  # completions | chat
    prompt_format: str = "text"  # text | token_ids (exact prompt lengths on vLLM, SGLang, llmperf-serve)
    model_config: str | None = None  # the served model's shape: a preset or a config.json folder; null: model.path, else the tokenizer's folder
    precision: str | None = None  # the server's weights: fp32 | bf16 | fp16 | int8 | fp8; null: torch_dtype, else bf16
    metrics_url: str | None = None  # the server's Prometheus text; null: base_url's root + /metrics; off: none
    metrics_interval_s: float = 1.0

    def __post_init__(self) -> None:
        _positive(self, "request_timeout_s", "connect_timeout_s", "max_connections", "metrics_interval_s")
        if self.endpoint not in ("completions", "chat"):
            raise ConfigError("endpoint", self.endpoint, "unknown endpoint", ["completions", "chat"])
        if self.prompt_format not in ("text", "token_ids"):
            raise ConfigError("prompt_format", self.prompt_format, "unknown prompt format", ["text", "token_ids"])

    def options(self, model: ModelSelection) -> dict[str, Any]:
        opts = super().options(model)
        opts["model"] = self.model or model.name
        opts["model_config"] = self.model_config or model.path
        for scraper_option in ("metrics_url", "metrics_interval_s"):  # the runner's, not the client's
            opts.pop(scraper_option)
        return opts

    def metrics_endpoint(self) -> str | None:
        if self.metrics_url == "off":
            return None
        return self.metrics_url or self.base_url.rstrip("/").removesuffix("/v1") + "/metrics"


@dataclass
class SyntheticEngineConfig(EngineConfig):
    """A simulated server (engines/synthetic.py): latency = ttft_s + prefill_s_per_token x
    prompt tokens, then tpot_s per token; all zeros answers at once."""

    name: str = "synthetic"
    ttft_s: float = 0.0
    prefill_s_per_token: float = 0.0
    tpot_s: float = 0.0
    jitter: float = 0.0  # each delay is scaled by 1 + jitter x U(-1, 1)
    max_concurrency: int | None = None  # requests beyond it wait in a queue
    seed: int = 0
    reasoning_tokens: int = 0  # the first n output tokens stream as reasoning content

    def __post_init__(self) -> None:
        _positive(self, "ttft_s", "prefill_s_per_token", "tpot_s", strict=False, allow_none=False)
        _positive(self, "reasoning_tokens", strict=False, allow_none=False)
        _positive(self, "max_concurrency")
        if not 0.0 <= self.jitter < 1.0:
            raise ConfigError("jitter", self.jitter, "must be in [0, 1)")


ENGINE_CONFIGS: dict[str, type[EngineConfig]] = {
    "reference": ReferenceEngineConfig,
    "hf": HFEngineConfig,
    "openai": OpenAIEngineConfig,
    "synthetic": SyntheticEngineConfig,
}


# -- the run ----------------------------------------------------------------------------


@dataclass
class TelemetryConfig:
    enabled: bool = True
    interval_s: float = 0.1  # GPM needs >= 0.1 s between its readings; shorter intervals skip them
    source: str = "auto"  # auto, or one of the samplers in llmperf/telemetry/sources.py
    device_indices: list[int] | None = None  # CUDA indices as the process sees them; null: all

    def __post_init__(self) -> None:
        _positive(self, "interval_s", allow_none=False)
        if self.source not in SOURCES:
            raise ConfigError("source", self.source, "unknown telemetry source", SOURCES)
        if self.device_indices is not None and any(i < 0 for i in self.device_indices):
            raise ConfigError("device_indices", self.device_indices, "indices must be >= 0")


@dataclass
class ReportConfig:
    enabled: bool = True


@dataclass
class Config:
    scenario: ScenarioConfig = field(default_factory=ScenarioConfig)
    engine: Any = MISSING  # one of ENGINE_CONFIGS, typed by the engine yaml's schema default
    model: ModelSelection = field(default_factory=ModelSelection)
    hardware: dict[str, Any] = field(default_factory=dict)  # a profile, passed through as is
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    report: ReportConfig = field(default_factory=ReportConfig)

    def __post_init__(self) -> None:
        if isinstance(self.engine, dict):  # an engine yaml without its schema default
            name = self.engine.get("name")
            if name not in ENGINE_CONFIGS:
                raise ConfigError("engine.name", name, "unknown engine", ENGINE_CONFIGS)
            self.engine = ENGINE_CONFIGS[name](**self.engine)


def register_configs() -> None:
    """Store the schemas where the yaml files' defaults lists find them."""
    cs = ConfigStore.instance()
    cs.store(name="llmperf_schema", node=Config)
    for name, schema in ENGINE_CONFIGS.items():
        cs.store(name=f"{name}_engine_schema", node=schema)


def load_config(cfg: DictConfig) -> Config:
    """Turn a composed tree into a `Config`, validating it; errors carry the full dotted key."""
    cfg = cfg.copy()
    if "hydra" in cfg:  # composed with return_hydra_config
        OmegaConf.set_struct(cfg, False)
        cfg.pop("hydra")
    _validate_leaves_first(cfg, "")
    return OmegaConf.to_object(cfg)


def _validate_leaves_first(node: DictConfig, path: str) -> None:
    """Build every dataclass node, deepest first, so an error knows where it happened."""
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            _validate_leaves_first(child, f"{path}{key}.")
    schema = OmegaConf.get_type(node)
    if schema in (dict, None):
        return
    names = [f.name for f in fields(schema)]
    for key in node:  # `+key=value` adds keys even to a schema'd node
        if key not in names:
            raise ConfigError(f"{path}{key}", node[key], "no such field", names)
    try:
        OmegaConf.to_object(node)
    except ConfigError as err:
        raise err.with_key(path + err.key) from None
