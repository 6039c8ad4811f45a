"""Turns a scheduled step into tensors, runs the model, returns the logits it needs.

`prepare` (on the scheduling process) reduces a step to plain lists; `execute`
(on every tensor-parallel rank) turns them into tensors and runs the forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engines.reference.attention import AttentionBackend, AttentionMetadata
from engines.reference.kv_cache import NULL_BLOCK
from engines.reference.model import LlamaForCausalLM
from engines.reference.scheduler import ScheduledSeq


@dataclass
class StepInputs:
    input_ids: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)
    query_lens: list[int] = field(default_factory=list)
    seq_lens: list[int] = field(default_factory=list)
    block_tables: list[list[int]] = field(default_factory=list)
    logits_rows: list[int] = field(default_factory=list)
    slot_blocks: int = 0  # a contiguous cache's blocks per slot; 0: paged


class ModelRunner:
    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_layers: list[tuple[torch.Tensor, torch.Tensor]],
        block_size: int,
        backend: AttentionBackend,
        device: torch.device,
        broadcast=None,  # callable(StepInputs) sending the step to the other ranks
        slot_blocks: int = 0,  # a contiguous cache's blocks per slot (attention reads slots in place)
    ):
        self.model = model
        self.kv_layers = kv_layers
        self.block_size = block_size
        self.backend = backend
        self.device = device
        self.broadcast = broadcast
        self.slot_blocks = slot_blocks

    def run(self, scheduled: list[ScheduledSeq], all_logits: bool = False) -> tuple[torch.Tensor, list[int]]:
        """Forward one step. Returns logits for the sequences to sample and their indices in `scheduled`."""
        inputs, sampled = self.prepare(scheduled, all_logits)
        if self.broadcast is not None:
            self.broadcast(inputs)
        return self.execute(inputs), sampled

    def prepare(self, scheduled: list[ScheduledSeq], all_logits: bool = False) -> tuple[StepInputs, list[int]]:
        """A sequence is sampled when the step computes its last known token; a
        prefill chunk that stops short of that, and padding, are not."""
        x = StepInputs(slot_blocks=self.slot_blocks)
        sampled: list[int] = []
        bs = self.block_size
        for i, s in enumerate(scheduled):
            seq, n = s.seq, s.num_new_tokens
            if s.is_padding:
                self._add_padding(x, s)
                continue
            start = seq.num_computed_tokens
            x.input_ids += seq.all_token_ids[start : start + n]
            x.positions += range(start, start + n)
            table = seq.block_table
            x.slots += [table[p // bs] * bs + p % bs for p in range(start, start + n)]
            x.query_lens.append(n)
            x.seq_lens.append(start + n)
            x.block_tables.append(table)
            if all_logits:
                x.logits_rows += range(len(x.input_ids) - n, len(x.input_ids))
            elif start + n == seq.num_tokens:
                x.logits_rows.append(len(x.input_ids) - 1)
                sampled.append(i)
        return x, sampled

    def _add_padding(self, x: StepInputs, s: ScheduledSeq) -> None:
        """Rows a padded static batch computes for nothing: real work, results unused,
        K/V written to the null block."""
        seq, n = s.seq, s.num_new_tokens
        x.input_ids += [0] * n
        x.slots += [NULL_BLOCK * self.block_size] * n
        x.query_lens.append(n)
        if s.is_prefill:  # pad tokens of a short prompt: attend among themselves
            x.positions += range(n)
            x.seq_lens.append(n)
            x.block_tables.append([NULL_BLOCK] * -(-n // self.block_size))
        else:  # a finished member: one query over its own context
            ctx = seq.num_computed_tokens
            x.positions.append(max(ctx - 1, 0))
            x.seq_lens.append(max(ctx, 1))
            x.block_tables.append(seq.block_table or [NULL_BLOCK])

    @torch.inference_mode()
    def execute(self, x: StepInputs) -> torch.Tensor:
        dev = self.device
        meta = self._metadata(x)
        ids = torch.tensor(x.input_ids, dtype=torch.long, device=dev)
        pos = torch.tensor(x.positions, dtype=torch.long, device=dev)
        rows = torch.tensor(x.logits_rows, dtype=torch.long, device=dev)
        return self.model(ids, pos, self.kv_layers, meta, self.backend, rows)

    def _metadata(self, x: StepInputs) -> AttentionMetadata:
        width = max(len(t) for t in x.block_tables)
        padded = [t + [NULL_BLOCK] * (width - len(t)) for t in x.block_tables]
        cu = [0]
        for n in x.query_lens:
            cu.append(cu[-1] + n)
        dev = self.device
        return AttentionMetadata(
            query_lens=x.query_lens,
            seq_lens=x.seq_lens,
            cu_query_lens=torch.tensor(cu, dtype=torch.int32, device=dev),
            seq_lens_t=torch.tensor(x.seq_lens, dtype=torch.int32, device=dev),
            block_tables=torch.tensor(padded, dtype=torch.int32, device=dev),
            slot_mapping=torch.tensor(x.slots, dtype=torch.long, device=dev),
            block_size=self.block_size,
            slot_blocks=x.slot_blocks,
            slots=_slots(x),
        )


def _slots(x: StepInputs) -> list[int] | None:
    """Each sequence's slot in a contiguous cache; None for a paged one, or when a padding row
    (on the null block) has no slot."""
    if not x.slot_blocks or any(t[0] == NULL_BLOCK for t in x.block_tables):
        return None
    return [(t[0] - 1) // x.slot_blocks for t in x.block_tables]
