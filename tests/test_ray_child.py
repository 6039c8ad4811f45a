"""The ray backend's load in a child process of its actor (llmperf/measure/backends/ray_child.py),
driven here without Ray: the actor's side of the child's queues, as the actor uses it."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engines.base import Request
from engines.synthetic_options import SyntheticEngineConfig
from llmperf.errors import UsageError
from llmperf.measure.backends.ray_child import ChildLoad, message_kind
from llmperf.measure.worker_process import WorkerSpec, perf_origin

ROOT = Path(__file__).resolve().parents[1]


def spec(n: int, rate_rps: float, index: int = 1) -> WorkerSpec:
    requests = [Request(id=f"r{k}", max_tokens=2, prompt_token_ids=[1] * 8, arrival_s=k / rate_rps)
                for k in range(n)]
    return WorkerSpec(index, SyntheticEngineConfig(tpot_s=0.001), "syn", [], requests, None, None,
                      None, False, time.time_ns())


class Actor:
    """What the actor does with a ChildLoad: runs it on one thread and takes its messages on
    another every 0.1 s, as the coordinator's takes do (or, with `relay`, finds them relayed);
    sets the start on "ready"."""

    def __init__(self, spec: WorkerSpec, relay: bool = False) -> None:
        self.spec, self.child = spec, ChildLoad(relay)
        self.origin_s = perf_origin(spec.origin_unix_ns)  # the run's origin on this clock
        self.got: list[tuple[float, bytes]] = []  # (seconds from the origin at receipt, message)
        self.thread = threading.Thread(target=self.drive, daemon=True)

    def drive(self) -> None:
        runner = threading.Thread(target=self.child.run, args=(self.spec, self.post), daemon=True)
        runner.start()
        while not self.got or message_kind(self.got[-1][1]) not in ("done", "failed"):
            time.sleep(0.1)
            self.child.drain(self.post, 1.0)
        runner.join()

    def post(self, message: bytes) -> None:
        self.got.append((time.perf_counter() - self.origin_s, message))
        if message_kind(message) == "ready":
            self.child.set_start(time.perf_counter() - self.origin_s + 0.1)

    def wait_for_start(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(message_kind(m) == "ready" for _, m in self.got):
            assert time.monotonic() < deadline, "the child never said ready"
            time.sleep(0.02)

    def messages(self) -> list[tuple]:
        return [pickle.loads(m) for _, m in self.got]


@pytest.mark.parametrize("relay", [False, True], ids=["read-by-take", "relayed"])
def test_the_child_runs_its_share_and_its_messages_come_back_pickled_in_order(relay):
    actor = Actor(spec(100, 200.0), relay)
    actor.thread.start()
    actor.thread.join(timeout=120)
    assert not actor.thread.is_alive()
    assert all(isinstance(m, bytes) for _, m in actor.got)  # relayed as the child pickled them
    got = actor.messages()
    assert [kind for kind, _, _ in got][:1] == ["ready"] and got[-1][0] == "done"
    assert {kind for kind, _, _ in got} == {"ready", "records", "done"}
    assert all(index == 1 for _, index, _ in got)
    records = [r for kind, _, batch in got if kind == "records" for r in batch]
    assert sorted(r.id for r in records) == sorted(f"r{k}" for k in range(100))
    assert all(r.worker == 1 and r.error is None for r in records)
    result = got[-1][2]
    assert result.num_dispatched == 100 and not result.interrupted
    assert [p.role for p in result.client_cpu] == ["worker 1"]  # its loop's CPU, measured there
    assert actor.child.pid not in (None, os.getpid())
    # One clock: each record ended, on the child's clock, before this process received it,
    # on its own, and not long before (they come in batches every RECORDS_FLUSH_S)
    received = {r.id: at for at, m in actor.got for r in (pickle.loads(m)[2] if
                message_kind(m) == "records" else [])}
    gaps = [received[r.id] - r.end_s for r in records]
    assert 0 < min(gaps) and max(gaps) < 1.0, (min(gaps), max(gaps))
    assert all(r.dispatch_s >= result.measure_start_s + float(r.id[1:]) / 200.0 for r in records)


def test_the_childs_messages_wait_in_its_pipe_until_a_take_reads_them_all_in_order():
    child, share = ChildLoad(), spec(600, 200.0)
    got: list[bytes] = []
    runner = threading.Thread(target=child.run, args=(share, got.append), daemon=True)
    runner.start()
    deadline = time.monotonic() + 60
    while not got:  # "ready"
        assert time.monotonic() < deadline, "the child never said ready"
        child.drain(got.append, 0.5)
    child.set_start(time.perf_counter() - perf_origin(share.origin_unix_ns))
    time.sleep(1.5)  # its loop sends 300 requests meanwhile; nothing reads its pipe
    assert len(got) == 1 and runner.is_alive()
    child.drain(got.append, 0.0)  # one take: every batch sent so far, at once
    batches = [pickle.loads(m) for m in got[1:]]
    assert len(batches) >= 10 and {kind for kind, _, _ in batches} == {"records"}
    while message_kind(got[-1]) != "done":
        child.drain(got.append, 1.0)
    runner.join(timeout=30)
    assert not runner.is_alive()
    messages = [pickle.loads(m) for m in got]
    ids = [r.id for kind, _, batch in messages if kind == "records" for r in batch]
    assert sorted(ids) == sorted(f"r{k}" for k in range(600)) and len(set(ids)) == 600
    assert messages[-1][2].num_dispatched == 600
    child.drain(got.append, 0.0)  # after its "done", nothing more
    assert len(got) == len(messages)


def read_clocks(out) -> None:
    out.put((time.time_ns(), time.perf_counter()))


def test_a_spawned_child_reads_the_same_wall_and_perf_clocks():
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=read_clocks, args=(out,))
    before = (time.time_ns(), time.perf_counter())
    child.start()
    got = out.get(timeout=60)
    after = (time.time_ns(), time.perf_counter())
    child.join(timeout=30)
    assert before[0] <= got[0] <= after[0]  # CLOCK_REALTIME
    assert before[1] <= got[1] <= after[1]  # perf_counter: CLOCK_MONOTONIC, host-wide


def test_an_interrupt_told_to_the_child_ends_its_load_early():
    actor = Actor(spec(2000, 200.0))  # 10 s of load
    actor.thread.start()
    actor.wait_for_start()
    time.sleep(0.6)
    actor.child.tell(("interrupt", None))
    actor.thread.join(timeout=30)
    assert not actor.thread.is_alive()
    got = actor.messages()
    result = got[-1][2]
    assert got[-1][0] == "done" and result.interrupted
    assert 50 <= result.num_dispatched < 1000, result.num_dispatched


def test_a_child_that_dies_is_posted_as_failed_with_its_exit_code():
    actor = Actor(spec(2000, 200.0))
    actor.thread.start()
    actor.wait_for_start()
    os.kill(actor.child.pid, signal.SIGKILL)
    actor.thread.join(timeout=30)
    assert not actor.thread.is_alive()
    kind, index, detail = actor.messages()[-1]
    assert (kind, index) == ("failed", 1)
    assert detail == f"load worker process exited with code {-signal.SIGKILL}"


# An "actor" process: starts a ChildLoad with 10 s of load, prints the child's pid, waits.
ACTOR = """
import sys, threading, time
sys.path.insert(0, sys.argv[1])
from tests.test_ray_child import Actor, spec
actor = Actor(spec(2000, 200.0))
actor.thread.start()
actor.wait_for_start()
print(actor.child.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_actor_takes_its_child_with_it():
    actor = subprocess.Popen([sys.executable, "-c", ACTOR, str(ROOT)], stdout=subprocess.PIPE,
                             text=True, cwd=ROOT)
    try:
        child = int(actor.stdout.readline())
        assert alive(child)
        actor.kill()  # SIGKILL: no atexit, no daemon-process cleanup; only the kernel's signal
        actor.wait(timeout=30)
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child)
    finally:
        actor.kill()


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("variable, choose, default, other, bad, valid", [
    ("LLMPERF_RAY_LOAD", "load_in", "child", "actor", "thread", "child, actor"),
    ("LLMPERF_RAY_RELAY", "relay", "stream", "take", "actor", "stream, take, thread"),
], ids=["where-the-load-runs", "who-reads-the-childs-messages"])
def test_a_ray_setting_has_its_default_and_a_bad_value_names_the_valid_ones(
        monkeypatch, variable, choose, default, other, bad, valid):
    from llmperf.measure.backends import ray_settings

    read = getattr(ray_settings, choose)
    monkeypatch.delenv(variable, raising=False)
    assert read() == default
    monkeypatch.setenv(variable, other)
    assert read() == other
    monkeypatch.setenv(variable, bad)
    with pytest.raises(UsageError, match=f"{variable}='{bad}': valid: {valid}"):
        read()


