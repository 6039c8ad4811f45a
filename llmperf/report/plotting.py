"""What every plot shares: an Agg figure (no pyplot, no global backend), one look, and a
record of the PNG written or of why there is none.

Figures are matplotlib.figure.Figure objects saved through FigureCanvasAgg, so making
plots needs no display and never touches pyplot's global state (a Hydra callback or a
thread can call it safely). A plot function returns its Figure, or raises NoData saying
what the run folder lacks; the report shows that sentence where the plot would be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PLOTS_DIR = "plots"
DPI = 110
WIDTH_IN = 10.0
PALETTE = ("#2563eb", "#ea580c", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#ca8a04",
           "#db2777", "#4b5563", "#65a30d")
MUTED = "#9ca3af"


class NoData(Exception):
    """The folder lacks what a plot needs; the message says what, for the reader."""


@dataclass
class Plot:
    """A plot of a report: its PNG (relative to the report) or the reason there is none."""

    title: str
    file: str | None = None
    note: str | None = None


def new_figure(title: str, nrows: int = 1, ncols: int = 1, height_in: float = 3.4,
               width_in: float = WIDTH_IN, **subplot_kw) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(width_in, 0.5 + height_in * nrows), dpi=DPI, layout="constrained")
    fig.suptitle(title, fontsize=12.5, fontweight="bold")
    axes = fig.subplots(nrows, ncols, squeeze=False, **subplot_kw)
    flat = [ax for row in axes for ax in row]
    for ax in flat:
        ax.grid(True, alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    return fig, flat


def titled(ax: Axes, title: str, xlabel: str, ylabel: str) -> Axes:
    ax.set_title(title, fontsize=10.5, fontweight="bold", loc="left")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return ax


def legend(ax: Axes, **kwargs) -> None:
    """A legend wherever more than one series carries a label."""
    _, labels = ax.get_legend_handles_labels()
    if len(labels) > 1:
        ax.legend(fontsize=8.5, framealpha=0.85, **kwargs)


def log_x_if_spread(ax: Axes, spread: float = 30.0) -> None:
    """A log x axis when the data drawn span more than `spread` times: a slow run must not
    squeeze the others against the y axis."""
    xs = [x for line in ax.get_lines() for x in line.get_xdata() if x > 0]
    if xs and max(xs) / min(xs) > spread:
        ax.set_xscale("log")


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def render(folder: Path, name: str, title: str, make: Callable[[], Figure]) -> Plot:
    """Make a plot and write it as folder/plots/<name>.png, or record why it cannot be made."""
    try:
        fig = make()
    except NoData as why:
        return Plot(title, note=str(why))
    out = folder / PLOTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig).print_png(out / f"{name}.png")
    return Plot(title, file=f"{PLOTS_DIR}/{name}.png")


def clear_plots(folder: Path) -> None:
    """Remove the PNGs an earlier build wrote, so a rebuilt report shows no stale plot."""
    for png in (folder / PLOTS_DIR).glob("*.png"):
        png.unlink()
