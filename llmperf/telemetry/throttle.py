"""NVML clock-event (throttle) reason bits, and which of them mean the clocks were held down.

The bit values are NVML's ABI (nvmlClocksEventReason* / nvmlClocksThrottleReason*),
written out so that summaries can decode a bitmask without importing pynvml.
"""

from __future__ import annotations

CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}

# Idle, application clocks, sync boost and display settings lower clocks by choice,
# not because the device hit a power, thermal or board limit under load.
THROTTLING_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "board_limit",
    "reliability",
)

THROTTLING_MASK = sum(
    bit for bit, name in CLOCK_EVENT_REASONS.items() if name in THROTTLING_REASONS
)


def reason_names(mask: int) -> list[str]:
    """Names of the reasons set in `mask`, in bit order."""
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


def is_throttled(mask: int) -> bool:
    return bool(mask & THROTTLING_MASK)
