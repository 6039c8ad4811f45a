"""The garbage collector kept out of the measured phase (llmperf/measure/gc_quiet.py): what is
alive at the start and the records a coordinator or a load generator's loop holds are
frozen, so no collection during the load scans them, and all of it is back under the
collector after the load."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

import pytest

from engines.base import Request
from engines.synthetic import SyntheticEngine
from engines.synthetic_options import SyntheticEngineConfig
from llmperf.measure import gc_quiet
from llmperf.measure.backends.plan import LoadPlan
from llmperf.measure.loadgen import LoadGenerator
from llmperf.measure.workers import WorkerPool


class Held:
    """An object the collector tracks (a class instance)."""


def in_a_generation(obj) -> bool:
    """Whether the collector would scan `obj`: frozen objects are in no generation."""
    return any(o is obj for g in range(3) for o in gc.get_objects(generation=g))


@pytest.fixture(autouse=True)
def unfrozen():
    yield
    gc.unfreeze()


def test_settle_freezes_what_is_alive_and_release_gives_it_back():
    before = Held()
    assert in_a_generation(before)
    gc_quiet.settle()
    assert not in_a_generation(before) and gc.get_freeze_count() > 0
    after = Held()
    assert in_a_generation(after)  # made since: scanned as usual
    gc_quiet.release()
    assert gc.get_freeze_count() == 0 and in_a_generation(before)


def test_the_refreezer_freezes_what_came_since_at_most_every_period():
    refreeze = gc_quiet.Refreezer(every_s=0.2)
    refreeze()  # the first call freezes
    first = Held()
    refreeze()  # within the period: nothing
    assert in_a_generation(first)
    time.sleep(0.25)
    refreeze()
    assert not in_a_generation(first)


def test_a_refreeze_collects_the_young_garbage_first():
    """A cycle that became garbage since the last collection is collected, not frozen to the
    end of the run; what is alive is frozen."""
    cycle, alive = Held(), Held()
    cycle.me = cycle
    gone = weakref.ref(cycle)
    del cycle
    gc_quiet.refreeze()
    assert gone() is None
    assert not in_a_generation(alive)


def test_a_loops_records_are_frozen_while_it_sends():
    """One load generator's loop sends 400 requests over 2 s and keeps every record: those
    held more than the refreeze period are out of the collector's generations while it
    still sends, and back in them after (a full collection there took 0.37 s at 40 s of
    4,000 req/s: every send behind it that late)."""
    seen: list[tuple[float, object]] = []
    scanned_later: list[bool] = []

    def on_record(record) -> None:
        now = time.perf_counter()
        seen.append((now, record))
        if record.id == "r380":
            scanned_later.extend(in_a_generation(r) for at, r in seen
                                 if at < now - 1.5 * gc_quiet.REFREEZE_S)

    requests = [Request(id=f"r{k}", max_tokens=2, prompt_token_ids=[1] * 8, arrival_s=k / 200)
                for k in range(400)]
    asyncio.run(LoadGenerator(SyntheticEngine(tpot_s=0.001), on_record).run([], requests))
    assert len(seen) == 400
    assert len(scanned_later) > 150
    assert not any(scanned_later)
    assert gc.get_freeze_count() == 0
    assert in_a_generation(seen[0][1])


def test_a_coordinators_records_and_its_start_up_objects_are_frozen_during_the_load():
    """Two worker processes send 400 requests over 2 s: in the coordinator, every object
    alive before the start and every record held more than the refreeze period are out of
    the collector's generations while the load runs, and back in them after."""
    start_up = Held()
    seen: list[tuple[float, object, bool]] = []  # (received at, record, start_up scanned)
    scanned_later: list[bool] = []

    def on_record(record) -> None:
        now = time.perf_counter()
        seen.append((now, record, False))
        if record.id == "r380":  # late in the load: what is frozen by now
            scanned_later.append(in_a_generation(start_up))
            scanned_later.extend(in_a_generation(r) for at, r, _ in seen
                                 if at < now - 1.5 * gc_quiet.REFREEZE_S)

    requests = [Request(id=f"r{k}", max_tokens=2, prompt_token_ids=[1] * 8, arrival_s=k / 200)
                for k in range(400)]
    pool = WorkerPool(2, SyntheticEngineConfig(tpot_s=0.001), "syn", on_record)
    pool.run(LoadPlan(warmup=[], requests=requests))
    assert len(seen) == 400
    assert len(scanned_later) > 150  # start_up and the records held long enough
    assert not any(scanned_later)
    assert gc.get_freeze_count() == 0  # released after the load
    assert in_a_generation(start_up) and in_a_generation(seen[0][1])


def test_a_collection_after_the_load_is_not_counted_as_the_loads(monkeypatch):
    """The loop's garbage-collection figures close before the release: a full collection of
    everything the process holds, right after it, is not a pause of the load."""
    heap = [[k] for k in range(300_000)]
    took: list[float] = []

    def release_and_collect() -> None:
        gc.unfreeze()
        started = time.perf_counter()
        gc.collect()
        took.append(time.perf_counter() - started)

    monkeypatch.setattr(gc_quiet, "release", release_and_collect)
    requests = [Request(id=f"r{k}", max_tokens=2, prompt_token_ids=[1] * 8, arrival_s=k / 200)
                for k in range(40)]
    result = asyncio.run(LoadGenerator(SyntheticEngine(tpot_s=0.001), lambda r: None).run([], requests))
    [cpu] = result.client_cpu
    assert took and cpu.gc_max_pause_s < took[0] / 2
    del heap