# A coordinator on a Ray it starts itself (ray_address=local): 2 workers, 20 s of load; once
# the measured phase starts it prints the pids of the actors' children, then runs on.
DRIVER = """
import sys
sys.path.insert(0, sys.argv[1])
import ray
from engines.base import Request
from engines.synthetic_options import SyntheticEngineConfig
from llmperf.measure.backends.plan import LoadPlan
from llmperf.measure.backends.ray_pool import RayPool

def started(self, start_perf_s):
    print(*ray.get([a.child_pid.remote() for a in self._actors]), flush=True)

RayPool._measure_started = started
pool = RayPool(2, SyntheticEngineConfig(tpot_s=0.001), "syn", on_record=lambda r: None,
               address="local")
requests = [Request(id=f"r{k}", max_tokens=2, prompt_token_ids=[1] * 8, arrival_s=k / 100)
            for k in range(2000)]
pool.run(LoadPlan(warmup=[], requests=requests))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_ctrl_c_at_the_coordinator_leaves_no_load_process_behind():
    pytest.importorskip("ray")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(ROOT)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = driver.stdout.readline()
        children = [int(pid) for pid in line.split()]
        assert len(children) == 2 and all(alive(pid) for pid in children), (line, driver.poll())
        driver.send_signal(signal.SIGINT)
        driver.communicate(timeout=60)  # the coordinator ends, its actors killed
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in children if alive(pid)]
    finally:
        driver.kill()
