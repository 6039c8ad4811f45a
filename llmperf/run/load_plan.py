"""The load a run hands its backend (llmperf/measure/backends/plan.py's LoadPlan), made from
the run's workload and scenario: its requests as a stream or a list made before the run, its
multi-turn sessions or its stages."""

from __future__ import annotations

import itertools

from llmperf.measure.backends.plan import LoadPlan
from llmperf.measure.loadgen import SessionLoad
from llmperf.measure.pacing import StagePlan
from llmperf.run.state import Run


def context_tokens(run: Run) -> int | None:
    """The engine's context length when it says (engine options' max_model_len)."""
    info = run.engine.info()
    return info.get("options", info).get("max_model_len")


def load_plan(run: Run, warmup: list, concurrency: int | None, one_loop: bool) -> LoadPlan:
    """The load as the backend takes it. One loop reads the workload's requests as it sends
    them (or its sessions, or its stages); workers split a list made before the run. Requests
    with images are made before the run too: a PNG costs ~13 ms to encode, which on the load
    generator's loop would be the client's own delay."""
    scenario = run.config.scenario
    sessions = None
    if run.workload.has_sessions:
        sessions = SessionLoad(
            run.workload.sessions(),
            run.workload.sampling,
            scenario.sessions.max_concurrent,
            scenario.sessions.max_context_tokens or context_tokens(run),
        )
    stages = stage_plans(run)
    if sessions or stages:
        requests = ()
    elif not one_loop or (scenario.images.count and scenario.num_requests):
        requests = scheduled_requests(run)
    else:
        requests = run.workload.requests()
    return LoadPlan(warmup, requests, concurrency, scenario.duration_s, sessions, stages)


def stage_plans(run: Run) -> list[StagePlan] | None:
    """scenario.stages as the load generator runs them; None without stages."""
    return [StagePlan(run.workload.stage_requests(i), s.rate_rps, s.concurrency, s.duration_s)
            for i, s in enumerate(run.config.scenario.stages)] or None


def scheduled_requests(run: Run) -> list:
    """The measured requests, precomputed to be split over workers: a schedule bounded only by
    duration_s ends at the first arrival past it."""
    requests = run.workload.requests()
    duration_s = run.config.scenario.duration_s
    if duration_s is not None and not run.workload.closed_loop:
        requests = itertools.takewhile(lambda r: r.arrival_s < duration_s, requests)
    return list(requests)
