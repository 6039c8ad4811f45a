"""What every options dataclass uses: `option()`, a field with its help text, and the
value checks that raise `ConfigError` (`check_positive` is declared in llmperf/errors.py).

Each component declares its options once, as a dataclass beside it; Hydra's
ConfigStore holds it as the schema of its YAML, the component is built from it,
and `llmperf.run.options_table` writes the docs' tables from the fields' types,
defaults and help. A leaf module (it imports only `llmperf.errors`), so engines use it too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from llmperf.errors import ConfigError, check_positive

__all__ = ["HELP", "check_choice", "check_positive", "option"]

HELP = "help"  # the field metadata key the docs' tables read


def option(default: Any = dataclasses.MISSING, help: str = "", *, factory: Callable[[], Any] | None = None) -> Any:
    """A dataclass field with its help text (one sentence, for the docs' option tables)."""
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={HELP: help})
    return dataclasses.field(default=default, metadata={HELP: help})


def check_choice(key: str, value: str, valid: tuple[str, ...], what: str) -> None:
    """A field that takes one of a few fixed words (not a registry's members)."""
    if value not in valid:
        raise ConfigError(key, value, f"unknown {what}", valid)
