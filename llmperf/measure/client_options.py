"""The load generator's own options (`scenario.client`), beside the measurement they shape
(llmperf/measure/workers.py runs the load over several processes)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from llmperf.errors import ConfigError, MissingDependency, extra_install
from llmperf.measure.event_loop import EVENT_LOOPS
from llmperf.options import check_choice, check_positive, option

# llmperf/measure/backends/'s members (its registry imports the backends, which import the
# measurement that imports these options: the names alone, kept equal by a test)
LOAD_BACKEND_NAMES = ("processes", "ray")


@dataclass
class ClientConfig:
    """`scenario.client`: the load generator's processes."""

    workers: int = option(1, "load-generator processes, each with its own event loop and a round-robin share of the schedule; > 1 needs an engine reachable from several processes (engine=openai)")

    event_loop: str = option("auto", "the load generator's event loop: auto (uvloop where installed), uvloop or asyncio")

    backend: str = option("processes", "where the workers run: processes (this host) or ray (Ray actors spread over a cluster's nodes, on one clock; pip install -e \".[ray]\")")

    ray_address: str = option("auto", "backend=ray: the cluster to join: auto (RAY_ADDRESS, else a running local one), local (start one here) or an address host:port")

    ray_cpus_per_worker: float = option(1.0, "backend=ray: CPUs each worker's actor reserves (its bundle of the SPREAD placement group)")

    clock_correction: bool = option(True, "backend=ray: move each worker's schedule by its measured clock offset (false: measure only; the run is then invalid past max_clock_uncertainty_s)")

    test_clock_offset_s: float = option(0.0, "tests only: the last Ray worker's clock runs this far ahead, as another host's would")

    def __post_init__(self) -> None:
        check_positive(self, "workers", allow_none=False)
        check_positive(self, "ray_cpus_per_worker", allow_none=False)
        EVENT_LOOPS.check("event_loop", self.event_loop)
        check_choice("backend", self.backend, LOAD_BACKEND_NAMES, "load backend")
        if self.backend == "ray" and not _installed("ray"):
            raise MissingDependency("scenario.client.backend=ray", "ray", extra_install("ray"))
        if self.test_clock_offset_s and self.backend != "ray":
            raise ConfigError("test_clock_offset_s", self.test_clock_offset_s,
                              "only the ray backend's workers have clocks of their own")


def _installed(module: str) -> bool:
    """Whether `module` can be imported, without importing it (ray takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
