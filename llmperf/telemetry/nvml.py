"""The NVML sampler (nvidia-ml-py): memory, utilization, power, energy, clocks, throttling, GPM.

pynvml is imported and initialized in `open()`, never at import time. The
module is a constructor argument so tests can script a fake NVML.

Each field group has readers in order of preference (e.g. instant power, then
the averaged power of nvmlDeviceGetPowerUsage). A reader is abandoned for the
next one when it fails for good (not supported, not in this driver, not
permitted) or MAX_STRIKES times in a row; until then a failure only leaves that
one reading empty. A group with no reader left is dropped for the rest of the
run, with its reason in `unavailable`, and the other groups go on.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

from llmperf.telemetry.devices import map_devices
from llmperf.telemetry.gpm import GpmReader
from llmperf.telemetry.sample import SamplerUnavailable, merge_devices
from llmperf.telemetry.throttle import is_throttled
from llmperf.telemetry.torch_cuda import cuda_device_uuids

Reader = Callable[[Any, Any], dict[str, float]]  # (nvml module, device handle) -> values


def _memory_v2(nvml: Any, handle: Any) -> dict[str, float]:
    # v2 reports driver-reserved memory apart, so `used` is what processes hold.
    info = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    return {"mem_used_bytes": float(info.used), "mem_total_bytes": float(info.total)}


def _memory_v1(nvml: Any, handle: Any) -> dict[str, float]:
    info = nvml.nvmlDeviceGetMemoryInfo(handle)
    return {"mem_used_bytes": float(info.used), "mem_total_bytes": float(info.total)}


def _utilization(nvml: Any, handle: Any) -> dict[str, float]:
    rates = nvml.nvmlDeviceGetUtilizationRates(handle)
    return {"gpu_util_pct": float(rates.gpu), "mem_util_pct": float(rates.memory)}


_FIELD_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _power_instant(nvml: Any, handle: Any) -> dict[str, float]:
    # On Hopper nvmlDeviceGetPowerUsage is a 1 s average; the field is instantaneous.
    value = nvml.nvmlDeviceGetFieldValues(handle, [nvml.NVML_FI_DEV_POWER_INSTANT])[0]
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        raise nvml.NVMLError(value.nvmlReturn)
    milliwatts = getattr(value.value, _FIELD_VALUE_MEMBERS[value.valueType])
    return {"power_w": milliwatts / 1000.0}


def _power_usage(nvml: Any, handle: Any) -> dict[str, float]:
    return {"power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0}


def _sm_clock(nvml: Any, handle: Any) -> dict[str, float]:
    return {"sm_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))}


def _mem_clock(nvml: Any, handle: Any) -> dict[str, float]:
    return {"mem_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM))}


def _temperature(nvml: Any, handle: Any) -> dict[str, float]:
    return {
        "temperature_c": float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    }


def _reasons(mask: int) -> dict[str, float]:
    return {"throttle_reasons": float(mask), "throttled": 1.0 if is_throttled(mask) else 0.0}


def _clock_events(nvml: Any, handle: Any) -> dict[str, float]:
    return _reasons(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))


def _throttle_reasons(nvml: Any, handle: Any) -> dict[str, float]:
    # The pre-r535 name of the same bitmask.
    return _reasons(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


FIELDS: dict[str, tuple[Reader, ...]] = {
    "memory": (_memory_v2, _memory_v1),
    "utilization": (_utilization,),
    "power": (_power_instant, _power_usage),
    "sm_clock": (_sm_clock,),
    "mem_clock": (_mem_clock,),
    "temperature": (_temperature,),
    "clock_events": (_clock_events, _throttle_reasons),
}


# Errors that asking again will not cure. Others (a timeout, a busy driver) get
# MAX_STRIKES consecutive tries before the reader is given up.
PERMANENT_ERRORS = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_NO_PERMISSION",
)
MAX_STRIKES = 3


def _is_permanent(nvml: Any, error: Exception) -> bool:
    if not isinstance(error, nvml.NVMLError):
        return True  # a Python-level failure (a struct or name this pynvml lacks) repeats
    permanent = {getattr(nvml, name, None) for name in PERMANENT_ERRORS}
    return getattr(error, "value", None) in permanent


def _describe(error: Exception) -> str:
    return str(error) or type(error).__name__


class _Device:
    """The fields still readable on one device, and why the others are gone."""

    def __init__(self, nvml: Any, handle: Any, clock: Callable[[], float]) -> None:
        self.nvml = nvml
        self.handle = handle
        self.unavailable: dict[str, str] = {}
        self.strikes: dict[str, int] = {}  # consecutive transient errors per field
        self.readers: dict[str, list[Callable[[], dict[str, float]]]] = {
            name: [lambda r=r: r(nvml, handle) for r in readers] for name, readers in FIELDS.items()
        }
        try:
            start_mj = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            self.readers["energy"] = [
                lambda: {
                    "energy_j": (nvml.nvmlDeviceGetTotalEnergyConsumption(handle) - start_mj)
                    / 1000.0
                }
            ]
        except Exception as e:  # any failure only means no energy column
            self.unavailable["energy"] = _describe(e)
        self.gpm: GpmReader | None = None
        try:
            if nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                self.gpm = GpmReader(nvml, handle, clock)
                self.readers["gpm"] = [self.gpm]
            else:
                self.unavailable["gpm"] = "GPM not supported on this device"
        except Exception as e:  # no GPM columns, nothing else lost
            self.unavailable["gpm"] = _describe(e)

    def read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for name, readers in list(self.readers.items()):
            while readers:
                try:
                    values.update(readers[0]())
                    self.strikes.pop(name, None)
                    break
                except Exception as e:  # degrade this field, keep the others
                    error = _describe(e)
                    strikes = self.strikes.get(name, 0) + 1
                    if not _is_permanent(self.nvml, e) and strikes < MAX_STRIKES:
                        self.strikes[name] = strikes  # no value this time; same reader next time
                        break
                    self.strikes.pop(name, None)
                    readers.pop(0)
            if not readers:
                del self.readers[name]
                self.unavailable[name] = error
        if self.gpm is not None:
            self.unavailable.update(self.gpm.unavailable)
        return values

    def close(self) -> None:
        if self.gpm is not None:
            self.gpm.close()


class NvmlSampler:
    """Per-device NVML readings; see FIELDS and gpm.GPM_METRICS for the columns."""

    name = "nvml"

    def __init__(
        self,
        device_indices: list[int] | None = None,
        nvml: Any = None,
        cuda_uuids: Callable[[], list[str] | None] = cuda_device_uuids,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.device_indices = device_indices
        self.unavailable: dict[str, str] = {}
        self._nvml = nvml  # None: the real pynvml, imported on open()
        self._cuda_uuids = cuda_uuids
        self._clock = clock
        self._devices: dict[int, _Device] = {}
        self._is_open = False

    def open(self) -> None:
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError as e:
                raise SamplerUnavailable(f"nvidia-ml-py is not installed: {e}") from e
        try:
            self._nvml.nvmlInit()
        except Exception as e:  # NVMLError or a missing shared library
            raise SamplerUnavailable(f"nvmlInit failed: {e}") from e
        self._is_open = True
        try:
            handles, missing = map_devices(self._nvml, self.device_indices, self._cuda_uuids())
            if not handles:
                raise SamplerUnavailable("NVML sees none of the CUDA devices in use")
            self.unavailable.update(missing)
            self._devices = {i: _Device(self._nvml, h, self._clock) for i, h in handles.items()}
        except (ValueError, SamplerUnavailable):
            self.close()
            raise
        except Exception as e:  # enumeration failing means no NVML telemetry
            self.close()
            raise SamplerUnavailable(f"NVML device enumeration failed: {_describe(e)}") from e
        self._gather_unavailable()

    def read(self) -> dict[str, float]:
        values = merge_devices({i: device.read() for i, device in self._devices.items()})
        self._gather_unavailable()
        return values

    def _gather_unavailable(self) -> None:
        prefix = len(self._devices) > 1
        for i, device in self._devices.items():
            for name, reason in device.unavailable.items():
                self.unavailable[f"gpu{i}_{name}" if prefix else name] = reason

    def close(self) -> None:
        if not self._is_open:
            return
        for device in self._devices.values():
            device.close()
        self._devices = {}
        self._is_open = False
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # shutdown errors change no measurement
            pass
