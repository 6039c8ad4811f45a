"""The report's "client vs server" section: the latency split as a table and a stacked
bar, and the server's gauges (KV cache, running, waiting) over the run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from llmperf.report.folder import RunFolder
from llmperf.report.plotting import MUTED, NoData, Plot, color, legend, new_figure, render, titled
from llmperf.report.units import milliseconds
from llmperf.serverside.decomposition import PERCENTILES
from llmperf.serverside.window import gauge_series

TIME_LABEL = "time since run start (s)"
PART_LABELS = {"queue_s": "server queue", "prefill_s": "server prefill", "decode_s": "server decode",
               "ttft_s": "server TTFT", "e2e_s": "server E2E"}
SPLITS = (("ttft", "TTFT"), ("e2e", "E2E"))
FRONTEND_COLOR = "#d1d5db"
TRANSPORT_COLOR = "#93c5fd"


@dataclass
class SplitRow:
    name: str  # TTFT, E2E
    stat: str  # mean, median, ...
    client_ms: str
    server_ms: str  # the server's parts (mean) or its own histogram's percentile
    overhead_ms: str
    overhead_pct: str


def _stat(summary: dict[str, Any], key: str, stat: str) -> float | None:
    value = summary.get(key)
    return value.get(stat) if isinstance(value, dict) else None


def split_rows(summary: dict[str, Any]) -> list[SplitRow]:
    rows = []
    for name, label in SPLITS:
        for stat in ("mean", *PERCENTILES):
            overhead = _stat(summary, f"{name}_overhead_s", stat)
            client = _stat(summary, f"{name}_s", stat)
            if overhead is None or client is None:
                continue
            server = client - overhead
            source = summary.get(f"{name}_server_parts", "") if stat == "mean" else f"server_{name}_s"
            rows.append(SplitRow(label, stat, milliseconds(client), f"{milliseconds(server)} ({source})",
                                 milliseconds(overhead), f"{100 * overhead / client:.1f}%" if client else "-"))
    return rows


def latency_split(run: RunFolder) -> Figure:
    """One stacked bar per split (TTFT, E2E): the server's parts, then the overhead (its
    frontend, the measured transport and what is left unexplained, as far as the figures
    go), against a tick at the client's mean. A negative part is drawn hatched, back from
    the end."""
    s = run.summary
    bars = [(name, label) for name, label in SPLITS if _stat(s, f"{name}_overhead_s", "mean") is not None]
    if not bars:
        raise NoData(s.get("server_note") or "no server-side view: the server's queue, prefill and decode times "
                     "were not scraped")
    fig, (ax,) = new_figure("Client vs server: where the mean latency went", height_in=2.6)
    titled(ax, "", "mean latency (ms)", "")
    colors = {part: color(i) for i, part in enumerate(PART_LABELS)}
    for y, (name, _) in enumerate(bars):
        left = 0.0
        for part in s[f"{name}_server_parts"].split("+"):
            value_ms = _stat(s, f"server_{part}", "mean") * 1e3
            ax.barh(y, value_ms, left=left, color=colors[part], label=PART_LABELS[part])
            left += value_ms
        frontend_s, network_s = s.get(f"{name}_frontend_s"), s.get(f"{name}_network_s")
        transport_s, unexplained_s = s.get(f"{name}_transport_s"), s.get(f"{name}_unexplained_s")
        overheads: list[tuple[float, str, str]] = []
        if frontend_s is not None:
            overheads.append((frontend_s * 1e3, FRONTEND_COLOR, "server frontend"))
        if transport_s is not None and unexplained_s is not None:  # the rest, measured and left over
            overheads += [(transport_s * 1e3, TRANSPORT_COLOR, "transport (measured)"),
                          (unexplained_s * 1e3, MUTED, "unexplained")]
        elif network_s is not None:
            overheads.append((network_s * 1e3, MUTED, "client/network"))
        else:
            overheads.append((_stat(s, f"{name}_overhead_s", "mean") * 1e3, MUTED, "client/network overhead"))
        for value_ms, shade, label in overheads:
            ax.barh(y, value_ms, left=left, color=shade, hatch="//" if value_ms < 0 else None, label=label)
            left += value_ms
        client_ms = _stat(s, f"{name}_s", "mean") * 1e3
        ax.plot([client_ms, client_ms], [y - 0.42, y + 0.42], color="black", lw=2, label="client mean")
    ax.set_yticks(range(len(bars)), [label for _, label in bars])
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))  # one entry per part, however many bars
    order = [*PART_LABELS.values(), "server frontend", "transport (measured)", "unexplained", "client/network",
             "client/network overhead", "client mean"]
    names = sorted(unique, key=order.index)
    ax.legend([unique[n] for n in names], names, fontsize=8.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


GAUGES = (("kv_cache_usage", "KV cache in use", "fraction", 1.0), ("running", "running requests", "requests", 1.0),
          ("waiting", "waiting requests", "requests", 1.0))


def server_gauges(run: RunFolder) -> Figure:
    series = gauge_series(run.server_rows or [])
    panels = [g for g in GAUGES if series.get(g[0])]
    if not panels:
        raise NoData("no server_metrics.csv, or it holds no gauge")
    fig, axes = new_figure("Server gauges over the run (scraped /metrics)", len(panels), 1,
                           height_in=1.9, sharex=True)
    start = run.summary.get("measure_start_s")
    for n, (ax, (figure, title, ylabel, _)) in enumerate(zip(axes, panels, strict=True)):
        titled(ax, title, TIME_LABEL if n == len(panels) - 1 else "", ylabel)
        t, v = zip(*series[figure], strict=True)
        ax.step(t, v, where="post", color=color(n), lw=1.4)
        if start:
            ax.axvspan(min(t[0], 0.0), start, color=MUTED, alpha=0.18, lw=0, label="warmup")
            legend(ax)
    return fig


CLIENT_SERVER_PLOTS = (
    ("latency_split", "Client vs server: latency split", latency_split),
    ("server_gauges", "Server gauges: KV cache, running, waiting", server_gauges),
)


def client_server_plots(run: RunFolder, folder: Path) -> list[Plot]:
    if not run.summary.get("server_family"):
        return []
    return [render(folder, name, title, lambda make=make: make(run)) for name, title, make in CLIENT_SERVER_PLOTS]
