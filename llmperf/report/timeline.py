"""The request timeline: one bar per measured request, from its intended arrival to its end.

Each bar is cut where the request changed state, all times on the records' clock:

    client queue   arrival_s to arrival_s + client_queue_s: held by the client's
                   concurrency cap (records without the field: none)
    engine queue   dispatch_s to admitted_s: sent, waiting for the engine to take it (only
                   where the engine says when it did: admitted_s)
    prefill        admitted_s (else dispatch_s) to first_token_s: up to the first token
    decode         first_token_s to end_s
    failed         dispatch_s to end_s of a request that ended in an error

Where steps.jsonl names the requests of each step (`request_ids`, the reference engine), a
dark strip inside each bar marks the steps the request took part in: read down a column,
the strips are the requests that shared that step; a gap in a strip is a step that ran
without the request (it waited, or, in a static batch, sat finished as padding). A panel
below gives each step's batch, coloured by its kind.

The batching sweep's page draws one timeline per strategy side by side
(`batching_timelines`), on one time axis, so static batches' lockstep and continuous
batching's staggered admissions are seen.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from llmperf.report import records as rec
from llmperf.report.errors import ReportError
from llmperf.report.folder import RunFolder, load_run_folder
from llmperf.report.plotting import DPI, WIDTH_IN, NoData, color, new_figure, titled
from llmperf.report.sweep_table import Sweep, numeric

MAX_BARS = 120  # more bars than this are unreadable: the first MAX_BARS by arrival are drawn
TIME_LABEL = "time since run start (s)"
REQUEST_LABEL = "request (id, by arrival)"
SEGMENTS = (  # name, colour, legend label
    ("client_queue", "#9ca3af", "client queue (concurrency cap)"),
    ("engine_queue", "#f59e0b", "engine queue"),
    ("prefill", "#2563eb", "prefill, to the first token"),
    ("decode", "#16a34a", "decode"),
    ("failed", "#dc2626", "failed"),
)
STEP_COLORS = {"prefill": color(0), "decode": color(2), "mixed": color(3)}
STRIP_COLOR = "#111827"
BATCHING_KEY = "engine.batching"


@dataclass
class Bar:
    """One request's row: its segments as (start_s, duration_s) per SEGMENTS name."""

    id: str
    segments: dict[str, tuple[float, float]] = field(default_factory=dict)
    steps: list[tuple[float, float]] = field(default_factory=list)  # the steps it was in


def _span(start_s: float | None, end_s: float | None) -> tuple[float, float] | None:
    if start_s is None or end_s is None or end_s <= start_s:
        return None
    return (start_s, end_s - start_s)


def request_bar(record: dict[str, Any]) -> Bar:
    """The segments of one requests.jsonl record (see the module's docstring)."""
    arrival, dispatch = record["arrival_s"], record["dispatch_s"]
    admitted, first, end = record.get("admitted_s"), record.get("first_token_s"), record["end_s"]
    queue_s = record.get("client_queue_s") or 0.0
    spans = {"client_queue": _span(arrival, arrival + queue_s)}
    if not rec.is_ok(record):
        spans["failed"] = _span(dispatch, end)
    else:
        spans["engine_queue"] = _span(dispatch, admitted)
        spans["prefill"] = _span(admitted if admitted is not None else dispatch, first)
        spans["decode"] = _span(first, end)
    return Bar(str(record["id"]), {k: v for k, v in spans.items() if v is not None})


def timeline_bars(run: RunFolder, limit: int = MAX_BARS) -> tuple[list[Bar], int]:
    """The first `limit` measured requests by arrival as bars, with the steps each was in;
    and how many measured requests there are in all."""
    measured = sorted(rec.measured(run.records), key=lambda r: (r["arrival_s"], str(r["id"])))
    if not measured:
        raise NoData("requests.jsonl is missing or holds no measured request")
    bars = [request_bar(r) for r in measured[:limit]]
    by_id = {bar.id: bar for bar in bars}
    for step in run.steps or ():
        for request_id in step.get("request_ids") or ():
            bar = by_id.get(str(request_id))
            if bar is not None:
                bar.steps.append((step["start_s"], step["duration_s"]))
    return bars, len(measured)


