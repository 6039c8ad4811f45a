"""KV caches, one module each, chosen by name (`kv_cache=`)."""

from __future__ import annotations

from engines.reference.kv_cache.base import NULL_BLOCK, KVCache, blocks_for
from engines.reference.kv_cache.contiguous import ContiguousKVCache
from engines.reference.kv_cache.paged import PagedKVCache
from llmperf.registry import Registry

KV_CACHES: Registry[type[KVCache]] = Registry(
    "kv_cache", {"contiguous": ContiguousKVCache, "paged": PagedKVCache}
)

__all__ = ["KVCache", "KV_CACHES", "NULL_BLOCK", "blocks_for"]
