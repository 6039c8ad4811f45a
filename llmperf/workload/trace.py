"""Request traces to replay: when each request came, how long its prompt and output were.

JSONL in the Mooncake format, one request a line:
    {"timestamp": 1250, "input_length": 1830, "output_length": 96, "hash_ids": [0, 1, 2, 7]}
or CSV with a header holding at least `timestamp,input_length,output_length`.
Timestamps are milliseconds and must not decrease. `hash_ids` (optional) name the prompt's
512-token blocks: two requests with the same leading ids share that prompt prefix.

BurstGPT's CSV is read too, known by its header
(`Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`): timestamps in
seconds, lengths from `Request tokens` and `Response tokens`. Its rows with 0 response
tokens (requests that failed in the original service) are left out.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from llmperf.errors import DataError
from llmperf.workload.datasets import read_jsonl, resolve_path

TRACE_FIELDS = ("timestamp", "input_length", "output_length")
BURSTGPT_FIELDS = ("Timestamp", "Request tokens", "Response tokens")  # seconds, tokens, tokens
TRACE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class TraceRow:
    timestamp_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()


def load_trace(path: str, key: str = "scenario.arrival.trace_path") -> list[TraceRow]:
    file = resolve_path(path, key)
    if file.suffix.lower() == ".csv":
        raw_rows = _read_csv(file, key)
    else:
        raw_rows = read_jsonl(file.read_text(encoding="utf-8"), f"{key}: {file}")
    rows: list[TraceRow] = []
    for lineno, raw in raw_rows:
        row = _parse_row(raw, f"{key}: {file} line {lineno}")
        if rows and row.timestamp_s < rows[-1].timestamp_s:
            raise DataError(f"{key}: {file} line {lineno}: timestamp goes back in time")
        rows.append(row)
    if not rows:
        raise DataError(f"{key}: {file} holds no requests")
    return rows


def _read_csv(file: Path, key: str) -> list[tuple[int, object]]:
    with file.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if all(name in (reader.fieldnames or ()) for name in BURSTGPT_FIELDS):
            return [(reader.line_num, row) for row in _burstgpt_rows(reader)]
        missing = [name for name in TRACE_FIELDS if name not in (reader.fieldnames or ())]
        if missing:
            raise DataError(
                f"{key}: {file}: header lacks {', '.join(missing)}; expected {','.join(TRACE_FIELDS)}"
            )
        return [(reader.line_num, row) for row in reader]


def _burstgpt_rows(reader: csv.DictReader) -> Iterator[dict[str, object]]:
    """BurstGPT's rows in the Mooncake fields (timestamp in ms); failed requests left out."""
    for row in reader:
        timestamp, request, response = (row.get(name) for name in BURSTGPT_FIELDS)
        if response in ("0", "0.0"):
            continue
        try:
            timestamp = float(timestamp) * 1000.0
        except (TypeError, ValueError):
            pass  # _parse_row names the line
        yield {"timestamp": timestamp, "input_length": request, "output_length": response}


def _parse_row(raw: object, where: str) -> TraceRow:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected an object with fields {', '.join(TRACE_FIELDS)}")
    missing = [name for name in TRACE_FIELDS if raw.get(name) in (None, "")]
    if missing:
        raise DataError(
            f"{where}: missing {', '.join(missing)}; expected fields {', '.join(TRACE_FIELDS)}"
        )
    try:
        timestamp_ms = float(raw["timestamp"])
        input_length = int(raw["input_length"])
        output_length = int(raw["output_length"])
        hash_ids = raw.get("hash_ids") or ()
        hash_ids = tuple(
            int(h) for h in (hash_ids.split() if isinstance(hash_ids, str) else hash_ids)
        )
    except (TypeError, ValueError):
        raise DataError(f"{where}: timestamp, lengths and hash_ids must be numbers") from None
    if timestamp_ms < 0 or input_length < 1 or output_length < 1:
        raise DataError(f"{where}: timestamp must be >= 0 and lengths >= 1")
    return TraceRow(timestamp_ms / 1000.0, input_length, output_length, hash_ids)
