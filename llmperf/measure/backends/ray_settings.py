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

# A Ray started for one run wakes its daemons less often (each period's default in Ray's
# ray_config_def.h in brackets): its node serves only this run's actors, which ask it for
# nothing while the load runs. Idle, its raylet woke 62 times a second where it woke 166, and
# all its daemons ~280 where ~400 (threads' context switches over 10 s, 2 actors, 2 cores).
QUIET_PERIODS = {
    "raylet_report_resources_period_milliseconds": 1000,  # (100) resources to the GCS
    "object_manager_timer_freq_ms": 1000,  # (100) pull retries
    "raylet_check_gc_period_milliseconds": 10_000,  # (100) the cluster-wide GC check
    "kill_idle_workers_interval_ms": 10_000,  # (200) none are started ahead
    "memory_monitor_refresh_ms": 1000,  # (250) the OOM monitor, still on
    "local_fs_monitor_interval_ms": 10_000,  # (100) the disk-full check
    "free_objects_period_milliseconds": 10_000,  # (1000) the calls' replies are inline
    "gcs_pull_resource_loads_period_milliseconds": 10_000,  # (1000) for an autoscaler: none
    "debug_dump_period_milliseconds": 100_000,  # (10000) the raylet's debug state file
    "event_stats": False,  # per-handler timing of every event loop
}


def lean_local(workers: int, cpus_per_worker: float) -> dict[str, Any]:
    """ray.init's options for a Ray started here for one run (ray_address=local): room for
    every worker's bundle even past this host's cores (else the placement group waits
    forever), no idle workers started ahead (the actors start their own), no metrics export
    and its periodic work less often (QUIET_PERIODS), so that Ray's own processes take as
    little of the load generator's cores as they can; and its workers at the driver's
    priority (Ray's `worker_niceness` is 15)."""
    return {"num_cpus": max(os.cpu_count() or 1, math.ceil(workers * cpus_per_worker)),
            "_system_config": {"enable_worker_prestart": False,
                               "prestart_worker_first_driver": False,
                               "enable_metrics_collection": False,
                               "worker_niceness": 0,
                               **QUIET_PERIODS}}


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
