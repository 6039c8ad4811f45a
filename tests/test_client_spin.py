"""The load generator's spin before each send is idle CPU, not work: at requests under 1 ms
apart the loop spins nearly all the time, and its busy share (`client_cpu_share`) must not
read as a client at its limit. Work on the loop, whether it lands between spin turns or
stops the spinning altogether, still counts in full."""

from __future__ import annotations

import asyncio
import time

import pytest

from engines.synthetic import SyntheticEngine
from llmperf.measure.client_cpu import ProcessCpu, client_summary
from llmperf.measure.event_loop import run
from llmperf.measure.loadgen import LoadGenerator
from llmperf.measure.validity import client_kept_up
from llmperf.run.config import ValidityConfig
from tests.test_client_verdicts import paced, verdict

LIMIT_VERDICTS = ("client CPU-bound", "client near its CPU limit")


class PieceworkEngine(SyntheticEngine):
    """Burns `piece_s` of CPU on the caller's loop before each token, yielding between tokens,
    so the work lands in the turns the load generator spins through; `burned_s` is that CPU
    as the loop's own thread clock counted it."""

    def __init__(self, piece_s: float) -> None:
        super().__init__()
        self.piece_s, self.burned_s = piece_s, 0.0

    async def stream(self, request):
        async for event in super().stream(request):
            start, until = time.thread_time(), time.perf_counter() + self.piece_s
            while time.perf_counter() < until:
                pass
            self.burned_s += time.thread_time() - start
            yield event
            await asyncio.sleep(0)


def drive(engine, requests, event_loop: str = "asyncio", spin_s: float = 0.001):
    records = []
    engine.start()
    try:
        result = run(LoadGenerator(engine, records.append, spin_s=spin_s).run([], requests),
                     event_loop)
    finally:
        engine.stop()
    return records, result


def had_its_core(*results) -> None:
    """A loop the host held off its core half the window neither spun nor worked on time: what
    it read then says nothing of the estimate, and the test says so instead of measuring."""
    for result in results:
        [cpu] = result.client_cpu
        if (cpu.loop_wait_s or 0.0) > 0.5 * cpu.window_s:
            pytest.skip(f"this machine was too loaded: the loop waited for a core "
                        f"{cpu.loop_wait_s / cpu.window_s:.0%} of the window")


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_a_client_spinning_at_2000_req_s_reads_its_spin_apart_from_its_work(event_loop):
    """2000 req/s against an engine that answers at once: the loop spins between sends most of
    the window, and the verdict must not call that the client's limit."""
    records, result = drive(SyntheticEngine(), paced(3000, 0.0005), event_loop)
    had_its_core(result)
    [cpu] = result.client_cpu
    raw = cpu.loop_cpu_s / cpu.window_s
    assert cpu.spin_share > 0.5 * raw  # the spin: most of what the loop's thread clock counted
    assert cpu.loop_share < 0.5 * raw
    assert cpu.loop_share + cpu.spin_share == pytest.approx(raw)
    s, check = verdict(records, result, ValidityConfig())
    assert (s["client_cpu_share"], s["client_spin_share"]) == (cpu.loop_share, cpu.spin_share)
    assert not check.detail.startswith(LIMIT_VERDICTS), check.detail
    if s["client_late_fraction"] <= ValidityConfig().max_late_fraction:
        assert check.ok, check.detail


def test_the_busy_cpu_of_a_spinning_loop_is_the_cpu_of_the_same_load_unspun():
    """The reference: the same 2000 req/s with spin_s=0 (asyncio's loop, whose timers never
    wake early: uvloop's may wake up to 1 ms early and spin anyway) sleeps to each send, up to
    1 ms late, and its loop's CPU is the work plus a timer's wake-up per send (fewer where the
    host is busy and one wake-up finds several sends due). The estimate finds next to no spin
    there, and the spinning loop's busy CPU at most about that, and not far below it (0.50 to
    0.71 of it over 6 pairs on an idle 2-core host; nearer 1 on a busy one)."""
    requests = paced(3000, 0.0005)
    _, spun = drive(SyntheticEngine(), requests)
    _, unspun = drive(SyntheticEngine(), requests, spin_s=0.0)
    had_its_core(spun, unspun)
    [cpu], [ref] = spun.client_cpu, unspun.client_cpu
    assert ref.loop_spin_s < 0.05 * cpu.loop_spin_s
    assert 0.3 < (cpu.loop_cpu_s - cpu.loop_spin_s) / ref.loop_cpu_s < 1.25


def test_work_between_spin_turns_counts_as_busy():
    """250 us of CPU before each of 2 tokens at 500 req/s: a quarter of a core of known work,
    run while the loop spins toward the next send. The busy CPU holds all of it."""
    engine = PieceworkEngine(piece_s=0.00025)
    _, result = drive(engine, paced(750, 0.002))
    had_its_core(result)
    [cpu] = result.client_cpu
    assert cpu.loop_spin_s > 0  # the loop did spin, between the pieces
    assert cpu.loop_cpu_s - cpu.loop_spin_s >= engine.burned_s > 0.2 * cpu.window_s


