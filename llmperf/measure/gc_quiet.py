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
- `Refreezer` in such a coordinator, which only receives records: everything it holds is a
  record kept to the end, so what came since is frozen again every REFREEZE_S and no
  collection scans the records twice. It is not used on a loop that sends requests: there a
  request in flight at a freeze, were it cyclic garbage later, would stay until the end.
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
            gc.freeze()
            self._next = now + self.every_s


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
