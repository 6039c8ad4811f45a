"""The baseline file: metric values of one or more repeats, their tolerances, and their origin.

    {
      "kind": "llmperf-gate-baseline",
      "schema_version": 1,
      "created": "2025-06-01T12:00:00+00:00",
      "source": {"git_commit": "...", "runs": ["reports/runs/..."], "jobs": [...],
                 "scenario": {...}, "engine": {...}, "model": {...}, "hardware": {...}},
      "metrics": {
        "output_throughput_tps": {"direction": "higher", "tolerance": "-5%",
                                  "values": [101.2, 98.7, 100.4]}
      }
    }

`direction` is written for the reader; the gate takes it from the metric catalog.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from llmperf.gate.errors import GateError
from llmperf.gate.metric_spec import MetricSpec, Tolerance
from llmperf.gate.runs import Job
from llmperf.measure.run_files import is_number

BASELINE_KIND = "llmperf-gate-baseline"
BASELINE_VERSION = 1
PROVENANCE_KEYS = ("scenario", "engine", "model", "hardware")


@dataclass
class BaselineEntry:
    spec: MetricSpec
    tolerance: Tolerance
    values: list[float]


@dataclass
class Baseline:
    entries: dict[str, BaselineEntry]
    source: dict[str, Any] = field(default_factory=dict)
    created: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": BASELINE_KIND,
            "schema_version": BASELINE_VERSION,
            "created": self.created,
            "source": self.source,
            "metrics": {
                name: {"direction": e.spec.direction,
                       "tolerance": e.tolerance.text(e.spec.direction),
                       "values": e.values}
                for name, e in self.entries.items()
            },
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Baseline:
        if not isinstance(d, dict) or d.get("kind") != BASELINE_KIND:
            raise GateError(f"not an llmperf-gate baseline (kind must be {BASELINE_KIND!r})")
        if d.get("schema_version") != BASELINE_VERSION:
            raise GateError(f"baseline schema_version {d.get('schema_version')!r},"
                            f" this gate reads {BASELINE_VERSION}")
        metrics = d.get("metrics")
        if not isinstance(metrics, dict):
            raise GateError("'metrics' must map metric names to {tolerance, values}")
        entries = {}
        for name, m in metrics.items():
            spec = MetricSpec.parse(name)
            values = m.get("values") if isinstance(m, dict) else None
            if not isinstance(values, list) or not values or not all(map(is_number, values)):
                raise GateError(f"metric {name!r} needs a non-empty list of numbers as values")
            entries[name] = BaselineEntry(spec, Tolerance.parse(str(m.get("tolerance", "")), spec),
                                          [float(v) for v in values])
        source = d.get("source", {})
        if not isinstance(source, dict):
            raise GateError("'source' must be an object (git_commit, runs, scenario, ...)")
        return cls(entries, source, d.get("created", ""))

    @classmethod
    def load(cls, path: Path) -> Baseline:
        if not path.is_file():
            raise GateError(f"baseline not found: {path} (write one with --update)")
        try:
            return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except json.JSONDecodeError as e:
            raise GateError(f"baseline {path}: not valid JSON ({e.msg} at line {e.lineno})") from None
        except GateError as e:
            raise GateError(f"baseline {path}: {e}") from None

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")


def provenance(repeats: list[tuple[Path, list[Job]]]) -> dict[str, Any]:
    """Where the figures came from: the first job's scenario/engine/model/hardware, the commit."""
    first = repeats[0][1][0]
    source: dict[str, Any] = {"git_commit": first.summary.get("git_commit") or _git_head()}
    source["runs"] = [str(path) for path, _ in repeats]
    if len(repeats[0][1]) > 1:
        source["jobs"] = [job.label for job in repeats[0][1]]
    source.update({key: first.summary.get(key) for key in PROVENANCE_KEYS})
    return source


def provenance_mismatches(source: dict[str, Any], job: Job) -> list[str]:
    """Names (scenario, model, hardware, engine) that differ between baseline and current."""
    notes = []
    for key in PROVENANCE_KEYS:
        was, now = _name_of(source.get(key)), _name_of(job.summary.get(key))
        if was is not None and now is not None and was != now:
            notes.append(f"the baseline's {key} is {was!r}, the current run's is {now!r}")
    return notes


def _name_of(obj: Any) -> Any:
    return obj.get("name") if isinstance(obj, dict) else obj


def _git_head() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
