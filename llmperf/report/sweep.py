"""A sweep (a Hydra multirun folder): sweep.csv with a row per job, and the comparison page.

Jobs are read by the gate's reader (llmperf.gate.runs.load_job): each subfolder with
a summary.json, its overrides from .hydra/overrides.yaml; one that cannot be read is
listed with the reason, and the others are compared. The overrides that vary across
jobs organise the comparison: a numeric one (a rate, a concurrency) is the x axis, the
others (a batching strategy, an engine) make the groups that are drawn as one line each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from llmperf.gate.errors import GateError
from llmperf.gate.runs import Job, load_job
from llmperf.measure.run_files import is_number, lookup
from llmperf.report.errors import ReportError
from llmperf.report.folder import is_sweep_folder
from llmperf.report.plotting import Plot, clear_plots, render
from llmperf.report.render import write_page
from llmperf.report.run import REPORT_FILE
from llmperf.report.units import MISSING, is_fraction, milliseconds, significant

SWEEP_CSV = "sweep.csv"
# sweep.csv's figure columns: column name -> where in summary.json.
FIGURES = {
    "valid": "valid",
    "interrupted": "interrupted",
    "num_requests": "num_requests",
    "num_completed": "num_completed",
    "num_failed": "num_failed",
    "duration_s": "duration_s",
    "request_throughput_rps": "request_throughput_rps",
    "output_throughput_tps": "output_throughput_tps",
    "total_throughput_tps": "total_throughput_tps",
    "goodput_rps": "goodput_rps",
    "slo_attainment": "slo_attainment",
    "ttft_p50_s": "ttft_s.median",
    "ttft_p99_s": "ttft_s.p99",
    "tpot_p50_s": "tpot_s.median",
    "tpot_p99_s": "tpot_s.p99",
    "itl_p50_s": "itl_s.median",
    "itl_p99_s": "itl_s.p99",
    "e2e_p50_s": "e2e_s.median",
    "e2e_p99_s": "e2e_s.p99",
    "mbu_decode": "mbu_decode",
    "mfu_prefill": "mfu_prefill",
    "roofline_fraction": "roofline_fraction",
    "usd_per_1m_tokens": "usd_per_1m_tokens",
    "usd_per_1m_output_tokens": "usd_per_1m_output_tokens",
    "energy_per_output_token_j": "energy_per_output_token_j",
    # the roofline's prediction beside the measurement (llmperf/perf/prediction.py)
    "ttft_median_s": "ttft_s.median",
    "predicted_ttft_s": "predicted_ttft_s",
    "prediction_error_ttft": "prediction_error_ttft",
    "measured_decode_step_s": "measured_decode_step_s",
    "predicted_decode_step_s": "predicted_decode_step_s",
    "prediction_error_decode_step": "prediction_error_decode_step",
    "prediction_error_tpot": "prediction_error_tpot",
}
FLAGS = ("valid", "interrupted")  # yes/no columns; every other figure is a number
PREDICTION_COLUMNS = ("ttft_median_s", "predicted_ttft_s", "prediction_error_ttft",
                      "measured_decode_step_s", "predicted_decode_step_s",
                      "prediction_error_decode_step", "prediction_error_tpot")
# Pareto frontiers of output throughput (higher is better) against a p99 latency.
FRONTIERS = {"pareto_ttft_p99": "ttft_p99_s", "pareto_tpot_p99": "tpot_p99_s"}
X_HINTS = ("rate", "concurrency", "rps")
HIGHER_IS_BETTER = ("throughput", "goodput", "slo_attainment", "mbu_", "mfu_", "roofline_")


@dataclass
class Sweep:
    path: Path
    table: pd.DataFrame  # one row per job: job, the override columns, FIGURES, FRONTIERS
    override_keys: list[str]
    x_key: str | None  # the numeric override that varies, for x axes
    group_keys: list[str]  # the other overrides that vary: one line per combination
    # job folder -> why it is not compared (no summary.json: it failed or was cut short)
    without_summary: dict[str, str] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)  # each row's group_label, in table order

    @property
    def varying(self) -> list[str]:
        return self.group_keys + ([self.x_key] if self.x_key else [])


def load_sweep(path: Path) -> Sweep:
    path = Path(path)
    if not path.is_dir():
        raise ReportError(f"{path}: no such folder")
    if (path / "summary.json").is_file():
        raise ReportError(f"{path} is a run folder, not a sweep folder")
    jobs, without_summary = _load_jobs(path)
    if not jobs:
        raise ReportError(f"no readable summary.json in the subfolders of {path}"
                          + "".join(f"; {job}: {why}" for job, why in without_summary.items()))
    keys = list(dict.fromkeys(k for job in jobs for k in job.overrides))
    table = pd.DataFrame([_row(job, path, keys) for job in jobs])
    varying = [k for k in keys if table[k].nunique(dropna=False) > 1]
    x_key = _pick_x(table, varying)
    sweep = Sweep(path, table, keys, x_key, [k for k in varying if k != x_key], without_summary)
    sweep.table = _sorted(sweep)
    sweep.groups = sweep.table.pop("_group").tolist()
    for column, latency in FRONTIERS.items():
        sweep.table[column] = pareto_front(sweep.table["output_throughput_tps"].tolist(),
                                           sweep.table[latency].tolist())
    return sweep


def _load_jobs(path: Path) -> tuple[list[Job], dict[str, str]]:
    """The jobs that left a readable summary.json, and why each other job folder did not."""
    jobs, without_summary = [], {}
    for folder in sorted(path.iterdir()):
        if (folder / "summary.json").is_file():
            try:
                jobs.append(load_job(folder))
            except GateError as e:
                without_summary[folder.name] = str(e)
        elif (folder / ".hydra").is_dir():
            without_summary[folder.name] = "no summary.json (the job failed or was cut short)"
    return jobs, without_summary


def _row(job: Job, sweep_dir: Path, keys: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"job": str(job.path.relative_to(sweep_dir))}
    row.update({k: job.overrides.get(k) for k in keys})
    for column, path in FIGURES.items():
        value = lookup(job.summary, path)
        if column in FLAGS:
            row[column] = value if isinstance(value, (int, float)) else None
        else:
            # NaN, not None, where a figure is missing: the column stays numeric (a run with
            # one output token has no TPOT, and every job of such a sweep lacks it).
            row[column] = value if is_number(value) else math.nan
    return row


def numeric(values: pd.Series) -> pd.Series | None:
    """The column as numbers, if every value is one."""
    converted = pd.to_numeric(values, errors="coerce")
    return None if converted.isna().any() else converted


def _pick_x(table: pd.DataFrame, varying: list[str]) -> str | None:
    numeric_keys = [k for k in varying if numeric(table[k]) is not None]
    hinted = [k for k in numeric_keys if any(h in k.rsplit(".", 1)[-1] for h in X_HINTS)]
    return (hinted or numeric_keys or [None])[0]


def _sorted(sweep: Sweep) -> pd.DataFrame:
    """The table by group, then by x; a `_group` column holds each row's group label."""
    table = sweep.table.copy()
    table["_group"] = [group_label(sweep, row) for _, row in table.iterrows()]
    order = ["_group"]
    if sweep.x_key:
        table["_x"] = numeric(table[sweep.x_key])
        order.append("_x")
    table = table.sort_values(order, kind="stable").reset_index(drop=True)
    return table.drop(columns="_x", errors="ignore")


