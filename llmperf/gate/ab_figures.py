"""The figures A/B mode reads from each run folder: times (paired) and counters (exact).

Times move with the machine and are judged pair by pair (llmperf.gate.paired). Counters are
the engine's own accounting of the work it did in the measured window (warmup steps left
out): for a seeded offline workload they do not depend on speed, so any move is a change in
what the engine does, and they are gated exactly by default.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from engines.base import StepStat
from engines.reference.config import ModelConfig
from llmperf.gate.errors import GateError
from llmperf.gate.runs import Job, job_value
from llmperf.measure.catalog import metric
from llmperf.perf.footprint import ModelWork
from llmperf.perf.roofline import step_work


@dataclass(frozen=True)
class Figure:
    """An A/B figure: a catalog figure (its direction and definition are the catalog's) under
    the short name A/B tables use."""

    name: str
    base: str  # the catalog's name of the figure
    timed: bool  # True: paired statistic with a tolerance; False: a counter, gated exactly

    @property
    def direction(self) -> str:  # HIGHER or LOWER is better
        return metric(self.base).direction

    @property
    def meaning(self) -> str:
        return metric(self.base).definition

    def read(self, job: Job) -> float:
        return job_value(job, self.base)


def _work_per_token(job: Job) -> tuple[float, float]:
    """(bytes, FLOPs) per computed token over the measured steps, by the roofline's work model."""
    info = job.summary.get("engine") or {}
    try:
        model = ModelConfig(**info["model_config"])
        kv_bytes_per_element = info["kv_bytes_per_token"] / model.kv_bytes_per_token(1)
        work = ModelWork.of(model, info["weight_bytes"], kv_bytes_per_element)
    except (KeyError, TypeError) as e:
        raise GateError(f"{job.path / 'summary.json'}: the engine reports no model accounting"
                        f" ({e}); bytes/FLOPs per token need the reference engine") from None
    names = {f.name for f in fields(StepStat)}
    steps = [StepStat(**{k: v for k, v in row.items() if k in names}) for row in job.steps()]
    tokens = sum(s.num_tokens for s in steps)
    if not tokens:
        raise GateError(f"{job.path / 'steps.jsonl'}: no token computed after warmup")
    done = [step_work(work, s) for s in steps]
    return sum(w.bytes for w in done) / tokens, sum(w.flops for w in done) / tokens


def bytes_per_token(job: Job) -> float:
    return _work_per_token(job)[0]


def flops_per_token(job: Job) -> float:
    return _work_per_token(job)[1]


FIGURES: dict[str, Figure] = {f.name: f for f in (
    Figure("decode_step_p10_s", "steps.decode_step_p10_s", True),
    Figure("decode_cpu_p10_s", "steps.decode_cpu_p10_s", True),
    Figure("output_throughput_tps", "output_throughput_tps", True),
    Figure("e2e_s.median", "e2e_s.median", True),
    Figure("forward_passes", "steps.count", False),
    Figure("padded_fraction", "steps.padded_fraction", False),
    Figure("kv_blocks_peak", "steps.kv_blocks_peak", False),
    Figure("bytes_per_token", "work.bytes_per_token", False),
    Figure("flops_per_token", "work.flops_per_token", False),
)}

DEFAULT_FIGURES = tuple(FIGURES)


def figure_named(name: str) -> Figure:
    if name not in FIGURES:
        raise GateError(f"unknown A/B figure {name!r}; valid: {', '.join(FIGURES)}")
    return FIGURES[name]


def read_figures(job: Job, figures: list[Figure]) -> dict[str, float]:
    return {f.name: f.read(job) for f in figures}


def readable(jobs: list[Job], figures: list[Figure]) -> tuple[list[Figure], list[str]]:
    """The figures every job reports, and a line for each left out (an older side's runs may
    lack a newer figure: steps.jsonl without cpu_s)."""
    kept, notes = [], []
    for figure in figures:
        try:
            for job in jobs:
                figure.read(job)
        except GateError as e:
            notes.append(f"{figure.name} left out: {e}")
        else:
            kept.append(figure)
    return kept, notes
