"""GPU Performance Monitoring (GPM, Hopper and newer): DRAM bandwidth, SM and tensor utilization.

GPM reports counters differenced between two samples taken with
nvmlGpmSampleGet. NVML wants them at least 100 ms apart, so the reader keeps
the previous sample and yields a reading only on reads at least that far from
it; at a 50 ms collector interval every other row carries GPM columns.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

# column -> pynvml constant name (looked up on the module, so an older pynvml just lacks one)
GPM_METRICS = {
    "dram_bw_util_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "sm_util_pct": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy_pct": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_util_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
}

MIN_PERIOD_S = 0.1
# The collector's ticks jitter by a few ms; without slack a 100 ms interval
# would miss the bound on half the ticks and yield a reading every 200 ms.
PERIOD_SLACK_S = 0.005


class GpmReader:
    """Reads GPM metrics for one device; build it only where nvmlGpmQueryDeviceSupport says so."""

    def __init__(self, nvml: Any, handle: Any, clock: Callable[[], float]) -> None:
        self._nvml = nvml
        self._handle = handle
        self._clock = clock
        self.unavailable: dict[str, str] = {}
        self._metric_ids: dict[str, int] = {}
        for column, constant in GPM_METRICS.items():
            if hasattr(nvml, constant):
                self._metric_ids[column] = getattr(nvml, constant)
            else:
                self.unavailable[column] = f"pynvml has no {constant}"
        self._previous = nvml.nvmlGpmSampleAlloc()
        self._current = nvml.nvmlGpmSampleAlloc()
        nvml.nvmlGpmSampleGet(handle, self._previous)
        self._previous_s = clock()

    def __call__(self) -> dict[str, float]:
        now_s = self._clock()
        if now_s - self._previous_s < MIN_PERIOD_S - PERIOD_SLACK_S or not self._metric_ids:
            return {}
        nvml = self._nvml
        nvml.nvmlGpmSampleGet(self._handle, self._current)
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self._metric_ids)
        request.sample1 = self._previous
        request.sample2 = self._current
        for slot, metric_id in enumerate(self._metric_ids.values()):
            request.metrics[slot].metricId = metric_id
        nvml.nvmlGpmMetricsGet(request)
        # The newest sample becomes the reference for the next reading.
        self._previous, self._current = self._current, self._previous
        self._previous_s = now_s

        values = {}
        for slot, column in enumerate(list(self._metric_ids)):
            metric = request.metrics[slot]
            if metric.nvmlReturn == nvml.NVML_SUCCESS and math.isfinite(metric.value):
                values[column] = float(metric.value)
            else:
                del self._metric_ids[column]
                self.unavailable[column] = f"nvmlGpmMetricsGet returned {metric.nvmlReturn}"
        return values

    def close(self) -> None:
        for sample in (self._previous, self._current):
            try:
                self._nvml.nvmlGpmSampleFree(sample)
            except Exception:  # freeing at shutdown must not mask the run's result
                pass
