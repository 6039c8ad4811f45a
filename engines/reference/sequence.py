"""A request as the engine sees it: its tokens, its progress and its KV blocks."""

from __future__ import annotations

import enum
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from engines.base import SamplingParams, TokenEvent

_arrival_counter = itertools.count()


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    sampling: SamplingParams
    eos_token_ids: tuple[int, ...] = ()
    on_tokens: Callable[[TokenEvent], None] | None = None
    submitted_s: float = field(default_factory=time.perf_counter)
    order: int = field(default_factory=lambda: next(_arrival_counter))  # FCFS tie-break
    output_token_ids: list[int] = field(default_factory=list)
    status: SeqStatus = SeqStatus.WAITING
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache
    block_table: list[int] = field(default_factory=list)
    num_preemptions: int = 0
    num_cached_prompt_tokens: int = 0  # prompt tokens served by the prefix cache
    finish_reason: str | None = None
    admitted_s: float | None = None
    generator: torch.Generator | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_uncomputed_tokens(self) -> int:
        """Tokens still to run through the model before the next one can be sampled."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SeqStatus.FINISHED

    def append_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        if token_id in self.eos_token_ids and not self.sampling.ignore_eos:
            self.finish_reason = "stop"
        elif token_id in self.sampling.stop_token_ids:
            self.finish_reason = "stop"
        elif len(self.output_token_ids) >= self.max_tokens:
            self.finish_reason = "length"
