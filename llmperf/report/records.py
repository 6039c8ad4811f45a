"""Per-request figures and time series from requests.jsonl, for plots (and for a run cut
short before it wrote summary.json).

Records are the plain dicts of requests.jsonl; times are seconds from the run's start.
Each figure of a record is the harness's own (llmperf/measure/metrics.py), applied to the
record read back as a RequestRecord, so a plot and the summary cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from llmperf.measure import metrics
from llmperf.measure.metrics import compute_metrics
from llmperf.measure.records import RequestRecord
from llmperf.workload.scenario import SloConfig

NICE_BIN_WIDTHS_S = (0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0)


def is_ok(record: dict[str, Any]) -> bool:
    return RequestRecord.from_dict(record).ok


def measured(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if not r.get("warmup")]


def completed(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The measured requests that finished without error: the ones latencies describe."""
    return [r for r in measured(records) if is_ok(r)]


def ttft_s(record: dict[str, Any]) -> float | None:
    return metrics.ttft_s(RequestRecord.from_dict(record))


def e2e_s(record: dict[str, Any]) -> float:
    return metrics.e2e_s(RequestRecord.from_dict(record))


def tpot_s(record: dict[str, Any]) -> float | None:
    return metrics.tpot_s(RequestRecord.from_dict(record))


def itl_s(records: Iterable[dict[str, Any]]) -> list[float]:
    return [float(g) for r in records for g in metrics.itl_s(RequestRecord.from_dict(r))]


def ttfts_s(records: Iterable[dict[str, Any]]) -> list[float]:
    return [t for r in records if (t := ttft_s(r)) is not None]


def tpots_s(records: Iterable[dict[str, Any]]) -> list[float]:
    return [t for r in records if (t := tpot_s(r)) is not None]


def summary_from_records(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The summary figures a run's records give, for a run that died before writing
    summary.json: the harness's own metrics, without SLO figures (the targets are unknown)."""
    figures = compute_metrics([RequestRecord.from_dict(r) for r in records], SloConfig(None, None, None))
    for key in ("slo", "num_slo_met", "goodput_rps", "slo_attainment"):
        figures.pop(key)
    return figures


def bin_width_s(span_s: float, target_bins: int = 60) -> float:
    """The smallest round bin width that cuts `span_s` into at most `target_bins` bins."""
    for width in NICE_BIN_WIDTHS_S:
        if span_s / width <= target_bins:
            return width
    return NICE_BIN_WIDTHS_S[-1] * math.ceil(span_s / target_bins / NICE_BIN_WIDTHS_S[-1])


def output_rate(records: Sequence[dict[str, Any]], width_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Output tokens/s in bins of `width_s` from 0: (bin start times, rates).

    A token event of an HTTP engine may carry several tokens: each event of a record
    counts output_tokens / events, so the bins sum to the output tokens.
    """
    times, weights = [], []
    for r in records:
        events = r.get("token_times_s") or []
        if events and is_ok(r):
            times.extend(events)
            weights.extend([r.get("output_tokens", len(events)) / len(events)] * len(events))
    if not times:
        return np.array([]), np.array([])
    edges = np.arange(0.0, max(times) + width_s, width_s)
    counts, _ = np.histogram(times, bins=edges, weights=weights)
    return edges[:-1], counts / width_s


def in_flight(records: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Requests arrived and not yet ended, as a step function: (times, count from each time)."""
    events = sorted([(r["arrival_s"], 1) for r in records] + [(r["end_s"], -1) for r in records])
    if not events:
        return np.array([]), np.array([])
    times = np.array([t for t, _ in events])
    counts = np.cumsum([d for _, d in events])
    return times, counts
