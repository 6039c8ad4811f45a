"""Numbers as a reader wants them: a unit, a sensible scale and three significant figures.

The unit comes from the key's name (`_s`, `_bytes`, `_tps`, `_pct`, ...), the project's
convention, so a key added to summary.json later is formatted without a change here.
"""

from __future__ import annotations

import math
from typing import Any

MISSING = "–"

# Shares in [0, 1] shown as percentages; matched on the start of the key.
FRACTION_PREFIXES = ("mbu_", "mfu_", "roofline_fraction", "roofline_step_fraction",
                     "slo_attainment", "cost_input_share", "telemetry_throttled_fraction",
                     "prediction_error_")


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


def rate(per_second: float, unit: str) -> str:
    """A per-second figure with an SI prefix: 3.35e12 B/s -> '3.35 TB/s'."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(per_second) >= scale:
            return f"{significant(per_second / scale)} {prefix}{unit}/s"
    return f"{significant(per_second)} {unit}/s"


def percent(fraction: float) -> str:
    return f"{significant(fraction * 100)} %"


def is_fraction(key: str) -> bool:
    return key.startswith(FRACTION_PREFIXES)


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
    if is_fraction(key):
        return percent(value)
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
