"""What every dataset format shares: a conversation, the column mapping, the file paths
(`pkg://` for the files shipped with llmperf) and JSONL lines. The formats themselves are
in datasets.py (the registry, ShareGPT) and dataset_table.py (the `datasets` library)."""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass
from pathlib import Path

from llmperf.errors import ConfigError, DataError
from llmperf.options import option

TABLE_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".arrow": "arrow"}


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
    output_tokens: int | None = None  # the output length where a column gives it as a number


@dataclass
class DatasetColumns:
    """`scenario.dataset_columns`: which column of a table holds what (dataset_format table)."""

    prompt: str | None = option(None, "the prompt's text; null: the first user turn of `turns`")
    output: str | None = option(None, "the output: its length in tokens (a number) or the reply's text; null: the reply in `turns`")
    turns: str | None = option(None, "a conversation: a list of {from, value} (ShareGPT) or {role, content} messages; null: `conversations` if the table has it")
    split: str = option("train", "the split of a Hub dataset")

    @property
    def mapped(self) -> bool:
        return any((self.prompt, self.output, self.turns))


def exchanges_of(turns: list[dict]) -> tuple[tuple[str, str], ...]:
    """(human, reply) pairs from the start, up to the first turn out of that alternation."""
    pairs = []
    for human, reply in zip(turns[::2], turns[1::2], strict=False):
        if human["from"] != "human" or reply["from"] == "human":
            break
        pairs.append((human["value"], reply["value"]))
    return tuple(pairs)


def is_turn(turn: object) -> bool:
    return (
        isinstance(turn, dict)
        and isinstance(turn.get("from"), str)
        and isinstance(turn.get("value"), str)
    )


def looks_local(path: str) -> bool:
    """A file path rather than a Hub name (`org/name`): it exists, has a table's suffix, or
    starts like a path."""
    return (Path(path).expanduser().exists() or Path(path).suffix.lower() in TABLE_SUFFIXES
            or path.startswith(("/", ".", "~")))
