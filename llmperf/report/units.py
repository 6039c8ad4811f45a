"""Numbers as a reader wants them: a unit, a sensible scale and three significant figures.

A figure of the metric catalog is shown in the catalog's unit. Any other key (a telemetry
column's peak, a probed ceiling) takes its unit from its name (`_s`, `_bytes`, `_pct`, ...),
the project's convention, so a key added to summary.json later is formatted without a change
here.
"""

from __future__ import annotations

import math
from typing import Any

from llmperf.measure.catalog import COUNT_UNITS, Metric, find

MISSING = "–"
# How a column header or an axis names a catalog unit where the cells hold bare numbers:
# seconds are shown in ms, fractions in %, counts with no unit at all.
SHOWN_UNITS = {"s": "ms", "fraction": "%", "USD": "$", "USD/1M tok": "$/1M tok",
               **dict.fromkeys(COUNT_UNITS, "")}
SHOWN_SCALES = {"s": 1e3, "fraction": 100.0}


def significant(value: float, digits: int = 3) -> str:
    """`value` with `digits` significant figures, no exponent for everyday magnitudes."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if abs(value) < 1e-3:
        return f"{value:.{digits}g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def duration(seconds: float) -> str:
    """Seconds as µs, ms or s, whichever keeps the number between 1 and 1000."""
    magnitude = abs(seconds)
    if magnitude != 0 and magnitude < 1e-3:
        return f"{significant(seconds * 1e6)} µs"
    if magnitude < 1:
        return f"{significant(seconds * 1e3)} ms"
    return f"{significant(seconds)} s"


def milliseconds(seconds: float | None) -> str:
    return MISSING if seconds is None else significant(seconds * 1e3)


def bytes_(count: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(count) >= scale:
            return f"{significant(count / scale)} {unit}"
    return f"{count:.0f} B"


def si(value: float, unit: str) -> str:
    """A figure with an SI prefix: 2.1e8 FLOP -> '210 MFLOP'."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{significant(value / scale)} {prefix}{unit}"
    return f"{significant(value)} {unit}"


def rate(per_second: float, unit: str) -> str:
    """A per-second figure with an SI prefix: 3.35e12 B/s -> '3.35 TB/s'."""
    return si(per_second, f"{unit}/s")


def percent(fraction: float) -> str:
    return f"{significant(fraction * 100)} %"


def shown_unit(m: Metric) -> str:
    """The unit a header names for a column of `bare` numbers of this metric."""
    return SHOWN_UNITS.get(m.unit, m.unit)


def bare(m: Metric, value: float | None) -> str:
    """A figure without its unit, in the unit `shown_unit` names (ms, %)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return significant(value * SHOWN_SCALES.get(m.unit, 1.0))


def column_title(m: Metric) -> str:
    """'TTFT p99 ms', 'output throughput tok/s': a table header over bare numbers."""
    return f"{m.label} {shown_unit(m)}".rstrip()


def chart_title(m: Metric) -> str:
    """'TTFT p99 (ms)': a panel's or a table's title."""
    unit = shown_unit(m)
    title = m.label[0].upper() + m.label[1:]
    return f"{title} ({unit})" if unit else title


def in_unit(m: Metric, value: float) -> str:
    """A number of the metric with its catalog unit."""
    if m.unit == "fraction":
        return percent(value)
    if m.unit in ("USD", "USD/1M tok"):
        return f"${significant(value)}"
    if m.unit in ("B/s", "FLOP/s", "B", "FLOP"):
        return si(value, m.unit)
    if m.unit == "s":
        return duration(value)
    if m.unit in COUNT_UNITS:
        return f"{value:,}" if isinstance(value, int) else significant(value)
    return f"{significant(value)} {m.unit}"


def format_value(key: str, value: Any) -> str:
    """`value` of summary key `key` with its unit, e.g. ('output_throughput_tps', 322.7)."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or MISSING
    if not isinstance(value, (int, float)):
        return str(value)
    m = find(key)
    if m is not None:
        return in_unit(m, value)
    if key.startswith("usd_") or key.endswith("_usd"):
        return f"${significant(value)}"
    if key.endswith("_bytes_per_s"):
        return rate(value, "B")
    if key.endswith("_bytes"):
        return bytes_(value)
    if "flops" in key and key.endswith("_per_s"):
        return rate(value, "FLOP")
    suffixes = (("_tps", "tok/s"), ("_rps", "req/s"), ("_pct", "%"), ("_w", "W"), ("_j", "J"),
                ("_mhz", "MHz"), ("_c", "°C"))
    for suffix, unit in suffixes:
        if key.endswith(suffix):
            return f"{significant(value)} {unit}"
    if key.endswith("_s"):
        return duration(value)
    if isinstance(value, int):
        return f"{value:,}"
    return significant(value)
