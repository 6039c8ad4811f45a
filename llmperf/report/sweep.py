"""A sweep's comparison page: the job table, the pivots and the plots, beside sweep.csv.

The table itself (reading the jobs, sweep.csv, the Pareto frontiers) is in sweep_table.py;
the plots are in sweep_plots.py.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from llmperf.report.plotting import Plot, clear_plots, render
from llmperf.report.render import write_page
from llmperf.report.run import REPORT_FILE
from llmperf.report.sweep_plots import SWEEP_PLOTS
from llmperf.report.sweep_table import (
    FIGURES,
    PREDICTION_COLUMNS,
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
from llmperf.report.units import MISSING, is_fraction, milliseconds, significant

__all__ = ["FIGURES", "SWEEP_CSV", "Sweep", "build_sweep_report", "load_sweep", "open_sweep",
           "pareto_front", "pivots", "write_sweep_csv"]

HIGHER_IS_BETTER = ("throughput", "goodput", "slo_attainment", "mbu_", "mfu_", "roofline_")

# -- the page ------------------------------------------------------------------------------

# (column, header with its unit): the job table shows bare numbers under these headers.
JOB_COLUMNS = (("valid", "valid"), ("output_throughput_tps", "output tok/s"),
               ("goodput_rps", "goodput req/s"),
               ("slo_attainment", "SLO met %"), ("ttft_p50_s", "TTFT p50 ms"),
               ("ttft_p99_s", "TTFT p99 ms"), ("tpot_p50_s", "TPOT p50 ms"),
               ("tpot_p99_s", "TPOT p99 ms"), ("e2e_p99_s", "E2E p99 ms"),
               ("mbu_decode", "MBU decode %"), ("usd_per_1m_tokens", "$ per 1M tok"),
               ("predicted_ttft_s", "TTFT predicted ms"), ("prediction_error_ttft", "TTFT error %"),
               ("measured_decode_step_s", "decode step ms"),
               ("predicted_decode_step_s", "step predicted ms"),
               ("prediction_error_decode_step", "step error %"))
PIVOTS = (("output_throughput_tps", "Output throughput (tok/s)"),
          ("goodput_rps", "Goodput (req/s)"),
          ("ttft_p99_s", "TTFT p99 (ms)"), ("tpot_p99_s", "TPOT p99 (ms)"))


def higher_is_better(column: str) -> bool:
    return any(h in column for h in HIGHER_IS_BETTER)


def flag(value: Any) -> bool | None:
    """A yes/no cell of the table (None, NaN: not recorded)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return bool(value)


def bare(column: str, value: Any) -> str:
    """A figure without its unit, in the unit its column header names (ms, %)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if column == "valid":
        return "yes" if value else "no"
    if column.endswith("_s"):
        return milliseconds(value)
    if is_fraction(column):
        return significant(value * 100)
    return significant(value)


def _best(values: list[Any], column: str) -> float | None:
    """The best of the values, or None when there is nothing to choose between."""
    known = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").dropna()
    if known.nunique() < 2 or column == "valid" or column in PREDICTION_COLUMNS:
        return None
    return known.max() if higher_is_better(column) else known.min()


def _cell(column: str, value: Any, best: float | None) -> dict[str, Any]:
    text = bare(column, value)
    return {"text": text, "best": best is not None and text != MISSING and value == best}


def job_columns(sweep: Sweep) -> list[tuple[str, str]]:
    """JOB_COLUMNS that some job has a figure for."""
    return [(c, title) for c, title in JOB_COLUMNS if sweep.table[c].notna().any()]


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
    for column, title in PIVOTS:
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
