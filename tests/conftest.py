from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module

from llmperf.run.config import Config, load_config, register_configs


def compose_overrides(*overrides: str) -> Config:
    """Compose the config tree with overrides, as the CLI does, into a validated Config."""
    register_configs()
    with initialize_config_module(config_module="scenarios", version_base="1.3"):
        return load_config(compose("config", overrides=list(overrides)))


@pytest.fixture
def compose_config():
    return compose_overrides
