"""Static batching with a deadline: a partial batch launches once its oldest request waited `max_wait_ms`."""

from __future__ import annotations

from engines.reference.scheduler.static import StaticScheduler


class DynamicScheduler(StaticScheduler):
    name = "dynamic"

    def ready_to_launch(self, now_s: float, flushed_order: int) -> bool:
        if super().ready_to_launch(now_s, flushed_order):
            return True
        return bool(self.waiting) and now_s >= self._deadline_s()

    def next_wakeup_s(self, now_s: float) -> float | None:
        if self.batch or not self.waiting:
            return None
        return self._deadline_s()

    def _deadline_s(self) -> float:
        return self.waiting[0].submitted_s + self.opts.max_wait_ms / 1000.0
