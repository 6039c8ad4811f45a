"""The load generator's clock: the run's origin, engines' receipt stamps on it, and the wait
before each send (sleep, then spin), with the spin's idle share kept for the client's CPU
verdicts (llmperf/measure/client_cpu.py).

Times are seconds from the run's origin (`_origin_s`, a `time.perf_counter()` reading).
"""

from __future__ import annotations

import asyncio
import time

from engines.base import TokenEvent

# A spin turn (`sleep(0)` to the next clock read) under this ran nothing else: idle spin, CPU
# any work would have had. Bare turns: median 1.2 us (uvloop), 2.4 (asyncio), 99.9% under 6,
# 16 us; turns that ran work (a send, an answer, a chunk read) mostly 15-100 us. Work under it
# counts idle, a bare turn stretched past it busy: each errs by a few us.
BARE_TURN_S = 10e-6


class LoadClock:
    """The clock half of LoadGenerator (llmperf/measure/loadgen.py)."""

    def __init__(self, spin_s: float) -> None:
        # asyncio.sleep wakes up to ~1 ms late (epoll's millisecond timeout); the last
        # stretch before a send is spent yielding to the loop instead, to cut dispatch lag.
        self.spin_s = spin_s
        self._origin_s = 0.0
        self._idle_spin_s = self._spun_s = 0.0  # since the measured phase began; last spin stamp

    def _now(self) -> float:
        return time.perf_counter() - self._origin_s

    def _stamp_s(self, perf_counter_s: float | None) -> float | None:
        """An engine's perf_counter() stamp on the records' clock."""
        return None if perf_counter_s is None else perf_counter_s - self._origin_s

    def _receipt_s(self, event: TokenEvent, dispatch_s: float) -> float:
        """When the client received the event: the engine's stamp, else now."""
        now_s = self._now()
        if event.received_s is None:
            return now_s
        received_s = self._stamp_s(event.received_s)
        if not dispatch_s <= received_s <= now_s:
            raise ValueError(
                f"the engine's receipt time is {received_s - now_s:+.6f} s from now and "
                f"{received_s - dispatch_s:+.6f} s from dispatch: not time.perf_counter()"
            )
        return received_s

    async def _sleep_until(self, target_s: float) -> None:
        """Sleep to `spin_s` before `target_s`, then spin, counting the bare turns' time as
        idle spin. The stamp is shared: spinners side by side (sessions) count a turn once."""
        now_s = self._now()
        if target_s - now_s > self.spin_s:
            await asyncio.sleep(target_s - now_s - self.spin_s)
            now_s = self._now()
        self._spun_s = now_s
        while now_s < target_s:
            await asyncio.sleep(0)
            now_s = self._now()
            if now_s - self._spun_s < BARE_TURN_S:
                self._idle_spin_s += now_s - self._spun_s
            self._spun_s = now_s
