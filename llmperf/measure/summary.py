"""summary.json as a typed object: what ran, whether to trust it, and its figures.

    schema_version  SCHEMA_VERSION
    engine, scenario, model, hardware   what ran (objects)
    valid, validity, interrupted        whether to trust it
    figures         the flat figures, keyed as the metric catalog names them (`ttft_s` holds
                    its statistics), with the labels that say how they were made
                    (`token_count_source`, `roofline_source`, `cost_split`, ...)
    origin_unix_s, origin_perf_counter_s, measure_start_s   the clock of the run files

The file is flat: the figures sit beside the other keys, so `ttft_s.p99` is
`summary["ttft_s"]["p99"]`. Reading checks the version and each catalog figure's type;
a figure the file lacks stays absent (a reader can tell "missing" from "null").

Versions: 1 is the current one; figures added since (`token_count_source`) are optional.
A summary written before schema versions existed is read when it holds the request
counts every summary has; anything else is refused with one line naming the version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmperf.measure.catalog import STAT_KEYS, find
from llmperf.measure.validity import Check

SCHEMA_VERSION = 1
# What a summary from before schema versions must hold to be read as one.
UNVERSIONED_REQUIRED = ("num_requests", "num_completed", "num_failed", "duration_s")
CLOCK = ("origin_unix_s", "origin_perf_counter_s", "measure_start_s")
_SETUP = ("engine", "scenario", "model")


def is_number(value: Any) -> bool:
    """An int or float from JSON; true and false are not numbers."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class UnsupportedSummary(ValueError):
    """A summary this llmperf cannot read: another schema version, or not a summary."""

    def __init__(self, version: Any, detail: str = "") -> None:
        self.version = version
        self.detail = f" ({detail})" if detail else ""
        super().__init__(self.wording("this llmperf"))

    def wording(self, reader: str) -> str:
        """The line a reader (the gate, the report) shows: 'schema_version 2, this gate reads 1'."""
        return f"schema_version {self.version!r}, {reader} reads {SCHEMA_VERSION}{self.detail}"


class MalformedSummary(ValueError):
    """A summary of a readable version with a figure of the wrong type."""


@dataclass
class Summary:
    engine: dict[str, Any] = field(default_factory=dict)
    scenario: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    hardware: dict[str, Any] | str | None = None
    valid: bool | None = False
    validity: list[Check] = field(default_factory=list)
    interrupted: bool = False
    stopped: str | None = None  # why sending stopped early (a launched server that died)
    server: dict[str, Any] | None = None  # the server llmperf launched: family, version, command
    figures: dict[str, Any] = field(default_factory=dict)
    origin_unix_s: float | None = None
    origin_perf_counter_s: float | None = None
    measure_start_s: float | None = None
    schema_version: int | None = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": self.schema_version, "engine": self.engine,
                               "scenario": self.scenario, "model": self.model,
                               "hardware": self.hardware, "valid": self.valid,
                               "validity": [c.to_dict() for c in self.validity],
                               "interrupted": self.interrupted, "stopped": self.stopped,
                               "server": self.server, **self.figures}
        out.update({k: getattr(self, k) for k in CLOCK if getattr(self, k) is not None})
        return out

    @classmethod
    def from_dict(cls, d: Any) -> Summary:
        """UnsupportedSummary for another version; MalformedSummary for a figure of the wrong
        type."""
        if not isinstance(d, dict):
            raise MalformedSummary("not a JSON object")
        version = d.get("schema_version")
        if version is None:
            missing = [k for k in UNVERSIONED_REQUIRED if k not in d]
            if missing:
                raise UnsupportedSummary(None, f"no {', '.join(missing)}: not a run summary")
        elif version != SCHEMA_VERSION:
            raise UnsupportedSummary(version)
        structural = {"schema_version", *_SETUP, "hardware", "valid", "validity",
                      "interrupted", "stopped", "server", *CLOCK}
        figures = {k: v for k, v in d.items() if k not in structural}
        for key, value in figures.items():
            _check_figure(key, value)
        return cls(
            **{k: _object(d, k) for k in _SETUP},
            hardware=d.get("hardware"),
            valid=d.get("valid"),
            validity=[Check.from_dict(c) for c in d.get("validity") or []
                      if isinstance(c, dict)],
            interrupted=bool(d.get("interrupted")),
            stopped=d.get("stopped") if isinstance(d.get("stopped"), str) else None,
            server=d.get("server") if isinstance(d.get("server"), dict) else None,
            figures=figures,
            **{k: d[k] if is_number(d.get(k)) else None for k in CLOCK},
            schema_version=version,
        )


def _object(d: dict[str, Any], key: str) -> dict[str, Any]:
    value = d.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedSummary(f"{key} is {value!r}, not an object")
    return value


def _check_figure(key: str, value: Any) -> None:
    """A catalog figure holds a number or null (a distribution: an object of them)."""
    m = find(key)
    if m is None or value is None:
        return
    if m.distribution:
        if not isinstance(value, dict):
            raise MalformedSummary(f"{key} is {value!r}, not an object of {', '.join(STAT_KEYS)}")
        for stat, number in value.items():
            if number is not None and not is_number(number):
                raise MalformedSummary(f"{key}.{stat} is {number!r}, not a number")
    elif not is_number(value):
        raise MalformedSummary(f"{key} is {value!r}, not a number")
