"""The telemetry section of a run's configuration."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from llmperf.telemetry.sources import validate_source


@dataclass
class TelemetryConfig:
    interval_s: float = 0.1  # GPM needs >= 0.1 s between its readings; shorter intervals skip them
    source: str = "auto"  # "auto" or a name in SAMPLERS
    device_indices: list[int] | None = None  # CUDA indices as the process sees them; None: all

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"telemetry interval_s must be > 0, got {self.interval_s}")
        validate_source(self.source)
        if self.device_indices is not None and any(i < 0 for i in self.device_indices):
            raise ValueError(f"telemetry device_indices must be >= 0, got {self.device_indices}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
