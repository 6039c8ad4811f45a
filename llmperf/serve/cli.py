"""The `llmperf-serve` command: `key=value` overrides with the names of llmperf's config tree.

    llmperf-serve model=tiny engine.batching=continuous port=8000
    llmperf-serve model.path=/ckpt/llama engine.precision=bf16 api_key=secret request_log=served.jsonl

Keys: model (a preset name or checkpoint folder), model.name, model.path, engine
(reference | hf), engine.<option> (any option of that engine's constructor),
host, port, api_key, served_model_name, request_log. Values are read as YAML
scalars (8, 0.5, true, null). Bad input: one line on stderr, exit code 2.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any

import yaml

from engines.registry import ENGINES
from llmperf.serve.server import DEFAULT_HOST, DEFAULT_PORT, build_server, run_server

EXIT_USAGE = 2
SERVABLE_ENGINES = tuple(name for name in ENGINES if name != "openai")
SERVER_KEYS = ("host", "port", "api_key", "served_model_name", "request_log")
MODEL_KEYS = ("model", "model.name", "model.path")


class UsageError(Exception):
    pass


def parse_overrides(argv: list[str]) -> dict[str, Any]:
    """The command line as keyword arguments of `serve()` (engine options checked by name)."""
    values: dict[str, Any] = {}
    engine_overrides: dict[str, Any] = {}
    for arg in argv:
        key, sep, raw = arg.partition("=")
        if not sep or not key:
            raise UsageError(
                f"{arg!r} is not key=value (e.g. model=tiny engine.batching=continuous port=8000)"
            )
        value = _scalar(key, raw)
        if key.startswith("engine."):
            engine_overrides[key.removeprefix("engine.")] = value
        elif key in (*SERVER_KEYS, *MODEL_KEYS, "engine"):
            values[key] = value
        else:
            valid = ", ".join((*MODEL_KEYS, "engine", "engine.<option>", *SERVER_KEYS))
            raise UsageError(f"unknown key {key!r}; valid: {valid}")
    engine_name = values.pop("engine", "reference")
    if engine_name not in SERVABLE_ENGINES:
        raise UsageError(
            f"engine={engine_name!r} cannot be served; valid: {', '.join(SERVABLE_ENGINES)}"
        )
    model = (
        values.pop("model.path", None)
        or values.pop("model", None)
        or values.pop("model.name", None)
    )
    values.pop("model.name", None)
    engine_options = {"model": str(model or "tiny"), **_checked(engine_name, engine_overrides)}
    port = values.get("port", DEFAULT_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise UsageError(f"port={port!r} must be an integer in 0..65535")
    return {
        "engine_options": engine_options,
        "engine_name": engine_name,
        "host": str(values.get("host", DEFAULT_HOST)),
        "port": port,
        "api_key": _optional_str(values.get("api_key")),
        "served_model_name": _optional_str(values.get("served_model_name")),
        "request_log": _optional_str(values.get("request_log")),
    }


def _scalar(key: str, raw: str) -> Any:
    try:
        return yaml.safe_load(raw) if raw else None
    except yaml.YAMLError:
        raise UsageError(f"{key}: cannot read value {raw!r}") from None


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _checked(engine_name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    module_name, class_name = ENGINES[engine_name].split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    names = [n for n in inspect.signature(cls.__init__).parameters if n not in ("self", "model")]
    for key in overrides:
        if key not in names:
            raise UsageError(
                f"engine.{key}: no such option of engine {engine_name!r}; valid: {', '.join(names)}"
            )
    return overrides


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return
    try:
        options = parse_overrides(argv)
        server = build_server(
            options["engine_options"],
            options["engine_name"],
            options["api_key"],
            options["served_model_name"],
            options["request_log"],
        )
    except (UsageError, ValueError, TypeError, FileNotFoundError) as err:
        print(f"llmperf-serve: error: {err}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    run_server(server, options["host"], options["port"])


if __name__ == "__main__":
    main()
