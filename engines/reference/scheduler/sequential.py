"""One request at a time, start to finish: batch size 1, the baseline of baselines."""

from __future__ import annotations

from engines.reference.scheduler.base import Scheduler, SchedulerOutput


class SequentialScheduler(Scheduler):
    name = "sequential"

    def schedule(self, now_s: float, flushed_order: int) -> SchedulerOutput | None:
        out = SchedulerOutput([])
        if not self.running and self.waiting:
            seq = self.waiting[0]
            if self.try_admit(seq, seq.num_uncomputed_tokens):
                out.admitted.append(seq)
        self.schedule_whole(self.running, out)
        return out if out.scheduled else None
