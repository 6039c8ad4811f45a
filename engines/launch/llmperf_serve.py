"""llmperf-serve: the reference engine (or `engine=hf`) behind the OpenAI API, run with
this interpreter. `engine.launch.args` are its own overrides: `{engine.batching: static}`
-> `engine.batching=static`. A preset serves by name when `model.path` is not set."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import llmperf
from engines.launch.base import ServerFamily


class LlmperfServe(ServerFamily):
    name = "llmperf-serve"
    version_routes = ()
    serves_presets = True

    def default_binary(self) -> str:
        return sys.executable

    def format_args(self, args: dict[str, Any]) -> list[str]:
        return [
            f"{key}={'null' if value is None else _value(value)}" for key, value in _dotted(args)
        ]

    def command(self, model: str, host: str, port: int) -> list[str]:
        model_arg = f"model.path={model}" if Path(model).expanduser().exists() else f"model={model}"
        return [
            self.binary,
            "-m",
            "llmperf.serve",
            model_arg,
            f"host={host}",
            f"port={port}",
            *self.format_args(self.args()),
        ]

    def local_version(self) -> str:
        return llmperf.__version__


def _dotted(args: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """{engine: {batching: static}} (how `args.engine.batching=static` composes) ->
    [("engine.batching", "static")]."""
    out: list[tuple[str, Any]] = []
    for key, value in args.items():
        if isinstance(value, dict):
            out += _dotted(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_value(v) for v in value) + "]"
    return str(value)
