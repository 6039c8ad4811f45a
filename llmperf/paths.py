"""Where llmperf keeps what it measures or builds once per machine: the hardware probe's
results and the reference engine's compiled CPU operators."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$LLMPERF_CACHE_DIR`, else `~/.cache/llmperf`."""
    return Path(os.environ.get("LLMPERF_CACHE_DIR") or Path.home() / ".cache" / "llmperf")
