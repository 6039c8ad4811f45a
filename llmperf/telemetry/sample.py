"""One telemetry reading, the protocol every source implements, and the per-device naming rule.

Column names carry their unit (`mem_used_bytes`, `power_w`, `sm_clock_mhz`, ...).
With one device the columns have plain names; with several, every device
column is prefixed `gpu{i}_` (i = the CUDA index this process sees) and the
plain name holds the sum over devices for quantities that add up (power,
energy, memory) and the union for throttling, so summaries and cost figures
read the same keys whatever the device count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

# Quantities whose total over devices means something (a mean utilization would not).
ADDITIVE_COLUMNS = (
    "power_w",
    "energy_j",
    "mem_used_bytes",
    "mem_total_bytes",
    "torch_allocated_bytes",
    "torch_reserved_bytes",
    "torch_peak_bytes",
)


@dataclass(frozen=True)
class Sample:
    """Values read at `timestamp_s`: perf_counter() seconds since the collector's t0 (run start)."""

    timestamp_s: float
    values: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"timestamp_s": self.timestamp_s, **self.values}


class SamplerUnavailable(RuntimeError):
    """The source is absent on this machine (no driver, no CUDA, no library)."""


class Sampler(Protocol):
    """A telemetry source. `open` runs once on the caller's thread; `read` on the collector's."""

    name: str
    # Columns (or field groups) dropped during the run, with the reason: a source
    # degrades field by field instead of failing as a whole.
    unavailable: dict[str, str]

    def open(self) -> None:
        """Acquire the source; raise SamplerUnavailable if it is not there."""

    def read(self) -> dict[str, float]:
        """The current values. Must be cheap: one call per field, no subprocess."""

    def close(self) -> None:
        """Release the source. Idempotent."""


def merge_devices(per_device: dict[int, dict[str, float]]) -> dict[str, float]:
    """Name the columns of several devices as the module docstring says."""
    if len(per_device) == 1:
        return dict(next(iter(per_device.values())))
    merged: dict[str, float] = {}
    for index, values in per_device.items():
        merged.update({f"gpu{index}_{name}": value for name, value in values.items()})
    readings = list(per_device.values())
    for name in ADDITIVE_COLUMNS:
        if all(name in values for values in readings):
            merged[name] = sum(values[name] for values in readings)
    if all("throttle_reasons" in values for values in readings):
        mask = 0
        for values in readings:
            mask |= int(values["throttle_reasons"])
        merged["throttle_reasons"] = float(mask)
    if all("throttled" in values for values in readings):
        merged["throttled"] = max(values["throttled"] for values in readings)
    return merged
