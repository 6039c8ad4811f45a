"""The KV cache: storage for every layer, and who owns which blocks.

Storage is one tensor `[layers, 2, num_blocks, block_size, kv_heads, head_dim]`
for both kinds. Block 0 is never handed out: padded rows of a static batch write
their throw-away K/V there.
"""

from __future__ import annotations

from typing import Protocol

import torch

from engines.reference.config import ModelConfig
from engines.reference.huge_pages import zeros_in_huge_pages
from engines.reference.sequence import Sequence

NULL_BLOCK = 0


class KVCache(Protocol):
    name: str
    block_size: int
    num_blocks: int  # usable blocks, the null block excluded
    blocks_per_slot: int  # contiguous: the blocks each sequence's slot spans (read in place); paged: 0

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]: ...

    def can_admit(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Could `seq` be admitted with room for `num_new_tokens` more computed tokens?"""

    def admit(self, seq: Sequence, reuse_prefix: bool = True) -> None:
        """Take what the sequence needs to start (a slot; cached prefix blocks unless `reuse_prefix` is off)."""

    def grow(self, seq: Sequence, num_tokens: int) -> bool:
        """Ensure blocks for `num_tokens` computed tokens; False when out of blocks."""

    def commit(self, seq: Sequence) -> None:
        """Called after a step computed the sequence's tokens (registers full blocks)."""

    def free(self, seq: Sequence) -> None: ...

    @property
    def num_free_blocks(self) -> int: ...

    def stats(self) -> dict[str, int]: ...


def allocate_storage(
    cfg: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device,
    huge_pages: bool = False,
) -> torch.Tensor:
    """Zeroed storage; with `huge_pages` (CPU) in transparent huge pages (engine.cpu_huge_pages)."""
    shape = (cfg.num_hidden_layers, 2, num_blocks + 1, block_size, cfg.num_key_value_heads, cfg.head_dim)
    if huge_pages and device.type == "cpu":
        return zeros_in_huge_pages(shape, dtype)
    return torch.zeros(shape, dtype=dtype, device=device)


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)
