"""The C++ CPU operators (`kernels/cpu/ops.cpp`: `paged_decode` for `attention=cpu`, and
`prefill.cpp`'s `causal_prefill` for its steps of fresh prompts;
`rms_norm`, `add_rms_norm`, `rotary` and `silu_mul` for `engine.fused_ops`; `decode_bf16.cpp`,
the decode kernel's bf16 path on AVX512_BF16; `gemm_bf16.cpp`'s bf16 Linears for
`engine.cpu_bf16_matmul=kernel`), built on first
use with torch's extension builder and loaded into the process as `torch.ops.llmperf.*`.

The build needs a C++ compiler and ninja (`pip install ninja` brings the latter). It
compiles for this CPU (`-march=native`: AVX-512 registers where the CPU has them), so the
build folder is keyed by the sources, torch's version and the CPU's flags: a home folder
shared between machines never loads a build made for another CPU. The sources are copied
into that folder and built from there, so checkouts of the same code at other paths share
the build. The first build takes 40-55 s on two cores; later processes load it in well under
a second.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from pathlib import Path

import torch

from engines.reference.cpu_info import cpu_flags
from llmperf.paths import cache_dir

SOURCES = [Path(__file__).with_name("cpu") / name for name in ("ops.cpp", "prefill.cpp", "decode_bf16.cpp", "gemm_bf16.cpp")]
HEADERS = [Path(__file__).with_name("cpu") / "vec.h"]
MARCH_ENV = "LLMPERF_CPU_MARCH"  # -march for the build; native unless set (tests build x86-64-v3: no AVX-512)


class KernelBuildError(ImportError):
    """The C++ kernel could not be built or loaded (no compiler, no ninja, a compile error); an
    ImportError, so a run reports it as the engine not being available here, in one line."""


@functools.cache
def cpu_ops():
    """`torch.ops.llmperf` with the operators built or loaded, and the seconds that took."""
    from torch.utils.cpp_extension import load

    name = f"llmperf_cpu_ops_{_build_key()}"
    build_dir = cache_dir() / "kernels" / name
    build_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        load(name, copied_sources(build_dir), extra_cflags=cflags(), extra_ldflags=["-fopenmp"],
             build_directory=str(build_dir), is_python_module=False, verbose=False)
    except Exception as exc:  # a missing compiler or ninja surfaces as several exception types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise KernelBuildError(
            f"the C++ CPU operators (attention=cpu, engine.fused_ops) could not be built ({first}); "
            "they need a C++ compiler and ninja (pip install ninja)"
        ) from exc
    return torch.ops.llmperf, time.perf_counter() - start


def copied_sources(build_dir: Path) -> list[str]:
    """The sources (and the header they include) copied into the build folder, to be built
    from there. The build then does not depend on where the checkout lies: checkouts of the
    same code (the gate's base and head worktrees) share one build. Built from their own
    paths, each rebuilt the other's every time (ninja sees other files), 55 s a run in the
    gate's A/B step. A copy is rewritten only when its bytes differ (atomically), so its time
    stays and ninja finds nothing to do."""
    folder = build_dir / "src"
    folder.mkdir(parents=True, exist_ok=True)
    for path in SOURCES + HEADERS:
        target, data = folder / path.name, path.read_bytes()
        if not target.exists() or target.read_bytes() != data:
            partial = folder / f".{path.name}.{os.getpid()}"
            partial.write_bytes(data)
            os.replace(partial, target)
    return [str(folder / source.name) for source in SOURCES]


def cflags() -> list[str]:
    march = os.environ.get(MARCH_ENV) or "native"
    return ["-O3", f"-march={march}", "-ffast-math", "-fopenmp"]  # -fopenmp: at::parallel_for's threads


def build_seconds() -> float | None:
    """Seconds this process spent building or loading the operators; None if it has not."""
    return cpu_ops()[1] if cpu_ops.cache_info().currsize else None


def _build_key() -> str:
    digest = hashlib.sha256()
    for path in SOURCES + HEADERS:
        digest.update(path.read_bytes())
    digest.update(torch.__version__.encode())
    digest.update(" ".join(cflags()).encode())
    digest.update(" ".join(sorted(cpu_flags() or [os.uname().machine])).encode())
    # Built from copies (copied_sources): a folder apart from those of code that builds the
    # same sources from their own paths, which would otherwise rebuild it at every turn
    digest.update(b"from copies")
    return digest.hexdigest()[:16]


