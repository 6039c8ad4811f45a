"""Python's cyclic garbage collector, kept out of the measured phase.

A full collection scans every object the process holds. A coordinator with torch, Hydra and
Ray imported and tens of thousands of records held ran full collections of 0.37-0.48 s in
the middle of a 6 s window at 6,200 req/s (gc.callbacks, 2026-12-06). That is a core taken
from the load's loops for half a second, and in a load loop of its own process it would be a
send held as long. Young collections of the records coming in added 2-9 ms more each.

- `settle()` before the load: one collection, then every object alive (the imports, the
  engine) frozen (gc.freeze), so later collections never scan them. The load generator does
  it in every process that sends (loadgen.py), and the coordinator of worker processes
  before it sets their start (workers.py, backends/ray_pool.py).
- `refreeze()` during the load, every REFREEZE_S in a coordinator (`Refreezer`, at each turn
  of its loop) and every 0.1 s on the load generator's loop (loadgen.py): what came since (records kept
  to the end, above all) is frozen too, so no collection scans the records twice. The
  youngest generation is collected first, so a cycle that just became garbage is freed,
  not frozen. An object frozen while in use and freed later goes as usual by its reference
  count; only one in a cycle would wait for `release()`. None did: a single loop at 800
  req/s over HTTP (aiohttp) and at 4,000 on the synthetic engine, 40 s each, left no cyclic
  garbage frozen (the collection at release found 0 objects) and the same peak memory.
  Without it, that loop's full collections grew with the records held, to 0.37 s at 4,000
  req/s (dispatch lag p99 268 ms against 0.72 with it); at 800 over HTTP to 190 ms stalls,
  which the saturation detector took for a saturated server.
- `release()` after the load: the frozen objects are scanned again from then on, and any
  garbage among them is collected.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator

REFREEZE_S = 0.5


def settle() -> float:
    """Collects once and freezes every object alive; returns the seconds it took."""
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    return time.perf_counter() - start


class Refreezer:
    """Called at each turn of a coordinator's loop: freezes what came since, at most every
    `every_s`."""

    def __init__(self, every_s: float = REFREEZE_S) -> None:
        self.every_s = every_s
        self._next = 0.0

    def __call__(self) -> None:
        now = time.perf_counter()
        if now >= self._next:
            refreeze()
            self._next = now + self.every_s


def refreeze() -> None:
    """What came since the last freeze frozen too, once its young garbage is collected (a
    collection of the youngest generation: the few hundred objects allocated since the last)."""
    gc.collect(0)
    gc.freeze()


def release() -> None:
    """Everything frozen back under the collector (its oldest generation)."""
    gc.unfreeze()


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """`release()` on the way out, however the load ended."""
    try:
        yield
    finally:
        release()
