"""The run report's "Steady window vs whole run" table and its rate line
(the figures: llmperf/measure/steady.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmperf.measure.catalog import metric
from llmperf.measure.run_files import number
from llmperf.report.units import MISSING, duration, format_value

# (the whole run's figure, the steady window's): each row of the table.
COMPARED = (
    *((f"{name}.{stat}", f"steady_{name}.{stat}") for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s")
      for stat in ("median", "p99")),
    *((name, f"steady_{name}") for name in ("request_throughput_rps", "output_throughput_tps",
                                            "total_throughput_tps", "goodput_rps")),
)


@dataclass
class SteadyRow:
    label: str
    whole: str
    steady: str


def _span(summary: dict[str, Any], start_key: str, end_key: str) -> str:
    start, end = number(summary, start_key), number(summary, end_key)
    if start is None or end is None:
        return MISSING
    return f"{duration(start)} to {duration(end)} ({duration(end - start)})"


def _requests(summary: dict[str, Any], completed: str, measured: str) -> str:
    done, sent = summary.get(completed), summary.get(measured)
    return MISSING if sent is None else f"{done if done is not None else MISSING} of {sent}"


def steady_rows(summary: dict[str, Any]) -> list[SteadyRow]:
    """The whole run's key figures beside the steady window's; none for a summary without them
    (a run from before them) or whose window has no figures (`steady_note` says why)."""
    if "steady_window_reason" not in summary or summary.get("steady_window_reason"):
        return []
    rows = [
        SteadyRow("window", _span(summary, "window_start_s", "window_end_s"),
                  _span(summary, "steady_window_start_s", "steady_window_end_s")),
        SteadyRow("requests completed", _requests(summary, "num_completed", "num_requests"),
                  _requests(summary, "steady_num_completed", "steady_num_requests")),
    ]
    for whole, steady in COMPARED:
        rows.append(SteadyRow(metric(whole).label, format_value(whole, number(summary, whole)),
                              format_value(steady, number(summary, steady))))
    return rows


def steady_note(summary: dict[str, Any]) -> str | None:
    """How the window was found, or why it has no figures; None for a summary without it."""
    if "steady_window_reason" not in summary:
        return None
    reason = summary.get("steady_window_reason")
    if reason:
        return f"No steady-window figures: {reason}."
    plateau = summary.get("steady_in_flight")
    return (f"The steady window runs from when the in-flight count first reached its plateau"
            f" ({plateau} requests) to the last dispatch; its figures cover the requests"
            " dispatched inside it, its throughputs its duration. The whole run's cover the"
            " measured window: the ramp-up and the tail after the last dispatch too.")


def rate_line(summary: dict[str, Any]) -> str | None:
    """'Offered 8 req/s against 10 req/s asked (−20.0 %)'; None where nothing was offered."""
    offered = number(summary, "offered_rate_rps")
    if offered is None:
        return None
    text = f"Offered {format_value('offered_rate_rps', offered)}"
    asked, error = number(summary, "asked_rate_rps"), number(summary, "offered_rate_error_pct")
    if asked is None or error is None:
        return text + " (measured dispatches − 1 ÷ their span); no single rate asked."
    text += f" against {format_value('asked_rate_rps', asked)} asked ({error:+.1f} %)"
    scheduled = number(summary, "scheduled_rate_rps")
    if scheduled is not None:
        text += f"; the schedule itself drew {format_value('scheduled_rate_rps', scheduled)}"
    return text + "."
