"""The Ray backend's load runs at the coordinator's priority, not at the `worker_niceness` (15)
a raylet starts its workers at: on a host they share, the coordinator's turns would otherwise
preempt the workers' loops (docs/sizing.md, "Ray actors and local processes on one host")."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOT_USER = os.geteuid() == 0

# A process with three threads (or more) asks for `target` on all of them; it prints what
# take_priority returned and every thread's nice, read back from /proc.
TAKE = """
import json, os, sys, threading
from llmperf.measure.backends.ray_actors import take_priority
stop = threading.Event()
threads = [threading.Thread(target=stop.wait) for _ in range(2)]
for t in threads:
    t.start()
got = take_priority(int(sys.argv[1]))
nices = [int(open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()[16])
         for tid in os.listdir("/proc/self/task")]
stop.set()
print(json.dumps({"got": got, "nices": nices}))
"""


def thread_nice(pid: int | str, tid: int | str) -> int:
    return int(Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def take_in_child(target: int) -> dict:
    out = subprocess.run([sys.executable, "-c", TAKE, str(target)], capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         timeout=60)
    return json.loads(out.stdout)


def may_raise_to(nice: int) -> bool:
    """Whether this user may set a thread's nice as low as `nice` (RLIMIT_NICE: 20 - limit)."""
    return ROOT_USER or nice >= 20 - resource.getrlimit(resource.RLIMIT_NICE)[0]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="per-thread nice is Linux's")
@pytest.mark.parametrize("step", [3, -3])
def test_take_priority_sets_every_thread_of_the_process_or_leaves_a_refused_raise(step):
    own = os.getpriority(os.PRIO_PROCESS, 0)  # the child starts at this thread's nice
    target = own + step
    if not -20 <= target <= 19:
        pytest.skip(f"nice {own} leaves no room for {step:+d}")
    child = take_in_child(target)
    assert len(child["nices"]) >= 3  # its own two and the main thread (imports may start more)
    if step > 0 or may_raise_to(target):
        assert child["got"] == target and set(child["nices"]) == {target}
    else:  # refused: every thread keeps its own
        assert child["got"] == own and set(child["nices"]) == {own}


def test_a_worker_below_the_coordinators_priority_is_named_in_a_warning(caplog):
    from llmperf.measure.backends.ray_pool import RayPool

    pool = RayPool(2, None, "syn", on_record=lambda record: None)
    with caplog.at_level(logging.WARNING, logger="llmperf.measure.backends.ray_pool"):
        pool._note_priority(0, 5, 5, "node-a")  # lifted: at the coordinator's
        assert not caplog.records
        pool._note_priority(1, 19, 4, "node-b")  # refused: Ray's 4 + 15
    assert pool.priorities == {0: 5, 1: 19}
    [warning] = caplog.records
    assert "load worker 1 (node node-b) runs at nice 19, below the coordinator's 4" in warning.message


@pytest.mark.skipif(not ROOT_USER, reason="the test lifts its own thread to start a raylet "
                    "below Ray's workers; that and lifting them back needs root")
def test_ray_workers_run_the_load_at_the_coordinators_priority_and_every_record_arrives(caplog):
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from engines.base import Request
    from engines.synthetic_options import SyntheticEngineConfig
    from llmperf.measure.backends.plan import LoadPlan
    from llmperf.measure.backends.ray_pool import RayPool

    me = threading.get_native_id()
    own = os.getpriority(os.PRIO_PROCESS, me)
    coordinator = max(-20, own - 5)  # Ray's workers start at min(19, coordinator + 15)
    received: list[str] = []
    seen: dict[tuple[int, int], int] = {}  # each LoadWorker thread's nice, read during the load
    children: dict[tuple[int, int], int] = {}  # the same for the child processes running the load
    os.setpriority(os.PRIO_PROCESS, me, coordinator)
    nodes = None
    try:
        nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
        raylet = nodes.head_node.all_processes["raylet"][0].process.pid
        ray.init(address=nodes.address, include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR")

        def on_record(record) -> None:  # on the coordinator's thread, as the load runs
            received.append(record.id)
            if len(received) % 20 == 0:
                pids = [pid for pid in os.listdir("/proc") if pid.isdigit()]
                workers = {int(pid) for pid in pids if _is_load_worker(pid, raylet)}
                for pid in pids:
                    into = seen if int(pid) in workers else children if _is_load_child(
                        pid, workers) else None
                    if into is not None:
                        for tid in os.listdir(f"/proc/{pid}/task"):
                            with contextlib.suppress(OSError):  # a thread that just ended
                                into[(int(pid), int(tid))] = thread_nice(pid, tid)

        pool = RayPool(2, SyntheticEngineConfig(tpot_s=0.001), "syn", on_record=on_record)
        requests = [Request(id=f"r{k}", max_tokens=2, prompt_token_ids=[1] * 8, arrival_s=k / 100)
                    for k in range(200)]
        with caplog.at_level(logging.WARNING, logger="llmperf.measure.backends.ray_pool"):
            pool.run(LoadPlan(warmup=[], requests=requests))
    finally:
        ray.shutdown()
        if nodes is not None:
            nodes.shutdown()
        os.setpriority(os.PRIO_PROCESS, me, own)
    assert min(19, coordinator + 15) > coordinator  # Ray left alone would run them below
    assert sorted(received) == sorted(r.id for r in requests) and not pool.lost
    assert pool.priorities == {0: coordinator, 1: coordinator}
    assert len({pid for pid, _ in seen}) == 2  # both workers' processes were read
    assert set(seen.values()) == {coordinator}, seen
    assert len({pid for pid, _ in children}) == 2  # each actor's load in its child process
    assert set(children.values()) == {coordinator}, children
    assert not caplog.records


def _is_load_child(pid: str, workers: set[int]) -> bool:
    """A process a LoadWorker spawned to run its load (not multiprocessing's resource tracker)."""
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return ppid in workers and b"spawn_main" in command


def _is_load_worker(pid: str, raylet: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1].split()
    return comm.startswith("ray::LoadWorker") and int(rest[1]) == raylet
