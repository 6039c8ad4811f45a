"""The plots of one run, each a function of the run folder that returns a Figure or raises
NoData. Times on x axes are seconds from the run's start (the records' clock)."""

from __future__ import annotations

import re

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmperf.hardware.profile import canonical_dtype
from llmperf.report import records as rec
from llmperf.report.folder import RunFolder
from llmperf.report.plotting import (
    MUTED,
    NoData,
    color,
    legend,
    log_x_if_spread,
    new_figure,
    titled,
)
from llmperf.report.timeline import request_timeline

TIME_LABEL = "time since run start (s)"
SLO_COLOR = "#dc2626"
PHASES = ("prefill", "decode", "mixed")


def _completed(run: RunFolder) -> list[dict]:
    if not run.records:
        raise NoData("requests.jsonl is missing or empty")
    done = rec.completed(run.records)
    if not done:
        raise NoData("no measured request completed")
    return done


def _measure_start_s(run: RunFolder) -> float | None:
    """End of warmup: the summary's, else the first measured arrival (None: no warmup)."""
    if not any(r.get("warmup") for r in run.records):
        return None
    start = run.summary.get("measure_start_s") or run.summary.get("window_start_s")
    if start is None:
        start = min((r["arrival_s"] for r in rec.measured(run.records)), default=None)
    return start


def _shade_warmup(ax: Axes, run: RunFolder) -> None:
    start = _measure_start_s(run)
    if start:
        ax.axvspan(0, start, color=MUTED, alpha=0.18, lw=0, label="warmup")


def _percentile_lines(ax: Axes, values_ms: np.ndarray, slo_ms: float | None) -> None:
    for q, style in ((50, ":"), (99, "--")):
        v = float(np.percentile(values_ms, q))
        ax.axvline(v, ls=style, color="#374151", lw=1.2, label=f"p{q} = {v:.3g} ms")
    if slo_ms and slo_ms <= 1.5 * values_ms.max():
        ax.axvline(slo_ms, color=SLO_COLOR, lw=1.5, label=f"SLO = {slo_ms:g} ms")
    elif slo_ms:  # far right of every request: named, not drawn, so the data keep the axis
        ax.plot([], [], color=SLO_COLOR, lw=1.5, label=f"SLO = {slo_ms:g} ms (off the axis)")


def latency_cdf(run: RunFolder) -> Figure:
    done = _completed(run)
    slo = run.summary.get("slo") or {}
    fig, axes = new_figure("Latency distributions (CDF)", 1, 2)
    series = (("TTFT", rec.ttfts_s(done), slo.get("ttft_s"), 0),
              ("TPOT", rec.tpots_s(done), slo.get("tpot_s"), 1))
    for ax, (name, values, target_s, i) in zip(axes, series, strict=True):
        titled(ax, f"{name} CDF", f"{name} (ms)", "requests at or below (%)")
        if not values:
            ax.text(0.5, 0.5, "no request with 2 or more output tokens", ha="center",
                    transform=ax.transAxes, color=MUTED)
            continue
        ms = np.sort(np.asarray(values)) * 1e3
        share = np.arange(1, len(ms) + 1) / len(ms) * 100
        ax.step(ms, share, where="post", color=color(i), lw=2, label=f"{name}, {len(ms)} requests")
        log_x_if_spread(ax)
        _percentile_lines(ax, ms, target_s * 1e3 if target_s else None)
        ax.set_ylim(0, 101)
        legend(ax, loc="lower right")
    return fig


