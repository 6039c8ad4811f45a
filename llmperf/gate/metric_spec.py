"""The gate's metric specs and tolerances: which figure, from which job(s), how far it may move.

A metric is written

    BASE[@SELECTOR[/SELECTOR]]

- BASE is a figure of the metric catalog (llmperf/measure/catalog.py) with a better
  direction: a summary.json key (`output_throughput_tps`), a latency statistic addressed with
  a dot (`ttft_s.p99`) or a figure derived from steps.jsonl (`steps.padded_fraction`). Its
  direction comes from the catalog.
- `@SELECTOR` picks one job of a sweep: comma-separated `key=value` pairs that the job's
  Hydra overrides (or, failing that, its summary's engine/scenario/model/hardware objects)
  must all match: `output_throughput_tps@engine.batching=continuous`.
- `@A/B` is the ratio of BASE in job A to BASE in job B of the same sweep:
  `output_throughput_tps@engine.batching=continuous/engine.batching=static`. Both jobs run on
  the same machine minutes apart, so a machine-wide slowdown cancels out of the ratio.
- `stage=N` in a selector picks stage N (from 0) of a run with `scenario.stages`: the figure
  is that stage's (`ttft_s.p99@stage=2`, summary.json's `stages[2]`); with other keys it picks
  the job too (`ttft_s.p99@engine.batching=static,stage=1`), and `@stage=2/stage=0` is the
  ratio of two stages of one run.
- A percentile is named as `report.percentiles` names it: `median`, `p90`, `p99.9`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from llmperf.gate.errors import GateError
from llmperf.measure.catalog import (
    DISTRIBUTIONS,
    HIGHER,
    LATENCIES,
    METRICS,
    NEITHER,
    STAT_KEYS,
    Metric,
    find,
)


def gateable(m: Metric) -> bool:
    """A figure with a better way: the gate can tell a regression from an improvement."""
    return m.direction != NEITHER


def catalog_metric(base: str) -> Metric:
    """The catalog's metric for a base name the gate can judge; GateError naming the valid ones."""
    m = find(base)
    if m is None or m.distribution:
        raise GateError(f"unknown metric {base!r}{_did_you_mean(base)}; valid: {valid_names()}")
    if not gateable(m):
        raise GateError(f"metric {base!r} ({m.label}) has no better direction, so no regression"
                        f" to gate; valid: {valid_names()}")
    return m


def direction_of(base: str) -> str:
    """HIGHER or LOWER (is better) for a base metric name; GateError naming the valid ones."""
    return catalog_metric(base).direction


def _scalars() -> list[str]:
    return [m.name for m in METRICS.values()
            if gateable(m) and not m.distribution and m.source == "summary.json"]


def _steps() -> list[str]:
    return [m.name for m in METRICS.values() if gateable(m) and m.source == "steps.jsonl"]


def valid_names() -> str:
    stats = f"{{{','.join(STAT_KEYS)},p<q> of report.percentiles}}"
    others = [d for d in DISTRIBUTIONS if d not in LATENCIES]
    latencies = f"{{{','.join(LATENCIES)}}}.{stats}, {{{','.join(others)}}}.{stats}"
    return (f"{', '.join(_scalars())}, {latencies}, {', '.join(_steps())}"
            " (add @key=value to pick a sweep job, @stage=N a stage of scenario.stages, @A/B for"
            " a ratio of two jobs)")