def test_a_loop_busy_past_a_core_between_spins_is_still_client_cpu_bound():
    """The same pieces at 2500 req/s ask 1.25 cores of the loop: it falls behind, spins only
    while it is ahead, and reads busy near a whole core, named client CPU-bound. (A host so
    busy that the loop waited for its core a tenth of the window reads less than a core:
    then the busy share is still all the loop's CPU, and the verdict a late client's.)"""
    engine = PieceworkEngine(piece_s=0.00025)
    records, result = drive(engine, paced(2500, 0.0004))
    s, check = verdict(records, result, ValidityConfig())
    [cpu] = result.client_cpu
    assert cpu.loop_spin_s < 0.1 * cpu.loop_cpu_s
    assert cpu.loop_cpu_s - cpu.loop_spin_s >= engine.burned_s
    assert check.detail.startswith(("client CPU-bound: ", "host CPU contention: ")), check.detail
    if (s["client_runqueue_wait_share"] or 0.0) < 0.1:
        assert s["client_cpu_share"] >= ValidityConfig().max_client_cpu_share
        assert check.detail.startswith("client CPU-bound: "), check.detail


def test_spinners_side_by_side_count_each_turn_once():
    """Eight sessions due at the same instant spin through the same 50 ms of turns. Each
    stretch between one spinner's clock read and the next's counts once: the idle spin is at
    most the wall time and most of the loop's CPU. (Timed per spinner, a turn of eight
    spinners reads over 10 us, as work, and the idle spin as none.)"""

    async def spin_together() -> tuple[float, float, float]:
        gen = LoadGenerator(SyntheticEngine(), lambda record: None, spin_s=0.05)
        gen._origin_s = time.perf_counter()
        cpu0, target_s = time.thread_time(), gen._now() + 0.05
        await asyncio.gather(*(gen._sleep_until(target_s) for _ in range(8)))
        return gen._idle_spin_s, gen._now() - target_s + 0.05, time.thread_time() - cpu0

    idle_s, wall_s, cpu_s = run(spin_together(), "asyncio")
    assert 0.5 * cpu_s < idle_s <= wall_s


def test_a_record_written_before_the_spin_was_measured_loads_with_none():
    old = {"role": "worker 1", "window_s": 4.0, "process_cpu_s": 3.0, "loop_cpu_s": 2.0,
           "loop_wait_s": None}
    cpu = ProcessCpu.from_dict(old)
    assert cpu.loop_spin_s == 0.0 and cpu.loop_share == 0.5 and cpu.spin_share == 0.0
    assert ProcessCpu.from_dict(cpu.to_dict()) == cpu


def test_the_summary_and_the_verdict_give_the_busy_share_and_the_spin_apart():
    """Hand-computed: 18 s of loop CPU over 20 s, 12 s of it idle spin, is 30% busy."""
    spun = ProcessCpu("worker 0", window_s=20.0, process_cpu_s=19.0, loop_cpu_s=18.0,
                      loop_wait_s=0.0, loop_spin_s=12.0)
    other = ProcessCpu("worker 1", window_s=20.0, process_cpu_s=9.0, loop_cpu_s=8.0,
                       loop_wait_s=0.0)
    s = {**client_summary([spun, other], [], [], 0.01), "client_late_fraction": 0.0}
    # the busiest loop is the one busy 40%, not the one on a core 90% of the window
    assert s["client_cpu_share"] == pytest.approx(0.4) and s["client_spin_share"] == 0.0
    s = {**client_summary([spun], [], [], 0.01), "client_late_fraction": 0.0}
    assert (s["client_cpu_share"], s["client_spin_share"]) == (pytest.approx(0.3), 0.6)
    check = client_kept_up(s, ValidityConfig())
    assert check.ok and "busy on a core 30% of the window (its idle spin before sends, 60%, " \
        "left out)" in check.detail


def test_worker_processes_carry_their_spin_to_the_summary(tmp_path):
    """Two worker processes at 1000 req/s each: every worker's spin comes back with its CPU
    (the coordinator, which sends nothing, spins none), and the summary's busy share is the
    busiest worker's CPU less its own spin."""
    import io
    import json

    from rich.console import Console

    from llmperf.run.runner import run_benchmark
    from tests.test_run_figures import compose_config

    config = compose_config([
        "engine=synthetic", "scenario.arrival.process=constant", "scenario.arrival.rate_rps=2000",
        "scenario.num_requests=2000", "scenario.warmup_requests=2",
        "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=8",
        "scenario.output_tokens.dist=fixed", "scenario.output_tokens.value=2",
        "scenario.client.workers=2", "hardware=h100-sxm", "telemetry.enabled=false",
        "report.enabled=false",
    ])
    run_benchmark(config, tmp_path, console=Console(file=io.StringIO()))
    s = json.loads((tmp_path / "summary.json").read_text())
    cpus = {p["role"]: ProcessCpu.from_dict(p) for p in s["client_processes"]}
    assert set(cpus) == {"worker 0", "worker 1", "coordinator"}
    assert cpus["coordinator"].loop_spin_s == 0.0
    workers = [cpus["worker 0"], cpus["worker 1"]]
    if max((w.loop_wait_s or 0.0) / w.window_s for w in workers) > 0.5:
        pytest.skip("this machine was too loaded: a worker waited for a core half the window")
    assert all(0.0 < w.loop_spin_s <= w.loop_cpu_s for w in workers)
    busiest = max(cpus.values(), key=lambda p: (p.loop_cpu_s - p.loop_spin_s) / p.window_s)
    assert s["client_cpu_share"] == pytest.approx(
        (busiest.loop_cpu_s - busiest.loop_spin_s) / busiest.window_s)
    assert s["client_spin_share"] == pytest.approx(busiest.loop_spin_s / busiest.window_s)
