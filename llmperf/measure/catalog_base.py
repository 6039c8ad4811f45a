"""The metric catalog's vocabulary: `Metric` (one figure, declared once), the units,
directions and statistics it may take, and where each family of figures is computed.

The entries themselves are in catalog_load.py (the figures of the load: latency, throughput,
counts, the client, the steady window, the server) and catalog_model.py (the figures of the
performance model and the machine: roofline, prediction, cost, telemetry, the steps and their
work); catalog.py gathers them and answers for a name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache

HIGHER = "higher"
LOWER = "lower"
NEITHER = "neither"  # a count, a setting, a prediction: no way is better
DIRECTIONS = (HIGHER, LOWER, NEITHER)

# Units, as tables print them. Counts are bare numbers; "fraction" (0..1) is shown as %.
UNITS = ("s", "tok/s", "req/s", "fraction", "%", "USD", "USD/1M tok", "J", "B/s", "FLOP/s", "B",
         "FLOP", "requests", "tokens", "sequences", "steps", "preemptions", "samples",
         "sessions", "blocks")
COUNT_UNITS = ("requests", "tokens", "sequences", "steps", "preemptions", "samples",
               "sessions", "blocks")

# A distribution's statistics: the mean, the percentiles of `report.percentiles` (50 is
# named "median"; any other q is "p" + q as written, so 99.9 is `p99.9`), std, min and max.
DEFAULT_PERCENTILES = (50.0, 90.0, 95.0, 99.0)
MOMENTS_BEFORE, MOMENTS_AFTER = ("mean",), ("std", "min", "max")
STAT_LABELS = {"median": "p50"}  # how a statistic reads after a figure's label


def percentile_key(q: float) -> str:
    """A percentile's statistic name: 50 -> 'median', 99 -> 'p99', 99.9 -> 'p99.9'."""
    return "median" if q == 50 else f"p{q:g}"


def stat_keys(percentiles: tuple[float, ...] | list[float] = DEFAULT_PERCENTILES) -> tuple[str, ...]:
    """The statistics a distribution holds with these percentiles, in the order shown."""
    ordered = sorted(set(float(q) for q in percentiles))
    return (*MOMENTS_BEFORE, *(percentile_key(q) for q in ordered), *MOMENTS_AFTER)


STAT_KEYS = stat_keys()


def is_stat_key(stat: str) -> bool:
    """A statistic's name a distribution can hold: a moment, 'median' or 'p' + a q in (0, 100)."""
    if stat in (*MOMENTS_BEFORE, *MOMENTS_AFTER, "median"):
        return True
    if not stat.startswith("p"):
        return False
    try:
        q = float(stat[1:])
    except ValueError:
        return False
    return 0 < q < 100 and percentile_key(q) == stat and q != 50
PHASES = ("prefill", "decode", "mixed")  # the roofline's step phases (llmperf/perf/roofline.py)
MEASURED_SUFFIX = "_measured"  # the same figure against the probe's measured peak

# What the figures come out of (file:function).
REQUEST_FIGURES = "llmperf/measure/metrics.py:compute_metrics"
ROOFLINE = "llmperf/perf/roofline.py:roofline_summary"
PREDICTION = "llmperf/perf/prediction.py:prediction_summary"
COST = "llmperf/perf/cost.py:cost_summary"
TELEMETRY = "llmperf/telemetry/summary.py:summarize"
SESSIONS = "llmperf/measure/metrics.py:session_metrics"
PREFIX_HITS = "llmperf/run/runner.py:add_prefix_cache_figures"
COLLECTOR = "llmperf/telemetry/collector.py:Collector.summarize"


@dataclass(frozen=True)
class Metric:
    name: str  # summary.json key; `steps.*` for a figure of steps.jsonl, `work.*` of both
    label: str  # a table's row or column title
    unit: str  # one of UNITS
    direction: str  # one of DIRECTIONS
    definition: str  # what the docs say it is
    computed_by: str  # "llmperf/path/module.py:function" (or ":Class.method")
    group: str  # the docs table and report section it belongs to
    distribution: bool = False  # an object of STAT_KEYS rather than one number
    family: str = ""  # metrics of one family share a docs row (the phases of MBU)

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"{self.name}: unit {self.unit!r}; valid: {', '.join(UNITS)}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"{self.name}: direction {self.direction!r}")

    @property
    def source(self) -> str:
        return {"steps": "steps.jsonl", "work": "steps.jsonl + summary.json"}.get(
            self.group, "summary.json")

    def statistic(self, stat: str) -> Metric:
        """One statistic of a distribution: `ttft_s` -> `ttft_s.p99`, labelled 'TTFT p99'."""
        return replace(self, name=f"{self.name}.{stat}", distribution=False,
                       label=f"{self.label} {STAT_LABELS.get(stat, stat)}")

    def compute(self) -> Callable:
        """The function that computes the figure (imported on demand)."""
        return _resolve(self.computed_by)


def _m(name: str, label: str, unit: str, direction: str, definition: str, computed_by: str,
       group: str, **kw) -> Metric:
    return Metric(name, label, unit, direction, definition, computed_by, group, **kw)


def _phases(prefix: str, label: str, unit: str, direction: str, definition: str,
            suffix: str = "") -> list[Metric]:
    return [_m(f"{prefix}{phase}{suffix}", f"{label} {phase}", unit, direction, definition,
               ROOFLINE, "roofline", family=f"{prefix}{{phase}}{suffix}") for phase in PHASES]



@cache
def _resolve(path: str) -> Callable:
    file, _, attribute = path.partition(":")
    found = importlib.import_module(file.removesuffix(".py").replace("/", "."))
    for name in attribute.split("."):  # a method: "Class.method"
        found = getattr(found, name)
    return found
