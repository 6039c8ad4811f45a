"""`engine.attention=auto` and `engine.fused_ops=auto` (the defaults): the fastest measured
path for the device, resolved once when the engine is built; info() reports the path chosen
(`attention`, `fused_ops`) beside what was asked for (`attention_requested`,
`fused_ops_requested`) and why (`fast_path`).

Measured on a 2-core EPYC with AVX512_BF16 (docs/engine-vs-vllm.md, 64 sequences of 128 in
and 64 out, bf16): paged/sdpa 340 output tok/s, paged/cpu 394, paged/cpu + fused ops 439;
fp32 198, 226 and 244. So on CPU `auto` is the C++ decode kernel (`attention=cpu`) and the
fused C++ elementwise ops, wherever they can run: a head dim the kernel takes (a multiple of
16, up to 256), no `compile` for the fused ops (inductor cannot trace them), and a C++
compiler to build them; otherwise sdpa and torch's ops. On CUDA `auto` is sdpa with torch's
ops (the C++ ops are CPU-only; the Triton backend was not measured faster there).
Explicit values still select one path, for comparisons.
"""

from __future__ import annotations

from typing import Any

AUTO = "auto"
FUSED_CHOICES = (AUTO, "true", "false")
CPU_KERNEL_MAX_HEAD_DIM = 256  # kernels/cpu/ops.cpp: kLanes x kMaxChunks
CPU_KERNEL_HEAD_DIM_STEP = 16  # its vector width in floats


def normalize_fused(value: Any) -> str:
    """`fused_ops` as one of FUSED_CHOICES: a Python bool, or Hydra's `true` read into a str
    field ('True'), become 'true' / 'false'."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).lower()


def cpu_ops_available() -> str | None:
    """None when the C++ CPU operators build or load here, else why not (one line)."""
    from engines.reference.kernels.cpu_ops import KernelBuildError, cpu_ops

    try:
        cpu_ops()
    except KernelBuildError as exc:
        return str(exc)
    return None


def resolve_fast_path(
    attention: str, fused_ops: str, device_type: str, head_dim: int, compile: bool, ops_error=cpu_ops_available
) -> dict[str, Any]:
    """The options' attention backend and fused_ops as chosen: {attention, fused_ops (bool),
    attention_requested, fused_ops_requested, fast_path (why, for auto; None when explicit)}.
    `ops_error` says why the C++ ops cannot run here (None: they can); asked only on CPU
    when `auto` needs it."""
    fused = normalize_fused(fused_ops)
    reasons: list[str] = []
    chosen_attention, chosen_fused = attention, fused == "true"
    if device_type != "cpu":
        if attention == AUTO:
            chosen_attention = "sdpa"
            reasons.append(f"attention sdpa on {device_type}")
        if fused == AUTO:
            chosen_fused = False
            reasons.append(f"fused ops off on {device_type} (CPU only)")
    else:
        error = ops_error() if AUTO in (attention, fused) else None
        if attention == AUTO:
            kernel_takes = head_dim % CPU_KERNEL_HEAD_DIM_STEP == 0 and head_dim <= CPU_KERNEL_MAX_HEAD_DIM
            chosen_attention = "cpu" if kernel_takes and error is None else "sdpa"
            reasons.append(
                "attention cpu (the C++ decode kernel)" if chosen_attention == "cpu"
                else f"attention sdpa ({error or f'head dim {head_dim}: not a multiple of 16 up to 256'})"
            )
        if fused == AUTO:
            chosen_fused = error is None and not compile
            reasons.append(
                "fused ops on" if chosen_fused else f"fused ops off ({error or 'not with compile'})"
            )
    return {
        "attention": chosen_attention,
        "fused_ops": chosen_fused,
        "attention_requested": attention,
        "fused_ops_requested": fused,
        "fast_path": "auto: " + "; ".join(reasons) if reasons else None,
    }
