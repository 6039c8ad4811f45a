"""`scenario.dataset_format=table`: a local json, jsonl, parquet or arrow file, or a Hugging
Face Hub dataset, read through the `datasets` library (the `data` extra), its columns mapped
by `scenario.dataset_columns`.

A row gives a conversation one of two ways:

    turns    a list of messages, ShareGPT's {"from": "human"|"gpt", "value"} or the chat
             format's {"role": "user"|"assistant", "content"}: the (user, reply) pairs from
             the start; with `scenario.sessions.turns` each pair is a turn of a session
    prompt   the prompt's text, and `output` (when mapped) either the output length in
             tokens (a number) or the reply's text

With no column mapped, a `conversations` column is taken as the turns. A Hub name is read
from the local cache when offline (HF_HUB_OFFLINE=1 or HF_DATASETS_OFFLINE=1): a dataset not
cached there is an error naming it, as are a missing file and an unknown column.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from llmperf.errors import ConfigError, DataError
from llmperf.workload.dataset_files import (
    TABLE_SUFFIXES,
    Conversation,
    DatasetColumns,
    exchanges_of,
    looks_local,
    resolve_path,
)

SHAREGPT_TURNS = "conversations"
_ROLES = {"user": "human", "human": "human", "assistant": "gpt", "gpt": "gpt", "model": "gpt",
          "bot": "gpt", "chatgpt": "gpt"}


def load_table(path: str, columns: DatasetColumns, key: str = "scenario.dataset") -> list[Conversation]:
    table = open_table(path, columns.split, key)
    names = list(table.column_names)
    turns = columns.turns or (SHAREGPT_TURNS if not columns.prompt and SHAREGPT_TURNS in names
                              else None)
    if turns is None and columns.prompt is None:
        raise DataError(f"{key}: {path} has no {SHAREGPT_TURNS!r} column; map one with "
                        f"scenario.dataset_columns.prompt or .turns (columns: {', '.join(names)})")
    for field, name in (("turns", turns), ("prompt", columns.prompt), ("output", columns.output)):
        if name is not None and name not in names:
            raise ConfigError(f"dataset_columns.{field}", name,
                              f"no such column in {path}", names)
    rows = table.select_columns([c for c in (turns, columns.prompt, columns.output) if c])
    conversations = [c for row in rows if (c := _conversation(row, turns, columns)) is not None]
    if not conversations:
        raise DataError(f"{key}: {path} holds no row with a prompt"
                        + (" and a reply" if turns else ""))
    return conversations


def open_table(path: str, split: str, key: str) -> Any:
    """The rows of the file or Hub dataset, as a `datasets.Dataset`."""
    try:
        import datasets
    except ImportError:
        raise DataError(f"{key}={path!r}: reading it needs the datasets package "
                        '(pip install -e ".[data]")') from None
    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    if path.startswith("pkg://") or looks_local(path):
        file = resolve_path(path, key)
        builder = TABLE_SUFFIXES.get(file.suffix.lower())
        if builder is None:
            raise ConfigError(key, path, "unknown file type; expected "
                              + ", ".join(sorted(TABLE_SUFFIXES)))
        try:
            return datasets.load_dataset(builder, data_files=str(file), split="train")
        except Exception as err:  # noqa: BLE001 - the library's many parse errors, as one line
            raise DataError(f"{key}: {file}: not a readable {builder} table "
                            f"({_first_line(err)})") from None
    try:
        return datasets.load_dataset(path, split=split)
    except Exception as err:  # noqa: BLE001 - not found, offline, no such split: one line
        if _offline():
            raise DataError(f"{key}={path!r}: not in the local datasets cache, and offline mode "
                            "is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)") from None
        raise DataError(f"{key}={path!r}: cannot load this Hub dataset ({_first_line(err)})") from None


def _offline() -> bool:
    return any(os.environ.get(name, "").upper() in ("1", "ON", "YES", "TRUE")
               for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def _conversation(row: dict[str, Any], turns: str | None, columns: DatasetColumns) -> Conversation | None:
    if turns is not None:
        exchanges = exchanges_of(_messages(row[turns]))
        if not exchanges:
            return None
        prompt, reply = exchanges[0]
        if columns.prompt is not None:
            prompt = str(row[columns.prompt])
    else:
        prompt, reply, exchanges = str(row[columns.prompt] or ""), "", ()
        if not prompt:
            return None
    output_tokens = None
    if columns.output is not None:
        value = row[columns.output]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            output_tokens = max(1, int(value))
        elif value is not None:
            reply = str(value)
    if not exchanges:
        exchanges = ((prompt, reply),)
    return Conversation(prompt, reply, exchanges, output_tokens)


def _messages(value: Iterable[Any] | None) -> list[dict[str, str]]:
    """The messages as ShareGPT turns ({"from": "human"|"gpt", "value"}); unknown roles
    (a system message) end the alternation where they stand."""
    out = []
    for message in value or ():
        if not isinstance(message, dict):
            continue
        role = message.get("from", message.get("role"))
        text = message.get("value", message.get("content"))
        if isinstance(role, str) and isinstance(text, str):
            if role == "system" and not out:
                continue  # a leading system message is not a turn
            out.append({"from": _ROLES.get(role.lower(), role), "value": text})
    return out
