"""The config schema: the run's dataclasses, composed from each component's own.

Each component declares its options once, beside it: the scenario in
llmperf/workload/ (scenario.py, arrivals.py, lengths.py), each engine in
engines/ (`ENGINE_CONFIGS`), telemetry in llmperf/telemetry/options.py. They are
registered in Hydra's ConfigStore, so the YAML files only pick a schema.

Hydra checks types and field names while it composes; `__post_init__` checks
values once `load_config` turns the composed tree into these objects. Every
check raises `ConfigError` naming the field, the value and the valid choices.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from engines.options import EngineConfig
from engines.registry import ENGINE_CONFIGS, ENGINES
from llmperf.errors import ConfigError
from llmperf.measure.catalog import DEFAULT_PERCENTILES
from llmperf.measure.saturation import SaturationConfig
from llmperf.options import option
from llmperf.telemetry.options import TelemetryConfig
from llmperf.workload.arrivals import ArrivalConfig
from llmperf.workload.lengths import LengthConfig
from llmperf.workload.prefixes import PrefixConfig
from llmperf.workload.scenario import ScenarioConfig, SloConfig, ValidityConfig
from llmperf.workload.sessions import SessionConfig

__all__ = [
    "ArrivalConfig",
    "Config",
    "ENGINE_CONFIGS",
    "EngineConfig",
    "LengthConfig",
    "ModelSelection",
    "PrefixConfig",
    "SaturationConfig",
    "SessionConfig",
    "ReportConfig",
    "ScenarioConfig",
    "SloConfig",
    "TelemetryConfig",
    "ValidityConfig",
    "load_config",
    "register_configs",
]


@dataclass
class ModelSelection:
    """A model preset by name, or a local checkpoint folder (config.json + safetensors)."""

    name: str = option("tiny", "a preset (the `model` group)")
    path: str | None = option(None, "a local checkpoint folder; it takes the place of the preset")

    @property
    def ref(self) -> str:
        """What engines take as `model`: the checkpoint path if given, else the preset name."""
        return self.path or self.name


@dataclass
class ReportConfig:
    enabled: bool = option(True, "write report.html and its plots after the run")
    percentiles: list[float] = option(help="the percentiles every distribution carries (summary, console, report, gate names): 50 is `median`, q is `pq` (99.9 is `p99.9`)", factory=lambda: list(DEFAULT_PERCENTILES))

    def __post_init__(self) -> None:
        for q in self.percentiles:
            if not 0 < q < 100:
                raise ConfigError("percentiles", list(self.percentiles), f"{q:g} is not in (0, 100)")
        if not self.percentiles:
            raise ConfigError("percentiles", [], "name at least one percentile")


@dataclass
class Config:
    scenario: ScenarioConfig = option(help="the load", factory=ScenarioConfig)
    engine: Any = option(MISSING, "one of ENGINE_CONFIGS, typed by the engine yaml's schema default")
    model: ModelSelection = option(help="the model", factory=ModelSelection)
    hardware: dict[str, Any] = option(help="a profile, passed through as is", factory=dict)
    telemetry: TelemetryConfig = option(help="telemetry", factory=TelemetryConfig)
    report: ReportConfig = option(help="the report", factory=ReportConfig)

    def __post_init__(self) -> None:
        if isinstance(self.engine, dict):  # an engine yaml without its schema default
            name = self.engine.get("name")
            ENGINE_CONFIGS.check("engine.name", name)
            self.engine = ENGINE_CONFIGS.get(name)(**self.engine)
        images = self.scenario.images.count
        if images and getattr(self.engine, "endpoint", None) not in ("chat", "responses", "messages"):
            raise ConfigError("scenario.images.count", images, "images travel as content parts:"
                              " engine=openai with engine.endpoint chat, responses or messages")
        workers = self.scenario.client.workers
        if workers > 1 and not (ENGINES.get(self.engine.name).capabilities.multiprocess
                                or self.engine.copies_serve_alike()):
            raise ConfigError(
                "scenario.client.workers", workers, "needs an engine reachable from several"
                " processes (engine=openai) or one that serves alike as a copy per worker"
                f" (engine=synthetic without max_concurrency); {self.engine.name} runs in this"
                " process")


def register_configs() -> None:
    """Store the schemas where the yaml files' defaults lists find them."""
    cs = ConfigStore.instance()
    cs.store(name="llmperf_schema", node=Config)
    for name in ENGINE_CONFIGS:
        cs.store(name=f"{name}_engine_schema", node=ENGINE_CONFIGS.get(name))


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
    if schema is None or not is_dataclass(schema):  # a plain dict (engine.headers): any keys
        return
    names = [f.name for f in fields(schema)]
    for key in node:  # `+key=value` adds keys even to a schema'd node
        if key not in names:
            raise ConfigError(f"{path}{key}", node[key], "no such field", names)
    try:
        OmegaConf.to_object(node)
    except ConfigError as err:
        raise err.with_key(path + err.key) from None
