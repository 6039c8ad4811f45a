"""One OpenMP thread pool at a time: the caller's is released before an engine's loop thread starts.

torch's CPU ops run their parallel regions on OpenMP (libgomp in the x86 wheels), which
keeps a pool of worker threads for each thread that has opened a region. An engine builds
its model on the caller's thread (a pool appears there), then steps on its loop thread (a
second pool). With more OpenMP threads than cores, libgomp stops spinning between regions
(its throttled spin count), so every parallel op puts its team to sleep and wakes it through
the kernel. Measured on 2 cores: an elementwise multiply of 64 x 1536 fp32 takes 9 us on the
only pool's thread and 72-78 us on a second thread while the first one's pool lives.

`release_openmp_pool` asks the runtime to free the calling thread's pool (OpenMP 5.0's
`omp_pause_resource_all`, a soft pause); that thread's next parallel region builds a new one.
"""

from __future__ import annotations

import ctypes
import functools

OMP_PAUSE_SOFT = 1
RUNTIMES = ("libgomp", "libiomp", "libomp")


@functools.cache
def _runtime():
    """The OpenMP runtime torch loaded (from this process's memory map), or None."""
    import torch  # noqa: F401 - the runtime to find is the one torch loads

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        name = path.rsplit("/", 1)[-1]
        if name.startswith(RUNTIMES):
            try:
                lib = ctypes.CDLL(path)
                pause = lib.omp_pause_resource_all
            except (OSError, AttributeError):
                continue
            pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
            return pause
    return None


def release_openmp_pool() -> bool:
    """Free the calling thread's OpenMP pool; whether the runtime did."""
    pause = _runtime()
    return pause is not None and pause(OMP_PAUSE_SOFT) == 0