def _did_you_mean(base: str) -> str:
    names = [*_scalars(), *_steps(), *(f"{k}.{s}" for k in DISTRIBUTIONS for s in STAT_KEYS)]
    close = difflib.get_close_matches(base, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


Selector = tuple[tuple[str, str], ...]


def parse_selector(text: str, metric: str) -> Selector:
    pairs = []
    for item in text.split(","):
        key, eq, value = item.partition("=")
        key = key.strip().lstrip("+")
        if not eq or not key or not value.strip():
            raise GateError(f"malformed job selector {text!r} in metric {metric!r};"
                            " write key=value[,key=value...], e.g. @engine.batching=static")
        pairs.append((key, value.strip()))
    return tuple(pairs)


@dataclass(frozen=True)
class MetricSpec:
    """A parsed metric name: which figure, from which job(s), and which way is better."""

    name: str  # as written, the key in the baseline file
    base: str  # the catalog's name of the figure
    direction: str
    job: Selector | None = None
    over_job: Selector | None = None  # set for a ratio job / over_job
    stage: int | None = None  # scenario.stages: the stage of the job (its `stage=N`)
    over_stage: int | None = None

    @classmethod
    def parse(cls, name: str) -> MetricSpec:
        name = name.strip()
        base, at, jobs = name.partition("@")
        direction = direction_of(base)
        if not at:
            return cls(name, base, direction)
        job_text, slash, over_text = jobs.partition("/")
        if "/" in over_text:
            raise GateError(f"metric {name!r} has more than one '/'; a ratio is BASE@A/B")
        job, stage = _stage_of(parse_selector(job_text, name), name)
        if not slash:
            return cls(name, base, direction, job, None, stage)
        over_job, over_stage = _stage_of(parse_selector(over_text, name), name)
        if over_job is None and over_stage is not None:
            over_job = job  # `@k=v,stage=2/stage=0`: two stages of the one job
        return cls(name, base, direction, job, over_job, stage, over_stage)

    @property
    def is_ratio(self) -> bool:
        return self.over_job is not None or self.over_stage is not None

    @property
    def unit(self) -> str:
        """The figure's unit from the catalog; a ratio of two jobs has none ("ratio")."""
        return "ratio" if self.is_ratio else catalog_metric(self.base).unit


def _stage_of(selector: Selector, metric: str) -> tuple[Selector | None, int | None]:
    """The selector without its `stage=N`, and N (None where it names no stage)."""
    stages = [v for k, v in selector if k == "stage"]
    rest = tuple((k, v) for k, v in selector if k != "stage")
    if not stages:
        return rest or None, None
    if len(stages) > 1 or not stages[0].isdigit():
        raise GateError(f"metric {metric!r}: stage={','.join(stages)} is not one stage index"
                        " (0, 1, ...) of scenario.stages")
    return rest or None, int(stages[0])


_TOLERANCE = re.compile(r"^([+-])?(\d+(?:\.\d*)?|\.\d+)(%)?$")


@dataclass(frozen=True)
class Tolerance:
    """How far a metric may move the bad way: a fraction of the baseline (relative) or units."""

    amount: float  # >= 0; 0.05 for 5% when relative
    relative: bool

    @classmethod
    def parse(cls, text: str, spec: MetricSpec) -> Tolerance:
        m = _TOLERANCE.match(text.strip())
        if not m:
            raise GateError(f"malformed tolerance {text!r} for {spec.name}; write e.g. -5% or 5%"
                            " (relative) or +0.02 (absolute, in the metric's units)")
        sign, number, pct = m.groups()
        bad_sign = "-" if spec.direction == HIGHER else "+"
        if sign and sign != bad_sign:
            way = "a drop" if spec.direction == HIGHER else "a rise"
            raise GateError(f"tolerance {text!r} for {spec.name} points the wrong way: "
                            f"{spec.direction} is better, so a regression is {way}; "
                            f"write {bad_sign}{number}{pct or ''}")
        amount = float(number) / 100 if pct else float(number)
        return cls(amount, bool(pct))

    def text(self, direction: str) -> str:
        """Signed the way a regression moves: -5% for throughput, +10% for latency."""
        sign = "-" if direction == HIGHER else "+"
        if self.relative:
            return f"{sign}{self.amount * 100:g}%"
        return f"{sign}{self.amount:g}"


DEFAULT_TOLERANCE = Tolerance(0.05, relative=True)


def parse_metric_arg(text: str) -> tuple[MetricSpec, Tolerance | None]:
    """`--metric NAME[:TOLERANCE]`; the tolerance follows the last colon."""
    name, colon, tol = text.rpartition(":")
    if not colon:
        return MetricSpec.parse(text), None
    spec = MetricSpec.parse(name)
    return spec, Tolerance.parse(tol, spec)
