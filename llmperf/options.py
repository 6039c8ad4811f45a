"""What every options dataclass uses: `option()`, a field with its help text, and the
value checks that raise `ConfigError`.

Each component declares its options once, as a dataclass beside it; Hydra's
ConfigStore holds it as the schema of its YAML, the component is built from it,
and `llmperf.run.options_table` writes the docs' tables from the fields' types,
defaults and help. A leaf module (it imports only `llmperf.errors`), so engines use it too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from llmperf.errors import ConfigError

HELP = "help"  # the field metadata key the docs' tables read


def option(default: Any = dataclasses.MISSING, help: str = "", *, factory: Callable[[], Any] | None = None) -> Any:
    """A dataclass field with its help text (one sentence, for the docs' option tables)."""
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={HELP: help})
    return dataclasses.field(default=default, metadata={HELP: help})


def check_positive(owner: Any, *names: str, allow_none: bool = True, strict: bool = True) -> None:
    """Each named field must be > 0 (>= 0 when not `strict`); None passes when `allow_none`."""
    for name in names:
        value = getattr(owner, name)
        if value is None and allow_none:
            continue
        if value is None or value < 0 or (strict and value == 0):
            raise ConfigError(name, value, "must be > 0" if strict else "must be >= 0")


def check_choice(key: str, value: str, valid: tuple[str, ...], what: str) -> None:
    """A field that takes one of a few fixed words (not a registry's members)."""
    if value not in valid:
        raise ConfigError(key, value, f"unknown {what}", valid)
