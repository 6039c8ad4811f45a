"""Where the load generator runs, one file per member, each built with
`from_options(client, parts)` and driven with `run(plan)` (plan.py): `loop` (one event loop in
the run's own process, one_loop.py: scenario.client.workers=1 on this host), `processes` (N
processes on this host, llmperf/measure/workers.py) and `ray` (N Ray actors spread over a
cluster's nodes, on one clock: ray_pool.py). `scenario.client.backend` names `processes` or
`ray`; `backend_name` picks `loop` for one worker on this host."""

from __future__ import annotations

from typing import Any

from llmperf.registry import Registry

LOAD_BACKENDS: Registry[type] = Registry(
    "load backend",
    {
        "loop": "llmperf.measure.backends.one_loop:OneLoop",
        "processes": "llmperf.measure.workers:WorkerPool",
        "ray": "llmperf.measure.backends.ray_pool:RayPool",
    },
)


def backend_name(client: Any) -> str:
    """The member that runs `scenario.client`'s load."""
    return "loop" if client.backend == "processes" and client.workers == 1 else client.backend
