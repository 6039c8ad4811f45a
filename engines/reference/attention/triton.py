"""`attention=triton`: the Triton kernels of `engines.reference.kernels`.

Decode-only batches go to the split-KV paged decode kernel. Any batch with a
prefill in it (a whole prompt, a chunk, a prompt behind a prefix-cache hit, a
recompute after preemption, decodes riding along under chunked prefill) goes to
the prefill kernel that reads keys through the block tables, which handles a
query length of one as well as any other.

On CPU the kernels run under Triton's interpreter: on the first call with CPU
tensors this sets `TRITON_INTERPRET=1` (unless already set) before the kernel
modules are imported. It is a correctness path, orders of magnitude slower
than eager or sdpa.
"""

from __future__ import annotations

import torch

from engines.reference.attention.base import AttentionMetadata
from engines.reference.kernels import prepare_triton


class TritonAttention:
    name = "triton"

    def __call__(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        prepare_triton(q.device)
        if meta.is_decode_only:
            from engines.reference.kernels.decode_attention import paged_decode_attention

            return paged_decode_attention(
                q, k_cache, v_cache, meta.seq_lens_t, meta.block_tables, meta.max_seq_len, scale
            )
        from engines.reference.kernels.prefill_attention import paged_prefill_attention

        return paged_prefill_attention(
            q, k_cache, v_cache, meta.cu_query_lens, meta.seq_lens_t, meta.block_tables,
            meta.max_query_len, scale,
        )  # fmt: skip
