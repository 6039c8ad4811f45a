"""scenario.client.workers: the load split over worker processes, each with its own event loop
and a round-robin share of the schedule, merged into one run on one clock."""

from __future__ import annotations

import io
import itertools
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console

from engines.base import Request
from engines.reference.tokenizer import ByteTokenizer
from engines.synthetic_options import SyntheticEngineConfig
from llmperf.measure.backends.plan import LoadPlan
from llmperf.measure.workers import WorkerPool, perf_origin, split, split_concurrency
from llmperf.run.runner import run_benchmark
from llmperf.serve.app import build_app
from llmperf.serve.server import ServerThread, build_server
from llmperf.workload.requests import Workload


def test_round_robin_shares_add_up_to_the_one_process_schedule():
    schedule = list(range(11))
    shares = split(schedule, 3)
    assert shares == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8]]
    assert sorted(itertools.chain(*shares)) == schedule
    assert split_concurrency(8, 3) == [3, 3, 2] and split_concurrency(4, 4) == [1, 1, 1, 1]


def test_an_absolute_origin_lands_on_this_processes_perf_counter_within_a_millisecond():
    origin_ns = time.time_ns() - 2_500_000_000  # 2.5 s ago
    expected = time.perf_counter() - 2.5
    assert perf_origin(origin_ns) == pytest.approx(expected, abs=1e-3)


@pytest.fixture(scope="module")
def synthetic():
    server = build_server({"model": "syn", "tpot_s": 0.002}, engine_name="synthetic")
    with ServerThread(build_app(server)) as running:
        yield running.base_url


