"""What every attention backend receives.

The KV cache of a layer is two tensors `[num_blocks, block_size, num_kv_heads,
head_dim]`, for both cache kinds: a contiguous cache is a paged one whose
sequences own runs of consecutive blocks. Before a backend is called, the new
tokens' K and V are already written to their slots, so a backend only reads:
sequence i's queries are its `query_lens[i]` newest positions, and it attends,
causally, to its first `seq_lens[i]` cached positions, found through
`block_tables[i]`.
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
        return DecodeBatch(tables[:, :num_blocks], max_len, mask, token_index)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens)

    @property
    def max_seq_len(self) -> int:
        return max(self.seq_lens)


class DecodeBatch(NamedTuple):
    block_tables: torch.Tensor  # [B, blocks of the longest context]
    max_len: int
    key_mask: torch.Tensor  # bool [B, max_len]
    token_index: torch.Tensor | None  # the rows' queries in the packed queries; None: all of them


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
