"""The load a plan is sized for: prompt and output lengths and how many sequences run at once.

Read from a scenario YAML (`scenarios/scenario/<name>.yaml`, or a file path)
and/or given explicitly; explicit values win. Of a length distribution the
planner uses the mean (its `mean`, else `value`, else the midpoint of
`min`..`max`) and the largest prompt (`max`, else the mean).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

DEFAULT_PROMPT_TOKENS = 1024
DEFAULT_OUTPUT_TOKENS = 256


@dataclass
class Workload:
    prompt_tokens: float = DEFAULT_PROMPT_TOKENS  # mean
    output_tokens: float = DEFAULT_OUTPUT_TOKENS  # mean
    prompt_tokens_max: float | None = None
    context_len: float | None = (
        None  # KV positions a sequence holds at its end; default prompt + output
    )
    concurrency: float | None = None  # sequences at once; None: derived from rate_rps, else 1
    rate_rps: float | None = None  # open-loop arrival rate
    source: str = "default"

    def __post_init__(self) -> None:
        for name in (
            "prompt_tokens",
            "output_tokens",
            "prompt_tokens_max",
            "context_len",
            "concurrency",
            "rate_rps",
        ):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or value <= 0):
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        if self.context_len is None:
            self.context_len = self.prompt_tokens + self.output_tokens
        if self.prompt_tokens_max is None:
            self.prompt_tokens_max = self.prompt_tokens


def scenario_names() -> list[str]:
    folder = resources.files("scenarios") / "scenario"
    if not folder.is_dir():
        return []
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_scenario(name_or_path: str) -> dict[str, Any]:
    """A scenario's fields as a dict (the `scenario:` block when the file nests one)."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        text = path.read_text()
    elif name_or_path in scenario_names():
        text = (resources.files("scenarios") / "scenario" / f"{name_or_path}.yaml").read_text()
    else:
        valid = ", ".join(scenario_names()) or "none installed; give a .yaml path"
        raise ValueError(f"unknown scenario {name_or_path!r}; valid: {valid}")
    data = yaml.safe_load(text) or {}
    if isinstance(data.get("scenario"), dict):
        data = data["scenario"]
    return data


def workload_from_scenario(scenario: dict[str, Any], name: str = "scenario") -> dict[str, float]:
    """The Workload fields a scenario states (lengths, concurrency or rate)."""
    fields: dict[str, float] = {}
    for key in ("prompt_tokens", "output_tokens"):
        dist = scenario.get(key)
        if isinstance(dist, dict):
            mean = _dist_mean(dist, f"{name}.{key}")
            if mean is not None:
                fields[key] = mean
            if key == "prompt_tokens" and _num(dist.get("max"), f"{name}.{key}.max") is not None:
                fields["prompt_tokens_max"] = _num(dist["max"], f"{name}.{key}.max")
    arrival = scenario.get("arrival") or {}
    concurrency = _num(arrival.get("concurrency"), f"{name}.arrival.concurrency")
    rate = _num(arrival.get("rate_rps"), f"{name}.arrival.rate_rps")
    if arrival.get("process") == "offline":
        concurrency = _num(scenario.get("num_requests"), f"{name}.num_requests")
    if concurrency is not None:
        fields["concurrency"] = concurrency
    elif rate is not None:
        fields["rate_rps"] = rate
    return fields


def _dist_mean(dist: dict[str, Any], label: str) -> float | None:
    for key in ("mean", "value"):
        value = _num(dist.get(key), f"{label}.{key}")
        if value is not None:
            return value
    low, high = _num(dist.get("min"), f"{label}.min"), _num(dist.get("max"), f"{label}.max")
    if low is not None and high is not None:
        return (low + high) / 2
    return high


def _num(value: Any, label: str) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{label} must be a number, got {value!r}") from None
