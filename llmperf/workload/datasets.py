"""Conversation datasets: the formats (`scenario.dataset_format`) and ShareGPT files. What
the formats share (a conversation, the column mapping, paths) is in dataset_files.py.

    sharegpt  a local ShareGPT file (a JSON list or JSONL), read here with no dependency
    table     a local json, jsonl, parquet or arrow file, or a Hub dataset, read through the
              `datasets` library with `scenario.dataset_columns` (dataset_table.py)
    auto      sharegpt for a local .json or .jsonl file with no column mapped, else table
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from llmperf.errors import DataError
from llmperf.registry import Registry
from llmperf.workload.dataset_files import (
    TABLE_SUFFIXES,
    Conversation,
    DatasetColumns,
    exchanges_of,
    is_turn,
    looks_local,
    read_jsonl,
    resolve_path,
)

__all__ = ["DATASET_FORMATS", "TABLE_SUFFIXES", "Conversation", "DatasetColumns",
           "check_dataset", "load_conversations", "load_sharegpt", "looks_local", "read_jsonl",
           "resolve_path"]


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
        if not isinstance(turns, list) or not all(is_turn(t) for t in turns):
            raise DataError(
                f"{key}: {file} {where} {index}: expected an object with "
                '"conversations": [{"from": ..., "value": ...}, ...]'
            )
        if len(turns) >= 2 and turns[0]["from"] == "human":
            exchanges = exchanges_of(turns)
            conversations.append(Conversation(*exchanges[0], exchanges=exchanges))
    if not conversations:
        raise DataError(f"{key}: {file} holds no conversation with a prompt and a reply")
    return conversations


def _sharegpt(path: str, columns: DatasetColumns, key: str) -> list[Conversation]:
    return load_sharegpt(path, key)


def _auto(path: str, columns: DatasetColumns, key: str) -> list[Conversation]:
    local_json = Path(path).suffix.lower() in (".json", ".jsonl") or path.startswith("pkg://")
    name = "sharegpt" if local_json and not columns.mapped else "table"
    return DATASET_FORMATS.get(name)(path, columns, key)


# Dataset formats by name (`scenario.dataset_format`): (path or Hub name, columns, config
# key) -> conversations.
DATASET_FORMATS: Registry[Callable[[str, DatasetColumns, str], list[Conversation]]] = Registry(
    "dataset format",
    {"auto": _auto, "sharegpt": _sharegpt, "table": "llmperf.workload.dataset_table:load_table"},
)


def load_conversations(path: str, fmt: str, columns: DatasetColumns,
                       key: str = "scenario.dataset") -> list[Conversation]:
    return DATASET_FORMATS.get(fmt)(path, columns, key)


def check_dataset(path: str, fmt: str, columns: DatasetColumns, key: str = "scenario.dataset") -> None:
    """Fail before any engine starts: a local file must be there (a Hub name is read then)."""
    if path.startswith("pkg://") or fmt == "sharegpt" or looks_local(path):
        resolve_path(path, key)
