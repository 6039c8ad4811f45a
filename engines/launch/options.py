"""`engine.launch`: the server llmperf starts before the load and stops after it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engines.launch.family import FAMILIES
from llmperf.errors import ConfigError


@dataclass
class LaunchOptions:
    """`family` null and no `command`: llmperf launches nothing and measures `engine.base_url`."""

    family: str | None = None  # vllm | sglang | llama.cpp | llmperf-serve | generic
    command: list[str] | None = None  # generic: argv with {host} {port} {model} placeholders
    args: dict[str, Any] = field(default_factory=dict)  # max_num_seqs: 8 -> --max-num-seqs 8
    env: dict[str, Any] = field(default_factory=dict)  # over the family's defaults
    binary: str | None = None  # the executable; null: the family's default
    host: str = "127.0.0.1"
    port: int | None = None  # null: a free port
    ready_timeout_s: float = 600.0  # process start to /health and /v1/models answering
    stop_timeout_s: float = 15.0  # SIGTERM to SIGKILL

    def __post_init__(self) -> None:
        if self.family is not None and self.family not in FAMILIES:
            raise ConfigError("family", self.family, "unknown server family", FAMILIES)
        if self.command and self.resolved_family != "generic":
            raise ConfigError(
                "command", self.command, f"is for the generic family, not {self.family!r}; use args"
            )
        if self.resolved_family == "generic" and not self.command:
            raise ConfigError(
                "command", self.command, "the generic family needs a command: [binary, args...]"
            )
        if self.port is not None and not 1 <= self.port <= 65535:
            raise ConfigError("port", self.port, "must be in 1..65535 (null: a free port)")
        for name in ("ready_timeout_s", "stop_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(name, getattr(self, name), "must be > 0")

    @property
    def enabled(self) -> bool:
        return self.family is not None or bool(self.command)

    @property
    def resolved_family(self) -> str | None:
        """The family, with a bare `command` meaning generic."""
        return self.family or ("generic" if self.command else None)
