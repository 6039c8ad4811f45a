"""Ray's own processes give way to the load (backends/ray_pool.py, ray_actors.py).

On a host the load generator shares with Ray, every turn of Ray's threads is a turn taken
from a load loop that spins before each send: an idle actor wakes ~150 times a second (its
signal check every 10 ms, its gRPC pollers), a local Ray's daemons (GCS, raylet, agents,
dashboard, monitors) ~400 more. Two kinds of them have nothing to do while the load runs, and
are moved to `SCHED_IDLE`, the Linux class that runs only where no other thread wants the
core and does not preempt one that does:

- **An actor whose child runs the load and streams its records** (record_stream.py), once the
  child has started: it only waits for the child, and answers the rare control call and
  clock reprobe. Its child keeps its own class (it was started before the move).
- **The daemons of a Ray the backend started for this run** (`ray_address=local`), once the
  actors exist (a worker the raylet started after the move would inherit the class) and
  before the load. A Ray someone else started is never touched.
- **That Ray's threads in the coordinator's own process** (its driver: gRPC pollers, the
  core worker's event loops; ~50 wakeups a second idle), at the measured phase's start. They
  carry the coordinator's few calls while the load runs (a look for lost workers every
  0.1 s, the clock reprobes), which then wait for a core the loads leave free: the reprobes'
  uncertainty read the same (0.34 ms median, 12 trials each way at 6200 req/s on 2 cores).
  The coordinator's own threads keep their class.

Once the load has ended, the actor's threads and the driver's move back to `SCHED_OTHER`
(their nice kept), where the host allows it (leaving `SCHED_IDLE` needs CAP_SYS_NICE, or an
RLIMIT_NICE that admits the nice): they carry the last clock probes, whose round trips bound
the drift, and on a host busy with other work an idle-class thread answers only when a core
is free. The daemons stay: a local Ray is shut down with the run. Elsewhere than Linux
nothing changes.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable


def each_thread(apply: Callable[[int], object], pid: int | str = "self") -> int:
    """`apply(tid)` on every thread of process `pid` (this one by default; Linux /proc, none
    elsewhere): how many it applied to, a thread that refuses or has ended left out."""
    tasks = f"/proc/{pid}/task"
    done = 0
    with contextlib.suppress(OSError):  # no /proc, or the process has ended
        for tid in os.listdir(tasks):
            with contextlib.suppress(OSError):  # refused, or the thread has ended
                apply(int(tid))
                done += 1
    return done


def yield_threads(pid: int | str = "self") -> int:
    """Every thread of process `pid` (this one by default) to SCHED_IDLE; how many moved.
    Threads it starts later inherit the class."""
    if not hasattr(os, "SCHED_IDLE"):
        return 0
    return each_thread(_policy("SCHED_IDLE"), pid)


def _policy(policy_name: str) -> Callable[[int], object]:
    policy = getattr(os, policy_name)
    return lambda tid: os.sched_setscheduler(tid, policy, os.sched_param(0))


def resume_threads(pid: int | str = "self") -> int:
    """Every thread of process `pid` back to SCHED_OTHER, each keeping its nice; how many
    moved (none where leaving SCHED_IDLE is not allowed)."""
    if not hasattr(os, "SCHED_IDLE"):
        return 0
    return each_thread(_policy("SCHED_OTHER"), pid)


def resume(tids: list[int]) -> list[int]:
    """These threads of this process (yield_driver's) back to SCHED_OTHER: the ids moved."""
    moved = []
    for tid in tids:
        with contextlib.suppress(OSError):  # refused, or the thread has ended
            _policy("SCHED_OTHER")(tid)
            moved.append(tid)
    return moved


def children(parents: set[int]) -> list[int]:
    """The processes whose parent is one of `parents`, in one pass over /proc ([] elsewhere)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    with open(f"/proc/{entry}/stat") as stat:
                        # pid (comm) state ppid ...: comm may hold spaces and parentheses
                        if int(stat.read().rsplit(")", 1)[1].split()[1]) in parents:
                            found.append(int(entry))
    return found


def local_daemons(node, workers: set[int]) -> list[int]:
    """The processes of a Ray node this process started (`ray._private.worker._global_node`):
    the ones it launched itself (GCS, raylet, dashboard, monitors) and the raylet's children
    but the worker processes in `workers` (the agents)."""
    launched = [info.process.pid for infos in getattr(node, "all_processes", {}).values()
                for info in infos]
    agents = [child for child in children(set(launched)) if child not in workers]
    return [pid for pid in launched + agents if pid not in workers]


def yield_local_ray(ray, workers: set[int]) -> list[int]:
    """The daemons of the Ray this process started, to SCHED_IDLE: the pids moved."""
    node = getattr(ray._private.worker, "_global_node", None)
    if node is None:
        return []
    return [pid for pid in local_daemons(node, workers) if yield_threads(pid)]


def thread_ids() -> set[int]:
    """This process's threads' ids (Linux /proc; none elsewhere)."""
    tids: set[int] = set()
    each_thread(tids.add)
    return tids


def yield_driver(before: set[int]) -> list[int]:
    """The threads this process has started since `before` (thread_ids(), taken before
    ray.init) that Python's threading did not start, Ray's, to SCHED_IDLE: the ids moved."""
    if not hasattr(os, "SCHED_IDLE"):
        return []
    python = {thread.native_id for thread in threading.enumerate()}
    moved = []
    for tid in sorted(thread_ids() - before - python):
        with contextlib.suppress(OSError):  # refused, or the thread has ended
            _policy("SCHED_IDLE")(tid)
            moved.append(tid)
    return moved
