"""The run's stages for a server `engine.launch` names: started before the engine is built
(the client needs its URL, served name and tokenizer), stopped once the load is over.
`run_benchmark` also stops it on every other way out (`Run.resources`)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Protocol

from rich.console import Console

from engines.launch.server import LaunchError, ManagedServer
from engines.openai_options import OpenAIEngineConfig
from llmperf.errors import UsageError
from llmperf.run.config import Config


class Run(Protocol):
    """What these stages use of llmperf.run.runner.Run."""

    config: Config
    run_dir: Path
    console: Console
    server: ManagedServer | None
    resources: contextlib.ExitStack


def launch_server(run: Run) -> None:
    """Start the server and point the client at it: its URL, its served name unless
    engine.model names one, the checkpoint's tokenizer unless engine.tokenizer names one."""
    engine_cfg = run.config.engine
    if not isinstance(engine_cfg, OpenAIEngineConfig) or not engine_cfg.launch.enabled:
        return
    model = run.config.model
    try:
        server = ManagedServer(
            engine_cfg.launch, model.path or model.name, run.run_dir / "server.log"
        )
    except ValueError as err:
        raise UsageError(f"engine.launch: {err}") from None
    if model.path is None and not server.spec.serves_presets:
        raise UsageError(
            f"engine.launch={server.family!r} serves a checkpoint folder: set model.path=DIR "
            f"(llmperf-export model={model.name} out=DIR writes one)"
        )
    run.resources.callback(server.stop)
    run.console.print(
        f"starting {server.family} (log: {server.log_path})", markup=False, highlight=False
    )
    try:
        server.start()
    except LaunchError as err:
        raise UsageError(str(err)) from None
    run.server = server
    run.console.print(
        f"{server.family} {server.version or ''} ready at {server.base_url} in {server.startup_s:.1f} s",
        markup=False,
        highlight=False,
    )
    engine_cfg.base_url = server.base_url
    engine_cfg.model = engine_cfg.model or server.served_model
    if (
        engine_cfg.tokenizer is None
        and model.path
        and (Path(model.path) / "tokenizer.json").is_file()
    ):
        engine_cfg.tokenizer = model.path


def stop_server(run: Run) -> None:
    if run.server is not None:
        run.server.stop()
