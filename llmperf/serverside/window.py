"""The server's figures over a run's measured window, from its scraped rows.

Histograms and counters are the difference between the scrape taken when the measured
phase began (on the load generator's thread, after the warmup's requests ended and before
the first measured one went out) and the last scrape (taken once every request had ended): what the server did for the
measured requests alone. Gauges are read at every scrape inside the window.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from statistics import fmean
from typing import Any

import numpy as np

from llmperf.serverside.families import FIGURES, GAUGE, HISTOGRAM
from llmperf.serverside.histogram import Histogram, stats
from llmperf.serverside.scraper import Row
from llmperf.serverside.spec_decode import spec_decode_figures

PERCENTILE_METHOD = "interpolated linearly inside histogram buckets (Prometheus histogram_quantile)"


def scrapes(rows: Sequence[Row]) -> list[tuple[float, dict[str, Any]]]:
    """Per scrape, in time order: figure -> value (counter, gauge) or Histogram."""
    by_time: dict[float, list[Row]] = defaultdict(list)
    for r in rows:
        by_time[r.t_s].append(r)
    return [(t, _values(by_time[t])) for t in sorted(by_time)]


def _values(rows: list[Row]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = defaultdict(lambda: {"buckets": [], "sum": 0.0, "count": 0.0})
    for r in rows:
        if r.field == "value":
            values[r.figure] = r.value
        elif r.field == "bucket":
            parts[r.figure]["buckets"].append((r.le, r.value))
        else:
            parts[r.figure][r.field] = r.value
    for figure, p in parts.items():
        values[figure] = Histogram.from_buckets(p["buckets"], p["sum"], p["count"])
    return values


def window_summary(rows: Sequence[Row], start_s: float, end_s: float,
                   opening_s: float | None = None) -> dict[str, Any]:
    """server_* keys for summary.json. Without a scrape at each end of the window (the
    server died, or stopped answering) only `server_view` says why. `opening_s`: the scrape
    taken between the warmup's end and the first measured request (MetricsScraper.scrape_now),
    the window's start when there is one; else the first scrape at or after `start_s`."""
    taken = scrapes(rows)
    after_start = [s for s in taken if s[0] == opening_s] or [s for s in taken if s[0] >= start_s]
    if not after_start or taken[-1][0] < end_s:
        last = f"{taken[-1][0]:.2f} s" if taken else "never"
        return {"server_view": f"incomplete: no scrape after the measured window ({start_s:.2f}-{end_s:.2f} s); "
                               f"last scrape at {last}"}
    (t0, first), (t1, last) = after_start[0], taken[-1]
    out: dict[str, Any] = {"server_view": "complete", "server_window_start_s": t0, "server_window_end_s": t1}
    for figure, (kind, _) in FIGURES.items():
        if figure not in last:
            continue
        if kind == HISTOGRAM:
            delta = last[figure].minus(first[figure]) if figure in first else last[figure]
            out[f"server_{figure}"] = stats(delta)
        elif kind == GAUGE:
            levels = [v[figure] for t, v in taken if start_s <= t <= end_s and figure in v]
            if levels:
                out[f"server_{figure}_mean"] = fmean(levels)
                out[f"server_{figure}_max"] = max(levels)
        else:
            before = first.get(figure, 0.0)
            out[f"server_{_counter_key(figure)}"] = last[figure] - (before if last[figure] >= before else 0.0)
    queries, hits = out.get("server_prefix_cache_queries_tokens"), out.get("server_prefix_cache_hits_tokens")
    if queries:
        out["server_prefix_cache_hit_rate"] = hits / queries
    out.update(spec_decode_figures(out))
    if any(isinstance(v, dict) for v in out.values()):
        out["server_percentiles"] = PERCENTILE_METHOD
    return out


def round_trip_summary(round_trips: Sequence[Row], start_s: float, end_s: float) -> dict[str, Any]:
    """`server_round_trip_s` over the timed probes inside the measured window: {count, mean,
    median, p90, p99}, from the probes themselves (no buckets)."""
    values = [r.value for r in round_trips if start_s <= r.t_s <= end_s]
    if not values:
        return {}
    median, p90, p99 = (float(v) for v in np.percentile(values, [50, 90, 99]))
    return {"server_round_trip_s": {"count": len(values), "mean": fmean(values), "median": median,
                                    "p90": p90, "p99": p99}}


def _counter_key(figure: str) -> str:
    """Units in the names: tokens counters say so."""
    return f"{figure}_tokens" if figure.startswith("prefix_cache_") else figure


def gauge_series(rows: Sequence[Row]) -> dict[str, list[tuple[float, float]]]:
    """figure -> [(t_s, value)] for each gauge, for the report's plot."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r.t_s):
        if r.field == "value" and FIGURES.get(r.figure, ("",))[0] == GAUGE:
            series[r.figure].append((r.t_s, r.value))
    return dict(series)
