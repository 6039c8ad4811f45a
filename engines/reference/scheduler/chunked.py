"""Continuous batching with chunked prefill (Sarathi-Serve, vLLM v1).

Each step has a budget of `max_num_batched_tokens`. Running decodes are served
first, one token each; partial prefills continue next; new requests are then
admitted with prompt chunks that fill what is left. A long prompt is spread
over several steps, so running decodes never wait for it.
"""

from __future__ import annotations

from engines.reference.scheduler.base import ScheduledSeq, Scheduler, SchedulerOutput


class ChunkedPrefillScheduler(Scheduler):
    name = "chunked"

    def schedule(self, now_s: float, flushed_order: int) -> SchedulerOutput | None:
        out = SchedulerOutput([])
        budget = self.opts.max_num_batched_tokens
        decoding = [s for s in self.running if not self.is_prefill(s)]
        prefilling = [s for s in self.running if self.is_prefill(s)]
        for seq in decoding:
            if budget == 0:
                break
            if seq in self.running and self.reserve(seq, 1, out):
                out.scheduled.append(ScheduledSeq(seq, 1, False))
                budget -= 1
        for seq in prefilling:
            if budget == 0:
                break
            budget -= self._schedule_chunk(seq, budget, out)
        while budget > 0 and self.waiting and len(self.running) < self.opts.max_num_seqs:
            seq = self.waiting[0]
            if not self.try_admit(seq, min(seq.num_uncomputed_tokens, budget)):
                break
            out.admitted.append(seq)
            budget -= self._schedule_chunk(seq, budget, out)
            if seq not in self.running:
                # Its prefix-cache hits took free blocks the admission check counted on,
                # and reserving the rest preempted it: it heads the queue again, so
                # admitting on would take and drop the same blocks for ever.
                out.admitted.remove(seq)
                break
        return out if out.scheduled else None

    def _schedule_chunk(self, seq, budget: int, out: SchedulerOutput) -> int:
        if seq not in self.running:
            return 0
        n = min(seq.num_uncomputed_tokens, budget)
        if not self.reserve(seq, n, out):
            return 0
        out.scheduled.append(ScheduledSeq(seq, n, True))
        return n
