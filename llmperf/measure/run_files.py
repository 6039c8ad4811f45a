"""The one reader of run folders: summary.json as a typed Summary, the JSON-lines files, the
job's Hydra overrides, and a figure of a summary by its dotted path (`ttft_s.p99`).

The report and the gate both read through here; each words the errors for its own users. No
pandas or plotting: the gate imports it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from llmperf.measure.summary import MalformedSummary, Summary, UnsupportedSummary, is_number

SUMMARY_FILE = "summary.json"
OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"

__all__ = ["MalformedSummary", "UnreadableFile", "UnsupportedSummary", "is_number", "lookup",
           "number", "read_json", "read_jsonl", "read_overrides", "read_summary"]


class UnreadableFile(ValueError):
    """A run file that is not valid JSON (or YAML); the message names the file and the place."""


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UnreadableFile(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


def read_summary(run_dir: Path) -> Summary:
    """The run's summary.json: UnreadableFile (not JSON), UnsupportedSummary (another schema
    version, or not a summary) or MalformedSummary (a figure of the wrong type)."""
    return Summary.from_dict(read_json(Path(run_dir) / SUMMARY_FILE))


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The file's JSON objects, and the numbers of the lines that are not one (a line cut in
    half by a killed process); blank lines are skipped."""
    rows, bad = [], []
    text = path.read_text(encoding="utf-8", errors="replace")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad.append(n)
    return rows, bad


def read_overrides(run_dir: Path) -> list[str] | None:
    """The job's Hydra overrides as typed (`engine.batching=static`); None when the run was
    not a Hydra job (no .hydra/overrides.yaml)."""
    file = Path(run_dir) / OVERRIDES_FILE
    if not file.is_file():
        return None
    try:
        items = yaml.safe_load(file.read_text(encoding="utf-8")) or []
    except yaml.YAMLError:
        raise UnreadableFile(f"{file}: not valid YAML") from None
    return [str(item) for item in items] if isinstance(items, list) else []


def lookup(data: Any, path: str, default: Any = None) -> Any:
    """data["a"]["b"] for "a.b"; `default` where any part is missing."""
    node = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def number(data: Any, path: str) -> float | None:
    """The figure at a dotted path as a float, or None where it is missing or not a number."""
    value = lookup(data, path)
    return float(value) if is_number(value) else None
