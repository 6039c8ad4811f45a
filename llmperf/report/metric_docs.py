"""The docs' metric tables, generated from the metric catalog.

A table lives in a markdown file between two markers:

    <!-- metric table: latency throughput counts -->
    ...
    <!-- end metric table -->

The words after "metric table:" pick it: catalog groups (a definitions table), or `gate` (the
names the gate takes). `python -m llmperf.report.metric_docs` rewrites every table in
README.md and docs/*.md; `--check` exits 1 when one differs from the catalog (a test runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from llmperf.measure.catalog import (
    DISTRIBUTIONS,
    LATENCIES,
    MEASURED_SUFFIX,
    METRICS,
    NEITHER,
    STAT_KEYS,
    Metric,
    in_group,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/harness.md", "docs/gate.md", "docs/hardware.md",
        "docs/server-metrics.md")
_TABLE = re.compile(r"(<!-- metric table: ([\w ]+) -->\n)(.*?)(<!-- end metric table -->)",
                    re.DOTALL)


def _rows_by_family(metrics: Sequence[Metric]) -> list[list[Metric]]:
    """Metrics of one family (the phases of MBU) share a row; `_measured` twins are said
    in their original's row."""
    rows: dict[str, list[Metric]] = {}
    for m in metrics:
        if not m.name.endswith(MEASURED_SUFFIX):
            rows.setdefault(m.family or m.name, []).append(m)
    return list(rows.values())


def _names(family: list[Metric]) -> str:
    names = ", ".join(f"`{m.name}`" for m in family)
    if family[0].name + MEASURED_SUFFIX in METRICS:
        names += (f" (and each with `{MEASURED_SUFFIX}`)" if len(family) > 1
                  else f" (and `{family[0].name}{MEASURED_SUFFIX}`)")
    return names


def _better(m: Metric) -> str:
    return "–" if m.direction == NEITHER else m.direction


def definitions_table(groups: Sequence[str]) -> str:
    lines = ["| figure | unit | better | definition |", "|---|---|---|---|"]
    for family in _rows_by_family(in_group(*groups)):
        m = family[0]
        label = m.label if len(family) == 1 else m.label.rsplit(" ", 1)[0]
        lines.append(f"| {label} {_names(family)} | {m.unit} | {_better(m)} | {m.definition} |")
    return "\n".join(lines) + "\n"


def gate_table() -> str:
    lines = ["| name | better | unit | from |", "|---|---|---|---|"]
    stats = f"{{{','.join(STAT_KEYS)}}}"
    others = [d for d in DISTRIBUTIONS if d not in LATENCIES]
    lines.append(f"| `{{{','.join(LATENCIES)}}}.{stats}` | lower | s | summary.json"
                 " (`ttft_s.p99` is `summary[\"ttft_s\"][\"p99\"]`; a percentile q of"
                 " `report.percentiles` is `pq`: `ttft_s.p99.9`; `@stage=N` reads"
                 " stage N of `scenario.stages`) |")
    lines.append(f"| `{{{','.join(others)}}}.{stats}` | lower | s | summary.json |")
    gateable = [m for m in METRICS.values() if m.direction != NEITHER and not m.distribution]
    for family in _rows_by_family(gateable):
        m = family[0]
        source = f"steps.jsonl: {m.definition}" if m.source == "steps.jsonl" else m.source
        lines.append(f"| {_names(family)} | {m.direction} | {m.unit} | {source} |")
    return "\n".join(lines) + "\n"


def table(spec: str) -> str:
    words = spec.split()
    return gate_table() if words == ["gate"] else definitions_table(words)


def updated(text: str) -> str:
    """The markdown with each metric table regenerated."""
    return _TABLE.sub(lambda m: m.group(1) + table(m.group(2)) + m.group(4), text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmperf.report.metric_docs",
                                     description="Regenerate the docs' metric tables.")
    parser.add_argument("--check", action="store_true",
                        help="exit 1, naming the files, when a table differs from the catalog")
    args = parser.parse_args(argv)
    stale = []
    for name in DOCS:
        path = ROOT / name
        text = path.read_text(encoding="utf-8")
        new = updated(text)
        if new != text:
            stale.append(name)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"metric tables differ from the catalog in {', '.join(stale)}; run"
              " python -m llmperf.report.metric_docs", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
