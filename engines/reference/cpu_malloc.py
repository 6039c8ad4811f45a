"""glibc's allocator, set for a CPU engine's large temporaries.

A decode or prefill step on CPU allocates and frees tensors of megabytes every
layer: the K/V gathered out of the paged cache, the Linears' outputs, the
elementwise ops' results. glibc serves an allocation above its mmap threshold
with a fresh mmap, and gives freed memory at the top of its heap back to the
kernel once it passes its trim threshold; either way the next allocation of
that size touches new pages, and each 4 KiB page costs a page fault and a
zero-fill. Its dynamic threshold (raised to the largest block freed so far)
hides this only part of the time, so a step's time depends on how the heap
happened to be laid out: llama-107m fp32, a decode step of 64 sequences x 160
positions, two threads, three processes each side by side: 319-321 ms as glibc
starts, 158-164 ms tuned; a prefill step of 16 x 128 tokens 2,281-2,336 ms against
1,959-1,970 ms.

`tune_malloc` raises the mmap threshold to glibc's maximum (32 MiB on 64-bit) and
the trim threshold to 1 GiB, so freed blocks are reused without new page faults.
vLLM's CPU build does the same job by preloading tcmalloc. It is process-wide
and lasts for the life of the process; elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's ceiling for it on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD_BYTES = 1 << 30


@functools.cache
def tune_malloc() -> bool:
    """Set glibc's mmap and trim thresholds once per process; whether it took."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


def apply_cpu_malloc(choice: str) -> str:
    """Tune if `choice` says so; the setting in effect for this process (`tuned` once any
    engine in it has tuned: glibc's thresholds cannot be handed back), else `default`."""
    if choice == "tuned":
        tune_malloc()
    return "tuned" if tune_malloc.cache_info().currsize and tune_malloc() else "default"


def _glibc():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        getattr(libc, "gnu_get_libc_version")  # only glibc has it  # noqa: B009
    except (OSError, AttributeError):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc
