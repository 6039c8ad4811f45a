"""The traffic a plan is sized for: prompt and output lengths and how many sequences run at once.

Not the requests themselves (llmperf.workload builds those): their averages.
Read from a scenario's fields (llmperf.run.compose.load_scenario: a name in
`scenarios/scenario/`, composed as `llmperf scenario=NAME` would compose it, or a
YAML file, read as it is) and/or given explicitly; explicit values win. Of a length distribution the planner uses
the mean its kind implies (`fixed`: value; `uniform`: the midpoint of min..max; `normal`,
`lognormal`: mean) and the largest prompt (`max`, else the mean). Lengths drawn from a
dataset or a trace file are unknown here; `unknown_traffic` says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_PROMPT_TOKENS = 1024
DEFAULT_OUTPUT_TOKENS = 256


@dataclass
class Traffic:
    prompt_tokens: float = DEFAULT_PROMPT_TOKENS  # mean
    output_tokens: float = DEFAULT_OUTPUT_TOKENS  # mean
    prompt_tokens_max: float | None = None
    context_len: float | None = (
        None  # KV positions a sequence holds at its end; default prompt + output
    )
    concurrency: float | None = None  # sequences at once; None: derived from rate_rps, else 1
    rate_rps: float | None = None  # open-loop arrival rate

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


def traffic_from_scenario(scenario: dict[str, Any], name: str = "scenario") -> dict[str, float]:
    """The Traffic fields a scenario states (lengths, concurrency or rate). A trace's
    lengths and arrivals are in its file: none of the fields come from the scenario then."""
    arrival = scenario.get("arrival") or {}
    if arrival.get("process") == "trace":
        return {}
    fields: dict[str, float] = {}
    for key in ("prompt_tokens", "output_tokens"):
        dist = scenario.get(key)
        if isinstance(dist, dict):
            mean = _dist_mean(dist, f"{name}.{key}")
            if mean is not None:
                fields[key] = mean
            if key == "prompt_tokens" and _num(dist.get("max"), f"{name}.{key}.max") is not None:
                fields["prompt_tokens_max"] = _num(dist["max"], f"{name}.{key}.max")
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
    """The mean length of a distribution (None for `dataset`: the texts decide)."""
    kind = dist.get("dist", "fixed")
    if kind == "fixed":
        return _num(dist.get("value"), f"{label}.value")
    if kind == "uniform":
        low = _num(dist.get("min", 1), f"{label}.min")
        high = _num(dist.get("max"), f"{label}.max")
        return None if low is None or high is None else (low + high) / 2
    if kind in ("normal", "lognormal"):
        return _num(dist.get("mean"), f"{label}.mean")
    return None


def unknown_traffic(scenario: dict[str, Any], name: str = "scenario") -> dict[str, str]:
    """What the scenario leaves to its dataset or trace file, so the plan cannot read it:
    field (prompt_tokens, output_tokens, concurrency) -> a note saying what was assumed."""
    from_trace = (scenario.get("arrival") or {}).get("process") == "trace"
    unknown = {}
    for key, default in (("prompt_tokens", DEFAULT_PROMPT_TOKENS),
                         ("output_tokens", DEFAULT_OUTPUT_TOKENS)):
        dist = scenario.get(key)
        if from_trace or (isinstance(dist, dict) and dist.get("dist") == "dataset"):
            unknown[key] = (f"scenario {name} takes {key} from its"
                            f" {'trace' if from_trace else 'dataset'} file: planned with"
                            f" {default}; give {key}=N")
    if from_trace:
        unknown["concurrency"] = (f"scenario {name} takes its arrivals from its trace file:"
                                  " planned at concurrency 1; give concurrency=N or rate_rps=R")
    return unknown


def _num(value: Any, label: str) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{label} must be a number, got {value!r}") from None
