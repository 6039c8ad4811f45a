"""What every attention backend receives.

The KV cache of a layer is two tensors `[num_blocks, block_size, num_kv_heads,
head_dim]`, for both cache kinds: a contiguous cache is a paged one whose
sequences own runs of consecutive blocks. Before a backend is called, the new
tokens' K and V are already written to their slots, so a backend only reads:
sequence i's queries are its `query_lens[i]` newest positions, and it attends,
causally, to its first `seq_lens[i]` cached positions, found through
`block_tables[i]`. A backend with `reads_new_kv = True` is also handed the step's new K
and V (`new_kv`, as stored) and may read prompts without earlier context from them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple, Protocol

import torch


@dataclass
class AttentionMetadata:
    query_lens: list[int]  # new tokens of each sequence in this step
    seq_lens: list[int]  # cached positions each sequence attends to (context + new)
    cu_query_lens: torch.Tensor  # int32 [num_seqs + 1], offsets into the packed queries
    seq_lens_t: torch.Tensor  # int32 [num_seqs]
    block_tables: torch.Tensor  # int32 [num_seqs, max_blocks_per_seq], padded with 0
    slot_mapping: torch.Tensor  # int64 [num_tokens], flat cache slot of each new token
    block_size: int
    # A contiguous cache: blocks a sequence's slot spans, and each sequence's slot (its
    # blocks are 1 + slot * slot_blocks onwards); None for a paged cache.
    slot_blocks: int = 0
    slots: list[int] | None = None

    # Derived once per step from the lists above, then shared by every layer:
    # no layer reads a device tensor back to the host.

    @cached_property
    def query_starts(self) -> list[int]:
        """Offset of each sequence's first query in the packed queries."""
        return list(itertools.accumulate(self.query_lens, initial=0))

    @cached_property
    def is_decode_only(self) -> bool:
        return all(n == 1 for n in self.query_lens)

    @cached_property
    def decode_rows(self) -> list[int]:
        """The sequences with one query in this step."""
        return [i for i, n in enumerate(self.query_lens) if n == 1]

    @cached_property
    def fresh_prompts(self) -> FreshPrompts | None:
        """The prompts with no cached context (query length = context, more than one token), when
        every other row is a decode row; None otherwise (a chunk after context, or none fresh)."""
        rows = [i for i, (n, total) in enumerate(zip(self.query_lens, self.seq_lens, strict=True)) if n == total > 1]
        if not rows or len(rows) + len(self.decode_rows) != len(self.query_lens):
            return None
        device = self.block_tables.device
        if len(rows) == len(self.query_lens):
            return FreshPrompts(rows, self.cu_query_lens[:-1], self.seq_lens_t)
        starts = self.query_starts
        return FreshPrompts(rows, torch.tensor([starts[i] for i in rows], device=device),
                            torch.tensor([self.query_lens[i] for i in rows], device=device))

    @cached_property
    def decode_batch(self) -> DecodeBatch:
        """The decode rows as one padded batch: their block tables, key mask and query rows."""
        rows = self.decode_rows
        device = self.block_tables.device
        max_len = max(self.seq_lens[i] for i in rows)
        num_blocks = -(-max_len // self.block_size)
        if len(rows) == len(self.query_lens):
            tables, lens, token_index = self.block_tables, self.seq_lens_t, None
        else:
            index = torch.tensor(rows, device=device)
            tables, lens = self.block_tables[index], self.seq_lens_t[index]
            token_index = self.cu_query_lens[index].long()
        mask = torch.arange(max_len, device=device)[None, :] < lens[:, None]
        return DecodeBatch(tables[:, :num_blocks], lens, max_len, mask, token_index, self._slot_rows(rows, max_len))

    def _slot_rows(self, rows: list[int], max_len: int) -> SlotRows | None:
        """The decode rows as a run of contiguous-cache slots, when they fill at least half of it."""
        if self.slots is None:
            return None
        row_slots = [self.slots[i] for i in rows]
        first = min(row_slots)
        count = max(row_slots) - first + 1
        if count > 2 * len(rows):
            return None  # mostly idle slots: attending over them would cost more than a gather
        lens = [1] * count  # an idle slot's row attends to one key, so it stays finite (and unused)
        for slot, i in zip(row_slots, rows, strict=True):
            lens[slot - first] = self.seq_lens[i]
        device = self.block_tables.device
        places = [slot - first for slot in row_slots]
        index = None if places == list(range(count)) else torch.tensor(places, device=device)
        mask = torch.arange(max_len, device=device)[None, :] < torch.tensor(lens, device=device)[:, None]
        return SlotRows(first, count, index, mask)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens)

    @property
    def max_seq_len(self) -> int:
        return max(self.seq_lens)


class SlotRows(NamedTuple):
    """Decode rows whose contexts sit in slots first .. first + count - 1 of a contiguous
    cache, read in place as one strided view (no copy); slots between them idle."""

    first: int
    count: int
    index: torch.Tensor | None  # each decode row's place in the run; None: row i is place i
    key_mask: torch.Tensor  # bool [count, max_len]


class FreshPrompts(NamedTuple):
    """Prompts a step attends with no cached context: each one's first query and its length."""

    rows: list[int]
    starts: torch.Tensor  # [len(rows)], offsets into the packed queries
    lens: torch.Tensor  # [len(rows)]


class DecodeBatch(NamedTuple):
    block_tables: torch.Tensor  # [B, blocks of the longest context]
    seq_lens: torch.Tensor  # int32 [B], each row's context
    max_len: int
    key_mask: torch.Tensor  # bool [B, max_len]
    token_index: torch.Tensor | None  # the rows' queries in the packed queries; None: all of them
    slot_rows: SlotRows | None = None  # contiguous cache: the rows as slots read in place


class AttentionBackend(Protocol):
    name: str

    def __call__(
        self,
        q: torch.Tensor,  # [num_tokens, num_heads, head_dim], RoPE applied
        k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
        ...