def latency_over_time(run: RunFolder) -> Figure:
    if not run.records:
        raise NoData("requests.jsonl is missing or empty")
    fig, (ax,) = new_figure("Latency against arrival time", height_in=3.8)
    titled(ax, "each dot is one request", "intended arrival, " + TIME_LABEL, "latency (ms)")
    _shade_warmup(ax, run)
    ok = [r for r in run.records if rec.is_ok(r)]
    with_first = [r for r in ok if r.get("first_token_s") is not None]
    ax.scatter([r["arrival_s"] for r in ok], [rec.e2e_s(r) * 1e3 for r in ok], s=10,
               color=color(1), alpha=0.7, label="E2E")
    ax.scatter([r["arrival_s"] for r in with_first], [rec.ttft_s(r) * 1e3 for r in with_first],
               s=10, color=color(0), alpha=0.8, label="TTFT")
    failed = [r for r in run.records if not rec.is_ok(r)]
    if failed:
        ax.scatter([r["arrival_s"] for r in failed],
                   [max(rec.e2e_s(r), 1e-6) * 1e3 for r in failed],
                   marker="x", s=28, color=SLO_COLOR, label=f"failed ({len(failed)}), at E2E")
    ax.set_yscale("log")
    legend(ax, loc="upper left")
    return fig


def itl_histogram(run: RunFolder) -> Figure:
    gaps = rec.itl_s(_completed(run))
    if not gaps:
        raise NoData("no request received two or more token events")
    ms = np.asarray(gaps) * 1e3
    fig, (ax,) = new_figure("Inter-token latency (ITL)", height_in=3.2)
    titled(ax, f"{len(ms):,} gaps between token events, pooled over requests", "ITL (ms)",
           "gaps (count, log scale)")
    ax.hist(ms, bins=60, color=color(0), alpha=0.85, label="ITL")
    ax.set_yscale("log")
    _percentile_lines(ax, ms, None)
    legend(ax, loc="upper right")
    return fig


def throughput_over_time(run: RunFolder) -> Figure:
    if not run.records:
        raise NoData("requests.jsonl is missing or empty")
    end_s = max(r["end_s"] for r in run.records)
    width_s = rec.bin_width_s(end_s)
    starts, rates = rec.output_rate(run.records, width_s)
    if not len(starts):
        raise NoData("no request received a token")
    fig, (top, bottom) = new_figure("Throughput and load over time", 2, 1, height_in=2.7,
                                    sharex=True)
    titled(top, f"output tokens per second, {width_s:g} s bins", "", "output (tok/s)")
    _shade_warmup(top, run)
    top.stairs(rates, np.append(starts, starts[-1] + width_s), fill=True, color=color(0),
               alpha=0.75, label="output tok/s")
    mean = run.summary.get("output_throughput_tps")
    if mean:
        top.axhline(mean, color="#111827", ls="--", lw=1.2, label=f"run mean = {mean:.4g} tok/s")
    legend(top, loc="upper right")
    times, counts = rec.in_flight(run.records)
    titled(bottom, "requests arrived and not yet finished", TIME_LABEL, "in flight (requests)")
    _shade_warmup(bottom, run)
    bottom.step(times, counts, where="post", color=color(2), lw=1.5, label="in flight")
    legend(bottom, loc="upper right")
    return fig


def engine_steps(run: RunFolder) -> Figure:
    if run.steps is None:
        raise NoData("no steps.jsonl: this engine does not report its steps")
    if not run.steps:
        raise NoData("steps.jsonl holds no steps")
    steps = sorted(run.steps, key=lambda s: s["start_s"])
    t = np.array([s["start_s"] for s in steps])

    def column(name: str) -> np.ndarray:
        return np.array([s.get(name, 0) or 0 for s in steps], dtype=float)

    used, free = column("kv_blocks_used"), column("kv_blocks_free")
    has_kv = bool((used + free).any())
    fig, axes = new_figure("Engine steps", 3 if has_kv else 2, 1, height_in=2.3, sharex=True)
    batch, *middle, pre = axes
    titled(batch, f"{len(steps):,} steps", "", "batch (sequences)")
    batch.step(t, column("num_seqs"), where="post", color=color(0), lw=1.2, label="batch size")
    batch.step(t, column("num_waiting"), where="post", color=color(1), lw=1.2, label="waiting")
    legend(batch, loc="upper right")
    if has_kv:
        (kv,) = middle
        titled(kv, "paged KV cache", "", "KV cache (blocks)")
        kv.step(t, used, where="post", color=color(3), lw=1.2, label="used")
        kv.step(t, used + free, where="post", color=MUTED, ls="--", lw=1.2, label="capacity")
        legend(kv, loc="upper right")
    total = int(column("preemptions").sum())
    titled(pre, f"preemptions: {total} in all", TIME_LABEL, "preemptions (cumulative)")
    pre.step(t, np.cumsum(column("preemptions")), where="post", color=color(4), lw=1.5,
             label="preemptions")
    pre.set_ylim(0, max(1, total) * 1.1)
    return fig


