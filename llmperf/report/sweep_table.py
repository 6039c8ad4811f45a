"""A sweep (a Hydra multirun folder) as a table: a row per job, written as sweep.csv.

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
from llmperf.measure.catalog import STAT_LABELS
from llmperf.measure.run_files import is_number, lookup
from llmperf.report.errors import ReportError
from llmperf.report.folder import is_sweep_folder

SWEEP_CSV = "sweep.csv"
FLAGS = ("valid", "interrupted")  # yes/no columns; every other figure is a number
# sweep.csv's figures, catalog names in column order; a statistic's column is named
# `ttft_p99_s`. The prediction columns repeat the median TTFT beside its prediction.
SWEEP_FIGURES = (
    "num_requests", "num_completed", "num_failed", "duration_s", "request_throughput_rps",
    "output_throughput_tps", "total_throughput_tps", "goodput_rps", "slo_attainment",
    "ttft_s.median", "ttft_s.p99", "tpot_s.median", "tpot_s.p99", "itl_s.median", "itl_s.p99",
    "e2e_s.median", "e2e_s.p99", "mbu_decode", "mfu_prefill", "roofline_fraction",
    "usd_per_1m_tokens", "usd_per_1m_output_tokens", "energy_per_output_token_j",
    # the roofline's prediction beside the measurement (llmperf/perf/prediction.py)
    ("ttft_median_s", "ttft_s.median"), "predicted_ttft_s", "prediction_error_ttft",
    "measured_decode_step_s", "predicted_decode_step_s", "prediction_error_decode_step",
    "prediction_error_tpot",
)


def csv_column(name: str) -> str:
    """The sweep.csv column of a catalog name: `ttft_s.median` -> `ttft_p50_s`."""
    key, dot, stat = name.partition(".")
    return f"{key.removesuffix('_s')}_{STAT_LABELS.get(stat, stat)}_s" if dot else name


# sweep.csv's columns: column name -> catalog name (where in summary.json).
FIGURES = {**{f: f for f in FLAGS},
           **dict(item if isinstance(item, tuple) else (csv_column(item), item)
                  for item in SWEEP_FIGURES)}
# Pareto frontiers of output throughput (higher is better) against a p99 latency.
FRONTIERS = {"pareto_ttft_p99": "ttft_p99_s", "pareto_tpot_p99": "tpot_p99_s"}
X_HINTS = ("rate", "concurrency", "rps")



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


def open_sweep(sweep_dir: Path) -> Sweep:
    """The sweep in a folder that must be one (load_sweep reads any folder of job folders)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ReportError(f"{sweep_dir}: no such folder")
    if not is_sweep_folder(sweep_dir):
        raise ReportError(f"{sweep_dir}: not a sweep folder (no multirun.yaml, and fewer than"
                          " two run subfolders)")
    return load_sweep(sweep_dir)
