"""How the ray backend (ray_pool.py) sets Ray up: the options of a Ray it starts for one run,
and the two settings that keep an earlier design to compare against (where an actor runs its
load, who reads its child's messages), read from the environment."""

from __future__ import annotations

import math
import os
import socket
from typing import Any

from llmperf.errors import UsageError
from llmperf.measure.backends.ray_actors import LOAD_IN


def lean_local(workers: int, cpus_per_worker: float) -> dict[str, Any]:
    """ray.init's options for a Ray started here for one run (ray_address=local): room for
    every worker's bundle even past this host's cores (else the placement group waits
    forever), no idle workers started ahead (the actors start their own) and no metrics
    export, so that Ray's own processes take as little of the load generator's cores as
    they can; and its workers at the driver's priority (Ray's `worker_niceness` is 15)."""
    return {"num_cpus": max(os.cpu_count() or 1, math.ceil(workers * cpus_per_worker)),
            "_system_config": {"enable_worker_prestart": False,
                               "prestart_worker_first_driver": False,
                               "enable_metrics_collection": False,
                               "worker_niceness": 0}}


RELAYS = ("stream", "take", "thread")  # how a child's messages come: LLMPERF_RAY_RELAY, the first by default


def load_in() -> str:
    """Where each actor runs its load: `LLMPERF_RAY_LOAD` (child, the default, or actor: on
    the actor's own thread, the design before, kept to compare the two)."""
    return _choice("LLMPERF_RAY_LOAD", LOAD_IN)


def relay() -> str:
    """How each actor's child's messages reach the coordinator: `LLMPERF_RAY_RELAY` (stream,
    the default: over a connection of their own, record_stream.py; take: read from the child's
    pipe by the coordinator's `take` calls, for workers that cannot reach the coordinator's
    address; thread: an actor thread relaying each as it comes, the design before the take,
    kept to compare)."""
    return _choice("LLMPERF_RAY_RELAY", RELAYS)


def _choice(name: str, valid: tuple[str, ...]) -> str:
    value = os.environ.get(name, valid[0])
    if value not in valid:
        raise UsageError(f"{name}={value!r}: valid: {', '.join(valid)}")
    return value


def start_ray(ray, address: str, workers: int, cpus_per_worker: float) -> None:
    """ray.init for a run: `local` starts a Ray here (lean_local), `auto` joins the one
    running, else the address's. One that cannot be joined is one line (UsageError): none
    running for auto, a malformed address, a host:port that takes no connection (checked
    first: Ray's own connect retries go on for minutes)."""
    local = address == "local"
    why = None if address in ("auto", "local") else unreachable(address)
    if why:
        raise UsageError(f"scenario.client.ray_address={address}: cannot reach it ({why})")
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR", configure_logging=False,
                 **(lean_local(workers, cpus_per_worker) if local else {}))
    except (ConnectionError, ValueError) as error:  # none running, a malformed address
        raise UsageError(f"scenario.client.ray_address={address}: "
                         f"{str(error).splitlines()[0]} (local: start one here for the run)"
                         ) from None


def unreachable(address: str, timeout_s: float = 10.0) -> str | None:
    """Why a cluster's `host:port` (or `ray://host:port`) takes no connection, or None: one
    that does, or an address Ray will refuse by its form."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    return None
