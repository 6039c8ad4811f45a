"""Name -> member, for every swappable family (engines, attention backends, batching
policies, KV caches, precisions, arrival processes, length distributions, hardware
profiles, telemetry sources, dataset formats).

A member is the object itself or a `"module:attribute"` string imported on first use,
so a family can list its names without importing torch or transformers. A family
whose members are files (hardware profiles) passes `find`, called on first use.

A leaf module: it imports nothing else from the project, so engines use it too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from llmperf.errors import ConfigError

T = TypeVar("T")
_NO_DEFAULT = object()


class Registry(Generic[T]):
    """`family` names the kind of member in errors ("attention backend").

    `also_valid` lists names a caller accepts beside the members (telemetry's `auto`),
    so every error names every choice.
    """

    def __init__(
        self,
        family: str,
        members: Mapping[str, T | str] | None = None,
        *,
        find: Callable[[], Mapping[str, T | str]] | None = None,
        also_valid: tuple[str, ...] = (),
    ) -> None:
        self.family = family
        self.also_valid = also_valid
        self._members: dict[str, T | str] = dict(members or {})
        self._find = find

    def add(self, name: str, member: T | str) -> None:
        self._entries()[name] = member

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._entries())

    @property
    def choices(self) -> tuple[str, ...]:
        """Every name a config may hold: `also_valid` first, then the members."""
        return (*self.also_valid, *self.names)

    def __contains__(self, name: object) -> bool:
        return name in self._entries()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self._entries())

    def get(self, name: str, default: Any = _NO_DEFAULT) -> T:
        """The member `name`; without it, `default` if given, else ValueError naming the valid choices."""
        entries = self._entries()
        if name not in entries:
            if default is not _NO_DEFAULT:
                return default
            raise ValueError(f"unknown {self.family} {name!r}; valid: {', '.join(self.choices)}")
        member = entries[name]
        if isinstance(member, str) and ":" in member:
            module_name, attribute = member.split(":")
            member = getattr(importlib.import_module(module_name), attribute)
            entries[name] = member
        return member

    __getitem__ = get
    __setitem__ = add

    def __delitem__(self, name: str) -> None:
        del self._entries()[name]

    def build(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the member `name` (a class or factory) with the arguments."""
        return self.get(name)(*args, **kwargs)

    def check(self, key: str, name: str) -> None:
        """For a config field: ConfigError naming the field, the value and the valid choices."""
        if name not in self.choices:
            raise ConfigError(key, name, f"unknown {self.family}", self.choices)

    def _entries(self) -> dict[str, T | str]:
        if self._find is not None:
            self._members = {**self._find(), **self._members}
            self._find = None
        return self._members
