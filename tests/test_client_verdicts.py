"""The client's verdict names the true cause: each cause produced for real (a CPU hog inside
the client, busy processes on the client's core, a pool of 2 connections for 8 requests in
flight, a client library that collects its garbage), and a good run with one stall kept
valid."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import multiprocessing as mp
import os
import time

import pytest
from rich.console import Console

from engines.base import Request
from engines.synthetic import SyntheticEngine
from llmperf.measure.client_cpu import GcPauses, ProcessCpu, client_summary
from llmperf.measure.loadgen import LoadGenerator
from llmperf.measure.metrics import compute_metrics
from llmperf.measure.records import RequestRecord
from llmperf.measure.validity import client_kept_up
from llmperf.run.config import SloConfig, ValidityConfig
from llmperf.run.runner import run_benchmark
from llmperf.serve.app import build_app
from llmperf.serve.server import ServerThread, build_server


class CpuHogEngine(SyntheticEngine):
    """Spends `hog_s` of pure CPU on the caller's loop per request: a client whose own work
    per request (a slow tokenizer, heavy parsing) is more than the load leaves it."""

    hog_s = 0.012

    async def stream(self, request):
        until = time.perf_counter() + self.hog_s
        while time.perf_counter() < until:
            pass
        async for event in super().stream(request):
            yield event


class CollectingEngine(SyntheticEngine):
    """Every 10th request builds a scratch structure of 200,000 lists and collects in full, as
    a client library calling gc.collect() does: each collection a stop of the loop as long
    as it takes to scan what the loop has not frozen."""

    served = 0

    async def stream(self, request):
        self.served += 1
        if self.served % 10 == 0:
            scratch = [[k] for k in range(200_000)]
            gc.collect()
            del scratch
        async for event in super().stream(request):
            yield event


class BurstEngine(SyntheticEngine):
    """Every 10th request holds the loop 25 ms in pure Python (a slow parse, a tokenizer's
    first call), allocating nothing: the loop stands still on its own core."""

    served = 0

    async def stream(self, request):
        self.served += 1
        if self.served % 10 == 0:
            until = time.perf_counter() + 0.025
            while time.perf_counter() < until:
                pass
        async for event in super().stream(request):
            yield event


def drive(engine, requests):
    records = []
    engine.start()
    try:
        result = asyncio.run(LoadGenerator(engine, records.append).run([], requests))
    finally:
        engine.stop()
    return records, result


def verdict(records, result, criteria: ValidityConfig, **summary):
    s = {**compute_metrics(records, SloConfig()), **summary,
         **client_summary(result.client_cpu, records, result.loop_lag_s, criteria.max_client_delay_s)}
    return s, client_kept_up(s, criteria)


def paced(n: int, gap_s: float) -> list[Request]:
    return [Request(id=str(i), max_tokens=2, prompt_token_ids=[1, 2], arrival_s=gap_s * i)
            for i in range(n)]


def test_a_cpu_hog_inside_the_client_is_named_client_cpu_bound_and_fails_the_run():
    """12 ms of CPU per request at 100 req/s: the loop is on its core the whole window."""
    records, result = drive(CpuHogEngine(tpot_s=0.001), paced(120, 0.01))
    s, check = verdict(records, result, ValidityConfig())
    assert s["client_cpu_share"] >= ValidityConfig().max_client_cpu_share
    assert s["client_late_fraction"] > 0.5
    assert (check.ok, check.blocking) == (False, True)
    assert check.detail.startswith("client CPU-bound: ")
    assert "scenario.client.workers" in check.detail


def test_a_collecting_client_library_is_named_garbage_collection_not_the_host():
    """Its collections stop the loop tens of ms at a time while the loop is otherwise idle:
    the verdict names the collector, with the longest pause, never host contention."""
    records, result = drive(CollectingEngine(tpot_s=0.001), paced(100, 0.02))
    criteria = ValidityConfig(max_client_delay_s=0.005)
    s, check = verdict(records, result, criteria)
    assert s["client_gc_max_pause_s"] > criteria.max_client_delay_s
    assert 0 < s["client_gc_pause_share"] < 1
    assert s["client_cpu_share"] < criteria.max_client_cpu_share
    assert s["client_late_fraction"] > criteria.max_late_fraction
    moved = s["client_delay_s"]["mean"] > criteria.max_delay_share_of_ttft * s["ttft_s"]["mean"]
    assert (check.ok, check.blocking) == (False, moved)
    assert check.detail.startswith("client garbage collection: a collection stopped its loop for ")
    assert f"{s['client_gc_max_pause_s'] * 1e3:.1f} ms" in check.detail


def test_a_loop_that_stalls_on_its_own_core_is_named_its_own_stalls_not_the_host():
    """25 ms turns of the loop at 10 req/s of 100: it stands still a quarter of the window and
    barely waits for a core; its CPU is far from a core and its collections are short. The
    verdict says the stalls are its own, never host contention."""
    records, result = drive(BurstEngine(tpot_s=0.001), paced(100, 0.01))
    criteria = ValidityConfig(max_client_delay_s=0.005)
    s, check = verdict(records, result, criteria)
    assert s["client_cpu_share"] < criteria.max_client_cpu_share
    assert s["client_gc_max_pause_s"] < criteria.max_client_delay_s
    assert s["client_late_fraction"] > criteria.max_late_fraction
    # ten stalls, each seen from the next request due 10 ms into it: 15 ms late, in ~1 s
    assert s["client_stall_share"] > 10 * 0.012 / 1.1
    assert s["client_runqueue_wait_total_share"] < s["client_stall_share"] / 2
    assert check.detail.startswith("client stalls of its own: "), check.detail
    assert not check.ok


def test_gc_pauses_time_each_collection_while_installed():
    held = [[k] for k in range(200_000)]
    pauses = GcPauses()
    pauses.install()
    try:
        started = time.perf_counter()
        gc.collect()
        took = time.perf_counter() - started
    finally:
        pauses.remove()
    assert 0 < pauses.max_s <= took and pauses.max_s <= pauses.total_s
    before = pauses.total_s
    gc.collect()  # removed: not counted
    assert pauses.total_s == before and pauses not in gc.callbacks
    del held


def _spin(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    while True:
        pass


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_busy_processes_on_the_clients_core_are_named_host_contention_not_the_client():
    """Five processes spin on the core the client's thread is pinned to: the client waits to
    run while its own CPU stays low. The verdict says host contention, never client CPU.
    (With three, 9-18% of requests were late past 2 ms, and once in a full suite exactly the
    5% the check allows; with five, 26-27%.)"""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    ctx = mp.get_context("spawn")
    hogs = [ctx.Process(target=_spin, args=(cpu,), daemon=True) for _ in range(5)]
    for hog in hogs:
        hog.start()
    try:
        time.sleep(0.5)  # let them start spinning
        os.sched_setaffinity(0, {cpu})  # this thread: the load generator's loop
        records, result = drive(SyntheticEngine(), paced(300, 0.005))
    finally:
        os.sched_setaffinity(0, before)
        for hog in hogs:
            hog.kill()
            hog.join()
    criteria = ValidityConfig(max_client_delay_s=0.002)
    s, check = verdict(records, result, criteria)
    # runnable but waiting for the core about as long as it ran (unloaded: a few % of it)
    assert s["client_runqueue_wait_share"] > 0.5 * s["client_cpu_share"]
    assert s["client_cpu_share"] < criteria.max_client_cpu_share
    assert s["client_late_fraction"] > criteria.max_late_fraction
    assert check.detail.startswith("host CPU contention: ")
    assert "or another process, hold the cores" in check.detail  # an in-process engine
    assert not check.ok  # a warning at least; blocking only where the delay moved the figures
    moved = s["client_delay_s"]["mean"] > criteria.max_delay_share_of_ttft * s["ttft_s"]["mean"]
    assert check.blocking == moved


@pytest.fixture(scope="module")
def synthetic_server():
    server = build_server({"model": "syn", "tpot_s": 0.01}, engine_name="synthetic")
    with ServerThread(build_app(server)) as running:
        yield running.base_url


def test_a_pool_of_2_for_8_in_flight_is_named_connection_pool_exhausted(synthetic_server, tmp_path):
    from tests.test_run_figures import compose_config

    config = compose_config([
        "engine=openai", f"engine.base_url={synthetic_server}", "engine.model=syn",
        "engine.max_connections=2", "engine.metrics_url=off", "scenario=closed",
        "scenario.arrival.concurrency=8", "scenario.num_requests=24", "scenario.warmup_requests=0",
        "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=8",
        "scenario.output_tokens.dist=fixed", "scenario.output_tokens.value=6",
        "scenario.validity.min_duration_s=0", "scenario.validity.min_completed=1",
        "hardware=h100-sxm", "telemetry.enabled=false", "report.enabled=false",
    ])
    run_benchmark(config, tmp_path, console=Console(file=io.StringIO()))
    s = json.loads((tmp_path / "summary.json").read_text())
    [check] = [c for c in s["validity"] if c["check"] == "client_kept_up"]
    assert s["client_max_in_flight"] == 8 and s["engine"]["max_connections"] == 2
    assert not s["valid"] and not check["ok"] and check["blocking"]
    assert check["detail"].startswith("connection pool exhausted: ")
    assert "raise engine.max_connections to at least 8" in check["detail"]
    assert s["client_cpu_share"] < 0.75  # not the client's CPU


def record(i: int, delay_s: float) -> RequestRecord:
    arrival = 0.5 * i
    return RequestRecord(id=str(i), arrival_s=arrival, dispatch_s=arrival + 0.0002,
                         first_token_s=arrival + 0.03, end_s=arrival + 0.5,
                         token_times_s=[arrival + 0.03, arrival + 0.5], output_tokens=2,
                         written_s=arrival + delay_s, pool_wait_s=0.0001)


def test_one_26_ms_stall_in_48_requests_keeps_a_run_valid():
    """The case that used to read "client saturated: connection-pool wait p99 26 ms": one
    request in 48 sent late while the client's CPU was low is 2% late, under the 5% allowed."""
    records = [record(i, 0.026 if i == 17 else 0.0008) for i in range(48)]
    cpu = [ProcessCpu("loadgen", window_s=24.0, process_cpu_s=0.6, loop_cpu_s=0.4, loop_wait_s=0.05)]
    s = {**compute_metrics(records, SloConfig()),
         **client_summary(cpu, records, [0.001] * 240, 0.01)}
    assert s["client_late_fraction"] == pytest.approx(1 / 48)
    assert s["client_cpu_per_request_s"] == pytest.approx(0.6 / 48)
    assert s["client_cpu_share"] == pytest.approx(0.4 / 24)
    check = client_kept_up(s, ValidityConfig())
    assert check.ok and check.detail.startswith("the client kept up: 2.1% of requests")


