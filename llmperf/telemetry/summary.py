"""Turn a run's samples into flat summary.json keys and validity warnings."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import fmean
from typing import Any

from llmperf.telemetry.sample import Sample
from llmperf.telemetry.throttle import reason_names, throttling_mask


def _is_gauge(column: str) -> bool:
    """Peak and mean make sense for levels, not for a counter or a bitmask."""
    return not column.endswith(("energy_j", "throttle_reasons", "throttled"))


def columns_of(samples: Sequence[Sample]) -> list[str]:
    """Column names in order of first appearance."""
    seen: dict[str, None] = {}
    for sample in samples:
        seen.update(dict.fromkeys(sample.values))
    return list(seen)


def _series(samples: Sequence[Sample], column: str) -> list[tuple[float, float]]:
    return [
        (s.timestamp_s, s.values[column])
        for s in samples
        if column in s.values and math.isfinite(s.values[column])
    ]


def run_energy_j(samples: Sequence[Sample]) -> tuple[float | None, str | None]:
    """Energy over the samples' span and how it was measured.

    The NVML energy counter's delta when present, else the trapezoid integral of
    power over time, else None: nothing measured power.
    """
    counter = _series(samples, "energy_j")
    if len(counter) >= 2:
        return counter[-1][1] - counter[0][1], "nvml_energy_counter"
    power = _series(samples, "power_w")
    if len(power) >= 2:
        joules = sum(
            (t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(power, power[1:], strict=False)
        )
        return joules, "integrated_power"
    return None, None


def summarize(
    samples: Sequence[Sample], start_s: float | None = None, end_s: float | None = None
) -> dict[str, Any]:
    """Flat keys for summary.json over samples with start_s <= timestamp_s <= end_s.

    The window lets a runner leave warmup out. Means are plain means over the
    samples that carry the column: samples are evenly spaced.
    """
    window = [
        s
        for s in samples
        if (start_s is None or s.timestamp_s >= start_s)
        and (end_s is None or s.timestamp_s <= end_s)
    ]
    summary: dict[str, Any] = {"telemetry_num_samples": len(window)}
    for column in columns_of(window):
        if not _is_gauge(column):
            continue
        values = [v for _, v in _series(window, column)]
        if values:
            summary[f"telemetry_peak_{column}"] = max(values)
            summary[f"telemetry_mean_{column}"] = fmean(values)

    summary["energy_j"], summary["telemetry_energy_source"] = run_energy_j(window)

    masks = [int(v) for _, v in _series(window, "throttle_reasons")]
    if masks:
        throttled = [m for m in masks if m & throttling_mask()]
        seen = 0
        for mask in throttled:
            seen |= mask & throttling_mask()
        summary["throttled"] = bool(throttled)
        summary["throttle_reasons"] = reason_names(seen)
        summary["telemetry_throttled_fraction"] = len(throttled) / len(masks)
    else:
        summary["throttled"] = None  # nothing reported clock events: unknown, not "no"
        summary["throttle_reasons"] = []
        summary["telemetry_throttled_fraction"] = None
    return summary
