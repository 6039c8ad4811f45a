"""The figures A/B mode reads from each run folder: times (paired) and counters (exact).

Times move with the machine and are judged pair by pair (llmperf.gate.paired). Counters are
the engine's own accounting of the work it did in the measured window (warmup steps left
out): for a seeded offline workload they do not depend on speed, so any move is a change in
what the engine does, and they are gated exactly by default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from engines.base import StepStat
from engines.reference.config import ModelConfig
from llmperf.gate.errors import GateError
from llmperf.gate.metrics import HIGHER, LOWER
from llmperf.gate.runs import Job, job_value
from llmperf.perf.footprint import ModelWork
from llmperf.perf.roofline import step_work


@dataclass(frozen=True)
class Figure:
    name: str
    direction: str  # HIGHER or LOWER is better
    timed: bool  # True: paired statistic with a tolerance; False: a counter, gated exactly
    read: Callable[[Job], float]
    meaning: str


def _from(base: str) -> Callable[[Job], float]:
    return lambda job: job_value(job, base)


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


FIGURES: dict[str, Figure] = {f.name: f for f in (
    Figure("decode_step_p10_s", LOWER, True, _from("steps.decode_step_p10_s"),
           "10th percentile of the pure decode steps' durations (measured window)"),
    Figure("decode_cpu_p10_s", LOWER, True, _from("steps.decode_cpu_p10_s"),
           "10th percentile of the pure decode steps' CPU time, all threads (measured window)"),
    Figure("output_throughput_tps", HIGHER, True, _from("output_throughput_tps"),
           "output tokens / measured window"),
    Figure("e2e_s.median", LOWER, True, _from("e2e_s.median"), "median request latency"),
    Figure("forward_passes", LOWER, False, _from("steps.count"),
           "engine steps (one forward each) after warmup"),
    Figure("padded_fraction", LOWER, False, _from("steps.padded_fraction"),
           "padded slots / all slots computed"),
    Figure("kv_blocks_peak", LOWER, False, _from("steps.kv_blocks_peak"),
           "most KV blocks in use at once"),
    Figure("bytes_per_token", LOWER, False, lambda job: _work_per_token(job)[0],
           "bytes the steps had to move / tokens computed"),
    Figure("flops_per_token", LOWER, False, lambda job: _work_per_token(job)[1],
           "FLOPs the steps had to do / tokens computed"),
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
