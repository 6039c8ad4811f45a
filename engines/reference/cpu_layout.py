"""Weight layouts that make CPU matmuls run near memory bandwidth.

Decode at small batch is a stream of matrix-vector products over every weight.
On CPUs, `F.linear` on a plain [out, in] weight reaches about half the read
bandwidth a large reduction gets, and far less for a few rows at once (MKL's
small-M GEMM). oneDNN's inner product on a weight reordered once into its
blocked layout streams at close to the reduction's rate, and keeps up at batch
8 to 32. `optimize_cpu_layout` packs every float `nn.Linear` that way where
torch has oneDNN, and falls back to storing weights column-major (same shape,
transposed strides), the faster layout for MKL's GEMV.

bf16 is the exception on CPUs without bf16 arithmetic (no AVX512_BF16, no AMX):
there oneDNN's bf16 kernels convert as they go and multiply several times slower than
fp32 once a step has a few rows. `WidenedLinear` keeps the bf16 weight (column-major:
within 4% of packed at 1 row) and, for steps of WIDEN_MIN_ROWS rows or more, widens it
to fp32 a chunk at a time into a reused scratch buffer, then multiplies in fp32: bf16's
bytes, fp32's arithmetic. Streaming a 212 MB stack of llama-107m-shaped bf16 weights
on a 2-core AVX-512 Xeon (ms, packed bf16 / widened): 3 rows 31.1 / 40.6, 8 rows
65.6 / 52.9, 16 rows 94.9 / 62.1, 64 rows 334.6 / 118.6. Widening into a fresh buffer
each call instead cost qwen2.5-0.5b's decode step at batch 8 501 ms against 288 native
(buffers past glibc's mmap threshold page-fault on every call); chunked, 307 ms.
"""

from __future__ import annotations

import functools
import threading

import torch
import torch.nn.functional as F
from torch import nn

from engines.reference.cpu_info import cpu_flags
from llmperf.errors import ConfigError

PACK_BATCH_HINT = 8  # oneDNN picks its blocking for this many rows; 1..64 measured alike at batch 1
WIDEN_MIN_ROWS = 8  # bf16 without bf16 arithmetic: fp32 from 8 rows on (at 3-4 rows a wash)
WIDEN_CHUNK_ELEMENTS = 1 << 22  # weight elements widened at a time: a 16 MB fp32 scratch buffer
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


