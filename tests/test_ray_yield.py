"""Ray's own processes give way to the load (llmperf/measure/backends/ray_yield.py): an actor
whose child streams the load, the daemons of a Ray the backend started for the run and that
Ray's threads in the coordinator's process move to SCHED_IDLE; the load's processes and the
coordinator's own threads keep their class."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINUX = Path("/proc/self/task").is_dir() and hasattr(os, "SCHED_IDLE")
pytestmark = pytest.mark.skipif(not LINUX, reason="SCHED_IDLE and /proc are Linux's")

# Two threads, then yield_threads(), then one more thread: every thread's policy after.
YIELD = """
import json, os, threading
from llmperf.measure.backends.ray_yield import resume_threads, yield_threads
stop = threading.Event()
threads = [threading.Thread(target=stop.wait) for _ in range(2)]
for t in threads:
    t.start()
moved = yield_threads()
late = threading.Thread(target=stop.wait)
late.start()
policies = {tid: os.sched_getscheduler(int(tid)) for tid in os.listdir("/proc/self/task")}
os.setpriority(os.PRIO_PROCESS, late.native_id, 3)
resumed = resume_threads()
after = {tid: os.sched_getscheduler(int(tid)) for tid in os.listdir("/proc/self/task")}
stop.set()
print(json.dumps({"moved": moved, "policies": list(policies.values()),
                  "parent": os.sched_getscheduler(os.getppid()), "resumed": resumed,
                  "after": list(after.values()),
                  "late_nice": os.getpriority(os.PRIO_PROCESS, late.native_id)}))
"""


def policy(pid: int | str, tid: int | str | None = None) -> int:
    """A thread's scheduling policy, read from /proc (field 41 of its stat)."""
    path = f"/proc/{pid}/task/{tid or pid}/stat"
    return int(Path(path).read_text().rsplit(")", 1)[1].split()[38])


def test_every_thread_moves_to_sched_idle_a_later_thread_inherits_it_and_all_move_back():
    out = subprocess.run([sys.executable, "-c", YIELD], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    got = json.loads(out.stdout)
    assert got["moved"] >= 3  # the main thread and its two (imports may start more)
    assert len(got["policies"]) == got["moved"] + 1  # and the one started after
    assert set(got["policies"]) == {os.SCHED_IDLE}
    assert got["parent"] == os.sched_getscheduler(0) != os.SCHED_IDLE  # this process: untouched
    if os.geteuid() == 0:  # leaving SCHED_IDLE needs CAP_SYS_NICE (or a wide RLIMIT_NICE)
        assert got["resumed"] == len(got["after"]) and set(got["after"]) == {os.SCHED_OTHER}
        assert got["late_nice"] == 3  # each thread keeps its nice
    else:
        assert got["resumed"] == 0 and set(got["after"]) == {os.SCHED_IDLE}


def test_the_daemons_of_a_node_are_what_it_launched_and_their_children_but_its_workers():
    from llmperf.measure.backends.ray_yield import children, local_daemons

    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    spawner = ("import subprocess, sys, time\n"
               f"kids = [subprocess.Popen({sleeper!r}) for _ in range(2)]\n"
               "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
               "time.sleep(60)\n")
    gcs = subprocess.Popen(sleeper)
    raylet = subprocess.Popen([sys.executable, "-c", spawner], stdout=subprocess.PIPE, text=True)
    agent = worker = None
    try:
        agent, worker = map(int, raylet.stdout.readline().split())
        assert sorted(children({raylet.pid})) == sorted([agent, worker])
        node = SimpleNamespace(all_processes={
            "gcs_server": [SimpleNamespace(process=gcs)],
            "raylet": [SimpleNamespace(process=raylet)]})
        assert sorted(local_daemons(node, {worker})) == sorted([gcs.pid, raylet.pid, agent])
        assert local_daemons(SimpleNamespace(), set()) == []  # a node with nothing launched
    finally:
        for process in (gcs, raylet):
            process.kill()
            process.wait()
        for pid in (agent, worker):
            if pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)


