"""One preallocated slot of `max_model_len` positions per sequence.

Simple and fast to address, and wasteful: every sequence reserves room for the
longest sequence allowed, so the slot count, not the tokens, caps the batch.
"""

from __future__ import annotations

import torch

from engines.reference.config import ModelConfig
from engines.reference.kv_cache.base import allocate_storage, blocks_for
from engines.reference.sequence import Sequence


class ContiguousKVCache:
    name = "contiguous"

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        num_blocks: int,
        max_num_seqs: int,
        max_model_len: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device,
        enable_prefix_caching: bool = False,
        huge_pages: bool = False,  # CPU storage in transparent huge pages
    ):
        if enable_prefix_caching:
            raise ValueError("enable_prefix_caching needs kv_cache=paged")
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.blocks_per_slot = blocks_for(max_model_len, block_size)
        num_slots = min(max_num_seqs, num_blocks // self.blocks_per_slot)
        if num_slots < 1:
            raise ValueError(
                f"num_kv_blocks={num_blocks} holds no slot of max_model_len={max_model_len} "
                f"tokens ({self.blocks_per_slot} blocks of {block_size}); raise it or lower max_model_len"
            )
        self.num_slots = num_slots
        self.num_blocks = num_slots * self.blocks_per_slot
        self.storage = allocate_storage(cfg, self.num_blocks, block_size, dtype, device, huge_pages)
        self._free_slots = list(range(num_slots - 1, -1, -1))
        self._slot_of: dict[int, int] = {}

    def layer(self, i: int):
        return self.storage[i, 0], self.storage[i, 1]

    def can_admit(self, seq: Sequence, num_new_tokens: int) -> bool:
        return bool(self._free_slots) and seq.num_computed_tokens + num_new_tokens <= self.max_model_len

    def admit(self, seq: Sequence, reuse_prefix: bool = True) -> None:
        slot = self._free_slots.pop()
        self._slot_of[id(seq)] = slot
        first = 1 + slot * self.blocks_per_slot  # block 0 is the null block
        seq.block_table = list(range(first, first + self.blocks_per_slot))

    def grow(self, seq: Sequence, num_tokens: int) -> bool:
        return num_tokens <= self.max_model_len

    def commit(self, seq: Sequence) -> None:
        pass

    def free(self, seq: Sequence) -> None:
        slot = self._slot_of.pop(id(seq), None)
        if slot is not None:
            self._free_slots.append(slot)
        seq.block_table = []

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_slots) * self.blocks_per_slot

    def stats(self) -> dict[str, int]:
        return {"prefix_cache_hit_tokens": 0, "prefix_cache_query_tokens": 0}
