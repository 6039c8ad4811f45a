"""Errors the user caused. The CLI prints them as one line and exits 2."""

from __future__ import annotations

from collections.abc import Iterable
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


def check_positive(owner: Any, *names: str, allow_none: bool = True, strict: bool = True) -> None:
    for name in names:
        value = getattr(owner, name)
        if value is None and allow_none:
            continue
        if value is None or value < 0 or (strict and value == 0):
            raise ConfigError(name, value, "must be > 0" if strict else "must be >= 0")