def test_a_client_that_kept_up_near_a_whole_core_is_warned():
    records = [record(i, 0.0008) for i in range(48)]
    cpu = [ProcessCpu("loadgen", window_s=24.0, process_cpu_s=23.0, loop_cpu_s=20.0, loop_wait_s=0.0)]
    s = {**compute_metrics(records, SloConfig()), **client_summary(cpu, records, [], 0.01)}
    check = client_kept_up(s, ValidityConfig())
    assert (check.ok, check.blocking) == (False, False)
    assert check.detail.startswith("client near its CPU limit: ")


def test_an_in_process_engine_is_never_told_its_pool_was_exhausted():
    """The reference engine has no connection pool: late wake-ups of its loop (its own torch
    threads share the cores) read as contention, a warning when the figures did not move."""
    records = [record(i, 0.0008) for i in range(32)]
    for r in records:
        r.written_s = None  # no HTTP: the client delay is the dispatch lag
    cpu = [ProcessCpu("loadgen", window_s=2.0, process_cpu_s=1.9, loop_cpu_s=0.2, loop_wait_s=0.3)]
    lags = [0.02] * 4 + [0.001] * 16  # 4 of 20 probes over 10 ms
    s = {**compute_metrics(records, SloConfig()), **client_summary(cpu, records, lags, 0.01),
         "engine": {"name": "reference"}}
    check = client_kept_up(s, ValidityConfig())
    assert check.detail.startswith("host CPU contention: ")
    assert "the engine's own threads in this process" in check.detail
    assert (check.ok, check.blocking) == (False, False)
    # two late probes in a short run are no trend: the client kept up
    s2 = {**s, **client_summary(cpu, records, [0.02] * 2 + [0.001] * 18, 0.01)}
    assert client_kept_up(s2, ValidityConfig()).ok
