"""What every batching strategy shares: queues, admission, block reservation, preemption.

A strategy decides, each step, which sequences run and how many of their
tokens. When the KV cache runs out of blocks, the newest running sequence is
preempted: its blocks are freed and it returns to the front of the queue, to
be recomputed (prompt and tokens so far) when it is admitted again.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field

from engines.reference.kv_cache import KVCache
from engines.reference.options import ReferenceEngineConfig
from engines.reference.sequence import SeqStatus, Sequence


@dataclass
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int
    is_prefill: bool
    is_padding: bool = False  # rows of a padded static batch (prompt padding, finished members)


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSeq]
    preempted: list[Sequence] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)

    @property
    def kind(self) -> str:
        real = [s for s in self.scheduled if not s.is_padding]
        if all(s.is_prefill for s in real):
            return "prefill"
        if not any(s.is_prefill for s in real):
            return "decode"
        return "mixed"


class Scheduler(ABC):
    """Shared machinery; subclasses implement `schedule`.

    `opts` is the engine's own options object: a strategy reads the fields it uses
    (max_batch_size, max_wait_ms, max_num_seqs, max_num_batched_tokens).
    """

    name = "base"

    def __init__(self, kv: KVCache, opts: ReferenceEngineConfig):
        self.kv = kv
        self.opts = opts
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions_total = 0  # read by llmperf-serve's /metrics

    # -- queue ---------------------------------------------------------------------

    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @abstractmethod
    def schedule(self, now_s: float, flushed_order: int) -> SchedulerOutput | None:
        """The next step, or None when nothing should run yet.

        Requests whose arrival order is <= `flushed_order` arrived before the
        client said none would follow for now: a static batch holding one of
        them launches even when it is not full.
        """

    def next_wakeup_s(self, now_s: float) -> float | None:
        """When an idle strategy wants to be asked again without new arrivals (dynamic)."""
        return None

    def finish(self, seq: Sequence) -> None:
        """Retire a finished or aborted sequence (blocks are freed unless a batch holds them)."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.kv.free(seq)

    # -- helpers for strategies ---------------------------------------------------------

    def try_admit(self, seq: Sequence, num_new_tokens: int) -> bool:
        if not self.kv.can_admit(seq, num_new_tokens):
            return False
        self.waiting.remove(seq)
        self.kv.admit(seq)
        seq.status = SeqStatus.RUNNING
        self.running.append(seq)
        return True

    def reserve(self, seq: Sequence, num_new_tokens: int, out: SchedulerOutput) -> bool:
        """Blocks for `num_new_tokens` more tokens of `seq`, preempting the newest if needed."""
        while not self.kv.grow(seq, seq.num_computed_tokens + num_new_tokens):
            victim = max(self.running, key=lambda s: s.order)
            self.preempt(victim, out)
            if victim is seq:
                return False
        return True

    def preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.running.remove(seq)
        self.kv.free(seq)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        self.num_preemptions_total += 1
        seq.status = SeqStatus.WAITING
        orders = [s.order for s in self.waiting]
        self.waiting.insert(bisect.bisect(orders, seq.order), seq)
        out.preempted.append(seq)
        out.scheduled = [s for s in out.scheduled if s.seq is not seq]

    @staticmethod
    def is_prefill(seq: Sequence) -> bool:
        return seq.num_uncomputed_tokens > 1 or not seq.output_token_ids

    def schedule_whole(self, seqs: list[Sequence], out: SchedulerOutput) -> None:
        """Run every uncomputed token of each sequence (a whole prefill, or one decode token)."""
        for seq in list(seqs):
            if seq not in self.running:  # preempted while reserving an earlier one
                continue
            n = seq.num_uncomputed_tokens
            prefill = self.is_prefill(seq)
            if self.reserve(seq, n, out):
                out.scheduled.append(ScheduledSeq(seq, n, prefill))
