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

from dataclasses import dataclass
from typing import Protocol

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

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def is_decode_only(self) -> bool:
        return all(n == 1 for n in self.query_lens)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens)

    @property
    def max_seq_len(self) -> int:
        return max(self.seq_lens)


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
