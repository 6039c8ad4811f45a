"""Several run folders side by side: one page, a column per run, the best figure of each row
marked, the configuration keys that differ, and the runs' distributions overlaid."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from llmperf.measure.catalog import HIGHER, NEITHER, Metric, metric
from llmperf.measure.run_files import is_number, lookup
from llmperf.report import figures
from llmperf.report import records as rec
from llmperf.report.errors import ReportError
from llmperf.report.folder import RunFolder, is_run_folder, is_sweep_folder, load_run_folder
from llmperf.report.plotting import (
    NoData,
    clear_plots,
    color,
    legend,
    log_x_if_spread,
    new_figure,
    render,
    titled,
)
from llmperf.report.render import write_page
from llmperf.report.run import REPORT_FILE, banners, run_heading
from llmperf.report.units import (
    MISSING,
    SHOWN_SCALES,
    chart_title,
    format_value,
    milliseconds,
    significant,
)

# The figures compared, in order; titles, units and which way is better come from the catalog.
COMPARED = ("output_throughput_tps", "request_throughput_rps", "goodput_rps", "slo_attainment",
            "ttft_s.median", "ttft_s.p99", "tpot_s.median", "tpot_s.p99", "itl_s.p99",
            "e2e_s.median", "e2e_s.p99", "mbu_decode", "mfu_prefill", "roofline_fraction",
            "usd_per_1m_tokens", "energy_per_output_token_j", "num_completed", "num_failed",
            "duration_s")


def labels(runs: list[RunFolder]) -> list[str]:
    """Short names that tell the runs apart: their overrides, else their folder names."""
    names = [r.label for r in runs]
    if len(set(names)) < len(names):
        names = [f"{i + 1}: {n}" for i, n in enumerate(names)]
    return names


def _cell(m: Metric, value: Any) -> str:
    if m.group == "latency":
        return f"{milliseconds(value)} ms" if value is not None else MISSING
    return format_value(m.name, value)


def _trusted(run: RunFolder) -> bool:
    return run.summary.get("valid") is not False and not run.interrupted


def figure_rows(runs: list[RunFolder]) -> list[dict[str, Any]]:
    """A row per figure any run has; the best among valid, complete runs marked, where
    they differ."""
    out = []
    for m in map(metric, COMPARED):
        values = [lookup(r.summary, m.name) for r in runs]
        if not any(is_number(v) for v in values):
            continue
        ranked = [v for v, r in zip(values, runs, strict=True) if is_number(v) and _trusted(r)]
        best = None
        if m.direction != NEITHER and len(set(ranked)) > 1:
            best = max(ranked) if m.direction == HIGHER else min(ranked)
        out.append({"title": chart_title(m), "cells": [
            {"text": _cell(m, v), "best": best is not None and v == best and _trusted(r)}
            for v, r in zip(values, runs, strict=True)]})
    return out


def config_differences(runs: list[RunFolder]) -> list[dict[str, Any]]:
    """The resolved config keys whose values are not the same in every run."""
    flat = [{row.key: row.value for row in figures.flatten(run.config)} for run in runs]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    return [{"key": k, "values": [f.get(k, MISSING) for f in flat]} for k in keys
            if len({f.get(k, MISSING) for f in flat}) > 1]


def overlaid_cdfs(runs: list[RunFolder], names: list[str]) -> Figure:
    if not any(rec.completed(r.records) for r in runs):
        raise NoData("no run has completed requests in requests.jsonl")
    fig, axes = new_figure("Latency distributions (CDF), runs overlaid", 1, 2)
    for ax, (name, values_of) in zip(axes, (("TTFT", rec.ttfts_s), ("TPOT", rec.tpots_s)),
                                     strict=True):
        titled(ax, f"{name} CDF", f"{name} (ms)", "requests at or below (%)")
        for i, (run, label) in enumerate(zip(runs, names, strict=True)):
            values = np.sort(values_of(rec.completed(run.records))) * 1e3
            if len(values):
                ax.step(values, np.arange(1, len(values) + 1) / len(values) * 100,
                        where="post", color=color(i), lw=1.8, label=f"{i + 1}: {label}")
        log_x_if_spread(ax)
        ax.set_ylim(0, 101)
        legend(ax, loc="lower right")
    return fig


def headline_bars(runs: list[RunFolder], names: list[str]) -> Figure:
    panels = [metric(name) for name in ("output_throughput_tps", "ttft_s.p99", "tpot_s.p99")]
    fig, axes = new_figure("Headline figures per run", 1, 3, height_in=3.2)
    positions = np.arange(len(runs))
    for ax, m in zip(axes, panels, strict=True):
        titled(ax, m.label, "", chart_title(m))
        scale = SHOWN_SCALES.get(m.unit, 1.0)
        values = [(lookup(r.summary, m.name) or 0) * scale for r in runs]
        bars = ax.bar(positions, values, color=[color(i) for i in range(len(runs))])
        ax.bar_label(bars, labels=[significant(v) for v in values], fontsize=8, padding=2)
        ax.set_xticks(positions, [str(i + 1) for i in positions])
        ax.set_xlabel("run (numbered as in the table)")
    return fig


def build_comparison_report(run_dirs: list[Path], out_dir: Path) -> Path:
    """Write out_dir/report.html comparing the runs; returns its path."""
    out_dir = Path(out_dir)
    for kind, holds in (("run", is_run_folder), ("sweep", is_sweep_folder)):
        if holds(out_dir):
            raise ReportError(f"{out_dir} is a {kind} folder: the comparison would replace its"
                              " report and plots; give another --out")
    runs = [load_run_folder(Path(d)) for d in run_dirs]
    out_dir.mkdir(parents=True, exist_ok=True)
    clear_plots(out_dir)
    names = labels(runs)
    plots = [render(out_dir, "compare_cdf", "Latency distributions, runs overlaid",
                    lambda: overlaid_cdfs(runs, names)),
             render(out_dir, "compare_bars", "Headline figures per run",
                    lambda: headline_bars(runs, names))]
    columns = []
    for i, (run, name) in enumerate(zip(runs, names, strict=True)):
        report = run.path / REPORT_FILE
        columns.append({
            "number": i + 1, "name": name, "path": str(run.path),
            "title": run_heading(run),
            "link": os.path.relpath(report, out_dir) if report.is_file() else None,
            "banners": [b for b in banners(run) if b.kind != "ok"]})
    return write_page(out_dir / REPORT_FILE, "compare.html",
                      title=f"Comparison of {len(runs)} runs", out_path=str(out_dir.resolve()),
                      columns=columns, rows=figure_rows(runs),
                      differences=config_differences(runs), plots=plots)
