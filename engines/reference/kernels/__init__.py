"""Triton kernels: attention (prefill, paged decode) and the int8 weight-only matmul.

On CUDA the kernels compile. On CPU they run under Triton's interpreter, which
Triton switches on when a kernel function is *defined*, i.e. when its module is
imported, if `TRITON_INTERPRET=1` is set then. So callers never import a kernel
module at the top of a file: they call `prepare_triton(device)` first and import
the kernel module inside the function that launches it.

The same holds for triton.language's own helpers (`tl.zeros`, `tl.max`,
`tl.sum`, `tl.cdiv`, ...), defined when `triton` is first imported, which torch
does by itself (torch._dynamo probes for triton). `prepare_triton` redefines
those helpers as interpreted ones when that happened before it ran. A process
then runs Triton interpreted only: compiled kernels and the interpreter do not
mix.
"""

from __future__ import annotations

import functools
import os
import sys

import torch

KERNEL_MODULES = (
    "engines.reference.kernels.prefill_attention",
    "engines.reference.kernels.decode_attention",
    "engines.reference.kernels.int8_matmul",
)


def interpreter_enabled() -> bool:
    return os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "on", "yes")


def prepare_triton(device: torch.device) -> None:
    """Make sure kernels launched for tensors on `device` can run.

    CPU tensors need the interpreter: set `TRITON_INTERPRET=1` unless the user
    set the variable, and refuse to go on if a kernel module was already
    imported without it (its kernels are compiled ones, which cannot read CPU
    memory).
    """
    if device.type != "cpu":
        return
    if not interpreter_enabled():
        if "TRITON_INTERPRET" in os.environ:
            raise RuntimeError(
                f"Triton kernels on CPU need TRITON_INTERPRET=1, but it is set to "
                f"{os.environ['TRITON_INTERPRET']!r}; unset it or set it to 1"
            )
        imported = [name for name in KERNEL_MODULES if name in sys.modules]
        if imported:
            raise RuntimeError(
                f"Triton kernels were imported compiled ({', '.join(imported)}) and cannot "
                "run on CPU tensors; set TRITON_INTERPRET=1 before the first kernel launch"
            )
        os.environ["TRITON_INTERPRET"] = "1"
    if "triton.language" in sys.modules:
        _interpret_language_helpers()


@functools.cache
def _interpret_language_helpers() -> None:
    """Swap triton.language's compiled `@jit` helpers for interpreted ones, in every
    module that holds them, keeping one object per helper: the interpreter spots
    fast reductions by identity (`combine_fn is tl.standard._elementwise_max`)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    interpreted: dict[int, InterpretedFunction] = {}
    modules = [m for name, m in list(sys.modules.items()) if name.startswith("triton.language")]
    for module in modules:
        for name, member in list(vars(module).items()):
            if isinstance(member, JITFunction):
                if id(member) not in interpreted:
                    interpreted[id(member)] = InterpretedFunction(member.fn)
                setattr(module, name, interpreted[id(member)])


def is_interpreted(kernel: object) -> bool:
    """Whether a `@triton.jit` function was defined under the interpreter."""
    return type(kernel).__name__ == "InterpretedFunction"


def runs_compiled(tensor: torch.Tensor, kernel: object) -> bool:
    """Whether `kernel` runs compiled on `tensor`'s device; raise if it cannot run there."""
    interpreted = is_interpreted(kernel)
    if tensor.device.type == "cpu" and not interpreted:
        raise RuntimeError(
            "Triton kernels were defined compiled and cannot run on CPU tensors; "
            "call engines.reference.kernels.prepare_triton(device) before importing them"
        )
    return tensor.device.type == "cuda" and not interpreted


def output_buffer(shape: tuple[int, ...], like: torch.Tensor, compiled: bool) -> torch.Tensor:
    """Where a kernel writes a result meant to have `like`'s dtype; `.to(like.dtype)` it after.

    The interpreter rounds fp32 to bf16 by truncation, a full ulp off where the
    GPU rounds to nearest, so interpreted bf16 kernels write fp32 and torch casts.
    """
    dtype = torch.float32 if like.dtype == torch.bfloat16 and not compiled else like.dtype
    return torch.empty(shape, dtype=dtype, device=like.device)


def dot_precision(dtype: torch.dtype) -> str:
    """`tl.dot` input precision: fp32 through TF32 only where torch's matmuls may do so too."""
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"
