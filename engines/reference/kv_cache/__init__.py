"""KV caches, one module each, chosen by name (`kv_cache=`)."""

from __future__ import annotations

from engines.reference.kv_cache.base import NULL_BLOCK, KVCache, blocks_for
from engines.reference.kv_cache.contiguous import ContiguousKVCache
from engines.reference.kv_cache.paged import PagedKVCache

KV_CACHES: dict[str, type] = {
    "contiguous": ContiguousKVCache,
    "paged": PagedKVCache,
}


def build_kv_cache(name: str, cfg, **options) -> KVCache:
    if name not in KV_CACHES:
        raise ValueError(f"unknown kv_cache {name!r}; valid: {', '.join(KV_CACHES)}")
    return KV_CACHES[name](cfg, **options)


__all__ = ["KVCache", "KV_CACHES", "NULL_BLOCK", "blocks_for", "build_kv_cache"]
