"""`attention=cpu`: decode rows through a C++ kernel that reads the paged KV cache in place.

sdpa's decode path copies every row's cached K and V into a padded batch each layer of
each step, then runs CPU SDPA's flash kernel, which is built for long query tiles and runs
one query a row slowly. This backend hands the rows' block tables to
`kernels/cpu/ops.cpp` instead: a job per row (per row and kv head when rows are fewer than
four a thread) reads the row's own positions straight from their blocks (no copy, no
padding), in fp32 with 16-float vectors (AVX-512 where the CPU has it).

Prompts with no cached context (the offline workload's prefill steps, a prompt admitted beside
decoding sequences) go to the C++ causal prefill (`kernels/cpu/prefill.cpp`), over the step's
new K and V where the qkv projection left them (`new_kv`), any mix of prompt lengths in one
call: on 16 prompts of 128 tokens CPU SDPA's flash kernel took four times its time on one
thread (docs/kernels.md). A step with a chunk after cached context (chunked prefill, a prefix
cache hit) goes to SDPA as in `attention=sdpa`.

The kernel is compiled for this CPU the first time a process builds the backend
(`engines.reference.kernels.cpu_ops`: 10-30 s, then cached), before any request is
timed. It takes head dims that are multiples of 16, up to 256; other models decode
through sdpa's path, and `kernel_rows` says none went through the kernel.
"""

from __future__ import annotations

from engines.reference.attention.sdpa import SdpaAttention
from engines.reference.kernels.cpu_ops import cpu_ops

PREFILL_HEAD_CHUNKS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16)  # head dims / 16 that prefill.cpp's causal_prefill takes


class CpuAttention(SdpaAttention):
    name = "cpu"

    def __init__(self) -> None:
        ops, self.build_s = cpu_ops()
        self._kernel = ops.paged_decode
        self._prefill = ops.causal_prefill
        self.kernel_rows = 0  # decode rows the kernel attended, for tests and curiosity
        self.prefill_rows = 0  # fresh prompts the kernel's causal prefill attended

    def __call__(self, q, k_cache, v_cache, meta, scale, new_kv=None):
        fresh = None if new_kv is None or meta.is_decode_only else meta.fresh_prompts
        head_dim = q.shape[-1]
        if fresh is None or head_dim % 16 or head_dim // 16 not in PREFILL_HEAD_CHUNKS or new_kv[0].dtype != q.dtype:
            return super().__call__(q, k_cache, v_cache, meta, scale, new_kv)
        self.prefill_rows += len(fresh.rows)
        out = self._prefill(q, *new_kv, fresh.starts, fresh.lens, scale)  # decode rows left unwritten
        if meta.decode_rows:
            index = meta.decode_batch.token_index
            out[index] = self._decode(q[index], k_cache, v_cache, meta, scale)
        return out

    def _decode(self, q, k_cache, v_cache, meta, scale):
        head_dim = q.shape[-1]
        if q.device.type != "cpu":
            raise ValueError(f"attention=cpu runs on CPU tensors, got {q.device.type}; use sdpa or triton")
        if head_dim % 16 or head_dim > 256:
            return SdpaAttention._decode(q, k_cache, v_cache, meta, scale)
        batch = meta.decode_batch
        self.kernel_rows += q.shape[0]
        return self._kernel(q, k_cache, v_cache, batch.block_tables, batch.seq_lens, scale)
