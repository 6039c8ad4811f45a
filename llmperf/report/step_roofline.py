"""The run report's per-step roofline: each step kind's time against its own bound.

From summary.json's roofline keys (llmperf/perf/roofline.py): for each phase (prefill,
decode, mixed) that had steps, their count and summed time, the sum of their lower bounds
max(bytes ÷ bandwidth, FLOPs ÷ FLOP/s), bound ÷ time, and the MBU and MFU of those steps.
Against the probed ceilings (the `_measured` keys) where the hardware profile has them,
else the datasheet's; the section says which. Beside it, the engine's path (the attention
backend and fused ops it ran, and why, for `auto`), from the summary's engine info.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmperf.perf.roofline import PHASES
from llmperf.report.units import MISSING, duration, percent


@dataclass
class StepRoofline:
    rows: list[dict[str, str]]
    peak: str  # "probed" or "datasheet"
    notes: list[str] = field(default_factory=list)


def step_roofline(summary: dict[str, Any]) -> StepRoofline | None:
    """The section's rows, or None when the run has no per-step figures (an HTTP engine's
    estimate, or a summary from before they existed)."""
    if summary.get("roofline_source") != "steps":
        return None
    measured = any(summary.get(f"roofline_step_fraction_{p}_measured") is not None for p in PHASES)
    suffix = "_measured" if measured else ""
    rows = []
    for phase in PHASES:
        count = summary.get(f"step_count_{phase}")
        if not count:
            continue
        time_s, bound_s = summary.get(f"step_time_{phase}_s"), summary.get(f"roofline_bound_{phase}_s{suffix}")
        rows.append({
            "phase": phase,
            "steps": f"{count:,}",
            "time": _shown(time_s, duration),
            "mean_step": _shown(time_s / count if time_s is not None else None, duration),
            "bound": _shown(bound_s, duration),
            "fraction": _shown(summary.get(f"roofline_step_fraction_{phase}{suffix}"), percent),
            "mbu": _shown(summary.get(f"mbu_{phase}{suffix}"), percent),
            "mfu": _shown(summary.get(f"mfu_{phase}{suffix}"), percent),
        })
    if not rows:
        return None
    return StepRoofline(rows, "probed" if measured else "datasheet", _path_notes(summary))


def _shown(value: float | None, fmt) -> str:
    return MISSING if value is None else fmt(value)


def _path_notes(summary: dict[str, Any]) -> list[str]:
    """'attention cpu, fused ops on (auto: ...)': the engine path the steps ran, where the
    engine reports one (the reference engine's info())."""
    engine = summary.get("engine") if isinstance(summary.get("engine"), dict) else {}
    if "attention" not in engine:
        return []
    fused = engine.get("fused_ops")
    parts = [f"attention {engine['attention']}"]
    if isinstance(fused, bool):
        parts.append(f"fused ops {'on' if fused else 'off'}")
    if engine.get("matmul_dtype"):
        parts.append(f"Linears in {engine['matmul_dtype']}")
    line = "Engine path: " + ", ".join(parts)
    return [f"{line} ({engine['fast_path']})" if engine.get("fast_path") else line]
