"""The automatic sweep (`llmperf-search search.mode=sweep`): from the lowest load to the
highest the engine takes, each a normal run, then the knee between them.

    synchronous  one request at a time (a closed loop at concurrency 1): the engine
                 unloaded; the rate it served is the sweep's lowest rate
    throughput   every request at once (the offline process): the most the engine served,
                 the sweep's highest rate
    rates        `search.rates` rates evenly spaced above the synchronous rate, the last of
                 them the throughput rate itself (can the engine hold, at a steady pace, what
                 it served at best?), sent by the scenario's arrival process when it takes a
                 rate (constant, poisson, gamma), else by poisson
    knee         the highest rate the engine keeps up with (below)

**Keeping up.** A rate trial keeps up when the over-saturation detector did not stop it and
its requests completed at least `KEEP_UP` (95 %) as fast as they were sent: the completion
rate, (completed − 1) ÷ the span from the first completion to the last, against the offered
rate, (dispatched − 1) ÷ the span of the dispatches. Below capacity requests end as they
arrive and the two rates agree whatever the run's length; past it they end at the
engine's pace and the completion rate falls to the capacity. (Completions over the whole
window would not do: a short run's drain after its last arrival would count as falling
behind.)

**The knee** is where the served rate stops following the offered rate: below it requests
complete as fast as they are sent, past it at the engine's own pace. It lies between the
highest rate trial that keeps up, every rate below it keeping up too (x_lo; a noisy pass
above a failure does not move it), and the next rate trial, which fell behind (x_hi). The
completion rate of that trial is the pace the engine held under overload, its capacity: the
knee is that rate, clamped to [x_lo, x_hi]. When every rate keeps up the knee is the highest
rate; when the lowest already falls behind, x_lo is the synchronous rate.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from llmperf.measure.records import RequestRecord
from llmperf.run.config import Config
from llmperf.run.runner import run_benchmark
from llmperf.workload.arrivals import ARRIVALS
from llmperf.workload.scenario import SloConfig

KEEP_UP = 0.95  # completion rate / offered rate at or above this: the engine keeps up
KINDS = ("synchronous", "throughput", "rate")


@dataclass
class SweepTrial:
    """One run of the sweep and the figures the comparison needs."""

    kind: str  # synchronous | throughput | rate
    offered_rps: float | None  # the rate the load generator sent at; a trial's x on the page
    served_rps: float | None  # completed requests / the run's window (summary's request rate)
    completion_rps: float | None  # (completed - 1) / the span of the completions
    keeps_up: bool
    saturated: bool
    interrupted: bool
    run_dir: str
    goodput_rps: float | None = None
    slo_attainment: float | None = None
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p50_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p99_s: float | None = None

    @property
    def rate_rps(self) -> float | None:
        """Where the trial sits on the offered-rate axis: the synchronous and throughput
        trials have no asked rate, so they sit at the rate they served."""
        return self.offered_rps if self.kind == "rate" else self.served_rps


def spaced_rates(synchronous_rps: float, throughput_rps: float, count: int) -> list[float]:
    """`count` rates evenly spaced above the synchronous rate, the last the throughput rate."""
    if throughput_rps <= synchronous_rps:
        return [synchronous_rps]  # the engine serves no more with a queue: one rate says it
    step = (throughput_rps - synchronous_rps) / count
    return [synchronous_rps + k * step for k in range(1, count + 1)]


def knee_rps(trials: list[SweepTrial]) -> float | None:
    """The knee (see the module's docstring); None before a rate is known."""
    rates = sorted((t for t in trials if t.kind == "rate" and t.offered_rps),
                   key=lambda t: t.offered_rps)
    knee = next((t.rate_rps for t in trials if t.kind == "synchronous"), None)
    for trial in rates:
        if not trial.keeps_up:
            if knee is None or trial.completion_rps is None:
                return knee
            return min(max(trial.completion_rps, knee), trial.offered_rps)
        knee = trial.offered_rps
    return knee


def completion_rate_rps(records: list[RequestRecord]) -> float | None:
    ends = sorted(r.end_s for r in records if not r.warmup and r.ok)
    if len(ends) < 2 or ends[-1] <= ends[0]:
        return None
    return (len(ends) - 1) / (ends[-1] - ends[0])


def trial_config(config: Config, kind: str, rate_rps: float | None) -> Config:
    """The scenario as one trial sends it."""
    config = copy.deepcopy(config)
    arrival = config.scenario.arrival
    if kind == "synchronous":
        arrival.process, arrival.concurrency = "closed", 1
    elif kind == "throughput":
        arrival.process = "offline"
    else:
        if not ARRIVALS[arrival.process].needs_rate or arrival.process == "ramp":
            arrival.process = "poisson"
        arrival.rate_rps = rate_rps
    return config


def run_sweep_trial(config: Config, kind: str, rate_rps: float | None, run_dir: Path,
                    argv: list[str], slo: SloConfig | None) -> SweepTrial:
    """One trial: a full run (config.yaml, requests.jsonl, summary.json, report) in run_dir."""
    config = trial_config(config, kind, rate_rps)
    if slo is not None:
        config.scenario.slo = slo
    run = run_benchmark(config, run_dir, argv=argv, console=Console(quiet=True))
    summary = run.summary
    offered = summary.get("offered_rate_rps")
    completion = completion_rate_rps(run.records)
    saturated = bool(summary.get("saturated"))
    keeps_up = (kind == "rate" and not saturated and not run.interrupted
                and offered is not None and completion is not None
                and completion >= KEEP_UP * offered)
    return SweepTrial(
        kind=kind, offered_rps=offered, served_rps=summary.get("request_throughput_rps"),
        completion_rps=completion, keeps_up=keeps_up, saturated=saturated,
        interrupted=run.interrupted, run_dir=str(run_dir),
        goodput_rps=summary.get("goodput_rps"), slo_attainment=summary.get("slo_attainment"),
        ttft_p50_s=_stat(summary, "ttft_s", "median"), ttft_p99_s=_stat(summary, "ttft_s", "p99"),
        tpot_p50_s=_stat(summary, "tpot_s", "median"), e2e_p50_s=_stat(summary, "e2e_s", "median"),
        e2e_p99_s=_stat(summary, "e2e_s", "p99"),
    )


def _stat(summary: dict[str, Any], name: str, stat: str) -> float | None:
    return (summary.get(name) or {}).get(stat)
