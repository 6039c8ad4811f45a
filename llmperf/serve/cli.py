"""The `llmperf-serve` command, configured from llmperf's own Hydra tree.

    llmperf-serve model=tiny engine.batching=continuous port=8000
    llmperf-serve model.path=/ckpt/llama engine.precision=bf16 api_key=secret request_log=served.jsonl
    llmperf-serve engine=hf model=smollm2-135m
    llmperf-serve engine=synthetic engine.tpot_s=0.01 engine.reasoning_tokens=8   # no model

Engine and model come from the same config groups as `llmperf` (`engine=reference|hf`,
`engine.<option>=...`, `model=<preset>`, `model.path=...`), with the same checks.
Server keys: host (127.0.0.1), port (8000), api_key, served_model_name, request_log.
Bad input: one line on stderr, exit code 2.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, NoReturn

import yaml
from hydra import initialize_config_module

from llmperf.cli import check_command_line
from llmperf.errors import UsageError, require
from llmperf.run.compose import CONFIG_MODULE, compose_config
from llmperf.run.config import register_configs

EXIT_USAGE = 2
# What the server runs on (the peers extra), checked before llmperf.serve.server imports them.
SERVER_NEEDS = (("uvicorn", "uvicorn"), ("starlette", "fastapi"))
SERVER_KEYS = ("host", "port", "api_key", "served_model_name", "request_log")


def parse_overrides(argv: list[str]) -> dict[str, Any]:
    """The command line as keyword arguments of `build_server()` plus host and port."""
    from llmperf.serve.server import DEFAULT_HOST, DEFAULT_PORT, check_servable

    server: dict[str, Any] = {}
    overrides: list[str] = []
    for arg in argv:
        key, sep, raw = arg.partition("=")
        if sep and key in SERVER_KEYS:
            server[key] = _scalar(key, raw)
        else:
            overrides.append(arg)
    register_configs()
    check_command_line(overrides)
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        config = compose_config(overrides)
    try:
        check_servable(config.engine.name)  # before the weights load
    except ValueError as err:
        raise UsageError(str(err)) from None
    port = server.get("port", DEFAULT_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise UsageError(f"port={port!r} must be an integer in 0..65535")
    return {
        "engine_options": {"model": config.model.ref, **_fields(config.engine)},
        "engine_name": config.engine.name,
        "host": str(server.get("host", DEFAULT_HOST)),
        "port": port,
        "api_key": _optional_str(server.get("api_key")),
        "served_model_name": _optional_str(server.get("served_model_name")),
        "request_log": _optional_str(server.get("request_log")),
    }


def _fields(engine: Any) -> dict[str, Any]:
    """An engine's options as `build_server` takes them (the name is its own argument)."""
    return {k: v for k, v in dataclasses.asdict(engine).items() if k != "name"}


def _scalar(key: str, raw: str) -> Any:
    try:
        return yaml.safe_load(raw) if raw else None
    except yaml.YAMLError:
        raise UsageError(f"{key}: cannot read value {raw!r}") from None


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return
    try:
        for module, package in SERVER_NEEDS:
            require(module, "peers", "llmperf-serve", package)
        from llmperf.serve.server import build_server, run_server

        options = parse_overrides(argv)
        server = build_server(
            options["engine_options"],
            options["engine_name"],
            options["api_key"],
            options["served_model_name"],
            options["request_log"],
        )
    except ImportError as err:  # the engine's library is not installed (transformers for hf)
        _exit_usage(f"the engine is not available here: {err}")
    except (UsageError, ValueError, TypeError, OSError) as err:
        _exit_usage(str(err))
    run_server(server, options["host"], options["port"])


def _exit_usage(message: str) -> NoReturn:
    message = " ".join(message.split())
    print(f"llmperf-serve: error: {message}", file=sys.stderr)
    sys.exit(EXIT_USAGE)


if __name__ == "__main__":
    main()
