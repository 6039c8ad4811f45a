"""Running llmperf benchmarks from tests: compose the config tree as the CLI does, run, read the summary."""

from __future__ import annotations

import io
import json
from pathlib import Path

from hydra import compose, initialize_config_module
from rich.console import Console

from llmperf.run.config import load_config, register_configs
from llmperf.run.runner import run_benchmark


def run(folder: Path, *overrides: str) -> dict:
    """One llmperf run with these overrides into `folder`; its summary.json."""
    register_configs()
    with initialize_config_module(config_module="scenarios", version_base="1.3"):
        config = load_config(compose("config", overrides=list(overrides)))
    run_benchmark(config, folder, argv=list(overrides), console=Console(file=io.StringIO()))
    return json.loads((folder / "summary.json").read_text())
