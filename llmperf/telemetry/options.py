"""The telemetry options (`telemetry.*`)."""

from __future__ import annotations

from dataclasses import dataclass

from llmperf.errors import ConfigError
from llmperf.options import check_positive, option
from llmperf.telemetry.sources import SAMPLERS


@dataclass
class TelemetryConfig:
    enabled: bool = option(True, "sample the hardware and the process while the load runs")
    interval_s: float = option(0.1, "seconds between readings; GPM needs >= 0.1 s and skips shorter ones")
    source: str = option("auto", "auto (every device source that opens), nvml, torch_cuda or process")
    device_indices: list[int] | None = option(None, "CUDA indices as the process sees them; null: all")

    def __post_init__(self) -> None:
        check_positive(self, "interval_s", allow_none=False)
        SAMPLERS.check("source", self.source)
        if self.device_indices is not None and any(i < 0 for i in self.device_indices):
            raise ConfigError("device_indices", self.device_indices, "indices must be >= 0")