def test_a_run_on_its_own_local_ray_yields_the_daemons_and_actors_but_not_the_load(monkeypatch):
    ray = pytest.importorskip("ray")
    from engines.base import Request
    from engines.synthetic_options import SyntheticEngineConfig
    from llmperf.measure.backends.plan import LoadPlan
    from llmperf.measure.backends.ray_pool import RayPool

    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")  # another cluster: `local` starts its own
    seen: dict[str, set[int]] = {}  # what ran during the load: kind -> the policies read
    received: list[str] = []

    def on_record(record) -> None:  # on the coordinator's thread, as the load runs
        received.append(record.id)
        if len(received) % 25:
            return
        node = ray._private.worker._global_node
        for kind, infos in node.all_processes.items():
            for info in infos:
                seen.setdefault(kind, set()).add(policy(info.process.pid))
        for actor in pool._actors:  # the actor's threads and its child's main thread
            pid, child = ray.get([actor.pid.remote(), actor.child_pid.remote()])
            try:
                load = policy(child)
            except OSError:  # a child that has ended, with its last batch: its actor is back
                continue
            threads = set()
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError):  # a thread that just ended
                    threads.add(policy(pid, tid))
            if Path(f"/proc/{child}").exists():  # not yet reaped: the actor had not moved back
                seen.setdefault("load", set()).add(load)
                seen.setdefault("actor", set()).update(threads)
        python = {thread.native_id for thread in threading.enumerate()}
        for tid in pool.driver_yielded:  # Ray's threads here, once the load has started
            with contextlib.suppress(OSError):
                seen.setdefault("driver", set()).add(policy("self", tid))
        for tid in python:  # this process's own: the main thread, the clock prober, ...
            with contextlib.suppress(OSError):
                seen.setdefault("coordinator", set()).add(policy("self", tid))

    pool = RayPool(2, SyntheticEngineConfig(tpot_s=0.001), "syn", on_record=on_record,
                   address="local")
    requests = [Request(id=f"r{k}", max_tokens=2, prompt_token_ids=[1] * 8, arrival_s=k / 100)
                for k in range(200)]
    started = time.monotonic()
    pool.run(LoadPlan(warmup=[], requests=requests))
    assert not ray.is_initialized()  # the Ray it started is shut down with the run
    assert sorted(received) == sorted(r.id for r in requests) and not pool.lost
    assert {"gcs_server", "raylet", "actor", "load", "driver", "coordinator"} <= set(seen), seen
    assert (seen["gcs_server"] == seen["raylet"] == seen["actor"] == seen["driver"]
            == {os.SCHED_IDLE}), seen
    assert seen["load"] == seen["coordinator"] == {os.SCHED_OTHER}, seen
    assert len(pool.yielded) >= 3  # GCS, raylet and more (dashboard, monitors, agents)
    assert len(pool.driver_yielded) >= 5  # the core worker's event loops, gRPC's pollers
    if os.geteuid() == 0:  # back before the last clock probes (then Ray was shut down)
        assert set(pool.driver_resumed) <= set(pool.driver_yielded)
        assert len(pool.driver_resumed) >= len(pool.driver_yielded) - 2  # some may have ended
    assert time.monotonic() - started < 120


# A native thread (torch's OpenMP pool) before ray.init, then Ray, then yield_driver: the
# policies of the threads it moved, of the native one from before, and of Python's.
DRIVER = """
import json, os, threading
import torch
torch.set_num_threads(2)
torch.ones(512, 512) @ torch.ones(512, 512)  # starts the intra-op pool's native thread
import ray
from llmperf.measure.backends.ray_settings import lean_local
from llmperf.measure.backends.ray_yield import thread_ids, yield_driver
def policy(tid):
    try:
        return os.sched_getscheduler(tid)
    except ProcessLookupError:  # a thread that has ended since
        return None
python = lambda: {t.native_id for t in threading.enumerate()}
native_before = thread_ids() - python()
before = thread_ids()
ray.init(address="local", include_dashboard=False, log_to_driver=False,
         logging_level="ERROR", **lean_local(1, 1.0))
ray.get(ray.put(1))
moved = yield_driver(before)
print(json.dumps({"moved": [policy(t) for t in moved],
                  "native_before": [policy(t) for t in native_before],
                  "python": [policy(t) for t in python()],
                  "ray_threads": len(thread_ids() - before - python())}))
ray.shutdown()
"""


def test_the_drivers_ray_threads_move_and_threads_from_before_ray_and_pythons_do_not():
    pytest.importorskip("ray")
    out = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(ROOT),
                                          "RAY_ADDRESS": "127.0.0.1:9"}, timeout=180)
    got = {kind: [p for p in policies if p is not None] if isinstance(policies, list) else policies
           for kind, policies in json.loads(out.stdout.strip().splitlines()[-1]).items()}
    assert len(got["moved"]) >= 5 and got["ray_threads"] >= 5
    assert set(got["moved"]) == {os.SCHED_IDLE}
    assert got["native_before"] and set(got["native_before"]) == {os.SCHED_OTHER}
    assert set(got["python"]) == {os.SCHED_OTHER}
