"""The plots of a sweep: figures against the offered load per group (strategy), latency
against throughput with the Pareto frontier, and cost per configuration."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from llmperf.measure.catalog import metric
from llmperf.report.plotting import MUTED, NoData, color, legend, new_figure, titled
from llmperf.report.sweep_table import (
    FIGURES,
    FRONTIERS,
    Sweep,
    job_label,
    numeric,
    pareto_front,
    short_key,
)
from llmperf.report.timeline import batching_timelines
from llmperf.report.units import SHOWN_SCALES, chart_title

# Units of common sweep keys, by the end of the key's last part.
KEY_UNITS = (("_rps", "req/s"), ("_tps", "tok/s"), ("_ms", "ms"), ("_s", "s"),
             ("concurrency", "requests in flight"), ("_tokens", "tokens"),
             ("batch_size", "sequences"), ("num_seqs", "sequences"))
FRONTIER_COLOR = "#111827"


def axis_label(name: str) -> str:
    """A figure's axis label with the unit its values are drawn in: 'TTFT p99 (ms)'."""
    return chart_title(metric(name))


def key_label(key: str) -> str:
    name = short_key(key)
    for suffix, unit in KEY_UNITS:
        if name.endswith(suffix):
            return f"{key} ({unit})"
    return f"{key} (as set)"


def _groups(sweep: Sweep) -> list[tuple[str, pd.DataFrame]]:
    table = sweep.table.assign(_group=sweep.groups)
    if sweep.x_key:
        table["_x"] = numeric(table[sweep.x_key])
    return [(g, part) for g, part in table.groupby("_group", sort=False)]


def _log_if_spread(ax: Axes, values: pd.Series) -> None:
    """A log y axis when the values span more than 30x: one slow strategy must not flatten
    the others into a line along the bottom."""
    known = values.dropna()
    if len(known) and known.min() > 0 and known.max() / known.min() > 30:
        ax.set_yscale("log")


def _against_x(ax: Axes, sweep: Sweep, column: str, scale: float, styles: dict[str, str]) -> None:
    drawn = []
    for i, (group, part) in enumerate(_groups(sweep)):
        for suffix, style in styles.items():
            ys = part[column.format(suffix)].astype(float) * scale
            drawn.append(ys)
            ax.plot(part["_x"], ys, ls=style, marker="o", ms=5, color=color(i),
                    label=f"{group}, {suffix}" if len(styles) > 1 else group)
    _log_if_spread(ax, pd.concat(drawn))


def load_curves(sweep: Sweep) -> Figure:
    if not sweep.x_key:
        raise NoData("no numeric override varies across the jobs (such as"
                     " scenario.arrival.rate_rps), so there is no load axis")
    x_label = key_label(sweep.x_key)
    fig, (tput, good, ttft, tpot) = new_figure(
        f"Throughput, goodput and latency against {short_key(sweep.x_key)}", 2, 2, height_in=3.3)
    titled(tput, "output throughput", x_label, axis_label("output_throughput_tps"))
    _against_x(tput, sweep, "output_throughput_tps", 1.0, {"": "-"})
    titled(good, "goodput: requests/s meeting every SLO", x_label, axis_label("goodput_rps"))
    _against_x(good, sweep, "goodput_rps", 1.0, {"": "-"})
    if short_key(sweep.x_key).endswith("_rps"):
        xs = numeric(sweep.table[sweep.x_key])
        line = np.array([xs.min(), xs.max()])
        good.plot(line, line, color=MUTED, ls=":", label="offered rate (every request good)")
    titled(ttft, "TTFT p50 and p99", x_label, axis_label("ttft_s"))
    _against_x(ttft, sweep, "ttft_{}_s", SHOWN_SCALES["s"], {"p50": ":", "p99": "-"})
    titled(tpot, "TPOT p50 and p99", x_label, axis_label("tpot_s"))
    _against_x(tpot, sweep, "tpot_{}_s", SHOWN_SCALES["s"], {"p50": ":", "p99": "-"})
    for ax in (tput, good, ttft, tpot):
        legend(ax, loc="best")
    return fig


def _frontier_panel(ax: Axes, sweep: Sweep, latency: str, title: str) -> None:
    titled(ax, title, axis_label("output_throughput_tps"), axis_label(FIGURES[latency]))
    for i, (group, part) in enumerate(_groups(sweep)):
        # Jobs lacking either figure (no TPOT when every request made one token) are not drawn.
        part = part.dropna(subset=["output_throughput_tps", latency])
        if part.empty:
            continue
        ax.plot(part["output_throughput_tps"], part[latency] * 1e3, marker="o", ms=6,
                color=color(i), lw=1.2, ls="-" if sweep.x_key else "none", label=group)
        if sweep.x_key:
            for _, row in part.iterrows():
                ax.annotate(f"{row[sweep.x_key]}", (row["output_throughput_tps"],
                            row[latency] * 1e3), textcoords="offset points", xytext=(4, 4),
                            fontsize=7.5, color=color(i))
    table = sweep.table
    if table[latency].isna().all():
        ax.text(0.5, 0.5, f"no job recorded {title}", transform=ax.transAxes, ha="center",
                va="center", color=MUTED)
        return
    stored = {lat: column for column, lat in FRONTIERS.items()}  # load_sweep's p99 fronts
    on_front = (table[stored[latency]] if latency in stored else
                pareto_front(table["output_throughput_tps"].tolist(), table[latency].tolist()))
    front = table[on_front]
    front = front.sort_values("output_throughput_tps")
    if len(front):
        ax.plot(front["output_throughput_tps"], front[latency] * 1e3, color=FRONTIER_COLOR,
                lw=1.3, ls="--", zorder=4, label="Pareto frontier")
        ax.scatter(front["output_throughput_tps"], front[latency] * 1e3, s=150,
                   facecolors="none", edgecolors=FRONTIER_COLOR, lw=1.4, zorder=4)
    _log_if_spread(ax, table[latency].astype(float))


