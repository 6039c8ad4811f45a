"""A sweep's comparison page: the job table, the pivots and the plots, beside sweep.csv.

The table itself (reading the jobs, sweep.csv, the Pareto frontiers) is in sweep_table.py;
the plots are in sweep_plots.py.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from llmperf.measure.catalog import HIGHER, NEITHER, Metric, metric
from llmperf.report import units
from llmperf.report.plotting import Plot, clear_plots, render
from llmperf.report.render import write_page
from llmperf.report.run import REPORT_FILE
from llmperf.report.sweep_plots import SWEEP_PLOTS
from llmperf.report.sweep_table import (
    FIGURES,
    FLAGS,
    SWEEP_CSV,
    Sweep,
    job_label,
    load_sweep,
    numeric,
    open_sweep,
    pareto_front,
    short_key,
    write_sweep_csv,
)

__all__ = ["FIGURES", "SWEEP_CSV", "Sweep", "build_sweep_report", "load_sweep", "open_sweep",
           "pareto_front", "pivots", "write_sweep_csv"]

# -- the page ------------------------------------------------------------------------------

# The job table's columns (beside `valid`) and the side-by-side tables' figures; headers
# with units come from the catalog.
JOB_COLUMNS = ("output_throughput_tps", "goodput_rps", "slo_attainment", "ttft_p50_s",
               "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p99_s", "mbu_decode",
               "usd_per_1m_tokens", "predicted_ttft_s", "prediction_error_ttft",
               "measured_decode_step_s", "predicted_decode_step_s",
               "prediction_error_decode_step")
PIVOTS = ("output_throughput_tps", "goodput_rps", "ttft_p99_s", "tpot_p99_s")


def column_metric(column: str) -> Metric:
    return metric(FIGURES[column])


def flag(value: Any) -> bool | None:
    """A yes/no cell of the table (None, NaN: not recorded)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return bool(value)


def bare(column: str, value: Any) -> str:
    """A figure without its unit, in the unit its column header names (ms, %)."""
    if column in FLAGS:
        known = flag(value)
        return units.MISSING if known is None else ("yes" if known else "no")
    return units.bare(column_metric(column), value)


def _best(values: list[Any], column: str) -> float | None:
    """The best of the values, or None when there is nothing to choose between."""
    known = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").dropna()
    direction = NEITHER if column in FLAGS else column_metric(column).direction
    if known.nunique() < 2 or direction == NEITHER:
        return None
    return known.max() if direction == HIGHER else known.min()


def _cell(column: str, value: Any, best: float | None) -> dict[str, Any]:
    text = bare(column, value)
    return {"text": text, "best": best is not None and text != units.MISSING and value == best}


def job_columns(sweep: Sweep) -> list[tuple[str, str]]:
    """`valid` and the JOB_COLUMNS that some job has a figure for, with their headers."""
    titles = [("valid", "valid")] + [(c, units.column_title(column_metric(c)))
                                     for c in JOB_COLUMNS]
    return [(c, title) for c, title in titles if sweep.table[c].notna().any()]


def job_rows(sweep: Sweep) -> list[dict[str, Any]]:
    table = sweep.table
    columns = [c for c, _ in job_columns(sweep)]
    best = {c: _best(table[c].tolist(), c) for c in columns}
    rows = []
    for _, row in table.iterrows():
        report = sweep.path / row["job"] / REPORT_FILE
        rows.append({"label": job_label(sweep, row), "job": row["job"],
                     "link": f"{row['job']}/{REPORT_FILE}" if report.is_file() else None,
                     "front": bool(row["pareto_ttft_p99"]),
                     "cells": [_cell(c, row[c], best[c]) for c in columns]})
    return rows


def pivots(sweep: Sweep) -> list[dict[str, Any]]:
    """Side-by-side tables: a row per group, a column per x value, for headline figures;
    the best group at each x in bold."""
    if not sweep.x_key:
        return []
    groups = sweep.groups
    xs_of_jobs = numeric(sweep.table[sweep.x_key]).tolist()
    xs = sorted(set(xs_of_jobs))
    out = []
    for column in PIVOTS:
        title = units.chart_title(column_metric(column))
        if sweep.table[column].isna().all():
            continue
        grid: dict[str, dict[float, Any]] = {}
        for group, x, value in zip(groups, xs_of_jobs, sweep.table[column], strict=True):
            grid.setdefault(group, {})[x] = value
        best = {x: _best([by_x.get(x) for by_x in grid.values()], column) for x in xs}
        out.append({"title": title, "xs": [f"{x:g}" for x in xs],
                    "rows": [{"group": group, "cells": [_cell(column, by_x.get(x), best[x])
                                                        for x in xs]}
                             for group, by_x in grid.items()]})
    return out


def build_sweep_report(sweep_dir: Path) -> Path:
    """Write sweep_dir/sweep.csv and sweep_dir/report.html; returns the report's path."""
    sweep = open_sweep(sweep_dir)
    sweep_dir = sweep.path
    csv = write_sweep_csv(sweep)
    clear_plots(sweep_dir)
    plots: list[Plot] = [render(sweep_dir, name, title, lambda make=make: make(sweep))
                         for name, title, make in SWEEP_PLOTS]
    rows = list(sweep.table.iterrows())
    invalid = [job_label(sweep, r) for _, r in rows if flag(r["valid"]) is False]
    interrupted = [job_label(sweep, r) for _, r in rows if flag(r["interrupted"])]
    return write_page(
        sweep_dir / REPORT_FILE, "sweep.html",
        title=f"Sweep of {len(sweep.table)} jobs"
              + (f": {', '.join(short_key(k) for k in sweep.varying)}" if sweep.varying else ""),
        sweep_path=str(sweep_dir.resolve()),
        csv_name=csv.name,
        varying=sweep.varying, x_key=sweep.x_key, group_keys=sweep.group_keys,
        constant={k: sweep.table[k].iloc[0] for k in sweep.override_keys
                  if k not in sweep.varying},
        invalid=invalid, interrupted=interrupted, without_summary=sweep.without_summary,
        job_columns=[title for _, title in job_columns(sweep)],
        job_rows=job_rows(sweep), pivots=pivots(sweep), plots=plots,
    )
