"""Reading run and sweep folders, and evaluating a metric on them.

A run folder holds summary.json (and maybe steps.jsonl). A sweep folder (a Hydra multirun)
holds one run folder per job; the job's overrides come from its .hydra/overrides.yaml, or
from the folder name (Hydra's override_dirname) when that file is missing. sweep.csv is
not read: a sweep cut short has none, and the job folders hold everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmperf.gate.errors import GateError
from llmperf.gate.metric_spec import MetricSpec, Selector
from llmperf.measure.catalog import metric, split_statistic
from llmperf.measure.run_files import (
    MalformedSummary,
    UnreadableFile,
    UnsupportedSummary,
    is_number,
    lookup,
    read_jsonl,
    read_overrides,
    read_summary,
)

_MISSING = object()


@dataclass
class Job:
    """One run: its folder, its summary and the overrides that tell it apart in a sweep."""

    path: Path
    summary: dict[str, Any]
    overrides: dict[str, str] = field(default_factory=dict)
    _steps: list[dict] | None = field(default=None, init=False, repr=False)

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.overrides.items()) or self.path.name

    def steps(self) -> list[dict]:
        """The measured steps: those that started after warmup (summary's measure_start_s)."""
        if self._steps is None:
            start_s = self.summary.get("measure_start_s")
            steps = _read_steps(self.path / "steps.jsonl")
            if is_number(start_s):
                steps = [s for s in steps if s.get("start_s", start_s) >= start_s]
            if not steps:
                raise GateError(f"{self.path / 'steps.jsonl'} holds no step after warmup")
            self._steps = steps
        return self._steps

    def matches(self, selector: Selector) -> bool:
        return all(_same_value(self._lookup(key), value) for key, value in selector)

    def _lookup(self, key: str) -> Any:
        return self.overrides[key] if key in self.overrides else lookup(self.summary, key)


def load_jobs(path: Path) -> list[Job]:
    """The jobs of a run folder (one) or a sweep folder (one per subfolder with a summary)."""
    if not path.is_dir():
        raise GateError(f"run folder not found: {path}")
    if (path / "summary.json").is_file():
        return [load_job(path)]
    jobs = [load_job(p) for p in sorted(path.iterdir()) if (p / "summary.json").is_file()]
    if not jobs:
        raise GateError(f"no summary.json in {path} or its subfolders: not a run or sweep folder")
    return jobs


def load_job(path: Path) -> Job:
    """One run folder's job; GateError if its summary.json or overrides cannot be read."""
    try:
        summary = read_summary(path)
        overrides = read_overrides(path)
    except UnsupportedSummary as e:
        raise GateError(f"{path / 'summary.json'}: {e.wording('this gate')}") from None
    except MalformedSummary as e:
        raise GateError(f"{path / 'summary.json'}: {e}") from None
    except UnreadableFile as e:
        raise GateError(str(e)) from None
    if overrides is None and "=" in path.name:  # Hydra's override_dirname
        overrides = path.name.split(",")
    return Job(path, summary.to_dict(), _parse_overrides(overrides or []))


def _parse_overrides(items: list[str]) -> dict[str, str]:
    """key -> value of the job's Hydra overrides (`+key=v` and `++key=v` count as `key=v`)."""
    overrides = {}
    for item in items:
        key, eq, value = item.partition("=")
        if eq and not key.startswith("~"):
            overrides[key.lstrip("+")] = value
    return overrides


def _read_steps(path: Path) -> list[dict]:
    if not path.is_file():
        raise GateError(f"steps metrics need {path}, which is missing")
    steps, bad = read_jsonl(path)
    if bad:
        raise GateError(f"{path}:{bad[0]}: not a JSON object")
    if not steps:
        raise GateError(f"{path} holds no steps")
    return steps


def _same_value(actual: Any, wanted: str) -> bool:
    if actual is None:
        return False
    try:
        return float(actual) == float(wanted)
    except (TypeError, ValueError):
        return str(actual).lower() == wanted.lower()


def select_job(jobs: list[Job], selector: Selector | None, spec: MetricSpec, where: Path) -> Job:
    """The one job a selector names (no selector: the only job)."""
    if selector is None:
        if len(jobs) == 1:
            return jobs[0]
        raise GateError(f"{where} holds {len(jobs)} jobs; pick one with {spec.base}@key=value"
                        f" (jobs: {'; '.join(j.label for j in jobs)})")
    found = [j for j in jobs if j.matches(selector)]
    wanted = ",".join(f"{k}={v}" for k, v in selector)
    if not found:
        raise GateError(f"no job in {where} matches {wanted}"
                        f" (jobs: {'; '.join(j.label for j in jobs)})")
    if len(found) > 1:
        raise GateError(f"{len(found)} jobs in {where} match {wanted}; add keys to tell them"
                        f" apart (matching: {'; '.join(j.label for j in found)})")
    return found[0]


def stage_summary(job: Job, stage: int) -> dict[str, Any]:
    """Stage `stage`'s figures of a run with scenario.stages; GateError where it has none."""
    stages = job.summary.get("stages")
    if not isinstance(stages, list) or not stages:
        raise GateError(f"{job.path / 'summary.json'} has no stages (scenario.stages) to pick"
                        f" stage={stage} from")
    if stage >= len(stages) or not isinstance(stages[stage], dict):
        raise GateError(f"{job.path / 'summary.json'} has stages 0-{len(stages) - 1}, not {stage}")
    if not stages[stage].get("ran"):
        raise GateError(f"{job.path}: stage {stage} did not run (the run stopped before it)")
    return stages[stage]


def summary_value(summary: dict[str, Any], base: str) -> Any:
    """A figure of a summary (or of one stage's): `ttft_s.p99.9` is summary["ttft_s"]["p99.9"]."""
    key, stat = split_statistic(base)
    if stat is None:
        return lookup(summary, base, default=_MISSING)
    node = summary.get(key, _MISSING)
    return node.get(stat, _MISSING) if isinstance(node, dict) else _MISSING


def job_value(job: Job, base: str, stage: int | None = None) -> float:
    """The figure `base` of one job (of one of its stages, when `stage` is given)."""
    figure = metric(base)
    if stage is not None:
        if figure.source != "summary.json":
            raise GateError(f"{base} is not a per-stage figure (only summary.json's are)")
        node = summary_value(stage_summary(job, stage), base)
        if not is_number(node):
            raise GateError(f"{job.path / 'summary.json'}: stage {stage} has no number for {base}")
        return float(node)
    if figure.group == "work":  # from steps.jsonl and the summary's model accounting together
        return figure.compute()(job)
    if figure.source == "steps.jsonl":
        steps = job.steps()
        try:
            return figure.compute()(steps)
        except KeyError as e:
            raise GateError(f"{job.path / 'steps.jsonl'}: a step lacks {e.args[0]!r}") from None
    node = summary_value(job.summary, base)
    if node is _MISSING:
        raise GateError(f"{job.path / 'summary.json'} has no {base!r} (schema mismatch, or a"
                        " percentile its report.percentiles did not hold?)")
    if not is_number(node):
        raise GateError(f"{job.path / 'summary.json'}: {base} is {node!r}, not a number")
    return float(node)


def evaluate(spec: MetricSpec, jobs: list[Job], where: Path) -> float:
    """The metric's value in one run or sweep: a job's figure, or the ratio of two jobs'."""
    job = select_job(jobs, spec.job, spec, where)
    if not spec.is_ratio:
        return job_value(job, spec.base, spec.stage)
    over_job = select_job(jobs, spec.over_job, spec, where)
    if over_job is job and spec.stage == spec.over_stage:
        raise GateError(f"{spec.name}: both sides of the ratio pick the same job in {where}")
    over = job_value(over_job, spec.base, spec.over_stage)
    if over == 0:
        raise GateError(f"{spec.name}: the denominator job's {spec.base} is 0 in {where}")
    return job_value(job, spec.base, spec.stage) / over


def validity_notes(job: Job) -> list[str]:
    """Why a run's figures deserve less trust: interrupted, or failed validity checks."""
    if job.summary.get("interrupted"):
        return [f"{job.path}: the run was interrupted"]
    if job.summary.get("valid") is not False:
        return []
    failed = [f"{c.get('check')} ({c.get('detail')})" if c.get("detail") else str(c.get("check"))
              for c in job.summary.get("validity", []) if isinstance(c, dict) and not c.get("ok")]
    return [f"{job.path}: the run is not valid: {'; '.join(failed) or 'no reason recorded'}"]
