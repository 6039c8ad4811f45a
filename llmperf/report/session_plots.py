"""The plots of a multi-turn run: TTFT by turn index (a later turn carries a longer history,
so its prefill grows unless a prefix cache serves the history)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from llmperf.report import records as rec
from llmperf.report.folder import RunFolder
from llmperf.report.plotting import NoData, color, legend, new_figure, titled


def has_sessions(run: RunFolder) -> bool:
    return any(r.get("session_id") is not None for r in run.records)


def ttft_by_turn(run: RunFolder) -> Figure:
    done = [r for r in rec.completed(run.records) if r.get("session_id") is not None]
    if not done:
        raise NoData("no completed request of a multi-turn session in requests.jsonl")
    by_turn: dict[int, list[float]] = {}
    for r in done:
        by_turn.setdefault(int(r.get("turn") or 0), []).append(
            (r["first_token_s"] - r["arrival_s"]) * 1e3
        )
    turns = sorted(by_turn)
    fig, (ax,) = new_figure("TTFT by turn index")
    ax.boxplot([by_turn[t] for t in turns], positions=turns, widths=0.5, showfliers=True)
    for stat, q, i in (("median", 50, 0), ("p99", 99, 4)):
        ax.plot(turns, [np.percentile(by_turn[t], q) for t in turns], "-o", color=color(i),
                label=f"{stat}")
    titled(ax, f"{len(done)} turns of {len({r['session_id'] for r in done})} sessions",
           "turn index (0: first)", "TTFT (ms)")
    legend(ax)
    return fig


SESSION_PLOTS = (("ttft_by_turn", "TTFT by turn index", ttft_by_turn),)
