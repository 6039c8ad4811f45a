"""How much of the prompts a prefix cache can be expected to serve, and how much it did.

A prefix cache (vLLM's, the reference engine's paged cache) reuses whole blocks of KV: a
request whose first `shared` tokens were already sent by an earlier request (a shared
system prompt, a session's history) can be served `floor(min(shared, prompt - 1) / block)`
blocks from the cache; at least one prompt token must still run to produce logits. The
expected hit rate is those tokens over all prompt tokens, assuming nothing is evicted and
the earlier request was computed before the later one was scheduled.
"""

from __future__ import annotations

from collections.abc import Iterable

from llmperf.measure.records import RequestRecord


def cacheable_tokens(shared_tokens: int, prompt_tokens: int, block_tokens: int) -> int:
    """Prompt tokens a block-granular prefix cache can serve for one request."""
    usable = min(shared_tokens, prompt_tokens - 1)
    return max(usable, 0) // block_tokens * block_tokens


def expected_hit_rate(records: Iterable[RequestRecord], block_tokens: int) -> float | None:
    """Cacheable prompt tokens over all prompt tokens of the completed measured requests."""
    done = [r for r in records if r.ok and not r.warmup]
    total = sum(r.input_tokens for r in done)
    if not total:
        return None
    hits = sum(cacheable_tokens(r.shared_prefix_tokens, r.input_tokens, block_tokens) for r in done)
    return hits / total