def short_key(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def group_label(sweep: Sweep, row: pd.Series) -> str:
    return ", ".join(f"{short_key(k)}={row[k]}" for k in sweep.group_keys) or "all jobs"


def job_label(sweep: Sweep, row: pd.Series) -> str:
    """The overrides that tell this job apart, e.g. 'batching=static, rate_rps=4'."""
    return ", ".join(f"{short_key(k)}={row[k]}" for k in sweep.varying) or str(row["job"])


def pareto_front(throughput: list[float | None], latency: list[float | None]) -> list[bool]:
    """True for each job no other job beats: another job with at least its throughput at no
    more latency, and better in one of the two, dominates it. Jobs lacking a figure are
    off the frontier."""
    def known(v: float | None) -> bool:
        return v is not None and not (isinstance(v, float) and math.isnan(v))

    points = [(t, lat) if known(t) and known(lat) else None
              for t, lat in zip(throughput, latency, strict=True)]
    front = []
    for i, p in enumerate(points):
        front.append(p is not None and not any(
            q is not None and j != i and q[0] >= p[0] and q[1] <= p[1] and q != p
            for j, q in enumerate(points)))
    return front


def write_sweep_csv(sweep: Sweep) -> Path:
    out = sweep.path / SWEEP_CSV
    sweep.table.to_csv(out, index=False)
    return out


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


def open_sweep(sweep_dir: Path) -> Sweep:
    """The sweep in a folder that must be one (load_sweep reads any folder of job folders)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ReportError(f"{sweep_dir}: no such folder")
    if not is_sweep_folder(sweep_dir):
        raise ReportError(f"{sweep_dir}: not a sweep folder (no multirun.yaml, and fewer than"
                          " two run subfolders)")
    return load_sweep(sweep_dir)


def build_sweep_report(sweep_dir: Path) -> Path:
    """Write sweep_dir/sweep.csv and sweep_dir/report.html; returns the report's path."""
    from llmperf.report.sweep_plots import SWEEP_PLOTS

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
