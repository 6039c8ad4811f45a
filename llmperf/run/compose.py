"""Composing the config tree (the `scenarios` package) into a validated Config.

The commands (`llmperf`, `llmperf-serve`, `llmperf-plan`) compose through here,
so a bad override reads the same in each: one line naming the field and value.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_module
from hydra.errors import HydraException
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
    ValidationError,
)

from llmperf.errors import UsageError
from llmperf.run.config import Config, load_config, register_configs

CONFIG_MODULE = "scenarios"
CONFIG_NAME = "config"


def compose_config(overrides: list[str], config_name: str = CONFIG_NAME) -> Config:
    """The validated config of one job, composed from the tree (inside an initialized Hydra)."""
    try:
        return load_config(compose(config_name, overrides=overrides, return_hydra_config=True))
    except (HydraException, OmegaConfBaseException) as err:
        raise UsageError(describe_hydra_error(err)) from None


def describe_hydra_error(err: BaseException) -> str:
    """One line for a composition failure, from the OmegaConf error that caused it."""
    cause = err
    while cause is not None and not isinstance(cause, OmegaConfBaseException):
        cause = cause.__cause__
    if cause is None or not getattr(cause, "full_key", None):
        return str(err).strip().split("\n")[0]
    key = cause.full_key
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)):
        valid = _field_names(cause.object_type)
        return f"{key}: no such field" + (f"; valid: {', '.join(valid)}" if valid else "")
    if isinstance(cause, ValidationError):
        match = re.search(r"could not be converted to (\w+)", cause.msg or "")
        problem = f"not a valid {match.group(1).lower()}" if match else cause.msg.split("\n")[0]
        return f"{key}={cause.value!r}: {problem}"
    return f"{key}: {(cause.msg or str(cause)).splitlines()[0]}"


def _field_names(object_type: object) -> list[str]:
    if isinstance(object_type, type) and dataclasses.is_dataclass(object_type):
        return [f.name for f in dataclasses.fields(object_type)]
    return []


def scenario_names() -> list[str]:
    folder = resources.files(CONFIG_MODULE) / "scenario"
    if not folder.is_dir():
        return []
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_scenario(name_or_path: str) -> dict[str, Any]:
    """A scenario's fields as a dict (the `scenario:` block when the file nests one)."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        data = yaml.safe_load(path.read_text()) or {}
        if isinstance(data.get("scenario"), dict):
            data = data["scenario"]
        return data
    if name_or_path in scenario_names():
        return compose_scenario(name_or_path)
    valid = ", ".join(scenario_names()) or "none installed; give a .yaml path"
    raise ValueError(f"unknown scenario {name_or_path!r}; valid: {valid}")


def compose_scenario(name: str) -> dict[str, Any]:
    """The scenario block of `llmperf scenario=NAME`, with the default engine and model."""
    register_configs()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        config = compose_config([f"scenario={name}"])
    return asdict(config.scenario)
