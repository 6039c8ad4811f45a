"""What an automatic sweep leaves beside its trial folders: search.json (the knee and every
trial), search.csv (the table), plots/sweep.png (latency and goodput against the offered
rate, the knee marked) and search.html, the comparison page."""

from __future__ import annotations

import csv
import html
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from llmperf.report.plotting import MUTED, NoData, color, legend, new_figure, render, titled
from llmperf.search.sweep import KEEP_UP, SweepTrial

COLUMNS = ("trial", "kind", "rate_rps", "offered_rps", "served_rps", "completion_rps",
           "keeps_up", "goodput_rps", "slo_attainment", "ttft_p50_s", "ttft_p99_s",
           "tpot_p50_s", "e2e_p50_s", "e2e_p99_s", "run_dir")
KNEE_COLOR = "#dc2626"


@dataclass
class SweepResult:
    knee_rps: float | None
    slo: dict[str, Any]  # the per-request SLO the trials' goodput counts
    trials: list[SweepTrial]
    stopped_because: str

    def headline(self) -> str:
        if self.knee_rps is None:
            return f"no knee found ({self.stopped_because})"
        return f"knee: {self.knee_rps:.4g} req/s ({self.stopped_because})"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": "sweep", "unit": "req/s", "knee_rps": self.knee_rps, "slo": self.slo,
                "keep_up_fraction": KEEP_UP, "num_trials": len(self.trials),
                "stopped_because": self.stopped_because,
                "trials": [{**asdict(t), "rate_rps": t.rate_rps} for t in self.trials]}


def write_sweep(folder: Path, result: SweepResult) -> Path:
    """Write every output; returns search.html's path."""
    (folder / "search.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    with (folder / "search.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for i, t in enumerate(result.trials, 1):
            row = {**asdict(t), "rate_rps": t.rate_rps, "trial": i, "run_dir": Path(t.run_dir).name}
            writer.writerow([row[c] for c in COLUMNS])
    plot = render(folder, "sweep", "Latency and goodput against the offered rate",
                  lambda: sweep_figure(result))
    page = folder / "search.html"
    page.write_text(_page(result, plot.file, plot.note), encoding="utf-8")
    return page


def _placed(result: SweepResult) -> list[SweepTrial]:
    return sorted((t for t in result.trials if t.rate_rps is not None), key=lambda t: t.rate_rps)


# (field, label, line style, colour index) of the latency panel
LATENCIES = (("ttft_p50_s", "TTFT p50", ":", 1), ("ttft_p99_s", "TTFT p99", "-", 1),
             ("e2e_p50_s", "E2E p50", ":", 3), ("e2e_p99_s", "E2E p99", "-", 3))


def sweep_figure(result: SweepResult) -> Figure:
    """Two panels against the offered rate: served and goodput, and latency. The synchronous
    and rate trials are the lines; the throughput trial (everything at once, no rate) is a
    star at the rate it served; the knee is a dashed line."""
    placed = _placed(result)
    line = [t for t in placed if t.kind != "throughput"]
    burst = [t for t in placed if t.kind == "throughput"]
    if not placed:
        raise NoData("no trial completed a request")
    fig, (rates, latency) = new_figure(f"Automatic sweep: {result.headline()}", 1, 2,
                                       height_in=3.8)
    xs = [t.rate_rps for t in line]
    titled(rates, "served and goodput", "offered rate (req/s)", "requests/s")
    rates.plot(xs, xs, ls=":", color=MUTED, label="offered (every request served)")
    rates.plot(xs, [t.served_rps or 0.0 for t in line], "-o", color=color(0), label="completed")
    rates.plot(xs, [t.goodput_rps or 0.0 for t in line], "-s", color=color(2),
               label="goodput (meets every per-request SLO)")
    for t in burst:
        rates.plot([t.rate_rps], [t.served_rps], "*", ms=13, color=color(0),
                   label="throughput trial (all at once)")
    titled(latency, "latency", "offered rate (req/s)", "latency (ms)")
    for name, label, style, i in LATENCIES:
        points = [(t.rate_rps, getattr(t, name) * 1e3) for t in line if getattr(t, name) is not None]
        if points:
            latency.plot(*zip(*points, strict=True), ls=style, marker="o", ms=4, color=color(i),
                         label=label)
        for t in burst:
            if getattr(t, name) is not None:
                latency.plot([t.rate_rps], [getattr(t, name) * 1e3], "*", ms=11, color=color(i))
    known = [y for drawn in latency.get_lines() for y in drawn.get_ydata() if y > 0]
    if known and max(known) / min(known) > 30:
        latency.set_yscale("log")
    if result.knee_rps is not None:
        for ax in (rates, latency):
            ax.axvline(result.knee_rps, color=KNEE_COLOR, ls="--", lw=1.4,
                       label=f"knee {result.knee_rps:.3g} req/s")
    for ax in (rates, latency):
        legend(ax, loc="best")
    return fig


def _page(result: SweepResult, plot_file: str | None, plot_note: str | None) -> str:
    rows = []
    for i, t in enumerate(result.trials, 1):
        link = f"{Path(t.run_dir).name}/report.html"
        keeps = "-" if t.kind != "rate" else ("yes" if t.keeps_up else "no")
        rows.append(
            f"<tr><td>{i}</td><td>{t.kind}</td><td>{_num(t.rate_rps)}</td>"
            f"<td>{_num(t.served_rps)}</td><td>{_num(t.completion_rps)}</td><td>{keeps}</td>"
            f"<td>{_num(t.goodput_rps)}</td><td>{_ms(t.ttft_p50_s)}</td><td>{_ms(t.ttft_p99_s)}</td>"
            f"<td>{_ms(t.e2e_p99_s)}</td><td><a href='{link}'>{html.escape(link)}</a></td></tr>"
        )
    slo = ", ".join(f"{k} = {v}" for k, v in result.slo.items() if v is not None) or "none set"
    figure = (f"<img src='{plot_file}' alt='latency and goodput against the offered rate'>"
              if plot_file else f"<p>{html.escape(plot_note or '')}</p>")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>llmperf automatic sweep</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ddd;padding:4px 8px;text-align:right}}
img{{max-width:100%}}</style></head><body>
<h1>{html.escape(result.headline())}</h1>
<p>A synchronous trial, a throughput trial, then rates between them ({len(result.trials)} trials).
The knee is where the completed rate stops following the offered rate: a rate is kept up with
when its requests complete at least {KEEP_UP:.0%} as fast as they are sent; the knee is the pace
the engine held at the first rate it fell behind on, between that rate and the last one it kept
up with. Per-request SLO for goodput: {html.escape(slo)}.</p>
{figure}
<table><tr><th>trial</th><th>kind</th><th>offered (req/s)</th><th>completed (req/s)</th>
<th>completion rate (req/s)</th><th>keeps up</th><th>goodput (req/s)</th><th>TTFT p50 (ms)</th>
<th>TTFT p99 (ms)</th><th>E2E p99 (ms)</th><th>run</th></tr>
{''.join(rows)}
</table></body></html>
"""


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.4g}"
