"""Iteration-level scheduling (Orca, vLLM): admit and retire sequences at every step.

Waiting requests are admitted as soon as there is a sequence slot and KV room;
their prompts run in a prefill step of their own (prefill first, as vLLM's
original scheduler does), then every running sequence decodes one token per
step. A long prompt therefore pauses the running decodes for one long step,
which is what chunked prefill fixes.
"""

from __future__ import annotations

from engines.reference.scheduler.base import Scheduler, SchedulerOutput


class ContinuousScheduler(Scheduler):
    name = "continuous"

    def schedule(self, now_s: float, flushed_order: int) -> SchedulerOutput | None:
        out = SchedulerOutput([])
        budget = self.opts.max_num_batched_tokens
        while self.waiting and len(self.running) < self.opts.max_num_seqs:
            seq = self.waiting[0]
            n = seq.num_uncomputed_tokens
            if out.admitted and n > budget:
                break  # the first prompt always fits the step, however long
            if not self.try_admit(seq, n):
                break
            out.admitted.append(seq)
            budget -= seq.num_uncomputed_tokens
        if out.admitted:
            self.schedule_whole(out.admitted, out)
        else:
            self.schedule_whole(list(self.running), out)
        return out if out.scheduled else None
