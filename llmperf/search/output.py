"""What a capacity search leaves beside its trial folders: search.json (the capacity and
every trial), search.csv (the table), plots/goodput.png and search.html."""

from __future__ import annotations

import csv
import html
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmperf.report.plotting import MUTED, NoData, color, legend, new_figure, render, titled
from llmperf.search.strategy import Trial

COLUMNS = ("trial", "value", "passed", "goodput_rps", "served_rps", "slo_attainment",
           "saturated", "misses", "run_dir")


@dataclass
class SearchResult:
    over: str  # rate | concurrency
    capacity: float | None  # the highest value that met the SLOs; None if none did
    slo: dict[str, Any]
    trials: list[Trial]
    stopped_because: str

    @property
    def unit(self) -> str:
        return "req/s" if self.over == "rate" else "requests in flight"

    def headline(self) -> str:
        if self.capacity is None:
            return f"no {self.over} tried met the SLOs ({self.stopped_because})"
        return f"capacity: {self.capacity:.4g} {self.unit} ({self.stopped_because})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "over": self.over,
            "unit": self.unit,
            "capacity": self.capacity,
            "slo": self.slo,
            "num_trials": len(self.trials),
            "stopped_because": self.stopped_because,
            "trials": [asdict(t) for t in self.trials],
        }


def write_search(folder: Path, result: SearchResult) -> Path:
    """Write every output; returns search.html's path."""
    (folder / "search.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    with (folder / "search.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for i, t in enumerate(result.trials, 1):
            writer.writerow([i, t.value, t.passed, t.goodput_rps, t.served_rps, t.slo_attainment,
                             t.saturated, "; ".join(t.misses), Path(t.run_dir).name])
    plot = render(folder, "goodput", "Goodput against offered load",
                  lambda: goodput_figure(result))
    page = folder / "search.html"
    page.write_text(_page(result, plot.file, plot.note), encoding="utf-8")
    return page


def goodput_figure(result: SearchResult):
    trials = sorted(result.trials, key=lambda t: t.value)
    if not trials:
        raise NoData("no trial ran")
    fig, (ax,) = new_figure(f"Capacity search: {result.headline()}")
    xs = [t.value for t in trials]
    ax.plot(xs, [t.goodput_rps or 0.0 for t in trials], "-o", color=color(0),
            label="goodput (req/s meeting every per-request SLO)")
    ax.plot(xs, [t.served_rps or 0.0 for t in trials], "--", color=MUTED,
            label="completed req/s")
    for t in trials:
        ax.plot([t.value], [t.goodput_rps or 0.0], "o", color=color(2) if t.passed else color(4),
                markersize=9, zorder=3)
    if result.capacity is not None:
        ax.axvline(result.capacity, color=color(2), linestyle=":",
                   label=f"capacity {result.capacity:.4g} {result.unit}")
    titled(ax, "green: met the SLOs, red: missed", f"offered {result.over} ({result.unit})",
           "requests/s")
    legend(ax)
    return fig


def _page(result: SearchResult, plot_file: str | None, plot_note: str | None) -> str:
    rows = []
    for i, t in enumerate(result.trials, 1):
        verdict = "met" if t.passed else "missed: " + "; ".join(t.misses)
        link = f"{Path(t.run_dir).name}/report.html"
        rows.append(
            f"<tr><td>{i}</td><td>{t.value:.4g}</td><td>{_num(t.goodput_rps)}</td>"
            f"<td>{_num(t.served_rps)}</td><td>{_pct(t.slo_attainment)}</td>"
            f"<td>{html.escape(verdict)}</td><td><a href='{link}'>{html.escape(link)}</a></td></tr>"
        )
    slo = ", ".join(f"{k} = {v}" for k, v in result.slo.items() if v is not None)
    figure = (f"<img src='{plot_file}' alt='goodput against offered load'>" if plot_file
              else f"<p>{html.escape(plot_note or '')}</p>")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>llmperf capacity search</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ddd;padding:4px 8px;text-align:right}}
img{{max-width:100%}}</style></head><body>
<h1>{html.escape(result.headline())}</h1>
<p>SLOs: {html.escape(slo)}. Searched over {result.over} in {len(result.trials)} trials.</p>
{figure}
<table><tr><th>trial</th><th>{result.over} ({result.unit})</th><th>goodput (req/s)</th>
<th>completed (req/s)</th><th>attainment</th><th>verdict</th><th>run</th></tr>
{''.join(rows)}
</table></body></html>
"""


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"
