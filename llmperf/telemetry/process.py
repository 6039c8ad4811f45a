"""The process sampler (psutil): what the benchmark process and its host use. Always on."""

from __future__ import annotations

import importlib
from typing import Any

from llmperf.telemetry.sample import SamplerUnavailable


class ProcessSampler:
    """rss_bytes, cpu_pct (100 = one core busy), sys_cpu_pct (all cores), sys_mem_used_bytes."""

    name = "process"

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid  # None: this process
        self.unavailable: dict[str, str] = {}
        self._process: Any = None
        self._psutil: Any = None

    def open(self) -> None:
        try:
            self._psutil = importlib.import_module("psutil")
        except ImportError as e:
            raise SamplerUnavailable(f"psutil is not installed: {e}") from e
        self._process = self._psutil.Process(self.pid)
        # psutil's CPU percentages are deltas since the previous call; the first
        # call only sets the reference point, so make it here rather than in a sample.
        self._process.cpu_percent(None)
        self._psutil.cpu_percent(None)

    def read(self) -> dict[str, float]:
        return {
            "rss_bytes": float(self._process.memory_info().rss),
            "cpu_pct": float(self._process.cpu_percent(None)),
            "sys_cpu_pct": float(self._psutil.cpu_percent(None)),
            "sys_mem_used_bytes": float(self._psutil.virtual_memory().used),
        }

    def close(self) -> None:
        self._process = None
