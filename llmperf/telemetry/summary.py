"""Turn a run's samples into flat summary.json keys and validity warnings."""

from __future__ import annotations

import bisect
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


def run_energy_j(
    samples: Sequence[Sample], start_s: float | None = None, end_s: float | None = None
) -> tuple[float | None, str | None]:
    """Energy over [start_s, end_s] (None: the samples' first or last time) and how it
    was measured.

    The window is the one the run's cost is charged for, so its edges rarely fall on
    a sample: the NVML energy counter is read at each edge by linear interpolation
    between samples (beyond the samples, at the nearest pair's rate); without it,
    power is integrated by trapezoids with the power at each edge interpolated (held
    beyond the samples). None: nothing measured power.
    """
    counter = _series(samples, "energy_j")
    if len(counter) >= 2:
        lo, hi = _edges(counter, start_s, end_s)
        return _counter_at(counter, hi) - _counter_at(counter, lo), "nvml_energy_counter"
    power = _series(samples, "power_w")
    if len(power) >= 2:
        lo, hi = _edges(power, start_s, end_s)
        if hi <= lo:
            return 0.0, "integrated_power"
        points = [
            (lo, _interpolate(power, lo)),
            *((t, w) for t, w in power if lo < t < hi),
            (hi, _interpolate(power, hi)),
        ]
        joules = sum(
            (t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:], strict=False)
        )
        return joules, "integrated_power"
    return None, None


def _edges(
    series: list[tuple[float, float]], start_s: float | None, end_s: float | None
) -> tuple[float, float]:
    return (series[0][0] if start_s is None else start_s, series[-1][0] if end_s is None else end_s)


def _interpolate(series: list[tuple[float, float]], t: float) -> float:
    """The value at t, linear between samples, held beyond them."""
    times = [time for time, _ in series]
    i = bisect.bisect_left(times, t)
    if i == 0:
        return series[0][1]
    if i == len(series):
        return series[-1][1]
    (t0, v0), (t1, v1) = series[i - 1], series[i]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def _counter_at(series: list[tuple[float, float]], t: float) -> float:
    """A cumulative counter at t: linear between samples, at the edge pair's rate beyond."""
    if series[0][0] <= t <= series[-1][0]:
        return _interpolate(series, t)
    (t0, v0), (t1, v1) = series[:2] if t < series[0][0] else series[-2:]
    rate = (v1 - v0) / (t1 - t0) if t1 > t0 else 0.0
    return v0 + rate * (t - t0) if t < series[0][0] else v1 + rate * (t - t1)


def summarize(
    samples: Sequence[Sample], start_s: float | None = None, end_s: float | None = None
) -> dict[str, Any]:
    """Flat keys for summary.json over samples with start_s <= timestamp_s <= end_s.

    The window lets a runner leave warmup out. Means are plain means over the
    samples that carry the column: samples are evenly spaced. Energy covers the
    window exactly (`run_energy_j`), samples beside it included.
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

    summary["energy_j"], summary["telemetry_energy_source"] = run_energy_j(samples, start_s, end_s)

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
