"""A pool of fixed-size blocks handed out as sequences grow (vLLM's PagedAttention).

Prefix caching: a full block is named by the hash of its tokens chained to its
predecessor's, so equal prefixes map to equal names. Blocks are shared by
reference count; a freed block keeps its contents and its name until the pool
reuses it (least recently freed first), so a later request with the same
prefix can still find it.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from engines.reference.config import ModelConfig
from engines.reference.kv_cache.base import allocate_storage, blocks_for
from engines.reference.sequence import Sequence


class PagedKVCache:
    name = "paged"

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
        if num_blocks < 1:
            raise ValueError(f"num_kv_blocks must be >= 1, got {num_blocks}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.blocks_per_slot = 0  # blocks anywhere in the pool: no slot to read in place
        self.max_model_len = max_model_len
        self.enable_prefix_caching = enable_prefix_caching
        self.storage = allocate_storage(cfg, num_blocks, block_size, dtype, device, huge_pages)
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks + 1))
        self._ref_count = [0] * (num_blocks + 1)
        self._block_key: dict[int, tuple] = {}  # block -> its prefix key
        self._cached: dict[tuple, int] = {}  # prefix key -> block
        self._seq_keys: dict[int, list[tuple]] = {}  # id(seq) -> keys of its full blocks
        self.prefix_cache_hit_tokens = 0
        self.prefix_cache_query_tokens = 0

    def layer(self, i: int):
        return self.storage[i, 0], self.storage[i, 1]

    # -- admission and growth ------------------------------------------------------

    def can_admit(self, seq: Sequence, num_new_tokens: int) -> bool:
        if seq.num_computed_tokens + num_new_tokens > self.max_model_len:
            return False
        return blocks_for(seq.num_computed_tokens + num_new_tokens, self.block_size) <= len(self._free)

    def admit(self, seq: Sequence, reuse_prefix: bool = True) -> None:
        seq.block_table = []
        self._seq_keys[id(seq)] = []
        if not (self.enable_prefix_caching and reuse_prefix):
            return
        tokens = seq.all_token_ids
        # At least one token must run through the model to produce logits.
        max_hit_blocks = (len(tokens) - 1) // self.block_size
        self.prefix_cache_query_tokens += max_hit_blocks * self.block_size
        keys = self._seq_keys[id(seq)]
        for key in self._block_keys(tokens, max_hit_blocks):
            block = self._cached.get(key)
            if block is None:
                break
            if self._ref_count[block] == 0:
                del self._free[block]
            self._ref_count[block] += 1
            seq.block_table.append(block)
            keys.append(key)
        hit_tokens = len(seq.block_table) * self.block_size
        seq.num_computed_tokens = hit_tokens
        seq.num_cached_prompt_tokens += hit_tokens
        self.prefix_cache_hit_tokens += hit_tokens

    def grow(self, seq: Sequence, num_tokens: int) -> bool:
        need = blocks_for(num_tokens, self.block_size) - len(seq.block_table)
        if need > len(self._free):
            return False
        for _ in range(need):
            block, _ = self._free.popitem(last=False)
            key = self._block_key.pop(block, None)
            if key is not None:
                del self._cached[key]
            self._ref_count[block] = 1
            seq.block_table.append(block)
        return True

    def commit(self, seq: Sequence) -> None:
        if not self.enable_prefix_caching:
            return
        keys = self._seq_keys.setdefault(id(seq), [])
        num_full = seq.num_computed_tokens // self.block_size
        if num_full <= len(keys):
            return
        tokens = seq.all_token_ids
        parent = keys[-1] if keys else None
        for j in range(len(keys), num_full):
            key = (hash(parent), tuple(tokens[j * self.block_size : (j + 1) * self.block_size]))
            keys.append(key)
            block = seq.block_table[j]
            if key not in self._cached:
                self._cached[key] = block
                self._block_key[block] = key
            parent = key

    def free(self, seq: Sequence) -> None:
        # Tail blocks go back first, so they are reused first and shared prefixes last.
        for block in reversed(seq.block_table):
            self._ref_count[block] -= 1
            if self._ref_count[block] == 0:
                self._free[block] = None
        seq.block_table = []
        self._seq_keys.pop(id(seq), None)

    # -- bookkeeping ---------------------------------------------------------------

    def _block_keys(self, tokens: list[int], num_blocks: int):
        parent = None
        for j in range(num_blocks):
            key = (hash(parent), tuple(tokens[j * self.block_size : (j + 1) * self.block_size]))
            yield key
            parent = key

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def stats(self) -> dict[str, int]:
        return {
            "prefix_cache_hit_tokens": self.prefix_cache_hit_tokens,
            "prefix_cache_query_tokens": self.prefix_cache_query_tokens,
        }