# Telemetry columns grouped into panels by the unit their name ends with.
TELEMETRY_PANELS = (
    ("_bytes", "memory", "memory (GiB)", 2**-30),
    ("_pct", "utilization and bandwidth", "share of peak or time (%)", 1.0),
    ("_w", "power", "power (W)", 1.0),
    ("_mhz", "clocks", "clock (MHz)", 1.0),
    ("_c", "temperature", "temperature (°C)", 1.0),
)
PER_DEVICE = re.compile(r"^gpu\d+_")


def telemetry_columns(columns: list[str], suffix: str) -> list[str]:
    """Columns ending in `suffix`; per-device ones only where no all-device total exists."""
    names = [c for c in columns if c.endswith(suffix) and c != "timestamp_s"]
    return [c for c in names if not PER_DEVICE.match(c) or PER_DEVICE.sub("", c) not in names]


def telemetry(run: RunFolder) -> Figure:
    frame = run.telemetry
    if frame is None:
        raise NoData("no telemetry.csv: telemetry was off, or the run ended before it wrote")
    panels = []
    for suffix, title, ylabel, scale in TELEMETRY_PANELS:
        cols = [c for c in telemetry_columns(list(frame.columns), suffix)
                if frame[c].notna().any()]
        if cols:
            panels.append((title, ylabel, scale, cols))
    if not panels:
        raise NoData("telemetry.csv holds no plottable column")
    fig, axes = new_figure(f"Telemetry ({len(frame):,} samples)", len(panels), 1,
                           height_in=2.3, sharex=True)
    t = frame["timestamp_s"].to_numpy(dtype=float)
    throttled = frame["throttled"].fillna(0).to_numpy() > 0 if "throttled" in frame else None
    for n, (ax, (title, ylabel, scale, cols)) in enumerate(zip(axes, panels, strict=True)):
        titled(ax, title, TIME_LABEL if n == len(panels) - 1 else "", ylabel)
        for i, c in enumerate(cols):
            total = c.endswith("_total_bytes")
            ax.plot(t, frame[c].to_numpy(dtype=float) * scale, lw=1.3, marker=None,
                    ls="--" if total else "-", color=MUTED if total else color(i), label=c)
        if throttled is not None and throttled.any():
            ax.fill_between(t, 0, 1, where=throttled, transform=ax.get_xaxis_transform(),
                            color=SLO_COLOR, alpha=0.12, lw=0, label="throttled")
        # Always a legend: the column names say which memory, which utilization.
        ax.legend(fontsize=8.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _ceilings(summary: dict) -> list[tuple[str, float, float]]:
    """(name, bytes/s, FLOP/s) of the hardware's ceilings for the run's compute dtype."""
    hw = summary.get("hardware") if isinstance(summary.get("hardware"), dict) else {}
    # Engines report torch's dtype names ("bfloat16"); profiles key FLOP/s by "bf16".
    dtype = canonical_dtype(summary.get("roofline_compute_dtype"))
    found = []
    for name, bw_key, flops_key in (("datasheet", "peak_mem_bw_bytes_per_s", "peak_flops"),
                                    ("measured", "measured_mem_bw_bytes_per_s", "measured_flops")):
        bw, flops = hw.get(bw_key), (hw.get(flops_key) or {}).get(dtype)
        if bw and flops:
            found.append((name, float(bw), float(flops)))
    return found


def roofline_points(summary: dict) -> list[tuple[str, float, float]]:
    """(phase, arithmetic intensity in FLOP/byte, achieved FLOP/s) for each phase measured."""
    points = []
    for phase in PHASES:
        flops = summary.get(f"achieved_flops_{phase}_per_s")
        bw = summary.get(f"achieved_bw_{phase}_bytes_per_s")
        if flops and bw:
            points.append((phase, flops / bw, flops))
    return points


def _classic_roofline(ax: Axes, summary: dict, ceilings, points) -> None:
    intensities = [p[1] for p in points] + [f / b for _, b, f in ceilings]
    x = np.geomspace(min(intensities) / 8, max(intensities) * 8, 200)
    titled(ax, f"roofline, {summary.get('roofline_compute_dtype')}",
           "arithmetic intensity (FLOP/byte)", "performance (FLOP/s)")
    for i, (name, bw, flops) in enumerate(ceilings):
        ax.plot(x, np.minimum(flops, x * bw), color="#111827", ls=("-", "--")[i], lw=1.6,
                label=f"ceiling ({name}): {bw / 1e9:.4g} GB/s, {flops / 1e12:.4g} TFLOP/s")
    markers = {"prefill": "s", "decode": "o", "mixed": "D"}
    for i, (phase, intensity, flops) in enumerate(points):
        mbu, mfu = summary.get(f"mbu_{phase}"), summary.get(f"mfu_{phase}")
        share = f"MBU {mbu:.1%}, MFU {mfu:.1%}" if mbu is not None and mfu is not None else ""
        ax.scatter([intensity], [flops], s=70, marker=markers[phase], color=color(i), zorder=3,
                   label=f"{phase} {share}".strip())
    ax.set_xscale("log")
    ax.set_yscale("log")
    legend(ax, loc="lower right")


def _tokens_against_ceiling(ax: Axes, achieved: float, ceiling: float) -> None:
    titled(ax, f"achieved {achieved / ceiling:.1%} of the roofline", "",
           "output throughput (tok/s)")
    bars = ax.bar(["achieved", "roofline ceiling"], [achieved, ceiling],
                  color=[color(0), MUTED], width=0.55)
    ax.bar_label(bars, labels=[f"{achieved:.4g}", f"{ceiling:.4g}"], padding=2)


def roofline(run: RunFolder) -> Figure:
    summary = run.summary
    ceilings, points = _ceilings(summary), roofline_points(summary)
    achieved, ceiling = summary.get("output_throughput_tps"), summary.get("roofline_output_tps")
    classic = bool(ceilings and points)
    bars = bool(achieved and ceiling)
    if not (classic or bars):
        raise NoData("summary.json has no roofline figures (achieved_flops_*, peak ceilings"
                     " of the hardware profile, roofline_output_tps)")
    widths = [2.2, 1.0] if classic and bars else [1.0]
    fig, axes = new_figure("Roofline: achieved against ceiling", 1, len(widths), height_in=4.0,
                           gridspec_kw={"width_ratios": widths})
    if classic:
        _classic_roofline(axes[0], summary, ceilings, points)
    if bars:
        _tokens_against_ceiling(axes[-1], achieved, ceiling)
    return fig


RUN_PLOTS = (
    ("latency_cdf", "Latency distributions (CDF)", latency_cdf),
    ("latency_over_time", "Latency against arrival time", latency_over_time),
    ("itl_histogram", "Inter-token latency (ITL)", itl_histogram),
    ("throughput_over_time", "Throughput and load over time", throughput_over_time),
    ("request_timeline", "Request timeline: queue, prefill, decode", request_timeline),
    ("engine_steps", "Engine steps: batch, KV cache, preemptions", engine_steps),
    ("telemetry", "Telemetry: memory, bandwidth, power", telemetry),
    ("roofline", "Roofline: achieved against ceiling", roofline),
)