class PackedLinear(nn.Module):
    """A linear layer whose weight lives in oneDNN's blocked layout (an opaque mkldnn tensor)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), PACK_BATCH_HINT)
        self.weight = nn.Parameter(packed, requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")


class WidenedLinear(nn.Module):
    """A bf16 linear layer that multiplies in fp32 once a step has WIDEN_MIN_ROWS rows: the
    weight stays bf16 (column-major) and is widened per call, WIDEN_CHUNK_ELEMENTS at a time
    into a scratch buffer that is reused; fewer rows multiply in bf16."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = nn.Parameter(_column_major(linear.weight), requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() < WIDEN_MIN_ROWS * self.in_features:
            return F.linear(x, self.weight, self.bias)
        x32 = x.reshape(-1, self.in_features).float()
        step = max(1, WIDEN_CHUNK_ELEMENTS // self.in_features)  # output features a chunk
        scratch = _scratch(min(step, self.out_features) * self.in_features)
        parts = []
        for start in range(0, self.out_features, step):
            n = min(step, self.out_features - start)
            w32 = scratch[: n * self.in_features].view(self.in_features, n)
            w32.copy_(self.weight[start : start + n].t())  # rows of n contiguous bf16 -> fp32
            parts.append(torch.mm(x32, w32))
        out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        if self.bias is not None:
            out += self.bias.float()
        return out.to(x.dtype).view(*x.shape[:-1], self.out_features)


_SCRATCH = threading.local()  # one buffer a thread: engines in two threads never share one


def _scratch(numel: int) -> torch.Tensor:
    """The calling thread's fp32 scratch buffer, at least `numel` long. Reused, so widening
    never allocates (a fresh buffer past glibc's mmap threshold page-faults on every call)."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.numel() < numel:
        # A normal tensor even when made under inference_mode: an inference tensor could not be
        # written outside it, and the same thread may run the model both ways.
        with torch.inference_mode(False):
            buf = torch.empty(numel, dtype=torch.float32)
        _SCRATCH.buf = buf
    return buf


@functools.cache
def has_bf16_arithmetic() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512_BF16 or AMX). True where it cannot be
    told (no /proc/cpuinfo, no x86 `flags` line): only a CPU known to lack it changes path."""
    flags = cpu_flags()
    return flags is None or any(flag in flags for flag in BF16_CPU_FLAGS)


def resolve_bf16_matmul(choice: str, compile: bool = False) -> str:
    """`cpu_bf16_matmul` as used: auto becomes kernel, native or fp32 by this CPU's flags (kernel
    on AVX512_BF16 without AMX, where oneDNN's tiles are faster, and not under torch.compile,
    which cannot trace its weights; native there). kernel where the C++ ops cannot run is a
    ConfigError."""
    if choice == "kernel" or (choice == "auto" and not compile and kernel_suits()):
        why = bf16_pairs_missing()
        if why is None:
            return "kernel"
        if choice == "kernel":
            raise ConfigError("cpu_bf16_matmul", choice, why)
    if choice != "auto":
        return choice
    return "native" if has_bf16_arithmetic() else "fp32"


def kernel_suits() -> bool:
    flags = cpu_flags() or []
    return "avx512_bf16" in flags and "amx_bf16" not in flags


def bf16_pairs_missing() -> str | None:
    """None where the bf16 Linear kernel (kernels/cpu/gemm_bf16.cpp) runs here, else why not."""
    from engines.reference.fast_path import cpu_ops_available

    why = cpu_ops_available()
    if why is not None:
        return why
    return None if torch.ops.llmperf.bf16_pairs_built() else "the C++ ops were built without AVX512_BF16"


class PairedLinear(nn.Module):
    """A bf16 linear layer multiplied by llmperf's own kernel (kernels/cpu/gemm_bf16.cpp): the
    weight packed once into panels of 32 output columns, each lane a column's pair of adjacent
    inputs, which `vdpbf16ps` multiplies with a row's pair in one instruction. fp32 sums over the inputs
    in order, rounded to nearest even: all but about 1 in 1,000 outputs are bitwise oneDNN's,
    the rest one bf16 unit apart; at a decode step's 64 rows it is 1.2x faster, at one row
    1.9x (docs/kernels.md)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        from engines.reference.kernels.cpu_ops import cpu_ops

        ops, _ = cpu_ops()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = nn.Parameter(ops.pack_bf16_pairs(linear.weight.detach()), requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.llmperf.linear_bf16_pairs(x, self.weight, self.out_features, self.bias)


@functools.cache
def can_pack(dtype: torch.dtype) -> bool:
    """Whether this torch build can pack and multiply weights of `dtype` with oneDNN."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        w = torch.ones(16, 16, dtype=dtype)
        out = torch.ops.mkldnn._linear_pointwise(
            torch.ones(2, 16, dtype=dtype), torch.ops.mkldnn._reorder_linear_weight(w, 2), None, "none", [], ""
        )
    except (AttributeError, RuntimeError):
        return False
    return bool(torch.all(out == 16))


@torch.no_grad()
def optimize_cpu_layout(model: nn.Module, bf16_matmul: str = "native") -> None:
    """Pack every float nn.Linear for oneDNN (else store it column-major), in place; with
    `bf16_matmul="fp32"`, bf16 ones become WidenedLinear instead, with "kernel" PairedLinear.

    Quantized layers are left alone (they have kernels of their own). Call it
    last, after loading, sharding and quantizing: packed weights are opaque.
    """
    # The token table's own nn.Embedding (under tensor parallelism it sits inside the
    # vocab-parallel wrapper).
    embedding = next((m for m in model.modules() if type(m) is nn.Embedding), None)
    tied_table = getattr(embedding, "weight", None)
    head_packed = False
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not nn.Linear:
                continue
            pairs = bf16_matmul == "kernel" and child.weight.dtype == torch.bfloat16 and child.in_features % 2 == 0
            if bf16_matmul == "fp32" and child.weight.dtype == torch.bfloat16:
                widened = WidenedLinear(child)
                if child.weight is tied_table:
                    embedding.weight = widened.weight  # the lookup reads the same (strided) table
                setattr(parent, name, widened)
            elif can_pack(child.weight.dtype) or pairs:
                if child.weight is tied_table:
                    head_packed = True
                setattr(parent, name, PairedLinear(child) if pairs else PackedLinear(child))
            else:
                weight = nn.Parameter(_column_major(child.weight), requires_grad=False)
                if child.weight is tied_table:
                    embedding.weight = weight  # the lookup reads the same (strided) table
                child.weight = weight
    if head_packed:
        # The packed head can no longer hand out rows, so the lookup keeps the plain table,
        # as a buffer: gathered a few rows per step, never streamed, and counted once (as
        # the head) in weight_bytes.
        del embedding.weight
        embedding.register_buffer("weight", tied_table.detach(), persistent=False)


def _column_major(w: torch.Tensor) -> torch.Tensor:
    """Same shape, transposed strides: `F.linear` then hands BLAS a plain [in, out] matrix."""
    return w.detach().t().contiguous().t()


def has_opaque_weights(model: nn.Module) -> bool:
    return any(isinstance(m, (PackedLinear, PairedLinear)) for m in model.modules())
