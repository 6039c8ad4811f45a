"""Errors the user caused. The CLI prints them as one line and exits 2."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from types import ModuleType
from typing import Any


class UsageError(Exception):
    """Bad input: a config value, an override, a dataset or trace file."""


class ConfigError(UsageError, ValueError):
    """A config field holds a bad value.

    `key` is the field's name where it was detected; the CLI replaces it with the
    full dotted path (`scenario.arrival.process`) before printing.
    """

    def __init__(self, key: str, value: Any, problem: str, valid: Iterable[str] = ()) -> None:
        self.key = key
        self.value = value
        self.problem = problem
        self.valid = tuple(valid)
        super().__init__(self._message())

    def _message(self) -> str:
        text = f"{self.key}={self.value!r}: {self.problem}"
        if self.valid:
            text += f"; valid: {', '.join(self.valid)}"
        return text

    def with_key(self, key: str) -> ConfigError:
        return ConfigError(key, self.value, self.problem, self.valid)


class DataError(UsageError):
    """A dataset or trace file is missing or holds a line that cannot be read."""


class MissingDependency(UsageError):
    """An optional package is not installed; the message names what installs it:
    `engine=hf needs transformers: pip install -e ".[peers]"`."""

    def __init__(self, what: str, package: str, install: str) -> None:
        self.what = what
        self.package = package
        self.install = install
        super().__init__(f"{what} needs {package}: {install}")


def extra_install(extra: str) -> str:
    """The pip command that installs one of llmperf's extras (from a checkout, as the README)."""
    return f'pip install -e ".[{extra}]"'


def require(module: str, extra: str | None, what: str, package: str | None = None) -> ModuleType:
    """Import `module`, an optional dependency; MissingDependency naming `extra` when it (or a
    package above it) is not installed. `what` is what needs it (`engine=hf`), `package` its
    name for pip when that is not the module's; `extra=None`: no extra of llmperf installs it,
    the line says `pip install <package>`."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        parts = module.split(".")
        if err.name not in {".".join(parts[: i + 1]) for i in range(len(parts))}:
            raise  # the package is there but something it imports is not: not ours to name
        package = package or parts[0]
        install = extra_install(extra) if extra else f"pip install {package}"
        raise MissingDependency(what, package, install) from None


def check_positive(owner: Any, *names: str, allow_none: bool = True, strict: bool = True) -> None:
    for name in names:
        value = getattr(owner, name)
        if value is None and allow_none:
            continue
        if value is None or value < 0 or (strict and value == 0):
            raise ConfigError(name, value, "must be > 0" if strict else "must be >= 0")
