"""`attention=cpu`: decode rows through a C++ kernel that reads the paged KV cache in place.

sdpa's decode path copies every row's cached K and V into a padded batch each layer of
each step, then runs CPU SDPA's flash kernel, which is built for long query tiles and runs
one query a row slowly. This backend hands the rows' block tables to
`kernels/cpu/ops.cpp` instead: a job per row (per row and kv head when rows are fewer than
four a thread) reads the row's own positions straight from their blocks (no copy, no
padding), in fp32 with 16-float vectors (AVX-512 where the CPU has it). Prefill rows, whole or chunked, go to SDPA as in
`attention=sdpa`: they are long query tiles, which SDPA runs well.

The kernel is compiled for this CPU the first time a process builds the backend
(`engines.reference.kernels.cpu_ops`: 10-30 s, then cached), before any request is
timed. It takes head dims that are multiples of 16, up to 256; other models decode
through sdpa's path, and `kernel_rows` says none went through the kernel.
"""

from __future__ import annotations

from engines.reference.attention.sdpa import SdpaAttention
from engines.reference.kernels.cpu_ops import cpu_ops


class CpuAttention(SdpaAttention):
    name = "cpu"

    def __init__(self) -> None:
        ops, self.build_s = cpu_ops()
        self._kernel = ops.paged_decode
        self.kernel_rows = 0  # decode rows the kernel attended, for tests and curiosity

    def _decode(self, q, k_cache, v_cache, meta, scale):
        head_dim = q.shape[-1]
        if q.device.type != "cpu":
            raise ValueError(f"attention=cpu runs on CPU tensors, got {q.device.type}; use sdpa or triton")
        if head_dim % 16 or head_dim > 256:
            return SdpaAttention._decode(q, k_cache, v_cache, meta, scale)
        batch = meta.decode_batch
        self.kernel_rows += q.shape[0]
        return self._kernel(q, k_cache, v_cache, batch.block_tables, batch.seq_lens, scale)
