"""Turns a scheduled step into tensors, runs the model, returns the logits it needs."""

from __future__ import annotations

import torch

from engines.reference.attention import AttentionBackend, AttentionMetadata
from engines.reference.kv_cache import NULL_BLOCK, KVCache
from engines.reference.model import LlamaForCausalLM
from engines.reference.scheduler import ScheduledSeq


class ModelRunner:
    def __init__(self, model: LlamaForCausalLM, kv: KVCache, backend: AttentionBackend, device: torch.device):
        self.model = model
        self.kv = kv
        self.backend = backend
        self.device = device
        self.kv_layers = [kv.layer(i) for i in range(model.config.num_hidden_layers)]

    @torch.inference_mode()
    def run(self, scheduled: list[ScheduledSeq], all_logits: bool = False) -> tuple[torch.Tensor, list[int]]:
        """Forward one step. Returns logits for the sequences to sample and their indices in `scheduled`.

        A sequence is sampled when the step computes its last known token; a
        prefill chunk that stops short of that, and padding, are not.
        """
        input_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        query_lens: list[int] = []
        seq_lens: list[int] = []
        tables: list[list[int]] = []
        logits_rows: list[int] = []
        sampled: list[int] = []
        bs = self.kv.block_size
        for i, s in enumerate(scheduled):
            seq, n = s.seq, s.num_new_tokens
            if s.is_padding:
                ctx = seq.num_computed_tokens
                input_ids.append(seq.all_token_ids[-1])
                positions.append(max(ctx - 1, 0))
                slots.append(NULL_BLOCK * bs)
                query_lens.append(1)
                seq_lens.append(max(ctx, 1))
                tables.append(seq.block_table or [NULL_BLOCK])
                continue
            start = seq.num_computed_tokens
            input_ids += seq.all_token_ids[start : start + n]
            positions += range(start, start + n)
            table = seq.block_table
            slots += [table[p // bs] * bs + p % bs for p in range(start, start + n)]
            query_lens.append(n)
            seq_lens.append(start + n)
            tables.append(table)
            if all_logits:
                logits_rows += range(len(input_ids) - n, len(input_ids))
            elif start + n == seq.num_tokens:
                logits_rows.append(len(input_ids) - 1)
                sampled.append(i)
        meta = self._metadata(query_lens, seq_lens, tables, slots)
        ids = torch.tensor(input_ids, dtype=torch.long, device=self.device)
        pos = torch.tensor(positions, dtype=torch.long, device=self.device)
        rows = torch.tensor(logits_rows, dtype=torch.long, device=self.device)
        logits = self.model(ids, pos, self.kv_layers, meta, self.backend, rows)
        return logits, sampled

    def _metadata(self, query_lens, seq_lens, tables, slots) -> AttentionMetadata:
        width = max(len(t) for t in tables)
        padded = [t + [NULL_BLOCK] * (width - len(t)) for t in tables]
        cu = [0]
        for n in query_lens:
            cu.append(cu[-1] + n)
        dev = self.device
        return AttentionMetadata(
            query_lens=query_lens,
            seq_lens=seq_lens,
            cu_query_lens=torch.tensor(cu, dtype=torch.int32, device=dev),
            seq_lens_t=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
            block_tables=torch.tensor(padded, dtype=torch.int32, device=dev),
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=dev),
            block_size=self.kv.block_size,
        )
