"""The live progress bar: counts every request, redraws at most 10 times a second."""

from __future__ import annotations

import io

from rich.console import Console

from llmperf.measure.records import RequestRecord
from llmperf.run import console as console_mod
from llmperf.run.console import LoadProgress


def record(i: int, tokens: int, error: str | None = None) -> RequestRecord:
    return RequestRecord(id=str(i), arrival_s=0.0, dispatch_s=0.0, first_token_s=0.1, end_s=0.2,
                         token_times_s=[0.1] * tokens, output_tokens=tokens,
                         finish_reason="error" if error else "length", error=error)


def test_a_burst_of_requests_takes_one_update_and_every_count_lands_at_exit(monkeypatch):
    terminal = Console(file=io.StringIO(), force_terminal=True, width=120)
    progress = LoadProgress(total=500, console=terminal)
    calls = []
    real_update = progress._progress.update
    monkeypatch.setattr(progress._progress, "update",
                        lambda *a, **k: (calls.append(k), real_update(*a, **k)))
    with progress:
        for i in range(500):  # far faster than 10 a second: one redraw's worth of updates
            progress.update(record(i, 3, error="boom" if i % 100 == 0 else None))
        assert len(calls) <= 2
    task = progress._progress.tasks[0]
    assert task.completed == 500  # the last counts, flushed on exit
    assert task.fields["failed"] == 5
    assert sum(k["advance"] for k in calls) == 500


def test_off_a_terminal_the_bar_is_not_touched(monkeypatch):
    progress = LoadProgress(total=10, console=Console(file=io.StringIO(), force_terminal=False))
    monkeypatch.setattr(progress._progress, "update", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    with progress:
        for i in range(10):
            progress.update(record(i, 2))
    assert progress._tokens == 20 and progress._failed == 0


def test_updates_spaced_past_the_interval_each_redraw(monkeypatch):
    clock = iter(x * console_mod.UPDATE_INTERVAL_S * 1.5 for x in range(1, 100))
    monkeypatch.setattr(console_mod.time, "perf_counter", lambda: next(clock))
    progress = LoadProgress(total=4, console=Console(file=io.StringIO(), force_terminal=True))
    with progress:
        for i in range(4):
            progress.update(record(i, 1))
        assert progress._progress.tasks[0].completed == 4
