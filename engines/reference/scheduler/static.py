"""Request-level batching: fixed batches, run until their longest member finishes.

A batch launches when `max_batch_size` requests wait (or when no more are
coming). It runs as a padded rectangle, as a batch runner over dense tensors
does: prompts are padded to the longest prompt of the batch, and members that
finish early keep their slot and their KV blocks until the whole batch is done,
still computed each step as padding. That waste is what continuous batching
removes.
"""

from __future__ import annotations

from engines.reference.scheduler.base import ScheduledSeq, Scheduler, SchedulerOutput
from engines.reference.sequence import Sequence


class StaticScheduler(Scheduler):
    name = "static"

    def __init__(self, kv, opts):
        super().__init__(kv, opts)
        self.batch: list[Sequence] = []

    def ready_to_launch(self, now_s: float, flushed_order: int) -> bool:
        if len(self.waiting) >= self.opts.max_batch_size:
            return True
        return any(s.order <= flushed_order for s in self.waiting)

    def schedule(self, now_s: float, flushed_order: int) -> SchedulerOutput | None:
        out = SchedulerOutput([])
        if self.batch and not self._live_members():
            self._release_batch()
        if not self.batch:
            if not self.ready_to_launch(now_s, flushed_order):
                return None
            for seq in list(self.waiting)[: self.opts.max_batch_size]:
                if not self.try_admit(seq, seq.num_uncomputed_tokens):
                    break
                self.batch.append(seq)
                out.admitted.append(seq)
        self.schedule_whole(self._live_members(), out)
        self.batch = [s for s in self.batch if s.is_finished or s in self.running]
        if not out.scheduled:
            return None
        if out.admitted:  # the batch's prefill: pad every prompt to the longest
            longest = max(s.num_new_tokens for s in out.scheduled)
            out.scheduled += [
                ScheduledSeq(s.seq, longest - s.num_new_tokens, True, is_padding=True)
                for s in list(out.scheduled)
                if s.num_new_tokens < longest
            ]
        elif not any(s.is_prefill for s in out.scheduled):
            out.scheduled += [ScheduledSeq(s, 1, False, is_padding=True) for s in self.batch if s.is_finished]
        return out

    def finish(self, seq: Sequence) -> None:
        """A finished member leaves `running` but holds its blocks until the batch ends."""
        if seq in self.batch:
            self.running.remove(seq)
            if not self._live_members():
                self._release_batch()
        else:
            super().finish(seq)

    def _live_members(self) -> list[Sequence]:
        return [s for s in self.batch if s in self.running]

    def _release_batch(self) -> None:
        for seq in self.batch:
            self.kv.free(seq)
        self.batch = []
