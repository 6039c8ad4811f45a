"""What the CPU can do, read from /proc/cpuinfo: a leaf module, so that the C++ operators'
build (kernels/cpu_ops.py) and the Linear layouts that use them (cpu_layout.py) both read it."""

from __future__ import annotations

from pathlib import Path


def cpu_flags() -> list[str] | None:
    """The CPU's feature flags (/proc/cpuinfo's x86 `flags` line); None where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return next((line.split(":", 1)[1].split() for line in text.splitlines()
                 if line.startswith("flags") and ":" in line), None)