def latency_throughput(sweep: Sweep) -> Figure:
    if sweep.table["output_throughput_tps"].isna().all():
        raise NoData("no job recorded output_throughput_tps")
    labelled = f", points labelled with {short_key(sweep.x_key)}" if sweep.x_key else ""
    fig, axes = new_figure(f"Latency against throughput: Pareto frontier circled{labelled}",
                           2, 2, height_in=3.4)
    for ax, (latency, title) in zip(axes, (("ttft_p50_s", "TTFT p50"), ("ttft_p99_s", "TTFT p99"),
                                           ("tpot_p50_s", "TPOT p50"), ("tpot_p99_s", "TPOT p99")),
                                    strict=True):
        _frontier_panel(ax, sweep, latency, title)
        legend(ax, loc="best")
    return fig


def cost(sweep: Sweep) -> Figure:
    table = sweep.table
    if table["usd_per_1m_tokens"].isna().all():
        raise NoData("no job's summary has usd_per_1m_tokens (set usd_per_hour in the"
                     " hardware profile to price a run)")
    labels = [job_label(sweep, row) for _, row in table.iterrows()]
    groups = sweep.groups
    palette = {g: color(i) for i, g in enumerate(dict.fromkeys(groups))}
    fig, (ax,) = new_figure("Cost per 1M tokens per configuration",
                            height_in=1.6 + 0.35 * len(table))
    titled(ax, "shorter is cheaper", axis_label("usd_per_1m_tokens"), "")
    y = np.arange(len(table))[::-1]
    kinds: list[Patch] = []
    for output in (False, True):
        column = "usd_per_1m_output_tokens" if output else "usd_per_1m_tokens"
        if output and table[column].isna().all():
            continue
        values = table[column].astype(float).fillna(0).to_numpy()
        alpha = 0.4 if output else 0.95
        bars = ax.barh(y + (-0.2 if output else 0.2), values, height=0.38,
                       color=[palette[g] for g in groups], alpha=alpha)
        ax.bar_label(bars, labels=[f"${v:.3g}" if v else "" for v in values], padding=3,
                     fontsize=7.5)
        # The bars' colours are the groups'; the legend tells the two kinds of bar apart.
        kinds.append(Patch(facecolor=MUTED if output else "#4b5563", alpha=alpha,
                           label="output tokens only" if output else "all tokens"))
    ax.set_yticks(y, labels)
    ax.set_ylabel("configuration (overrides)")
    ax.margins(x=0.12)
    if len(kinds) > 1:
        ax.legend(handles=kinds, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2,
                  fontsize=8.5, frameon=False)
    return fig


def prediction(sweep: Sweep) -> Figure:
    table = sweep.table
    pairs = (("ttft_median_s", "predicted_ttft_s", "TTFT (median)"),
             ("measured_decode_step_s", "predicted_decode_step_s", "Decode step (median)"))
    if table["predicted_decode_step_s"].isna().all():
        raise NoData("no job has roofline predictions (the reference engine's runs do)")
    fig, axes = new_figure("Roofline prediction against measurement (on the line: exact)", 1, 2,
                           height_in=3.6)
    for ax, (measured, predicted, title) in zip(axes, pairs, strict=True):
        xs, ys = table[measured].astype(float) * 1e3, table[predicted].astype(float) * 1e3
        for i, (group, part) in enumerate(_groups(sweep)):
            ax.scatter(part[measured].astype(float) * 1e3, part[predicted].astype(float) * 1e3,
                       color=color(i), s=28, label=group, zorder=3)
        known = pd.concat([xs, ys]).dropna()
        if len(known):
            lo, hi = known.min() * 0.8, known.max() * 1.25
            ax.plot([lo, hi], [lo, hi], color=FRONTIER_COLOR, lw=1, ls="--", label="prediction = measurement")
            if known.max() / known.min() > 10:  # spread over decades: log axes, else linear
                ax.set_xscale("log")
                ax.set_yscale("log")
        titled(ax, title, "measured (ms)", "predicted (ms)")
        legend(ax, loc="upper left")
    return fig


SWEEP_PLOTS = (
    ("sweep_load", "Throughput, goodput and latency against load", load_curves),
    ("sweep_pareto", "Latency against throughput, Pareto frontier", latency_throughput),
    ("sweep_cost", "Cost per 1M tokens per configuration", cost),
    ("sweep_prediction", "Roofline prediction against measurement", prediction),
    ("sweep_timelines", "Request timelines by batching strategy", batching_timelines),
)
