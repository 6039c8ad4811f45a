"""The gate's verdicts as a console table and as markdown for a CI comment."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from llmperf.gate.baseline import Baseline
from llmperf.gate.compare import IMPROVED, REGRESSION, WITHIN_NOISE, MetricResult
from llmperf.gate.provenance import describe
from llmperf.gate.stats import CONFIDENCE, NUM_RESAMPLES, SEED, Change

COLUMNS = ("metric", "baseline", "current", "change", "tolerance", "noise band", "verdict")


def headline(results: Sequence[MetricResult]) -> str:
    regressions = sum(r.verdict == REGRESSION for r in results)
    if regressions:
        return f"FAIL: {regressions} of {len(results)} metrics regressed"
    text = f"PASS: no regression in {len(results)} metrics"
    noisy = sum(r.verdict == WITHIN_NOISE for r in results)
    if noisy:
        text += f"; {noisy} past tolerance but within noise"
    improved = sum(r.verdict == IMPROVED for r in results)
    if improved:
        text += f"; {improved} improved beyond tolerance, update the baseline"
    return text


def statistic_note() -> str:
    return (f"Medians of the repeats; noise band = {CONFIDENCE:.0%} bootstrap interval of the"
            f" change ({NUM_RESAMPLES} resamples, seed {SEED}). A regression is called only when"
            " the whole band lies beyond the tolerance.")


def rows(results: Sequence[MetricResult]) -> list[list[str]]:
    return [[r.spec.name, _figure(r.baseline), _figure(r.current),
             _change_text(r.change.point, r.change.relative), r.tolerance.text(r.spec.direction),
             _band(r.change), r.verdict] for r in results]


def console_table(results: Sequence[MetricResult], warnings: Sequence[str],
                  origin: Sequence[str] = ()) -> str:
    """The table, the lines saying where each side was measured, the warnings, the headline."""
    lines = _aligned([list(COLUMNS), *rows(results)])
    lines.insert(1, "-" * max(map(len, lines)))
    lines += origin
    lines += [f"warning: {w}" for w in warnings]
    lines.append(headline(results))
    return "\n".join(lines)


def markdown(results: Sequence[MetricResult], warnings: Sequence[str], baseline_path: str,
             baseline: Baseline, current_paths: Sequence[str]) -> str:
    mark = "❌" if any(r.is_regression for r in results) else "✅"
    lines = [f"### llmperf-gate {mark} {headline(results)}", "",
             "| " + " | ".join(COLUMNS) + " |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for row in rows(results):
        row[0] = f"`{row[0]}`"
        if row[-1] == REGRESSION:
            row[-1] = f"**{REGRESSION}**"
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines += [f"> ⚠️ {w}" for w in warnings]
    if warnings:
        lines.append("")
    lines.append(f"Baseline `{baseline_path}`: {describe_origin(baseline)}.  ")
    lines.append(f"Current: {', '.join(f'`{p}`' for p in current_paths)}.  ")
    lines.append(statistic_note())
    return "\n".join(lines) + "\n"


def describe_origin(baseline: Baseline) -> str:
    source = baseline.source
    parts = []
    for key in ("scenario", "engine", "model", "hardware"):
        value = source.get(key)
        name = value.get("name") if isinstance(value, dict) else value
        if name is not None:
            parts.append(f"{key} {name}")
    machine = source.get("machine")
    if isinstance(machine, dict):
        parts.append(describe(machine))
    elif source.get("git_commit"):
        parts.append(f"commit {source['git_commit'][:12]}")
    if baseline.created:
        parts.append(f"recorded {baseline.created}")
    return ", ".join(parts) or "origin not recorded"


def _figure(values: Sequence[float]) -> str:
    text = f"{median(values):.4g}"
    return text if len(values) == 1 else f"{text} (n={len(values)})"


def _change_text(change: float, relative: bool) -> str:
    return f"{change * 100:+.1f}%" if relative else f"{change:+.4g}"


def _band(change: Change) -> str:
    if not change.has_noise_band:
        return "—"
    return (f"{_change_text(change.low, change.relative)} .."
            f" {_change_text(change.high, change.relative)}")


def baseline_table(baseline: Baseline) -> str:
    """What --update wrote: one line per metric."""
    table = [["metric", "median", "repeats", "tolerance"]]
    for name, entry in baseline.entries.items():
        table.append([name, f"{median(entry.values):.4g}", str(len(entry.values)),
                      entry.tolerance.text(entry.spec.direction)])
    return "\n".join(_aligned(table))


def _aligned(table: list[list[str]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(*table, strict=True)]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in table]
