"""The reference engine's options (`engine=reference`): the engine, its KV cache and its
scheduler are all built from this one object."""

from __future__ import annotations

from dataclasses import dataclass

from engines.options import EngineConfig
from engines.reference.fast_path import FUSED_CHOICES, normalize_fused
from llmperf.errors import ConfigError
from llmperf.options import check_choice, check_positive, option

CPU_BF16_MATMULS = ("auto", "native", "fp32", "kernel")
CPU_MALLOCS = ("tuned", "default")
CPU_HUGE_PAGES = ("auto", "true", "false")


@dataclass
class ReferenceEngineConfig(EngineConfig):
    name: str = "reference"
    attention: str = option(
        "auto",
        "attention backend: auto (the fastest measured for the device: cpu on CPU where the kernel"
        " builds and takes the head dim, else sdpa; info() reports the one chosen), eager, sdpa,"
        " triton or cpu (decode through a C++ kernel reading the paged cache in place, built for"
        " this CPU on first use; prefill as sdpa)",
    )
    precision: str = option("fp32", "fp32, bf16, fp16, int8 or fp8 (weight-only quantized)")
    device: str = option("cpu", "torch device; with tp > 1 on CUDA, rank r runs on cuda:r")
    seed: int = option(0, "seeds the preset's random weights and sampling")
    batching: str = option("continuous", "sequential, static, dynamic, continuous or chunked")
    kv_cache: str = option("paged", "contiguous or paged")
    max_batch_size: int = option(8, "static and dynamic batching: requests per batch")
    max_wait_ms: float = option(20.0, "dynamic batching: how long a batch waits to fill")
    max_num_seqs: int = option(32, "continuous and chunked: sequences in flight")
    max_num_batched_tokens: int = option(512, "tokens per step (chunked prefill budget, continuous prefill steps)")
    num_kv_blocks: int | None = option(None, "KV cache blocks; null: room for max_num_seqs full sequences, within memory")
    kv_block_size: int = option(16, "tokens per KV cache block")
    enable_prefix_caching: bool = option(False, "paged: reuse the KV blocks of a shared prompt prefix")
    max_model_len: int | None = option(None, "context positions served; null: the model's, at most 4096")
    tp: int = option(1, "tensor-parallel ranks, one process each")
    cpu_bf16_matmul: str = option(
        "auto",
        "bf16 Linears on CPU: native (oneDNN's bf16 kernels), fp32 (bf16 weights widened to fp32"
        " per call in steps of 8+ rows), kernel (llmperf's vdpbf16ps kernel on AVX512_BF16,"
        " kernels/cpu/gemm_bf16.cpp: oneDNN's results but for 1 in 1,000 one bf16 unit apart,"
        " 1.2x faster at 64 rows), auto (kernel on AVX512_BF16 without AMX where the C++ ops"
        " build and not under compile, fp32 where the CPU has no bf16 arithmetic, else native);"
        " info() reports the one used",
    )
    cpu_malloc: str = option(
        "tuned",
        "CPU: tuned (glibc's mmap and trim thresholds raised, process-wide, so a step's large"
        " temporaries reuse freed memory instead of page-faulting in fresh pages) or default;"
        " info() reports the one in effect",
    )
    cpu_huge_pages: str = option(
        "auto",
        "CPU: the weights and the KV cache in transparent huge pages (madvise MADV_HUGEPAGE, the"
        " weights collapsed with MADV_COLLAPSE), true or false; auto: true where the kernel's THP"
        " mode is madvise or always; info() reports the one chosen and huge_page_bytes",
    )
    fused_ops: str = option(
        "auto",
        "true: on CPU, RMSNorm (with the residual add before it), RoPE and SiLU-and-mul as one C++"
        " op each (torch.ops.llmperf, built for this CPU on first use), not with compile; false:"
        " torch's ops; auto: true on CPU where they build and compile is off, else false (info()"
        " reports the one chosen)",
    )
    compile: bool = option(
        False, "torch.compile the model's forward (attention stays eager); compile time in info() as compile_s"
    )
    inject_slowdown: float = option(
        0.0, "test-only: each step busy-waits this fraction of its own time more (gate calibration)"
    )

    def __post_init__(self) -> None:
        check_positive(self, "max_batch_size", "max_num_seqs", "max_num_batched_tokens", "num_kv_blocks")
        check_positive(self, "kv_block_size", "max_model_len", "tp")
        check_positive(self, "max_wait_ms", "inject_slowdown", allow_none=False, strict=False)
        check_choice("cpu_bf16_matmul", self.cpu_bf16_matmul, CPU_BF16_MATMULS, "CPU bf16 matmul")
        check_choice("cpu_malloc", self.cpu_malloc, CPU_MALLOCS, "CPU allocator setting")
        self.cpu_huge_pages = normalize_fused(self.cpu_huge_pages)
        check_choice("cpu_huge_pages", self.cpu_huge_pages, CPU_HUGE_PAGES, "cpu_huge_pages setting")
        self.fused_ops = normalize_fused(self.fused_ops)
        check_choice("fused_ops", self.fused_ops, FUSED_CHOICES, "fused_ops setting")
        if self.fused_ops == "true" and self.device != "cpu":
            raise ConfigError("fused_ops", True, f"runs on CPU only, not device={self.device}")
        if self.fused_ops == "true" and self.compile:
            raise ConfigError("fused_ops", True, "does not combine with compile=true (inductor cannot trace the C++ ops)")
        if self.attention == "cpu" and self.device != "cpu":
            raise ConfigError("attention", "cpu", f"runs on CPU only, not device={self.device}; use sdpa or triton")
