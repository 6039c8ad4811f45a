"""Reading a run folder, tolerant of what a short or partial run leaves behind.

Only summary.json or requests.jsonl is needed; steps.jsonl (engines without a step loop
have none), telemetry.csv (telemetry off), config.yaml, environment.json and
.hydra/overrides.yaml are each optional, and the report says which were missing.
server_metrics.csv exists only for runs against a server with /metrics.
A last line cut in half by a killed process is skipped, and counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from llmperf.measure import run_files
from llmperf.measure.run_files import (
    MalformedSummary,
    UnreadableFile,
    UnsupportedSummary,
    is_number,
    read_json,
    read_jsonl,
    read_summary,
)
from llmperf.report.errors import ReportError
from llmperf.report.records import summary_from_records
from llmperf.serverside.scraper import Row, read_csv

SERVER_METRICS_FILE = "server_metrics.csv"

RUN_FILES = ("summary.json", "requests.jsonl", "steps.jsonl", "telemetry.csv", "config.yaml",
             "environment.json")


@dataclass
class RunFolder:
    path: Path
    summary: dict[str, Any]
    records: list[dict[str, Any]]
    steps: list[dict[str, Any]] | None
    telemetry: pd.DataFrame | None
    config_yaml: str | None
    config: dict[str, Any]  # config.yaml parsed; {} when missing or unreadable
    environment: dict[str, Any] | None
    overrides: list[str]
    missing_files: list[str]  # of RUN_FILES
    server_rows: list[Row] | None = None  # server_metrics.csv
    summary_from_records: bool = False  # no summary.json: figures computed from requests.jsonl
    notes: list[str] = field(default_factory=list)  # what was missing or unreadable

    @property
    def interrupted(self) -> bool:
        return bool(self.summary.get("interrupted")) or self.summary_from_records

    @property
    def label(self) -> str:
        return " ".join(self.overrides) or self.path.name


def is_run_folder(path: Path) -> bool:
    return (path / "summary.json").is_file() or (path / "requests.jsonl").is_file()


def is_sweep_folder(path: Path) -> bool:
    """A Hydra multirun folder (multirun.yaml beside its job folders), or a folder that holds
    two runs or more; never a run itself. One run in a folder of other things (/tmp) is not
    a sweep: a report must not be written there by mistake."""
    if not path.is_dir() or is_run_folder(path):
        return False
    runs = sum(1 for p in path.iterdir() if p.is_dir() and is_run_folder(p))
    return (runs >= 1 and (path / "multirun.yaml").is_file()) or runs >= 2


def load_run_folder(path: Path) -> RunFolder:
    path = Path(path)
    if not path.is_dir():
        raise ReportError(f"{path}: no such folder")
    if not is_run_folder(path):
        raise ReportError(f"{path}: not a run folder (no summary.json or requests.jsonl)")
    notes: list[str] = []
    records = _read_jsonl(path / "requests.jsonl", notes, keep=_is_request)
    summary = _read_summary(path / "summary.json", notes)
    if summary is None and not records:
        raise ReportError(f"{path}: summary.json is unreadable and requests.jsonl holds no records")
    steps_file = path / "steps.jsonl"
    steps = _read_jsonl(steps_file, notes) if steps_file.is_file() else None
    config_yaml = _read_text(path / "config.yaml")
    return RunFolder(
        path=path,
        summary=summary if summary is not None else summary_from_records(records),
        records=records,
        steps=steps,
        telemetry=_read_telemetry(path / "telemetry.csv", notes),
        config_yaml=config_yaml,
        config=_parse_config(config_yaml),
        environment=_read_environment(path / "environment.json", notes),
        overrides=read_overrides(path),
        missing_files=[name for name in RUN_FILES if not (path / name).is_file()],
        server_rows=_read_server_metrics(path / SERVER_METRICS_FILE, notes),
        summary_from_records=summary is None,
        notes=notes,
    )


def _read_server_metrics(path: Path, notes: list[str]) -> list[Row] | None:
    if not path.is_file():
        return None
    try:
        return read_csv(path)
    except (KeyError, ValueError) as e:
        notes.append(f"{SERVER_METRICS_FILE}: unreadable ({e})")
        return None


def _read_summary(path: Path, notes: list[str]) -> dict[str, Any] | None:
    """The summary's figures as summary.json holds them; None (with a note) where the file is
    missing or corrupt, so the figures come from requests.jsonl. Another schema version is
    refused: its figures may not mean what this report says they mean."""
    if not path.is_file():
        notes.append("summary.json is missing (the run did not finish):"
                     " figures computed from requests.jsonl")
        return None
    try:
        return read_summary(path.parent).to_dict()
    except UnsupportedSummary as e:
        raise ReportError(f"{path}: {e.wording('this llmperf-report')}") from None
    except MalformedSummary as e:
        notes.append(f"{path}: {e}: figures computed from requests.jsonl")
    except UnreadableFile as e:
        notes.append(f"{e}: figures computed from requests.jsonl")
    return None


def read_overrides(path: Path) -> list[str]:
    """The job's Hydra overrides as typed (`engine.batching=static`), if it was a Hydra job."""
    try:
        return run_files.read_overrides(path) or []
    except UnreadableFile as e:
        raise ReportError(str(e)) from None


def _is_request(row: dict[str, Any]) -> bool:
    """A request record the figures can use: an id and its times as numbers."""
    first = row.get("first_token_s")
    return ("id" in row and all(is_number(row.get(k)) for k in ("arrival_s", "dispatch_s", "end_s"))
            and (first is None or is_number(first)))


def _read_jsonl(path: Path, notes: list[str],
                keep: Callable[[dict[str, Any]], bool] = lambda row: True) -> list[dict[str, Any]]:
    """The file's JSON objects; a line that is not one, or that `keep` rejects, is counted."""
    if not path.is_file():
        return []
    rows, bad_lines = read_jsonl(path)
    kept = [row for row in rows if keep(row)]
    bad = len(bad_lines) + len(rows) - len(kept)
    if bad:
        notes.append(f"{path.name}: skipped {bad} unreadable line{'s' * (bad > 1)}"
                     " (a write cut short?)")
    return kept


def _read_telemetry(path: Path, notes: list[str]) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    try:
        frame = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as e:
        notes.append(f"telemetry.csv: unreadable ({str(e).splitlines()[0]})")
        return None
    if "timestamp_s" not in frame.columns or frame.empty:
        notes.append("telemetry.csv: no samples" if "timestamp_s" in frame.columns
                     else "telemetry.csv: no timestamp_s column")
        return None
    return frame


def _read_text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def _parse_config(text: str | None) -> dict[str, Any]:
    try:
        config = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return {}
    return config if isinstance(config, dict) else {}


def _read_environment(path: Path, notes: list[str]) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        env = read_json(path)
    except UnreadableFile as e:
        notes.append(str(e))
        return None
    return env if isinstance(env, dict) else None