def draw_bars(ax: Axes, bars: list[Bar]) -> None:
    """Request 0 at the top; each segment kind drawn in one call per request."""
    for row, bar in enumerate(bars):
        y = -row
        for name, fill, _ in SEGMENTS:
            if name in bar.segments:
                ax.broken_barh([bar.segments[name]], (y - 0.4, 0.8), facecolors=fill, lw=0)
        if bar.steps:
            ax.broken_barh(bar.steps, (y - 0.12, 0.24), facecolors=STRIP_COLOR, lw=0, alpha=0.75)
    ax.set_ylim(-len(bars) + 0.4, 0.6)
    step = max(1, len(bars) // 12)
    ax.set_yticks([-i for i in range(0, len(bars), step)],
                  [bars[i].id for i in range(0, len(bars), step)], fontsize=7)


def segment_legend(ax: Axes, bars: list[Bar], **kwargs: Any) -> None:
    drawn = {name for bar in bars for name in bar.segments}
    handles = [Patch(facecolor=fill, label=label) for name, fill, label in SEGMENTS if name in drawn]
    if any(bar.steps for bar in bars):
        handles.append(Patch(facecolor=STRIP_COLOR, label="in an engine step"))
    ax.legend(handles=handles, fontsize=8, framealpha=0.85, **kwargs)


def _window(bars: list[Bar]) -> tuple[float, float]:
    spans = [s for bar in bars for s in bar.segments.values()]
    return min(s for s, _ in spans), max(s + d for s, d in spans)


def draw_steps(ax: Axes, steps: list[dict[str, Any]], window: tuple[float, float]) -> None:
    """Each step of the window as a bar as wide as the step and as tall as its batch."""
    lo, hi = window
    shown = [s for s in steps if s["start_s"] + s["duration_s"] >= lo and s["start_s"] <= hi]
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for s in shown:
        by_kind[s.get("kind", "decode")].append(s)
    for kind, group in by_kind.items():
        ax.bar([s["start_s"] for s in group], [s.get("num_seqs", 0) for s in group],
               width=[s["duration_s"] for s in group], align="edge", lw=0,
               color=STEP_COLORS.get(kind, color(8)), label=f"{kind} step")


def request_timeline(run: RunFolder) -> Figure:
    bars, total = timeline_bars(run)
    steps = run.steps or []
    shown = f"the first {len(bars)} of {total} requests" if total > len(bars) else f"{total} requests"
    rows = 2 if steps else 1
    fig = Figure(figsize=(WIDTH_IN, max(3.2, 1.4 + 0.055 * len(bars)) + 1.8 * (rows - 1)),
                 dpi=DPI, layout="constrained")
    fig.suptitle("Request timeline", fontsize=12.5, fontweight="bold")
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False,
                        height_ratios=[max(2.0, 0.055 * len(bars)), 1.6][:rows])[:, 0]
    top = axes[0]
    top.grid(True, axis="x", alpha=0.3)
    titled(top, f"one bar per request, {shown}, by arrival", "" if steps else TIME_LABEL, REQUEST_LABEL)
    draw_bars(top, bars)
    segment_legend(top, bars, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if steps:
        sharing = sum(1 for s in steps if s.get("request_ids"))
        bottom = axes[1]
        bottom.grid(True, alpha=0.3)
        note = "" if sharing else " (steps.jsonl does not name their requests)"
        titled(bottom, f"engine steps: sequences in each{note}", TIME_LABEL, "batch (sequences)")
        draw_steps(bottom, steps, _window(bars))
        bottom.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _batching_jobs(sweep: Sweep) -> list[tuple[str, str]]:
    """(strategy, job folder) per batching strategy, at the sweep's lowest load."""
    if BATCHING_KEY not in sweep.varying:
        raise NoData(f"the jobs do not vary {BATCHING_KEY}: no strategies to set side by side")
    table = sweep.table
    if sweep.x_key:
        xs = numeric(table[sweep.x_key])
        table = table[xs == xs.min()]
    picked: dict[str, str] = {}
    for _, row in table.iterrows():
        picked.setdefault(str(row[BATCHING_KEY]), str(row["job"]))
    return list(picked.items())


def batching_timelines(sweep: Sweep) -> Figure:
    """One request timeline per batching strategy, side by side on one time axis."""
    jobs = _batching_jobs(sweep)
    panels = []
    for strategy, job in jobs:
        try:
            bars, total = timeline_bars(load_run_folder(sweep.path / job), limit=60)
        except (ReportError, NoData) as why:
            raise NoData(f"{job}: {why}") from None
        panels.append((strategy, job, bars, total))
    at = f" at {sweep.x_key.rsplit('.', 1)[-1]}={sweep.table[sweep.x_key].iloc[0]}" if sweep.x_key else ""
    tallest = max(len(bars) for *_, bars, _ in panels)
    fig, axes = new_figure(f"Request timelines by batching strategy{at}", 1, len(panels),
                           height_in=max(2.8, 1.4 + 0.06 * tallest), sharex=True)
    for ax, (strategy, _, bars, total) in zip(axes, panels, strict=True):
        ax.grid(False, axis="y")
        lo, hi = _window(bars)
        shown = f"first {len(bars)} of {total}" if total > len(bars) else f"{total} requests"
        titled(ax, f"{strategy}: {shown}, done at {hi:.3g} s", TIME_LABEL, REQUEST_LABEL)
        draw_bars(ax, bars)
    segment_legend(axes[-1], [b for *_, bars, _ in panels for b in bars], loc="upper left",
                   bbox_to_anchor=(1.0, 1.0))
    return fig
