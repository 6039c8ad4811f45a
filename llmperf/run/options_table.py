"""The docs' option tables, written from the options dataclasses (field, type, default, help).

A table stands in a markdown file between two markers:

    <!-- options: engine.reference -->
    ...generated...
    <!-- /options -->

`python -m llmperf.run.options_table` rewrites every table in README.md and
docs/*.md; `--check` changes nothing and exits 1 naming the files whose tables
differ from what the dataclasses say (a test runs it).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

from engines.options import EngineConfig
from engines.registry import ENGINE_CONFIGS
from llmperf.measure.client_options import ClientConfig
from llmperf.options import HELP
from llmperf.run.config import ModelSelection, ReportConfig
from llmperf.telemetry.options import TelemetryConfig
from llmperf.workload.arrivals import ArrivalConfig
from llmperf.workload.datasets import DatasetColumns
from llmperf.workload.images import ImageConfig
from llmperf.workload.lengths import LengthConfig
from llmperf.workload.scenario import ScenarioConfig, SloConfig, StageConfig, ValidityConfig

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"(<!-- options: (?P<key>[\w.]+) -->\n)(?P<body>.*?)(<!-- /options -->)", re.DOTALL)


def schemas() -> dict[str, type]:
    """Every table's key (the config path its fields are set under) and its dataclass."""
    tables: dict[str, type] = {
        "scenario": ScenarioConfig,
        "scenario.arrival": ArrivalConfig,
        "scenario.stages": StageConfig,
        "scenario.prompt_tokens": LengthConfig,
        "scenario.slo": SloConfig,
        "scenario.dataset_columns": DatasetColumns,
        "scenario.validity": ValidityConfig,
        "scenario.client": ClientConfig,
        "scenario.images": ImageConfig,
        "model": ModelSelection,
        "telemetry": TelemetryConfig,
        "report": ReportConfig,
    }
    for name in ENGINE_CONFIGS:
        tables[f"engine.{name}"] = ENGINE_CONFIGS.get(name)
    return tables


def render_table(schema: type) -> str:
    """An engine's `name` is left out: it is the `engine=` group member, not an option."""
    rows = ["| option | type | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(schema):
        if f.name == "name" and issubclass(schema, EngineConfig):
            continue
        type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        type_name = type_name.replace("|", "\\|")  # a pipe in a cell must be escaped, even in code
        rows.append(f"| `{f.name}` | `{type_name}` | {_default(f)} | {f.metadata.get(HELP, '')} |")
    return "\n".join(rows) + "\n"


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return f"`{_yaml(f.default)}`"
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):  # a nested table: name what differs from its defaults
            changed = [
                f"{g.name}: {_yaml(getattr(value, g.name))}"
                for g in dataclasses.fields(value)
                if g.default is not dataclasses.MISSING and getattr(value, g.name) != g.default
            ]
            return "its table" + (f", with `{', '.join(changed)}`" if changed else "")
        return f"`{_yaml(value)}`"
    return "required"


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if value == "":
        return '""'
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    return str(value)


def rewrite(text: str, tables: dict[str, type]) -> str:
    """`text` with each marked table as the dataclasses say; an unknown key is an error."""

    def fill(match: re.Match) -> str:
        key = match.group("key")
        if key not in tables:
            raise ValueError(f"unknown options table {key!r}; valid: {', '.join(tables)}")
        return match.group(1) + render_table(tables[key]) + match.group(4)

    return BLOCK.sub(fill, text)


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def stale_files(root: Path = ROOT) -> list[Path]:
    tables = schemas()
    stale = []
    for path in doc_files(root):
        text = path.read_text(encoding="utf-8")
        if rewrite(text, tables) != text:
            stale.append(path)
    return stale


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--check"]):
        print("usage: python -m llmperf.run.options_table [--check]", file=sys.stderr)
        return 2
    stale = stale_files()
    if argv == ["--check"]:
        for path in stale:
            print(f"{path.relative_to(ROOT)}: option tables out of date; run python -m llmperf.run.options_table")
        return 1 if stale else 0
    tables = schemas()
    for path in stale:
        path.write_text(rewrite(path.read_text(encoding="utf-8"), tables), encoding="utf-8")
        print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
