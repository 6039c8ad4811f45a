"""NVML clock-event (throttle) reason bits, and which of them mean the clocks were held down.

The bits are pynvml's named constants of the clocks-event API (nvmlClocksEventReason*,
the nine reasons NVML defines; the legacy nvmlDeviceGetCurrentClocksThrottleReasons
returns the same bits). pynvml is imported when a mask is first decoded, not with this
module: nothing touches a device library at import time.
"""

from __future__ import annotations

import functools

# reason name -> the pynvml constant of its bit
REASON_CONSTANTS: dict[str, str] = {
    "gpu_idle": "nvmlClocksEventReasonGpuIdle",
    "applications_clocks_setting": "nvmlClocksEventReasonApplicationsClocksSetting",
    "sw_power_cap": "nvmlClocksEventReasonSwPowerCap",
    "hw_slowdown": "nvmlClocksEventReasonHwSlowdown",
    "sync_boost": "nvmlClocksEventReasonSyncBoost",
    "sw_thermal_slowdown": "nvmlClocksEventReasonSwThermalSlowdown",
    "hw_thermal_slowdown": "nvmlClocksEventReasonHwThermalSlowdown",
    "hw_power_brake_slowdown": "nvmlClocksEventReasonHwPowerBrakeSlowdown",
    "display_clock_setting": "nvmlClocksEventReasonDisplayClockSetting",
}

# Idle, application clocks, sync boost and display settings lower clocks by choice,
# not because the device hit a power or thermal limit under load.
THROTTLING_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)


@functools.cache
def clock_event_reasons() -> dict[int, str]:
    """Bit -> reason name, in bit order, from pynvml's constants."""
    import pynvml

    bits = {getattr(pynvml, constant): name for name, constant in REASON_CONSTANTS.items()}
    return dict(sorted(bits.items()))


@functools.cache
def throttling_mask() -> int:
    return sum(bit for bit, name in clock_event_reasons().items() if name in THROTTLING_REASONS)


def reason_names(mask: int) -> list[str]:
    """Names of the reasons set in `mask`, in bit order; a bit NVML does not define is
    named by its value (`unknown_0x400`), never dropped."""
    known = clock_event_reasons()
    names = [name for bit, name in known.items() if mask & bit]
    unknown = mask & ~sum(known)
    bit = 1
    while bit <= unknown:
        if unknown & bit:
            names.append(f"unknown_{bit:#x}")
        bit <<= 1
    return names


def is_throttled(mask: int) -> bool:
    return bool(mask & throttling_mask())
