"""The metric catalog: every figure a run reports, declared once.

A `Metric` is a figure's name (its key in summary.json, or `steps.*` for the counts of
steps.jsonl), the label tables show, its unit, which way is better, the definition the docs
print, and the function that computes it (or the group computation it comes out of). The
gate takes directions from here, the run report, the comparison page and the sweep page take
labels, units and directions, and the docs' metric tables are generated from it
(`python -m llmperf.report.metric_docs`).

`computed_by` names the function by its file ("llmperf/perf/cost.py:cost_summary") rather
than holding it: the figures come from every layer (the load's records, the roofline, the cost
model, telemetry, the run's stages) while the catalog sits in the measurement layer and is
read by the gate, which must not import them (and torch with them). `Metric.compute()`
imports the function on demand (the gate does, for the steps.jsonl figures beside the catalog);
a test resolves every one.

Latency figures are distributions: `ttft_s` is an object of statistics, and `ttft_s.p99`
names one of them; `metric("ttft_s.p99")` answers for it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from llmperf.measure.catalog_base import (  # noqa: F401  (the catalog's vocabulary, re-exported)
    COUNT_UNITS,
    DEFAULT_PERCENTILES,
    DIRECTIONS,
    HIGHER,
    LOWER,
    MEASURED_SUFFIX,
    MOMENTS_AFTER,
    MOMENTS_BEFORE,
    NEITHER,
    PHASES,
    STAT_KEYS,
    STAT_LABELS,
    UNITS,
    Metric,
    is_stat_key,
    percentile_key,
    stat_keys,
)
from llmperf.measure.catalog_load import load_figures
from llmperf.measure.catalog_model import model_figures

METRICS: dict[str, Metric] = {m.name: m for m in [*load_figures(), *model_figures()]}
DISTRIBUTIONS = tuple(m.name for m in METRICS.values() if m.distribution)
LATENCIES = tuple(m.name for m in METRICS.values() if m.distribution and m.group == "latency")


def find(name: str) -> Metric | None:
    """The metric of a name (`output_throughput_tps`, `ttft_s.p99`, `steps.count`), or None."""
    if name in METRICS:
        return METRICS[name]
    key, stat = split_statistic(name)
    parent = METRICS.get(key)
    if parent is not None and parent.distribution and stat is not None and is_stat_key(stat):
        return parent.statistic(stat)
    return None


def split_statistic(name: str) -> tuple[str, str | None]:
    """(distribution, statistic) of a name: `ttft_s.p99.9` -> ('ttft_s', 'p99.9'); a name
    that is no distribution's statistic -> (name, None). A statistic may hold a dot, so the
    distribution is the catalog name the name starts with."""
    for key in DISTRIBUTIONS:
        if name.startswith(key + "."):
            return key, name[len(key) + 1:]
    return name, None


class UnknownMetric(ValueError):
    """A name the catalog does not hold; the message suggests the closest one."""


def metric(name: str) -> Metric:
    """The metric of a name; UnknownMetric naming the closest known name."""
    found = find(name)
    if found is None:
        raise UnknownMetric(f"unknown metric {name!r}{did_you_mean(name)}")
    return found


def did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(name, list(scalar_names()), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def scalar_names() -> Iterator[str]:
    """Every name that holds one number: the scalars and each statistic of a distribution."""
    for m in METRICS.values():
        if m.distribution:
            yield from (f"{m.name}.{s}" for s in STAT_KEYS)
        else:
            yield m.name


def in_group(*groups: str) -> list[Metric]:
    return [m for m in METRICS.values() if m.group in groups]
