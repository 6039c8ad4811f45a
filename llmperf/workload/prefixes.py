"""Synthetic shared prefixes: N system prompts, each request starting with one of them.

Each request says how many leading tokens an earlier request already sent
(`Request.shared_prefix_tokens`); llmperf/measure/prefix_reuse.py turns that into the hit
rate a prefix cache can be expected to reach.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmperf.errors import ConfigError
from llmperf.options import check_positive, option


@dataclass
class PrefixConfig:
    """`scenario.prefix`: synthetic shared prefixes. Each prompt starts with one of `groups`
    system prompts of `length` tokens (picked at random), then its own `prompt_tokens` tokens."""

    groups: int = option(0, "shared system prompts; 0: no shared prefix")
    length: int = option(0, "tokens in each shared prefix")
    block_tokens: int = option(16, "the prefix cache's block: only whole blocks are reused")

    def __post_init__(self) -> None:
        check_positive(self, "groups", "length", allow_none=False, strict=False)
        check_positive(self, "block_tokens", allow_none=False)
        if self.groups and not self.length:
            raise ConfigError("length", self.length, "shared prefixes need a length > 0")


class SharedPrefixes:
    """`groups` prefixes of `length` tokens each, drawn once from the seed; the first request
    of a group sends it fresh, every later one shares it."""

    def __init__(self, groups: int, length: int, seed: int, token_pool: np.ndarray) -> None:
        self.prefixes = [
            np.random.default_rng([seed, 0x5EED, g]).choice(token_pool, size=length).tolist()
            for g in range(groups)
        ]
        self._seen: set[int] = set()

    def pick(self, rng: np.random.Generator) -> tuple[list[int], int]:
        """A prefix for the next request (in arrival order) and how many of its tokens an
        earlier request already sent."""
        group = int(rng.integers(len(self.prefixes)))
        shared = len(self.prefixes[group]) if group in self._seen else 0
        self._seen.add(group)
        return self.prefixes[group], shared
