"""What the gate can measure: metric names, their directions, the `@job/job` syntax, tolerances.

A metric is written

    BASE[@SELECTOR[/SELECTOR]]

- BASE is a summary.json key (`output_throughput_tps`), a latency statistic addressed with a
  dot (`ttft_s.p99`) or a figure derived from steps.jsonl (`steps.padded_fraction`).
- `@SELECTOR` picks one job of a sweep: comma-separated `key=value` pairs that the job's
  Hydra overrides (or, failing that, its summary's engine/scenario/model/hardware objects)
  must all match: `output_throughput_tps@engine.batching=continuous`.
- `@A/B` is the ratio of BASE in job A to BASE in job B of the same sweep:
  `output_throughput_tps@engine.batching=continuous/engine.batching=static`. Both jobs run on
  the same machine minutes apart, so a machine-wide slowdown cancels out of the ratio.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass

from llmperf.gate.errors import GateError
from llmperf.measure.metrics import STAT_KEYS

HIGHER = "higher"
LOWER = "lower"

LATENCY_KEYS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s", "dispatch_lag_s")

SUMMARY_DIRECTIONS: dict[str, str] = {
    "request_throughput_rps": HIGHER,
    "output_throughput_tps": HIGHER,
    "total_throughput_tps": HIGHER,
    "goodput_rps": HIGHER,
    "slo_attainment": HIGHER,
    "num_completed": HIGHER,
    "mbu_decode": HIGHER,
    "mfu_prefill": HIGHER,
    "roofline_fraction": HIGHER,
    "num_failed": LOWER,
    "duration_s": LOWER,
    "usd_per_1m_tokens": LOWER,
}


def _tokens(step: dict) -> int:
    return step["num_prefill_tokens"] + step["num_decode_tokens"]


def _steps_count(steps: list[dict]) -> float:
    return float(len(steps))


def _tokens_per_step(steps: list[dict]) -> float:
    return sum(_tokens(s) for s in steps) / len(steps)


def _seqs_per_step(steps: list[dict]) -> float:
    return sum(s["num_seqs"] for s in steps) / len(steps)


def _padded_fraction(steps: list[dict]) -> float:
    """Padded slots over all slots computed: the share of compute static batching wastes."""
    padded = sum(s.get("padded_tokens", 0) for s in steps)
    computed = padded + sum(_tokens(s) for s in steps)
    return padded / computed if computed else 0.0


def _preemptions(steps: list[dict]) -> float:
    return float(sum(s.get("preemptions", 0) for s in steps))


def _kv_blocks_peak(steps: list[dict]) -> float:
    return float(max(s.get("kv_blocks_used", 0) for s in steps))


def _decode_p10(steps: list[dict], key: str) -> float:
    values = sorted(s[key] for s in steps if s.get("kind") == "decode")
    if not values:
        raise KeyError("a decode step")
    at = 0.1 * (len(values) - 1)
    low = int(at)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (at - low)


def _decode_step_p10_s(steps: list[dict]) -> float:
    """10th percentile of the pure decode steps' durations: the engine's speed when nothing
    else ran on its cores. On a shared machine most steps are stretched now and then by a
    neighbour; the fastest tenth are not, and a uniform slowdown moves them all the same."""
    return _decode_p10(steps, "duration_s")


def _decode_cpu_p10_s(steps: list[dict]) -> float:
    """10th percentile of the CPU time (all the process's threads) of the pure decode steps:
    what the step cost, less of what the neighbours took from it while it waited."""
    if any(s.get("cpu_s") is None for s in steps):
        raise KeyError("cpu_s")
    return _decode_p10(steps, "cpu_s")


# Figures from steps.jsonl (measured window). All but the decode_*_p10_s times count work, not time, so a
# busy machine does not move them.
STEP_METRICS: dict[str, tuple[str, Callable[[list[dict]], float]]] = {
    "steps.count": (LOWER, _steps_count),
    "steps.tokens_per_step": (HIGHER, _tokens_per_step),
    "steps.seqs_per_step": (HIGHER, _seqs_per_step),
    "steps.padded_fraction": (LOWER, _padded_fraction),
    "steps.preemptions": (LOWER, _preemptions),
    "steps.kv_blocks_peak": (LOWER, _kv_blocks_peak),
    "steps.decode_step_p10_s": (LOWER, _decode_step_p10_s),  # times: they move with the machine
    "steps.decode_cpu_p10_s": (LOWER, _decode_cpu_p10_s),
}


def direction_of(base: str) -> str:
    """HIGHER or LOWER (is better) for a base metric name; GateError naming the valid ones."""
    if base in SUMMARY_DIRECTIONS:
        return SUMMARY_DIRECTIONS[base]
    if base in STEP_METRICS:
        return STEP_METRICS[base][0]
    key, _, stat = base.partition(".")
    if key in LATENCY_KEYS and stat in STAT_KEYS:
        return LOWER
    raise GateError(f"unknown metric {base!r}{_did_you_mean(base)}; valid: {valid_names()}")


def valid_names() -> str:
    latencies = f"{{{','.join(LATENCY_KEYS)}}}.{{{','.join(STAT_KEYS)}}}"
    steps = ", ".join(STEP_METRICS)
    return (f"{', '.join(SUMMARY_DIRECTIONS)}, {latencies}, {steps}"
            " (add @key=value to pick a sweep job, @A/B for a ratio of two jobs)")


def _did_you_mean(base: str) -> str:
    names = [*SUMMARY_DIRECTIONS, *STEP_METRICS,
             *(f"{k}.{s}" for k in LATENCY_KEYS for s in STAT_KEYS)]
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
    base: str
    direction: str
    job: Selector | None = None
    over_job: Selector | None = None  # set for a ratio job / over_job

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
        job = parse_selector(job_text, name)
        over_job = parse_selector(over_text, name) if slash else None
        return cls(name, base, direction, job, over_job)


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
