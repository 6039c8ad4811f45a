"""ShareGPT-format conversation datasets, and the `pkg://` paths of the files shipped with llmperf."""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmperf.errors import ConfigError, DataError
from llmperf.registry import Registry


def resolve_path(path: str, key: str) -> Path:
    """A filesystem path, or `pkg://package/rel/path` for a file installed inside a package.

    `key` names the config field, for the error when the file is not there.
    """
    if path.startswith("pkg://"):
        package, _, rel = path.removeprefix("pkg://").partition("/")
        try:
            resolved = Path(str(importlib.resources.files(package) / rel))
        except ModuleNotFoundError:
            raise ConfigError(key, path, f"no package named {package!r}") from None
    else:
        resolved = Path(path).expanduser()
    if not resolved.is_file():
        raise ConfigError(key, path, "file not found")
    return resolved


def read_jsonl(text: str, where: str) -> list[tuple[int, object]]:
    """(line number, object) for each non-blank line; `where` ("key: file") starts the error."""
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((lineno, json.loads(line)))
        except json.JSONDecodeError as err:
            raise DataError(f"{where} line {lineno}: not valid JSON ({err.msg})") from None
    return rows


@dataclass(frozen=True)
class Conversation:
    prompt: str  # the first human turn
    completion: str  # the reply to it; its length is the output length
    exchanges: tuple[tuple[str, str], ...] = ()  # every (human turn, reply) pair, in order


def load_sharegpt(path: str, key: str = "scenario.dataset") -> list[Conversation]:
    """Read a ShareGPT file: a JSON list or JSONL of {"conversations": [{"from", "value"}, ...]}.

    Conversations without a human turn followed by a reply are skipped, as in vLLM's
    `bench serve`; a line that is not such an object is an error naming the line.
    """
    file = resolve_path(path, key)
    text = file.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            items = list(enumerate(json.loads(text), start=1))
        except json.JSONDecodeError as err:
            raise DataError(
                f"{key}: {file}: not valid JSON ({err.msg} at line {err.lineno})"
            ) from None
        where = "item"
    else:
        items = read_jsonl(text, f"{key}: {file}")
        where = "line"
    conversations = []
    for index, item in items:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list) or not all(_is_turn(t) for t in turns):
            raise DataError(
                f"{key}: {file} {where} {index}: expected an object with "
                '"conversations": [{"from": ..., "value": ...}, ...]'
            )
        if len(turns) >= 2 and turns[0]["from"] == "human":
            exchanges = _exchanges(turns)
            conversations.append(Conversation(*exchanges[0], exchanges=exchanges))
    if not conversations:
        raise DataError(f"{key}: {file} holds no conversation with a prompt and a reply")
    return conversations


def _exchanges(turns: list[dict]) -> tuple[tuple[str, str], ...]:
    """(human, reply) pairs from the start, up to the first turn out of that alternation."""
    pairs = []
    for human, reply in zip(turns[::2], turns[1::2], strict=False):
        if human["from"] != "human" or reply["from"] == "human":
            break
        pairs.append((human["value"], reply["value"]))
    return tuple(pairs)


def _is_turn(turn: object) -> bool:
    return (
        isinstance(turn, dict)
        and isinstance(turn.get("from"), str)
        and isinstance(turn.get("value"), str)
    )


# Dataset file formats by name (`scenario.dataset_format`): path, config key -> conversations.
DATASET_FORMATS: Registry[Callable[[str, str], list[Conversation]]] = Registry(
    "dataset format", {"sharegpt": load_sharegpt}
)
