"""What the report and the gate both read from a run folder: its JSON files, and a figure of a
summary.json by its dotted path (`ttft_s.p99`). No pandas or plotting: the gate imports it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class UnreadableFile(ValueError):
    """A run file that is not valid JSON; the message names the file and the place."""


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UnreadableFile(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


def lookup(data: Any, path: str, default: Any = None) -> Any:
    """data["a"]["b"] for "a.b"; `default` where any part is missing."""
    node = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def is_number(value: Any) -> bool:
    """An int or float from JSON; true and false are not numbers."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(data: Any, path: str) -> float | None:
    """The figure at a dotted path as a float, or None where it is missing or not a number."""
    value = lookup(data, path)
    return float(value) if is_number(value) else None