def run(tmp_path, base_url, workers: int, *overrides: str) -> tuple[dict, list[dict]]:
    from tests.test_run_figures import compose_config

    config = compose_config([
        "engine=openai", f"engine.base_url={base_url}", "engine.model=syn",
        "scenario.arrival.process=poisson", "scenario.arrival.rate_rps=40",
        "scenario.num_requests=40", "scenario.warmup_requests=2",
        "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=16",
        "scenario.output_tokens.dist=fixed", "scenario.output_tokens.value=4",
        f"scenario.client.workers={workers}", "hardware=h100-sxm", "telemetry.enabled=false",
        "report.enabled=false", "engine.metrics_url=off", *overrides,
    ])
    run_benchmark(config, tmp_path, console=Console(file=io.StringIO()))
    summary = json.loads((tmp_path / "summary.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    return summary, records, config


def test_two_workers_send_the_one_process_schedule_on_one_clock(synthetic, tmp_path):
    summary, records, config = run(tmp_path, synthetic, 2)
    measured = [r for r in records if not r["warmup"]]
    assert summary["num_completed"] == 40 and summary["num_warmup_completed"] == 2
    # The schedule the one-process run would send: the same ids at the same offsets.
    expected = {r.id: r.arrival_s for r in Workload(config.scenario, ByteTokenizer(259)).requests()}
    start = summary["measure_start_s"]
    assert {r["id"]: r["arrival_s"] - start for r in measured} == pytest.approx(expected, abs=1e-9)
    # Round robin in arrival order: each worker sent every other request.
    by_arrival = sorted(measured, key=lambda r: r["arrival_s"])
    assert [r["worker"] for r in by_arrival] == [k % 2 for k in range(40)]
    # One clock: every request went out at its intended arrival, give or take the loop's lag,
    # and its tokens came after it left.
    for r in measured:
        assert 0.0 <= r["dispatch_s"] - r["arrival_s"] < 0.05
        assert r["dispatch_s"] < r["first_token_s"] <= r["end_s"]
    assert summary["window_start_s"] == pytest.approx(start + min(expected.values()))
    assert len(summary["event_loop_lag_s"]) == 8  # both workers' loops probed, one distribution


def test_a_closed_loop_splits_its_concurrency_over_the_workers(synthetic, tmp_path):
    summary, records, _ = run(tmp_path, synthetic, 2, "scenario.arrival.process=closed",
                              "scenario.arrival.concurrency=3", "scenario.num_requests=12")
    measured = [r for r in records if not r["warmup"]]
    assert summary["num_completed"] == 12
    assert sorted(r["worker"] for r in measured) == [0] * 6 + [1] * 6
    events = sorted([(r["dispatch_s"], 1) for r in measured] + [(r["end_s"], -1) for r in measured])
    in_flight = list(itertools.accumulate(d for _, d in events))
    assert max(in_flight) <= 3  # 2 + 1 users


def test_two_workers_each_drive_a_copy_of_an_unlimited_synthetic_engine(tmp_path):
    """A synthetic engine without a concurrency limit has no state between requests, so each
    worker builds its own copy and the run is the one-process schedule, served alike."""
    from tests.test_run_figures import compose_config

    config = compose_config([
        "engine=synthetic", "engine.tpot_s=0.002", "engine.ttft_s=0.005",
        "scenario.arrival.process=constant", "scenario.arrival.rate_rps=50",
        "scenario.num_requests=20", "scenario.warmup_requests=2",
        "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=8",
        "scenario.output_tokens.dist=fixed", "scenario.output_tokens.value=5",
        "scenario.client.workers=2", "hardware=h100-sxm", "telemetry.enabled=false",
        "report.enabled=false",
    ])
    run_benchmark(config, tmp_path, console=Console(file=io.StringIO()))
    summary = json.loads((tmp_path / "summary.json").read_text())
    measured = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in measured if not r["warmup"]]
    assert summary["num_completed"] == 20
    assert sorted(r["worker"] for r in measured) == [0] * 10 + [1] * 10
    for r in measured:  # each copy answers on its own timeline: 5 ms, then 4 tokens 2 ms apart
        assert 0.9 * 0.005 <= r["first_token_s"] - r["dispatch_s"] < 0.05
        assert 0.9 * (0.005 + 4 * 0.002) <= r["end_s"] - r["dispatch_s"] < 0.1


# -- the coordinator's end of the workers -------------------------------------------------


@dataclass
class Unbuildable:
    """Engine options no registry knows: the worker fails as it starts."""

    name: str = "no-such-engine"


def schedule(n: int, rate_rps: float) -> list[Request]:
    return [Request(id=f"r{k}", max_tokens=2, prompt_token_ids=[1] * 8, arrival_s=k / rate_rps)
            for k in range(n)]


def test_a_worker_that_fails_as_it_starts_ends_the_run_with_its_traceback():
    pool = WorkerPool(2, Unbuildable(), "syn", lambda record: None)
    with pytest.raises(RuntimeError, match=r"(?s)load worker \d failed:\n.*Traceback.*no-such-engine"):
        pool.run(LoadPlan(warmup=[], requests=schedule(20, 100.0)))


def test_a_worker_killed_mid_run_ends_it_at_once_naming_the_worker():
    """Its connection ends without a "done": the run stops within a read's wait, not at the
    end of the schedule (20 s here), and names the worker and its exit."""
    killed: list[int] = []

    def on_record(record) -> None:
        if not killed:
            [worker] = [p for p in mp.active_children() if p.name == "llmperf-worker-1"]
            os.kill(worker.pid, signal.SIGKILL)
            killed.append(worker.pid)

    pool = WorkerPool(2, SyntheticEngineConfig(tpot_s=0.001), "syn", on_record)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=f"load worker llmperf-worker-1 exited with code {-signal.SIGKILL}"):
        pool.run(LoadPlan(warmup=[], requests=schedule(4000, 200.0)))
    assert killed and time.monotonic() - started < 10.0
    assert not mp.active_children()  # the other worker stopped and joined


COORDINATOR = """
import os, sys
import multiprocessing as mp
from engines.base import Request
from engines.synthetic_options import SyntheticEngineConfig
from llmperf.measure.backends.plan import LoadPlan
from llmperf.measure.workers import WorkerPool

def started():
    print(" ".join(str(p.pid) for p in mp.active_children()), flush=True)

if __name__ == "__main__":
    requests = [Request(id=f"r{k}", max_tokens=2, prompt_token_ids=[1] * 8, arrival_s=k / 50)
                for k in range(3000)]
    WorkerPool(2, SyntheticEngineConfig(tpot_s=0.001), "syn", lambda r: None,
               on_measure_start=started).run(LoadPlan(warmup=[], requests=requests))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_workers_die_with_a_coordinator_killed_outright(tmp_path):
    """SIGKILL leaves the coordinator no atexit and no daemon-process cleanup: the workers end
    by the kernel's signal on their parent's death, not by the 60 s of schedule left."""
    script = tmp_path / "coordinator.py"
    script.write_text(COORDINATOR)
    coordinator = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                                   text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        workers = [int(pid) for pid in coordinator.stdout.readline().split()]
        assert len(workers) == 2 and all(alive(pid) for pid in workers)
        coordinator.kill()
        coordinator.wait(timeout=10)
        deadline = time.monotonic() + 10.0
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(pid) for pid in workers)
    finally:
        coordinator.kill()


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (reaped by init once its parent is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
